"""File access beneath a root that no symlink can lead out of, even one swapped in
while tachy works.

"Resolve the path, check it, then open it" has a gap: a command running beside the
agent can replace a checked path (or one of its directories) with a symlink before
the open, and the open follows it, out of the workspace or onto a secret file. Here a
path is opened one component at a time relative to the directory handle before it,
with O_NOFOLLOW on every step: symlinks are followed only by reading them (readlinkat)
and only while they stay beneath the root, and the caller learns the real path of
what it opened, so it can judge that path (ignored? secret?) with the file already
pinned. A symlink that appears between the look and the open makes the open fail
(ELOOP/ENOTDIR) instead of being followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path
from typing import BinaryIO

MAX_SYMLINK_HOPS = 40  # as the kernel allows


class EscapeError(OSError):
    """The path leads out of the root (through `..` or a symlink), or loops."""


def _split(rel: str) -> list[str]:
    return [part for part in rel.split("/") if part not in ("", ".")]


class Walk:
    """The result of resolving a path beneath a root: the handle of the directory that
    holds its last component, that component's name, and the real path (relative to
    the root, '/'-separated). Close it (or use it as a context manager)."""

    def __init__(self, dir_fd: int, name: str, real: str) -> None:
        self.dir_fd = dir_fd
        self.name = name
        self.real = real

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Walk:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def lstat(self) -> os.stat_result | None:
        """The last component's own status (a symlink is not followed); None if absent."""
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None


def walk(
    root: Path,
    rel: str,
    *,
    follow_last: bool = True,
    follow_links: bool = True,
    create_dirs: bool = False,
) -> Walk:
    """Resolve `rel` beneath `root` (an absolute, already resolved directory).

    Symlinks in directories along the way are followed while they stay beneath the
    root; the last component's symlink too when `follow_last` (an editor writing
    through a link changes the file it points to), else it is left as it is (a revert
    replaces the link, never what it points to). With `follow_links=False` no symlink
    is followed at all: one along the way is an error (ELOOP). With `create_dirs`,
    missing directories are made. Raises EscapeError for a way out, OSError otherwise.
    """
    parts = _split(rel)
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "the root itself is not a file", str(root))
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    stack: list[int] = []  # handles of the directories above `fd`, for '..'
    where: list[str] = []  # the real path of `fd` below the root
    hops = 0
    try:
        while parts:
            part = parts.pop(0)
            if part == "..":
                if not where:
                    raise EscapeError(errno.EXDEV, "the path leads out of the workspace", rel)
                os.close(fd)
                fd = stack.pop()
                where.pop()
                continue
            last = not parts
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if last:
                    return Walk(_take(fd, stack), part, "/".join([*where, part]))
                if not create_dirs:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode) and (follow_last or not last):
                if not follow_links:
                    raise OSError(errno.ELOOP, "a symlink is in the way", rel)
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise EscapeError(errno.ELOOP, "too many levels of symbolic links", rel)
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    inside = _beneath(root, target)
                    if inside is None:
                        raise EscapeError(errno.EXDEV, "a symlink leads out of the workspace", rel)
                    # Start again from the root with the target's path.
                    os.close(fd)
                    for handle in stack:
                        os.close(handle)
                    stack.clear()
                    where.clear()
                    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                    parts = _split(inside) + parts
                else:
                    parts = _split(target) + parts
                continue
            if last:
                return Walk(_take(fd, stack), part, "/".join([*where, part]))
            # O_NOFOLLOW: a directory swapped for a symlink since the stat fails here.
            child = os.open(
                part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            stack.append(fd)
            fd = child
            where.append(part)
        # The path ended on a '..' (from a link such as `up -> ..`): what it names is
        # the directory `fd`, held by its parent as where[-1].
        if not where:
            raise IsADirectoryError(errno.EISDIR, "the path names the workspace root", rel)
        os.close(fd)
        fd = stack.pop()
        return Walk(_take(fd, stack), where[-1], "/".join(where))
    except BaseException:
        os.close(fd)
        for handle in stack:
            os.close(handle)
        raise


def _take(fd: int, stack: list[int]) -> int:
    for handle in stack:
        os.close(handle)
    stack.clear()
    return fd


def _beneath(root: Path, target: str) -> str | None:
    """`target` (absolute) relative to the root, or None when it lies elsewhere."""
    normal = os.path.normpath(target)
    base = str(root)
    if normal == base:
        return ""
    if normal.startswith(base.rstrip("/") + "/"):
        return normal[len(base.rstrip("/")) + 1 :]
    return None


def open_file(
    root: Path, rel: str, flags: int = os.O_RDONLY, *, follow_links: bool = True
) -> tuple[int, str]:
    """An open descriptor of the regular file `rel` beneath `root`, and its real path.
    With `follow_links=False` no symlink is followed at all (ELOOP), as the index
    wants: it never indexes a file by a link's name.

    Raises EscapeError for a way out, IsADirectoryError, or OSError (ELOOP when a
    symlink was swapped in while opening; EINVAL-like errors for FIFOs and devices,
    which are refused rather than opened, since a FIFO would block forever)."""
    with walk(root, rel, follow_last=follow_links, follow_links=follow_links) as found:
        fd = os.open(
            found.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=found.dir_fd
        )
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        raise OSError(errno.EINVAL, "not a regular file", rel)
    os.set_blocking(fd, True)
    return fd, found.real


def read_file(
    root: Path, rel: str, limit: int | None = None, *, follow_links: bool = True
) -> tuple[bytes, str]:
    """The bytes of a regular file beneath `root` (at most `limit`) and its real path."""
    fd, real = open_file(root, rel, follow_links=follow_links)
    with os.fdopen(fd, "rb") as handle:
        return (handle.read() if limit is None else handle.read(limit)), real


def write_file(root: Path, rel: str, data: bytes | BinaryIO) -> str:
    """Write the file `rel` beneath `root` atomically (a temporary file renamed over
    it) with `data` (bytes, or an open file copied in blocks), keeping an existing file's permission bits; returns `rel`. No symlink is
    followed (one along the way is an error, ELOOP) and the rename replaces whatever
    the name holds, so a symlink swapped in at the last moment is replaced, never
    written through. Missing directories are made."""
    with walk(root, rel, follow_last=False, follow_links=False, create_dirs=True) as found:
        old = found.lstat()
        tmp = f".{found.name}.tachy-tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=found.dir_fd)
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o666,
            dir_fd=found.dir_fd,
        )
        try:
            with os.fdopen(fd, "wb") as handle:
                if isinstance(data, bytes):
                    handle.write(data)
                else:
                    shutil.copyfileobj(data, handle)
                if old is not None and stat.S_ISREG(old.st_mode):
                    os.fchmod(handle.fileno(), old.st_mode & 0o7777)
            os.rename(tmp, found.name, src_dir_fd=found.dir_fd, dst_dir_fd=found.dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=found.dir_fd)
            raise
        return found.real


def create_file(root: Path, rel: str, mode: int = 0o644) -> int:
    """A descriptor of the file `rel` beneath `root`, created or emptied, open for
    writing. No symlink is followed anywhere along the path (ELOOP), so a link planted
    at `rel` or at a directory above it is never written through; missing directories
    are made."""
    with walk(root, rel, follow_last=False, follow_links=False, create_dirs=True) as found:
        return os.open(
            found.name,
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=found.dir_fd,
        )


def make_dirs(root: Path, rel: str) -> Path:
    """Make the directory `rel` beneath `root` and the ones above it, following no
    symlink (ELOOP where one is in the way; NotADirectoryError where a file is).
    Returns its path."""
    # Directories along a path are made up to its last component: name one below.
    with walk(root, f"{rel}/_", follow_last=False, follow_links=False, create_dirs=True):
        pass
    return root / rel


def remove_file(root: Path, rel: str) -> str:
    """Remove the file (or symlink) `rel` beneath `root` itself, never what a link
    points to; no symlink along the way is followed (ELOOP). A missing file is not an
    error. Returns `rel`."""
    with walk(root, rel, follow_last=False, follow_links=False) as found:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(found.name, dir_fd=found.dir_fd)
        return found.real


def real_path(root: Path, rel: str) -> str:
    """The real path of `rel` beneath `root`, symlinks followed while they stay there
    ('' for the root itself). Raises EscapeError for a way out."""
    parts = _split(rel)
    if not parts:
        return ""
    try:
        with walk(root, rel) as found:
            return found.real
    except IsADirectoryError:
        return ""
    except (FileNotFoundError, NotADirectoryError):
        # A directory along the way does not exist (yet): what follows it cannot hold
        # a symlink, so the real path is the real path of what exists, then the rest.
        for cut in range(len(parts) - 1, 0, -1):
            try:
                head = real_path(root, "/".join(parts[:cut]))
            except (FileNotFoundError, NotADirectoryError):
                continue
            return "/".join(p for p in [head, *parts[cut:]] if p)
        return "/".join(parts)
