"""Programs tachy itself runs on the host (git for the history check, bubblewrap,
prlimit): found on PATH, but never in the workspace.

The language server's working directory is often the workspace, and a developer's
PATH often holds the project's own environment (`.venv/bin`, or `.` and other
relative entries). The agent's commands can write there, so a `git` they plant would
run on the host, outside any sandbox. Relative PATH entries and entries that lie in
the workspace are left out.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def host_path(workspace: Path | None) -> str:
    """PATH without relative entries and without entries inside `workspace`."""
    root = os.path.realpath(workspace) if workspace is not None else None
    kept = []
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        if root is not None:
            real = os.path.realpath(entry)
            if real == root or real.startswith(root.rstrip("/") + "/"):
                continue
        kept.append(entry)
    return os.pathsep.join(kept)


def host_which(name: str, workspace: Path | None = None) -> str | None:
    """The program `name` from PATH as host_path leaves it, or None."""
    return shutil.which(name, path=host_path(workspace))
