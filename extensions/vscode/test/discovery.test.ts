import assert from "node:assert/strict";
import { test } from "node:test";

import { describeServer, DiscoveryError, findServer, insideWorkspace, PYTHON_SERVE, workspaceServers } from "../src/discovery";

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
    assert.deepEqual(found, { command: "/opt/tachy/bin/tachy", args: ["serve"], source: "serverPath" });
});

test("a serverPath that is not there is an error, not skipped", () => {
    assert.throws(
        () => findServer({ serverPath: "/nope/tachy", workspaceFolders: ["/w"], platform: "linux", isExecutable: fs("/w/.venv/bin/tachy") }),
        (e: unknown) => e instanceof DiscoveryError && /tachy\.serverPath \/nope\/tachy/.test(e.message),
    );
});

test("a relative serverPath or pythonPath is refused: it would resolve against the workspace", () => {
    const isExecutable = fs("/w/.venv/bin/tachy", ".venv/bin/tachy", "/w/.venv/bin/python", ".venv/bin/python");
    for (const [key, value] of [
        ["serverPath", ".venv/bin/tachy"],
        ["pythonPath", ".venv/bin/python"],
    ]) {
        assert.throws(
            () => findServer({ [key]: value, workspaceFolders: ["/w"], platform: "linux", isExecutable }),
            (e: unknown) => e instanceof DiscoveryError && e.message.includes(`tachy.${key} ${value} must be an absolute path`),
        );
    }
});

test("~ in a setting is the home directory", () => {
    const found = findServer({ serverPath: "~/bin/tachy", home: "/home/u", workspaceFolders: [], platform: "linux", isExecutable: fs("/home/u/bin/tachy") });
    assert.equal(found.command, "/home/u/bin/tachy");
});

test("pythonPath: the tachy script beside the interpreter, else python -c", () => {
    const beside = findServer({ pythonPath: "/env/bin/python", workspaceFolders: [], platform: "linux", isExecutable: fs("/env/bin/python", "/env/bin/tachy") });
    assert.deepEqual(beside, { command: "/env/bin/tachy", args: ["serve"], source: "pythonPath" });
    const bare = findServer({ pythonPath: "/env/bin/python", workspaceFolders: [], platform: "linux", isExecutable: fs("/env/bin/python") });
    assert.deepEqual(bare, { command: "/env/bin/python", args: ["-c", PYTHON_SERVE, "serve"], source: "pythonPath" });
    assert.throws(() => findServer({ pythonPath: "/missing/python", workspaceFolders: [], platform: "linux", isExecutable: fs() }), /tachy\.pythonPath/);
});

test("python -c drops the working directory (the workspace) from sys.path before importing", () => {
    // `python -c` puts '' first on sys.path: a planted server/cli.py in the workspace
    // would be imported and run on the host.
    assert.match(PYTHON_SERVE, /^import os, sys; sys\.path\[:\] = \[p for p in sys\.path if p and os\.path\.isabs\(p\)\]; from server\.cli import/);
});

test("a workspace's .venv/bin/tachy is never started: PATH is used, the planted one only reported", () => {
    const input = {
        workspaceFolders: ["/a", "/b"],
        envPath: "/usr/bin",
        platform: "linux" as const,
        isExecutable: fs("/b/.venv/bin/tachy", "/usr/bin/tachy"),
    };
    assert.deepEqual(findServer(input), { command: "/usr/bin/tachy", args: ["serve"], source: "PATH" });
    assert.deepEqual(workspaceServers(input), ["/b/.venv/bin/tachy"]);
});

test("only a planted .venv/bin/tachy: an error that names it and says what to set", () => {
    assert.throws(
        () => findServer({ workspaceFolders: ["/w"], envPath: "/usr/bin", platform: "linux", isExecutable: fs("/w/.venv/bin/tachy") }),
        (e: unknown) =>
            e instanceof DiscoveryError &&
            e.message.includes("no tachy server found on PATH") &&
            e.message.includes("/w/.venv/bin/tachy in the workspace is not started automatically") &&
            e.message.includes("tachy.serverPath in your user settings"),
    );
});

test("a PATH entry inside the workspace (an activated venv) is passed over and reported", () => {
    const input = {
        workspaceFolders: ["/w"],
        envPath: "/w/.venv/bin:/w/tools:/usr/bin",
        platform: "linux" as const,
        isExecutable: fs("/w/.venv/bin/tachy", "/w/tools/tachy", "/usr/bin/tachy"),
    };
    assert.equal(findServer(input).command, "/usr/bin/tachy");
    assert.deepEqual(workspaceServers(input), ["/w/.venv/bin/tachy", "/w/tools/tachy"]);
});

test("a PATH entry that leads into the workspace through a symlink is passed over too", () => {
    const links: Record<string, string> = { "/home/u/bin/tachy": "/w/.venv/bin/tachy" };
    const input = {
        workspaceFolders: ["/w"],
        envPath: "/home/u/bin:/usr/bin",
        platform: "linux" as const,
        isExecutable: fs("/home/u/bin/tachy", "/usr/bin/tachy"),
        realpath: (f: string) => links[f] ?? f,
    };
    assert.equal(findServer(input).command, "/usr/bin/tachy");
    assert.ok(insideWorkspace("/home/u/bin/tachy", input));
    assert.ok(!insideWorkspace("/usr/bin/tachy", input));
    assert.ok(!insideWorkspace("/wx/tachy", input), "a sibling folder with the same prefix is outside");
});

test("empty and relative PATH entries (the working directory) are never searched", () => {
    assert.throws(
        () => findServer({ workspaceFolders: [], envPath: ".::bin:./x", platform: "linux", isExecutable: fs("tachy", "bin/tachy", "x/tachy", "./x/tachy") }),
        DiscoveryError,
    );
});

test("Windows layout: PATH with ; and tachy.exe; the folder's Scripts\\tachy.exe only reported", () => {
    const input = {
        workspaceFolders: ["C:\\w"],
        envPath: "C:\\w\\.venv\\Scripts;C:\\tools",
        platform: "win32" as const,
        isExecutable: (f: string) => /Scripts[\\/]tachy\.exe$/.test(f) || /tools[\\/]tachy\.exe$/.test(f),
    };
    const found = findServer(input);
    assert.equal(found.source, "PATH");
    assert.match(found.command, /tools[\\/]tachy\.exe$/);
    assert.ok(workspaceServers(input).every((f) => /Scripts[\\/]tachy\.exe$/.test(f)));
});

test("nothing found: an error that says what was tried and what to set", () => {
    assert.throws(
        () => findServer({ workspaceFolders: ["/w"], envPath: "/usr/bin", platform: "linux", isExecutable: fs() }),
        (e: unknown) =>
            e instanceof DiscoveryError &&
            e.message.includes("no tachy server found on PATH") &&
            !e.message.includes("in the workspace") &&
            e.message.includes("tachy.serverPath"),
    );
});

test("the server is described with its path and where it came from", () => {
    assert.equal(describeServer({ command: "/usr/bin/tachy", args: ["serve"], source: "PATH" }), "/usr/bin/tachy serve (from tachy on PATH)");
    assert.equal(
        describeServer({ command: "/opt/t", args: ["serve"], source: "serverPath" }),
        "/opt/t serve (from tachy.serverPath in your user settings)",
    );
    assert.equal(
        describeServer({ command: "/env/bin/python", args: ["-c", PYTHON_SERVE, "serve"], source: "pythonPath" }),
        "/env/bin/python -c … serve (from tachy.pythonPath in your user settings)",
    );
});
