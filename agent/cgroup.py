"""Per-command control groups: a process-count and memory ceiling, and a reliable way
to kill every process a command started (even ones that left its session).

Best effort: where the cgroup file system is not writable (an unprivileged user, a
locked-down container) `ProcessCgroup.create` returns None and the sandbox relies on
rlimits, its pid namespace and process-group kills instead. Root is exempt from
RLIMIT_NPROC, so for root this is what stops a fork bomb.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path

_counter = itertools.count()
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            paths[controller or "unified"] = path
    return paths


class ProcessCgroup:
    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, *, max_processes: int, memory_bytes: int | None) -> ProcessCgroup | None:
        own = _own_paths()
        name = f"tachy-{os.getpid()}-{next(_counter)}"
        dirs: list[Path] = []
        limits = [("pids", "pids.max", str(max_processes))]
        if memory_bytes:
            limits.append(("memory", "memory.limit_in_bytes", str(memory_bytes)))
        v2_controllers = ""
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            v2_controllers = (CGROUP_ROOT / "cgroup.controllers").read_text()
        try:
            if v2_controllers:
                base = CGROUP_ROOT / own.get("unified", "/").lstrip("/")
                directory = base / name
                directory.mkdir()
                dirs.append(directory)
                (directory / "pids.max").write_text(str(max_processes))
                if memory_bytes:
                    (directory / "memory.max").write_text(str(memory_bytes))
            else:
                for controller, limit_file, value in limits:
                    mount = CGROUP_ROOT / controller
                    if not (mount / "cgroup.procs").exists():
                        continue
                    directory = mount / own.get(controller, "/").lstrip("/") / name
                    directory.mkdir()
                    dirs.append(directory)
                    (directory / limit_file).write_text(value)
        except OSError:
            cls(dirs).remove()
            return None
        return cls(dirs) if dirs else None

    def join(self) -> None:
        """Move the calling process into the group. Runs in the child between fork and
        exec, so it uses raw os calls only."""
        pid = str(os.getpid()).encode()
        for directory in self.dirs:
            fd = os.open(str(directory / "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
        return found

    def kill_all(self) -> None:
        # A fork bomb may add processes while we kill; repeat until the group is empty.
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self, wait_s: float = 0.0) -> None:
        """Delete the group's directories. A killed process leaves its group only when
        it has finished exiting (tearing down a sandbox's namespaces takes a moment),
        so with `wait_s` the removal is retried, killing stragglers, for that long
        rather than leaving an empty group behind."""
        deadline = time.monotonic() + wait_s
        for directory in self.dirs:
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    self.kill_all()
                    time.sleep(0.005)
