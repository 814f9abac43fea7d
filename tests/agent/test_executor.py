"""The executor loop (agent/executor.py) driven by replayed and scripted policies."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agent import events as ev
from agent.executor import Executor, RunResult, conflicts
from agent.parser import format_call
from agent.policy import Message, PolicyError, ReplayPolicy
from agent.tools import ALL_TOOLS, Tool, ToolContext, ToolError
from agent.tools.base import EVERYTHING
from tests.conftest import make_context, make_repo

# A generous bound for things that should happen at once: the tests only use it so
# that a broken executor fails instead of hanging.
PATIENCE_S = 10.0


def call(tool: str, /, **params: Any) -> str:
    return format_call(tool, {key: str(value) for key, value in params.items()})


class RecordingReplay(ReplayPolicy):
    """A replay policy that also keeps the messages it was asked to continue."""

    def __init__(self, turns: list[str]) -> None:
        super().__init__(turns)
        self.seen: list[list[Message]] = []
        self.stops: list[list[str]] = []

    async def stream(self, messages, stop) -> AsyncIterator[str]:
        self.seen.append(list(messages))
        self.stops.append(list(stop))
        async for chunk in super().stream(messages, stop):
            yield chunk


class ScriptedPolicy:
    """Each turn is an async generator function of the messages."""

    def __init__(self, turns: list[Callable[[list[Message]], AsyncIterator[str]]]) -> None:
        self.turns = turns
        self.position = 0

    async def stream(self, messages, stop) -> AsyncIterator[str]:
        turn = self.turns[self.position]
        self.position += 1
        async for chunk in turn(messages):
            yield chunk

    async def aclose(self) -> None:
        pass


def kinds(events: list[ev.Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def of(events: list[ev.Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


async def run(
    root: Path, turns: list[str], prompt: str = "fix the bug", **options
) -> tuple[RunResult, Executor]:
    policy = RecordingReplay(turns)
    executor = Executor(make_context(root), policy, **options)
    result = await asyncio.wait_for(executor.run(prompt), PATIENCE_S * 3)
    return result, executor


def stripped(events: list[ev.Event]) -> list[bytes]:
    """Each event encoded without its volatile `meta`."""
    out = []
    for event in events:
        data = ev.to_dict(event)
        data.pop("meta")
        out.append(msgspec.json.encode(data, order="sorted"))
    return out


# ------------------------------------------------------------------ a whole run
async def test_full_run_reads_edits_and_answers(repo):
    turns = [
        "Let me look at the code.\n" + call("read_file", path="src/calc.py"),
        call(
            "edit_file",
            path="src/calc.py",
            old_string="def add(a, b):\n    return a - b",
            new_string="def add(a, b):\n    return a + b",
        ),
        "I fixed add().",
    ]
    seen_events: list[ev.Event] = []
    result, executor = await run(repo, turns, on_event=seen_events.append)

    assert result.stop_reason == "end_turn"
    assert result.final_text == "I fixed add()."
    assert result.turns == 3
    assert result.error is None
    assert kinds(executor.events) == [
        "RunStart",
        "ToolCall",
        "Assistant",
        "ToolResult",
        "ToolCall",
        "Assistant",
        "ToolResult",
        "Assistant",
        "Final",
    ]
    assert seen_events == executor.events  # on_event sees every event, in order
    start = executor.events[0]
    assert start.prompt == "fix the bug"
    assert start.tools == [tool.name for tool in ALL_TOOLS]
    read_call, edit_call = of(executor.events, ev.ToolCall)
    assert (read_call.call_id, read_call.tool, read_call.args) == (
        "call_1_0",
        "read_file",
        {"path": "src/calc.py"},
    )
    assert edit_call.call_id == "call_2_0"
    read_result, edit_result = of(executor.events, ev.ToolResult)
    assert read_result.call_id == "call_1_0" and not read_result.is_error
    assert "     2\t    return a - b" in read_result.content
    assert edit_result.call_id == "call_2_0" and not edit_result.is_error
    assert "+    return a + b" in edit_result.content
    assistant = of(executor.events, ev.Assistant)
    assert [a.turn for a in assistant] == [1, 2, 3]
    assert assistant[0].text == turns[0]
    final = executor.events[-1]
    assert (final.text, final.stop_reason) == ("I fixed add().", "end_turn")
    assert (repo / "src" / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    assert "duration_ms" in read_result.meta

    # What the model saw: system prompt, task, then its turns and the results in turn.
    policy = executor.policy
    assert policy.stops[0] == ["<tool_result"]
    second = policy.seen[1]
    assert [m.role for m in second] == ["system", "user", "assistant", "user"]
    assert second[0].content == executor.system_prompt
    assert second[1].content == "fix the bug"
    assert second[2].content == turns[0]
    assert second[3].content.startswith('<tool_result name="read_file" call_id="call_1_0">\n')
    assert read_result.content in second[3].content
    assert len(policy.seen[2]) == 6


async def test_tool_call_args_are_shown_converted(repo):
    turns = [call("read_file", path="src/calc.py", start_line="2", end_line="3"), "done"]
    _, executor = await run(repo, turns)
    (tool_call,) = of(executor.events, ev.ToolCall)
    assert tool_call.args == {"path": "src/calc.py", "start_line": 2, "end_line": 3}


# ---------------------------------------------------------------- custom tools
def gate_tools() -> tuple[type[Tool], dict[str, asyncio.Event], list[str]]:
    """A read-only tool `gate(name, wait_for?)`: marks `name` started, waits (bounded)
    until `wait_for` has finished, then records that `name` finished."""
    finished: dict[str, asyncio.Event] = {}
    order: list[str] = []

    def event(name: str) -> asyncio.Event:
        return finished.setdefault(name, asyncio.Event())

    class Gate(Tool):
        """Test tool."""

        name = "gate"

        class Args(msgspec.Struct, forbid_unknown_fields=True):
            name: str
            wait_for: str = ""

        def access(self, args):
            return frozenset(), frozenset()

        async def run(self, args, ctx: ToolContext) -> str:
            if args.wait_for:
                try:
                    await asyncio.wait_for(event(args.wait_for).wait(), PATIENCE_S)
                except TimeoutError:
                    raise ToolError(f"{args.wait_for} never finished") from None
            order.append(args.name)
            event(args.name).set()
            return f"{args.name} done"

    return Gate, finished, order


def rendezvous_tool() -> tuple[type[Tool], list[str]]:
    """A read-only tool `meet(name, other)`: announces it started and waits (bounded)
    for `other` to have started too. Both calls succeed only if they overlap."""
    started: dict[str, asyncio.Event] = {}
    log: list[str] = []

    class Meet(Tool):
        """Test tool."""

        name = "meet"

        class Args(msgspec.Struct, forbid_unknown_fields=True):
            name: str
            other: str

        async def run(self, args, ctx: ToolContext) -> str:
            log.append(f"start {args.name}")
            started.setdefault(args.name, asyncio.Event()).set()
            try:
                await asyncio.wait_for(
                    started.setdefault(args.other, asyncio.Event()).wait(), PATIENCE_S / 2
                )
            except TimeoutError:
                raise ToolError(f"{args.name} ran alone") from None
            log.append(f"end {args.name}")
            return f"{args.name} met {args.other}"

    return Meet, log


async def test_results_come_back_in_call_order_when_calls_finish_out_of_order(repo):
    gate, _, order = gate_tools()
    turn = call("gate", name="first", wait_for="second") + "\n" + call("gate", name="second")
    result, executor = await run(repo, [turn, "done"], tools=[gate])
    assert result.stop_reason == "end_turn"
    assert order == ["second", "first"]  # they really finished out of order
    results = of(executor.events, ev.ToolResult)
    assert [(r.call_id, r.content, r.is_error) for r in results] == [
        ("call_1_0", "first done", False),
        ("call_1_1", "second done", False),
    ]
    message = executor.policy.seen[1][-1].content
    assert message.index("first done") < message.index("second done")


async def test_slow_command_result_is_reported_before_a_faster_later_call(repo):
    # A probe that reads nothing runs beside the command; it looks for the file the
    # command writes when it ends, so it can tell whether it ran while it was running.
    class Probe(Tool):
        """Test tool."""

        name = "probe"

        class Args(msgspec.Struct, forbid_unknown_fields=True):
            path: str

        def access(self, args):
            return frozenset(), frozenset()

        async def run(self, args, ctx: ToolContext) -> str:
            return "seen" if (ctx.workspace.root / args.path).exists() else "absent"

    tools = [*ALL_TOOLS, Probe]
    turn = (
        call("run_terminal_cmd", command="sleep 0.3; echo a; echo x > marker.txt")
        + "\n"
        + call("probe", path="marker.txt")
    )
    events: list[ev.Event] = []
    result, _ = await run(repo, [turn, "done"], tools=tools, on_event=events.append)
    assert result.stop_reason == "end_turn"
    results = of(events, ev.ToolResult)
    assert [r.call_id for r in results] == ["call_1_0", "call_1_1"]
    assert [r.tool for r in results] == ["run_terminal_cmd", "probe"]
    assert results[0].content.endswith("Exit code: 0\na")
    assert results[1].content == "absent"  # the probe finished first
    assert (repo / "marker.txt").exists()


async def test_read_only_calls_overlap(repo):
    meet, log = rendezvous_tool()
    turn = call("meet", name="a", other="b") + "\n" + call("meet", name="b", other="a")
    result, executor = await run(repo, [turn, "done"], tools=[meet])
    results = of(executor.events, ev.ToolResult)
    assert [(r.content, r.is_error) for r in results] == [("a met b", False), ("b met a", False)]
    assert log[:2] == ["start a", "start b"]
    assert result.stop_reason == "end_turn"


async def test_a_call_that_writes_runs_after_the_overlapping_reads_before_it(repo):
    # gate(name) reads nothing; a write_file issued after a read_file of the same path
    # must not start until that read has finished.
    turn = (
        call("read_file", path="src/calc.py")
        + "\n"
        + call("write_file", path="src/calc.py", content="x = 1\n")
        + "\n"
        + call("read_file", path="src/calc.py")
    )
    _, executor = await run(repo, [turn, "done"])
    first, write, second = of(executor.events, ev.ToolResult)
    assert "def add(a, b):" in first.content
    assert not write.is_error
    assert second.content.splitlines()[:2] == ["src/calc.py (1 lines)", "     1\tx = 1"]


async def test_edits_to_one_file_apply_in_call_order(repo):
    (repo / "counter.py").write_text("x = 0\n")
    edits = [
        call("edit_file", path="counter.py", old_string=f"x = {i}", new_string=f"x = {i + 1}")
        for i in range(8)
    ]
    turn = "\n".join(edits)
    result, executor = await run(repo, [turn, "done"])
    results = of(executor.events, ev.ToolResult)
    assert [r.is_error for r in results] == [False] * 8, [r.content for r in results]
    assert (repo / "counter.py").read_text() == "x = 8\n"
    assert result.stop_reason == "end_turn"


async def test_edits_through_different_spellings_of_one_path_apply_in_order(repo):
    (repo / "counter.py").write_text("x = 0\n")
    spellings = ["counter.py", "./counter.py", "/workspace/counter.py", str(repo / "counter.py")]
    turn = "\n".join(
        call("edit_file", path=path, old_string=f"x = {i}", new_string=f"x = {i + 1}")
        for i, path in enumerate(spellings)
    )
    _, executor = await run(repo, [turn, "done"])
    assert [r.is_error for r in of(executor.events, ev.ToolResult)] == [False] * 4
    assert (repo / "counter.py").read_text() == "x = 4\n"


async def test_edits_through_a_symlink_and_its_target_apply_in_order(repo):
    (repo / "counter.py").write_text("x = 0\n")
    os.symlink("counter.py", repo / "link.py")
    os.symlink("src", repo / "lib")
    (repo / "src" / "n.py").write_text("n = 0\n")
    turn = "\n".join(
        [
            *(
                call(
                    "edit_file",
                    path="link.py" if i % 2 else "counter.py",
                    old_string=f"x = {i}",
                    new_string=f"x = {i + 1}",
                )
                for i in range(8)
            ),
            *(
                call(
                    "edit_file",
                    path="lib/n.py" if i % 2 else "src/n.py",
                    old_string=f"n = {i}",
                    new_string=f"n = {i + 1}",
                )
                for i in range(8)
            ),
        ]
    )
    _, executor = await run(repo, [turn, "done"])
    results = of(executor.events, ev.ToolResult)
    assert [r.is_error for r in results] == [False] * 16, [r.content for r in results]
    assert (repo / "counter.py").read_text() == "x = 8\n"
    assert (repo / "src" / "n.py").read_text() == "n = 8\n"


async def test_terminal_command_waits_for_the_edits_before_it(repo):
    turn = "\n".join(
        [
            call(
                "edit_file",
                path="src/calc.py",
                old_string="def add(a, b):\n    return a - b",
                new_string="def add(a, b):\n    return a + b",
            ),
            call("write_file", path="notes/new.txt", content="fresh"),
            call("run_terminal_cmd", command="head -2 src/calc.py; cat notes/new.txt"),
            call("read_file", path="notes/new.txt"),
        ]
    )
    _, executor = await run(repo, [turn, "done"])
    edit, write, command, read = of(executor.events, ev.ToolResult)
    assert not (edit.is_error or write.is_error or command.is_error or read.is_error)
    assert command.content.endswith("def add(a, b):\n    return a + b\nfresh")
    assert "     1\tfresh" in read.content


async def test_a_call_starts_while_the_policy_is_still_streaming(repo):
    started = asyncio.Event()

    class Signal(Tool):
        """Test tool."""

        name = "signal"

        class Args(msgspec.Struct, forbid_unknown_fields=True):
            pass

        async def run(self, args, ctx: ToolContext) -> str:
            started.set()
            return "signalled"

    overlapped: list[bool] = []

    async def first_turn(messages):
        yield "Starting.\n" + call("signal") + "\n"
        try:
            await asyncio.wait_for(started.wait(), PATIENCE_S)
            overlapped.append(True)
        except TimeoutError:
            overlapped.append(False)
        yield "The tool ran while I was still writing."

    async def second_turn(messages):
        yield "done"

    policy = ScriptedPolicy([first_turn, second_turn])
    executor = Executor(make_context(repo), policy, tools=[Signal])
    result = await asyncio.wait_for(executor.run("go"), PATIENCE_S * 2)
    assert overlapped == [True]
    assert result.stop_reason == "end_turn"
    assert kinds(executor.events) == [
        "RunStart",
        "ToolCall",
        "Assistant",
        "ToolResult",
        "Assistant",
        "Final",
    ]
    assistant = of(executor.events, ev.Assistant)[0]
    assert assistant.text.endswith("The tool ran while I was still writing.")


# ------------------------------------------------------------------ bad calls
async def test_malformed_calls_get_error_results_and_the_run_continues(repo):
    bad_turn = "\n".join(
        [
            call("read_flie", path="src/calc.py"),
            call("read_file"),
            call("read_file", path="src/calc.py", colour="blue"),
            call("read_file", path="src/calc.py", start_line="three"),
            call("todo_write", todos='[{"content": 3}]'),
            "<tool_call>\n<path>x</path>\n</tool_call>",
            '<tool_call name="read_file">\n<path>src/calc.py</path>',  # never closed
        ]
    )
    turns = [bad_turn, call("read_file", path="src/calc.py", end_line="1"), "All good."]
    result, executor = await run(repo, turns)
    assert result.stop_reason == "end_turn"
    assert result.final_text == "All good."
    results = of(executor.events, ev.ToolResult)
    assert [r.call_id for r in results[:7]] == [f"call_1_{i}" for i in range(7)]
    assert all(r.is_error for r in results[:7])
    assert all(r.content.startswith("Error: ") for r in results[:7])
    unknown, missing, extra, bad_int, bad_list, no_name, unclosed = (r.content for r in results[:7])
    usage = '<tool_call name="read_file">\n<path>string</path>'

    assert "no tool named 'read_flie'" in unknown
    assert "read_file" in unknown and "run_terminal_cmd" in unknown
    assert "missing required parameter <path>" in missing and usage in missing
    assert "<colour>" in extra and usage in extra
    assert "<start_line>" in bad_int and "'three'" in bad_int and "integer" in bad_int
    assert usage in bad_int
    assert "<todos>" in bad_list and '<tool_call name="todo_write">' in bad_list
    assert "no tool name" in no_name
    assert "never closed" in unclosed and usage in unclosed
    # The first bad turn's tool calls are shown as written.
    assert of(executor.events, ev.ToolCall)[0].args == {"path": "src/calc.py"}
    assert of(executor.events, ev.ToolCall)[5].tool == ""

    last = results[7]
    assert not last.is_error
    assert last.content.splitlines()[1] == "     1\tdef add(a, b):"
    assert (repo / "src" / "calc.py").read_text().startswith("def add(a, b):\n    return a - b")


async def test_a_crashing_tool_becomes_an_error_result(repo):
    class Crash(Tool):
        """Test tool."""

        name = "crash"

        class Args(msgspec.Struct, forbid_unknown_fields=True):
            pass

        async def run(self, args, ctx: ToolContext) -> str:
            raise ValueError(f"boom in {ctx.workspace.root}/src/x.py")

    result, executor = await run(repo, [call("crash"), "ok"], tools=[Crash])
    (crash,) = of(executor.events, ev.ToolResult)
    assert crash.is_error
    assert crash.content == "Error: internal error in crash: ValueError: boom in src/x.py"
    assert result.stop_reason == "end_turn"


# ------------------------------------------------------------------ run endings
async def test_max_turns(repo):
    turns = [call("list_dir", path="src")] * 5
    result, executor = await run(repo, turns, max_turns=2)
    assert result.stop_reason == "max_turns"
    assert result.turns == 2
    assert executor.policy.position == 2
    assert len(of(executor.events, ev.ToolResult)) == 2
    final = executor.events[-1]
    assert isinstance(final, ev.Final)
    assert final.stop_reason == "max_turns"


async def test_replay_running_out_is_a_policy_error(repo):
    result, executor = await run(repo, [call("list_dir")])
    assert result.stop_reason == "error"
    assert "has no turn 2" in result.error
    final = executor.events[-1]
    assert isinstance(final, ev.Final)
    assert final.stop_reason == "error"
    assert "has no turn 2" in final.meta["error"]
    assert kinds(executor.events)[-2:] == ["ToolResult", "Final"]


async def test_calls_started_before_a_policy_error_are_still_reported(repo):
    async def broken_turn(messages):
        yield call("read_file", path="README.md") + "\nmore text"
        raise PolicyError("connection lost")

    executor = Executor(make_context(repo), ScriptedPolicy([broken_turn]))
    result = await asyncio.wait_for(executor.run("go"), PATIENCE_S)
    assert (result.stop_reason, result.error) == ("error", "connection lost")
    assert kinds(executor.events) == ["RunStart", "ToolCall", "Assistant", "ToolResult", "Final"]
    assert "# demo" in of(executor.events, ev.ToolResult)[0].content


async def test_an_unexpected_policy_failure_ends_the_run_with_an_error(repo):
    async def broken_turn(messages):
        yield call("read_file", path="README.md") + "\n"
        raise RuntimeError("policy bug")

    executor = Executor(make_context(repo), ScriptedPolicy([broken_turn]))
    result = await asyncio.wait_for(executor.run("go"), PATIENCE_S)
    assert result.stop_reason == "error"
    assert "RuntimeError" in result.error and "policy bug" in result.error
    final = executor.events[-1]
    assert isinstance(final, ev.Final)
    assert final.stop_reason == "error"
    assert of(executor.events, ev.ToolResult)[0].call_id == "call_1_0"


def unique_sleep(seconds: int) -> str:
    """A sleep command line no other test (or leftover process) shares."""
    return f"sleep {seconds}.{random.randrange(10**8):08d}"


def _processes_with(marker: str, *, exact: bool = False) -> list[int]:
    """Pids whose command line contains `marker` (or is exactly it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        text = cmdline.replace(b"\0", b" ").strip()
        if (text == marker.encode()) if exact else (marker.encode() in text):
            found.append(int(entry))
    return found


async def _wait_until(predicate: Callable[[], bool], timeout: float = PATIENCE_S) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


async def test_cancel_kills_a_running_command(repo):
    marker = unique_sleep(30)
    executor = Executor(
        make_context(repo), ReplayPolicy([call("run_terminal_cmd", command=marker)])
    )
    task = asyncio.create_task(executor.run("wait"))
    try:
        # Wait for the sleep itself (not just the sandbox around it) to be running.
        assert await _wait_until(lambda: bool(_processes_with(marker, exact=True))), "no command"
        executor.cancel()
        result = await asyncio.wait_for(task, 5)
    finally:
        task.cancel()
    assert result.stop_reason == "cancelled"
    final = executor.events[-1]
    assert isinstance(final, ev.Final) and final.stop_reason == "cancelled"
    assert not of(executor.events, ev.ToolResult)
    assert await _wait_until(lambda: not _processes_with(marker), 5), _processes_with(marker)


async def test_cancel_while_the_policy_is_generating(repo):
    async def endless(messages):
        yield "thinking"
        await asyncio.sleep(3600)
        yield "never"

    executor = Executor(make_context(repo), ScriptedPolicy([endless]))
    task = asyncio.create_task(executor.run("go"))
    await _wait_until(lambda: len(executor.events) >= 1)
    await asyncio.sleep(0.05)
    executor.cancel()
    result = await asyncio.wait_for(task, 5)
    assert result.stop_reason == "cancelled"
    assert kinds(executor.events) == ["RunStart", "Final"]


# ----------------------------------------------------------------- determinism
DETERMINISM_TURNS = [
    "Plan first.\n"
    + call("todo_write", todos="- [~] look around\n- [ ] fix add\n- [ ] run the tests")
    + "\n"
    + call("list_dir")
    + "\n"
    + call("read_file", path="src/calc.py")
    + "\n"
    + call("grep", pattern="return a")
    + "\n"
    + call("file_search", query="calc")
    + "\n"
    + call("codebase_search", query="addition")
    + "\n"
    + call("read_file", path=".env"),
    call(
        "edit_file",
        path="src/calc.py",
        old_string="def add(a, b):\n    return a - b",
        new_string="def add(a, b):\n    return a + b",
    )
    + "\n"
    + call("write_file", path="src/extra.py", content="import os\n\nVALUE = 1")
    + "\n"
    + call("read_lints")
    + "\n"
    + call("edit_file", path="src/calc.py", old_string="return a - b", new_string="return 0")
    + "\n"
    + call("run_terminal_cmd", command="ls; cat src/calc.py; echo err >&2; exit 3"),
    call("delete_file", path="src/extra.py")
    + "\n"
    + call("run_terminal_cmd", command="true")
    + "\n"
    + call("read_file", path="missing.py"),
    "All done.",
]


async def test_same_replay_gives_byte_identical_transcripts(tmp_path):
    transcripts = []
    for name in ("first", "second-copy"):
        root = make_repo(tmp_path / name / "repo")
        path = tmp_path / f"{name}.jsonl"
        writer = ev.TranscriptWriter(path)
        executor = Executor(make_context(root), ReplayPolicy(DETERMINISM_TURNS), on_event=writer)
        result = await asyncio.wait_for(executor.run("fix it"), PATIENCE_S * 3)
        writer.close()
        assert result.stop_reason == "end_turn"
        events = ev.read_transcript(path)
        assert events == executor.events
        transcripts.append(stripped(events))
    first, second = transcripts
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a == b
    # The copies are at different absolute paths, which only `meta` may mention.
    blob = b"".join(first)
    assert str(tmp_path).encode() not in blob


def test_transcript_encoding_round_trips():
    events = [
        ev.RunStart(prompt="p", tools=["read_file"], meta={"workspace": "/x"}),
        ev.ToolCall(call_id="call_1_0", tool="read_file", args={"path": "a", "start_line": 2}),
        ev.Assistant(turn=1, text="hi"),
        ev.ToolResult(call_id="call_1_0", tool="read_file", is_error=False, content="x"),
        ev.Final(text="done", stop_reason="end_turn"),
    ]
    for event in events:
        line = ev.encode_event(event)
        assert b"\n" not in line
        assert ev.decode_event(line) == event
        data = ev.to_dict(event)
        assert list(data) == sorted(data)
    assert msgspec.json.decode(ev.encode_event(events[3]))["event"] == "tool_result"


# ----------------------------------------------------------------- todos, rules
async def test_todo_write_emits_a_todos_event(repo):
    turns = [call("todo_write", todos="- [x] read\n- [~] fix\n- [ ] test"), "done"]
    _, executor = await run(repo, turns)
    assert kinds(executor.events) == [
        "RunStart",
        "ToolCall",
        "Assistant",
        "ToolResult",
        "Todos",
        "Assistant",
        "Final",
    ]
    (todos,) = of(executor.events, ev.Todos)
    assert [(t.content, t.status) for t in todos.todos] == [
        ("read", "completed"),
        ("fix", "in_progress"),
        ("test", "pending"),
    ]
    assert ev.decode_event(ev.encode_event(todos)) == todos


async def test_a_failed_todo_write_emits_no_todos_event(repo):
    turns = [call("todo_write", todos='[{"status": "done"}]'), "done"]
    _, executor = await run(repo, turns)
    assert of(executor.events, ev.ToolResult)[0].is_error
    assert not of(executor.events, ev.Todos)


def test_project_rules_go_into_the_system_prompt(repo):
    (repo / "AGENTS.md").write_text("Always run pytest -q before finishing.\n")
    rules = repo / ".cursor" / "rules"
    rules.mkdir(parents=True)
    (rules / "style.mdc").write_text(
        "---\ndescription: Python style\nglobs: src/**/*.py\nalwaysApply: false\n---\n"
        "Use four spaces.\n"
    )
    (rules / "always.mdc").write_text("---\nalwaysApply: true\n---\nNever touch build/.\n")
    (repo / ".clinerules").write_text("Prefer small diffs.\n")
    executor = Executor(make_context(repo), ReplayPolicy([]))
    prompt = executor.system_prompt
    assert "Always run pytest -q before finishing." in prompt
    assert "Use four spaces." in prompt
    assert "src/**/*.py" in prompt
    assert "Never touch build/." in prompt
    assert "Prefer small diffs." in prompt
    assert prompt.index("AGENTS.md") < prompt.index("Use four spaces.")
    # The tool documentation is there too, generated from the schemas.
    for tool in ALL_TOOLS:
        assert f"## {tool.name}(" in prompt
        for param in tool.parameters():
            assert f"- {param.name}" in prompt


def test_clinerules_folder_and_no_rules(tmp_path, repo):
    plain = Executor(make_context(repo), ReplayPolicy([])).system_prompt
    assert "Project rules" not in plain
    (repo / ".clinerules").mkdir()
    (repo / ".clinerules" / "01-tests.md").write_text("Write tests first.\n")
    prompt = Executor(make_context(repo), ReplayPolicy([])).system_prompt
    assert "Write tests first." in prompt
    assert prompt.startswith(plain)


# ------------------------------------------------------------------- scheduling
@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ((EVERYTHING, frozenset()), (EVERYTHING, frozenset()), False),  # two reads
        ((frozenset({"a"}), frozenset()), (frozenset(), frozenset({"a"})), True),  # read, write
        ((frozenset(), frozenset({"a"})), (frozenset({"a"}), frozenset()), True),  # write, read
        ((frozenset(), frozenset({"a"})), (frozenset(), frozenset({"a"})), True),  # write, write
        ((frozenset(), frozenset({"a"})), (frozenset(), frozenset({"b"})), False),
        ((frozenset(), frozenset({"a"})), (EVERYTHING, EVERYTHING), True),  # edit, command
        ((EVERYTHING, EVERYTHING), (frozenset({"a"}), frozenset()), True),  # command, read
        ((EVERYTHING, frozenset()), (frozenset(), frozenset({"a"})), True),  # grep, edit
        ((frozenset(), frozenset()), (EVERYTHING, EVERYTHING), False),  # todo, command
        ((EVERYTHING, EVERYTHING), (frozenset(), frozenset()), False),
    ],
)
def test_conflicts(first, second, expected):
    assert conflicts(first, second) is expected


def test_executor_shares_no_state_between_copies(tmp_path):
    # Two executors on two copies may run side by side (as in training).
    a = make_repo(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)

    async def both():
        turns = [call("write_file", path="out.txt", content="x"), "done"]
        return await asyncio.gather(run(a, turns), run(b, list(turns)))

    (ra, _), (rb, _) = asyncio.run(both())
    assert ra.stop_reason == rb.stop_reason == "end_turn"
    assert (a / "out.txt").read_text() == (b / "out.txt").read_text() == "x\n"


async def test_cancelling_the_run_task_kills_a_running_command(repo):
    # The language server may cancel the task running the executor instead of calling
    # executor.cancel(); the command must not outlive the run either way.
    marker = unique_sleep(30)
    executor = Executor(
        make_context(repo), ReplayPolicy([call("run_terminal_cmd", command=marker)])
    )
    task = asyncio.create_task(executor.run("wait"))
    # Wait for the sleep itself (not just the sandbox around it) to be running.
    assert await _wait_until(lambda: bool(_processes_with(marker, exact=True))), "no command"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    final = executor.events[-1]
    assert isinstance(final, ev.Final) and final.stop_reason == "cancelled"
    assert await _wait_until(lambda: not _processes_with(marker), 5), _processes_with(marker)
    assert not of(executor.events, ev.ToolResult)
