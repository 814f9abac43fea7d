"""Expert demonstrations: the scripted expert run on every task of a set.

Each task is worked end to end in a sandbox from the pool, through the executor and
the real tools, and scored by its tests. A task the expert does not solve is reported
as broken; the solved ones are written as demonstrations for the supervised warm-up,
one JSON object per line: the task id, the reward, and the conversation exactly as
the policy saw it (`messages`: role and content), beside the transcript events.

    summary = asyncio.run(write_demos("tasks/", "demos.jsonl"))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import msgspec

from agent.policy import Message
from training.env.episode import Episode, run_episode
from training.env.pool import EnvPool
from training.tasks.expert import ExpertPolicy
from training.tasks.taskset import Task, load_tasks


class Demo(msgspec.Struct, kw_only=True):
    task_id: str
    reward: float
    messages: list[Message]
    events: list[dict]


class DemoSummary(msgspec.Struct, kw_only=True):
    tasks: int
    solved: int
    broken: dict[str, str]  # task id -> why the expert's run did not solve it
    seconds: float


async def expert_episode(pool: EnvPool, task: Task) -> tuple[Episode, ExpertPolicy]:
    """The expert's run of one task in a sandbox from `pool` (released afterwards), and
    the expert (its `fixes`: each file's buggy and fixed text)."""
    env = await asyncio.to_thread(pool.acquire, task)
    try:
        paths = dict.fromkeys(m.path for m in task.metadata.sites)
        sources = {path: env.workspace.read_bytes(path).decode() for path in paths}
        policy = ExpertPolicy(task, sources)
        return await run_episode(env, policy, max_turns=len(policy.turns)), policy
    finally:
        await asyncio.to_thread(pool.release, env)


def why_unsolved(episode: Episode) -> str:
    s = episode.score
    if s.tests_timed_out:
        return "the tests timed out"
    parts = []
    if s.still_failing:
        parts.append(f"still failing: {', '.join(s.still_failing[:3])}")
    if s.broken:
        parts.append(f"broken: {', '.join(s.broken[:3])}")
    return "; ".join(parts) or f"the run ended with {episode.stop_reason}"


async def write_demos(
    taskset: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    concurrency: int = 2,
    on_episode: Callable[[Task, Episode], None] | None = None,
) -> DemoSummary:
    """Run the expert on the set's tasks (the first `limit`), `concurrency` at a time;
    write the solved ones to `out` (JSONL) and say which were not solved, and why."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks = load_tasks(taskset)[:limit]
    broken: dict[str, str] = {}
    solved = 0
    gate = asyncio.Semaphore(concurrency)
    encoder = msgspec.json.Encoder()
    with EnvPool(taskset, size=concurrency) as pool, open(out, "wb") as sink:

        async def one(task: Task) -> None:
            nonlocal solved
            async with gate:
                episode, _ = await expert_episode(pool, task)
            if on_episode is not None:
                on_episode(task, episode)
            if episode.score.reward == 1.0:
                solved += 1
                demo = Demo(
                    task_id=task.id,
                    reward=episode.score.reward,
                    messages=episode.messages,
                    events=msgspec.to_builtins(episode.events),
                )
                sink.write(encoder.encode(demo) + b"\n")
            else:
                broken[task.id] = why_unsolved(episode)

        await asyncio.gather(*(one(t) for t in tasks))
    return DemoSummary(
        tasks=len(tasks), solved=solved, broken=broken, seconds=round(loop.time() - started, 2)
    )
