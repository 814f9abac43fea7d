import assert from "node:assert/strict";
import { test } from "node:test";

import type { IndexState, IndexStatusResult } from "../src/lsp_ext";
import { pickItems, relativePath } from "../src/search_items";
import { pollDelayMs, statusView } from "../src/status";

function index(state: IndexState, error = ""): IndexStatusResult {
    return { state, files: 12, chunks: 40, embedded: 10, folders: [{ uri: "file:///w", state, files: 12, chunks: 40, embedded: 10, error }] };
}

test("the status bar tells the index state, runs and pending edits", () => {
    assert.equal(statusView({ server: "running", index: index("ready"), running: 0, pending: 0, dense: true }).text, "$(check) tachy");
    assert.equal(statusView({ server: "running", index: index("indexing"), running: 0, pending: 0, dense: true }).text, "$(sync~spin) tachy: indexing 12 files");
    const busy = statusView({ server: "running", index: index("ready"), running: 1, pending: 2, dense: true });
    assert.equal(busy.text, "$(loading~spin) tachy: agent running, 2 edits to review");
    assert.equal(busy.command, "tachy.showEdit");
    const failed = statusView({ server: "running", index: index("failed", "disk full"), running: 0, pending: 0, dense: true });
    assert.match(failed.text, /index failed/);
    assert.match(failed.tooltip, /disk full/);
    assert.equal(statusView({ server: "failed", running: 0, pending: 0, dense: true }).command, "tachy.showOutput");
    assert.equal(statusView({ server: "stopped", running: 0, pending: 0, dense: true }).command, "tachy.restartServer");
});

test("the index is polled often only while it changes", () => {
    assert.equal(pollDelayMs(index("indexing"), true), 2000);
    assert.equal(pollDelayMs(index("lexical"), true), 2000);
    assert.equal(pollDelayMs(index("lexical"), false), 30000);
    assert.equal(pollDelayMs(index("ready"), true), 30000);
    assert.equal(pollDelayMs(undefined, false), 2000);
});

test("search results as quick-pick items, paths relative to their folder", () => {
    assert.equal(relativePath("file:///w/sub/src/a%20b.py", ["file:///w", "file:///w/sub"]), "src/a b.py");
    assert.equal(relativePath("file:///elsewhere/x.py", ["file:///w"]), "/elsewhere/x.py");
    const [withSymbol, plain] = pickItems(
        [
            { uri: "file:///w/calc.py", range: { start: { line: 0, character: 0 }, end: { line: 3, character: 0 } }, score: 1, snippet: "\ndef add(a, b):\n", symbol: "add" },
            { uri: "file:///w/README.md", range: { start: { line: 9, character: 0 }, end: { line: 12, character: 0 } }, score: 0.5, snippet: "# Adding" },
        ],
        ["file:///w"],
    );
    assert.deepEqual([withSymbol.label, withSymbol.description, withSymbol.detail], ["$(symbol-function) add", "calc.py:1", "def add(a, b):"]);
    assert.deepEqual([plain.label, plain.description], ["$(file-code) README.md:10", ""]);
    // The query is not the label: VS Code's own filtering would hide every result.
    assert.ok(withSymbol.alwaysShow && plain.alwaysShow);
});

test("the tooltip says which server runs and where it came from, in every state", () => {
    const origin = "/usr/bin/tachy serve (from tachy on PATH)";
    for (const server of ["running", "starting", "stopped", "failed"] as const) {
        const view = statusView({ server, index: index("ready"), running: 0, pending: 0, dense: true, origin });
        assert.match(view.tooltip, /Server: \/usr\/bin\/tachy serve \(from tachy on PATH\)/, server);
    }
    const pending = statusView({ server: "running", index: index("ready"), running: 0, pending: 1, dense: true, origin });
    assert.match(pending.tooltip, /Server: \/usr\/bin\/tachy/);
    assert.equal(statusView({ server: "running", running: 0, pending: 0, dense: true }).tooltip, "tachy");
});

test("Restricted Mode shows in the status bar and its tooltip", () => {
    const view = statusView({ server: "running", index: index("ready"), running: 0, pending: 0, dense: true, restricted: true });
    assert.equal(view.text, "$(check) tachy: restricted");
    assert.match(view.tooltip, /Restricted Mode .*the agent is off/);
    assert.doesNotMatch(statusView({ server: "running", index: index("ready"), running: 0, pending: 0, dense: true }).tooltip, /Restricted/);
});
