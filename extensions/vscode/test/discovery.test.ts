import assert from "node:assert/strict";
import { test } from "node:test";

import { DiscoveryError, findServer, PYTHON_SERVE } from "../src/discovery";

function fs(...executables: string[]) {
    const set = new Set(executables);
    return (file: string) => set.has(file);
}

test("tachy.serverPath wins over everything", () => {
    const found = findServer({
        serverPath: "/opt/tachy/bin/tachy",
        pythonPath: "/usr/bin/python3",
        workspaceFolders: ["/w"],
        envPath: "/usr/bin",
        platform: "linux",
        isExecutable: fs("/opt/tachy/bin/tachy", "/usr/bin/python3", "/w/.venv/bin/tachy", "/usr/bin/tachy"),
    });
    assert.deepEqual(found, { command: "/opt/tachy/bin/tachy", args: ["serve"], source: "tachy.serverPath" });
});

test("a serverPath that is not there is an error, not skipped", () => {
    assert.throws(
        () => findServer({ serverPath: "/nope/tachy", workspaceFolders: ["/w"], platform: "linux", isExecutable: fs("/w/.venv/bin/tachy") }),
        (e: unknown) => e instanceof DiscoveryError && /tachy\.serverPath \/nope\/tachy/.test(e.message),
    );
});

test("~ in a setting is the home directory", () => {
    const found = findServer({ serverPath: "~/bin/tachy", home: "/home/u", workspaceFolders: [], platform: "linux", isExecutable: fs("/home/u/bin/tachy") });
    assert.equal(found.command, "/home/u/bin/tachy");
});

test("pythonPath: the tachy script beside the interpreter, else python -c", () => {
    const beside = findServer({ pythonPath: "/env/bin/python", workspaceFolders: [], platform: "linux", isExecutable: fs("/env/bin/python", "/env/bin/tachy") });
    assert.deepEqual(beside, { command: "/env/bin/tachy", args: ["serve"], source: "tachy.pythonPath" });
    const bare = findServer({ pythonPath: "/env/bin/python", workspaceFolders: [], platform: "linux", isExecutable: fs("/env/bin/python") });
    assert.deepEqual(bare, { command: "/env/bin/python", args: ["-c", PYTHON_SERVE, "serve"], source: "tachy.pythonPath" });
    assert.throws(() => findServer({ pythonPath: "/missing/python", workspaceFolders: [], platform: "linux", isExecutable: fs() }), /tachy\.pythonPath/);
});

test("then each workspace folder's .venv, in order, then PATH", () => {
    const venv = findServer({ workspaceFolders: ["/a", "/b"], envPath: "/usr/bin", platform: "linux", isExecutable: fs("/b/.venv/bin/tachy", "/usr/bin/tachy") });
    assert.deepEqual(venv, { command: "/b/.venv/bin/tachy", args: ["serve"], source: ".venv" });
    const onPath = findServer({ workspaceFolders: ["/a"], envPath: "/usr/local/bin::/usr/bin", platform: "linux", isExecutable: fs("/usr/bin/tachy") });
    assert.deepEqual(onPath, { command: "/usr/bin/tachy", args: ["serve"], source: "PATH" });
});

test("Windows layout: Scripts\\tachy.exe", () => {
    const found = findServer({ workspaceFolders: ["/w"], platform: "win32", isExecutable: (f) => f.endsWith("Scripts/tachy.exe") || f.endsWith("Scripts\\tachy.exe") });
    assert.equal(found.source, ".venv");
    assert.match(found.command, /Scripts[\\/]tachy\.exe$/);
});

test("nothing found: an error that says what was tried and what to set", () => {
    assert.throws(
        () => findServer({ workspaceFolders: ["/w"], envPath: "/usr/bin", platform: "linux", isExecutable: fs() }),
        (e: unknown) =>
            e instanceof DiscoveryError &&
            e.message.includes("/w/.venv/bin/tachy") &&
            e.message.includes("tachy on PATH") &&
            e.message.includes("tachy.serverPath"),
    );
});
