"""Teacher-forced turns: how well a policy takes each step of the expert's solution.

A free run (training/eval/run.py) says only whether the whole task was solved; when a
small model solves nothing, that says nothing about *which* step it cannot take. Here
the scripted expert solves each task first (training/tasks/expert.py: reproduce and
look up, read, edit, check, answer), and at every one of its assistant turns the
policy is asked for the next turn given the expert's conversation up to there, exactly
as the executor would ask it. Each answer is scored against the expert's turn:

- `well_formed`: every call parses and fits its tool, and it makes calls where the
  expert made calls (none where the expert answered in prose);
- `same_tools`: the same tool names (a multiset);
- `exact`: the same calls, parameter values compared with surrounding blank space
  stripped (order of calls ignored);
- `fixes` (the expert's edit turn only): applying the policy's `edit_file` calls to
  the buggy files gives the fixed files, whatever context its `old_string` carried.

    report = asyncio.run(probe_turns("runs/tasks-heldout", "local:runs/sft", workers=8))

It costs one generation per expert turn (five per task), no tool runs of the policy's
and no test runs, so checkpoints can be compared in minutes where a free evaluation
takes an hour; it measures imitation of one expert, so a policy that solves a task
its own way scores low here. Use `tachy eval` for the solve rate.

With `attempts` K > 1 (sampling, temperature above 0) each turn is asked K times, and
the report adds the share of tasks where at least one of the K edits fixes: whether a
group of K rollouts could ever hold a success for RL to learn from, when the steps
before the edit go right. `turns` picks which of the expert's turns are asked ("edit"
for its edit turn only).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import msgspec

from agent.executor import check_call
from agent.parser import RawCall, parse_all
from agent.policy import CONTEXT_FULL, Message, PolicyError, load_policy
from agent.render import stop_sequences
from agent.tools import ALL_TOOLS
from training.env.pool import EnvPool
from training.eval.run import check_runnable, select_tasks
from training.eval.stats import bootstrap_ci
from training.tasks.demos import expert_episode
from training.tasks.taskset import Task, TaskError, load_tasks

_TOOLS = {tool.name: tool() for tool in ALL_TOOLS}
SCORES = ("well_formed", "same_tools", "exact")


class TurnScore(msgspec.Struct, kw_only=True):
    task_id: str
    turn: int  # the expert's assistant turn, 0-based
    expert_tools: list[str]
    tools: list[str]  # the policy's calls' tool names, as written
    well_formed: bool
    same_tools: bool
    exact: bool
    fixes: bool | None = None  # on the expert's edit turn only
    text: str = ""  # what the policy wrote
    attempt: int = 0  # which of the turn's samples (--attempts)


def _calls(text: str) -> list[RawCall]:
    return parse_all(text)


def _key(call: RawCall) -> tuple:
    # str(): a JSON-form call's values may be numbers or lists
    return (call.name, tuple(sorted((k, str(v).strip()) for k, v in call.params.items())))


def apply_edits(source: str, path: str, calls: list[RawCall]) -> str | None:
    """`source` (the file at `path`) after the calls' edit_file edits of that path, as
    the tool would make them (a unique `old_string`, or every one with replace_all);
    None when one of them would not apply."""
    for call in calls:
        if call.name != "edit_file" or str(call.params.get("path", "")).strip() != path:
            continue
        old, new = call.params.get("old_string"), call.params.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str) or not old or old == new:
            return None
        count = source.count(old)
        replace_all = str(call.params.get("replace_all", "")).strip().lower() == "true"
        if count == 0 or (count > 1 and not replace_all):
            return None
        source = source.replace(old, new)
    return source


def score_turn(
    task_id: str, turn: int, expert: str, text: str, fix: dict[str, tuple[str, str]] | None
) -> TurnScore:
    """The policy's `text` against the expert's turn `expert`; `fix` = {path: (buggy
    source, fixed source)} for every file the fix changes, on the expert's edit turn."""
    want, got = _calls(expert), _calls(text)
    problems = [check_call(_TOOLS, call)[2] for call in got]
    well_formed = all(p is None for p in problems) and bool(got) == bool(want)
    fixes = None
    if fix is not None:
        fixes = well_formed and all(
            apply_edits(buggy, path, got) == fixed for path, (buggy, fixed) in fix.items()
        )
    return TurnScore(
        task_id=task_id, turn=turn,
        expert_tools=sorted(c.name or "" for c in want), tools=[c.name or "" for c in got],
        well_formed=well_formed,
        same_tools=Counter(c.name for c in want) == Counter(c.name for c in got),
        exact=well_formed and Counter(map(_key, want)) == Counter(map(_key, got)),
        fixes=fixes, text=text,
    )  # fmt: skip


async def _ask(policy, messages: list[Message]) -> str:
    """The policy's next turn; "" when the conversation no longer fits its context (the
    turn is then scored as a miss, as a free run would fail there)."""
    try:
        return "".join([chunk async for chunk in policy.stream(messages, stop_sequences())])
    except PolicyError as exc:
        if str(exc).startswith(CONTEXT_FULL):
            return ""
        raise TaskError(f"the policy failed: {exc}") from None


async def probe_turns(
    taskset: str | Path,
    policy_spec: str,
    *,
    workers: int = 1,
    limit: int | None = None,
    per_family: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int = 0,
    attempts: int = 1,
    turns: str | None = None,
    on_task: Callable[[str, list[TurnScore], int, int], None] | None = None,
) -> list[TurnScore]:
    """Score `policy_spec` at the assistant turns of the expert's run of each task
    (the first `per_family` of each family, then the first `limit`; `turns`: all, "edit", or indices like "0,2"), `attempts`
    samples each, `workers` generations at a time. `on_task(task_id, scores, done,
    total)` hears of each task as its turns are scored."""
    wanted = parse_turns(turns)
    taskset = Path(taskset)
    tasks = select_tasks(load_tasks(taskset), per_family, limit)
    if not tasks:
        raise TaskError(f"{taskset} holds no task")
    if any(not t.metadata.sites for t in tasks):
        raise TaskError("teacher-forced turns need tasks with fix sites (the expert's fix)")
    check_runnable(taskset, tasks)
    try:
        policy = await asyncio.to_thread(
            load_policy, policy_spec, max_tokens=max_tokens, runs=workers
        )
    except PolicyError as exc:
        raise TaskError(f"the policy cannot be used: {exc}") from None

    def for_turn(sampling: dict):
        """A session on the in-process model; other kinds are made anew for each turn
        (so a replay answers with its first turn every time)."""
        if hasattr(policy, "session"):
            return policy.session(**sampling)
        made = load_policy(policy_spec, max_tokens=max_tokens)
        if "temperature" in sampling and hasattr(made, "temperature"):
            made.temperature = sampling["temperature"]
        return made

    gate = asyncio.Semaphore(workers)
    scores: list[TurnScore] = []
    done = 0
    try:
        with EnvPool(taskset, size=min(workers, 2)) as pool:

            async def one(task: Task) -> None:
                nonlocal done
                episode, expert = await expert_episode(pool, task)
                if episode.score.reward != 1.0:
                    raise TaskError(f"task {task.id!r}: the expert does not solve it")
                fix = expert.fixes
                at_turn = [i for i, msg in enumerate(episode.messages) if msg.role == "assistant"]

                def asked(k: int) -> bool:
                    if wanted is None:
                        return True
                    if wanted == "edit":
                        return _is_edit(episode.messages[at_turn[k]].content)
                    return k in wanted

                async def turn(k: int, at: int, attempt: int) -> TurnScore:
                    expert = episode.messages[at].content
                    key = f"{seed}/{task.id}/{k}" + (f"/{attempt}" if attempt else "")
                    sampling = {"seed": zlib.crc32(key.encode())}
                    if temperature is not None:
                        sampling["temperature"] = temperature
                    async with gate:
                        session = await asyncio.to_thread(for_turn, sampling)
                        try:
                            text = await _ask(session, episode.messages[:at])
                        finally:
                            await session.aclose()
                    score = score_turn(task.id, k, expert, text, fix if _is_edit(expert) else None)
                    score.attempt = attempt
                    return score

                mine = await asyncio.gather(
                    *(
                        turn(k, at, a)
                        for k, at in enumerate(at_turn)
                        if asked(k)
                        for a in range(attempts)
                    )
                )
                scores.extend(mine)
                done += 1
                if on_task is not None:
                    on_task(task.id, mine, done, len(tasks))

            await asyncio.gather(*(one(t) for t in tasks))
    finally:
        await policy.aclose()
    return sorted(scores, key=lambda s: (s.task_id, s.turn, s.attempt))


def parse_turns(turns: str | None) -> str | set[int] | None:
    """--turns: None (every turn), "edit", or comma-separated turn indices."""
    if turns is None or turns == "edit":
        return turns
    try:
        picked = {int(t) for t in turns.split(",")}
    except ValueError:
        picked = set()
    if not picked or min(picked) < 0:
        raise ValueError(f"turns must be 'edit' or indices like 0,2, not {turns!r}")
    return picked


def _is_edit(expert: str) -> bool:
    return any(c.name == "edit_file" for c in _calls(expert))


def summarize_turns(scores: list[TurnScore], *, seed: int = 0) -> dict:
    """Per expert turn and over all turns: the share of well-formed, same-tool and exact
    answers (95 % bootstrap intervals over tasks), the share of edit turns that fix, and
    the share of tasks where any of the edit turn's samples fixes (`fixes_any`)."""

    def rates(rows: list[TurnScore], name: str) -> dict:
        by_task: dict[str, list[float]] = {}
        for r in rows:
            value = getattr(r, name)
            if value is not None:
                by_task.setdefault(r.task_id, []).append(float(value))
        per_task = [sum(v) / len(v) for v in by_task.values()]
        if not per_task:
            return {"value": None, "n": 0}
        value = sum(per_task) / len(per_task)
        return {"value": round(value, 4), "ci95": bootstrap_ci(per_task, seed=seed), "n": len(rows)}

    turns = sorted({s.turn for s in scores})
    report: dict = {"tasks": len({s.task_id for s in scores}), "turns": len(scores)}
    report["all"] = {name: rates(scores, name) for name in SCORES}
    report["fixes"] = rates(scores, "fixes")
    report["attempts"] = 1 + max((s.attempt for s in scores), default=0)
    any_fix: dict[str, bool] = {}
    for s in scores:
        if s.fixes is not None:
            any_fix[s.task_id] = any_fix.get(s.task_id, False) or s.fixes
    values = [float(v) for v in any_fix.values()]
    report["fixes_any"] = (
        {"value": round(sum(values) / len(values), 4), "ci95": bootstrap_ci(values, seed=seed),
         "n": len(values)}
        if values else {"value": None, "n": 0}
    )  # fmt: skip
    report["per_turn"] = {
        str(t): {
            "expert_tools": Counter(
                "+".join(s.expert_tools) or "(answer)" for s in scores if s.turn == t
            ).most_common(1)[0][0],
            **{name: rates([s for s in scores if s.turn == t], name) for name in SCORES},
        }
        for t in turns
    }
    return report
