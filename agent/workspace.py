"""The workspace: the one directory tree the agent may read and change.

Every tool goes through `Workspace` for paths and file I/O, so the rules hold
everywhere: a path never escapes the root (`..`, absolute paths, symlinks pointing
out, symlinks swapped in while a tool works: files are opened through directory
handles, see index.beneath), ignored and secret files stay invisible, the rules can
only tighten during a run (the agent cannot rewrite what binds it), and every change
records a checkpoint so a run can be reverted file by file. The language server subclasses it to read
unsaved editor buffers and to route edits through the editor's review flow; the
trainer uses it as is on a sandbox copy.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import threading
from pathlib import Path
from typing import BinaryIO

from index import beneath
from index.ignore import IgnoreRules, is_secret_name, is_tool_dir, walk_visible

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
        # What binds the run can only tighten while it lasts (see IgnoreRules).
        self.rules = IgnoreRules(self.root, tighten_only=True)
        self.agent_rules = IgnoreRules(self.root, names=(".tachyignore",), tighten_only=True)
        self._tool_dirs: dict[str, bool] = {}
        # Original bytes of each file before the agent first touched it (None: it did
        # not exist). Guarded by a lock because tools run on worker threads.
        self.checkpoints: dict[str, bytes | None] = {}
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- paths
    def relpath(self, path: str) -> str:
        """Normalise a path given by the model to a '/'-separated path relative to the
        root ('' for the root itself). Raises WorkspaceError when it leaves the root."""
        normal = self._lexical(path)
        # Symlinks anywhere along the path must not lead out of the root.
        self.real_rel(normal, shown=path)
        return normal

    def _lexical(self, path: str) -> str:
        """relpath without looking at the disk: `..`, absolute and /workspace paths."""
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
        return normal

    def real_rel(self, rel: str, *, shown: str | None = None) -> str:
        """The real path of `rel` (symlinks followed while they stay in the root).
        Raises WorkspaceError when it leads out, loops or cannot be examined."""
        try:
            return beneath.real_path(self.root, rel)
        except beneath.EscapeError as exc:
            if exc.errno == errno.ELOOP:
                raise WorkspaceError(f"{shown or rel} is a loop of symbolic links") from None
            raise WorkspaceError(
                f"{shown or rel} resolves (through a symlink) to a place outside the workspace"
            ) from None
        except OSError as exc:
            raise WorkspaceError(
                f"{shown or rel} cannot be examined: {exc.strerror or exc}"
            ) from None

    def abspath(self, rel: str) -> Path:
        return self.root / rel if rel else self.root

    def is_hidden(self, rel: str, is_dir: bool) -> bool:
        """The verdict on a name, not following symlinks: ignored or secret. A file
        that is git-ignored only because it lies in an environment or a tool's cache
        (.venv, node_modules, ...: index.ignore.TOOL_DIR_NAMES) is not hidden: commands
        use those, so read_file may read what a command can. The logs of background
        commands (.tachy/jobs/) are never hidden."""
        if rel == "" or _in_jobs_dir(rel):
            return False
        if not is_dir and not self.allow_secrets and is_secret_name(posixpath.basename(rel)):
            return True
        if not self.rules.is_ignored(rel, is_dir):
            return False
        if self.agent_rules.is_ignored(rel, is_dir):
            return True
        parts = rel.split("/")
        for depth in range(1, len(parts) + (1 if is_dir else 0)):
            prefix = "/".join(parts[:depth])
            if self.rules.is_ignored(prefix, True):
                # The outermost ignored directory decides.
                return not self._tool_dir(prefix)
        return True

    def _tool_dir(self, rel: str) -> bool:
        known = self._tool_dirs.get(rel)
        if known is None:
            known = self._tool_dirs[rel] = is_tool_dir(self.root, rel)
        return known

    def is_visible(self, rel: str, is_dir: bool | None = None) -> bool:
        """True unless `rel` (or the file a symlink points to) is ignored or secret."""
        if rel == "":
            return True
        if is_dir is None:
            try:
                is_dir = stat.S_ISDIR(os.stat(self.abspath(rel)).st_mode)
            except OSError:
                is_dir = False
        if self.is_hidden(rel, is_dir):
            return False
        try:
            real = beneath.real_path(self.root, rel)
        except OSError:
            return False  # out of the workspace, a loop, or unreadable
        return not self._hidden_target(rel, real, is_dir)

    def _hidden_target(self, rel: str, real: str, is_dir: bool) -> bool:
        """Whether what `rel` leads to through symlinks (`real`) is hidden."""
        return real not in ("", rel) and self.is_hidden(real, is_dir)

    def resolve(self, path: str, *, kind: str = "any") -> str:
        """Validate a model-given path for use: inside the root and visible.

        kind: "file" (must be an existing file), "dir" (an existing directory),
        "new" (may not exist yet; must not be a directory), or "any".
        """
        rel = self._lexical(path)
        shown = rel or "."
        real = self.real_rel(rel, shown=path)  # one walk serves the checks below
        try:
            info = os.stat(self.abspath(real))
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise WorkspaceError(f"{shown} cannot be examined: {exc.strerror or exc}") from None
        exists = info is not None
        is_dir = exists and stat.S_ISDIR(info.st_mode)
        if self.is_hidden(rel, is_dir) or self._hidden_target(rel, real, is_dir):
            if not is_dir and (
                is_secret_name(posixpath.basename(rel)) or is_secret_name(posixpath.basename(real))
            ):
                raise WorkspaceError(
                    f"{shown} looks like a secret file (credentials, keys); tachy keeps it "
                    "away from the model unless the user allows secrets"
                )
            raise WorkspaceError(f"{shown} is excluded by .gitignore/.tachyignore rules")
        if exists and not is_dir and not stat.S_ISREG(info.st_mode):
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
    def open(self, rel: str) -> BinaryIO:
        """The file `rel` opened for reading, through directory handles (a symlink
        swapped in meanwhile is not followed out), refused when what was opened turns
        out to be hidden (a link swapped in to a secret)."""
        try:
            fd, real = beneath.open_file(self.root, rel)
        except beneath.EscapeError:
            raise WorkspaceError(
                f"{rel} resolves (through a symlink) to a place outside the workspace"
            ) from None
        handle = os.fdopen(fd, "rb")
        if real != rel and self.is_hidden(real, False):
            handle.close()
            raise WorkspaceError(f"{rel} leads (through a symlink) to a file tachy keeps hidden")
        return handle

    def read_bytes(self, rel: str) -> bytes:
        """The current content of a file. The language server overrides this to return
        unsaved editor buffers."""
        return self.read_disk(rel)

    def read_disk(self, rel: str) -> bytes:
        """The content of a file on disk (never an editor buffer)."""
        with self.open(rel) as handle:
            return handle.read()

    def file_size(self, rel: str) -> int:
        with self.open(rel) as handle:
            return os.fstat(handle.fileno()).st_size

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
        one file has one checkpoint whichever name it was changed by. The write itself
        follows no symlink (see index.beneath.write_file).
        """
        real = self._writable(rel)
        self._checkpoint(real)
        self._write(real, data)

    def delete(self, rel: str) -> None:
        self._writable(rel)
        self._checkpoint(rel)
        parent, _, name = rel.rpartition("/")
        target = "/".join(p for p in (self.real_rel(parent), name) if p)
        self._io(beneath.remove_file, target)
        self._after_change(target)

    def _writable(self, rel: str) -> str:
        """The real path a change to `rel` lands on, or why it may not change (a
        subclass that routes writes elsewhere, as the editor's review does, asks too)."""
        real = self.real_rel(rel)
        for name in {rel, real}:
            if posixpath.basename(name) == ".tachyignore":
                raise WorkspaceError(
                    f"{name} holds the user's rules for what tachy's agent may see; "
                    "the agent cannot change it (ask the user to)"
                )
        if real != rel and self.is_hidden(real, False):
            raise WorkspaceError(f"{rel} leads (through a symlink) to a file tachy keeps hidden")
        return real

    def _write(self, real: str, data: bytes) -> None:
        self._io(beneath.write_file, real, data)
        self._after_change(real)

    def _io(self, operation, rel: str, *args) -> None:
        try:
            operation(self.root, rel, *args)
        except beneath.EscapeError:
            raise WorkspaceError(
                f"{rel} resolves (through a symlink) to a place outside the workspace"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise WorkspaceError(
                    f"{rel} was changed into a symbolic link meanwhile; tachy does not "
                    "write through it"
                ) from None
            raise

    def _after_change(self, rel: str) -> None:
        if posixpath.basename(rel) in (".gitignore", ".tachyignore"):
            self.rules.invalidate()
            self.agent_rules.invalidate()

    def read_disk_or_none(self, rel: str) -> bytes | None:
        """The bytes on disk, or None where there is no readable file (missing, a
        directory, a FIFO, a link that leads out or to a hidden file)."""
        try:
            return self.read_disk(rel)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, WorkspaceError):
            return None
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ELOOP):
                return None
            raise

    # ----------------------------------------------------------- checkpoints
    def _checkpoint(self, rel: str) -> None:
        with self._lock:
            if rel in self.checkpoints:
                return
            self.checkpoints[rel] = self.read_disk_or_none(rel)

    def changed_files(self) -> list[str]:
        """Files the agent changed (and that still differ from their checkpoint)."""
        changed = []
        for rel, original in sorted(self.checkpoints.items()):
            if self.read_disk_or_none(rel) != original:
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
        checkpoint, since this undoes a change rather than making one. No symlink is
        followed: a link planted at `rel` since is replaced, never written through."""
        if data is None:
            self._io(beneath.remove_file, rel)
            self._after_change(rel)
        else:
            self._write(rel, data)

    def revert_all(self) -> list[str]:
        reverted = sorted(self.checkpoints)
        for rel in reverted:
            self.revert(rel)
        return reverted
