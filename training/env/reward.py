"""The reward of a rollout, and what is recorded beside it.

reward = 1 when every FAIL_TO_PASS test passes and every PASS_TO_PASS test still
passes, else 0. Recorded alongside: the tests fixed and broken, lint problems the
rollout introduced, and the shape of the run (turns, tool calls, parallel calls per
turn, tokens), which the trainer logs per step.
"""

from __future__ import annotations

from collections import Counter

import msgspec

from agent import events as ev
from agent.executor import is_malformed_result
from agent.lints import Diagnostic
from training.env.testrun import TestReport
from training.tasks.taskset import Task


class Score(msgspec.Struct, kw_only=True):
    reward: float
    fixed: list[str]  # FAIL_TO_PASS tests now passing
    still_failing: list[str]  # FAIL_TO_PASS tests not passing
    broken: list[str]  # PASS_TO_PASS tests no longer passing
    tests_timed_out: bool = False
    lints_introduced: int = 0


class RunShape(msgspec.Struct, kw_only=True):
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    turns_with_calls: int = 0
    parallel_calls_per_turn: float = 0.0  # mean calls per turn that made any
    max_parallel_calls: int = 0
    assistant_chars: int = 0
    tokens: int | None = None  # generated tokens, when the policy counts them
    malformed_calls: int = 0  # calls the executor refused (no parse, no such tool, bad args)
    edits: int = 0  # edit_file, write_file and delete_file calls
    # reading and searching calls before the first edit (all of them when nothing was edited)
    reads_before_edit: int = 0
    codebase_searches: int = 0  # codebase_search calls

    @property
    def well_formed_calls(self) -> int:
        return self.tool_calls - self.malformed_calls


EDITING_TOOLS = frozenset({"edit_file", "write_file", "delete_file"})
LOOKING_TOOLS = frozenset({"read_file", "list_dir", "file_search", "grep", "codebase_search"})


def score_tests(task: Task, report: TestReport) -> Score:
    fixed = [t for t in task.fail_to_pass if report.passed(t)]
    still = [t for t in task.fail_to_pass if not report.passed(t)]
    broken = [t for t in task.pass_to_pass if not report.passed(t)]
    solved = not still and not broken and not report.timed_out
    return Score(
        reward=1.0 if solved else 0.0,
        fixed=fixed,
        still_failing=still,
        broken=broken,
        tests_timed_out=report.timed_out,
    )


def lints_introduced(before: list[Diagnostic], after: list[Diagnostic]) -> int:
    """Problems per (file, code) beyond those the file had before; fixing one problem
    does not pay for adding another kind."""
    old = Counter((d.path, d.code) for d in before)
    new = Counter((d.path, d.code) for d in after)
    return sum(max(0, n - old[key]) for key, n in new.items())


def run_shape(events: list[ev.Event], tokens: int | None = None) -> RunShape:
    shape = RunShape(tokens=tokens)
    calls_by_turn: Counter[int] = Counter()
    for event in events:
        if isinstance(event, ev.Assistant):
            shape.turns = max(shape.turns, event.turn)
            shape.assistant_chars += len(event.text)
        elif isinstance(event, ev.ToolCall):
            shape.tool_calls += 1
            calls_by_turn[int(event.call_id.split("_")[1])] += 1
        elif isinstance(event, ev.ToolResult):
            shape.tool_errors += event.is_error
            if is_malformed_result(event.content, event.is_error):
                shape.malformed_calls += 1  # refused before it ran: neither a read nor an edit
            elif event.tool in EDITING_TOOLS:
                shape.edits += 1
            elif event.tool in LOOKING_TOOLS and not shape.edits:
                shape.reads_before_edit += 1
            shape.codebase_searches += event.tool == "codebase_search"
    if calls_by_turn:
        shape.turns_with_calls = len(calls_by_turn)
        shape.parallel_calls_per_turn = round(shape.tool_calls / len(calls_by_turn), 3)
        shape.max_parallel_calls = max(calls_by_turn.values())
    return shape
