"""`tachy eval`: pass@k with intervals on a task set, through the environment server and
the unchanged executor; a resumable results file; failed policies kept apart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import events as ev
from agent.policy import PolicyError, register_policy
from training.eval.run import (
    Attempt,
    EvalSettings,
    compare_attempts,
    load_results,
    run_eval,
    summarize,
)
from training.eval.stats import bootstrap_ci, paired_gain, pass_at_k
from training.tasks.taskset import Task, TaskError, TaskMeta, append_tasks

pytestmark = pytest.mark.timeout(600)
PROJECT = Path(__file__).resolve().parents[2]
TACHY = [sys.executable, "-m", "server.cli"]

OPS = """def add(a, b):
    return a + b


def clamp(x, low, high):
    return max(low, min(x, high))
"""
TESTS = """from calc.ops import add, clamp


def test_add():
    assert add(2, 3) == 5


def test_clamp():
    assert clamp(5, 0, 3) == 3
"""
# The same turns for every task: two looks, then the fix of add's bug (solves calc-add,
# fails on clamp's bug, where its old_string is not found), then the final answer.
FIX_ADD = [
    '<tool_call name="read_file">\n<path>calc/ops.py</path>\n</tool_call>\n'
    '<tool_call name="grep">\n<pattern>def add</pattern>\n</tool_call>',
    '<tool_call name="edit_file">\n<path>calc/ops.py</path>\n<old_string>return a - b'
    "</old_string>\n<new_string>return a + b</new_string>\n</tool_call>",
    "Fixed add.",
]


def _task(set_dir: Path, project: str, bug: tuple[str, str], failing: str, passing: str) -> Task:
    repo = set_dir / "repos" / project
    if not repo.is_dir():
        (repo / "calc").mkdir(parents=True)
        (repo / "tests").mkdir()
        (repo / "calc" / "__init__.py").write_text("")
        (repo / "calc" / "ops.py").write_text(OPS)
        (repo / "tests" / "test_ops.py").write_text(TESTS)
    return Task(
        id=f"{project}-1", repo=f"repos/{project}",
        instruction=f"tests/test_ops.py::{failing} fails. Please fix it.",
        test_command="{python} -m pytest -q -p no:cacheprovider tests",
        fail_to_pass=[f"tests/test_ops.py::{failing}"],
        pass_to_pass=[f"tests/test_ops.py::{passing}"],
        files={"calc/ops.py": OPS.replace(*bug)}, test_files=["tests/test_ops.py"],
        metadata=TaskMeta(source=f"test:{project}", project=project),
    )  # fmt: skip


@pytest.fixture
def taskset(tmp_path: Path) -> Path:
    """Two projects: add's bug (the replay fixes it) and clamp's (it does not)."""
    set_dir = tmp_path / "set"
    append_tasks(set_dir, [
        _task(set_dir, "adder", ("return a + b", "return a - b"), "test_add", "test_clamp"),
        _task(set_dir, "clamper", ("min(x, high)", "min(x, low)"), "test_clamp", "test_add"),
    ])  # fmt: skip
    return set_dir


def replay_file(tmp_path: Path, turns: list[str]) -> Path:
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    return path


def tachy(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TACHY_POLICY", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = str(PROJECT)
    return subprocess.run(
        [*TACHY, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


# ------------------------------------------------------------------- statistics
def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_the_bootstrap_interval_holds_the_mean_and_is_deterministic():
    values = [1.0] * 3 + [0.0] * 7
    low, high = bootstrap_ci(values, seed=1)
    assert low < 0.3 < high and low >= 0.0 and high <= 1.0
    assert bootstrap_ci(values, seed=1) == (low, high)
    wider = bootstrap_ci([1.0, 0.0], seed=1)  # two tasks say little
    assert wider[1] - wider[0] > high - low
    assert bootstrap_ci([0.5]) == (0.5, 0.5) and bootstrap_ci([]) == (0.0, 0.0)


def test_a_paired_gain_resamples_each_task_s_change():
    before = [1.0, 0.0, 0.0, 0.0] * 5
    after = [1.0, 1.0, 0.0, 0.0] * 5  # 5 more of 20 solved, none lost
    gain, low, high = paired_gain(before, after, seed=1)
    assert gain == 0.25 and 0.0 < low < 0.25 < high
    apart = bootstrap_ci(after, seed=1)[0] - bootstrap_ci(before, seed=1)[1]
    assert apart < 0 < low  # the separate intervals overlap; the paired one excludes 0
    assert paired_gain([1.0, 0.0], [1.0, 0.0]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="the same tasks"):
        paired_gain([1.0], [1.0, 0.0])


def test_plot_reports_the_held_out_change_of_a_run():
    from training.cli import heldout_change

    def evaluation(step: int, solved: list[str]) -> dict:
        return {"step": step, "heldout_solved": solved, "heldout_tasks": 10,
                "heldout_solve_rate": len(solved) / 10, "heldout_solve_ci95": [0.0, 0.5],
                "heldout_families": {"a": 0.5}}  # fmt: skip

    rows = [evaluation(0, ["t1"]), {"step": 1, "reward": 0.5}, evaluation(4, ["t2", "t3"])]
    line = heldout_change(rows)
    assert line is not None and "0.100 [0.000, 0.500] at step 0 -> 0.200" in line
    assert "(10 tasks): gain +0.100" in line and "a 0.50->0.50" in line
    assert heldout_change(rows[:2]) is None  # one evaluation: nothing to compare


# ------------------------------------------------------------------- the command
def test_eval_reports_pass_at_1_per_project_and_the_shape_of_the_runs(taskset, tmp_path):
    turns = replay_file(tmp_path, FIX_ADD)
    results = tmp_path / "out" / "results.jsonl"
    run = tachy(
        "eval", str(taskset), "--policy", f"replay:{turns}", "--workers", "2", "--json",
        "--results", str(results), "--transcripts", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["pass_at_1"]["value"] == 0.5 and report["scored_tasks"] == 2
    # Each attempt's transcript, as `tachy agent --transcript` writes it.
    events = ev.read_transcript(tmp_path / "runs" / "adder-1.0.jsonl")
    assert isinstance(events[0], ev.RunStart) and isinstance(events[-1], ev.Final)
    assert sum(isinstance(e, ev.ToolCall) for e in events) == 3
    assert report["projects"]["adder"]["value"] == 1.0
    assert report["projects"]["clamper"]["value"] == 0.0
    assert report["well_formed_share"] == 1.0 and report["tool_calls"] == 6
    assert report["reads_before_edit"] == 2 and report["parallel_calls_per_turn"] == 1.5
    assert report["turns_per_attempt"] == 3 and report["stop_reasons"] == {"end_turn": 2}
    outcomes = {t["task_id"]: t["outcomes"] for t in report["per_task"]}
    assert outcomes == {"adder-1": ["solved"], "clamper-1": ["failed"]}
    assert "pass@1 50.0%" in run.stderr and "adder: 100.0% of 1 tasks" in run.stderr
    settings, attempts = load_results(results)
    assert settings.policy == f"replay:{turns}" and len(attempts) == 2
    # A second run into the same file must say how to continue, not overwrite it.
    again = tachy("eval", str(taskset), "--policy", f"replay:{turns}", "--results",
                  str(results), cwd=tmp_path)  # fmt: skip
    assert again.returncode == 2 and "--resume continues it" in again.stderr
    assert len(load_results(results)[1]) == 2


def test_resume_runs_only_the_missing_attempts_and_more_attempts_give_pass_at_k(taskset, tmp_path):
    turns = replay_file(tmp_path, FIX_ADD)
    results = tmp_path / "r.jsonl"
    settings = EvalSettings(taskset=str(taskset), policy=f"replay:{turns}", limit=1)
    seen: list[tuple[str, int]] = []

    def record(attempt, done, total) -> None:
        seen.append((attempt.task_id, attempt.attempt))

    import asyncio

    asyncio.run(run_eval(settings, results, on_attempt=record))
    assert seen == [("adder-1", 0)]
    more = EvalSettings(taskset=str(taskset), policy=f"replay:{turns}", attempts=2)
    attempts = asyncio.run(run_eval(more, results, resume=True, on_attempt=record))
    assert sorted(seen[1:]) == [("adder-1", 1), ("clamper-1", 0), ("clamper-1", 1)]
    report = summarize(attempts, k=2)
    assert report["pass_at_2"]["value"] == 0.5 and report["attempts"] == 4
    other = EvalSettings(taskset=str(taskset), policy=f"replay:{turns}", max_turns=3)
    with pytest.raises(TaskError, match="other settings"):
        asyncio.run(run_eval(other, results, resume=True))


class _DiesAfterOneTurn:
    """A model server that answers one turn and is gone from then on."""

    served = 0

    def __init__(self) -> None:
        pass

    async def stream(self, messages, stop):
        if _DiesAfterOneTurn.served >= 1:
            raise PolicyError("cannot get an answer from http://127.0.0.1:9/v1: connection refused")
        _DiesAfterOneTurn.served += 1
        yield FIX_ADD[0]

    async def aclose(self) -> None:
        return None


def test_a_policy_that_dies_mid_eval_leaves_unscored_attempts_that_resume_reruns(taskset, tmp_path):
    import asyncio

    register_policy("dying", lambda rest, max_tokens=None, runs=1: _DiesAfterOneTurn())
    results = tmp_path / "r.jsonl"
    settings = EvalSettings(taskset=str(taskset), policy="dying:server")
    attempts = asyncio.run(run_eval(settings, results))
    assert {a.status for a in attempts} == {"unscored"}
    report = summarize(attempts)
    assert report["scored_tasks"] == 0 and len(report["unscored_attempts"]) == 2
    assert "connection refused" in report["unscored_attempts"][0]["error"]
    # the model server is back: resume runs exactly the unscored attempts again
    turns = replay_file(tmp_path, FIX_ADD)
    register_policy("dying", lambda rest, max_tokens=None, runs=1: load_replay(turns))
    attempts = asyncio.run(run_eval(settings, results, resume=True))
    assert sorted(a.status for a in attempts) == ["failed", "solved"]
    assert len(load_results(results)[1]) == 2


def load_replay(path: Path):
    from agent.policy import ReplayPolicy

    return ReplayPolicy.from_file(path)


def test_a_dead_endpoint_is_reported_not_counted_as_failures(taskset, tmp_path):
    run = tachy(
        "eval", str(taskset), "--policy", "openai:http://127.0.0.1:9/v1#none", "--limit", "1",
        "--json", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert report["scored_tasks"] == 0 and report["unscored_attempts"][0]["task_id"] == "adder-1"
    assert "1 attempts not scored (the policy failed" in run.stderr
    assert (tmp_path / "eval-set.jsonl").is_file()  # the default results file


def test_missing_or_stale_environments_are_named_before_anything_runs(taskset, tmp_path):
    turns = replay_file(tmp_path, FIX_ADD)
    lines = (taskset / "tasks.jsonl").read_text().splitlines()
    task = json.loads(lines[1])
    task["env"] = "envs/clamper"
    (taskset / "tasks.jsonl").write_text(lines[0] + "\n" + json.dumps(task) + "\n")
    run = tachy("eval", str(taskset), "--policy", f"replay:{turns}", cwd=tmp_path)
    assert run.returncode == 2
    assert "task 'clamper-1': its environment" in run.stderr and "missing" in run.stderr
    env = taskset / "envs" / "clamper"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(sys.executable)
    (env / ".tachy-ready").write_text("pypi:clamper==0.1\n")
    run = tachy("eval", str(taskset), "--policy", f"replay:{turns}", cwd=tmp_path)
    assert run.returncode == 2 and "is stale (made for pypi:clamper==0.1" in run.stderr
    assert not (tmp_path / "eval-set.jsonl").exists()  # nothing ran


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT back to its default in the child: a shell starts background jobs with it
    ignored (a CI script run with `&`), and Python then never turns it into
    KeyboardInterrupt, as it would for a user pressing Ctrl-C in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_keeps_the_finished_attempts_and_resume_continues(taskset, tmp_path):
    """The first task's attempt finishes; the second is inside a long command when the
    user presses Ctrl-C: exit 130, the first kept, and --resume runs only the second."""
    slow = [
        '<tool_call name="run_terminal_cmd">\n<command>sleep 1; test -e calc/ops.py && '
        "grep -q 'a - b' calc/ops.py || sleep 120</command>\n</tool_call>",
        *FIX_ADD,
    ]
    turns = replay_file(tmp_path, slow)
    results = tmp_path / "r.jsonl"
    args = [*TACHY, "eval", str(taskset), "--policy", f"replay:{turns}", "--results", str(results)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(PROJECT)
    proc = subprocess.Popen(
        args, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )  # fmt: skip
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if "adder-1 #0" in line:
            break
    assert any("ok   adder-1" in line for line in lines), lines
    time.sleep(2)  # the clamper attempt is in its 120 s sleep
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, rest
    assert "--resume continues" in rest
    assert [a.task_id for a in load_results(results)[1]] == ["adder-1"]
    resumed = tachy(*args[3:], "--resume", "--json", cwd=tmp_path, timeout=400)
    assert resumed.returncode == 0, resumed.stderr
    assert "clamper-1" in resumed.stderr and "adder-1 #0" not in resumed.stderr
    assert json.loads(resumed.stdout)["attempts"] == 2


class _Endless:
    """A model that never stops writing: its stream ends only when it is closed."""

    streaming = False
    stopped = False

    async def stream(self, messages, stop):
        import asyncio

        _Endless.streaming = True
        try:
            while True:
                await asyncio.sleep(0.02)
                yield "x"
        finally:
            _Endless.stopped = True

    async def aclose(self) -> None:
        return None


def test_cancelling_an_eval_stops_the_turn_being_generated(taskset, tmp_path):
    """Ctrl-C cancels tachy eval's task: the attempt's turn must stop with it, not go on
    generating as an orphan while the evaluation shuts down (a local model would keep
    its engine busy, and the process alive, for the rest of the turn)."""
    import asyncio

    register_policy("endless", lambda rest, max_tokens=None, runs=1: _Endless())
    settings = EvalSettings(taskset=str(taskset), policy="endless:model")

    async def main() -> None:
        job = asyncio.ensure_future(run_eval(settings, tmp_path / "r.jsonl"))
        while not _Endless.streaming:
            await asyncio.sleep(0.05)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        assert _Endless.stopped  # closed by the time the evaluation has gone

    asyncio.run(main())
    assert load_results(tmp_path / "r.jsonl")[1] == []


def test_the_report_gives_pass_at_1_and_pass_at_k_per_family_easiest_first():
    def attempt(task: str, family: str, index: int, solved: bool) -> Attempt:
        return Attempt(
            task_id=task, project="p", family=family, attempt=index,
            status="solved" if solved else "failed", stop_reason="end_turn",
        )  # fmt: skip

    attempts = [
        *(attempt("m-1", "mutation", i, False) for i in range(4)),
        *(attempt("n-1", "misspelled_name", i, i < 2) for i in range(4)),
        *(attempt("n-2", "misspelled_name", i, False) for i in range(4)),
    ]
    report = summarize(attempts, k=4)
    assert list(report["families"]) == ["misspelled_name", "mutation"]
    names = report["families"]["misspelled_name"]
    assert names["tasks"] == 2
    assert names["pass_at_1"]["value"] == 0.25  # (2/4 + 0/4) / 2
    assert names["pass_at_4"]["value"] == 0.5  # one task of two solved in 4 tries
    assert names["pass_at_1"]["ci95"] == [0.0, 0.5]
    assert report["families"]["mutation"]["pass_at_4"]["value"] == 0.0
    assert report["pass_at_1"]["value"] == round(0.25 * 2 / 3, 4)


def test_a_change_against_another_evaluation_is_paired_per_task_and_per_family():
    def attempt(task: str, family: str, solved: bool, status: str | None = None) -> Attempt:
        return Attempt(
            task_id=task, project="p", family=family, attempt=0,
            status=status or ("solved" if solved else "failed"), stop_reason="end_turn",
        )  # fmt: skip

    before = [
        attempt("n-1", "misspelled_name", True),
        attempt("n-2", "misspelled_name", False),
        attempt("m-1", "mutation", False),
        attempt("m-2", "mutation", False),
        attempt("x-1", "mutation", True),  # only before: not compared
    ]
    after = [
        attempt("n-1", "misspelled_name", False),
        attempt("n-2", "misspelled_name", True),
        attempt("m-1", "mutation", True),
        attempt("m-2", "mutation", False, status="unscored"),  # not scored: not compared
    ]
    change = compare_attempts(before, after)
    assert change["tasks"] == 3 and change["only_in_one"] == 2
    assert (change["before"], change["after"]) == (round(1 / 3, 4), round(2 / 3, 4))
    assert change["gain"] == round(1 / 3, 4) and change["gained"] == ["m-1", "n-2"]
    assert change["lost"] == ["n-1"]
    low, high = change["ci95"]
    assert low < 0 < change["gain"] <= high  # one gain and one loss could be chance
    names = change["families"]["misspelled_name"]
    assert names["tasks"] == 2 and names["gain"] == 0.0
    assert list(change["families"]) == ["misspelled_name", "mutation"]


def test_eval_against_a_baseline_reports_the_paired_change(taskset, tmp_path):
    fixes, nothing = replay_file(tmp_path, FIX_ADD), tmp_path / "nothing.jsonl"
    nothing.write_text(json.dumps({"text": "I cannot find the bug."}) + "\n")
    missing = tachy(
        "eval", str(taskset), "--policy", f"replay:{fixes}", "--against",
        str(tmp_path / "no-such.jsonl"), cwd=tmp_path,
    )  # fmt: skip
    assert missing.returncode == 2 and "no such results file" in missing.stderr
    assert not (tmp_path / "eval-set.jsonl").exists()  # refused before anything ran
    base = tmp_path / "base.jsonl"
    first = tachy(
        "eval", str(taskset), "--policy", f"replay:{nothing}", "--results", str(base),
        cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    run = tachy(
        "eval", str(taskset), "--policy", f"replay:{fixes}", "--results",
        str(tmp_path / "after.jsonl"), "--against", str(base), "--json", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    change = json.loads(run.stdout)["against"]
    assert change["tasks"] == 2 and change["gain"] == 0.5 and change["gained"] == ["adder-1"]
    assert f"against {base}: pass@1 0.0% -> 50.0%: +50.0%" in run.stderr
