// The tachy extension: starts `tachy serve`, and gives VS Code search, an agent chat,
// review of the agent's edits and diagnostics forwarding on top of it. The pieces
// that need no VS Code live in their own modules (chat, discovery, diagnostics,
// proposals, settings, status, search_items, trust), with unit tests in test/.
// What it trusts (user settings, not the workspace's) is in trust.ts and
// discovery.ts; in an untrusted workspace it runs in Restricted Mode: search only.

import * as vscode from "vscode";
import * as lc from "vscode-languageclient/node";

import { buildPrompt, ChatLog, PromptContext } from "./chat";
import { ChatView, FromWebview } from "./chat_view";
import {
    createClient,
    currentEffective,
    currentServerSettings,
    discoveryInput,
    DiscoveryError,
    isTrusted,
    saveAppliedEdits,
    tachyInspect,
} from "./client";
import { DiagnosticsForwarder, EditorDiagnostic } from "./diagnostics";
import { describeServer, findServer, insideWorkspace, workspaceServers } from "./discovery";
import * as ext from "./lsp_ext";
import { Review } from "./review";
import { pickItems, PickItem } from "./search_items";
import { changeAction, Effective, SETTING_KEYS } from "./settings";
import { pollDelayMs, ServerState, statusView } from "./status";
import { ignoredWorkspaceSettings, RESTRICTED_MODE, USER_ONLY_SETTINGS } from "./trust";

const MAX_FILE_CONTEXT = 100_000; // characters of the active file put in a prompt

class Tachy implements vscode.Disposable {
    client?: lc.LanguageClient;
    readonly output = vscode.window.createOutputChannel("tachy");
    readonly chat = new ChatLog();
    readonly review: Review;
    readonly view: ChatView;
    readonly running = new Set<string>(); // agent sessions in progress
    private readonly status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 10);
    private readonly forwarder: DiagnosticsForwarder;
    private serverState: ServerState = "stopped";
    private index?: ext.IndexStatusResult;
    private pollTimer?: NodeJS.Timeout;
    private lastEditor?: vscode.TextEditor = vscode.window.activeTextEditor;
    private sessions = 0;
    private effective: Effective = currentEffective(); // the settings last acted on
    private serverOrigin?: string; // what was started, for the tooltip (describeServer)
    private readonly disposables: vscode.Disposable[] = [];
    private clientDisposables: vscode.Disposable[] = [];

    constructor(context: vscode.ExtensionContext) {
        this.review = new Review(() => this.readyClient());
        this.view = new ChatView(context.extensionUri, this.chat, (m) => void this.onChatMessage(m));
        this.forwarder = new DiagnosticsForwarder(
            (uri) => vscode.languages.getDiagnostics(vscode.Uri.parse(uri)) as readonly EditorDiagnostic[],
            (params) => void this.readyClient()?.sendNotification(ext.diagnostics, params),
        );
        this.disposables.push(
            this.output,
            this.status,
            this.review,
            vscode.window.registerWebviewViewProvider(ChatView.id, this.view),
            this.review.onDidUpdate((p) => {
                this.view.item(this.chat.proposal(p));
                this.refreshStatus();
            }),
            vscode.languages.onDidChangeDiagnostics((e) => this.forwarder.changed(e.uris.map((u) => u.toString()))),
            vscode.window.onDidChangeActiveTextEditor((editor) => {
                if (editor) {
                    this.lastEditor = editor;
                }
            }),
            vscode.workspace.onDidChangeConfiguration((e) => void this.onConfigurationChanged(e)),
            vscode.workspace.onDidGrantWorkspaceTrust(() => void this.onTrustGranted()),
        );
        this.status.show();
        this.refreshStatus();
    }

    // ---------------------------------------------------------- the server
    readyClient(): lc.LanguageClient | undefined {
        return this.client?.isRunning() ? this.client : undefined;
    }

    async start(): Promise<void> {
        this.effective = currentEffective();
        this.serverOrigin = undefined;
        this.logTrust();
        const input = discoveryInput();
        let command;
        try {
            command = findServer(input);
        } catch (error) {
            this.setServerState("failed");
            const message = error instanceof DiscoveryError ? error.message : String(error);
            this.output.appendLine(`tachy: ${message}`);
            void vscode.window.showErrorMessage(`tachy: ${message}`, "Open Settings").then((choice) => {
                if (choice === "Open Settings") {
                    void vscode.commands.executeCommand("workbench.action.openSettings", "tachy.");
                }
            });
            return;
        }
        this.serverOrigin = describeServer(command);
        this.output.appendLine(`tachy: starting ${this.serverOrigin}`);
        if (insideWorkspace(command.command, input)) {
            this.output.appendLine(
                `tachy: warning: ${command.command} is inside the workspace, where the agent's commands can change it`,
            );
        }
        const client = createClient(command, this.output, {
            onCommandResult: (name, result) => {
                const sessionId = (result as ext.AskToFixResult | undefined)?.sessionId;
                if (name === ext.askToFix.name && typeof sessionId === "string") {
                    void this.view.reveal();
                }
            },
            onRefused: () => this.refuseInRestrictedMode(),
        });
        this.client = client;
        client.onNotification(ext.agentEvent, (params) => this.onAgentEvent(params));
        client.onNotification(ext.reviewPropose, (proposal) => void this.review.onPropose(proposal));
        // Registered before start, it replaces the client's own handler on every
        // connection (the client restarts a crashed server by itself).
        this.clientDisposables.push(saveAppliedEdits(client));
        client.onDidChangeState((e) => {
            if (client !== this.client) {
                return;
            }
            if (e.newState === lc.State.Running) {
                this.setServerState("running");
                void this.connected();
            } else if (e.newState === lc.State.Starting) {
                this.setServerState("starting");
            } else {
                this.running.clear();
                this.setServerState("stopped");
            }
        });
        this.setServerState("starting");
        try {
            await client.start();
        } catch (error) {
            this.setServerState("failed");
            this.output.appendLine(`tachy: the server did not start: ${String(error)}`);
            void vscode.window.showErrorMessage("tachy: the server did not start; see the tachy output.");
            return;
        }
    }

    /** A (re)started server knows nothing yet: send it the diagnostics, take its list
     * of pending edits, and follow its index. */
    private async connected(): Promise<void> {
        this.forwarder.reset();
        this.forwarder.changed(vscode.languages.getDiagnostics().map(([uri]) => uri.toString()));
        this.poll(0);
        try {
            await this.review.resync();
        } catch (error) {
            this.output.appendLine(`tachy: could not list pending edits: ${String(error)}`);
        }
    }

    async stop(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        clearTimeout(this.pollTimer);
        this.running.clear();
        this.setServerState("stopped");
        this.clientDisposables.forEach((d) => d.dispose());
        this.clientDisposables = [];
        if (client) {
            try {
                if (client.needsStop()) {
                    await client.stop(5000);
                }
            } catch (error) {
                this.output.appendLine(`tachy: stopping the server: ${String(error)}`);
            }
            await client.dispose();
        }
    }

    async restart(): Promise<void> {
        await this.stop();
        await this.start();
    }

    /** What the user should know about trust each time the server starts: Restricted
     * Mode, workspace values that are ignored, a tachy in the workspace not started. */
    private logTrust(): void {
        const trusted = isTrusted();
        if (!trusted) {
            this.output.appendLine(`tachy: ${RESTRICTED_MODE}`);
        }
        const ignored = ignoredWorkspaceSettings(tachyInspect(), SETTING_KEYS, trusted);
        if (ignored.length) {
            this.output.appendLine(`tachy: ignoring the workspace's ${ignored.map((k) => `tachy.${k}`).join(", ")}: ${this.ignoredWhy(trusted)}`);
        }
        for (const file of workspaceServers(discoveryInput())) {
            this.output.appendLine(
                `tachy: found ${file} in the workspace; not started automatically: set tachy.serverPath in your user settings to use it`,
            );
        }
    }

    private ignoredWhy(trusted: boolean): string {
        return trusted
            ? "executables and security settings come from your user settings only"
            : "the workspace is not trusted";
    }

    private async onConfigurationChanged(e: vscode.ConfigurationChangeEvent): Promise<void> {
        if (!e.affectsConfiguration("tachy")) {
            return;
        }
        const before = this.effective;
        const after = currentEffective();
        this.effective = after;
        const change = changeAction(before, after);
        if (change.action === "restart") {
            this.output.appendLine(`tachy: ${change.why}; restarting the server`);
            await this.restart();
        } else if (change.action === "send") {
            await this.readyClient()?.sendNotification(lc.DidChangeConfigurationNotification.type, {
                settings: { tachy: after.settings },
            });
        } else {
            // Nothing in effect changed: say so when that is a workspace value ignored.
            const keys = (isTrusted() ? USER_ONLY_SETTINGS : SETTING_KEYS).filter((k) => e.affectsConfiguration(`tachy.${k}`));
            const ignored = ignoredWorkspaceSettings(tachyInspect(), keys, isTrusted());
            if (ignored.length) {
                this.output.appendLine(
                    `tachy: ignoring the workspace's ${ignored.map((k) => `tachy.${k}`).join(", ")}: ${this.ignoredWhy(isTrusted())}`,
                );
            }
        }
    }

    /** Trusted now: workspace settings count and the agent may run; a fresh server
     * gets them all at once. */
    private async onTrustGranted(): Promise<void> {
        this.output.appendLine("tachy: the workspace is trusted now; restarting the server with the agent on");
        await this.restart();
    }

    /** Restricted Mode: an agent run was asked for; say why not, and how to allow it. */
    private refuseInRestrictedMode(sessionId?: string): void {
        const text = "The agent is off in Restricted Mode: this workspace is not trusted.";
        if (sessionId) {
            this.addError(sessionId, `${text} Trust the workspace to run the agent.`);
        }
        void vscode.window.showWarningMessage(`tachy: ${text}`, "Manage Workspace Trust").then((choice) => {
            if (choice === "Manage Workspace Trust") {
                void vscode.commands.executeCommand("workbench.trust.manage");
            }
        });
    }

    // ---------------------------------------------------------- status bar
    private setServerState(state: ServerState): void {
        this.serverState = state;
        if (state !== "running") {
            this.index = undefined;
        }
        this.refreshStatus();
    }

    private refreshStatus(): void {
        const view = statusView({
            server: this.serverState,
            index: this.index,
            running: this.running.size,
            pending: this.review.book.pending().length,
            dense: this.denseIndex(),
            origin: this.serverOrigin,
            restricted: !isTrusted(),
        });
        this.status.text = view.text;
        this.status.tooltip = view.tooltip;
        this.status.command = view.command;
        void vscode.commands.executeCommand("setContext", "tachy.agentRunning", this.running.size > 0);
        void vscode.commands.executeCommand("setContext", "tachy.editsPending", this.review.book.pending().length > 0);
        this.view.setRunning(this.running.size > 0);
    }

    private denseIndex(): boolean {
        return currentServerSettings().index?.dense ?? true;
    }

    private poll(delayMs: number): void {
        clearTimeout(this.pollTimer);
        this.pollTimer = setTimeout(async () => {
            const client = this.readyClient();
            if (!client) {
                return;
            }
            try {
                this.index = await client.sendRequest(ext.indexStatus, {});
            } catch (error) {
                this.output.appendLine(`tachy: index status: ${String(error)}`);
            }
            this.refreshStatus();
            if (client === this.client) {
                this.poll(pollDelayMs(this.index, this.denseIndex()));
            }
        }, delayMs);
    }

    // ---------------------------------------------------------------- agent
    private onAgentEvent(params: ext.AgentEventParams): void {
        const kind = params.event.event;
        if (kind === "run_start") {
            this.running.add(params.sessionId);
        } else if (kind === "final") {
            this.running.delete(params.sessionId);
        }
        const item = this.chat.event(params.sessionId, params.seq, params.event);
        if (item) {
            this.view.item(item);
        }
        this.refreshStatus();
    }

    private promptContext(include: "none" | "selection" | "file"): PromptContext {
        const editor = vscode.window.activeTextEditor ?? this.lastEditor;
        if (!editor || include === "none") {
            return {};
        }
        const doc = editor.document;
        const context: PromptContext = { path: vscode.workspace.asRelativePath(doc.uri), language: doc.languageId };
        const selection = editor.selection;
        if (!selection.isEmpty) {
            context.selection = {
                text: doc.getText(selection),
                startLine: selection.start.line + 1,
                endLine: selection.end.line + 1,
            };
        }
        if (doc.getText().length <= MAX_FILE_CONTEXT) {
            context.fileText = doc.getText();
        }
        return context;
    }

    async ask(question: string, include: "none" | "selection" | "file" = "none"): Promise<ext.AgentRunResult | undefined> {
        const client = this.readyClient();
        if (!client) {
            void vscode.window.showErrorMessage("tachy: the server is not running (tachy: Restart the Language Server).");
            return undefined;
        }
        if (!isTrusted()) {
            this.refuseInRestrictedMode(`vscode-${Date.now().toString(36)}-${++this.sessions}`);
            return undefined;
        }
        const context = this.promptContext(include);
        if (include === "selection" && !context.selection) {
            void vscode.window.showWarningMessage("tachy: there is no selection; asking without it.");
        }
        const editor = vscode.window.activeTextEditor ?? this.lastEditor;
        const folder = editor && vscode.workspace.getWorkspaceFolder(editor.document.uri);
        const sessionId = `vscode-${Date.now().toString(36)}-${++this.sessions}`;
        const params: ext.AgentRunParams = { prompt: buildPrompt(question, context, include), sessionId };
        if (folder) {
            params.workspaceFolder = folder.uri.toString();
        }
        this.running.add(sessionId);
        this.refreshStatus();
        try {
            const result = await client.sendRequest(ext.agentRun, params);
            if (result.stopReason === "error") {
                this.addError(sessionId, `The run failed: ${result.error || "unknown error"}`);
            }
            return result;
        } catch (error) {
            this.addError(sessionId, `The run failed: ${String((error as Error).message ?? error)}`);
            return undefined;
        } finally {
            this.running.delete(sessionId);
            this.refreshStatus();
        }
    }

    private addError(sessionId: string, text: string): void {
        const item = { kind: "error" as const, sessionId, text };
        this.chat.push(item);
        this.view.item(item);
    }

    async cancel(): Promise<void> {
        const client = this.readyClient();
        if (!client || this.running.size === 0) {
            void vscode.window.showInformationMessage("tachy: no agent run is in progress.");
            return;
        }
        for (const sessionId of [...this.running]) {
            const result = await client.sendRequest(ext.agentCancel, { sessionId });
            if (!result.cancelled && result.message) {
                this.output.appendLine(`tachy: cancel ${sessionId}: ${result.message}`);
            }
        }
    }

    private async onChatMessage(message: FromWebview): Promise<void> {
        switch (message.type) {
            case "ask":
                await this.ask(message.prompt, message.include);
                break;
            case "cancel":
                await this.cancel();
                break;
            case "clear":
                this.chat.clear();
                this.view.reset();
                break;
            case "show":
            case "accept":
            case "reject": {
                const proposal = this.review.book.get(message.proposalId);
                if (!proposal) {
                    return;
                }
                if (message.type === "show") {
                    await this.review.show(proposal);
                } else {
                    await this.review.decide(proposal, message.type === "accept");
                }
                break;
            }
        }
    }

    // --------------------------------------------------------------- search
    /** The folders results are shown relative to: the open workspace folders, or the
     * active file's directory the client was started on when none is open. */
    private folderUris(): string[] {
        const single = this.client?.clientOptions.workspaceFolder;
        const open = vscode.workspace.workspaceFolders ?? [];
        return single ? [single.uri.toString()] : open.map((f) => f.uri.toString());
    }

    search(): void {
        const client = this.readyClient();
        if (!client) {
            void vscode.window.showErrorMessage("tachy: the server is not running.");
            return;
        }
        const pick = vscode.window.createQuickPick<PickItem>();
        pick.placeholder = "Search the codebase by meaning or by words (tachy)";
        let timer: NodeJS.Timeout | undefined;
        let generation = 0;
        const folders = this.folderUris();
        pick.onDidChangeValue((value) => {
            clearTimeout(timer);
            if (!value.trim()) {
                pick.items = [];
                return;
            }
            timer = setTimeout(async () => {
                const mine = ++generation;
                pick.busy = true;
                try {
                    const result = await client.sendRequest(ext.search, { query: value, limit: 30 });
                    if (mine === generation) {
                        pick.items = pickItems(result.results, folders);
                    }
                } catch (error) {
                    if (mine === generation) {
                        pick.items = [];
                        pick.title = `tachy: ${String((error as Error).message ?? error)}`;
                    }
                } finally {
                    if (mine === generation) {
                        pick.busy = false;
                    }
                }
            }, 250);
        });
        pick.onDidAccept(async () => {
            const chosen = pick.selectedItems[0];
            pick.hide();
            if (chosen) {
                const r = chosen.item.range;
                const range = new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
                const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(chosen.item.uri));
                await vscode.window.showTextDocument(doc, { selection: new vscode.Range(range.start, range.start) });
                vscode.window.activeTextEditor?.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
            }
        });
        pick.onDidHide(() => {
            clearTimeout(timer);
            pick.dispose();
        });
        pick.show();
    }

    dispose(): void {
        clearTimeout(this.pollTimer);
        this.forwarder.dispose();
        this.disposables.forEach((d) => d.dispose());
    }
}

let tachy: Tachy | undefined;

export function activate(context: vscode.ExtensionContext) {
    const t = new Tachy(context);
    tachy = t;
    context.subscriptions.push(
        t,
        vscode.commands.registerCommand("tachy.search", () => t.search()),
        vscode.commands.registerCommand("tachy.ask", async (prompt?: unknown, include?: unknown) => {
            if (typeof prompt === "string" && prompt.trim()) {
                await t.view.reveal();
                const how = include === "selection" || include === "file" ? include : "none";
                return t.ask(prompt, how);
            }
            await t.view.reveal();
            return undefined;
        }),
        vscode.commands.registerCommand("tachy.askAboutSelection", async () => {
            const question = await vscode.window.showInputBox({ prompt: "Ask tachy about the selection" });
            if (question?.trim()) {
                await t.view.reveal();
                await t.ask(question, "selection");
            }
        }),
        vscode.commands.registerCommand("tachy.cancel", () => t.cancel()),
        vscode.commands.registerCommand("tachy.showEdit", async (arg?: unknown) => {
            const proposal = await t.review.resolve(arg, "show");
            if (proposal) {
                await t.review.show(proposal);
            }
        }),
        vscode.commands.registerCommand("tachy.acceptEdit", async (arg?: unknown) => {
            const proposal = await t.review.resolve(arg, "accept");
            return proposal ? t.review.decide(proposal, true) : false;
        }),
        vscode.commands.registerCommand("tachy.rejectEdit", async (arg?: unknown) => {
            const proposal = await t.review.resolve(arg, "reject");
            return proposal ? t.review.decide(proposal, false) : false;
        }),
        vscode.commands.registerCommand("tachy.acceptAllEdits", () => t.review.decideAll(true)),
        vscode.commands.registerCommand("tachy.rejectAllEdits", () => t.review.decideAll(false)),
        vscode.commands.registerCommand("tachy.restartServer", () => t.restart()),
        vscode.commands.registerCommand("tachy.showOutput", () => t.output.show(true)),
    );
    // Activation does not wait for the server (it may take a while to start, or fail).
    const ready = t.start();
    // For other extensions and end-to-end tests: the client and what the chat shows.
    return {
        ready,
        get client() {
            return t.client;
        },
        chat: t.chat,
        review: t.review.book,
    };
}

export async function deactivate(): Promise<void> {
    await tachy?.stop();
    tachy = undefined;
}
