import assert from "node:assert/strict";
import { test } from "node:test";

import { buildPrompt, ChatLog, clip, prose, renderEvent, toolTitle } from "../src/chat";
import type { Proposal, TranscriptEvent } from "../src/lsp_ext";

test("each transcript event becomes the item the chat shows", () => {
    assert.deepEqual(renderEvent("s", { event: "run_start", prompt: "fix add", tools: [] }), { kind: "user", sessionId: "s", text: "fix add" });
    const turn = 'Let me look.\n<tool_call name="read_file">\n<path>calc.py</path>\n</tool_call>';
    assert.deepEqual(renderEvent("s", { event: "assistant", turn: 0, text: turn }), { kind: "assistant", sessionId: "s", text: "Let me look." });
    assert.equal(renderEvent("s", { event: "assistant", turn: 1, text: '<tool_call name="x">\n</tool_call>\n' }), undefined);
    assert.deepEqual(renderEvent("s", { event: "tool_result", call_id: "c1", tool: "grep", is_error: true, content: "bad regex" }), {
        kind: "result", sessionId: "s", callId: "c1", tool: "grep", isError: true, text: "bad regex",
    });
    assert.deepEqual(renderEvent("s", { event: "final", text: "Fixed add.", stop_reason: "end_turn" }), {
        kind: "final", sessionId: "s", text: "Fixed add.", stopReason: "end_turn",
    });
    assert.deepEqual(renderEvent("s", { event: "todos", todos: [{ content: "read", status: "completed" }] }), {
        kind: "todos", sessionId: "s", todos: [{ content: "read", status: "completed" }],
    });
    // A kind a newer server sends and this client does not know: not shown.
    assert.equal(renderEvent("s", { event: "something_new" } as unknown as TranscriptEvent), undefined);
});

test("edits show as diffs", () => {
    const item = renderEvent("s", {
        event: "tool_call", call_id: "c2", tool: "edit_file",
        args: { path: "calc.py", old_string: "    return a - b", new_string: "    return a + b" },
    });
    assert.deepEqual(item, {
        kind: "tool", sessionId: "s", callId: "c2", tool: "edit_file", title: "edit_file calc.py",
        diff: [{ op: "-", text: "    return a - b" }, { op: "+", text: "    return a + b" }],
    });
    const write = renderEvent("s", { event: "tool_call", call_id: "c3", tool: "write_file", args: { path: "n.py", content: "x = 1" } });
    assert.deepEqual(write && write.kind === "tool" && write.diff, [{ op: "+", text: "x = 1" }]);
});

test("tool titles name the main argument", () => {
    assert.equal(toolTitle("read_file", { path: "a.py", start_line: 3, end_line: 9 }), "read_file a.py:3-9");
    assert.equal(toolTitle("run_terminal_cmd", { command: "pytest -q\necho done" }), "run_terminal_cmd pytest -q");
    assert.equal(toolTitle("todo_write", { todos: "- [ ] x" }), "todo_write");
});

test("long output is clipped, saying how much was left out", () => {
    const text = Array.from({ length: 100 }, (_, i) => `line ${i}`).join("\n");
    const out = clip(text, 10);
    assert.equal(out.split("\n").length, 11);
    assert.match(out, /… \(90 more lines\)$/);
    assert.match(clip("x".repeat(50), 10, 20), /… \(30 more characters\)$/);
    assert.equal(prose("  just words \n"), "just words");
});

test("the log keeps order, drops repeated seqs and updates a proposal in place", () => {
    const log = new ChatLog(5);
    log.event("s", 0, { event: "run_start", prompt: "p", tools: [] });
    assert.equal(log.event("s", 0, { event: "run_start", prompt: "p", tools: [] }), undefined);
    const p: Proposal = { proposalId: "s/1", sessionId: "s", uri: "file:///w/a", path: "a", kind: "edit", state: "pending", edit: {} };
    log.proposal(p);
    log.event("s", 1, { event: "final", text: "done", stop_reason: "end_turn" });
    log.proposal({ ...p, state: "applied" });
    assert.deepEqual(log.items.map((i) => i.kind), ["user", "proposal", "final"]);
    assert.equal(log.items[1].kind === "proposal" && log.items[1].state, "applied");
    for (let seq = 2; seq < 10; seq++) {
        log.event("s", seq, { event: "assistant", turn: seq, text: `t${seq}` });
    }
    assert.equal(log.items.length, 5);
});

test("a final answer that repeats the last message says so", () => {
    const log = new ChatLog();
    log.event("s", 0, { event: "assistant", turn: 0, text: "Fixed add." });
    const final = log.event("s", 1, { event: "final", text: "Fixed add.", stop_reason: "end_turn" });
    assert.equal(final?.kind === "final" && final.repeats, true);
    log.event("t", 0, { event: "assistant", turn: 0, text: "Looking." });
    const other = log.event("t", 1, { event: "final", text: "Out of turns.", stop_reason: "max_turns" });
    assert.equal(other?.kind === "final" && other.repeats, false);
});

test("the prompt carries the selection or the file when asked to", () => {
    const ctx = { path: "src/a.py", language: "python", selection: { text: "x = 1", startLine: 3, endLine: 3 }, fileText: "x = 1\n" };
    assert.equal(buildPrompt("why?", ctx, "none"), "why?");
    assert.equal(buildPrompt("why?", ctx, "selection"), "why?\n\nThe selection in src/a.py (lines 3-3):\n```python\nx = 1\n```");
    assert.equal(buildPrompt("why?", ctx, "file"), "why?\n\nThe file src/a.py:\n```python\nx = 1\n```");
    assert.equal(buildPrompt("why?", { path: "big.py" }, "file"), "why?\n\n(The file open in the editor: big.py.)");
    assert.match(buildPrompt("q", { ...ctx, selection: { text: "```", startLine: 1, endLine: 1 } }, "selection"), /````python\n```\n````$/);
});
