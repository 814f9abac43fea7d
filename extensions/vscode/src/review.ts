// Agent edits in the editor: proposals shown as diffs, accepted or rejected by the
// user. The server applies an accepted edit (workspace/applyEdit) and writes the file;
// this side saves the buffer afterwards so the editor does not report a conflict.

import * as vscode from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";

import * as ext from "./lsp_ext";
import {
    changedBuffer,
    parseProposalQuery,
    ProposalBook,
    proposalQuery,
    proposedText,
    SCHEME,
} from "./proposals";

export class Review implements vscode.TextDocumentContentProvider, vscode.Disposable {
    readonly book = new ProposalBook();
    private readonly changed = new vscode.EventEmitter<vscode.Uri>();
    readonly onDidChange = this.changed.event;
    private readonly updated = new vscode.EventEmitter<ext.Proposal>();
    readonly onDidUpdate = this.updated.event; // a proposal arrived or changed state
    private readonly disposables: vscode.Disposable[] = [];

    constructor(private readonly client: () => LanguageClient | undefined) {
        this.disposables.push(vscode.workspace.registerTextDocumentContentProvider(SCHEME, this));
    }

    dispose(): void {
        this.disposables.forEach((d) => d.dispose());
        this.changed.dispose();
        this.updated.dispose();
    }

    // ------------------------------------------------ tachy/review/propose
    async onPropose(proposal: ext.Proposal): Promise<void> {
        const update = this.book.update(proposal);
        this.changed.fire(this.uriFor(proposal, "proposed"));
        this.updated.fire(proposal);
        if (proposal.state !== "pending") {
            await this.closeDiff(proposal.proposalId);
        }
        if (changedBuffer(update)) {
            await this.saveIfOpen(proposal.uri);
        }
        if (proposal.state === "failed" && proposal.message) {
            void vscode.window.showWarningMessage(`tachy: the edit to ${proposal.path} failed: ${proposal.message}`);
        }
    }

    private async saveIfOpen(uri: string): Promise<void> {
        const fsPath = vscode.Uri.parse(uri).fsPath;
        const doc = vscode.workspace.textDocuments.find((d) => d.uri.scheme === "file" && d.uri.fsPath === fsPath);
        if (doc?.isDirty) {
            await doc.save();
        }
    }

    /** Ask the server for the proposals still waiting (after a (re)start). */
    async resync(): Promise<void> {
        const client = this.client();
        if (!client) {
            return;
        }
        const list = await client.sendRequest(ext.reviewList, {});
        this.book.resync(list.proposals);
        list.proposals.forEach((p) => this.updated.fire(p));
    }

    // -------------------------------------------------------- the diff view
    uriFor(proposal: ext.Proposal, side: "proposed" | "original"): vscode.Uri {
        const path = `/${proposal.path.replace(/^\/+/, "")}`;
        return vscode.Uri.from({ scheme: SCHEME, path, query: proposalQuery(proposal.proposalId, side) });
    }

    async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
        const parsed = parseProposalQuery(uri.query);
        const proposal = parsed && this.book.get(parsed.id);
        if (!parsed || !proposal) {
            return "";
        }
        if (parsed.side === "original") {
            return "";
        }
        return proposedText(await this.currentText(proposal), proposal);
    }

    private async currentText(proposal: ext.Proposal): Promise<string> {
        const target = vscode.Uri.parse(proposal.uri);
        const open = vscode.workspace.textDocuments.find((d) => d.uri.toString() === target.toString());
        if (open) {
            return open.getText();
        }
        try {
            return new TextDecoder().decode(await vscode.workspace.fs.readFile(target));
        } catch {
            return "";
        }
    }

    async show(proposal: ext.Proposal): Promise<void> {
        const left = proposal.kind === "create" ? this.uriFor(proposal, "original") : vscode.Uri.parse(proposal.uri);
        const right = this.uriFor(proposal, "proposed");
        const what = { edit: "proposed edit", create: "new file", delete: "deleted" }[proposal.kind];
        await vscode.commands.executeCommand("vscode.diff", left, right, `${proposal.path} (tachy: ${what})`, {
            preview: true,
        });
    }

    private async closeDiff(proposalId: string): Promise<void> {
        const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter((tab) => {
            const input = tab.input;
            return (
                input instanceof vscode.TabInputTextDiff &&
                input.modified.scheme === SCHEME &&
                parseProposalQuery(input.modified.query)?.id === proposalId
            );
        });
        if (tabs.length) {
            await vscode.window.tabGroups.close(tabs);
        }
    }

    // ------------------------------------------------------------ decisions
    /** The proposal a command means: an id, a tachy-proposal: uri (the diff editor's
     * title buttons pass it), the only pending one, or the user's pick. */
    async resolve(arg: unknown, verb: string): Promise<ext.Proposal | undefined> {
        if (typeof arg === "string") {
            return this.book.get(arg);
        }
        if (arg instanceof vscode.Uri && arg.scheme === SCHEME) {
            const parsed = parseProposalQuery(arg.query);
            return parsed && this.book.get(parsed.id);
        }
        const pending = this.book.pending();
        if (pending.length === 0) {
            void vscode.window.showInformationMessage("tachy: no proposed edits are waiting for review.");
            return undefined;
        }
        if (pending.length === 1) {
            return pending[0];
        }
        const pick = await vscode.window.showQuickPick(
            pending.map((p) => ({ label: p.path, description: `${p.kind} · ${p.proposalId}`, proposal: p })),
            { placeHolder: `Which proposed edit to ${verb}?` },
        );
        return pick?.proposal;
    }

    async decide(proposal: ext.Proposal, accept: boolean): Promise<boolean> {
        const client = this.client();
        if (!client) {
            void vscode.window.showErrorMessage("tachy: the server is not running.");
            return false;
        }
        const type = accept ? ext.reviewAccept : ext.reviewReject;
        try {
            const result = await client.sendRequest(type, { proposalId: proposal.proposalId });
            if (!result.ok) {
                void vscode.window.showWarningMessage(
                    `tachy: could not ${accept ? "accept" : "reject"} the edit to ${proposal.path}: ${result.message ?? result.state}`,
                );
            }
            return result.ok;
        } catch (error) {
            void vscode.window.showErrorMessage(`tachy: ${String((error as Error).message ?? error)}`);
            return false;
        }
    }

    async decideAll(accept: boolean): Promise<void> {
        for (const proposal of this.book.pending()) {
            await this.decide(proposal, accept);
        }
    }
}
