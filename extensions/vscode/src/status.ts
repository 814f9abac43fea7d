// The status bar item's text, from the index status, agent runs and pending edits;
// its tooltip also says which program runs as the server and where it came from,
// and whether the workspace is in Restricted Mode.

import type { IndexState, IndexStatusResult } from "./lsp_ext";
import { RESTRICTED_MODE } from "./trust";

export type ServerState = "starting" | "running" | "stopped" | "failed";

export interface StatusInput {
    server: ServerState;
    index?: IndexStatusResult;
    running: number; // agent runs in progress
    pending: number; // proposed edits waiting for review
    dense: boolean; // embeddings are on (tachy.index.dense): "lexical" means they are pending
    origin?: string; // the server started, as discovery.describeServer puts it
    restricted?: boolean; // an untrusted workspace: search only (trust.ts)
}

export interface StatusView {
    text: string;
    tooltip: string;
    command?: string;
}

const INDEX_LABEL: Record<IndexState, string> = {
    starting: "starting",
    indexing: "indexing",
    empty: "nothing indexed",
    lexical: "lexical",
    ready: "ready",
    failed: "index failed",
    disabled: "indexing off",
};

// The tooltip's last lines, in every state: the user can always see what runs.
function footer(s: StatusInput): string[] {
    const lines: string[] = [];
    if (s.origin) {
        lines.push(`Server: ${s.origin}`);
    }
    if (s.restricted) {
        lines.push(RESTRICTED_MODE);
    }
    return lines;
}

function withFooter(view: StatusView, s: StatusInput): StatusView {
    return { ...view, tooltip: [view.tooltip, ...footer(s)].join("\n") };
}

export function statusView(s: StatusInput): StatusView {
    if (s.server === "failed") {
        return withFooter({ text: "$(error) tachy", tooltip: "The tachy server failed to start; see the log.", command: "tachy.showOutput" }, s);
    }
    if (s.server === "stopped") {
        return withFooter({ text: "$(circle-slash) tachy", tooltip: "The tachy server is stopped; click to restart.", command: "tachy.restartServer" }, s);
    }
    if (s.server === "starting") {
        return withFooter({ text: "$(loading~spin) tachy", tooltip: "The tachy server is starting." }, s);
    }
    const parts: string[] = [];
    const lines: string[] = [];
    let icon = "$(check)";
    if (s.index) {
        const state = s.index.state;
        if (state === "indexing" || state === "starting") {
            icon = "$(sync~spin)";
            parts.push(`indexing ${s.index.files} files`);
        } else if (state === "failed") {
            icon = "$(warning)";
            parts.push("index failed");
        } else if (state === "lexical" && s.dense) {
            parts.push(`embedding ${s.index.embedded}/${s.index.chunks}`);
        }
        lines.push(
            `Index: ${INDEX_LABEL[state] ?? state}, ${s.index.files} files, ${s.index.chunks} chunks, ${s.index.embedded} embedded`,
        );
        for (const f of s.index.folders) {
            if (f.error) {
                lines.push(`${f.uri}: ${f.error}`);
            }
        }
    }
    if (s.restricted) {
        parts.push("restricted");
    }
    if (s.running > 0) {
        icon = "$(loading~spin)";
        parts.push(s.running === 1 ? "agent running" : `${s.running} agent runs`);
        lines.push("Agent: running (tachy: Cancel the Agent Run stops it)");
    }
    if (s.pending > 0) {
        parts.push(`${s.pending} edit${s.pending === 1 ? "" : "s"} to review`);
        lines.push("Click to review the proposed edits.");
        return { text: `${icon} tachy: ${parts.join(", ")}`, tooltip: [...lines, ...footer(s)].join("\n"), command: "tachy.showEdit" };
    }
    const text = parts.length ? `${icon} tachy: ${parts.join(", ")}` : `${icon} tachy`;
    return { text, tooltip: [...lines, ...footer(s)].join("\n") || "tachy", command: "tachy.ask" };
}

/** How long to wait before asking for the index status again: soon while it changes
 * (indexing, or embeddings still to compute). */
export function pollDelayMs(index: IndexStatusResult | undefined, dense: boolean): number {
    if (!index || index.state === "indexing" || index.state === "starting" || (index.state === "lexical" && dense)) {
        return 2000;
    }
    return 30000;
}
