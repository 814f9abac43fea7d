// A stand-in for the 'vscode' module and vscode-languageclient/node: just enough to
// activate the real extension (src/extension.ts) under node:test and watch what it
// starts, logs, shows and sends. Settings live in two scopes (user, workspace) and
// are only readable with inspect(): a config.get() would be a way round trust.ts,
// so it throws. install() must run before the extension is required.

import * as fs from "node:fs";
import Module from "node:module";
import * as path from "node:path";

type Listener = (e: unknown) => unknown;

class Emitter {
    private listeners: Listener[] = [];
    readonly event = (listener: Listener) => {
        this.listeners.push(listener);
        return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
    };
    fire(e?: unknown): void {
        this.listeners.forEach((l) => l(e));
    }
    dispose(): void {
        this.listeners = [];
    }
}

const disposable = { dispose() {} };

function uri(fsPath: string, scheme = "file") {
    return { scheme, fsPath, path: fsPath, query: "", toString: () => `${scheme}://${fsPath}` };
}

// The contributed defaults, as VS Code would report them.
const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));
const DEFAULTS: Record<string, unknown> = {};
for (const [key, schema] of Object.entries(manifest.contributes.configuration.properties)) {
    DEFAULTS[key.replace(/^tachy\./, "")] = (schema as { default?: unknown }).default;
}

interface Message {
    method: string;
    params: unknown;
}

/** What one test sets up and then looks at. */
export class EditorState {
    trusted = true;
    user: Record<string, unknown> = {};
    workspace: Record<string, unknown> = {};
    folders: string[] = [];
    output: string[] = [];
    status = { text: "", tooltip: "", command: undefined as string | undefined };
    warnings: string[] = [];
    errors: string[] = [];
    commands = new Map<string, (...args: unknown[]) => unknown>();
    clients: FakeClient[] = [];
    readonly configChanged = new Emitter();
    readonly trustGranted = new Emitter();

    /** Set a value in a scope and tell the extension, as VS Code does. */
    set(scope: "user" | "workspace", key: string, value: unknown): void {
        this[scope][key] = value;
        this.configChanged.fire({
            affectsConfiguration: (section: string) => section === "tachy" || section === `tachy.${key}`,
        });
    }

    grantTrust(): void {
        this.trusted = true;
        this.trustGranted.fire();
    }
}

export let state = new EditorState();

export function reset(): EditorState {
    state = new EditorState();
    return state;
}

/** vscode-languageclient's LanguageClient, recording what it was given. */
export class FakeClient {
    running = false;
    readonly notifications: Message[] = [];
    readonly requests: Message[] = [];
    private stateListeners: Listener[] = [];

    constructor(
        readonly id: string,
        readonly name: string,
        readonly server: { command: string; args: string[] },
        readonly clientOptions: {
            initializationOptions: () => Record<string, unknown>;
            middleware: {
                executeCommand: (name: string, args: unknown[], next: (n: string, a: unknown[]) => unknown) => Promise<unknown>;
                provideCodeActions: (d: unknown, r: unknown, c: unknown, t: unknown, next: () => unknown) => Promise<unknown>;
            };
        },
    ) {
        state.clients.push(this);
    }
    registerFeature(): void {}
    onNotification() {
        return disposable;
    }
    onRequest() {
        return disposable;
    }
    onDidChangeState(listener: Listener) {
        this.stateListeners.push(listener);
        return disposable;
    }
    async start(): Promise<void> {
        this.running = true;
        this.stateListeners.forEach((l) => l({ oldState: 3, newState: 2 }));
    }
    isRunning(): boolean {
        return this.running;
    }
    needsStop(): boolean {
        return this.running;
    }
    async stop(): Promise<void> {
        this.running = false;
    }
    async dispose(): Promise<void> {}
    async sendNotification(type: { method: string }, params: unknown): Promise<void> {
        this.notifications.push({ method: type.method, params });
    }
    async sendRequest(type: { method: string }, params: unknown): Promise<unknown> {
        this.requests.push({ method: type.method, params });
        if (type.method === "tachy/index/status") {
            return { state: "ready", files: 1, chunks: 1, embedded: 1, folders: [] };
        }
        if (type.method === "tachy/review/list") {
            return { proposals: [] };
        }
        return {};
    }
}

const vscode = {
    EventEmitter: Emitter,
    Disposable: class {
        constructor(private readonly fn: () => void) {}
        dispose() {
            this.fn();
        }
    },
    Uri: { file: (p: string) => uri(p), parse: (s: string) => uri(s.replace(/^file:\/\//, "")), joinPath: (u: { fsPath: string }, ...parts: string[]) => uri(path.join(u.fsPath, ...parts)) },
    StatusBarAlignment: { Left: 1, Right: 2 },
    TextEditorRevealType: { InCenterIfOutsideViewport: 2 },
    window: {
        createOutputChannel: () => ({ name: "tachy", appendLine: (line: string) => state.output.push(line), append() {}, show() {}, hide() {}, clear() {}, replace() {}, dispose() {} }),
        createStatusBarItem: () => ({
            set text(v: string) { state.status.text = v; },
            set tooltip(v: string) { state.status.tooltip = v; },
            set command(v: string | undefined) { state.status.command = v; },
            show() {},
            dispose() {},
        }),
        registerWebviewViewProvider: () => disposable,
        onDidChangeActiveTextEditor: () => disposable,
        activeTextEditor: undefined,
        showErrorMessage: async (m: string) => void state.errors.push(m),
        showWarningMessage: async (m: string) => void state.warnings.push(m),
        showInformationMessage: async () => undefined,
        tabGroups: { all: [] },
    },
    workspace: {
        get isTrusted() {
            return state.trusted;
        },
        get workspaceFolders() {
            return state.folders.map((f, index) => ({ uri: uri(f), name: path.basename(f), index }));
        },
        getConfiguration: (section: string) => {
            assert(section === "tachy", `getConfiguration(${section})`);
            return {
                inspect: (key: string) => ({ key, defaultValue: DEFAULTS[key], globalValue: state.user[key], workspaceValue: state.workspace[key] }),
                get: (key: string) => {
                    throw new Error(`config.get(${key}) would take a workspace's value: use inspect()`);
                },
            };
        },
        onDidChangeConfiguration: (l: Listener) => state.configChanged.event(l),
        onDidGrantWorkspaceTrust: (l: Listener) => state.trustGranted.event(l),
        registerTextDocumentContentProvider: () => disposable,
        textDocuments: [],
        getWorkspaceFolder: () => undefined,
        asRelativePath: (u: unknown) => String(u),
    },
    languages: { onDidChangeDiagnostics: () => disposable, getDiagnostics: () => [] },
    commands: {
        registerCommand: (id: string, fn: (...args: unknown[]) => unknown) => {
            state.commands.set(id, fn);
            return disposable;
        },
        executeCommand: async () => undefined,
    },
};

function assert(ok: boolean, what: string): void {
    if (!ok) {
        throw new Error(`fake vscode: unexpected ${what}`);
    }
}

const languageClient = {
    LanguageClient: FakeClient,
    State: { Stopped: 1, Running: 2, Starting: 3 },
    RevealOutputChannelOn: { Info: 1, Warn: 2, Error: 3, Never: 4 },
    DidChangeConfigurationNotification: { type: { method: "workspace/didChangeConfiguration" } },
    ApplyWorkspaceEditRequest: { type: { method: "workspace/applyEdit" } },
    TextDocumentEdit: { is: () => false },
};

let installed = false;

/** Make require("vscode") and require("vscode-languageclient/node") return the fakes. */
export function install(): void {
    if (installed) {
        return;
    }
    installed = true;
    const loader = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
    const load = loader._load;
    loader._load = function (this: unknown, request: string, ...rest: unknown[]) {
        if (request === "vscode") {
            return vscode;
        }
        if (request === "vscode-languageclient/node") {
            return languageClient;
        }
        return load.call(this, request, ...rest);
    };
}
