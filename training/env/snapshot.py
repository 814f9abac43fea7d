"""Copy-on-write checkouts of a task repository: one small interface, three ways.

A rollout may change anything in its repository, and the next rollout must start from
the clean snapshot again, many times a minute. A `Checkout` is one writable tree made
from a read-only snapshot directory, with a cheap `reset` back to it:

- "overlay": kernel overlayfs. The snapshot is the shared lower layer; a checkout's
  changes go to its own upper layer on a size-limited tmpfs, so the disk limit is real
  (a full sandbox gets ENOSPC, the host disk never fills) and a reset is two unmounts
  and two mounts, whatever the repository's size. Needs mount rights: root, or a
  process started inside a user namespace (`unshare -Urm python ...`).
- "reflink": `FICLONE` clones of the snapshot's files (btrfs, xfs, bcachefs): a copy
  costs metadata only. Detected by trying a clone, never assumed.
- "copy": a plain copy. A reset restores only what changed, found by comparing the
  tree against a stat manifest taken at copy time (inode and ctime of each entry,
  which no unprivileged write can preserve) and deleting what was added. Where mounts
  are allowed, the copy lives on a size-limited tmpfs too.

    strategy, why = choose_strategy("auto", workdir)
    checkout = strategy.create(directory, snapshot_dir, disk_bytes=1 << 30)
    checkout.reset(files={"src/calc.py": buggy_text})   # snapshot + the task's files
    checkout.destroy()                                  # unmount, delete

Processes still running on a mounted checkout when it is reset or destroyed (a
command's leftovers, even inside another mount namespace) are found through their
working directory's device and killed, so an unmount never leaves a tree in use.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import signal
import stat
import tempfile
import time
from pathlib import Path

STRATEGIES = ("overlay", "reflink", "copy")

FICLONE = 0x40049409  # ioctl(dst, FICLONE, src): share src's extents (linux/fs.h)
_MS_NOSUID, _MS_NODEV = 0x2, 0x4
_MNT_DETACH = 0x2


class SnapshotError(Exception):
    """A checkout that cannot be made, reset or removed; the message says why."""


class DiskFullError(SnapshotError):
    """The host disk (or the checkout's own limit) filled up while making a checkout."""


# ------------------------------------------------------------------- mounts

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _mount(source: str, target: Path, fstype: str, options: str) -> None:
    """mount(2) directly: a `mount` process would cost milliseconds per reset."""
    flags = _MS_NOSUID | _MS_NODEV
    if _libc.mount(source.encode(), os.fsencode(target), fstype.encode(), flags, options.encode()):
        code = ctypes.get_errno()
        raise OSError(code, f"mount -t {fstype} on {target}: {os.strerror(code)}")


def _umount(target: Path, *, detach: bool = False) -> None:
    if _libc.umount2(os.fsencode(target), _MNT_DETACH if detach else 0):
        code = ctypes.get_errno()
        raise OSError(code, f"umount {target}: {os.strerror(code)}")


def _unescape(field: str) -> str:
    """Mount points in /proc/self/mountinfo escape space, tab, newline and backslash."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts_under(directory: Path) -> list[Path]:
    """Mount points at or below `directory` in this mount namespace, deepest first."""
    base = str(directory)
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = _unescape(line.split(" ", 5)[4])
            if point == base or point.startswith(base + "/"):
                found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def kill_users(device: int) -> int:
    """SIGKILL every process whose working directory or root is on `device` (a mounted
    checkout's own st_dev); returns how many. Sees into other mount namespaces, so it
    finds a command's leftovers inside bubblewrap too."""
    me = os.getpid()
    killed = 0
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            for link in ("cwd", "root"):
                try:
                    if os.stat(f"/proc/{entry.name}/{link}").st_dev != device:
                        continue
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
                break
    return killed


def release_mount(point: Path, device: int | None = None) -> None:
    """Unmount `point`, killing what keeps it busy; a lazy unmount as the last resort
    (the tree then disappears from the host at once and its memory when the last
    user dies)."""
    for attempt in range(20):
        try:
            _umount(point)
            return
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return  # not mounted (any more)
            if exc.errno != errno.EBUSY:
                raise SnapshotError(f"cannot unmount {point}: {exc.strerror}") from None
        if device is not None:
            kill_users(device)
        time.sleep(0.002 * (attempt + 1))
    with contextlib.suppress(OSError):
        _umount(point, detach=True)


def mounted_device(point: Path) -> int | None:
    """The st_dev of the file system mounted at `point`; None when nothing is mounted
    there (same device as its parent), so that no caller ever kills the users of the
    host's own file system."""
    try:
        device = os.stat(point).st_dev
        if device == os.stat(point.parent).st_dev:
            return None
    except OSError:
        return None
    return device


def remove_tree(path: Path) -> None:
    """Delete a tree even where a command made parts of it unreadable or read-only."""

    def retry(function, target, _exc) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
        with contextlib.suppress(FileNotFoundError):
            if function in (os.rmdir, os.unlink):
                function(target)
            else:
                shutil.rmtree(target, ignore_errors=True)

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=retry)


def _full_disk(exc: OSError, where: Path) -> SnapshotError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(
            f"no space left on the device holding {where} while making a sandbox: free "
            "space there, use a smaller pool, or put the pool's workdir elsewhere"
        )
    return SnapshotError(f"cannot make a sandbox in {where}: {exc}")


# ------------------------------------------------------------ capabilities

_probes: dict[tuple[str, str], str | None] = {}


def _probe(kind: str, workdir: Path, test, key: str = "") -> str | None:
    """Run a capability test once per (kind, key, workdir); None when it works, else
    why."""
    key = (f"{kind}:{key}", str(workdir))
    if key not in _probes:
        workdir.mkdir(parents=True, exist_ok=True)
        # Named like a sandbox (PID-...), so a probe cut short by a kill is swept too.
        scratch = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-probe-{kind}-", dir=workdir))
        try:
            _probes[key] = test(scratch)
        except OSError as exc:
            _probes[key] = exc.strerror or str(exc)
        finally:
            for point in mounts_under(scratch):
                with contextlib.suppress(OSError):
                    _umount(point, detach=True)
            remove_tree(scratch)
    return _probes[key]


def _in_user_namespace() -> bool:
    try:
        return Path("/proc/self/uid_map").read_text().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def _overlay_options(lower: Path, upper: Path, work: Path) -> str:
    for path in (lower, upper, work):
        if any(c in str(path) for c in ",:\n"):
            raise SnapshotError(
                f"{path} contains ',', ':' or a newline, which overlayfs cannot take in a "
                "layer path; move the task set or the workdir, or use strategy='copy'"
            )
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    # Inside a user namespace overlayfs may not use trusted.* xattrs: with userxattr
    # it keeps whiteouts and opaque directories in user.* ones instead.
    return options + (",userxattr" if _in_user_namespace() else ",redirect_dir=on")


def _test_overlay(scratch: Path) -> str | None:
    for name in ("lower/d", "disk", "root"):
        (scratch / name).mkdir(parents=True)
    (scratch / "lower" / "d" / "f").write_text("x")
    _mount("tmpfs", scratch / "disk", "tmpfs", "size=1m,mode=0755")
    (scratch / "disk" / "upper").mkdir()
    (scratch / "disk" / "work").mkdir()
    options = _overlay_options(scratch / "lower", scratch / "disk/upper", scratch / "disk/work")
    _mount("overlay", scratch / "root", "overlay", options)
    # What a checkout must support: change, delete and replace lower files and dirs.
    (scratch / "root" / "d" / "f").write_text("y")
    shutil.rmtree(scratch / "root" / "d")
    (scratch / "root" / "d").mkdir()
    if (scratch / "lower" / "d" / "f").read_text() != "x" or any((scratch / "root/d").iterdir()):
        return "overlayfs mounted but did not keep the lower layer apart"
    return None


def _test_tmpfs(scratch: Path) -> str | None:
    _mount("tmpfs", scratch, "tmpfs", "size=64k")
    return None


def _test_reflink(source_dir: Path):
    def test(scratch: Path) -> str | None:
        # Clone one of the snapshot's own files into the workdir (read-only: the
        # snapshot may be the lower layer of live overlays): same file system, and
        # one that clones.
        source = next((path for path, _ in _files(source_dir)), None)
        if source is None:
            return f"{source_dir} holds no file to test a clone with"
        try:
            with open(source, "rb") as src, open(scratch / "clone", "wb") as dst:
                fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError as exc:
            return (
                f"the file system does not clone files ({exc.strerror}); reflinks need "
                "btrfs, xfs or bcachefs with the snapshot and the workdir on the same one"
            )
        return None

    return test


def _files(root: Path):
    for rel, info in _walk(root):
        if stat.S_ISREG(info.st_mode):
            yield root / rel, info


def overlay_unavailable(workdir: Path) -> str | None:
    """None when overlay checkouts work under `workdir`, else the reason."""
    if not hasattr(_libc, "mount"):
        return "this C library has no mount()"
    why = _probe("overlay", workdir, _test_overlay)
    if why is None:
        return None
    return (
        f"overlayfs cannot be mounted here ({why}); it needs root or a process started in "
        "a user namespace (unshare -Urm)"
    )


def tmpfs_available(workdir: Path) -> bool:
    return _probe("tmpfs", workdir, _test_tmpfs) is None


def reflink_unavailable(workdir: Path, snapshot_dir: Path | None) -> str | None:
    if snapshot_dir is None:
        return "no snapshot to test clones from"
    return _probe("reflink", workdir, _test_reflink(snapshot_dir), str(snapshot_dir))


# ------------------------------------------------------------- checkouts


def write_files(root: Path, files: dict[str, str]) -> None:
    """Write task files (path -> text) over a checkout; a path leaving it is refused."""
    for rel, text in files.items():
        target = root / rel
        if os.path.commonpath([root, os.path.abspath(target)]) != str(root):
            raise SnapshotError(f"task file {rel!r} lies outside the repository")
        _plain_folders(root, rel)
        if target.is_symlink() or target.is_dir():
            remove_tree(target)
        target.write_text(text, encoding="utf-8")


def _plain_folders(root: Path, rel: str) -> None:
    """Make every folder above root/rel a real directory: a symlink or file a rollout
    put in the way is removed (never followed), so what is written next lands inside
    the checkout. Run with the rollout's processes stopped."""
    folder = root
    for part in Path(rel).parts[:-1]:
        folder = folder / part
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            remove_tree(folder)
        if not folder.exists():
            folder.mkdir()


def restore_paths(root: Path, snapshot: Path, paths: list[str]) -> None:
    """Put files or whole directories back to the snapshot's version (added files in a
    restored directory are deleted; a path absent from the snapshot is removed)."""
    for rel in paths:
        source, target = snapshot / rel, root / rel
        if os.path.commonpath([root, os.path.abspath(target)]) != str(root):
            raise SnapshotError(f"test path {rel!r} lies outside the repository")
        _plain_folders(root, rel)
        if target.is_symlink() or target.exists():
            remove_tree(target)
        if source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), target)
        elif source.is_dir():
            shutil.copytree(source, target, symlinks=True)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


class Checkout:
    """A writable tree at `root` made from the read-only `snapshot` directory."""

    strategy: str
    root: Path
    snapshot: Path
    disk_limited: bool  # True when writes beyond the disk limit get ENOSPC

    def reset(self, snapshot: Path | None = None, files: dict[str, str] | None = None) -> None:
        """Back to the snapshot (or to another one), then `files` written over it."""
        raise NotImplementedError

    def destroy(self) -> None:
        """Kill what still runs in it, unmount and delete everything it made."""
        raise NotImplementedError

    def disk_free(self) -> int | None:
        """Bytes still free under the disk limit; None without a limit."""
        if not self.disk_limited:
            return None
        info = os.statvfs(self.disk)
        return info.f_bavail * info.f_frsize


class OverlayCheckout(Checkout):
    strategy = "overlay"
    disk_limited = True

    def __init__(self, directory: Path, snapshot: Path, disk_bytes: int | None) -> None:
        self.directory = directory
        self.snapshot = snapshot
        self.disk_bytes = disk_bytes
        self.disk = directory / "disk"  # tmpfs: upper/ and work/
        self.root = directory / "root"  # the overlay
        self.disk.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(exist_ok=True)
        self._mount()

    def _mount(self) -> None:
        options = "mode=0755"
        if self.disk_bytes:
            # One inode per page of space: a loop creating empty files hits ENOSPC too.
            inodes = max(4096, self.disk_bytes // 4096)
            options += f",size={self.disk_bytes},nr_inodes={inodes}"
        _mount("tmpfs", self.disk, "tmpfs", options)
        (self.disk / "upper").mkdir()
        (self.disk / "work").mkdir()
        options = _overlay_options(self.snapshot, self.disk / "upper", self.disk / "work")
        try:
            _mount("overlay", self.root, "overlay", options)
        except OSError as exc:
            release_mount(self.disk)
            raise SnapshotError(f"cannot mount the overlay of {self.snapshot}: {exc}") from None

    def _unmount(self) -> None:
        device = mounted_device(self.root)
        if device is not None:
            kill_users(device)
        release_mount(self.root, device)
        release_mount(self.disk, mounted_device(self.disk))

    def reset(self, snapshot: Path | None = None, files: dict[str, str] | None = None) -> None:
        self._unmount()
        if snapshot is not None:
            self.snapshot = snapshot
        self._mount()
        write_files(self.root, files or {})

    def destroy(self) -> None:
        self._unmount()
        remove_tree(self.directory)


_Stamp = tuple[int, int, int]  # (file type and mode, inode, ctime_ns)


class CopyCheckout(Checkout):
    """A copy with an incremental reset; `clone=True` copies by reflink."""

    def __init__(
        self, directory: Path, snapshot: Path, disk_bytes: int | None, *, clone: bool
    ) -> None:
        self.directory = directory
        self.snapshot = snapshot
        self.clone = clone
        self.strategy = "reflink" if clone else "copy"
        # The tree sits on its own tmpfs where mounting is allowed (a real disk limit);
        # reflinks need the snapshot's file system, so they never do.
        self.disk = directory / "disk"
        self.disk.mkdir(parents=True, exist_ok=True)
        self.disk_bytes = disk_bytes
        self.disk_limited = bool(not clone and disk_bytes and tmpfs_available(directory.parent))
        self.root = self.disk / "tree"
        self.manifest: dict[str, _Stamp] = {}
        self._copy_all()

    # A directory's ctime changes whenever an entry is added or removed in it, so
    # directories are judged by type, mode and inode only; their entries by all three.
    @staticmethod
    def _stamp(info: os.stat_result) -> _Stamp:
        if stat.S_ISDIR(info.st_mode):
            return info.st_mode, info.st_ino, 0
        return info.st_mode, info.st_ino, info.st_ctime_ns

    def _copy_file(self, source: str, target: str) -> None:
        if not self.clone:
            shutil.copy2(source, target)
            return
        with open(source, "rb") as src, open(target, "wb") as dst:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        shutil.copystat(source, target)

    def _copy_all(self) -> None:
        """A fresh copy of the snapshot; on a new tmpfs sized for it plus the limit."""
        if self.disk_limited:
            release_mount(self.disk, mounted_device(self.disk))
            assert self.disk_bytes
            size = self.disk_bytes + _tree_bytes(self.snapshot)
            _mount("tmpfs", self.disk, "tmpfs", f"size={size},mode=0755")
        remove_tree(self.root)
        try:
            shutil.copytree(self.snapshot, self.root, symlinks=True, copy_function=self._copy_file)
        except shutil.Error as exc:
            raise SnapshotError(f"cannot copy {self.snapshot}: {exc.args[0][:3]}") from None
        except OSError as exc:
            raise _full_disk(exc, self.root) from None
        self.manifest = {rel: self._stamp(info) for rel, info in _walk(self.root)}

    def _restore(self, rel: str) -> None:
        source, target = self.snapshot / rel, self.root / rel
        info = source.lstat()
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(source), target)
        elif stat.S_ISDIR(info.st_mode):
            if not target.is_dir():
                target.mkdir()
            os.chmod(target, stat.S_IMODE(info.st_mode))
        else:
            self._copy_file(str(source), str(target))
        self.manifest[rel] = self._stamp(target.lstat())

    def reset(self, snapshot: Path | None = None, files: dict[str, str] | None = None) -> None:
        if snapshot is not None and snapshot != self.snapshot:
            self.snapshot = snapshot
            self._copy_all()
        else:
            seen: set[str] = set()
            damaged: list[str] = []
            for rel, info in _walk(self.root):
                want = self.manifest.get(rel)
                if want is not None and want == self._stamp(info):
                    seen.add(rel)
                    continue
                if want is not None and stat.S_ISDIR(info.st_mode) and stat.S_ISDIR(want[0]):
                    seen.add(rel)  # the directory stays; only its mode is put back
                    damaged.append(rel)
                    continue
                remove_tree(self.root / rel)  # added, replaced or changed
            missing = [rel for rel in self.manifest if rel not in seen]
            try:
                # Sorted: a directory comes before its entries.
                for rel in sorted([*damaged, *missing]):
                    self._restore(rel)
            except OSError as exc:
                raise _full_disk(exc, self.root) from None
        write_files(self.root, files or {})

    def destroy(self) -> None:
        if self.disk_limited:
            device = mounted_device(self.disk)
            if device is not None:
                kill_users(device)
            release_mount(self.disk, device)
        remove_tree(self.directory)


def _walk(root: Path):
    """(rel, lstat) of every entry below root, not following symlinks; directories a
    command made unreadable are opened up so that they can be compared."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        path = os.path.join(root, rel_dir) if rel_dir else str(root)
        try:
            try:
                entries = list(os.scandir(path))
            except PermissionError:
                os.chmod(path, 0o700)
                entries = list(os.scandir(path))
        except FileNotFoundError:
            continue  # the caller removed it (an added directory)
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            info = entry.stat(follow_symlinks=False)
            yield rel, info
            if stat.S_ISDIR(info.st_mode):
                stack.append(rel)


def _tree_bytes(root: Path) -> int:
    """Space a copy of the tree takes on tmpfs (whole pages, plus one per entry)."""
    total = 0
    for _, info in _walk(root):
        total += (info.st_size + 8191) // 4096 * 4096
    return total


# ------------------------------------------------------------- strategies


class Strategy:
    """Makes checkouts one way; `create` is all a pool needs."""

    def __init__(self, name: str) -> None:
        self.name = name

    def create(self, directory: Path, snapshot: Path, *, disk_bytes: int | None) -> Checkout:
        """A checkout of `snapshot` in `directory` (which it owns and deletes)."""
        directory.mkdir(parents=True, exist_ok=True)
        try:
            if self.name == "overlay":
                return OverlayCheckout(directory, snapshot, disk_bytes)
            return CopyCheckout(directory, snapshot, disk_bytes, clone=self.name == "reflink")
        except BaseException:
            for point in mounts_under(directory):
                release_mount(point)
            remove_tree(directory)
            raise

    def __repr__(self) -> str:
        return f"Strategy({self.name!r})"


def strategy_unavailable(name: str, workdir: Path, snapshot: Path | None = None) -> str | None:
    """None when strategy `name` works here, else why not."""
    if name == "overlay":
        if snapshot is not None and any(c in str(snapshot) for c in ",:\n"):
            return f"overlayfs cannot take ',', ':' or a newline in a layer path ({snapshot})"
        return overlay_unavailable(workdir)
    if name == "reflink":
        return reflink_unavailable(workdir, snapshot)
    if name == "copy":
        return None
    raise SnapshotError(f"unknown strategy {name!r}; use one of auto, {', '.join(STRATEGIES)}")


def choose_strategy(name: str, workdir: Path, snapshot: Path | None = None) -> tuple[Strategy, str]:
    """The strategy to use and a sentence saying why. "auto" takes the first that works
    of overlay, reflink and copy; a named one that cannot work here is an error."""
    if name != "auto":
        why = strategy_unavailable(name, workdir, snapshot)
        if why is not None:
            raise SnapshotError(f"strategy {name!r} does not work here: {why}")
        return Strategy(name), f"{name} (asked for)"
    reasons = []
    for candidate in STRATEGIES:
        why = strategy_unavailable(candidate, workdir, snapshot)
        if why is None:
            picked = f"{candidate} (auto" + (f"; not {'; not '.join(reasons)}" if reasons else "")
            return Strategy(candidate), picked + ")"
        reasons.append(f"{candidate}: {why}")
    raise AssertionError("copy always works")
