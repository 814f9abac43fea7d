import assert from "node:assert/strict";
import { test } from "node:test";

import { serverSettings } from "../src/settings";

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
