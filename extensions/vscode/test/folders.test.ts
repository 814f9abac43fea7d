import assert from "node:assert/strict";
import { test } from "node:test";

import { fallbackFolder } from "../src/folders";

test("with no workspace folder open, the active file's directory is indexed", () => {
    assert.equal(
        fallbackFolder({ workspaceFolders: [], activeFile: "/work/notes/calc.py", home: "/home/me" }),
        "/work/notes",
    );
    assert.equal(fallbackFolder({ workspaceFolders: [], activeFile: "/work/notes/../x/a.py" }), "/work/x");
});

test("open workspace folders win: the client sends them", () => {
    assert.equal(
        fallbackFolder({ workspaceFolders: ["file:///work/repo"], activeFile: "/work/notes/calc.py" }),
        undefined,
    );
    assert.equal(
        fallbackFolder({ workspaceFolders: ["vscode-vfs://github/x/y"], activeFile: "/work/notes/calc.py" }),
        undefined,
    );
});

test("no active file, or one in the home directory or at the root: no folder", () => {
    assert.equal(fallbackFolder({ workspaceFolders: [] }), undefined);
    const home = "/home/me";
    assert.equal(fallbackFolder({ workspaceFolders: [], activeFile: "/home/me/todo.py", home }), undefined);
    assert.equal(fallbackFolder({ workspaceFolders: [], activeFile: "/home/me/todo.py", home: "/home/me/" }), undefined);
    assert.equal(fallbackFolder({ workspaceFolders: [], activeFile: "/setup.py" }), undefined);
    assert.equal(fallbackFolder({ workspaceFolders: [], activeFile: "/home/me/p/a.py", home }), "/home/me/p");
});
