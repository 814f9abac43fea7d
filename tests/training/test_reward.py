"""Rewards and the recorded run shape, on hand-made reports and transcripts."""

from __future__ import annotations

from agent import events as ev
from agent.lints import Diagnostic
from training.env.reward import lints_introduced, run_shape, score_tests
from training.env.testrun import TestReport
from training.tasks.taskset import Task, TaskMeta


def task(f2p, p2p) -> Task:
    return Task(
        id="t-1", repo="repos/x", instruction="fix it", test_command="{python} -m pytest",
        fail_to_pass=f2p, pass_to_pass=p2p, metadata=TaskMeta(source="test", project="x"),
    )  # fmt: skip


def report(**outcomes: str) -> TestReport:
    return TestReport(outcomes={k.replace("__", "::"): v for k, v in outcomes.items()})


def test_reward_needs_every_fail_to_pass_and_no_broken_pass_to_pass():
    t = task(["a::f1", "a::f2"], ["a::p1", "a::p2"])
    solved = score_tests(t, report(a__f1="passed", a__f2="xfailed", a__p1="passed", a__p2="passed"))
    assert solved.reward == 1.0 and solved.fixed == ["a::f1", "a::f2"] and not solved.broken
    half = score_tests(t, report(a__f1="passed", a__f2="failed", a__p1="passed", a__p2="passed"))
    assert half.reward == 0.0 and half.fixed == ["a::f1"] and half.still_failing == ["a::f2"]
    broke = score_tests(t, report(a__f1="passed", a__f2="passed", a__p1="error", a__p2="passed"))
    assert broke.reward == 0.0 and broke.broken == ["a::p1"]
    # a test that did not run (deleted, or the run was cut short) did not pass
    missing = score_tests(t, report(a__f1="passed", a__f2="passed", a__p1="passed"))
    assert missing.reward == 0.0 and missing.broken == ["a::p2"]
    everything = report(a__f1="passed", a__f2="passed", a__p1="passed", a__p2="passed")
    everything.timed_out = True
    assert score_tests(t, everything).reward == 0.0


def test_lints_introduced_counts_new_problems_per_file_and_code():
    def d(path, code, line=1):
        return Diagnostic(path, line, 1, code, "m")

    before = [d("a.py", "F401"), d("a.py", "E711")]
    after = [d("a.py", "F401", 3), d("a.py", "F841"), d("a.py", "F841", 2), d("b.py", "E711")]
    # E711 fixed does not pay for the two F841; b.py's problem is new
    assert lints_introduced(before, after) == 3
    assert lints_introduced(before, before) == 0


def test_run_shape_counts_turns_calls_and_parallelism():
    events = [
        ev.Assistant(turn=1, text="ab"),
        ev.ToolCall(call_id="call_1_0", tool="grep", args={}),
        ev.ToolCall(call_id="call_1_1", tool="read_file", args={}),
        ev.ToolCall(call_id="call_1_2", tool="read_file", args={}),
        ev.ToolResult(call_id="call_1_0", tool="grep", is_error=True, content="x"),
        ev.Assistant(turn=2, text="cde"),
        ev.ToolCall(call_id="call_2_0", tool="edit_file", args={}),
        ev.Assistant(turn=3, text="done"),
    ]
    shape = run_shape(events, tokens=42)
    assert shape.turns == 3 and shape.tool_calls == 4 and shape.tool_errors == 1
    assert shape.turns_with_calls == 2 and shape.parallel_calls_per_turn == 2.0
    assert shape.max_parallel_calls == 3 and shape.assistant_chars == 9 and shape.tokens == 42


async def test_run_shape_of_a_real_run_counts_malformed_calls_and_reads_before_the_edit(
    tmp_path,
):
    """Through the executor: its own refusals are the malformed calls, and the looking
    (read/search) calls before the first edit are counted, the ones after it are not."""
    from agent.executor import Executor
    from agent.policy import ReplayPolicy
    from tests.conftest import make_context, make_repo

    ctx = make_context(make_repo(tmp_path / "repo"))
    turns = [
        '<tool_call name="read_file">\n<path>src/calc.py</path>\n</tool_call>\n'
        '<tool_call name="grep">\n<pattern>def add</pattern>\n</tool_call>\n'
        '<tool_call name="codebase_search">\n<query>addition</query>\n</tool_call>',
        '<tool_call name="no_such_tool">\n<x>1</x>\n</tool_call>\n'
        '<tool_call name="read_file">\n<nope>src/calc.py</nope>\n</tool_call>\n'
        '<tool_call name="edit_file">\n<oops',
        '<tool_call name="edit_file">\n<path>src/calc.py</path>\n<old_string>\n'
        "def add(a, b):\n    return a - b\n</old_string>\n<new_string>\n"
        "def add(a, b):\n    return a + b\n</new_string>\n</tool_call>\n"
        '<tool_call name="read_file">\n<path>src/calc.py</path>\n</tool_call>',
        "Done.",
    ]
    executor = Executor(ctx, ReplayPolicy(turns), max_turns=5)
    await executor.run("fix add")
    shape = run_shape(executor.events)
    assert shape.turns == 4 and shape.turns_with_calls == 3
    assert shape.malformed_calls == 3, [
        e.content[:60] for e in executor.events if isinstance(e, ev.ToolResult)
    ]
    assert shape.tool_calls == 8 and shape.well_formed_calls == 5
    assert shape.edits == 1 and shape.reads_before_edit == 3 and shape.codebase_searches == 1
