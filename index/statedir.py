"""tachy's own state in a workspace: `.tachy/` (the index, background-job logs, the
git-history check), made and used only as a real directory.

Commands the agent runs can write in the workspace. Where `.tachy` does not exist yet
(`tachy agent` or training on a plain folder), a command could make it a symlink, and
everything tachy then wrote "into its own directory" would land where the link points:
a job log over `~/.bashrc`, the index where commands read it. So `.tachy` and what lies
below it are made and opened here without following any symlink (index.beneath), and
one that is not a real directory is an error, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from index import beneath

STATE_DIR = ".tachy"
# Written into a new .tachy so that git (and the editor's source control view) leave
# tachy's state out of `git status`, as .pytest_cache and .ruff_cache do.
_GITIGNORE = "# tachy's own state (index, job logs); made by tachy\n*\n"


class StateDirError(OSError):
    """`.tachy` (or a directory tachy keeps in it) is not a real directory."""


def ensure(root: Path, sub: str = "") -> Path:
    """The directory `.tachy/sub` beneath `root`, made where missing, with no symlink
    followed on the way. Raises StateDirError when a symlink or a file is in the way."""
    rel = f"{STATE_DIR}/{sub}" if sub else STATE_DIR
    try:
        path = beneath.make_dirs(root, rel)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
            raise StateDirError(
                exc.errno,
                f"{rel} in {root} is not a real directory (a symbolic link or a file is "
                "in the way); tachy keeps its state only in a real directory: remove it, "
                "or give the index another place with --cache-dir",
            ) from None
        raise
    with contextlib.suppress(OSError):
        state = os.open(root / STATE_DIR, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(
                ".gitignore",
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=state,
            )
        finally:
            os.close(state)
        with os.fdopen(fd, "w") as handle:
            handle.write(_GITIGNORE)
    return path


def create_file(root: Path, rel: str) -> int:
    """A descriptor of `.tachy/rel`, created or emptied for writing; no symlink is
    followed (StateDirError where one is in the way)."""
    try:
        return beneath.create_file(root, f"{STATE_DIR}/{rel}")
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StateDirError(
                exc.errno, f"{STATE_DIR}/{rel} cannot be written: a symbolic link is in the way"
            ) from None
        raise


def read_file(root: Path, rel: str) -> bytes:
    """The bytes of `.tachy/rel`, read with no symlink followed (OSError otherwise)."""
    try:
        fd, _ = beneath.open_file(root, f"{STATE_DIR}/{rel}")
    except beneath.EscapeError:
        raise StateDirError(errno.ELOOP, f"{STATE_DIR}/{rel} leads outside {root}") from None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def set_aside(root: Path) -> str | None:
    """Move a `.tachy` that is not a real directory out of the way (renamed, never
    deleted: it may be the user's) so that a real one can take its place. Returns the
    name it now has, or None when there was nothing to move."""
    path = root / STATE_DIR
    try:
        if not os.path.islink(path) and os.path.isdir(path):
            return None
        if not os.path.lexists(path):
            return None
    except OSError:
        return None
    for n in range(1, 1000):
        aside = f"{STATE_DIR}.tachy-disabled" + (f"-{n}" if n > 1 else "")
        if not os.path.lexists(root / aside):
            os.rename(path, root / aside)
            return aside
    raise StateDirError(errno.EEXIST, f"cannot set {path} aside: too many earlier ones")
