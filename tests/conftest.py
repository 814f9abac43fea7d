"""Shared fixtures: a small real workspace and a way to call tools the way the
executor does (parse → bind → run → render)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Triton decides at import whether its kernels run compiled or in the interpreter, so
# the choice is made here, before any test imports them: without a GPU, every Triton
# kernel runs under the interpreter (small shapes). kernels.use_triton() reads the
# variable at call time, so a test takes the plain-torch path with the `torch_path`
# fixture below.
if not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

from agent.lints import LintRunner
from agent.parser import RawCall
from agent.render import render_result
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ALL_TOOLS, BindError, ToolContext, ToolError, bind_args
from agent.workspace import Workspace, WorkspaceError

HAS_BWRAP = shutil.which("bwrap") is not None
TOOLS = {tool.name: tool() for tool in ALL_TOOLS}


def make_repo(root: Path) -> Path:
    """A tiny Python project with tests, ignore rules and a secret."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "calc.py").write_text(
        "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    (root / "src" / "__init__.py").write_text("")
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(
        "from src.calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n"
    )
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "build").mkdir()
    (root / "build" / "out.txt").write_text("generated\n")
    (root / "debug.log").write_text("log line\n")
    (root / ".env").write_text("API_KEY=hunter2\n")
    (root / "README.md").write_text("# demo\n")
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def make_context(root: Path, **sandbox_options) -> ToolContext:
    workspace = Workspace(root)
    sandbox = Sandbox(workspace, SandboxConfig(**sandbox_options))
    return ToolContext(
        workspace=workspace, sandbox=sandbox, linters=LintRunner(workspace, sandbox=sandbox)
    )


@pytest.fixture
def ctx(repo: Path) -> ToolContext:
    return make_context(repo)


async def call_tool(ctx: ToolContext, name: str, **params: str) -> tuple[bool, str]:
    """Run one tool call as the executor would; returns (is_error, rendered content)."""
    tool = TOOLS[name]
    raw = RawCall(index=0, name=name, params={k: str(v) for k, v in params.items()})
    try:
        args = bind_args(tool, raw)
        content, is_error = await tool.run(args, ctx), False
    except (BindError, ToolError, WorkspaceError) as exc:
        content, is_error = str(exc), True
    return is_error, render_result(content, is_error)


@pytest.fixture
def torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dispatch kernels.* ops to their plain-torch path (as on a CPU without the
    Triton interpreter)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
