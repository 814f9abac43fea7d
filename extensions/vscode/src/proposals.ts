// Bookkeeping for the agent's proposed edits (tachy/review/propose) and the text a
// proposal would produce, for the diff view. No 'vscode' import: unit-tested alone.

import type { Proposal, ProposalState } from "./lsp_ext";

export interface TextEdit {
    range: { start: { line: number; character: number }; end: { line: number; character: number } };
    newText: string;
}

export const SETTLED: readonly ProposalState[] = ["applied", "rejected", "reverted", "failed", "cancelled"];
const KEEP_SETTLED = 200;

/** The offset in `text` of an LSP position (UTF-16 code units, as JavaScript strings
 * count; VS Code's client negotiates utf-16). Past the end of a line: the line's end. */
export function offsetAt(text: string, line: number, character: number): number {
    let start = 0;
    for (let current = 0; current < line; current++) {
        const next = nextLineStart(text, start);
        if (next < 0) {
            return text.length;
        }
        start = next;
    }
    let end = start;
    while (end < text.length && text[end] !== "\n" && text[end] !== "\r") {
        end++;
    }
    return Math.min(start + Math.max(0, character), end);
}

function nextLineStart(text: string, from: number): number {
    for (let i = from; i < text.length; i++) {
        if (text[i] === "\n") {
            return i + 1;
        }
        if (text[i] === "\r") {
            return text[i + 1] === "\n" ? i + 2 : i + 1;
        }
    }
    return -1;
}

/** `text` with LSP TextEdits applied (all ranges refer to the original text; edits at
 * the same position apply in array order, as LSP says). */
export function applyTextEdits(text: string, edits: TextEdit[]): string {
    const located = edits.map((edit, index) => ({
        start: offsetAt(text, edit.range.start.line, edit.range.start.character),
        end: offsetAt(text, edit.range.end.line, edit.range.end.character),
        newText: edit.newText,
        index,
    }));
    located.sort((a, b) => b.start - a.start || b.index - a.index);
    let result = text;
    for (const edit of located) {
        result = result.slice(0, edit.start) + edit.newText + result.slice(Math.max(edit.start, edit.end));
    }
    return result;
}

/** The TextEdits a proposal's WorkspaceEdit makes to its own document, whichever form
 * the server sent (`changes` or versioned `documentChanges`). */
export function proposalEdits(proposal: Proposal): TextEdit[] {
    const edit = proposal.edit as {
        changes?: Record<string, TextEdit[]>;
        documentChanges?: Array<{ textDocument?: { uri: string }; edits?: TextEdit[] }>;
    };
    if (edit.changes) {
        return edit.changes[proposal.uri] ?? [];
    }
    const edits: TextEdit[] = [];
    for (const change of edit.documentChanges ?? []) {
        if (change.textDocument?.uri === proposal.uri && change.edits) {
            edits.push(...change.edits);
        }
    }
    return edits;
}

/** The file's text once the proposal is applied to `current` (the editor's text of
 * the file now, or "" when it does not exist); "" for a delete. */
export function proposedText(current: string, proposal: Proposal): string {
    if (proposal.kind === "delete") {
        return "";
    }
    return applyTextEdits(proposal.kind === "create" ? "" : current, proposalEdits(proposal));
}

export interface Update {
    previous?: Proposal;
    current: Proposal;
}

/** The proposals the server told us about, in arrival order; every state change
 * arrives as a new notification for the same proposalId. */
export class ProposalBook {
    private readonly proposals = new Map<string, Proposal>();

    update(proposal: Proposal): Update {
        const previous = this.proposals.get(proposal.proposalId);
        this.proposals.set(proposal.proposalId, proposal);
        this.forgetSettled();
        return { previous, current: proposal };
    }

    get(proposalId: string): Proposal | undefined {
        return this.proposals.get(proposalId);
    }

    pending(sessionId?: string): Proposal[] {
        return [...this.proposals.values()].filter(
            (p) => p.state === "pending" && (sessionId === undefined || p.sessionId === sessionId),
        );
    }

    /** Replaces what we know with the server's list of unsettled proposals (after a
     * restart, say): pending ones we did not know appear, ones it no longer has go. */
    resync(pending: Proposal[]): void {
        for (const [id, p] of this.proposals) {
            if (p.state === "pending" && !pending.some((q) => q.proposalId === id)) {
                this.proposals.delete(id);
            }
        }
        for (const p of pending) {
            this.proposals.set(p.proposalId, p);
        }
    }

    private forgetSettled(): void {
        const settled = [...this.proposals.values()].filter((p) => SETTLED.includes(p.state));
        for (const p of settled.slice(0, Math.max(0, settled.length - KEEP_SETTLED))) {
            this.proposals.delete(p.proposalId);
        }
    }
}

/** Whether this update just changed the file under an open buffer (an edit applied,
 * or a reject that reverted one): the buffer should then be saved, since the server
 * wrote the same text to disk. */
export function changedBuffer(update: Update): boolean {
    const { previous, current } = update;
    return (
        (current.state === "applied" || current.state === "reverted") &&
        previous?.state !== current.state &&
        current.kind !== "delete"
    );
}

// The diff view shows a proposal as `tachy-proposal:/PATH?id=...` (the path keeps the
// file's extension, for syntax colouring); `side` says which text: the proposed one,
// or the empty original of a file the proposal creates.
export const SCHEME = "tachy-proposal";

export function proposalQuery(proposalId: string, side: "proposed" | "original"): string {
    return `id=${encodeURIComponent(proposalId)}&side=${side}`;
}

export function parseProposalQuery(query: string): { id: string; side: string } | undefined {
    const params = new URLSearchParams(query);
    const id = params.get("id");
    return id ? { id, side: params.get("side") ?? "proposed" } : undefined;
}
