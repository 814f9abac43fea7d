"""Helpers shared by the tool, workspace and sandbox tests (fixtures live in conftest)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from agent.lints import LintRunner
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ToolContext
from agent.workspace import Workspace
from tests.conftest import call_tool


def context_with(root: Path, *, allow_secrets: bool = False, **sandbox_options) -> ToolContext:
    """make_context, with the workspace options the shared fixture does not expose."""
    workspace = Workspace(root, allow_secrets=allow_secrets)
    sandbox = Sandbox(workspace, SandboxConfig(**sandbox_options))
    return ToolContext(
        workspace=workspace, sandbox=sandbox, linters=LintRunner(workspace, sandbox=sandbox)
    )


async def ok(ctx: ToolContext, name: str, **params) -> str:
    """Call a tool that must succeed; returns its rendered content."""
    is_error, content = await call_tool(ctx, name, **params)
    assert not is_error, content
    return content


async def fails(ctx: ToolContext, name: str, **params) -> str:
    """Call a tool that must fail; returns its rendered content (it starts 'Error: ')."""
    is_error, content = await call_tool(ctx, name, **params)
    assert is_error, content
    assert content.startswith("Error: "), content
    return content


def marker() -> str:
    """A number no other process on the machine has on its command line."""
    return f"{uuid.uuid4().int % 10**9 + 10**9}"


def processes_with(text: str) -> list[int]:
    """Live (not zombie) processes whose command line contains `text`."""
    found = []
    needle = text.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


async def eventually(predicate, attempts: int = 250, pause: float = 0.02) -> bool:
    """Poll `predicate` until it holds (a bounded wait for asynchronous effects, such as
    a killed process finishing its exit). Returns whether it held."""
    for _ in range(attempts):
        if predicate():
            return True
        await asyncio.sleep(pause)
    return bool(predicate())
