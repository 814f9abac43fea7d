import assert from "node:assert/strict";
import { test } from "node:test";

import type { Proposal } from "../src/lsp_ext";
import {
    applyTextEdits,
    changedBuffer,
    offsetAt,
    parseProposalQuery,
    ProposalBook,
    proposalQuery,
    proposedText,
} from "../src/proposals";

const r = (l1: number, c1: number, l2: number, c2: number) => ({ start: { line: l1, character: c1 }, end: { line: l2, character: c2 } });

function proposal(over: Partial<Proposal> = {}): Proposal {
    return {
        proposalId: "s/1",
        sessionId: "s",
        uri: "file:///w/calc.py",
        path: "calc.py",
        kind: "edit",
        state: "pending",
        edit: { changes: { "file:///w/calc.py": [{ range: r(2, 0, 3, 0), newText: "    return a + b\n" }] } },
        ...over,
    };
}

const CALC = 'def add(a, b):\n    """Add."""\n    return a - b\n';

test("offsets: lines, CRLF, past the end of a line or the text", () => {
    assert.equal(offsetAt("ab\ncd", 1, 1), 4);
    assert.equal(offsetAt("ab\r\ncd", 1, 0), 4);
    assert.equal(offsetAt("ab\ncd", 0, 99), 2);
    assert.equal(offsetAt("ab\ncd", 5, 0), 5);
    assert.equal(offsetAt("a😀b", 0, 3), 3); // UTF-16 code units, like LSP's default
});

test("edits apply against the original text, same-position inserts in order", () => {
    const text = "one\ntwo\nthree\n";
    const out = applyTextEdits(text, [
        { range: r(0, 0, 1, 0), newText: "" },
        { range: r(2, 0, 2, 0), newText: "A" },
        { range: r(2, 0, 2, 0), newText: "B" },
        { range: r(3, 0, 3, 0), newText: "four\n" },
    ]);
    assert.equal(out, "two\nABthree\nfour\n");
});

test("the proposed text from `changes` and from versioned `documentChanges`", () => {
    assert.equal(proposedText(CALC, proposal()), 'def add(a, b):\n    """Add."""\n    return a + b\n');
    const versioned = proposal({
        edit: {
            documentChanges: [
                { textDocument: { uri: "file:///w/other.py", version: 1 }, edits: [{ range: r(0, 0, 0, 0), newText: "x" }] },
                { textDocument: { uri: "file:///w/calc.py", version: 3 }, edits: [{ range: r(0, 0, 0, 3), newText: "async def" }] },
            ],
        },
    });
    assert.ok(proposedText(CALC, versioned).startsWith("async def add"));
});

test("a created file starts empty; a deleted one ends empty", () => {
    const create = proposal({
        kind: "create",
        edit: { documentChanges: [{ kind: "create", uri: "file:///w/calc.py" }, { textDocument: { uri: "file:///w/calc.py", version: null }, edits: [{ range: r(0, 0, 0, 0), newText: "new\n" }] }] },
    });
    assert.equal(proposedText("stale text", create), "new\n");
    assert.equal(proposedText(CALC, proposal({ kind: "delete", edit: { documentChanges: [{ kind: "delete", uri: "file:///w/calc.py" }] } })), "");
});

test("the book follows state changes; pending lists only what waits", () => {
    const book = new ProposalBook();
    book.update(proposal());
    book.update(proposal({ proposalId: "s/2", path: "b.py" }));
    book.update(proposal({ proposalId: "t/1", sessionId: "t" }));
    assert.deepEqual(book.pending().map((p) => p.proposalId), ["s/1", "s/2", "t/1"]);
    assert.deepEqual(book.pending("t").map((p) => p.proposalId), ["t/1"]);
    const update = book.update(proposal({ state: "applied" }));
    assert.equal(update.previous?.state, "pending");
    assert.deepEqual(book.pending().map((p) => p.proposalId), ["s/2", "t/1"]);
    book.resync([proposal({ proposalId: "u/9", sessionId: "u" })]);
    assert.deepEqual(book.pending().map((p) => p.proposalId), ["u/9"]);
    assert.equal(book.get("s/1")?.state, "applied"); // settled ones are kept for the chat
});

test("the buffer is saved once when an edit is applied or reverted", () => {
    assert.equal(changedBuffer({ previous: proposal(), current: proposal({ state: "applied" }) }), true);
    assert.equal(changedBuffer({ previous: undefined, current: proposal({ state: "applied" }) }), true); // auto approval
    assert.equal(changedBuffer({ previous: proposal({ state: "applied" }), current: proposal({ state: "applied" }) }), false);
    assert.equal(changedBuffer({ previous: proposal({ state: "applied" }), current: proposal({ state: "reverted" }) }), true);
    assert.equal(changedBuffer({ previous: proposal(), current: proposal({ state: "rejected" }) }), false);
    assert.equal(changedBuffer({ previous: proposal({ kind: "delete" }), current: proposal({ kind: "delete", state: "applied" }) }), false);
});

test("diff-view uris carry the proposal id, whatever characters it has", () => {
    assert.deepEqual(parseProposalQuery(proposalQuery("vscode-1/2 &x", "original")), { id: "vscode-1/2 &x", side: "original" });
    assert.equal(parseProposalQuery("side=proposed"), undefined);
});
