"""One rollout: the agent executor, imported unchanged, working a task in an Env.

    episode = await run_episode(env, policy, max_turns=30)
    episode.score.reward, episode.shape.parallel_calls_per_turn, episode.events

The executor gets the Env's ToolContext (its Workspace and terminal Sandbox), exactly
as the language server builds one for an editor; only the workspace and the policy
differ. When the run ends, the task's test files are put back and its test command
scores the result (training.env.reward). A run cut by a limit (turns or wall clock) is
marked `truncated`: the trainer masks it rather than scoring it as a failure. Setting
the `abort` event stops a run early (the RL controller no longer needs it): its
commands are killed, its tests are not run, and it ends `aborted` (also truncated).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from agent import events as ev
from agent.executor import Executor
from agent.lints import LintError
from agent.policy import Message, Policy
from agent.render import render_results_message
from training.env.reward import RunShape, Score, lints_introduced, run_shape, score_tests

if TYPE_CHECKING:
    from training.env.pool import Env

TRUNCATING = frozenset({"max_turns", "timeout", "aborted"})


class Episode(msgspec.Struct, kw_only=True):
    task_id: str
    # the executor's (end_turn, max_turns, cancelled, error), timeout or aborted
    stop_reason: str
    truncated: bool  # cut by a limit: masked by the trainer, not scored as a failure
    score: Score
    shape: RunShape
    final_text: str
    changed_files: list[str]
    messages: list[Message]  # the conversation exactly as the policy saw it
    events: list[ev.Event]
    seconds: float
    test_seconds: float
    error: str | None = None


def conversation(system_prompt: str, events: list[ev.Event]) -> list[Message]:
    """The messages a policy saw over a run, rebuilt from its transcript: the system
    prompt, the user's prompt, then each assistant turn followed by its tool results
    (rendered exactly as the executor renders them)."""
    messages = [Message("system", system_prompt)]
    results: list[tuple[str, str, bool, str]] = []

    def flush() -> None:
        if results:
            messages.append(Message("user", render_results_message(results)))
            results.clear()

    for event in events:
        if isinstance(event, ev.RunStart):
            messages.append(Message("user", event.prompt))
        elif isinstance(event, ev.Assistant):
            flush()
            messages.append(Message("assistant", event.text))
        elif isinstance(event, ev.ToolResult):
            results.append((event.call_id, event.tool, event.is_error, event.content))
    flush()
    return messages


def _python_files(env: Env) -> list[str]:
    return [rel for rel, is_dir in env.workspace.walk() if not is_dir and rel.endswith(".py")]


async def run_episode(
    env: Env,
    policy: Policy,
    *,
    max_turns: int = 30,
    timeout_s: float | None = None,
    on_event: Callable[[ev.Event], None] | None = None,
    abort: asyncio.Event | None = None,
    instruction: str | None = None,
) -> Episode:
    """Run the task's instruction (or `instruction`: the task's with an RL hint) through
    the executor in `env`, then score it.

    `timeout_s` (default: the env's rollout limit) bounds the agent's run; its
    commands are killed when it expires. The tests' own limit is the task's
    timeout_s. The caller resets or releases the env afterwards.
    """
    task = env.task
    limit = timeout_s if timeout_s is not None else env.limits.rollout_timeout_s
    started = time.monotonic()
    linters = env.ctx.linters
    try:
        lints_before = await asyncio.to_thread(linters.lint, _python_files(env))
    except LintError:
        lints_before = None
    executor = Executor(env.ctx, policy, max_turns=max_turns, on_event=on_event)
    run = asyncio.ensure_future(executor.run(instruction or task.instruction))
    aborted = asyncio.ensure_future((abort or asyncio.Event()).wait())
    try:
        done, _ = await asyncio.wait({run, aborted}, timeout=limit, return_when="FIRST_COMPLETED")
    except asyncio.CancelledError:
        # The caller is going away (Ctrl-C in tachy eval): stop the run too, so no
        # orphaned turn keeps the model generating while the caller shuts down.
        executor.cancel()
        run.cancel()
        raise
    finally:
        aborted.cancel()
    if run in done:
        result = run.result()
        stop_reason, final_text, error = result.stop_reason, result.final_text, result.error
    else:
        executor.cancel()  # generation stops, commands are killed
        await asyncio.gather(run, return_exceptions=True)
        if aborted in done:
            return Episode(
                task_id=task.id, stop_reason="aborted", truncated=True,
                score=Score(reward=0.0, fixed=[], still_failing=[], broken=[]),
                shape=run_shape(executor.events), final_text="",
                changed_files=env.workspace.changed_files(),
                messages=conversation(executor.system_prompt, executor.events),
                events=list(executor.events), seconds=round(time.monotonic() - started, 3),
                test_seconds=0.0, error="aborted by the caller",
            )  # fmt: skip
        stop_reason, final_text, error = "timeout", "", f"the rollout exceeded {limit:g} s"
    changed = env.workspace.changed_files()
    introduced = 0
    if lints_before is not None and changed:
        try:
            lints_after = await asyncio.to_thread(
                linters.lint, [p for p in changed if p.endswith(".py")]
            )
            introduced = lints_introduced(
                [d for d in lints_before if d.path in changed], lints_after
            )
        except LintError:
            pass
    report = await env.run_tests(restore_tests=True)
    score = score_tests(task, report)
    score.lints_introduced = introduced
    tokens = getattr(policy, "tokens_generated", None)
    return Episode(
        task_id=task.id,
        stop_reason=stop_reason,
        truncated=stop_reason in TRUNCATING,
        score=score,
        shape=run_shape(executor.events, tokens if isinstance(tokens, int) else None),
        final_text=final_text,
        changed_files=changed,
        messages=conversation(executor.system_prompt, executor.events),
        events=list(executor.events),
        seconds=round(time.monotonic() - started, 3),
        test_seconds=round(report.duration_s, 3),
        error=error,
    )
