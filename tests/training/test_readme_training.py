"""README's "Training our own model" commands, parsed from the README and run as written
(subprocesses, relative paths, from a fresh directory), scaled down only through the
options the README itself shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.test_tasks_cli import _registry_reachable
from training.tasks.taskset import load_tasks

ROOT = Path(__file__).resolve().parents[2]
TACHY = ".venv/bin/tachy"
PYPI_SPEC = "inflection==0.5.1"  # one of the projects `--pypi default` builds, named in README
# (option, README's value) -> the value the test runs with: fewer tasks and steps.
SCALED = {"--max-tasks": "2", "--steps": "2"}
# Too slow for a test: `train rl` runs the config's 30 steps of rollouts on a Ray
# cluster (minutes on 2 cores; README shows no option to shorten it), and `train plot`
# reads what that run writes.
TOO_SLOW = (("train", "rl"), ("train", "plot"))

pytestmark = pytest.mark.timeout(600)


def readme_training_commands() -> list[list[str]]:
    """The shell block after "Training our own model" in README.md, one argv a command."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^Training our own model.*?```sh\n(.*?)```", text, re.S | re.M)
    assert block, "README has no shell block after 'Training our own model'"
    joined = block.group(1).replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def scaled(argv: list[str], pypi: bool) -> list[str]:
    out = []
    for i, word in enumerate(argv):
        if i and argv[i - 1] in SCALED:
            word = SCALED[argv[i - 1]]
        elif i and argv[i - 1] == "--pypi" and word == "default":
            word = PYPI_SPEC
        out.append(word)
    if not pypi and "--pypi" in out:  # offline: README's other source of tasks
        at = out.index("--pypi")
        out[at : at + 2] = ["--synthetic", "1", "--seed", "0"]
    return out


def test_readme_training_commands_run_as_written_from_any_directory(tmp_path):
    commands = readme_training_commands()
    assert [c[0] for c in commands] == [TACHY] * len(commands)
    assert commands[0][1:3] == ["tasks", "build"] and "runs/tasks" in commands[0]
    pypi = not os.environ.get("TACHY_OFFLINE") and _registry_reachable(PYPI_SPEC)
    # `.venv/bin/tachy` is this checkout's command; the README runs it from the checkout,
    # the test from an empty directory (where the relative paths point).
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = []
    for argv in commands:
        if tuple(argv[1:3]) in TOO_SLOW:
            continue
        run = subprocess.run(
            [sys.executable, "-m", "server.cli", *scaled(argv, pypi)[1:]],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, f"{shlex.join(argv)} failed:\n{run.stderr[-4000:]}"
        ran.append(tuple(argv[1:3]))
    assert ran == [("tasks", "build"), ("tasks", "demos"), ("train", "pretrain"), ("train", "sft")]
    tasks = load_tasks(tmp_path / "runs" / "tasks")
    assert len(tasks) == 2
    if pypi:
        assert all(t.env == "envs/inflection" for t in tasks)
    demos = (tmp_path / "runs" / "demos.jsonl").read_text().splitlines()
    assert len(demos) == 2 and all(json.loads(d)["reward"] == 1.0 for d in demos)
    for run in ("pre", "sft"):
        assert (tmp_path / "runs" / run / "metrics.jsonl").is_file()
