// What the chat view shows: transcript events (tachy/agent/event) and proposals
// turned into display items. Pure; the webview only lays the items out.

import type { Proposal, ProposalState, StopReason, Todo, TranscriptEvent } from "./lsp_ext";

export interface DiffLine {
    op: "+" | "-" | " ";
    text: string;
}

export type ChatItem =
    | { kind: "user"; sessionId: string; text: string }
    | { kind: "assistant"; sessionId: string; text: string }
    | { kind: "tool"; sessionId: string; callId: string; tool: string; title: string; diff?: DiffLine[] }
    | { kind: "result"; sessionId: string; callId: string; tool: string; isError: boolean; text: string }
    | { kind: "todos"; sessionId: string; todos: Todo[] }
    // repeats: the text is the run's last assistant message, already shown above it.
    | { kind: "final"; sessionId: string; text: string; stopReason: StopReason; repeats?: boolean }
    | { kind: "proposal"; sessionId: string; proposalId: string; path: string; change: Proposal["kind"]; state: ProposalState; message: string }
    | { kind: "error"; sessionId: string; text: string };

export const MAX_LINES = 40; // of a tool result or diff shown in the chat
export const MAX_CHARS = 4000;

/** At most `maxLines` lines and `maxChars` characters, saying what was left out. */
export function clip(text: string, maxLines = MAX_LINES, maxChars = MAX_CHARS): string {
    let lines = text.split("\n");
    let cut = 0;
    if (lines.length > maxLines) {
        cut = lines.length - maxLines;
        lines = lines.slice(0, maxLines);
    }
    let out = lines.join("\n");
    if (out.length > maxChars) {
        out = out.slice(0, maxChars);
        return `${out}\n… (${text.length - maxChars} more characters)`;
    }
    return cut ? `${out}\n… (${cut} more lines)` : out;
}

/** The model's prose in a turn: its tool calls are shown as their own items. */
export function prose(text: string): string {
    return text.replace(/<tool_call\b[\s\S]*?<\/tool_call>/g, "").trim();
}

function str(value: unknown): string {
    return typeof value === "string" ? value : value === undefined ? "" : JSON.stringify(value);
}

function oneLine(text: string, width = 80): string {
    const line = text.split("\n")[0];
    return line.length > width ? `${line.slice(0, width - 1)}…` : line;
}

function diffOf(before: string, after: string): DiffLine[] {
    const minus = before === "" ? [] : before.split("\n").map((text) => ({ op: "-" as const, text }));
    const plus = after === "" ? [] : after.split("\n").map((text) => ({ op: "+" as const, text }));
    const lines = [...minus, ...plus];
    if (lines.length > MAX_LINES) {
        return [...lines.slice(0, MAX_LINES), { op: " ", text: `… (${lines.length - MAX_LINES} more lines)` }];
    }
    return lines;
}

/** A one-line summary of a tool call: the tool and its main argument. */
export function toolTitle(tool: string, args: Record<string, unknown>): string {
    const main: Record<string, string> = {
        read_file: "path",
        list_dir: "path",
        file_search: "query",
        grep: "pattern",
        codebase_search: "query",
        edit_file: "path",
        write_file: "path",
        delete_file: "path",
        run_terminal_cmd: "command",
    };
    const key = main[tool];
    let detail = key ? str(args[key]) : "";
    if (tool === "read_file" && args.start_line !== undefined) {
        detail += `:${str(args.start_line)}${args.end_line !== undefined ? `-${str(args.end_line)}` : ""}`;
    }
    return detail ? `${tool} ${oneLine(detail)}` : tool;
}

/** The display item for one transcript event, or undefined for events not shown (and
 * for kinds a newer server may send that this client does not know). */
export function renderEvent(sessionId: string, event: TranscriptEvent): ChatItem | undefined {
    switch (event.event) {
        case "run_start":
            return { kind: "user", sessionId, text: event.prompt };
        case "assistant": {
            const text = prose(event.text);
            return text ? { kind: "assistant", sessionId, text } : undefined;
        }
        case "tool_call": {
            const { tool, args } = event;
            const item: ChatItem = { kind: "tool", sessionId, callId: event.call_id, tool, title: toolTitle(tool, args) };
            if (tool === "edit_file") {
                item.diff = diffOf(str(args.old_string), str(args.new_string));
            } else if (tool === "write_file") {
                item.diff = diffOf("", str(args.content));
            }
            return item;
        }
        case "tool_result":
            return {
                kind: "result",
                sessionId,
                callId: event.call_id,
                tool: event.tool,
                isError: event.is_error,
                text: clip(event.content),
            };
        case "todos":
            return {
                kind: "todos",
                sessionId,
                todos: event.todos.map(({ content, status }) => ({ content, status })),
            };
        case "final":
            return { kind: "final", sessionId, text: event.text, stopReason: event.stop_reason };
        default:
            return undefined;
    }
}

export function renderProposal(proposal: Proposal): ChatItem {
    return {
        kind: "proposal",
        sessionId: proposal.sessionId,
        proposalId: proposal.proposalId,
        path: proposal.path,
        change: proposal.kind,
        state: proposal.state,
        message: proposal.message ?? "",
    };
}

/** The chat's items in order, bounded; a proposal's item is updated in place when its
 * state changes, so the chat shows each proposal once, as it is now. */
export class ChatLog {
    readonly items: ChatItem[] = [];
    private readonly seen = new Map<string, number>(); // sessionId -> last seq shown
    private readonly lastText = new Map<string, string>(); // sessionId -> last assistant prose

    constructor(private readonly limit = 2000) {}

    /** Adds an event's item; a repeated or older seq of a session is ignored. */
    event(sessionId: string, seq: number, event: TranscriptEvent): ChatItem | undefined {
        const last = this.seen.get(sessionId);
        if (last !== undefined && seq <= last) {
            return undefined;
        }
        this.seen.set(sessionId, seq);
        const item = renderEvent(sessionId, event);
        if (item?.kind === "assistant") {
            this.lastText.set(sessionId, item.text);
        } else if (item?.kind === "final") {
            item.repeats = item.text.trim() !== "" && item.text.trim() === this.lastText.get(sessionId);
            this.lastText.delete(sessionId);
        }
        if (item) {
            this.push(item);
        }
        return item;
    }

    proposal(proposal: Proposal): ChatItem {
        const item = renderProposal(proposal);
        const index = this.items.findIndex(
            (i) => i.kind === "proposal" && i.proposalId === proposal.proposalId,
        );
        if (index >= 0) {
            this.items[index] = item;
        } else {
            this.push(item);
        }
        return item;
    }

    push(item: ChatItem): void {
        this.items.push(item);
        if (this.items.length > this.limit) {
            this.items.splice(0, this.items.length - this.limit);
        }
    }

    clear(): void {
        this.items.length = 0;
    }
}

export interface PromptContext {
    path?: string; // workspace-relative path of the active file
    language?: string;
    selection?: { text: string; startLine: number; endLine: number }; // 1-based lines
    fileText?: string;
}

/** The prompt sent to the agent: the user's words, then the selection or the file
 * they chose to include (fenced, with where it comes from). */
export function buildPrompt(question: string, context: PromptContext, include: "none" | "selection" | "file"): string {
    const fence = (text: string) => {
        const ticks = text.includes("```") ? "````" : "```";
        return `${ticks}${context.language ?? ""}\n${text}${text.endsWith("\n") ? "" : "\n"}${ticks}`;
    };
    if (include === "selection" && context.selection && context.path) {
        const s = context.selection;
        return `${question}\n\nThe selection in ${context.path} (lines ${s.startLine}-${s.endLine}):\n${fence(s.text)}`;
    }
    if (include === "file" && context.path) {
        if (context.fileText !== undefined) {
            return `${question}\n\nThe file ${context.path}:\n${fence(context.fileText)}`;
        }
        return `${question}\n\n(The file open in the editor: ${context.path}.)`;
    }
    return question;
}
