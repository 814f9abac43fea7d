"""The environment server as a Ray actor (training/env/actor.py): one small local
cluster for the module, real sandboxes inside the actor process."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path

import pytest

from tests.training.test_envs import BUGGY_OPS, make_taskset, mounts_in, wait_gone, wait_present

ray = pytest.importorskip("ray")

from training.env.actor import EnvActor  # noqa: E402
from training.env.pool import EnvError  # noqa: E402

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


@pytest.fixture(scope="module")
def cluster():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}},
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def setup(cluster, tmp_path_factory: pytest.TempPathFactory):
    taskset = make_taskset(tmp_path_factory.mktemp("taskset"))
    workdir = tmp_path_factory.mktemp("ray-envs")
    actor = EnvActor.remote(str(taskset), size=1, workdir=str(workdir), strategy="auto")
    yield actor, taskset, workdir
    ray.get(actor.close.remote())
    ray.kill(actor)


def test_actor_acquire_tools_tests_reset_release(setup) -> None:
    actor, _, workdir = setup
    info = ray.get(actor.info.remote())
    assert info["pid"] != os.getpid() and info["sandboxes"] == 1
    assert "calc-1" in ray.get(actor.task_ids.remote())
    env_id = ray.get(actor.acquire.remote("calc-1"))
    result = ray.get(actor.call_tool.remote(env_id, "read_file", {"path": "calc/ops.py"}))
    assert not result["is_error"] and "a - b" in result["content"]
    result = ray.get(
        actor.call_tool.remote(
            env_id,
            "edit_file",
            {
                "path": "calc/ops.py",
                "old_string": "def add(a, b):\n    return a - b",
                "new_string": "def add(a, b):\n    return a + b",
            },
        )
    )
    assert not result["is_error"], result["content"]
    report = ray.get(actor.run_tests.remote(env_id))
    assert report.outcomes == {
        "tests/test_ops.py::test_add": "passed",
        "tests/test_ops.py::test_sub": "passed",
    }
    ray.get(
        actor.call_tool.remote(
            env_id, "run_terminal_cmd", {"command": "sleep 987661", "background": "true"}
        )
    )
    assert wait_present("987661")
    ray.get(actor.reset.remote(env_id))
    assert wait_gone("987661") == []
    root = Path(ray.get(actor.root.remote(env_id)))
    assert (root / "calc/ops.py").read_text() == BUGGY_OPS
    ray.get(actor.release.remote(env_id))
    with pytest.raises(ray.exceptions.RayTaskError, match="no env"):
        ray.get(actor.release.remote(env_id))
    assert any(p.name.startswith(f"{info['pid']}-") for p in workdir.iterdir())


def test_actor_errors_are_clear(setup) -> None:
    actor, _, _ = setup
    with pytest.raises(ray.exceptions.RayTaskError) as caught:
        ray.get(actor.acquire.remote("nope"))
    assert isinstance(caught.value.as_instanceof_cause(), EnvError)
    assert "unknown task id 'nope'" in str(caught.value)


def test_actor_rollout_with_a_replayed_policy(setup, tmp_path: Path) -> None:
    actor, _, _ = setup
    turns = [
        '<tool_call name="edit_file">\n<path>calc/ops.py</path>\n<old_string>\n'
        "def add(a, b):\n    return a - b\n</old_string>\n<new_string>\n"
        "def add(a, b):\n    return a + b\n</new_string>\n</tool_call>",
        "Fixed add().",
    ]
    replay = tmp_path / "turns.jsonl"
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    episode = ray.get(actor.rollout.remote("calc-1", f"replay:{replay}", 5))
    assert episode.task_id == "calc-1"
    assert episode.changed_files == ["calc/ops.py"]
    assert episode.final_text == "Fixed add()."
    assert ray.get(actor.info.remote())["acquired"] == []


def test_killed_actor_is_swept_by_the_next_pool(setup, tmp_path_factory) -> None:
    _, taskset, _ = setup
    workdir = tmp_path_factory.mktemp("killed-actor")
    actor = EnvActor.remote(str(taskset), size=1, workdir=str(workdir))
    pid = ray.get(actor.info.remote())["pid"]
    env_id = ray.get(actor.acquire.remote("calc-1"))
    # a marker of this run only: processes of other runs must not count
    marker = str(random.randrange(10**8, 10**9))
    ray.get(
        actor.call_tool.remote(
            env_id, "run_terminal_cmd", {"command": f"sleep {marker}", "background": "true"}
        )
    )
    assert wait_present(marker)
    ray.kill(actor)  # SIGKILL: no cleanup runs
    from training.env.pool import EnvPool, _start_time

    deadline = time.monotonic() + 30
    while _start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)  # ray.kill returns before the worker is dead
    # Its commands die with it (bubblewrap's --die-with-parent), at the latest when the
    # next pool on the machine sweeps the dead owner's sandboxes and cgroups.
    with EnvPool(taskset, size=0, workdir=workdir) as pool:
        assert any(name.startswith(f"{pid}-") for name in pool.swept)
    assert wait_gone(marker, timeout_s=15) == []
    assert mounts_in(workdir) == []
    assert [p.name for p in workdir.iterdir() if not p.name.startswith(".")] == []
