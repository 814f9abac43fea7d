"""A SIGKILLed indexer (`tachy index`, or `tachy serve` indexing its folder) takes its
chunking workers, the multiprocessing forkserver and the resource tracker with it:
nothing is left orphaned. Processes are found through /proc (ppid and state)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from index.indexer import PARALLEL_ABOVE_FILES

PROJECT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="updates run on worker processes only with 2+ CPUs"
)


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) of every process, zombies left out (they are dead)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if state != "Z":
            found[int(name)] = (int(ppid), state)
    return found


def descendants(root: int) -> set[int]:
    table = processes()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def big_workspace(root: Path) -> Path:
    """Enough files that an update chunks them on worker processes, for a while."""
    for i in range(max(800, 4 * PARALLEL_ABOVE_FILES)):
        folder = root / f"pkg{i % 16}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i}.py").write_text(
            "".join(
                f"def func_{i}_{j}(a, b):\n    '''Doc {i} {j}.'''\n    return a + b * {j}\n\n\n"
                for j in range(40)
            )
        )
    return root


def wait_for_workers(proc: subprocess.Popen, timeout: float = 60) -> set[int]:
    """The processes below `proc` once a pool worker (a child of the forkserver, so a
    grandchild of `proc`) is running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the indexer ended before its workers were seen"
        below = descendants(proc.pid)
        table = processes()
        if any(table.get(pid, (0, ""))[0] != proc.pid for pid in below):
            return below
        time.sleep(0.01)
    raise AssertionError("no worker processes appeared")


def assert_all_gone(pids: set[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (alive := pids & set(processes())) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in alive:  # do not leak them from the test either
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running after the indexer was killed: {sorted(alive)}"


def test_a_killed_tachy_index_takes_its_workers_and_forkserver(tmp_path: Path):
    workspace = big_workspace(tmp_path / "big")
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "index", "--no-dense", str(workspace)],
        cwd=PROJECT,
        stderr=subprocess.DEVNULL,
    )
    try:
        below = wait_for_workers(proc)
        assert len(below) >= 2  # the forkserver and at least one worker
    finally:
        proc.kill()
        proc.wait()
    assert_all_gone(below)


def _frame(message: dict) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_a_killed_tachy_serve_takes_its_workers_and_forkserver(tmp_path: Path):
    workspace = big_workspace(tmp_path / "big")
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve"],
        cwd=PROJECT,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdin is not None
        folder = {"uri": workspace.as_uri(), "name": "big"}
        params = {
            "processId": None,
            "capabilities": {},
            "workspaceFolders": [folder],
            "initializationOptions": {"index": {"dense": False}},
        }
        proc.stdin.write(_frame({"id": 1, "method": "initialize", "params": params}))
        proc.stdin.write(_frame({"method": "initialized", "params": {}}))
        proc.stdin.flush()
        below = wait_for_workers(proc)
    finally:
        proc.kill()
        proc.wait()
    assert_all_gone(below)
