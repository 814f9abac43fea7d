"""The agent executor: the loop both the language server and the trainer run.

Each turn the policy streams the assistant's message; every `<tool_call>` starts as
soon as its closing tag arrives, while the model keeps writing (and with a policy
that calls tools natively, every function call as soon as the stream completes it:
the same checks, tools and rendered results; the results go back as tool messages). Calls in one turn run
in parallel where that is safe (see `conflicts`), and their results are reported in
call order whatever order they finish in, so a transcript is deterministic. The run
ends when a turn has no tool call, at the turn limit, on cancellation, or when the
policy fails.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from agent import events as ev
from agent.parser import RawCall, ToolCallParser, json_call
from agent.policy import FunctionCall, Message, Policy, PolicyError
from agent.render import (
    render_result,
    render_results_message,
    render_system_prompt,
    stop_sequences,
    valid_text,
)
from agent.rules import load_project_rules
from agent.tools import ALL_TOOLS, BindError, Tool, ToolContext, ToolError, bind_args
from agent.tools.base import EVERYTHING, Access
from agent.workspace import WorkspaceError

log = logging.getLogger(__name__)

# The call a tool is running for (its call_id), in the tool's task and its threads: an
# editor's workspace uses it to show a write's diff and permission request on that call.
CURRENT_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tachy_current_call", default=None
)


def conflicts(first: tuple[Access, Access], second: tuple[Access, Access]) -> bool:
    """True when `second` must wait for `first` (issued earlier in the same turn): one
    writes what the other reads or writes. EVERYTHING overlaps any non-empty set."""

    def overlap(a: Access, b: Access) -> bool:
        if a is EVERYTHING:
            return b is EVERYTHING or bool(b)
        if b is EVERYTHING:
            return bool(a)
        return not a.isdisjoint(b)

    (reads1, writes1), (reads2, writes2) = first, second
    return overlap(writes1, reads2) or overlap(writes1, writes2) or overlap(reads1, writes2)


@dataclass
class Outcome:
    call_id: str
    tool: str
    is_error: bool
    content: str
    meta: dict = field(default_factory=dict)


@dataclass
class RunResult:
    stop_reason: str
    final_text: str
    turns: int
    error: str | None = None


# How the results of calls the executor refused as malformed begin (after render's
# "Error: "): a call that did not parse, named no tool, or did not fit its tool.
MALFORMED_CALL_PROBLEMS = (
    "the tool call could not be parsed",
    "there is no tool named",
    "invalid call to",
)


def is_malformed_result(content: str, is_error: bool) -> bool:
    """Whether a tool result (its rendered content) answers a malformed call."""
    return is_error and content.removeprefix("Error: ").startswith(MALFORMED_CALL_PROBLEMS)


def check_call(
    tools: dict[str, Tool], raw: RawCall, native: bool = False
) -> tuple[Tool | None, object | None, str | None]:
    """A parsed call -> (tool, bound args, None), or the problem to report to the model
    (with the tool's valid form when the tool exists: as JSON arguments for a native
    function call)."""
    tool = tools.get(raw.name or "")
    args = None
    problem = None
    if raw.error:
        problem = f"the tool call could not be parsed: {raw.error}"
    elif tool is None:
        problem = f"there is no tool named {raw.name!r}; the tools are: {', '.join(tools)}"
    else:
        try:
            args = bind_args(tool, raw)
        except BindError as exc:
            problem = f"invalid call to {tool.name}: {exc}"
    if problem and tool is not None:
        problem += f"\nThe valid form is:\n{tool.usage(native)}"
    return tool, args, problem


async def run_call(
    tool: Tool | None, args: object | None, problem: str | None, ctx: ToolContext
) -> tuple[str, bool]:
    """Run a checked call -> (content, is_error), before rendering. The one place a tool
    runs: the executor, and the environment server's single calls, both come here."""
    if problem is not None:
        return problem, True
    try:
        return await tool.run(args, ctx), False
    except (ToolError, WorkspaceError) as exc:
        return str(exc), True
    except Exception as exc:  # a tool bug must not end the run
        log.exception("tool %s failed", tool.name)
        root = str(ctx.workspace.root)
        message = str(exc).replace(root + "/", "").replace(root, ".")
        return f"internal error in {tool.name}: {type(exc).__name__}: {message}", True


def _join_pairs(text: str) -> str:
    """Surrogate pairs written as two code points made one character; lone ones
    replaced."""
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return valid_text(joined)


@dataclass
class _Call:
    """One call of a turn, as scheduled."""

    name: str
    task: asyncio.Task[Outcome]
    access: tuple[Access, Access]  # (reads, writes), for ordering later calls
    native: FunctionCall | None = None  # a native function call, answered by a tool message


class _Turn:
    """The calls of one assistant turn: scheduled as they are parsed, collected in order."""

    def __init__(self, executor: Executor, turn: int) -> None:
        self.executor = executor
        self.turn = turn
        self.calls: list[_Call] = []

    def submit(self, raw: RawCall, native: FunctionCall | None = None) -> None:
        ex = self.executor
        # Numbered in the order calls complete, text and native alike.
        call_id = f"call_{self.turn}_{len(self.calls)}"
        tool, args, problem = check_call(ex.tools, raw, native is not None)
        access = self._access(tool, args)
        shown_args = dict(raw.params)
        if args is not None:
            typed = msgspec.to_builtins(args)
            shown_args = {key: typed[key] for key in raw.params}
        ex.emit(ev.ToolCall(call_id=call_id, tool=raw.name or "", args=shown_args))
        waits = [call.task for call in self.calls if conflicts(call.access, access)]
        name = raw.name or ""
        task = asyncio.create_task(self._run(call_id, name, tool, args, problem, waits))
        self.calls.append(_Call(name, task, access, native))

    def submit_native(self, call: FunctionCall) -> None:
        self.submit(json_call(len(self.calls), call.name, call.arguments), call)

    def messages(self, text: str, outcomes: list[Outcome]) -> list[Message]:
        """What the turn adds to the conversation: the assistant's message, then the
        results: a tool message per native call (its content exactly the rendered
        result), and the text-syntax calls' results together in one user message."""
        native = [(c.native, o) for c, o in zip(self.calls, outcomes, strict=True) if c.native]
        rest = [o for c, o in zip(self.calls, outcomes, strict=True) if not c.native]
        added = [
            Message("assistant", text, tool_calls=[c.message_form() for c, _ in native] or None)
        ]
        added += [Message("tool", o.content, tool_call_id=c.id) for c, o in native]
        if rest:
            results = [(o.call_id, o.tool, o.is_error, o.content) for o in rest]
            added.append(Message("user", render_results_message(results)))
        return added

    def _access(self, tool: Tool | None, args: object) -> tuple[Access, Access]:
        if tool is None or args is None:
            return frozenset(), frozenset()
        reads, writes = tool.access(args)
        return self._normalise(reads), self._normalise(writes)

    def _normalise(self, paths: Access) -> Access:
        """Workspace-relative paths with symlinks resolved, so that two spellings of one
        file (`./a.py`, `/workspace/a.py`, a link to it) are ordered as one."""
        if paths is EVERYTHING:
            return paths
        workspace = self.executor.ctx.workspace
        normal = set()
        for path in paths:
            try:
                normal.add(workspace.real_rel(workspace.relpath(path)))
            except WorkspaceError:
                normal.add(path)  # the call itself will report what is wrong
        return frozenset(normal)

    async def _run(self, call_id, name, tool, args, problem, waits) -> Outcome:
        if waits:
            await asyncio.wait(waits)
        CURRENT_CALL.set(call_id)  # this task's own context
        started = time.perf_counter()
        content, is_error = await run_call(tool, args, problem, self.executor.ctx)
        meta = {
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            # Wall-clock end, so a client can measure how late it heard of the result.
            "finished_at": time.time(),
        }
        return Outcome(call_id, name, is_error, render_result(content, is_error), meta)

    async def collect(self) -> list[Outcome]:
        outcomes = []
        for call in self.calls:
            outcome = await call.task
            self.executor.emit(
                ev.ToolResult(
                    call_id=outcome.call_id,
                    tool=outcome.tool,
                    is_error=outcome.is_error,
                    content=outcome.content,
                    meta=outcome.meta,
                )
            )
            if call.name == "todo_write" and not outcome.is_error:
                self.executor.emit(ev.Todos(todos=list(self.executor.ctx.todos)))
            outcomes.append(outcome)
        return outcomes

    async def abort(self) -> None:
        for call in self.calls:
            call.task.cancel()
        await asyncio.gather(*(call.task for call in self.calls), return_exceptions=True)


class Executor:
    def __init__(
        self,
        ctx: ToolContext,
        policy: Policy,
        *,
        tools: Sequence[type[Tool]] = ALL_TOOLS,
        max_turns: int = 50,
        on_event: Callable[[ev.Event], None] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.policy = policy
        self.tools: dict[str, Tool] = {tool.name: tool() for tool in tools}
        self.max_turns = max_turns
        self.on_event = on_event
        self.on_text = on_text
        self.events: list[ev.Event] = []
        # A policy that calls tools natively gets their schemas with every turn and
        # a system prompt without the text syntax.
        self.native_tools = bool(getattr(policy, "native_tools", False))
        self.tool_schemas = [tool.function_schema() for tool in tools] if self.native_tools else []
        self.system_prompt = render_system_prompt(
            tools, load_project_rules(ctx.workspace), native=self.native_tools
        )
        self.messages: list[Message] = []
        self._cancel = asyncio.Event()

    def emit(self, event: ev.Event) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def cancel(self) -> None:
        """Stop the run: generation stops and running commands are killed at once."""
        self._cancel.set()

    async def run(self, prompt: str, history: Sequence[Message] = ()) -> RunResult:
        """Run the agent on `prompt`, after the `history` of an earlier conversation
        (its messages without the system prompt: a chat's next prompt). The messages of
        this run, history included, are in `self.messages` afterwards."""
        prompt = valid_text(prompt)
        self.emit(
            ev.RunStart(
                prompt=prompt,
                tools=list(self.tools),
                meta={"workspace": str(self.ctx.workspace.root)},
            )
        )
        messages = [Message("system", self.system_prompt), *history, Message("user", prompt)]
        self.messages = messages
        result = RunResult("max_turns", "", 0)
        tasks: list[asyncio.Task] = []
        try:
            for turn in range(1, self.max_turns + 1):
                result.turns = turn
                body = asyncio.create_task(self._turn(turn, messages))
                cancel = asyncio.create_task(self._cancel.wait())
                tasks = [body, cancel]
                await asyncio.wait({body, cancel}, return_when=asyncio.FIRST_COMPLETED)
                cancel.cancel()
                if not body.done():
                    body.cancel()
                    await asyncio.gather(body, return_exceptions=True)
                    result = RunResult("cancelled", "", turn)
                    break
                try:
                    text, added = body.result()
                except PolicyError as exc:
                    result = RunResult("error", "", turn, error=str(exc))
                    break
                if not added:
                    messages.append(Message("assistant", text))
                    result = RunResult("end_turn", text, turn)
                    break
                messages += added
            return result
        except asyncio.CancelledError:
            result = RunResult("cancelled", "", result.turns)
            raise
        except Exception as exc:
            # A bug in the executor itself: the transcript still ends with a final
            # event that says the run failed.
            result = RunResult("error", "", result.turns, error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            # When the task running us is cancelled (rather than `cancel()` called),
            # the turn must still be stopped: its commands are killed, not orphaned.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.ctx.sandbox.close()
            meta = {"error": result.error} if result.error else {}
            self.emit(ev.Final(text=result.final_text, stop_reason=result.stop_reason, meta=meta))

    async def _stream(self, messages: list[Message]) -> AsyncIterator[str | FunctionCall]:
        """The policy's chunks; a policy that fails in an unexpected way (a bug, an
        exception its client library did not wrap) fails like any PolicyError.

        Chunks are made valid text: a surrogate pair a streaming server split between
        two chunks is joined again, and a lone surrogate replaced (agent.render)."""
        pending = ""
        if self.native_tools:
            chunks = self.policy.stream(messages, stop_sequences(), self.tool_schemas)  # type: ignore[call-arg]
        else:
            chunks = self.policy.stream(messages, stop_sequences())
        try:
            async for chunk in chunks:
                if isinstance(chunk, FunctionCall):
                    yield chunk
                    continue
                chunk, pending = pending + chunk, ""
                if chunk and "\ud800" <= chunk[-1] <= "\udbff":
                    chunk, pending = chunk[:-1], chunk[-1]  # its pair may come next
                if chunk:
                    yield _join_pairs(chunk)
            if pending:
                yield valid_text(pending)
        except PolicyError:
            raise
        except Exception as exc:
            log.exception("the policy failed")
            raise PolicyError(f"the policy failed: {type(exc).__name__}: {exc}") from exc

    async def _turn(self, turn: int, messages: list[Message]) -> tuple[str, list[Message]]:
        """(the assistant's text, the messages the turn adds: none when it called no
        tool, which ends the run)."""
        calls = _Turn(self, turn)
        parser = ToolCallParser()
        parts: list[str] = []
        try:
            try:
                async for chunk in self._stream(messages):
                    if isinstance(chunk, FunctionCall):
                        calls.submit_native(chunk)
                        continue
                    parts.append(chunk)
                    if self.on_text is not None:
                        self.on_text(chunk)
                    for raw in parser.feed(chunk):
                        calls.submit(raw)
            except PolicyError:
                # Calls already started are real actions: let them finish and report
                # them before the run ends with the policy's error.
                text = "".join(parts)
                if text:
                    self.emit(ev.Assistant(turn=turn, text=text))
                await calls.collect()
                raise
            for raw in parser.finish():
                calls.submit(raw)
            text = "".join(parts)
            self.emit(ev.Assistant(turn=turn, text=text))
            outcomes = await calls.collect()
            return text, calls.messages(text, outcomes) if outcomes else []
        except asyncio.CancelledError:
            await calls.abort()
            raise
