"""`tachy tasks build | check | list` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec
import pytest

from tests.training.projects import make_env, write_project
from training.tasks.taskset import TASKS_FILE, encode_task, load_tasks

TACHY = [sys.executable, "-m", "server.cli"]
ROOT = Path(__file__).resolve().parents[2]

# Each test runs real test suites in the sandbox (several seconds each on 2 busy cores).
pytestmark = pytest.mark.timeout(300)


def tachy(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TACHY, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def task_set(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    project = write_project(root / "calc")
    out = root / "set"
    run = tachy("tasks", "build", "--local", str(project), "--max-tasks", "2", "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert "calc: 2 tasks" in run.stderr and "validated" in run.stderr
    return out


def test_check_passes_on_a_good_set(task_set):
    run = tachy("tasks", "check", str(task_set), "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["summary"] == {"checked": 2, "valid": 2}
    assert "2/2 tasks valid" in run.stderr


def test_check_fails_on_a_corrupted_task_and_names_it(task_set, tmp_path):
    broken = tmp_path / "set"
    shutil.copytree(task_set, broken)
    tasks = load_tasks(broken)
    # Task 2's "bug" is replaced by the clean file: its FAIL_TO_PASS tests now pass.
    bad = tasks[1]
    bad.files = {path: (broken / bad.repo / path).read_text() for path in bad.files}
    (broken / TASKS_FILE).write_bytes(b"".join(encode_task(t) + b"\n" for t in tasks))
    run = tachy("tasks", "check", str(broken))
    assert run.returncode == 1
    assert f"FAIL {bad.id}" in run.stderr and "FAIL_TO_PASS" in run.stderr
    assert f"ok   {tasks[0].id}" in run.stderr
    assert f"failing: {bad.id}" in run.stderr


def test_demos_the_expert_solves_every_task_end_to_end(task_set, tmp_path):
    out = tmp_path / "demos.jsonl"
    run = tachy("tasks", "demos", str(task_set), "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert "2/2 tasks solved by the expert" in run.stderr
    demos = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(demos) == 2 and all(d["reward"] == 1.0 for d in demos)
    roles = [m["role"] for m in demos[0]["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "assistant"
    assert any('<tool_call name="edit_file">' in m["content"] for m in demos[0]["messages"])
    assert {e["event"] for e in demos[0]["events"]} >= {"tool_call", "tool_result", "final"}


def test_demos_report_a_task_the_expert_cannot_solve(task_set, tmp_path):
    broken = tmp_path / "set"
    shutil.copytree(task_set, broken)
    tasks = load_tasks(broken)
    # the second task's tests now expect something no fix of its bug gives
    bad = tasks[1]
    bad.fail_to_pass = [*bad.fail_to_pass, "tests/test_nowhere.py::test_missing"]
    (broken / TASKS_FILE).write_bytes(b"".join(encode_task(t) + b"\n" for t in tasks))
    run = tachy("tasks", "demos", str(broken), "--out", str(tmp_path / "d.jsonl"))
    assert run.returncode == 1
    assert f"not solved: {bad.id}: still failing: tests/test_nowhere.py::test_missing" in run.stderr
    assert len((tmp_path / "d.jsonl").read_text().splitlines()) == 1


def test_a_set_under_tmp_with_its_own_environment_checks_and_runs(task_set):
    """A set in mktemp -d whose tasks run in DIR/envs/NAME (as a PyPI build's do): the
    test sandbox's private /tmp hid it; `check` and the environments' test runs
    (`demos`) now see it, read-only at its own path."""
    out = Path(tempfile.mkdtemp(prefix="tachy-set-", dir="/tmp"))
    try:
        shutil.copytree(task_set, out, dirs_exist_ok=True)
        make_env(out / "envs" / "calc")
        tasks = load_tasks(out)
        for task in tasks:
            task.env = "envs/calc"
        (out / TASKS_FILE).write_bytes(b"".join(encode_task(t) + b"\n" for t in tasks))
        run = tachy("tasks", "check", str(out), "--json")
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["summary"] == {"checked": 2, "valid": 2}
        run = tachy("tasks", "demos", str(out), "--out", str(out / "demos.jsonl"))
        assert run.returncode == 0, run.stderr
        assert "2/2 tasks solved by the expert" in run.stderr
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_list_and_limit(task_set):
    run = tachy("tasks", "list", str(task_set))
    assert run.returncode == 0
    lines = run.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["calc-1", "calc-2"]
    run = tachy("tasks", "check", str(task_set), "--limit", "1", "--json")
    assert json.loads(run.stdout)["summary"]["checked"] == 1


def test_rebuilding_into_the_same_directory_adds_nothing(task_set, tmp_path):
    copy = tmp_path / "set"
    shutil.copytree(task_set, copy)
    before = (copy / TASKS_FILE).read_bytes()
    source = load_tasks(copy)[0].metadata.source.removeprefix("local:")
    run = tachy("tasks", "build", "--local", source, "--max-tasks", "2", "--out", str(copy))
    assert run.returncode == 0, run.stderr
    assert "already has 2 tasks" in run.stderr
    assert (copy / TASKS_FILE).read_bytes() == before


def test_bad_input_gets_a_clear_error(tmp_path):
    run = tachy("tasks", "check", str(tmp_path / "nowhere"))
    assert run.returncode == 2 and "not a task set" in run.stderr
    run = tachy("tasks", "build", "--synthetic", "0", "--out", str(tmp_path))
    assert run.returncode == 2 and "--synthetic must be at least 1" in run.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    run = tachy("tasks", "build", "--local", str(empty), "--out", str(tmp_path / "set"))
    assert run.returncode == 1
    assert "skipped: it has no tests" in run.stderr


@pytest.mark.timeout(600)  # two builds' worth of test runs on a busy 2-core machine
def test_synthetic_build(tmp_path):
    pytest.importorskip("training.tasks.synthetic")
    out = tmp_path / "set"
    run = tachy(
        "tasks", "build", "--synthetic", "2", "--seed", "1", "--max-tasks", "3", "--out", str(out)
    )
    assert run.returncode == 0, run.stderr
    tasks = load_tasks(out)
    assert tasks and all(t.env == "" and t.metadata.source.startswith("synthetic:") for t in tasks)
    assert {t.metadata.project for t in tasks} <= {"synthetic-1", "synthetic-2"}
    run = tachy("tasks", "check", str(out), "--limit", "2")
    assert run.returncode == 0, run.stderr


def test_sets_from_the_two_template_parts_share_no_code_and_split_records_it(tmp_path):
    """--templates train / heldout: repositories written from disjoint parts of the
    template bank; `tachy tasks split` records the split and refuses a shared project."""
    from training.tasks.synthetic import _BY_KEY, TEMPLATE_BANKS

    for part in ("train", "heldout"):  # each part closed under its dependencies
        assert all(d in TEMPLATE_BANKS[part] for k in TEMPLATE_BANKS[part] for d in _BY_KEY[k].deps)
    assert not TEMPLATE_BANKS["train"] & TEMPLATE_BANKS["heldout"]
    sets = {}
    for part, seed in (("train", 3), ("heldout", 3)):  # the same seed: only the part differs
        sets[part] = tmp_path / part
        run = tachy(
            "tasks", "build", "--synthetic", "1", "--seed", str(seed), "--templates", part,
            "--max-tasks", "1", "--out", str(sets[part]), "--quiet",
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        (task,) = load_tasks(sets[part])
        assert task.metadata.project == f"synthetic-{part}-{seed}"
        assert task.metadata.source == f"synthetic:seed={seed},templates={part}"
    record_file = tmp_path / "split.json"
    run = tachy(
        "tasks", "split", str(sets["train"]), str(sets["heldout"]), "--out", str(record_file)
    )
    assert run.returncode == 0, run.stderr
    record = json.loads(record_file.read_text())
    assert record == json.loads(run.stdout) and record["shared_projects"] == []
    assert record["heldout"]["projects"] == {
        "synthetic-heldout-3": "synthetic:seed=3,templates=heldout"
    }
    assert record["shared_line_share"] < 0.3  # module docstrings, `from __future__` lines
    same = tachy("tasks", "split", str(sets["train"]), str(sets["train"]))
    assert same.returncode == 1 and "share projects synthetic-train-3" in same.stderr
    bad = tachy("tasks", "build", "--local", str(tmp_path), "--templates", "heldout", "--out",
                str(tmp_path / "x"))  # fmt: skip
    assert bad.returncode == 2 and "--templates chooses synthetic repositories" in bad.stderr


def _registry_reachable(spec: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                 "-q", spec, "-d", tmp],
                capture_output=True, timeout=60,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return run.returncode == 0


@pytest.mark.timeout(600)
def test_pypi_build_end_to_end():
    """One small real project from PyPI (skipped when the registry is out of reach)."""
    spec = "inflection==0.5.1"
    if os.environ.get("TACHY_OFFLINE") or not _registry_reachable(spec):
        pytest.skip("PyPI is not reachable")
    # Under /tmp (mktemp -d), which the sandbox replaces with its own: the set is bound in.
    out = Path(tempfile.mkdtemp(prefix="tachy-pypi-", dir="/tmp"))
    try:
        run = tachy("tasks", "build", "--pypi", spec, "--max-tasks", "2", "--out", str(out))
        assert run.returncode == 0, run.stderr
        tasks = load_tasks(out)
        assert [t.id for t in tasks] == ["inflection-1", "inflection-2"]
        assert all(t.env == "envs/inflection" for t in tasks)
        assert tasks[0].metadata.source == "pypi:inflection==0.5.1"
        record = json.loads((out / "build.json").read_text())
        assert record["projects"]["inflection"]["tasks"] == 2
        # The project itself is not installed: its tests import the snapshot.
        python = out / "envs" / "inflection" / "bin" / "python"
        show = subprocess.run([python, "-m", "pip", "show", "inflection"], capture_output=True)
        assert show.returncode != 0
        run = tachy("tasks", "check", str(out))
        assert run.returncode == 0, run.stderr
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_unknown_pypi_project_is_skipped(tmp_path):
    out = tmp_path / "set"
    run = tachy("tasks", "build", "--pypi", "==1.0", "--out", str(out), "--max-tasks", "1")
    assert run.returncode == 1
    assert "is not a project name" in run.stderr
    record = msgspec.json.decode((out / "build.json").read_bytes())
    assert record["projects"]["pypi:==1.0"]["skipped"]
