"""`tachy eval --teacher-forced`: a policy's next turn at each of the expert's turns,
scored against the expert's (well formed, same tools, same calls, the edit that fixes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.parser import parse_all
from training.eval.turns import apply_edits, score_turn
from training.tasks.taskset import Mutation, Task, TaskMeta, append_tasks

pytestmark = pytest.mark.timeout(600)
PROJECT = Path(__file__).resolve().parents[2]
TACHY = [sys.executable, "-m", "server.cli"]

OPS = """def add(a, b):
    return a + b


def scale(a, b):
    return a * b
"""
TESTS = """from calc.ops import add, scale


def test_add():
    assert add(2, 3) == 5


def test_scale():
    assert scale(2, 3) == 6
"""
BUGGY = OPS.replace("return a + b", "return a - b")
# A fix of add written with less context than the expert's edit: not the same call,
# but the same fixed file.
SHORT_FIX = (
    '<tool_call name="edit_file">\n<path>calc/ops.py</path>\n'
    "<old_string>a - b</old_string>\n<new_string>a + b</new_string>\n</tool_call>"
)


@pytest.fixture
def taskset(tmp_path: Path) -> Path:
    set_dir = tmp_path / "set"
    repo = set_dir / "repos" / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(OPS)
    (repo / "tests" / "test_ops.py").write_text(TESTS)
    mutation = Mutation(
        operator="binop", path="calc/ops.py", line=2, original="+", mutated="-",
        description="`+` replaced by `-` in `add`",
    )  # fmt: skip
    task = Task(
        id="calc-1", repo="repos/calc", instruction="tests/test_ops.py::test_add fails.",
        test_command="{python} -m pytest -q -p no:cacheprovider tests",
        fail_to_pass=["tests/test_ops.py::test_add"],
        pass_to_pass=["tests/test_ops.py::test_scale"],
        files={"calc/ops.py": BUGGY}, test_files=["tests/test_ops.py"],
        metadata=TaskMeta(source="test:calc", project="calc", sites=[mutation]),
    )  # fmt: skip
    append_tasks(set_dir, [task])
    return set_dir


def test_an_edit_that_gives_the_fixed_file_fixes_whatever_its_context():
    fixed = OPS
    assert apply_edits(BUGGY, "calc/ops.py", parse_all(SHORT_FIX)) == fixed
    ambiguous = SHORT_FIX.replace("a - b", "return a")
    assert apply_edits(BUGGY, "calc/ops.py", parse_all(ambiguous)) is None  # two matches
    elsewhere = SHORT_FIX.replace("calc/ops.py", "calc/other.py")
    assert apply_edits(BUGGY, "calc/ops.py", parse_all(elsewhere)) == BUGGY  # not this file
    expert = SHORT_FIX.replace("a - b", "    return a - b").replace("a + b", "    return a + b")
    fix = {"calc/ops.py": (BUGGY, fixed)}
    s = score_turn("t", 2, expert, SHORT_FIX, fix)
    assert (s.well_formed, s.same_tools, s.exact, s.fixes) == (True, True, False, True)
    # the same calls up to blank space around values, in another order, are exact
    two = '<tool_call name="grep">\n<pattern>def add</pattern>\n</tool_call>\n' + expert
    swapped = expert.replace("<path>calc/ops.py", "<path> calc/ops.py ") + (
        '\n<tool_call name="grep">\n<pattern>\ndef add\n</pattern>\n</tool_call>'
    )
    assert score_turn("t", 0, two, swapped, None).exact
    # a call that does not fit its tool is malformed, and prose where a call was due too
    bad = '<tool_call name="read_lints">\n<pattern>x</pattern>\n</tool_call>'
    s = score_turn("t", 3, '<tool_call name="read_lints">\n</tool_call>', bad, None)
    assert (s.well_formed, s.same_tools, s.exact) == (False, True, False)
    assert not score_turn("t", 0, two, "I would fix it.", None).well_formed
    assert score_turn("t", 4, "Fixed.", "Done.", None).exact  # an answer is an answer


def test_teacher_forced_eval_scores_each_expert_turn(taskset: Path, tmp_path: Path):
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"text": SHORT_FIX}) + "\n")
    out = subprocess.run(
        [*TACHY, "eval", str(taskset), "--policy", f"replay:{replay}", "--teacher-forced",
         "--json"],
        capture_output=True, text=True, cwd=PROJECT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["tasks"] == 1 and report["turns"] == 5  # the expert's five turns
    by_turn = {s["turn"]: s for s in report["scores"]}
    edit = by_turn[2]
    assert edit["expert_tools"] == ["edit_file"] and edit["fixes"] is True
    assert edit["same_tools"] and not edit["exact"]
    assert [by_turn[t]["fixes"] for t in (0, 1, 3, 4)] == [None] * 4
    assert not by_turn[4]["well_formed"]  # a call where the expert answered
    assert report["fixes"]["value"] == 1.0
    assert report["per_turn"]["2"]["same_tools"]["value"] == 1.0
    assert "the edit fixes 100%" in out.stderr


def test_teacher_forced_samples_the_edit_turn_k_times(taskset: Path, tmp_path: Path):
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"text": SHORT_FIX}) + "\n")
    out = subprocess.run(
        [*TACHY, "eval", str(taskset), "--policy", f"replay:{replay}", "--teacher-forced",
         "--turns", "edit", "--attempts", "3", "--temperature", "1", "--json"],
        capture_output=True, text=True, cwd=PROJECT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["attempts"] == 3 and report["turns"] == 3
    assert [(s["turn"], s["attempt"]) for s in report["scores"]] == [(2, 0), (2, 1), (2, 2)]
    assert report["fixes_any"]["value"] == 1.0 and report["fixes_any"]["n"] == 1
    assert "any of 3 edits fixes 100%" in out.stderr
    assert "calc-1: ~~~F3" in out.stderr


def test_teacher_forced_refuses_the_options_of_free_runs(taskset: Path):
    out = subprocess.run(
        [*TACHY, "eval", str(taskset), "--policy", "local:", "--teacher-forced",
         "--attempts", "2", "--resume"],
        capture_output=True, text=True, cwd=PROJECT, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--resume does not go with --teacher-forced" in out.stderr
    for flags, message in (
        (["--teacher-forced", "--attempts", "2"], "needs --temperature above 0"),
        (["--teacher-forced", "--turns", "last"], "--turns: turns must be 'edit'"),
        (["--turns", "edit"], "--turns goes with --teacher-forced only"),
    ):
        out = subprocess.run(
            [*TACHY, "eval", str(taskset), "--policy", "local:", *flags],
            capture_output=True, text=True, cwd=PROJECT, timeout=120,
        )  # fmt: skip
        assert out.returncode == 2 and message in out.stderr, (flags, out.stderr)
