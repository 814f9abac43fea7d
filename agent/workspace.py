"""The workspace: the one directory tree the agent may read and change.

Every tool goes through `Workspace` for paths and file I/O, so the rules hold
everywhere: a path never escapes the root (`..`, absolute paths, symlinks pointing
out), ignored and secret files stay invisible, and every change records a checkpoint
so a run can be reverted file by file. The language server subclasses it to read
unsaved editor buffers and to route edits through the editor's review flow; the
trainer uses it as is on a sandbox copy.
"""

from __future__ import annotations

import os
import posixpath
import threading
from pathlib import Path

from index.ignore import IgnoreRules, is_secret_name, walk_visible

# Where the terminal sandbox mounts the workspace; paths the model copies from command
# output (e.g. tracebacks) are accepted by the file tools too.
SANDBOX_MOUNT = "/workspace"
# Where background commands write their output; readable although .tachy/ is hidden.
JOBS_DIR = ".tachy/jobs"


def _in_jobs_dir(rel: str) -> bool:
    return rel.startswith(JOBS_DIR + "/")


class WorkspaceError(Exception):
    """A request the workspace refuses. The message is shown to the model as is, so it
    names workspace-relative paths only."""


class Workspace:
    def __init__(self, root: str | os.PathLike[str], *, allow_secrets: bool = False) -> None:
        root_path = Path(root)
        if not root_path.is_dir():
            raise WorkspaceError(f"workspace {root} is not a directory")
        self.root = root_path.resolve()
        self.allow_secrets = allow_secrets
        self.rules = IgnoreRules(self.root)
        # Original bytes of each file before the agent first touched it (None: it did
        # not exist). Guarded by a lock because tools run on worker threads.
        self.checkpoints: dict[str, bytes | None] = {}
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- paths
    def relpath(self, path: str) -> str:
        """Normalise a path given by the model to a '/'-separated path relative to the
        root ('' for the root itself). Raises WorkspaceError when it leaves the root."""
        if not isinstance(path, str) or "\x00" in path:
            raise WorkspaceError("path must be text without NUL bytes")
        raw = path.strip().replace("\\", "/")
        if raw in ("", ".", "./"):
            return ""
        if raw == SANDBOX_MOUNT or raw.startswith(SANDBOX_MOUNT + "/"):
            raw = raw[len(SANDBOX_MOUNT) :].lstrip("/")
        elif raw.startswith("/"):
            root = self.root.as_posix()
            if raw == root or raw.startswith(root + "/"):
                raw = raw[len(root) :].lstrip("/")
            else:
                raise WorkspaceError(
                    f"{path} is outside the workspace; use a path relative to the workspace root"
                )
        normal = posixpath.normpath(raw)
        if normal == ".":
            return ""
        if normal == ".." or normal.startswith("../"):
            raise WorkspaceError(f"{path} is outside the workspace")
        # Symlinks anywhere along the path must not lead out of the root.
        real = Path(os.path.realpath(self.root / normal))
        if real != self.root and self.root not in real.parents:
            raise WorkspaceError(
                f"{path} resolves (through a symlink) to a place outside the workspace"
            )
        return normal

    def abspath(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def is_visible(self, rel: str, is_dir: bool | None = None) -> bool:
        """True unless `rel` (or the file a symlink points to) is ignored or secret.

        Background jobs' logs (.tachy/jobs/) are visible although .tachy/ is hidden;
        a symlink placed there is still judged by what it points to.
        """
        if rel == "":
            return True
        if is_dir is None:
            is_dir = self.abspath(rel).is_dir()
        if not _in_jobs_dir(rel):
            if self.rules.is_ignored(rel, is_dir):
                return False
            if not is_dir and not self.allow_secrets and is_secret_name(posixpath.basename(rel)):
                return False
        real = Path(os.path.realpath(self.abspath(rel)))
        if real != self.abspath(rel) and real != self.root:
            if self.root not in real.parents:
                return False  # a symlink out of the workspace
            target = real.relative_to(self.root).as_posix()
            if not _in_jobs_dir(target) and self.rules.is_ignored(target, is_dir):
                return False
            if not is_dir and not self.allow_secrets and is_secret_name(real.name):
                return False
        return True

    def resolve(self, path: str, *, kind: str = "any") -> str:
        """Validate a model-given path for use: inside the root and visible.

        kind: "file" (must be an existing file), "dir" (an existing directory),
        "new" (may not exist yet; must not be a directory), or "any".
        """
        rel = self.relpath(path)
        shown = rel or "."
        target = self.abspath(rel)
        exists = target.exists()
        is_dir = target.is_dir()
        if not self.is_visible(rel, is_dir if exists else False):
            if not is_dir and (
                is_secret_name(posixpath.basename(rel))
                or is_secret_name(os.path.basename(os.path.realpath(target)))
            ):
                raise WorkspaceError(
                    f"{shown} looks like a secret file (credentials, keys); tachy keeps it "
                    "away from the model unless the user allows secrets"
                )
            raise WorkspaceError(f"{shown} is excluded by .gitignore/.tachyignore rules")
        if exists and not is_dir and not target.is_file():
            # Reading a FIFO would block forever; devices and sockets are no text.
            raise WorkspaceError(f"{shown} is not a regular file (a FIFO, socket or device)")
        if kind == "file":
            if not exists:
                raise WorkspaceError(f"{shown} does not exist")
            if is_dir:
                raise WorkspaceError(f"{shown} is a directory, not a file; use list_dir")
        elif kind == "dir":
            if not exists:
                raise WorkspaceError(f"{shown} does not exist")
            if not is_dir:
                raise WorkspaceError(f"{shown} is a file, not a directory")
        elif kind == "new" and is_dir:
            raise WorkspaceError(f"{shown} is a directory")
        return rel

    def walk(self, start: str = "", max_depth: int | None = None):
        """Visible (rel_path, is_dir) entries under `start`, sorted, depth first."""
        return walk_visible(
            self.root, self.rules, start, allow_secrets=self.allow_secrets, max_depth=max_depth
        )

    # ------------------------------------------------------------------- I/O
    def read_bytes(self, rel: str) -> bytes:
        """The current content of a file. The language server overrides this to return
        unsaved editor buffers."""
        return self.abspath(rel).read_bytes()

    def file_size(self, rel: str) -> int:
        return self.abspath(rel).stat().st_size

    def unsaved(self) -> dict[str, bytes]:
        """Files whose current text is not yet on disk (rel -> bytes): an editor's
        unsaved buffers in the language server; none elsewhere."""
        return {}

    def note_shown(self, rel: str, data: bytes) -> None:
        """Called when a file's whole content was shown to the model (read_file). The
        language server uses it to refuse edits to documents changed since."""

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a file (creating parent directories), recording a checkpoint first.

        Writing through a symlink changes the file it points to (as an editor does)
        and leaves the link in place; the checkpoint is kept under the real path, so
        one file has one checkpoint whichever name it was changed by.
        """
        target = self.abspath(rel)
        real = Path(os.path.realpath(target))
        if real != target:
            if self.root not in real.parents:
                raise WorkspaceError(
                    f"{rel} resolves (through a symlink) to a place outside the workspace"
                )
            rel, target = real.relative_to(self.root).as_posix(), real
        self._checkpoint(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tachy-tmp")
        tmp.write_bytes(data)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
        if posixpath.basename(rel) in (".gitignore", ".tachyignore"):
            self.rules.invalidate()

    def delete(self, rel: str) -> None:
        self._checkpoint(rel)
        self.abspath(rel).unlink()
        if posixpath.basename(rel) in (".gitignore", ".tachyignore"):
            self.rules.invalidate()

    # ----------------------------------------------------------- checkpoints
    def _checkpoint(self, rel: str) -> None:
        with self._lock:
            if rel in self.checkpoints:
                return
            target = self.abspath(rel)
            self.checkpoints[rel] = target.read_bytes() if target.is_file() else None

    def changed_files(self) -> list[str]:
        """Files the agent changed (and that still differ from their checkpoint)."""
        changed = []
        for rel, original in sorted(self.checkpoints.items()):
            target = self.abspath(rel)
            current = target.read_bytes() if target.is_file() else None
            if current != original:
                changed.append(rel)
        return changed

    def revert(self, rel: str) -> None:
        """Restore one file to its content before the agent's first change to it."""
        with self._lock:
            if rel not in self.checkpoints:
                raise WorkspaceError(f"{rel} has no checkpoint: the agent did not change it")
            original = self.checkpoints.pop(rel)
        self.put_back(rel, original)

    def put_back(self, rel: str, data: bytes | None) -> None:
        """Make `rel` hold `data` again (None: remove it), as a revert does: no new
        checkpoint, since this undoes a change rather than making one."""
        target = self.abspath(rel)
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if posixpath.basename(rel) in (".gitignore", ".tachyignore"):
            self.rules.invalidate()

    def revert_all(self) -> list[str]:
        reverted = sorted(self.checkpoints)
        for rel in reverted:
            self.revert(rel)
        return reverted
