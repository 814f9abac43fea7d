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
import shutil
import stat
import tempfile
import threading
import weakref
from pathlib import Path
from typing import BinaryIO

from index import beneath
from index.ignore import IGNORE_FILES, IgnoreRules, is_secret_name, is_tool_dir, walk_visible

# Where the terminal sandbox mounts the workspace; paths the model copies from command
# output (e.g. tracebacks) are accepted by the file tools too.
SANDBOX_MOUNT = "/workspace"
# Where background commands write their output; readable although .tachy/ is hidden.
JOBS_DIR = ".tachy/jobs"


# Checkpoints (each file's bytes before the agent first changed it): originals up to
# this size are kept in memory, larger ones in a private scratch directory outside the
# workspace, and a file larger than MAX_CHECKPOINT_BYTES (by its apparent size: a
# sparse file of 2 GiB takes no disk but would take 2 GiB to copy) is not changed by
# the file tools at all. The scratch directory holds at most MAX_SPILLED_BYTES a run.
CHECKPOINT_IN_MEMORY_BYTES = 1024**2
MAX_CHECKPOINT_BYTES = 64 * 1024**2
MAX_SPILLED_BYTES = 512 * 1024**2

# What makes a directory a repository to git, whatever its name: a HEAD beside either
# objects/ and refs/ or a commondir file (git's is_git_directory). The agent's file
# tools never make one, nor write into one: git run by the editor on its own would
# obey its config.
GIT_DIR_SHAPES = ({"HEAD", "objects", "refs"}, {"HEAD", "commondir"})


def _in_jobs_dir(rel: str) -> bool:
    return rel.startswith(JOBS_DIR + "/")


class WorkspaceError(Exception):
    """A request the workspace refuses. The message is shown to the model as is, so it
    names workspace-relative paths only."""


def _too_large(rel: str, size: int) -> WorkspaceError:
    return WorkspaceError(
        f"{rel} is {size / 1024**2:.0f} MiB; tachy keeps the original of every file its "
        "agent changes so that the change can be reverted, and keeps none over "
        f"{MAX_CHECKPOINT_BYTES // 1024**2} MiB: change it with a command, or ask the user to"
    )


class SpilledCheckpoint:
    """An original too large to keep in memory: its bytes in a scratch file."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size

    def open(self) -> BinaryIO:
        return open(self.path, "rb")

    def __repr__(self) -> str:
        return f"SpilledCheckpoint({self.size} bytes)"


Original = bytes | SpilledCheckpoint | None


def _same_content(handle: BinaryIO, original: bytes | SpilledCheckpoint) -> bool:
    """Whether the open file `handle` holds exactly `original`, read in blocks."""
    size = os.fstat(handle.fileno()).st_size
    if isinstance(original, bytes):
        return size == len(original) and handle.read(len(original) + 1) == original
    if size != original.size:
        return False
    with original.open() as kept:
        while True:
            block = handle.read(1024**2)
            if block != kept.read(1024**2):
                return False
            if not block:
                return True


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
        self._tool_dirs: dict[tuple[str, int], bool] = {}
        # Inodes of what was hidden during the run and of the folders searched as
        # ordinary ones (filled by the sandbox's scan before each command): a command
        # can rename the folders above what the rules hid, so what was hidden stays
        # hidden by its inode, and a searched folder never becomes an environment.
        self.hidden_inodes: set[int] = set()
        self.searched_dirs: set[int] = set()
        # Original bytes of each file before the agent first touched it (None: it did
        # not exist; large ones spilled to a scratch file). Guarded by a lock because
        # tools run on worker threads.
        self.checkpoints: dict[str, Original] = {}
        self._lock = threading.Lock()
        self._spill_dir: str | None = None
        self._spilled_bytes = 0

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
        """Whether the ignored directory `rel` is an environment or a tool's cache. Only
        one the user's own rules ignored before the run counts: a directory that the
        run ignores by adding a rule (after writing a pyvenv.cfg into it, or naming it
        node_modules) stays hidden, since it may hold what the user hid."""
        try:
            identity = os.lstat(self.abspath(rel)).st_ino
        except OSError:
            return False  # cannot be examined: hidden
        if identity in self.searched_dirs or identity in self.hidden_inodes:
            return False  # an ordinary folder (or a hidden one) renamed or marked
        known = self._tool_dirs.get((rel, identity))
        if known is None:
            known = self.rules.ignored_from_the_start(rel, True) and is_tool_dir(self.root, rel)
            self._tool_dirs[rel, identity] = known
        return known

    def _hidden_by_identity(self, real: str, opened: int | None = None) -> bool:
        """Whether `real`, or a folder on the way to it, is something the run hid
        before (known by inode, whatever it is called now). `opened`: the inode of the
        file already opened there."""
        if not self.hidden_inodes:
            return False  # no command has run: nothing could have been moved
        if opened is not None and opened in self.hidden_inodes:
            return True
        parts = real.split("/") if real else []
        for depth in range(1, len(parts) + 1):
            try:
                identity = os.lstat(self.abspath("/".join(parts[:depth]))).st_ino
            except OSError:
                return False
            if identity in self.hidden_inodes:
                return True
        return False

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
        return not (self._hidden_target(rel, real, is_dir) or self._hidden_by_identity(real))

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
        if (
            self.is_hidden(rel, is_dir)
            or self._hidden_target(rel, real, is_dir)
            or self._hidden_by_identity(real)
        ):
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
            self.root,
            self.rules,
            start,
            allow_secrets=self.allow_secrets,
            max_depth=max_depth,
            hidden_inodes=self.hidden_inodes,
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
        if self._hidden_by_identity(real, os.fstat(fd).st_ino):
            handle.close()
            raise WorkspaceError(f"{rel} is a file tachy keeps hidden (it was moved since)")
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
            if posixpath.basename(name).casefold() == ".tachyignore":
                raise WorkspaceError(
                    f"{name} holds the user's rules for what tachy's agent may see; "
                    "the agent cannot change it (ask the user to)"
                )
            self._refuse_git_metadata(name)
        if real != rel and self.is_hidden(real, False):
            raise WorkspaceError(f"{rel} leads (through a symlink) to a file tachy keeps hidden")
        if posixpath.basename(real) in IGNORE_FILES:
            # What the file hides now stays hidden whatever the change says (the rules
            # only tighten during a run): read it before it changes.
            directory = posixpath.dirname(real)
            self.rules.read_before_change(directory)
            self.agent_rules.read_before_change(directory)
        self._refuse_huge(real)
        return real

    def _refuse_git_metadata(self, rel: str) -> None:
        """The file tools never write a `.git` (a file there can make any directory the
        repository) nor anything in or making a directory git takes for a repository:
        the host's own git, which editors run on their own, obeys what it holds."""
        parts = rel.split("/")
        if any(part.casefold() == ".git" for part in parts):
            raise WorkspaceError(
                f"{rel} is repository metadata (.git); the agent's file tools do not create "
                "or change it (use git commands)"
            )
        markers = set().union(*GIT_DIR_SHAPES)
        for depth in range(len(parts) - 1, -1, -1):
            directory = "/".join(parts[:depth])
            # What the directory holds after this write: what is there, and what the
            # write adds (a directory that does not exist yet holds only that).
            names = {parts[depth]} | {
                name for name in markers if os.path.lexists(self.abspath(directory) / name)
            }
            if any(shape <= names for shape in GIT_DIR_SHAPES):
                raise WorkspaceError(
                    f"{rel} would be in a directory git takes for a repository "
                    f"({directory or '.'} holds HEAD with objects/refs or commondir); the "
                    "agent's file tools do not write there (use git commands)"
                )

    def _refuse_huge(self, real: str) -> None:
        try:
            size = os.lstat(self.abspath(real)).st_size
        except OSError:
            return
        if size > MAX_CHECKPOINT_BYTES:
            raise _too_large(real, size)

    def _write(self, real: str, data: bytes | BinaryIO) -> None:
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
        handle = self._open_or_none(rel)
        if handle is None:
            return None
        with handle:
            return handle.read()

    # ----------------------------------------------------------- checkpoints
    def _open_or_none(self, rel: str) -> BinaryIO | None:
        """The file on disk opened for reading, or None where read_disk_or_none would
        give None."""
        try:
            return self.open(rel)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, WorkspaceError):
            return None
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ELOOP):
                return None
            raise

    def _checkpoint(self, rel: str) -> None:
        """Keep the original of `rel` (in memory, or spilled to the scratch directory
        when large); refuses one that is too large to keep."""
        with self._lock:
            if rel in self.checkpoints:
                return
            handle = self._open_or_none(rel)
            if handle is None:
                self.checkpoints[rel] = None
                return
            with handle:
                size = os.fstat(handle.fileno()).st_size
                if size > MAX_CHECKPOINT_BYTES:  # it grew since _writable looked
                    raise _too_large(rel, size)
                if size <= CHECKPOINT_IN_MEMORY_BYTES:
                    self.checkpoints[rel] = handle.read(CHECKPOINT_IN_MEMORY_BYTES + 1)
                    return
                self.checkpoints[rel] = self._spill(rel, handle, size)

    def _spill(self, rel: str, handle: BinaryIO, size: int) -> SpilledCheckpoint:
        if self._spilled_bytes + size > MAX_SPILLED_BYTES:
            raise WorkspaceError(
                f"{rel} cannot be changed: the originals tachy keeps to revert this run's "
                f"changes already take {self._spilled_bytes / 1024**2:.0f} MiB, and it keeps "
                f"at most {MAX_SPILLED_BYTES // 1024**2} MiB (change it with a command)"
            )
        if self._spill_dir is None:
            self._spill_dir = tempfile.mkdtemp(prefix="tachy-checkpoints-")
            weakref.finalize(self, shutil.rmtree, self._spill_dir, True)
        fd, path = tempfile.mkstemp(dir=self._spill_dir)
        with os.fdopen(fd, "wb") as kept:
            copied = 0
            while copied < size and (block := handle.read(min(1024**2, size - copied))):
                kept.write(block)
                copied += len(block)
        self._spilled_bytes += copied
        return SpilledCheckpoint(path, copied)

    def changed_files(self) -> list[str]:
        """Files the agent changed (and that still differ from their checkpoint)."""
        changed = []
        for rel, original in sorted(self.checkpoints.items()):
            handle = self._open_or_none(rel)
            if handle is None or original is None:
                if (handle is None) != (original is None):
                    changed.append(rel)
                if handle is not None:
                    handle.close()
                continue
            with handle:
                if not _same_content(handle, original):
                    changed.append(rel)
        return changed

    def revert(self, rel: str) -> None:
        """Restore one file to its content before the agent's first change to it."""
        with self._lock:
            if rel not in self.checkpoints:
                raise WorkspaceError(f"{rel} has no checkpoint: the agent did not change it")
            original = self.checkpoints.pop(rel)
        if isinstance(original, SpilledCheckpoint):
            with original.open() as kept:
                self.put_back(rel, kept)
            os.unlink(original.path)
            self._spilled_bytes -= original.size
        else:
            self.put_back(rel, original)

    def put_back(self, rel: str, data: bytes | BinaryIO | None) -> None:
        """Make `rel` hold `data` (bytes, or a file to copy) again, None: remove it, as a
        revert does: no new checkpoint, since this undoes a change rather than making
        one. No symlink is followed: a link planted at `rel` since is replaced, never
        written through."""
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
