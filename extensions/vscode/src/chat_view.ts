// The chat view (a WebviewView in the tachy side bar): the agent's runs as they
// stream in. The items come from chat.ts; media/chat.js lays them out.

import { randomBytes } from "node:crypto";
import * as vscode from "vscode";

import type { ChatItem, ChatLog } from "./chat";

export type FromWebview =
    | { type: "ready" }
    | { type: "ask"; prompt: string; include: "none" | "selection" | "file" }
    | { type: "cancel" }
    | { type: "clear" }
    | { type: "show" | "accept" | "reject"; proposalId: string };

export class ChatView implements vscode.WebviewViewProvider {
    static readonly id = "tachy.chat";
    private view?: vscode.WebviewView;
    private running = false;

    constructor(
        private readonly extensionUri: vscode.Uri,
        private readonly log: ChatLog,
        private readonly onMessage: (message: FromWebview) => void,
    ) {}

    resolveWebviewView(view: vscode.WebviewView): void {
        this.view = view;
        const media = vscode.Uri.joinPath(this.extensionUri, "media");
        view.webview.options = { enableScripts: true, localResourceRoots: [media] };
        view.webview.html = this.html(view.webview, media);
        view.webview.onDidReceiveMessage((message: FromWebview) => {
            if (message.type === "ready") {
                this.post({ type: "reset", items: this.log.items, running: this.running });
            } else {
                this.onMessage(message);
            }
        });
        view.onDidDispose(() => {
            this.view = undefined;
        });
    }

    get visible(): boolean {
        return this.view?.visible ?? false;
    }

    item(item: ChatItem): void {
        this.post({ type: "item", item });
    }

    reset(): void {
        this.post({ type: "reset", items: this.log.items, running: this.running });
    }

    setRunning(running: boolean): void {
        this.running = running;
        this.post({ type: "running", running });
    }

    async reveal(prefill?: string): Promise<void> {
        await vscode.commands.executeCommand(`${ChatView.id}.focus`);
        this.post({ type: "focus", prefill });
    }

    private post(message: unknown): void {
        void this.view?.webview.postMessage(message);
    }

    private html(webview: vscode.Webview, media: vscode.Uri): string {
        const nonce = randomBytes(16).toString("hex"); // only our script may run
        const script = webview.asWebviewUri(vscode.Uri.joinPath(media, "chat.js"));
        const style = webview.asWebviewUri(vscode.Uri.joinPath(media, "chat.css"));
        return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src ${webview.cspSource}; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link href="${style}" rel="stylesheet">
<title>tachy</title>
</head>
<body>
<div id="log" role="log" aria-live="polite"></div>
<form id="ask">
  <textarea id="prompt" rows="3" placeholder="Ask tachy to do something (Ctrl+Enter sends)"></textarea>
  <div class="row">
    <select id="include" title="What to send with the prompt">
      <option value="none">No context</option>
      <option value="selection">With the selection</option>
      <option value="file">With the active file</option>
    </select>
    <button id="send" type="submit">Ask</button>
    <button id="cancel" type="button" class="secondary" disabled>Cancel</button>
    <button id="clear" type="button" class="secondary" title="Clear the chat">Clear</button>
  </div>
</form>
<script nonce="${nonce}" src="${script}"></script>
</body>
</html>`;
    }
}
