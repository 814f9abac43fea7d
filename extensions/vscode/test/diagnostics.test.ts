import assert from "node:assert/strict";
import { test } from "node:test";

import { DiagnosticsForwarder, diagnosticsParams, EditorDiagnostic, toLsp } from "../src/diagnostics";
import type { DiagnosticsParams } from "../src/lsp_ext";

const range = { start: { line: 1, character: 2 }, end: { line: 1, character: 5 } };

test("VS Code diagnostics become LSP ones (severity +1, code values)", () => {
    assert.deepEqual(toLsp({ range, message: "bad", severity: 0, code: { value: "E501", target: {} }, source: "ruff" }), {
        range, message: "bad", severity: 1, code: "E501", source: "ruff",
    });
    assert.deepEqual(toLsp({ range, message: "hint", severity: 3, code: 42 }), { range, message: "hint", severity: 4, code: 42 });
    assert.deepEqual(toLsp({ range, message: "plain" }), { range, message: "plain" });
});

test("tachy's own diagnostics are not sent back", () => {
    const params = diagnosticsParams("file:///w/a.py", [
        { range, message: "from pyright", source: "Pylance" },
        { range, message: "ours", source: "tachy" },
    ]);
    assert.deepEqual(params.diagnostics.map((d) => d.message), ["from pyright"]);
});

class FakeTimers {
    pending: (() => void)[] = [];
    cleared = 0;
    setTimeout(fn: () => void): unknown {
        this.pending.push(fn);
        return this.pending.length - 1;
    }
    clearTimeout(handle: unknown): void {
        if (typeof handle === "number" && this.pending[handle]) {
            this.pending[handle] = () => {};
            this.cleared++;
        }
    }
    runAll(): void {
        const fns = this.pending;
        this.pending = [];
        fns.forEach((fn) => fn());
    }
}

test("changes are debounced, deduplicated and sent once per file", () => {
    const store = new Map<string, EditorDiagnostic[]>();
    const sent: DiagnosticsParams[] = [];
    const timers = new FakeTimers();
    const fwd = new DiagnosticsForwarder((uri) => store.get(uri) ?? [], (p) => sent.push(p), 500, timers);

    store.set("file:///w/a.py", [{ range, message: "one", severity: 0, source: "mypy" }]);
    fwd.changed(["file:///w/a.py"]);
    fwd.changed(["file:///w/a.py", "untitled:Untitled-1", "git:/w/a.py"]);
    assert.equal(sent.length, 0, "nothing is sent before the editor is quiet");
    assert.equal(timers.cleared, 1, "a new change restarts the wait");
    timers.runAll();
    assert.deepEqual(sent.map((p) => p.uri), ["file:///w/a.py"], "only file: uris, once");

    fwd.changed(["file:///w/a.py"]);
    timers.runAll();
    assert.equal(sent.length, 1, "unchanged diagnostics are not sent again");

    store.set("file:///w/a.py", []);
    fwd.changed(["file:///w/a.py", "file:///w/clean.py"]);
    timers.runAll();
    assert.deepEqual(sent[1], { uri: "file:///w/a.py", diagnostics: [] }, "a cleared file is sent empty");
    assert.equal(sent.length, 2, "a file that never had diagnostics is not sent");

    store.set("file:///w/a.py", [{ range, message: "two" }]);
    fwd.changed(["file:///w/a.py"]);
    fwd.reset();
    fwd.flush();
    assert.equal(sent.length, 3);
});
