// The declarations load without VS Code and name exactly the methods in
// extensions/protocol/tachy.json, with the right kind (the field-by-field comparison
// is tests/extensions/test_protocol.py's).
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import * as lc from "vscode-languageserver-protocol";

import * as ext from "../src/lsp_ext";

const spec = JSON.parse(fs.readFileSync(path.join(__dirname, "../../../protocol/tachy.json"), "utf8"));

test("every tachy/* method is declared once, with its kind", () => {
    const declared: Record<string, string> = {};
    for (const value of Object.values(ext)) {
        if (value instanceof lc.RequestType) {
            declared[value.method] = "request";
        } else if (value instanceof lc.NotificationType) {
            declared[value.method] = "notification";
        }
    }
    const expected = Object.fromEntries(spec.methods.map((m: { name: string; kind: string }) => [m.name, m.kind]));
    assert.deepEqual(declared, expected);
});

test("the server's commands and the review capability", () => {
    assert.deepEqual([ext.askToFix.name], spec.commands.map((c: { name: string }) => c.name));
    assert.deepEqual(ext.experimentalCapabilities, { tachy: { review: true } });
});
