// Starting the tachy server and the LanguageClient that talks to it.

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import * as lc from "vscode-languageclient/node";

import { DiscoveryError, DiscoveryInput, ServerCommand } from "./discovery";
import { fallbackFolder } from "./folders";
import { askToFix, experimentalCapabilities } from "./lsp_ext";
import { Effective, serverSettings } from "./settings";
import { effectiveGetter, Inspect, restrictedSettings } from "./trust";

function isExecutable(file: string): boolean {
    try {
        fs.accessSync(file, fs.constants.X_OK);
        return fs.statSync(file).isFile();
    } catch {
        return false;
    }
}

function realpath(file: string): string {
    try {
        return fs.realpathSync(file);
    } catch {
        return file;
    }
}

/** Whether this workspace is trusted (VS Code's workspace trust; without a folder,
 * or with trust turned off, it is). Untrusted: Restricted Mode (trust.ts). */
export function isTrusted(): boolean {
    return vscode.workspace.isTrusted;
}

/** The `tachy` section's values as inspect() gives them: trust.ts picks the scopes
 * that count (never config.get, which would take a workspace's value). */
export function tachyInspect(scope?: vscode.Uri): Inspect {
    const config = vscode.workspace.getConfiguration("tachy", scope);
    return (key) => config.inspect(key);
}

export function currentServerSettings(scope?: vscode.Uri) {
    const settings = serverSettings(effectiveGetter(tachyInspect(scope), isTrusted()));
    return isTrusted() ? settings : restrictedSettings(settings);
}

/** The values in effect now, to compare on a configuration change. */
export function currentEffective(): Effective {
    const get = effectiveGetter(tachyInspect(), isTrusted());
    return {
        serverPath: get<string>("serverPath")?.trim() ?? "",
        pythonPath: get<string>("pythonPath")?.trim() ?? "",
        trusted: isTrusted(),
        settings: currentServerSettings(),
    };
}

/** With no workspace folder open, the active file's directory (see folders.ts). */
export function singleFileFolder(): string | undefined {
    const active = vscode.window.activeTextEditor?.document.uri;
    return fallbackFolder({
        workspaceFolders: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.toString()),
        activeFile: active?.scheme === "file" ? active.fsPath : undefined,
        home: os.homedir(),
    });
}

/** The local folders the server works in: the open workspace folders, else the
 * single-file folder. */
export function serverFolders(): string[] {
    const open = (vscode.workspace.workspaceFolders ?? [])
        .filter((f) => f.uri.scheme === "file")
        .map((f) => f.uri.fsPath);
    const single = singleFileFolder();
    return open.length > 0 || !single ? open : [single];
}

/** What discovery looks at: the user's path settings (never a workspace's), the
 * folders it must not start anything from, PATH. */
export function discoveryInput(): DiscoveryInput {
    const get = effectiveGetter(tachyInspect(), isTrusted());
    return {
        serverPath: get<string>("serverPath"),
        pythonPath: get<string>("pythonPath"),
        workspaceFolders: serverFolders(),
        envPath: process.env.PATH,
        home: os.homedir(),
        isExecutable,
        realpath,
    };
}

// Declares {"tachy": {"review": true}}: the server then sends proposals with
// tachy/review/propose (which this extension shows as diffs) instead of asking with
// window/showMessageRequest.
class ReviewCapability implements lc.StaticFeature {
    fillClientCapabilities(capabilities: lc.ClientCapabilities): void {
        capabilities.experimental = { ...(capabilities.experimental as object), ...experimentalCapabilities };
    }
    initialize(): void {}
    getState(): lc.FeatureState {
        return { kind: "static" };
    }
    clear(): void {}
}

/** Handles the server's workspace/applyEdit as vscode-languageclient does, then saves
 * the open documents it changed before answering. The server writes the same text to
 * the file once we answer (the agent's commands read the disk); saved first, the
 * buffer is clean when that write lands, so VS Code takes it silently instead of
 * reporting the file as changed on disk. Register it before the client starts: the
 * client adds registered handlers after its own, so this one wins. */
export function saveAppliedEdits(client: lc.LanguageClient): vscode.Disposable {
    return client.onRequest(lc.ApplyWorkspaceEditRequest.type, async (params) => {
        const open = new Map(vscode.workspace.textDocuments.map((d) => [d.uri.toString(), d]));
        for (const change of params.edit.documentChanges ?? []) {
            if (lc.TextDocumentEdit.is(change) && typeof change.textDocument.version === "number") {
                const doc = open.get(client.protocol2CodeConverter.asUri(change.textDocument.uri).toString());
                if (doc && doc.version !== change.textDocument.version) {
                    return {
                        applied: false,
                        failureReason: `${doc.uri.fsPath} changed (version ${doc.version}, the edit is for ${change.textDocument.version})`,
                    };
                }
            }
        }
        const edit = await client.protocol2CodeConverter.asWorkspaceEdit(params.edit);
        const applied = await vscode.workspace.applyEdit(edit);
        if (applied) {
            for (const [uri] of edit.entries()) {
                const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
                if (doc?.isDirty) {
                    await doc.save();
                }
            }
        }
        return { applied };
    });
}

export interface ClientHooks {
    // workspace/executeCommand of a server command (tachy.askToFix), with its result.
    onCommandResult(command: string, result: unknown): void;
    // A command that would start an agent run, refused in Restricted Mode.
    onRefused(command: string): void;
}

/** A server command or code action that starts an agent run. */
function startsRun(item: vscode.Command | vscode.CodeAction): boolean {
    const command = item.command; // a Command's id, or a CodeAction's Command
    return (typeof command === "string" ? command : command?.command) === askToFix.name;
}

export function createClient(
    command: ServerCommand,
    output: vscode.OutputChannel,
    hooks: ClientHooks,
): lc.LanguageClient {
    const cwd = serverFolders()[0];
    // No folder open: the client is locked to the active file's directory, sent as the
    // workspace folder (the server alone would take the first opened file's).
    const single = singleFileFolder();
    const server: lc.Executable = {
        command: command.command,
        args: command.args,
        // No `transport`: the client would append --stdio, which `tachy serve` refuses
        // (stdio is its default).
        options: { cwd, env: process.env },
    };
    const options: lc.LanguageClientOptions = {
        // Every file: the server indexes the unsaved text of open documents and the
        // agent reads it.
        documentSelector: [{ scheme: "file" }],
        outputChannel: output,
        traceOutputChannel: output,
        revealOutputChannelOn: lc.RevealOutputChannelOn.Never,
        workspaceFolder: single
            ? { uri: vscode.Uri.file(single), name: path.basename(single), index: 0 }
            : undefined,
        initializationOptions: () => currentServerSettings(),
        middleware: {
            workspace: {
                // Answer the `tachy` section with the server's settings only: the
                // extension's own (serverPath, trace, ...) would be reported as unknown.
                configuration: async (params, token, next) => {
                    const values = await next(params, token);
                    if (!Array.isArray(values)) {
                        return values;
                    }
                    return values.map((value, i) => {
                        const item = params.items[i];
                        if (item?.section !== "tachy") {
                            return value;
                        }
                        const scope = item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined;
                        return currentServerSettings(scope);
                    });
                },
            },
            // Restricted Mode: no agent run starts (ask() in extension.ts refuses
            // tachy/agent/run), so the server's "Ask tachy to fix" is neither offered
            // nor run.
            provideCodeActions: async (document, range, context, token, next) => {
                const actions = await next(document, range, context, token);
                return isTrusted() || !actions ? actions : actions.filter((a) => !startsRun(a));
            },
            executeCommand: async (name, args, next) => {
                if (!isTrusted() && name === askToFix.name) {
                    hooks.onRefused(name);
                    return undefined;
                }
                const result = await next(name, args);
                hooks.onCommandResult(name, result);
                return result;
            },
        },
    };
    const client = new lc.LanguageClient("tachy", "tachy", server, options);
    client.registerFeature(new ReviewCapability());
    return client;
}

export { DiscoveryError };
