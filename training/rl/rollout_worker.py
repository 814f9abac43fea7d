"""The rollout worker: an environment server (ray_envs.EnvService) that also runs RL
rollouts, the agent executor imported unchanged, sampling token in, token out from an
inference actor.

    worker = RolloutWorker.remote("tasks/", "ckpt/", size=4)
    result = await worker.rl_rollout.remote("r17", "calc-1", inference_actor, settings)
    await worker.abort.remote("r17")          # the run stops; result.status == "aborted"

A result is scored only when the agent ended its run itself (stop reason end_turn);
a run cut by a limit (turns, wall clock, tokens), one whose weights became too stale,
an aborted one and one whose sampler failed are masked: kept out of the loss and out
of their group's baseline, never scored as failures.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

import ray

from model.checkpoint import open_tokenizer
from training.env.actor import EnvService
from training.env.episode import run_episode
from training.env.pool import EnvLimits
from training.rl.curriculum import HINT_LEVELS, hint_note
from training.rl.loss import TokenSequence
from training.rl.token_policy import Sample, TokenPolicy
from training.tasks.expert import ExpertPolicy

STATUSES = ("scored", "truncated", "max_tokens", "stale", "aborted", "error")


@dataclass
class RolloutSettings:
    max_turns: int = 8
    max_tokens: int = 4096  # prompt and generations, the whole rollout
    max_new_tokens: int = 256  # per turn
    timeout_s: float = 120.0  # the agent's run (tests excluded)
    max_staleness: int | None = 1  # eta; None: unbounded
    temperature: float | None = None  # None: the inference actor's


@dataclass
class RolloutResult:
    rollout_id: str
    task_id: str
    status: str  # one of STATUSES; only "scored" rollouts enter the loss
    reward: float
    stop_reason: str
    seconds: float
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0  # calls answered with an error (malformed, bad path, no match...)
    turns_with_calls: int = 0
    parallel_calls_per_turn: float = 0.0
    malformed_calls: int = 0  # calls the executor could not run as written
    reads_before_edit: int = 0  # reading and searching calls before the first edit
    edits: int = 0
    codebase_searches: int = 0
    tokens: int = 0  # generated
    sample_s: float = 0.0  # of `seconds`, waiting for the sampler; the rest ran tools
    test_s: float = 0.0  # scoring by the task's tests (after `seconds`)
    versions: tuple[int, int] | None = None  # (oldest, newest) policy version sampled
    error: str = ""
    sequence: TokenSequence = field(default_factory=TokenSequence)
    hint: int = 0  # the hint level it was rolled out with (training.rl.curriculum)

    @property
    def masked(self) -> bool:
        return self.status != "scored"


class RolloutService(EnvService):
    def __init__(
        self,
        taskset_dir: str | os.PathLike[str],
        checkpoint_dir: str | os.PathLike[str],
        *,
        size: int = 2,
        workdir: str | os.PathLike[str] | None = None,
        limits: EnvLimits | None = None,
    ) -> None:
        super().__init__(taskset_dir, size=size, workdir=workdir, limits=limits)
        self.tokenizer = open_tokenizer(checkpoint_dir)
        self.running: dict[str, asyncio.Event] = {}  # abort events by rollout id

    async def rl_rollout(
        self,
        rollout_id: str,
        task_id: str,
        sampler: Any,
        settings: RolloutSettings,
        hint: int = 0,
    ) -> RolloutResult:
        """One rollout of `task_id` from its start state, sampled from `sampler` (an
        inference actor handle, or an InferenceService in-process). `hint` (a
        training.rl.curriculum level, 0 for none) adds a reviewer's note to the
        instruction the sampler sees, and at level 3 starts the run after the expert's
        turns before its edit; the trainer's sequence never holds the note."""
        remote = hasattr(sampler.generate, "remote")

        async def sample(ids: list[int], n: int, stop: list[str]) -> Sample:
            if remote:
                return await sampler.generate.remote(ids, n, stop, settings.temperature)
            return await sampler.generate(ids, n, stop, settings.temperature)

        task = self.pool.tasks[task_id]
        note = hint_note(task.metadata.sites, hint)
        instruction = f"{task.instruction}\n\n{note}" if note else None
        policy = TokenPolicy(
            sample, self.tokenizer, max_tokens=settings.max_tokens,
            max_new_tokens=settings.max_new_tokens, max_staleness=settings.max_staleness,
            hint=(task.instruction, instruction) if instruction else None,
        )  # fmt: skip
        env_id = await self.acquire(task_id)
        abort = self.running[rollout_id] = asyncio.Event()
        try:
            env = self._env(env_id)
            runner: Any = policy
            if hint >= HINT_LEVELS["prefix"] and task.metadata.sites:
                runner = PrefixedPolicy(await asyncio.to_thread(_expert_prefix, env), policy)
            episode = await run_episode(
                env, runner, max_turns=settings.max_turns, timeout_s=settings.timeout_s,
                abort=abort, instruction=instruction,
            )  # fmt: skip
        finally:
            self.running.pop(rollout_id, None)
            await self.release(env_id)
        if episode.stop_reason == "aborted":
            status = "aborted"
        elif policy.stop is not None:
            status = policy.stop
        elif episode.truncated:
            status = "truncated"
        elif episode.stop_reason != "end_turn":
            status = "error"
        else:
            status = "scored"
        shape = episode.shape
        return RolloutResult(
            rollout_id=rollout_id,
            task_id=task_id,
            status=status,
            reward=episode.score.reward,
            stop_reason=episode.stop_reason,
            seconds=episode.seconds,
            turns=shape.turns,
            tool_calls=shape.tool_calls,
            tool_errors=shape.tool_errors,
            turns_with_calls=shape.turns_with_calls,
            parallel_calls_per_turn=shape.parallel_calls_per_turn,
            malformed_calls=shape.malformed_calls,
            reads_before_edit=shape.reads_before_edit,
            edits=shape.edits,
            codebase_searches=shape.codebase_searches,
            tokens=policy.tokens_generated,
            sample_s=round(policy.sample_s, 3),
            test_s=episode.test_seconds,
            versions=policy.versions,
            error=episode.error or "",
            sequence=policy.sequence,
            hint=hint,
        )

    async def abort(self, rollout_id: str) -> bool:
        """Stop a running rollout (its commands are killed); False if it is not running."""
        abort = self.running.get(rollout_id)
        if abort is None or abort.is_set():
            return False
        abort.set()
        return True


class PrefixedPolicy:
    """The expert's turns first (a hint: the run starts where the expert would edit),
    then the rollout's own policy, which takes them as context."""

    def __init__(self, turns: list[str], then: Any) -> None:
        self.turns, self.then = list(turns), then

    async def stream(self, messages, stop):
        if self.turns:
            yield self.turns.pop(0)
            return
        async for chunk in self.then.stream(messages, stop):
            yield chunk

    async def aclose(self) -> None:
        await self.then.aclose()


def _expert_prefix(env: Any) -> list[str]:
    """The scripted expert's turns before its first edit, for the task in `env`."""
    task = env.task
    paths = dict.fromkeys(m.path for m in task.metadata.sites)
    expert = ExpertPolicy(task, {p: env.workspace.read_bytes(p).decode() for p in paths})
    return expert.turns[: expert.edit_turn]


# The Ray actor: RolloutWorker.remote(taskset_dir, checkpoint_dir, size=...).
RolloutWorker = ray.remote(RolloutService)
