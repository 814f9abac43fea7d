// The tachy/* LSP extensions, declared once and typed, mirroring server/protocol.py
// (and extensions/protocol/tachy.json, generated from it, which
// tests/extensions/test_protocol.py checks this file against, string unions and
// transcript events included). Field names are the camelCase wire names.
//
// This module imports only the LSP protocol types (vscode-languageserver-protocol, not
// 'vscode'), so the unit tests can load it without VS Code.

import * as lc from "vscode-languageserver-protocol";

// ------------------------------------------------------------------ search
export interface Position {
    line: number; // 0-based
    character: number;
}

export interface Range {
    start: Position;
    end: Position;
}

export interface SearchParams {
    query: string;
    limit?: number; // default 10, at most 200
    paths?: string[]; // workspace-relative globs the results must match
    mode?: "hybrid" | "lexical" | "dense";
}

export interface SearchItem {
    uri: string;
    range: Range; // whole lines of the chunk
    score: number;
    snippet: string;
    symbol?: string;
}

export interface SearchResult {
    results: SearchItem[];
}

export const search = new lc.RequestType<SearchParams, SearchResult, void>("tachy/search");

// ------------------------------------------------------------ index status
// eslint-disable-next-line @typescript-eslint/no-empty-interface
export interface IndexStatusParams {}

// lexical: searchable, embeddings pending; disabled: indexing is turned off.
export type IndexState = "starting" | "indexing" | "empty" | "lexical" | "ready" | "failed" | "disabled";

export interface FolderStatus {
    uri: string;
    state: IndexState;
    files: number;
    chunks: number;
    embedded: number;
    error?: string;
}

export interface IndexStatusResult {
    state: IndexState; // the least ready folder's state
    files: number;
    chunks: number;
    embedded: number;
    folders: FolderStatus[];
}

export const indexStatus = new lc.RequestType<IndexStatusParams, IndexStatusResult, void>(
    "tachy/index/status",
);

// ------------------------------------------------------------------- agent
export interface AgentRunParams {
    prompt: string;
    sessionId?: string; // chosen by the client so it can cancel before the answer
    workspaceFolder?: string; // a workspace folder URI; the first one when absent
    policy?: string;
    maxTurns?: number;
    workDoneToken?: string | number;
}

export type StopReason = "end_turn" | "max_turns" | "cancelled" | "error";
export type SessionState = "running" | "cancelling" | "finished" | "unknown";

export interface AgentRunResult {
    sessionId: string;
    stopReason: StopReason;
    finalText?: string;
    error?: string;
    changedFiles?: string[];
}

// A transcript event, exactly as a line of a JSONL transcript (agent/events.py, whose
// field names are snake_case), told apart by `event`. `meta` holds volatile facts
// (durations, the machine's paths); the server always sends it, a test may leave it
// out. A newer server may send kinds not listed here: a client ignores those.
export type TranscriptEvent =
    | { event: "run_start"; prompt: string; tools: string[]; meta?: EventMeta }
    | { event: "assistant"; turn: number; text: string; meta?: EventMeta }
    | { event: "tool_call"; call_id: string; tool: string; args: Record<string, unknown>; meta?: EventMeta }
    | { event: "tool_result"; call_id: string; tool: string; is_error: boolean; content: string; meta?: EventMeta }
    | { event: "todos"; todos: Todo[]; meta?: EventMeta }
    | { event: "final"; text: string; stop_reason: StopReason; meta?: EventMeta };
export type EventMeta = Record<string, unknown>;
export type TodoStatus = "pending" | "in_progress" | "completed";
export type Todo = { content: string; status: TodoStatus };

export interface AgentEventParams {
    sessionId: string;
    seq: number; // 0, 1, 2, ... within the session
    event: TranscriptEvent;
}

export interface AgentCancelParams {
    sessionId: string;
}

export interface AgentCancelResult {
    cancelled: boolean;
    state: SessionState;
    message?: string;
}

export const agentRun = new lc.RequestType<AgentRunParams, AgentRunResult, void>(
    "tachy/agent/run",
);
export const agentEvent = new lc.NotificationType<AgentEventParams>("tachy/agent/event");
export const agentCancel = new lc.RequestType<AgentCancelParams, AgentCancelResult, void>(
    "tachy/agent/cancel",
);

// ------------------------------------------------------------------ review
// A client that shows proposals itself declares the experimental client capability
// {"tachy": {"review": true}}; the notification is sent again on every state change.
// pending: waiting for the user | applied | rejected | reverted | failed | cancelled
export type ProposalState = "pending" | "applied" | "rejected" | "reverted" | "failed" | "cancelled";

export interface Proposal {
    proposalId: string;
    sessionId: string;
    uri: string;
    path: string; // workspace-relative
    kind: "edit" | "create" | "delete";
    state: ProposalState;
    edit: { [key: string]: unknown }; // an LSP WorkspaceEdit: the editor's text -> the agent's
    message?: string;
}

export interface ReviewDecisionParams {
    proposalId: string;
}

export interface ReviewDecisionResult {
    ok: boolean;
    state: ProposalState; // the proposal's state after the decision
    message?: string;
}

export interface ReviewListParams {
    sessionId?: string;
}

export interface ReviewListResult {
    proposals: Proposal[];
}

export const reviewPropose = new lc.NotificationType<Proposal>("tachy/review/propose");
export const reviewAccept = new lc.RequestType<ReviewDecisionParams, ReviewDecisionResult, void>(
    "tachy/review/accept",
);
export const reviewReject = new lc.RequestType<ReviewDecisionParams, ReviewDecisionResult, void>(
    "tachy/review/reject",
);
export const reviewList = new lc.RequestType<ReviewListParams, ReviewListResult, void>(
    "tachy/review/list",
);

// ------------------------------------------------------------- diagnostics
export interface LspDiagnostic {
    range: Range;
    message: string;
    severity?: number; // 1 error, 2 warning, 3 information, 4 hint
    code?: string | number;
    source?: string;
}

export interface DiagnosticsParams {
    uri: string;
    diagnostics: LspDiagnostic[]; // replaces what was sent for the uri
}

export const diagnostics = new lc.NotificationType<DiagnosticsParams>("tachy/diagnostics");

// ---------------------------------------------------------------- commands
// workspace/executeCommand commands the server offers (in code actions); their
// arguments and result. vscode-languageclient registers them as VS Code commands.
export class Command<Args extends unknown[], Result> {
    declare readonly args?: Args; // types only: what the command takes and answers
    declare readonly result?: Result;
    constructor(readonly name: string) {}
}

export interface AskToFixArgs {
    uri: string;
    diagnostic: LspDiagnostic;
    sessionId?: string;
}

export interface AskToFixResult {
    sessionId: string;
}

export const askToFix = new Command<[AskToFixArgs], AskToFixResult>("tachy.askToFix");

// ------------------------------------------------------------ capabilities
// The experimental client capability that makes the server send proposals
// (tachy/review/propose) instead of asking with window/showMessageRequest.
export const experimentalCapabilities = { tachy: { review: true } } as const;
