// Forwarding the editor's diagnostics from other sources (type checkers, compilers)
// to the server with tachy/diagnostics, so the agent's read_lints sees them. Pure:
// the diagnostics are read and sent through functions passed in.

import type { DiagnosticsParams, LspDiagnostic } from "./lsp_ext";

// The shape of a vscode.Diagnostic this module needs (severity: VS Code's enum,
// 0 Error .. 3 Hint; LSP counts 1 Error .. 4 Hint).
export interface EditorDiagnostic {
    range: { start: { line: number; character: number }; end: { line: number; character: number } };
    message: string;
    severity?: number;
    code?: string | number | { value: string | number; target?: unknown };
    source?: string;
}

export const OWN_SOURCE = "tachy";

export function toLsp(d: EditorDiagnostic): LspDiagnostic {
    const wire: LspDiagnostic = {
        range: {
            start: { line: d.range.start.line, character: d.range.start.character },
            end: { line: d.range.end.line, character: d.range.end.character },
        },
        message: d.message,
    };
    if (typeof d.severity === "number") {
        wire.severity = d.severity + 1;
    }
    const code = typeof d.code === "object" && d.code !== null ? d.code.value : d.code;
    if (typeof code === "string" || typeof code === "number") {
        wire.code = code;
    }
    if (d.source) {
        wire.source = d.source;
    }
    return wire;
}

/** The params for one file: its diagnostics from every source but tachy itself. */
export function diagnosticsParams(uri: string, diagnostics: readonly EditorDiagnostic[]): DiagnosticsParams {
    return { uri, diagnostics: diagnostics.filter((d) => d.source !== OWN_SOURCE).map(toLsp) };
}

export interface Timers {
    setTimeout(fn: () => void, ms: number): unknown;
    clearTimeout(handle: unknown): void;
}

/** Collects changed uris and sends each one's diagnostics once the editor has been
 * quiet for `delayMs` (a type checker republishes on every keystroke). A file whose
 * diagnostics did not change since they were last sent is not sent again. */
export class DiagnosticsForwarder {
    private readonly dirty = new Set<string>();
    private readonly sent = new Map<string, string>(); // uri -> JSON last sent
    private timer: unknown;

    constructor(
        private readonly read: (uri: string) => readonly EditorDiagnostic[],
        private readonly send: (params: DiagnosticsParams) => void,
        private readonly delayMs = 500,
        private readonly timers: Timers = globalThis,
    ) {}

    changed(uris: readonly string[]): void {
        let any = false;
        for (const uri of uris) {
            if (uri.startsWith("file:")) {
                this.dirty.add(uri);
                any = true;
            }
        }
        if (!any) {
            return;
        }
        if (this.timer !== undefined) {
            this.timers.clearTimeout(this.timer);
        }
        this.timer = this.timers.setTimeout(() => this.flush(), this.delayMs);
    }

    flush(): void {
        if (this.timer !== undefined) {
            this.timers.clearTimeout(this.timer);
            this.timer = undefined;
        }
        const uris = [...this.dirty];
        this.dirty.clear();
        for (const uri of uris) {
            const params = diagnosticsParams(uri, this.read(uri));
            const json = JSON.stringify(params.diagnostics);
            if (this.sent.get(uri) === json || (!this.sent.has(uri) && params.diagnostics.length === 0)) {
                continue;
            }
            this.sent.set(uri, json);
            this.send(params);
        }
    }

    /** Forget what was sent (a new server knows nothing yet). */
    reset(): void {
        this.sent.clear();
    }

    dispose(): void {
        if (this.timer !== undefined) {
            this.timers.clearTimeout(this.timer);
            this.timer = undefined;
        }
    }
}
