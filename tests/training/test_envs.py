"""The environment server (training/env/pool.py, training/env/snapshot.py) on a real task set:
real checkouts, the agent's real tools and sandbox, real pytest runs. No mocks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from agent.cgroup import ProcessCgroup
from tests.conftest import call_tool
from tests.training.projects import make_env
from training.env import snapshot
from training.env.pool import EnvError, EnvLimits, EnvPool, sweep_stale
from training.tasks.taskset import Task, TaskMeta, append_tasks

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
TEST_COMMAND = "{python} -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests"
CLEAN_OPS = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
BUGGY_OPS = CLEAN_OPS.replace("a + b", "a - b")
TEST_OPS = textwrap.dedent(
    """\
    from calc.ops import add, sub


    def test_add():
        assert add(2, 3) == 5


    def test_sub():
        assert sub(5, 3) == 2
    """
)


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def task(task_id: str, **fields) -> Task:
    values = {
        "repo": "repos/calc",
        "instruction": "add() subtracts; make the tests pass",
        "test_command": TEST_COMMAND,
        "fail_to_pass": ["tests/test_ops.py::test_add"],
        "pass_to_pass": ["tests/test_ops.py::test_sub"],
        "files": {"calc/ops.py": BUGGY_OPS},
        "test_files": ["tests/test_ops.py"],
        "timeout_s": 60.0,
        "metadata": TaskMeta(source="synthetic:seed=1", project="calc"),
    }
    values.update(fields)
    return Task(id=task_id, **values)


def make_taskset(root: Path) -> Path:
    """A task set: one tiny package with its tests, and tasks that misbehave."""
    repo = root / "repos" / "calc"
    write(repo, "calc/__init__.py", "")
    write(repo, "calc/ops.py", CLEAN_OPS)
    write(repo, "tests/test_ops.py", TEST_OPS)
    write(repo, "README.md", "# calc\n")
    other = root / "repos" / "other"
    write(other, "other.py", "VALUE = 1\n")
    write(
        other,
        "tests/test_other.py",
        "from other import VALUE\n\n\ndef test_value():\n    assert VALUE == 2\n",
    )
    hang = "import time\n\n\ndef test_hang():\n    time.sleep(1000)\n"
    leave = textwrap.dedent(
        """\
        import subprocess


        def test_leaves_a_process():
            subprocess.Popen(["sleep", "987651"], start_new_session=True)
        """
    )
    bomb = textwrap.dedent(
        """\
        import os
        import time


        def test_bomb():
            children = 0
            for _ in range(5000):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    time.sleep(1000)
                    os._exit(0)
                children += 1
            print("children", children)
            assert children < 5000
        """
    )
    append_tasks(
        root,
        [
            task("calc-1"),
            task("calc-2", files={"calc/ops.py": CLEAN_OPS.replace("a - b", "a + b")},
                 fail_to_pass=["tests/test_ops.py::test_sub"],
                 pass_to_pass=["tests/test_ops.py::test_add"]),
            task("other-1", repo="repos/other", files={},
                 fail_to_pass=["tests/test_other.py::test_value"], pass_to_pass=[],
                 test_files=["tests"]),
            task("hang-1", files={"calc/ops.py": BUGGY_OPS, "tests/test_z_hang.py": hang},
                 timeout_s=8.0),
            task("leave-1", files={"calc/ops.py": BUGGY_OPS, "tests/test_leave.py": leave}),
            task("bomb-1", files={"calc/ops.py": BUGGY_OPS, "tests/test_bomb.py": bomb},
                 timeout_s=30.0),
        ],
    )  # fmt: skip
    return root


@pytest.fixture(scope="module")
def taskset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_taskset(tmp_path_factory.mktemp("taskset"))


def available(name: str, workdir: Path, taskset: Path) -> str | None:
    return snapshot.strategy_unavailable(name, workdir, taskset / "repos" / "calc")


@pytest.fixture(params=snapshot.STRATEGIES)
def strategy(request: pytest.FixtureRequest, tmp_path: Path, taskset: Path) -> str:
    why = available(request.param, tmp_path / "envs", taskset)
    if why is not None:
        pytest.skip(f"strategy {request.param} is not available here: {why}")
    return request.param


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path / "envs"


def processes_with(marker: str) -> list[int]:
    """Pids of processes whose command line contains `marker`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def wait_gone(marker: str, timeout_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def wait_present(marker: str, timeout_s: float = 10.0) -> list[int]:
    """Pids running `marker`, waiting for a command that was just started to exec it."""
    deadline = time.monotonic() + timeout_s
    while not (found := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def mounts_in(directory: Path) -> list[str]:
    return [str(p) for p in snapshot.mounts_under(directory)]


def assert_nothing_left(workdir: Path) -> None:
    assert mounts_in(workdir) == []
    leftovers = [p.name for p in workdir.iterdir()] if workdir.exists() else []
    assert [name for name in leftovers if not name.startswith(".")] == []


# ------------------------------------------------------------------ basics


def test_limits_are_checked() -> None:
    with pytest.raises(EnvError, match="network"):
        EnvLimits(network=True)
    with pytest.raises(EnvError, match="command_timeout_s must be positive"):
        EnvLimits(command_timeout_s=0)


def test_unknown_task_and_strategy_are_clear_errors(taskset: Path, workdir: Path) -> None:
    with pytest.raises(EnvError, match="unknown strategy 'zfs'"):
        EnvPool(taskset, size=0, workdir=workdir, strategy="zfs")
    with (
        EnvPool(taskset, size=0, workdir=workdir, strategy="copy") as pool,
        pytest.raises(EnvError, match=r"unknown task id 'nope'.*calc-1"),
    ):
        pool.acquire("nope")
    assert_nothing_left(workdir)


def test_auto_says_what_it_picked(taskset: Path, workdir: Path) -> None:
    with EnvPool(taskset, size=1, workdir=workdir) as pool:
        assert pool.strategy.name in snapshot.STRATEGIES
        assert pool.strategy_reason.startswith(pool.strategy.name)
        assert "auto" in pool.strategy_reason
    assert_nothing_left(workdir)


async def test_edit_reset_and_tests(taskset: Path, workdir: Path, strategy: str) -> None:
    with EnvPool(taskset, size=1, workdir=workdir, strategy=strategy) as pool:
        env = pool.acquire("calc-1")
        assert env.checkout.strategy == strategy
        assert (env.root / "calc/ops.py").read_text() == BUGGY_OPS  # the task's files
        report = await env.run_tests()
        assert report.outcomes == {
            "tests/test_ops.py::test_add": "failed",
            "tests/test_ops.py::test_sub": "passed",
        }
        # The agent fixes the bug through the real tools, adds a file, edits a test.
        is_error, _ = await call_tool(
            env.ctx, "edit_file", path="calc/ops.py",
            old_string="def add(a, b):\n    return a - b", new_string="def add(a, b):\n    return a + b",
        )  # fmt: skip
        assert not is_error
        is_error, _ = await call_tool(env.ctx, "write_file", path="notes/new.txt", content="hi\n")
        assert not is_error
        is_error, content = await call_tool(
            env.ctx,
            "run_terminal_cmd",
            command="echo 'def test_extra(): pass' >> tests/test_ops.py",
        )
        assert not is_error, content
        assert env.workspace.changed_files() == ["calc/ops.py", "notes/new.txt"]
        report = await env.run_tests()  # the edited test file is put back first
        assert report.outcomes == {
            "tests/test_ops.py::test_add": "passed",
            "tests/test_ops.py::test_sub": "passed",
        }
        assert (env.root / "tests/test_ops.py").read_text() == TEST_OPS

        env.reset()
        assert (env.root / "calc/ops.py").read_text() == BUGGY_OPS
        assert not (env.root / "notes").exists()
        assert env.workspace.checkpoints == {}
        assert env.sandbox.jobs == {}
        # The snapshot itself never changed.
        assert (taskset / "repos/calc/calc/ops.py").read_text() == CLEAN_OPS
        pool.release(env)
    assert_nothing_left(workdir)


async def test_a_task_without_its_own_environment_runs_pytest_without_tachys_plugins(
    taskset: Path, workdir: Path
) -> None:
    """tachy's own pytest plugins (pytest-asyncio's deprecation warning) are not the
    task's: the model reads its tests' output only (and the scoring still works)."""
    with EnvPool(taskset, size=1, workdir=workdir) as pool:
        env = pool.acquire("calc-1")
        is_error, content = await call_tool(
            env.ctx, "run_terminal_cmd", command="python -m pytest -q -p no:cacheprovider tests"
        )
        assert not is_error and "1 failed, 1 passed" in content, content
        assert "asyncio" not in content and "Warning" not in content, content
        report = await env.run_tests()
        assert report.outcomes["tests/test_ops.py::test_add"] == "failed"
        pool.release(env)


async def test_a_set_under_tmp_runs_in_its_own_environment(workdir: Path) -> None:
    """A set made in mktemp -d whose task has its own interpreter (a PyPI build's
    DIR/envs/NAME): the sandbox's private /tmp would hide it; the set is bound in."""
    root = Path(tempfile.mkdtemp(prefix="tachy-set-", dir="/tmp"))
    try:
        make_taskset(root)
        make_env(root / "envs" / "calc")
        append_tasks(root, [task("calc-env", env="envs/calc")])
        with EnvPool(root, size=1, workdir=workdir) as pool:
            env = pool.acquire("calc-env")
            report = await env.run_tests()
            assert report.outcomes == {
                "tests/test_ops.py::test_add": "failed",
                "tests/test_ops.py::test_sub": "passed",
            }, report.output
            # The agent's `python` is the task's interpreter too, and the set stays read-only.
            _, content = await call_tool(
                env.ctx,
                "run_terminal_cmd",
                command=f"python -c 'import sys; print(sys.prefix)'; touch {root}/x",
            )
            assert str(root / "envs" / "calc") in content, content
            assert "Read-only file system" in content and not (root / "x").exists()
            pool.release(env)
        assert_nothing_left(workdir)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def scenario(taskset: Path, workdir: Path, strategy: str) -> dict:
    """What a rollout sees, for comparing strategies."""
    seen: dict = {}
    with EnvPool(taskset, size=1, workdir=workdir, strategy=strategy) as pool:
        env = pool.acquire("calc-1")
        seen["start"] = sorted(rel for rel, _ in env.workspace.walk())
        _, seen["ls"] = await call_tool(env.ctx, "run_terminal_cmd", command="ls -R . | sort")
        await call_tool(env.ctx, "delete_file", path="README.md")
        await call_tool(
            env.ctx,
            "run_terminal_cmd",
            command="mv tests t2 && mv t2 tests && mkdir -p x/y && echo 1 > x/y/z && chmod 000 x",
        )
        seen["tests"] = (await env.run_tests()).outcomes
        pool.release(env)
        env = pool.acquire("other-1")  # another snapshot
        seen["other"] = sorted(rel for rel, _ in env.workspace.walk())
        seen["other_tests"] = (await env.run_tests()).outcomes
        pool.release(env)
        env = pool.acquire("calc-2")
        seen["after"] = sorted(rel for rel, _ in env.workspace.walk())
        seen["ops"] = (env.root / "calc/ops.py").read_text()
        pool.release(env)
    assert_nothing_left(workdir)
    return seen


async def test_strategies_give_identical_results(taskset: Path, tmp_path: Path) -> None:
    results = {}
    for name in snapshot.STRATEGIES:
        if available(name, tmp_path / name, taskset) is None:
            results[name] = await scenario(taskset, tmp_path / name, name)
    assert "copy" in results
    first = next(iter(results.values()))
    assert first["tests"]["tests/test_ops.py::test_add"] == "failed"
    assert first["other_tests"] == {"tests/test_other.py::test_value": "failed"}
    assert "README.md" in first["after"] and "x" not in first["after"]
    for name, seen in results.items():
        assert seen == first, name


def test_pool_reuses_warm_sandboxes(taskset: Path, workdir: Path) -> None:
    with EnvPool(taskset, size=2, workdir=workdir, strategy="copy") as pool:
        warm = {env.directory for env in pool.envs}
        assert len(warm) == 2
        a, b = pool.acquire("calc-1"), pool.acquire("calc-2")
        assert {a.directory, b.directory} == warm
        c = pool.acquire("calc-1")  # a third, beyond the warm size
        assert c.directory not in warm
        pool.release(a)
        pool.release(b)
        pool.release(c)  # more than `size` idle: closed
        assert not c.directory.exists()
        assert len(pool.envs) == 2
        with pytest.raises(EnvError, match="not in use"):
            pool.release(a)
    assert_nothing_left(workdir)


# ------------------------------------------------------------------ limits


async def test_hanging_tests_are_killed_and_reported(taskset: Path, workdir: Path) -> None:
    with EnvPool(taskset, size=0, workdir=workdir, strategy="copy") as pool:
        env = pool.acquire("hang-1")
        report = await env.run_tests()
        assert report.timed_out
        assert report.exit_code is None
        assert report.outcomes.get("tests/test_ops.py::test_sub") == "passed"  # ran first
        assert not report.passed("tests/test_z_hang.py::test_hang")
        assert report.duration_s < 30
    assert_nothing_left(workdir)


async def test_fork_bomb_is_contained(taskset: Path, workdir: Path) -> None:
    limits = EnvLimits(max_processes=64)
    with EnvPool(taskset, size=0, workdir=workdir, strategy="copy", limits=limits) as pool:
        env = pool.acquire("bomb-1")
        report = await env.run_tests()
        assert report.passed("tests/test_bomb.py::test_bomb"), report.output
        children = (
            int(report.output.split("children ")[1].split()[0])
            if "children " in report.output
            else 0
        )
        assert children < 64
        # A shell fork bomb through the agent's terminal tool: it hits the process limit
        # and everything it started is killed when its shell ends.
        # (the shell waits a moment, so the bomb surely reaches the limit while its
        # output is still being read)
        is_error, content = await call_tool(
            env.ctx, "run_terminal_cmd", command="b() { b | b & }; b; sleep 2", timeout_s="5"
        )
        assert not is_error
        assert "Cannot fork" in content or "Resource temporarily unavailable" in content
        assert wait_gone("b | b") == []
        pool.release(env)
    assert_nothing_left(workdir)


async def test_host_is_read_only_and_there_is_no_network(taskset: Path, workdir: Path) -> None:
    outside = taskset / "repos/calc/calc/ops.py"
    with EnvPool(taskset, size=1, workdir=workdir, strategy="copy") as pool:
        env = pool.acquire("calc-1")
        _, content = await call_tool(
            env.ctx, "run_terminal_cmd", command=f"echo broken > {outside}; touch {REPO}/escaped"
        )
        assert "Read-only file system" in content
        assert outside.read_text() == CLEAN_OPS
        assert not (REPO / "escaped").exists()
        is_error, content = await call_tool(env.ctx, "write_file", path="../escaped", content="x")
        assert is_error and "outside the workspace" in content
        _, content = await call_tool(
            env.ctx, "run_terminal_cmd",
            command=f"{sys.executable} -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\"",
        )  # fmt: skip
        assert "Network is unreachable" in content or "OSError" in content
        pool.release(env)


async def test_background_processes_are_gone_after_tests_reset_and_close(
    taskset: Path, workdir: Path, strategy: str
) -> None:
    with EnvPool(taskset, size=1, workdir=workdir, strategy=strategy) as pool:
        env = pool.acquire("leave-1")
        report = await env.run_tests()
        assert report.passed("tests/test_leave.py::test_leaves_a_process")
        assert wait_gone("987651") == []
        is_error, content = await call_tool(
            env.ctx, "run_terminal_cmd", command="sleep 987652", background="true"
        )
        assert not is_error and "background job" in content
        _, content = await call_tool(
            env.ctx, "run_terminal_cmd", command="(setsid sleep 987653 &) ; echo started"
        )
        assert "started" in content
        assert wait_present("987652")
        env.reset()
        assert wait_gone("987652") == []
        assert wait_gone("987653") == []
        await call_tool(env.ctx, "run_terminal_cmd", command="sleep 987654", background="true")
        assert wait_present("987654")
    assert wait_gone("987654") == []
    assert_nothing_left(workdir)


async def test_full_disk_is_enospc_inside_and_the_host_is_fine(
    taskset: Path, workdir: Path, strategy: str
) -> None:
    limits = EnvLimits(disk_bytes=8 * 1024**2)
    with EnvPool(taskset, size=1, workdir=workdir, strategy=strategy, limits=limits) as pool:
        env = pool.acquire("calc-1")
        if not env.checkout.disk_limited:
            pytest.skip(f"{strategy} checkouts have no disk limit here (no tmpfs mounts)")
        _, content = await call_tool(
            env.ctx,
            "run_terminal_cmd",
            command="dd if=/dev/zero of=big bs=1M count=64 2>&1; ls -s big",
        )
        assert "No space left on device" in content
        assert (env.root / "big").stat().st_size <= 9 * 1024**2
        is_error, content = await call_tool(
            env.ctx, "write_file", path="more.txt", content="x" * 100
        )
        assert is_error  # the workspace reports the failure to the model
        report = await env.run_tests()
        assert "disk limit" in report.output and "is full" in report.output
        env.reset()
        assert not (env.root / "big").exists()
        report = await env.run_tests()  # usable again
        assert report.outcomes["tests/test_ops.py::test_sub"] == "passed"
        pool.release(env)
    assert_nothing_left(workdir)


async def test_rollout_cancelled_mid_command_kills_it(taskset: Path, workdir: Path) -> None:
    import asyncio

    with EnvPool(taskset, size=1, workdir=workdir, strategy="copy") as pool:
        env = pool.acquire("calc-1")
        running = asyncio.ensure_future(
            call_tool(env.ctx, "run_terminal_cmd", command="sleep 987655")
        )
        for _ in range(100):
            if processes_with("987655"):
                break
            await asyncio.sleep(0.05)
        assert processes_with("987655")
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert wait_gone("987655") == []
        pool.release(env)
    assert_nothing_left(workdir)


# ------------------------------------------------------------------ cleanup

KILLED_OWNER = """
import asyncio, sys, time
from training.env.pool import EnvPool

pool = EnvPool(sys.argv[1], size=1, workdir=sys.argv[2], strategy=sys.argv[3])
env = pool.acquire("calc-1")

async def main():
    await env.sandbox.start_job("sleep 987656")
    running = asyncio.ensure_future(env.sandbox.run("sleep 987657"))
    await asyncio.sleep(0.5)
    print("ready", flush=True)
    await running

asyncio.run(main())
"""


def test_sigkilled_owner_leaves_nothing_after_the_next_pool(
    taskset: Path, workdir: Path, strategy: str
) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER, str(taskset), str(workdir), strategy],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = owner.stdout.readline()
        assert line.strip() == "ready", owner.stderr.read()
        assert wait_present("987656") and wait_present("987657")
        stale = f"{owner.pid}-"
        assert any(p.name.startswith(stale) for p in workdir.iterdir())
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    # The commands die with their owner (bubblewrap --die-with-parent).
    assert wait_gone("987656") == []
    assert wait_gone("987657") == []
    with EnvPool(taskset, size=0, workdir=workdir, strategy=strategy) as pool:
        assert [name for name in pool.swept if name.startswith(stale)]
        assert not any(p.name.startswith(stale) for p in workdir.iterdir())
        assert mounts_in(workdir) == []
    assert_nothing_left(workdir)
    cgroups = [p for p in Path("/sys/fs/cgroup").rglob(f"tachy-{owner.pid}-*")]
    assert cgroups == []


def test_close_leaves_nothing_even_with_envs_in_use(
    taskset: Path, workdir: Path, strategy: str
) -> None:
    pool = EnvPool(taskset, size=2, workdir=workdir, strategy=strategy)
    pool.acquire("calc-1")
    pool.acquire("other-1")
    pool.acquire("calc-2")
    assert len(list(workdir.iterdir())) >= 3
    if strategy == "overlay":
        assert mounts_in(workdir)
    pool.close()
    pool.close()  # idempotent
    assert_nothing_left(workdir)
    with pytest.raises(EnvError, match="closed"):
        pool.acquire("calc-1")


def test_sweep_keeps_live_owners(taskset: Path, workdir: Path) -> None:
    with EnvPool(taskset, size=1, workdir=workdir, strategy="copy") as pool:
        assert sweep_stale(workdir) == []
        assert len(pool.envs) == 1 and pool.envs[0].directory.exists()


def test_copy_reset_restores_only_what_changed(taskset: Path, tmp_path: Path) -> None:
    source = taskset / "repos" / "calc"
    checkout = snapshot.Strategy("copy").create(tmp_path / "c", source, disk_bytes=None)
    try:
        root = checkout.root
        readme = root / "README.md"
        untouched = os.stat(root / "calc/__init__.py").st_ino
        (root / "calc/ops.py").write_text("changed")
        os.chmod(readme, 0o600)
        (root / "calc/new.py").write_text("added")
        (root / "tests/test_ops.py").unlink()
        os.symlink("/etc/passwd", root / "link")
        checkout.reset(files={"calc/ops.py": BUGGY_OPS})
        assert (root / "calc/ops.py").read_text() == BUGGY_OPS
        assert (root / "tests/test_ops.py").read_text() == TEST_OPS
        assert os.stat(readme).st_mode & 0o777 == os.stat(source / "README.md").st_mode & 0o777
        assert not (root / "calc/new.py").exists() and not (root / "link").is_symlink()
        assert os.stat(root / "calc/__init__.py").st_ino == untouched  # not copied again
        checkout.reset()
        assert (root / "calc/ops.py").read_text() == CLEAN_OPS
    finally:
        checkout.destroy()
    assert not (tmp_path / "c").exists()


def test_task_files_outside_the_repository_are_refused(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with pytest.raises(snapshot.SnapshotError, match="outside the repository"):
        snapshot.write_files(tmp_path / "root", {"../x": "y"})


def test_cgroups_of_dead_owners_are_swept(workdir: Path) -> None:
    group = ProcessCgroup.create(max_processes=8, memory_bytes=None)
    if group is None:
        pytest.skip("no writable cgroup file system here")
    # Name it after a pid that is certainly dead: a child that already exited.
    child = subprocess.Popen(["true"])
    child.wait()
    dead = []
    for directory in group.dirs:
        target = directory.with_name(f"tachy-{child.pid}-1")
        directory.rename(target)
        dead.append(target)
    sweep_stale(workdir)
    assert not any(d.exists() for d in dead)


async def test_memory_limit_kills_a_hungry_command(taskset: Path, workdir: Path) -> None:
    group = ProcessCgroup.create(max_processes=8, memory_bytes=64 * 1024**2)
    if group is None:
        pytest.skip("no writable cgroup file system here: memory limits need one")
    group.remove()
    limits = EnvLimits(memory_bytes=64 * 1024**2)
    with EnvPool(taskset, size=1, workdir=workdir, strategy="copy", limits=limits) as pool:
        env = pool.acquire("calc-1")
        _, content = await call_tool(
            env.ctx,
            "run_terminal_cmd",
            command=f"{sys.executable} -c \"x = bytearray(512 << 20); x[::4096] = b'1' * len(x[::4096])\"",
        )
        assert any(s in content for s in ("Killed", "SIGKILL", "MemoryError")), content
        pool.release(env)
    assert_nothing_left(workdir)
