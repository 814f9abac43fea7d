import assert from "node:assert/strict";
import { test } from "node:test";

import { changeAction, Effective, serverSettings } from "../src/settings";

function getter(values: Record<string, unknown>) {
    return <T>(key: string) => values[key] as T | undefined;
}

test("the server's settings, and only those", () => {
    const settings = serverSettings(
        getter({
            policy: " openai:http://localhost:8000/v1#m ",
            approval: "auto",
            maxTurns: 7,
            sandbox: "none",
            allowSecrets: true,
            "index.enabled": true,
            "index.dense": false,
            "index.embedder": "minilm",
            serverPath: "/x/tachy",
            pythonPath: "/x/python",
            "trace.server": "verbose",
        }),
    );
    assert.deepEqual(settings, {
        policy: "openai:http://localhost:8000/v1#m",
        approval: "auto",
        maxTurns: 7,
        sandbox: "none",
        allowSecrets: true,
        index: { enabled: true, dense: false, embedder: "minilm" },
    });
});

test("an unset policy is left out, so TACHY_POLICY still applies", () => {
    assert.equal("policy" in serverSettings(getter({ policy: null })), false);
    assert.equal("policy" in serverSettings(getter({ policy: "  " })), false);
});

test("values of the wrong kind are left to the server's defaults", () => {
    assert.deepEqual(
        serverSettings(
            getter({ approval: "sometimes", sandbox: 3, maxTurns: "9", "index.embedder": "bert" }),
        ),
        {},
    );
});

const base: Effective = {
    serverPath: "",
    pythonPath: "",
    trusted: true,
    settings: { approval: "review", sandbox: "auto", allowSecrets: false, maxTurns: 50 },
};

test("a change restarts the server only when the effective path settings change", () => {
    assert.deepEqual(changeAction(base, { ...base, serverPath: "/opt/tachy" }), { action: "restart", why: "tachy.serverPath changed" });
    assert.deepEqual(changeAction(base, { ...base, pythonPath: "/env/bin/python" }), { action: "restart", why: "tachy.pythonPath changed" });
    assert.deepEqual(changeAction(base, { ...base, trusted: false }), { action: "restart", why: "the workspace's trust changed" });
});

test("a workspace-scope change to a user-only setting changes nothing in effect: no restart, nothing sent", () => {
    // The effective values are read through trust.ts, which drops the workspace's
    // serverPath and sandbox: before and after are the same.
    assert.deepEqual(changeAction(base, structuredClone(base)), { action: "none" });
});

test("other effective changes are sent; a cleared policy restarts (TACHY_POLICY again)", () => {
    assert.deepEqual(changeAction(base, { ...base, settings: { ...base.settings, maxTurns: 9 } }), { action: "send" });
    assert.deepEqual(changeAction(base, { ...base, settings: { ...base.settings, sandbox: "bubblewrap" } }), { action: "send" });
    const withPolicy = { ...base, settings: { ...base.settings, policy: "replay:x.jsonl" } };
    assert.deepEqual(changeAction(withPolicy, base), { action: "restart", why: "tachy.policy was cleared" });
    assert.deepEqual(changeAction(base, withPolicy), { action: "send" });
});
