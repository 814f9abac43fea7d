"""Linters behind read_lints and edit_file: one Diagnostic shape, one stable format.

A Linter turns workspace files into Diagnostics. Ruff covers Python; another linter
is a class with `name`, `applies(path)` and `run(workspace, paths, sandbox)`. The
language server adds the diagnostics an editor forwards through `LintRunner.external`.

Linters run confined like the agent's commands (Sandbox.confine), with the commands'
scrubbed environment: a linter reads the workspace's own configuration, which the
model can write, so it must read nothing a command could not (a ruff.toml that
`extend`s a secret file sees /dev/null; `${OPENAI_API_KEY}` expands to nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import msgspec

from agent.sandbox import Sandbox
from agent.workspace import SANDBOX_MOUNT, Workspace, WorkspaceError


@dataclass(frozen=True, order=True)
class Diagnostic:
    path: str  # workspace-relative
    line: int
    column: int
    code: str
    message: str
    source: str = "ruff"


class LintError(Exception):
    """A linter could not run (bad configuration, missing binary)."""


class Linter(Protocol):
    name: str

    def applies(self, path: str) -> bool: ...

    def run(self, workspace: Workspace, paths: list[str], sandbox: Sandbox) -> list[Diagnostic]: ...


def find_executable(name: str) -> str | None:
    """A tool installed into this Python environment (ruff, rg), else one on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    from shutil import which

    return which(name)


class _RuffLocation(msgspec.Struct):
    row: int
    column: int


class _RuffMessage(msgspec.Struct):
    filename: str
    message: str
    location: _RuffLocation
    code: str | None = None


class RuffLinter:
    name = "ruff"
    suffixes = (".py", ".pyi")

    def __init__(self) -> None:
        self.binary = find_executable("ruff")

    def applies(self, path: str) -> bool:
        return path.endswith(self.suffixes)

    def run(self, workspace: Workspace, paths: list[str], sandbox: Sandbox) -> list[Diagnostic]:
        if not paths:
            return []
        if self.binary is None:
            raise LintError("ruff is not installed in tachy's environment")
        argv = [
            self.binary,
            "check",
            "--output-format=json",
            "--no-cache",
            "--exit-zero",
            "--no-fix",
        ]
        try:
            done = subprocess.run(
                sandbox.confine([*argv, "--", *paths]),
                cwd=workspace.root,
                capture_output=True,
                timeout=120,
                env=sandbox.env(),
            )
        except subprocess.TimeoutExpired:
            raise LintError("ruff did not finish within 120 s") from None
        if done.returncode != 0:
            message = (
                done.stderr.decode("utf-8", "replace")
                .strip()
                .replace(str(workspace.root) + "/", "")
                .replace(SANDBOX_MOUNT + "/", "")
            )
            raise LintError(f"ruff failed: {message[:2000]}")
        found = []
        for item in msgspec.json.decode(done.stdout or b"[]", type=list[_RuffMessage]):
            try:
                rel = workspace.relpath(item.filename)
            except WorkspaceError:
                continue
            found.append(
                Diagnostic(
                    rel,
                    item.location.row,
                    item.location.column,
                    item.code or "syntax-error",
                    item.message,
                )
            )
        return found


class LintRunner:
    def __init__(
        self,
        workspace: Workspace,
        linters: Iterable[Linter] | None = None,
        *,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.workspace = workspace
        self.linters = list(linters) if linters is not None else [RuffLinter()]
        # The agent's sandbox where there is one (the same limits and mode as its
        # commands); else a default one over the workspace.
        self.sandbox = sandbox if sandbox is not None else Sandbox(workspace)
        # Diagnostics from elsewhere (an editor's language servers), by path.
        self.external: Callable[[str], list[Diagnostic]] | None = None

    def lint(self, paths: list[str]) -> list[Diagnostic]:
        """Lint workspace-relative files; unknown file types are skipped."""
        found: set[Diagnostic] = set()
        for linter in self.linters:
            mine = [p for p in paths if linter.applies(p)]
            found.update(linter.run(self.workspace, mine, self.sandbox))
        if self.external is not None:
            for path in paths:
                found.update(self.external(path))
        visible = {p for p in {d.path for d in found} if self.workspace.is_visible(p, False)}
        return sorted(d for d in found if d.path in visible)

    def can_lint(self, path: str) -> bool:
        # A file counts for the editor's diagnostics only when it has some, so that a
        # run in the editor lints (and reports) the same files as one in training.
        if any(linter.applies(path) for linter in self.linters):
            return True
        return self.external is not None and bool(self.external(path))


def format_diagnostics(diagnostics: list[Diagnostic], limit: int = 200) -> str:
    """`path:line:col: CODE message`, one per line, sorted; capped at `limit` lines."""
    lines = [f"{d.path}:{d.line}:{d.column}: {d.code} {d.message}" for d in diagnostics[:limit]]
    if len(diagnostics) > limit:
        lines.append(f"[... {len(diagnostics) - limit} more problems not shown]")
    return "\n".join(lines)
