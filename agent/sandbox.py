"""Running the agent's shell commands: sandboxed, time-limited, output-capped.

With bubblewrap (the default where `bwrap` exists) a command sees the whole machine
read-only, the workspace writable (at its own path and at /workspace, where it
starts), a private /tmp and /run, no network, its own pid namespace; secret and
.tachyignore'd files are unreadable ("Permission denied") and .tachyignore'd
directories look empty. Without bubblewrap it runs as a plain
subprocess in its own session with rlimits, and every result says so.

In both modes a per-command cgroup (where the machine allows one) caps processes and
memory, and on timeout or cancellation every process the command started is killed.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import os
import posixpath
import resource
import signal
import stat
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.cgroup import ProcessCgroup
from agent.githistory import HistoryCheck
from agent.hosttools import host_which
from agent.workspace import GIT_DIR_SHAPES, JOBS_DIR, SANDBOX_MOUNT, Workspace
from index import statedir
from index.ignore import ALWAYS_HIDDEN_DIRS, IGNORE_FILES, is_secret_name

# Environment variables a command inherits; everything else (API keys!) stays out.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "VIRTUAL_ENV")


@dataclass
class SandboxConfig:
    """Limits for commands. `use_bubblewrap=None` means: use it when installed."""

    use_bubblewrap: bool | None = None
    default_timeout_s: float = 60.0
    max_timeout_s: float = 600.0
    # Output kept for the result: this much from the start and from the end.
    keep_head_bytes: int = 64 * 1024
    keep_tail_bytes: int = 64 * 1024
    # A command printing more than this is killed.
    max_output_bytes: int = 64 * 1024 * 1024
    max_processes: int = 256
    memory_bytes: int | None = 4 * 1024**3
    max_file_bytes: int = 2 * 1024**3
    job_log_bytes: int = 8 * 1024 * 1024
    # Size of the sandbox's private /tmp and /run (memory: they count against the
    # command's memory limit too).
    tmpfs_bytes: int = 1024**3
    # What the commands of one run may add to the workspace's file system, in all.
    # A command that passes it is stopped (what it wrote stays); None: no limit.
    disk_quota_bytes: int | None = 4 * 1024**3
    # Files (inodes) they may add, in all: empty files take no blocks, and a file
    # system runs out of inodes long before bytes (for every user of the machine).
    # Never more than half of what is free when the run starts. None: no limit.
    file_quota: int | None = 100_000
    # Host paths bound read-only at their own place: inputs that lie under /tmp or
    # /run, which the sandbox replaces with its own (a task set made with mktemp -d).
    read_only_paths: list[str] = field(default_factory=list)
    # Variables set for every command, over the defaults: a training environment puts
    # its task's interpreter first on PATH, so `python -m pytest` means the same there
    # as in the task's instruction.
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class CommandResult:
    exit_code: int | None
    head: bytes
    tail: bytes
    total_bytes: int
    timed_out: bool = False
    output_overflow: bool = False
    cancelled: bool = False
    disk_quota_hit: bool = False
    duration_s: float = 0.0

    @property
    def omitted_bytes(self) -> int:
        return self.total_bytes - len(self.head) - len(self.tail)


@dataclass
class Job:
    """A command started in the background; its output goes to `log_path`."""

    id: int
    command: str
    log_path: str  # workspace-relative
    process: asyncio.subprocess.Process
    cgroup: ProcessCgroup | None
    pump: asyncio.Task | None = None
    exit_code: int | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)


def _root_binds() -> list[str]:
    """Bind every top-level entry of / read-only onto bubblewrap's empty root, so that
    /workspace can be created beside them (a read-only bind of / itself would not
    allow it). Symlinks such as /bin -> usr/bin are recreated."""
    args: list[str] = []
    for entry in sorted(os.scandir("/"), key=lambda e: e.name):
        if entry.name in _OWN_MOUNTS:
            continue
        path = f"/{entry.name}"
        if entry.is_symlink():
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind", path, path]
    return args


# Hidden directories are replaced by an empty tmpfs; what a command writes there is
# discarded at its end, and bounded meanwhile.
_HIDDEN_DIR_BYTES = 64 * 1024**2
# How often a running command's disk use is looked at (statvfs: microseconds).
_DISK_POLL_S = 0.05

_OWN_MOUNTS = frozenset({"dev", "proc", "tmp", "run", SANDBOX_MOUNT.strip("/")})
_PRIVATE = ("/tmp", "/run")  # replaced by empty tmpfs inside the sandbox


def own_install_paths() -> list[str]:
    """tachy's own interpreter environment and code, where they lie under a directory
    the sandbox replaces (a checkout or CI clone under /tmp): bound read-only so that
    commands can still run `python` from tachy's environment (the training tasks' test
    runs do, with tachy's pytest plugin)."""
    own = {os.path.realpath(sys.prefix), str(Path(__file__).resolve().parents[1])}
    return sorted(p for p in own if any(p == d or p.startswith(d + "/") for d in _PRIVATE))


# How long to wait for the output pipe to close after the command's processes were
# killed (only a process that escaped the kill can hold it open that long).
_DRAIN_GRACE_S = 2.0
# How long to wait for killed processes to leave their cgroup so it can be removed.
_CGROUP_REMOVE_WAIT_S = 5.0


class _OutputCapture:
    """Reads a command's output pipe from the event loop, keeping its start and its end
    and counting the rest. Registered without awaiting, so nothing can interrupt
    between starting a command and watching it."""

    def __init__(self, config: SandboxConfig, fd: int) -> None:
        self.config = config
        self.fd = fd
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.overflow = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = self.loop.create_future()
        os.set_blocking(fd, False)
        self.loop.add_reader(fd, self._readable)

    def _readable(self) -> bool:
        """Take what one read gives; False when nothing more is there for now."""
        try:
            data = os.read(self.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""
        if not data:  # every process holding the pipe is gone
            self.loop.remove_reader(self.fd)
            if not self.closed.done():
                self.closed.set_result(None)
            return False
        config = self.config
        self.total += len(data)
        room = config.keep_head_bytes - len(self.head)
        if room > 0:
            self.head.extend(data[:room])
            data = data[room:]
        if data:
            self.tail.extend(data)
            if len(self.tail) > config.keep_tail_bytes:
                del self.tail[: len(self.tail) - config.keep_tail_bytes]
        if self.total > config.max_output_bytes:
            self.overflow.set()
        return True

    def take_pending(self) -> None:
        """Take everything written so far, without waiting for more."""
        while not self.overflow.is_set() and self._readable():
            pass

    def close(self) -> None:
        self.loop.remove_reader(self.fd)
        os.close(self.fd)


def nproc_limit(max_processes: int) -> int:
    """The RLIMIT_NPROC for a command allowed `max_processes` processes of its own.

    The kernel counts every task (thread) of the user against RLIMIT_NPROC, not just
    the command's, so for an ordinary user (a desktop with a browser easily runs
    hundreds of threads) the limit must sit above what already runs. Root is exempt
    from it; there the cgroup is what caps a fork bomb.
    """
    uid = os.getuid()
    if uid == 0:
        return max_processes
    running = 0
    with contextlib.suppress(OSError), os.scandir("/proc") as it:
        for entry in it:
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
                running += int(fields[17])  # num_threads
            except (OSError, IndexError, ValueError):
                continue
    return running + max_processes


def _within_hard_limit(resource_id: int, value: int) -> tuple[int, int]:
    """(soft, hard) for setrlimit: `value`, but never above the hard limit in force (an
    unprivileged process may not raise it)."""
    hard = resource.getrlimit(resource_id)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    return value, value


_RACY_NS = 100_000_000  # 0.1 s, well above file-system timestamp granularity


# What commands may read but not change, inside a repository's metadata directory:
# what would make the host's own tools act. Editors run `git status` on their own, and
# a core.fsmonitor, a hook or an include that a command wrote would run there.
PROTECTED_METADATA = {
    ".git": ("config", "config.worktree", "hooks", "info", "modules", "worktrees"),
    ".hg": ("hgrc",),
}


@dataclass(frozen=True)
class Mount:
    """One thing a command must not see or change: `hide` (a directory: an empty
    tmpfs; a file: /dev/null) or `protect` (bound read-only onto itself). `rel` is
    relative to the workspace, or absolute for a repository outside it."""

    rel: str
    is_dir: bool
    action: str  # "hide" | "protect"


@dataclass(frozen=True)
class Repository:
    """A git directory the workspace reaches: `git_dir` (workspace-relative, or
    absolute when a `.git` file points out of the workspace) and the work tree its
    history's paths are relative to (`prefix`, None for a bare repository)."""

    git_dir: str
    prefix: str | None
    inside: bool = True


# The longest path a mount may have (PATH_MAX with its NUL); a directory deeper than
# that is hidden by hiding the deepest ancestor that can be named.
_PATH_MAX = 4095


class HiddenScanner:
    """Finds what commands must not see or change, re-reading only directories that
    changed.

    Hidden: what the workspace hides from the model (Workspace.is_hidden: ignored and
    secret files, so git-ignored directories too, except environments and tool caches,
    which builds and tests need and which commands see as they are), .tachy/, and
    whatever cannot be examined (fail closed). Protected (read-only): ignore files, and
    repository metadata that would make the host act (PROTECTED_METADATA) in every git
    directory the workspace reaches: `.git` folders, folders git takes for a repository
    by their contents (a bare one), and the targets of `.git` files (`gitdir: ...`). A
    repository whose history holds hidden files is hidden whole (agent.githistory).

    Rules are path patterns, and a command can rename the folders above what they
    hide. So what is hidden once is known by its inode for the rest of the run
    (Workspace.hidden_inodes) and stays hidden at any path; the folders searched as
    ordinary ones are known too (Workspace.searched_dirs), and none of them becomes an
    environment that is shown unsearched, whatever it is renamed or marked as.
    Repositories are known by their git directory's inode, so one that is moved is
    not taken for a new one.

    A command starts on every run_terminal_cmd, so walking a large workspace each
    time would dominate start-up. Each directory's verdicts are kept with its inode
    number, change time and modification time: adding, removing or renaming an entry
    changes both times, and no command can set a change time back (only the clock
    sets it). When any ignore file changes, everything is recomputed, since rules
    apply to whole subtrees.
    """

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        # directory -> (its stamp, mounts, subdirectories to descend into, repositories)
        self._dirs: dict[str, tuple[tuple[int, int, int], list[Mount], list[str], list]] = {}
        self._ignore_stamps: dict[str, tuple[int, int] | None] = {}
        self._restart = False
        self._scanned = False
        self._hides = lambda path: (
            (is_secret_name(posixpath.basename(path)) and not workspace.allow_secrets)
            or workspace.agent_rules.is_ignored(path)
        )
        self.history = HistoryCheck(workspace.root, self._hides)
        self._histories: dict[str, HistoryCheck] = {}
        self.history_hidden: list[str] | None = []
        # Repositories seen so far (their git directories), `.git` files and links by
        # their inode, and what was done to new ones.
        self._repositories: set[int | None] = set()
        self._pointers: dict[str, int | None] = {}
        self._collapsed: set[str] = set()
        self._last_found: list[Mount] | None = None
        self._last_arranged: list[Mount] = []
        self.notices: list[str] = []

    def scan(self) -> list[Mount]:
        self._own_state_dir()
        if self._ignore_files_changed():
            self._reset()
        while True:
            self._restart = False
            mounts: list[Mount] = []
            repositories: list[Repository] = []
            seen: set[str] = set()
            stack = [""]
            while stack and not self._restart:
                directory = stack.pop()
                seen.add(directory)
                entry = self._directory(directory)
                if entry is not None:
                    mounts.extend(entry[1])
                    stack.extend(reversed(entry[2]))
                    repositories.extend(entry[3])
            if not self._restart:
                break
        self._scanned = True
        for gone in self._dirs.keys() - seen:
            del self._dirs[gone]
        found = [*mounts, *self._repository_mounts(repositories)]
        if found == self._last_found:  # nothing changed: the same arrangement
            return list(self._last_arranged)
        arranged, collapsed = _arranged(found, self.workspace.root)
        self._last_found, self._last_arranged = found, arranged
        for folder in collapsed:
            if folder not in self._collapsed:
                self._collapsed.add(folder)
                self.notices.append(
                    f"[tachy: {folder} holds more files that commands must not see than "
                    "the sandbox can hide one by one; commands see it as empty]"
                )
        return arranged

    def _own_state_dir(self) -> None:
        """.tachy must be a real directory before any command runs: then it is hidden
        (an empty tmpfs, a mount point no command can replace by a symlink). One that
        is something else (a link a command planted) is set aside first."""
        root = self.workspace.root
        try:
            aside = statedir.set_aside(root)
            statedir.ensure(root)
        except OSError as exc:
            raise RuntimeError(f"cannot make tachy's state directory .tachy: {exc}") from None
        if aside:
            self.notices.append(
                f"[tachy: .tachy was not a directory (a symbolic link or a file); it was "
                f"set aside as {aside}: tachy keeps its own state only in a real directory]"
            )

    def _repository_mounts(self, repositories: list[Repository]) -> list[Mount]:
        """Repositories whose history may hold what is hidden are hidden whole."""
        mounts = []
        self.history_hidden = []
        for repo in {repo.git_dir: repo for repo in repositories}.values():
            if repo.git_dir == ".git":
                found = self.history_hidden = self.history.hidden_paths()
            else:
                found = self._history(repo).hidden_paths()
            if found is None or found:
                mounts.append(Mount(repo.git_dir, True, "hide"))
        return mounts

    def _history(self, repo: Repository) -> HistoryCheck:
        check = self._histories.get(repo.git_dir)
        if check is None:
            prefix = repo.prefix

            def hides(path: str) -> bool:
                return self._hides(f"{prefix}/{path}" if prefix else path)

            git_dir = (
                Path(repo.git_dir) if not repo.inside else self.workspace.abspath(repo.git_dir)
            )
            check = HistoryCheck(self.workspace.root, hides, git_dir=git_dir)
            self._histories[repo.git_dir] = check
        return check

    def _reset(self) -> None:
        self._dirs.clear()
        self.workspace.rules.invalidate()
        self.workspace.agent_rules.invalidate()

    def _ignore_files_changed(self) -> bool:
        changed = False
        for rel, stamp in list(self._ignore_stamps.items()):
            now = _stamp(self.workspace.abspath(rel))
            if now != stamp:
                changed = True
                if now is None:
                    del self._ignore_stamps[rel]
                else:
                    self._ignore_stamps[rel] = now
        return changed

    def _unexaminable(self, directory: str) -> tuple:
        """The verdict on a directory that cannot be read: hidden, with all below it."""
        if not directory:
            raise RuntimeError("the workspace's root directory cannot be read")
        return (None, [Mount(directory, True, "hide")], [], [])

    def _directory(self, directory: str):
        path = self.workspace.abspath(directory)
        try:
            info = path.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None  # removed meanwhile: nothing there to hide
        except OSError:
            return self._unexaminable(directory)
        if not stat.S_ISDIR(info.st_mode):
            return None  # replaced by a file or link meanwhile: its parent shows it next time
        stamp = (info.st_ino, info.st_ctime_ns, info.st_mtime_ns)
        cached = self._dirs.get(directory)
        if cached is not None and cached[0] == stamp:
            return cached
        # Trust a verdict only for a directory that was already quiet when it was read:
        # a change within the file system's clock tick would leave the times unchanged
        # (git's "racy" entries). Recent ones are re-read next time.
        racy = time.time_ns() - max(info.st_ctime_ns, info.st_mtime_ns) < _RACY_NS
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            return None
        except OSError:
            return self._unexaminable(directory)
        mounts: list[Mount] = []
        subdirs: list[str] = []
        repositories: list[Repository] = []
        workspace = self.workspace
        names = {entry.name for entry in entries}
        if directory and any(shape <= names for shape in GIT_DIR_SHAPES):
            # git takes this directory for a repository (a bare one, or the target of
            # a `.git` file): treated as a .git, and not searched further.
            repositories.append(Repository(directory, None))
            mounts.extend(self._repository(directory))
            return self._keep(directory, racy, (stamp, mounts, [], repositories))
        for entry in entries:
            rel = f"{directory}/{entry.name}" if directory else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                return self._unexaminable(directory)
            if entry.name in IGNORE_FILES and not is_dir:
                if rel not in self._ignore_stamps:
                    self._ignore_stamps[rel] = _stamp(path / entry.name)
                    if self._scanned:
                        # It appeared since the last scan: its rules change verdicts
                        # already cached for this subtree, so start again from scratch.
                        self._reset()
                        self._restart = True
                        return None
                if not entry.is_symlink():
                    mounts.append(Mount(rel, False, "protect"))
            if entry.name == ".tachy":
                if is_dir:
                    mounts.append(Mount(rel, True, "hide"))
                continue
            if entry.name == ".git":
                found = self._git_entry(rel, is_dir, entry)
                mounts.extend(found[0])
                repositories.extend(found[1])
                continue
            if entry.name in ALWAYS_HIDDEN_DIRS:
                mounts.extend(self._metadata(rel, entry.name, is_dir))
                continue
            # What was hidden stays hidden wherever a command moves it (by renaming a
            # folder above it, so that a path rule no longer matches): it is known by
            # its inode. Folders searched as ordinary ones are known too: a command
            # cannot turn one into an environment by renaming or marking it.
            identity = entry.inode()  # from the directory listing: no system call
            if identity in workspace.hidden_inodes or workspace.is_hidden(rel, is_dir):
                workspace.hidden_inodes.add(identity)
                mounts.append(Mount(rel, is_dir, "hide"))
            elif is_dir and not workspace.rules.is_ignored(rel, True):
                workspace.searched_dirs.add(identity)
                subdirs.append(rel)
            # (A directory that is ignored but not hidden is an environment or a tool's
            # cache, shown to commands as it is: not searched, since a .venv or
            # node_modules holds tens of thousands of directories, which a stat each
            # on every command would make the slowest part of starting one.)
        return self._keep(directory, racy, (stamp, mounts, subdirs, repositories))

    def _keep(self, directory: str, racy: bool, result: tuple) -> tuple:
        if racy:
            self._dirs.pop(directory, None)
        else:
            self._dirs[directory] = result
        return result

    def _git_entry(self, rel: str, is_dir: bool, entry: os.DirEntry):
        """A `.git`: a repository's directory, or a file pointing git at one."""
        parent = posixpath.dirname(rel)
        if is_dir:
            return self._repository(rel), [Repository(rel, parent)]
        # A file (`gitdir: ...`) or a link: either makes another directory the
        # repository. One that appears or changes during the run is set aside; one
        # that was there is followed to its repository, which is treated as a .git.
        try:
            identity = entry.inode()
        except OSError:
            identity = None
        known = self._pointers.get(rel)
        if self._scanned and known != identity:
            self._pointers.pop(rel, None)
            self._disarm(rel, False)
            return [], []
        self._pointers[rel] = identity
        path = self.workspace.abspath(rel)
        if entry.is_symlink():
            mounts, target = [], os.path.realpath(path)
        else:
            mounts, target = [Mount(rel, False, "protect")], _gitdir_target(path)
        if target is None:
            return mounts, []
        inside = _beneath_root(self.workspace.root, target)
        if inside is None:
            # Outside the workspace: commands cannot change it (the machine is
            # read-only to them), but its history is read like the workspace's.
            return mounts, [Repository(target, parent, inside=False)]
        if inside and not inside.startswith(".git/") and inside != ".git":
            mounts.extend(self._repository(inside))
        return mounts, [Repository(inside, parent)] if inside != ".git" else []

    def _disarm(self, rel: str, is_dir: bool) -> None:
        """A repository a command created during the run: editors find it and run git
        in it on their own, so nothing it holds may make git run a command (a
        core.fsmonitor, an alias for an editor, hooks). Its config is replaced by a
        plain one and its hooks set aside, both kept for the user to look at; a `.git`
        file, which could point git at any directory, is set aside whole."""
        path = self.workspace.abspath(rel)
        try:
            if not is_dir:
                os.rename(path, f"{path}.tachy-disabled")
                kept = f"{rel}.tachy-disabled"
            else:
                for name in ("config", "hooks"):
                    if os.path.lexists(path / name):
                        os.rename(path / name, path / f"{name}.tachy-disabled")
                (path / "config").write_text(_SAFE_GIT_CONFIG)
                os.mkdir(path / "hooks")
                kept = f"{rel}/config.tachy-disabled"
        except OSError as exc:
            self.notices.append(f"[tachy: could not make the new repository {rel} safe: {exc}]")
            return
        self.notices.append(
            f"[tachy: a command created the repository {rel}; its config and hooks were set "
            f"aside ({kept}) and replaced by plain ones, since git run by the editor on "
            "its own would execute what they name]"
        )

    def _repository(self, rel: str) -> list[Mount]:
        """A git directory inside the workspace: made safe when a command created it,
        then its config, hooks and the rest of PROTECTED_METADATA are read-only."""
        try:
            identity = os.lstat(self.workspace.abspath(rel)).st_ino
        except OSError:
            identity = None
        if identity not in self._repositories:
            if self._scanned:
                self._disarm(rel, True)
            self._repositories.add(identity)
        # An empty hooks directory (as `git init` makes) so that it can be bound
        # read-only: a command must not be able to add one.
        with contextlib.suppress(OSError):
            os.mkdir(self.workspace.abspath(f"{rel}/hooks"))
        return self._protected(rel, ".git")

    def _metadata(self, rel: str, name: str, is_dir: bool) -> list[Mount]:
        """Other version control metadata (.hg, .svn): what would make the host act is
        read-only."""
        return self._protected(rel, name) if is_dir else []

    def _protected(self, rel: str, kind: str) -> list[Mount]:
        mounts = []
        for child in PROTECTED_METADATA.get(kind, ()):
            target = self.workspace.abspath(f"{rel}/{child}")
            if os.path.lexists(target) and not os.path.islink(target):
                mounts.append(Mount(f"{rel}/{child}", target.is_dir(), "protect"))
        return mounts


def _gitdir_target(path: Path) -> str | None:
    """The absolute, normalised directory a `.git` file points git at, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            text = handle.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    if not line.startswith("gitdir:"):
        return None
    target = line[len("gitdir:") :].strip()
    return os.path.normpath(os.path.join(os.path.dirname(path), target))


def _beneath_root(root: Path, target: str) -> str | None:
    """`target` (absolute) relative to the workspace root ('' for the root), following
    the links on the way as git would; None when it lies outside."""
    real = os.path.realpath(target)
    base = str(root)
    if real == base:
        return ""
    if real.startswith(base + "/"):
        return real[len(base) + 1 :]
    return None


# How many mounts a command's sandbox is given (a hidden file is two: /dev/null bound
# over it at the workspace's path and at /workspace; so is a hidden folder, an empty
# tmpfs at each). Each bind costs bubblewrap time in proportion to the mounts made
# before it (it reads the whole mount table to remount what lies below read-only):
# 100 binds take about 20 ms, 250 about 80 ms, 500 about 0.25 s, 1,000 about 0.8 s,
# 2,000 about 5 s on two cores. Past this, folders are hidden whole instead.
MAX_MOUNTS = 300


def _mounts_made(mount: Mount) -> int:
    """How many mounts bubblewrap makes for one: at the workspace's own path and at
    /workspace, or once for a path outside the workspace."""
    return 1 if mount.rel.startswith("/") else 2


def _arranged(mounts: list[Mount], root: Path) -> tuple[list[Mount], list[str]]:
    """The mounts in an order bubblewrap can make them: parents before children,
    nothing made inside a hidden directory (it would show through the empty tmpfs),
    and paths too long to name replaced by their deepest nameable ancestor, hidden
    whole. When there are more than MAX_MOUNTS, the folders holding the most are
    hidden whole instead (fail closed); those folders are returned too."""
    room = _PATH_MAX - max(len(os.fsencode(str(root))), len(SANDBOX_MOUNT)) - 1
    fitted: dict[str, Mount] = {}
    for mount in mounts:
        if not mount.rel.startswith("/") and len(os.fsencode(mount.rel)) > room:
            rel = mount.rel
            while len(os.fsencode(rel)) > room:
                rel = posixpath.dirname(rel)
            mount = Mount(rel, True, "hide")
        previous = fitted.get(mount.rel)
        if previous is None or mount.action == "hide":
            fitted[mount.rel] = mount
    collapsed = _within_budget(fitted)
    hidden_dirs = {m.rel for m in fitted.values() if m.action == "hide" and m.is_dir}

    arranged = [
        m for m in fitted.values() if m.rel.startswith("/") or not _inside(m.rel, hidden_dirs)
    ]
    return sorted(arranged, key=lambda m: (m.rel.count("/"), m.rel)), collapsed


def _within_budget(fitted: dict[str, Mount]) -> list[str]:
    """Hide whole the folders that hold the most mounts directly (deepest first among
    equals) until the mounts fit MAX_MOUNTS. Returns the folders hidden so."""
    total = sum(_mounts_made(m) for m in fitted.values())
    collapsed: list[str] = []
    hidden_whole = {rel for rel, m in fitted.items() if m.action == "hide" and m.is_dir}
    while total > MAX_MOUNTS:
        # A round: folders by how many mounts they hold directly; collapsing them makes
        # their parents the next round's candidates.
        direct: dict[str, int] = {}
        for rel in fitted:
            parent = posixpath.dirname(rel)
            if parent and not rel.startswith("/"):
                direct[parent] = direct.get(parent, 0) + 1
        order = [d for d in direct if d not in fitted and not _inside(d, hidden_whole)]
        if not order:
            break
        order.sort(key=lambda d: (-direct[d], -d.count("/"), d))
        names = sorted(fitted)
        for folder in order:
            if total <= MAX_MOUNTS:
                break
            if _inside(folder, hidden_whole):
                continue
            first = bisect.bisect_left(names, folder + "/")
            last = bisect.bisect_left(names, folder + "0")  # "0" sorts right after "/"
            for rel in names[first:last]:
                if rel in fitted:
                    total -= _mounts_made(fitted.pop(rel))
            fitted[folder] = Mount(folder, True, "hide")
            total += _mounts_made(fitted[folder])
            collapsed.append(folder)
            hidden_whole.add(folder)
    return collapsed


def _inside(rel: str, folders: set[str]) -> bool:
    """Whether `rel` lies below one of `folders`."""
    parent = posixpath.dirname(rel)
    while parent:
        if parent in folders:
            return True
        parent = posixpath.dirname(parent)
    return False


_SAFE_GIT_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


# Joins the cgroups whose cgroup.procs files are named by its first arguments, then
# execs the rest; one process from start to the user's command.
_JOIN_AND_EXEC = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    'echo $$ > "$1" || { echo "tachy: cannot join the command cgroup" >&2; exit 125; }; '
    'n=$((n - 1)); shift; done; exec "$@"'
)


class Sandbox:
    def __init__(self, workspace: Workspace, config: SandboxConfig | None = None) -> None:
        self.workspace = workspace
        self.config = config or SandboxConfig()
        bwrap = host_which("bwrap", workspace.root)
        self._prlimit = host_which("prlimit", workspace.root)
        if self.config.use_bubblewrap is None:
            self.bwrap = bwrap
        elif self.config.use_bubblewrap and not bwrap:
            raise RuntimeError("bubblewrap (bwrap) was requested but is not installed")
        else:
            self.bwrap = bwrap if self.config.use_bubblewrap else None
        self.jobs: dict[int, Job] = {}
        self._job_ids = itertools.count(1)
        # An editor that asks its user before each command the model runs sets this:
        # awaited with the command line, it raises (a ToolError) when the user refuses.
        self.gate: Callable[[str], Awaitable[None]] | None = None
        self._hidden = HiddenScanner(workspace)
        self._scan_lock = threading.Lock()
        # Bytes and files this run's commands added to the workspace's file system (net).
        self.disk_written = 0
        self.files_created = 0
        self._free_files_at_start: int | None = None

    async def approve(self, command: str) -> None:
        """Let the user refuse a command the model asked for (see `gate`); run_terminal_cmd
        calls it before the command starts. The sandbox's own runs (linters) are not asked."""
        if self.gate is not None:
            await self.gate(command)

    # ------------------------------------------------------------ disk quota
    def disk_quota_notice(self) -> str:
        quota = self.config.disk_quota_bytes or 0
        files = self._file_quota()
        return (
            f"stopped: this run's commands added more than {quota / 1024**3:.3g} GiB or "
            f"{files:,} files to the workspace's disk (its quota); what they wrote is still "
            "there: delete what is not needed"
        )

    def _disk_used(self) -> tuple[int, int] | None:
        """(bytes, files) in use on the workspace's file system."""
        try:
            info = os.statvfs(self.workspace.root)
        except OSError:
            return None
        return (info.f_blocks - info.f_bfree) * info.f_frsize, info.f_files - info.f_ffree

    def _file_quota(self) -> int:
        """The run's quota of new files: the configured one, or half of the inodes that
        were free when the run started, whichever is smaller."""
        if self._free_files_at_start is None:
            try:
                info = os.statvfs(self.workspace.root)
                # Some file systems (btrfs) report no inode count at all: no bound there.
                self._free_files_at_start = info.f_ffree if info.f_files else 0
            except OSError:
                self._free_files_at_start = 0
        quota = self.config.file_quota
        if quota is None:
            return 0
        if self._free_files_at_start:
            quota = min(quota, self._free_files_at_start // 2)
        return quota

    async def _watch_disk(self, exceeded: asyncio.Event) -> None:
        """Follow the file system's use while a command runs; set `exceeded` once the
        run's commands added more bytes or files than the quota. Counts the growth of
        the whole file system (what else writes to it meanwhile counts too): a bound,
        not a meter."""
        byte_quota, file_quota = self.config.disk_quota_bytes, self._file_quota()
        start = self._disk_used()
        if (byte_quota is None and not file_quota) or start is None:
            return
        try:
            while True:
                await asyncio.sleep(_DISK_POLL_S)
                now = self._disk_used()
                if now is None:
                    continue
                added = self.disk_written + now[0] - start[0]
                files = self.files_created + now[1] - start[1]
                if (byte_quota is not None and added > byte_quota) or (
                    file_quota and files > file_quota
                ):
                    exceeded.set()
                    return
        finally:
            now = self._disk_used()
            if now is not None:
                self.disk_written = max(0, self.disk_written + now[0] - start[0])
                self.files_created = max(0, self.files_created + now[1] - start[1])

    @property
    def mode(self) -> str:
        return "bubblewrap" if self.bwrap else "subprocess"

    # ------------------------------------------------------------ building
    def take_notices(self) -> list[str]:
        """What the sandbox did on its own that the model should know (said once)."""
        notices, self._hidden.notices = self._hidden.notices, []
        return notices

    def hidden_paths(self) -> list[Mount]:
        """What a command must not see or change (see HiddenScanner)."""
        with self._scan_lock:  # commands are built on threads; the cache is shared
            return self._hidden.scan()

    def _argv(self, command: str, writable: tuple[str, ...] = ()) -> list[str]:
        if not self.bwrap:
            return ["/bin/sh", "-c", command]
        return self.confine(["/bin/sh", "-c", command], writable)

    def confine(self, argv: list[str], writable: tuple[str, ...] = ()) -> list[str]:
        """`argv` wrapped to run in this sandbox (unchanged without bubblewrap): what
        tachy itself runs over the workspace's files (ruff, ripgrep) sees exactly what
        a command sees, so no tool is a side door around the rules. `writable`: host
        directories bound read-write at their own place for this one command (where
        tachy collects a test run's results)."""
        if not self.bwrap:
            return list(argv)
        root = str(self.workspace.root)
        tmpfs = ["--size", str(self.config.tmpfs_bytes), "--tmpfs"]
        args = [
            self.bwrap,
            *_root_binds(),
            "--dev", "/dev",
            "--proc", "/proc",
            *tmpfs, "/tmp",
            *tmpfs, "/run",
            *[arg for p in own_install_paths() for arg in ("--ro-bind", p, p)],
            *[arg for p in self.config.read_only_paths for arg in ("--ro-bind", p, p)],
            "--bind", root, root,
            "--bind", root, SANDBOX_MOUNT,
            *[arg for p in writable for arg in ("--bind", p, p)],
            "--unshare-all",
            # Root would keep every capability inside (and could unmount what hides
            # secrets, or remount the host read-write); bubblewrap also sets
            # no_new_privs, so no child can gain them back through a setuid binary.
            "--cap-drop", "ALL",
            "--die-with-parent",
            "--new-session",
        ]  # fmt: skip
        for mount in self.hidden_paths():
            if mount.rel.startswith("/"):  # a repository outside the workspace
                sources, targets = [mount.rel], [mount.rel]
            else:
                sources = [f"{root}/{mount.rel}"] * 2
                targets = [f"{base}/{mount.rel}" for base in (root, SANDBOX_MOUNT)]
            for source, target in zip(sources, targets, strict=True):
                if mount.action == "protect":
                    args += ["--ro-bind", source, target]
                elif mount.is_dir:
                    args += ["--size", str(_HIDDEN_DIR_BYTES), "--tmpfs", target]
                else:
                    args += ["--ro-bind", "/dev/null", target]
        args += ["--chdir", SANDBOX_MOUNT, *argv]
        return args

    def env(self) -> dict[str, str]:
        """The environment of commands: a few safe variables, never tachy's own (API
        keys)."""
        env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(
            HOME="/tmp",
            TMPDIR="/tmp",
            TERM="dumb",
            NO_COLOR="1",
            PYTHONDONTWRITEBYTECODE="1",
            PAGER="cat",
            GIT_PAGER="cat",
        )
        if not self.bwrap:
            env["HOME"] = str(self.workspace.root)
        env.update(self.config.env)
        return env

    async def _spawn(
        self, command: str, stdout, writable: tuple[str, ...] = ()
    ) -> tuple[asyncio.subprocess.Process, ProcessCgroup | None]:
        config = self.config
        nproc = _within_hard_limit(resource.RLIMIT_NPROC, nproc_limit(config.max_processes))
        fsize = _within_hard_limit(resource.RLIMIT_FSIZE, config.max_file_bytes)
        cgroup = ProcessCgroup.create(
            max_processes=config.max_processes, memory_bytes=config.memory_bytes
        )

        # Building argv scans the workspace for hidden paths (cached, but still a walk
        # of its directories): on a thread, so a language server's loop never waits.
        argv = await asyncio.to_thread(self._argv, command, writable)
        preexec = None
        if self._prlimit:
            # Limits are applied by a tiny shell and prlimit that then exec the command,
            # so CPython can start it with vfork(): a preexec_fn would force a fork() of
            # this whole process (several ms, more for a big language server) and is
            # unsafe beside the tool threads.
            procs = [str(d / "cgroup.procs") for d in cgroup.dirs] if cgroup else []
            argv = [
                "/bin/sh", "-c", _JOIN_AND_EXEC, "tachy-limits", str(len(procs)), *procs,
                self._prlimit, "--core=0", f"--fsize={fsize[0]}", f"--nproc={nproc[0]}", "--", *argv,
            ]  # fmt: skip
        else:

            def preexec() -> None:  # runs in the child between fork and exec
                if cgroup is not None:
                    cgroup.join()
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                resource.setrlimit(resource.RLIMIT_FSIZE, fsize)
                resource.setrlimit(resource.RLIMIT_NPROC, nproc)

        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=stdout,
                stderr=asyncio.subprocess.STDOUT,
                cwd=self.workspace.root,
                env=self.env(),
                start_new_session=True,
                preexec_fn=preexec,
            )
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise
        return process, cgroup

    @staticmethod
    def _kill(process: asyncio.subprocess.Process, cgroup: ProcessCgroup | None) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill_all()

    # ------------------------------------------------------------- running
    async def _start(
        self, command: str, stdout, writable: tuple[str, ...] = ()
    ) -> tuple[asyncio.subprocess.Process, ProcessCgroup | None]:
        """_spawn, safe against cancellation: a command that was already started when
        the caller is cancelled is stopped again rather than left running."""
        spawning = asyncio.ensure_future(self._spawn(command, stdout, writable))
        try:
            return await asyncio.shield(spawning)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                process, cgroup = await spawning
                await self._stop(process, cgroup)
            raise

    async def _stop(
        self, process: asyncio.subprocess.Process, cgroup: ProcessCgroup | None
    ) -> None:
        """Kill every process of a command, reap it and remove its cgroup."""
        self._kill(process, cgroup)
        if process.returncode is None:
            await asyncio.shield(process.wait())
        if cgroup is not None:
            await asyncio.shield(asyncio.to_thread(cgroup.remove, _CGROUP_REMOVE_WAIT_S))

    async def run(
        self, command: str, timeout_s: float | None = None, *, writable: tuple[str, ...] = ()
    ) -> CommandResult:
        """Run a command to completion (or its time limit) and capture its output.

        The command ends when its shell exits; processes it left running are killed
        then. On timeout, too much output or cancellation every process it started
        is killed.
        """
        config = self.config
        timeout = min(timeout_s or config.default_timeout_s, config.max_timeout_s)
        started = time.monotonic()
        # Our own pipe rather than asyncio's: asyncio's Process.wait() also waits for
        # its pipes to close, which never happens once reading stops (output
        # overflow) or while a leftover process holds the write end.
        read_fd, write_fd = os.pipe()
        try:
            process, cgroup = await self._start(command, write_fd, writable)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        capture = _OutputCapture(config, read_fd)
        result = CommandResult(exit_code=None, head=b"", tail=b"", total_bytes=0)
        exited = asyncio.ensure_future(process.wait())
        overflowed = asyncio.ensure_future(capture.overflow.wait())
        disk_full = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch_disk(disk_full))
        over_quota = asyncio.ensure_future(disk_full.wait())
        try:
            done, _ = await asyncio.wait(
                {exited, overflowed, over_quota},
                timeout=timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if over_quota in done and exited not in done:
                result.disk_quota_hit = True
                capture.take_pending()
            elif overflowed in done:
                result.output_overflow = True
            elif exited not in done:
                result.timed_out = True
                # The output is what came before the kill: what the dying processes
                # write after it (a shell's "Killed") is not the command's.
                capture.take_pending()
            # Stop everything still running: on timeout or overflow the command itself,
            # after a normal exit whatever it left behind.
            self._kill(process, cgroup)
            if not (result.output_overflow or result.timed_out or result.disk_quota_hit):
                # Collect what is still in the pipe; it closes once every process that
                # held it is gone (bounded, for processes that escaped the kill).
                await asyncio.wait({capture.closed}, timeout=_DRAIN_GRACE_S)
        except asyncio.CancelledError:
            result.cancelled = True
            raise
        finally:
            capture.close()
            overflowed.cancel()
            over_quota.cancel()
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await self._stop(process, cgroup)
            self.workspace.rules.invalidate()  # the command may have changed ignore files
            if self.bwrap:
                # Look at what the command left (a new repository) before anyone else
                # (an editor's git) acts on it.
                await asyncio.shield(asyncio.to_thread(self.hidden_paths))
            result.head, result.tail = bytes(capture.head), bytes(capture.tail)
            result.total_bytes = capture.total
            result.duration_s = time.monotonic() - started
        if not (result.timed_out or result.output_overflow or result.disk_quota_hit):
            result.exit_code = process.returncode
        return result

    async def start_job(self, command: str) -> Job:
        """Start a command in the background; its output goes to .tachy/jobs/N.log."""
        job_id = next(self._job_ids)
        log_rel = f"{JOBS_DIR}/{job_id}.log"
        # Opened by tachy on the host, so through directory handles with no symlink
        # followed: a link planted at .tachy or at the log must never be written
        # through (StateDirError: the command does not start).
        log_fd = statedir.create_file(self.workspace.root, log_rel.removeprefix(".tachy/"))
        try:
            process, cgroup = await self._start(command, asyncio.subprocess.PIPE)
        except BaseException:
            os.close(log_fd)
            raise
        job = Job(id=job_id, command=command, log_path=log_rel, process=process, cgroup=cgroup)
        job.pump = asyncio.create_task(self._pump_job(job, log_fd))
        self.jobs[job_id] = job
        return job

    async def _pump_job(self, job: Job, log_fd: int) -> None:
        written = 0
        limit = self.config.job_log_bytes
        disk_full = asyncio.Event()
        watcher = asyncio.create_task(self._watch_disk(disk_full))

        async def stop_when_full() -> None:
            await disk_full.wait()
            self._kill(job.process, job.cgroup)

        stopper = asyncio.create_task(stop_when_full())
        try:
            with open(log_fd, "wb", buffering=0) as log:
                assert job.process.stdout is not None
                while chunk := await job.process.stdout.read(65536):
                    if written < limit:
                        piece = chunk[: limit - written]
                        log.write(piece)
                        written += len(piece)
                        if written >= limit:
                            log.write(b"\n[tachy: log limit reached; further output discarded]\n")
                job.exit_code = await job.process.wait()
                if disk_full.is_set():
                    log.write(f"\n[tachy: {self.disk_quota_notice()}]\n".encode())
                log.write(f"\n[tachy: job {job.id} exited with code {job.exit_code}]\n".encode())
        finally:
            stopper.cancel()
            watcher.cancel()
            await asyncio.gather(stopper, watcher, return_exceptions=True)
            self._kill(job.process, job.cgroup)
            if job.cgroup is not None:
                await asyncio.shield(asyncio.to_thread(job.cgroup.remove, _CGROUP_REMOVE_WAIT_S))
            job.finished.set()

    async def close(self) -> None:
        """Kill every background job (called when a run ends or is cancelled)."""
        for job in list(self.jobs.values()):
            self._kill(job.process, job.cgroup)
            if job.pump is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(job.pump), 5)
                except (TimeoutError, asyncio.CancelledError):
                    job.pump.cancel()
        self.jobs.clear()
