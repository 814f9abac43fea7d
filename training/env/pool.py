"""The environment server: a warm pool of sandboxes, each a task's repository.

An `Env` is one sandbox: a copy-on-write checkout of a task's repository snapshot
(training.env.snapshot) with the agent's own `Workspace`, terminal `Sandbox` and
`ToolContext` on it, built exactly as the language server builds them, so a tool
behaves the same in training as in the editor. `EnvPool` keeps `size` of them warm
and hands them out:

    with EnvPool("tasks/", size=4) as pool:
        env = pool.acquire("more-itertools-3")      # reset to the task's start state
        ...                                          # the executor works in env.ctx
        report = await env.run_tests()               # the task's tests, tests restored
        pool.release(env)                            # reset, back to the warm pool

Limits (`EnvLimits`) are hard: each command's time, memory and process count through
agent.sandbox (bubblewrap: no network, the host read-only; a cgroup per command), the
rollout's wall clock through `rollout_timeout_s`, and disk through the checkout's
size-limited tmpfs (overlay, and copy where mounts are allowed).

Nothing is left behind: a reset kills the previous rollout's background jobs and any
process still running in the checkout; `close()` (and atexit) unmounts and deletes
everything; and a pool sweeps the sandboxes of owners that died without cleaning up
(SIGKILL), whose commands died with them (bubblewrap's --die-with-parent).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import itertools
import os
import re
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from agent.cgroup import CGROUP_ROOT, ProcessCgroup
from agent.lints import LintRunner
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ToolContext
from agent.workspace import Workspace
from training.env import snapshot
from training.env.snapshot import Checkout, SnapshotError, choose_strategy
from training.env.testrun import TestReport, run_tests
from training.tasks.taskset import Task, load_tasks, task_python, task_repo_dir, task_test_command

DEFAULT_WORKDIR = Path("/tmp/tachy-envs")
_SANDBOX_NAME = re.compile(r"^(\d+)-")  # PID-N sandboxes, PID-probe-... probes
_OWNER_FILE = "owner"
_DISK_NEARLY_FULL = 64 * 1024
_numbers = itertools.count(1)  # sandbox numbers, unique in this process
PYTEST_CONFIG_FILES = frozenset(
    {"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"}
)
_NOT_SEARCHED = frozenset({".git", ".tachy", "__pycache__", ".venv", "node_modules"})


class EnvError(Exception):
    """A request the environment server refuses or cannot carry out; says why."""


@dataclass(frozen=True)
class EnvLimits:
    """Hard limits for one sandbox. Commands are the agent's terminal commands (the
    tests have their task's own `timeout_s`); `None` means no limit."""

    command_timeout_s: float = 60.0
    rollout_timeout_s: float = 1800.0
    memory_bytes: int | None = 4 * 1024**3  # per command, through its cgroup
    max_processes: int = 256  # per command
    disk_bytes: int | None = 1024**3  # what a rollout may add to its repository
    network: bool = False

    def __post_init__(self) -> None:
        for name in ("command_timeout_s", "rollout_timeout_s", "max_processes"):
            if getattr(self, name) <= 0:
                raise EnvError(f"EnvLimits.{name} must be positive, not {getattr(self, name)}")
        for name in ("memory_bytes", "disk_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1024 * 1024:
                raise EnvError(f"EnvLimits.{name} must be at least 1 MiB, not {value}")
        if self.network:
            raise EnvError(
                "EnvLimits.network=True is not supported: the terminal sandbox "
                "(agent.sandbox, bubblewrap --unshare-all) always runs commands without a "
                "network, and tasks must not need one"
            )

    def sandbox_config(
        self, timeout_s: float | None = None, *, disk_enforced: bool = True
    ) -> SandboxConfig:
        """The agent's SandboxConfig for these limits; `timeout_s` overrides the
        command limit (test runs use their task's). Where the checkout cannot enforce
        the disk limit (no tmpfs), a file-size limit of the same size stands in."""
        limit = timeout_s or self.command_timeout_s
        max_file = SandboxConfig.max_file_bytes
        if not disk_enforced and self.disk_bytes:
            max_file = min(max_file, self.disk_bytes)
        return SandboxConfig(
            use_bubblewrap=True,
            default_timeout_s=min(SandboxConfig.default_timeout_s, limit),
            max_timeout_s=limit,
            max_processes=self.max_processes,
            memory_bytes=self.memory_bytes,
            max_file_bytes=max_file,
        )


class Env:
    """One sandbox holding one task's repository; see the module docstring."""

    def __init__(
        self, pool: EnvPool, task: Task, directory: Path, checkout: Checkout, number: int
    ) -> None:
        self.pool = pool
        self.task = task
        self.directory = directory
        self.checkout = checkout
        self.number = number
        self.limits = pool.limits
        self.root = checkout.root
        self.closed = False
        self.started = time.monotonic()
        self._make_context()

    # The objects the agent sees are rebuilt on every reset: fresh checkpoints, no jobs.
    def _make_context(self) -> None:
        self.workspace = Workspace(self.root)
        try:
            self.sandbox = Sandbox(self.workspace, self._config())
        except RuntimeError as exc:
            raise EnvError(
                f"{exc}: the environment server needs bubblewrap for its no-network, "
                "read-only-host sandbox (install the bubblewrap package)"
            ) from None
        # Test runs: the same machinery and limits as the agent's commands, with the
        # task's time limit instead of the per-command one.
        self._test_sandbox = Sandbox(self.workspace, self._config(self.task.timeout_s))
        self.ctx = ToolContext(
            workspace=self.workspace,
            sandbox=self.sandbox,
            linters=LintRunner(self.workspace, sandbox=self.sandbox),
        )
        self.started = time.monotonic()

    def _config(self, timeout_s: float | None = None) -> SandboxConfig:
        config = self.limits.sandbox_config(timeout_s, disk_enforced=self.checkout.disk_limited)
        # The task set (the task's interpreter among its inputs) is bound read-only at
        # its own path, so a set under /tmp (mktemp -d) is seen through the sandbox's
        # private /tmp.
        config.read_only_paths = [str(self.pool.taskset_dir)]
        # `python` in a command (the agent's, or the one an instruction quotes) is the
        # task's interpreter, with the project's dependencies and pytest.
        bin_dir = os.path.dirname(task_python(self.pool.taskset_dir, self.task))
        config.env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        if not self.task.env:
            # A task without its own environment (a synthetic repository) runs tachy's
            # interpreter, whose pytest plugins are tachy's, not the task's: loaded, they
            # put a pytest-asyncio deprecation warning (~130 tokens) in every test run
            # the model reads. Plugins a task needs come with its own environment.
            config.env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        return config

    def _test_config_paths(self) -> list[str]:
        """Files that change what pytest runs or how (conftest.py, pytest.ini, ...) in
        the checkout or the snapshot: put back with the tests, so a rollout cannot pass
        by adding a conftest that skips failures."""
        found = set()
        for base in (self.root, self.snapshot_dir):
            for directory, dirs, files in os.walk(base):
                dirs[:] = [d for d in dirs if d not in _NOT_SEARCHED]
                for name in files:
                    if name in PYTEST_CONFIG_FILES:
                        found.add(os.path.relpath(os.path.join(directory, name), base))
        return sorted(found)

    @property
    def snapshot_dir(self) -> Path:
        return task_repo_dir(self.pool.taskset_dir, self.task)

    def time_left(self) -> float:
        """Seconds left of the rollout's wall-clock limit (counted from the reset)."""
        return self.limits.rollout_timeout_s - (time.monotonic() - self.started)

    async def run_tests(self, *, restore_tests: bool = True) -> TestReport:
        """Run the task's test command in the sandbox and read every test's outcome.

        With `restore_tests` the task's test files are first put back to the
        snapshot's text, so a rollout cannot pass by editing its tests.
        """
        self._check_open()
        command = task_test_command(self.pool.taskset_dir, self.task)
        try:
            if restore_tests:
                await asyncio.to_thread(self._restore_tests)
            report = await run_tests(self._test_sandbox, command, timeout_s=self.task.timeout_s)
        except (OSError, SnapshotError) as exc:
            if not (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
                raise EnvError(f"cannot run the tests of task {self.task.id!r}: {exc}") from None
            # The rollout filled its disk: the tests cannot be restored or record their
            # outcomes. A report with no passing test, saying why, rather than a crash.
            return TestReport(output=self._disk_full_note())
        free = self.checkout.disk_free()
        if free is not None and free < _DISK_NEARLY_FULL:
            report.output += "\n" + self._disk_full_note()
        return report

    def _restore_tests(self) -> None:
        """The test files and pytest's configuration back to the task's start: the
        snapshot's text, then the task's own for tests its bug changes (a rename).
        The rollout's background jobs are stopped first: one still running could
        rewrite a test after it is restored, or swap a folder for a symlink under it."""
        self._stop_jobs()
        paths = [*self.task.test_files, *self._test_config_paths()]
        snapshot.restore_paths(self.root, self.snapshot_dir, paths)
        own = {path: self.task.files[path] for path in paths if path in self.task.files}
        snapshot.write_files(self.root, own)

    def _disk_full_note(self) -> str:
        return (
            f"[tachy: the sandbox's disk limit ({self.limits.disk_bytes} bytes) is full; "
            "tests may have failed, not run, or gone unrecorded for lack of space]"
        )

    def reset(self) -> None:
        """Back to the task's start state: background jobs and leftover processes
        killed, the snapshot with the task's files, new Workspace and Sandbox."""
        self._check_open()
        self._stop_jobs()
        try:
            self.checkout.reset(self.snapshot_dir, self.task.files)
        except (SnapshotError, OSError) as exc:
            raise EnvError(f"cannot reset the sandbox for task {self.task.id!r}: {exc}") from None
        self._make_context()
        if self.task.setup:
            self._run_setup()

    def _switch(self, task: Task) -> None:
        self.task = task
        self.reset()

    def _run_setup(self) -> None:
        """The task's setup commands, in the sandbox, on a private event loop (reset is
        synchronous and may be called from inside a running loop)."""
        failure: list[str] = []

        async def run_all() -> None:
            for command in self.task.setup:
                result = await self.sandbox.run(command, self.task.timeout_s)
                if result.exit_code != 0:
                    output = (result.head + result.tail).decode("utf-8", "replace")[-2000:]
                    why = "timed out" if result.timed_out else f"exited with {result.exit_code}"
                    failure.append(f"setup command {command!r} {why}:\n{output}")
                    return

        thread = threading.Thread(target=asyncio.run, args=(run_all(),), name="tachy-env-setup")
        thread.start()
        thread.join()
        if failure:
            raise EnvError(f"task {self.task.id!r}: {failure[0]}")

    def _stop_jobs(self) -> None:
        """Kill the background jobs of the current Sandbox now (their log pumps finish
        on their own loop) and remove their cgroups."""
        for job in list(self.sandbox.jobs.values()):
            Sandbox._kill(job.process, job.cgroup)  # the sandbox's own kill: group + cgroup
            if job.cgroup is not None:
                job.cgroup.remove(wait_s=1.0)
        self.sandbox.jobs.clear()

    def close(self) -> None:
        """Kill everything, unmount and delete the sandbox. Idempotent."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self._stop_jobs()
        try:
            self.checkout.destroy()
        finally:
            snapshot.remove_tree(self.directory)

    def _check_open(self) -> None:
        if self.closed:
            raise EnvError(f"sandbox {self.directory.name} is closed")

    def __repr__(self) -> str:
        return f"<Env {self.directory.name} task={self.task.id!r} root={self.root}>"


class EnvPool:
    """A warm pool of sandboxes for the tasks of one task set."""

    def __init__(
        self,
        taskset_dir: str | os.PathLike[str],
        *,
        size: int = 2,
        workdir: str | os.PathLike[str] | None = None,
        strategy: str = "auto",
        limits: EnvLimits | None = None,
    ) -> None:
        if size < 0:
            raise EnvError(f"a pool's size must be 0 or more, not {size}")
        self.taskset_dir = Path(taskset_dir).resolve()
        self.limits = limits or EnvLimits()
        self.size = size
        tasks = load_tasks(self.taskset_dir)
        if not tasks:
            raise EnvError(f"the task set {self.taskset_dir} has no tasks")
        self.tasks = {task.id: task for task in tasks}
        for task in tasks:
            if not task_repo_dir(self.taskset_dir, task).is_dir():
                raise EnvError(
                    f"task {task.id!r}: its repository snapshot {task.repo} is missing from "
                    f"{self.taskset_dir}"
                )
        self.workdir = Path(workdir or DEFAULT_WORKDIR).resolve()
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EnvError(f"cannot create the pool's workdir {self.workdir}: {exc}") from None
        self.swept = sweep_stale(self.workdir)
        # The snapshot most tasks use: warm sandboxes start on it, and reflink support
        # is tested against its file system.
        common_repo = Counter(task.repo for task in tasks).most_common(1)[0][0]
        self._first = next(task for task in tasks if task.repo == common_repo)
        try:
            self.strategy, self.strategy_reason = choose_strategy(
                strategy, self.workdir, task_repo_dir(self.taskset_dir, self._first)
            )
        except SnapshotError as exc:
            raise EnvError(str(exc)) from None
        self._lock = threading.RLock()
        self._idle: list[Env] = []
        self._busy: set[Env] = set()
        self.closed = False
        self._atexit = _register_atexit(self)
        try:
            for _ in range(size):
                self._idle.append(self._create(self._first))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ sandboxes
    def _create(self, task: Task) -> Env:
        number = next(_numbers)
        directory = self.workdir / f"{os.getpid()}-{number}"
        directory.mkdir()
        (directory / _OWNER_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
        try:
            checkout = self.strategy.create(
                directory / "sandbox",
                task_repo_dir(self.taskset_dir, task),
                disk_bytes=self.limits.disk_bytes,
            )
            snapshot.write_files(checkout.root, task.files)
        except BaseException as exc:
            snapshot.remove_tree(directory)
            if isinstance(exc, SnapshotError | OSError):
                raise EnvError(f"cannot create a sandbox for task {task.id!r}: {exc}") from None
            raise
        env = Env(self, task, directory, checkout, number)
        if task.setup:
            try:
                env._run_setup()
            except BaseException:
                env.close()
                raise
        return env

    def task(self, task: Task | str) -> Task:
        if isinstance(task, Task):
            return task
        try:
            return self.tasks[task]
        except KeyError:
            known = ", ".join(sorted(self.tasks)[:5])
            more = f" and {len(self.tasks) - 5} more" if len(self.tasks) > 5 else ""
            raise EnvError(
                f"unknown task id {task!r}; the set in {self.taskset_dir} has {known}{more}"
            ) from None

    def acquire(self, task: Task | str) -> Env:
        """A sandbox at `task`'s start state: a warm one when there is one (reset to
        the task), else a new one."""
        task = self.task(task)
        with self._lock:
            self._check_open()
            # Best: a clean sandbox already at this task; then one on the same snapshot.
            ranked = sorted(
                self._idle,
                key=lambda e: (e.task.id != task.id, e.task.repo != task.repo),
            )
            env = ranked[0] if ranked else None
            if env is not None:
                self._idle.remove(env)
            self._busy_add(env)
        try:
            if env is None:
                env = self._create(task)
                self._busy_add(env)
            elif env.task.id != task.id:
                env._switch(task)
            else:
                env._make_context()  # released clean; only the rollout clock restarts
        except BaseException:
            if env is not None:
                self._discard(env)
            raise
        return env

    def _busy_add(self, env: Env | None) -> None:
        if env is not None:
            with self._lock:
                self._busy.add(env)

    def release(self, env: Env) -> None:
        """Reset a sandbox and put it back in the warm pool (closing it when the pool
        already holds `size` idle ones)."""
        with self._lock:
            if env not in self._busy:
                raise EnvError(f"{env!r} is not in use in this pool (released twice?)")
            self._busy.discard(env)
            if self.closed:
                env.close()
                return
        try:
            env.reset()
        except BaseException:
            env.close()
            raise
        with self._lock:
            if len(self._idle) < self.size and not self.closed:
                self._idle.append(env)
                return
        env.close()

    def _discard(self, env: Env) -> None:
        with self._lock:
            self._busy.discard(env)
        env.close()

    @property
    def envs(self) -> list[Env]:
        with self._lock:
            return [*self._idle, *self._busy]

    def close(self) -> None:
        """Close every sandbox, idle or in use. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            envs = [*self._idle, *self._busy]
            self._idle.clear()
            self._busy.clear()
        errors = []
        for env in envs:
            try:
                env.close()
            except Exception as exc:
                errors.append(f"{env.directory.name}: {exc}")
        atexit.unregister(self._atexit)
        if errors:
            raise EnvError("some sandboxes could not be removed: " + "; ".join(errors))

    def _check_open(self) -> None:
        if self.closed:
            raise EnvError("the pool is closed")

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _register_atexit(pool: EnvPool):
    ref = weakref.ref(pool)

    def close_at_exit() -> None:
        alive = ref()
        if alive is not None:
            with contextlib.suppress(Exception):
                alive.close()

    atexit.register(close_at_exit)
    return close_at_exit


# ------------------------------------------------------------------ sweeping


def _start_time(pid: int) -> str | None:
    """A live process's start time (clock ticks since boot): with the pid, it tells a
    live owner from a new process that reused a dead owner's pid. None when there is
    no such process, or only its zombie (killed, not yet reaped by its parent: a Ray
    worker after ray.kill stays one until the raylet reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return fields[19].decode()


def _owner_alive(directory: Path, pid: int) -> bool:
    started = _start_time(pid)
    if started is None:
        return False
    try:
        recorded = (directory / _OWNER_FILE).read_text().split()
    except OSError:
        return True  # being created right now by a live process
    return len(recorded) < 2 or recorded[1] == started


def sweep_stale(workdir: Path) -> list[str]:
    """Unmount and delete sandboxes under `workdir` whose owner process is gone, and
    the command cgroups such owners left; returns the names removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(workdir.iterdir()):
            match = _SANDBOX_NAME.match(entry.name)
            if not match or _owner_alive(entry, int(match.group(1))):
                continue
            for point in snapshot.mounts_under(entry):
                device = snapshot.mounted_device(point)
                if device is not None:
                    snapshot.kill_users(device)
                snapshot.release_mount(point, device)
            snapshot.remove_tree(entry)
            removed.append(entry.name)
    _sweep_cgroups()
    return removed


def _sweep_cgroups() -> None:
    """Remove command cgroups (agent.cgroup names them tachy-PID-N) of dead processes,
    killing anything left in them: an owner killed mid-command cannot remove them."""
    parents = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                mount = CGROUP_ROOT / controller if controller else CGROUP_ROOT
                if controller.startswith("name="):
                    continue
                parents.add(mount / path.lstrip("/"))
    for parent in parents:
        with contextlib.suppress(OSError):
            for child in parent.iterdir():
                match = re.match(r"^tachy-(\d+)-\d+$", child.name)
                if match and child.is_dir() and _start_time(int(match.group(1))) is None:
                    ProcessCgroup([child]).remove(wait_s=1.0)
