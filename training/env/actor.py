"""The environment server as a Ray actor: one EnvPool per actor, used by env id.

    actor = EnvActor.remote("tasks/", size=4, limits=EnvLimits(memory_bytes=2 << 30))
    env_id = ray.get(actor.acquire.remote("calc-1"))
    ray.get(actor.call_tool.remote(env_id, "read_file", {"path": "calc/ops.py"}))
    report = ray.get(actor.run_tests.remote(env_id))      # a training.env.testrun.TestReport
    ray.get(actor.release.remote(env_id))
    episode = ray.get(actor.rollout.remote("calc-1", "openai:http://h:8000/v1#m", 30))

Every method is async, so the actor runs them on one event loop: sandboxed commands
started there (background jobs included) belong to a thread that lives as long as the
actor, and bubblewrap's --die-with-parent fires only when the actor itself dies (its
sandboxes are then swept by the next pool on the machine). `EnvService` is the same
class without Ray.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import ray

from agent.executor import check_call, run_call
from agent.parser import RawCall
from agent.render import render_result
from agent.tools import ALL_TOOLS
from training.env.pool import Env, EnvError, EnvPool
from training.env.testrun import TestReport

_TOOLS = {tool.name: tool() for tool in ALL_TOOLS}


class EnvService:
    """An EnvPool behind string env ids (what crosses a process boundary)."""

    def __init__(self, taskset_dir: str | os.PathLike[str], **pool_options: Any) -> None:
        """`pool_options` are EnvPool's (size, workdir, strategy, limits)."""
        self.pool = EnvPool(taskset_dir, **pool_options)
        self.envs: dict[str, Env] = {}
        self._ids = itertools.count(1)

    def _env(self, env_id: str) -> Env:
        try:
            return self.envs[env_id]
        except KeyError:
            raise EnvError(f"no env {env_id!r} is acquired from this actor") from None

    async def info(self) -> dict[str, Any]:
        pool = self.pool
        return {
            "pid": os.getpid(),
            "strategy": pool.strategy.name,
            "strategy_reason": pool.strategy_reason,
            "workdir": str(pool.workdir),
            "size": pool.size,
            "tasks": len(pool.tasks),
            "acquired": sorted(self.envs),
            "sandboxes": len(pool.envs),
        }

    async def task_ids(self) -> list[str]:
        return list(self.pool.tasks)

    async def acquire(self, task_id: str) -> str:
        """A sandbox at the task's start state; returns its env id."""
        env = self.pool.acquire(task_id)
        env_id = f"{env.number}.{next(self._ids)}"
        self.envs[env_id] = env
        return env_id

    async def root(self, env_id: str) -> str:
        """The sandbox's workspace directory on the actor's machine."""
        return str(self._env(env_id).root)

    async def call_tool(self, env_id: str, name: str, params: dict[str, str]) -> dict[str, Any]:
        """One tool call exactly as the executor makes it (agent.executor's check_call
        and run_call, then render_result): {"is_error": bool, "content": the text the
        model sees}."""
        env = self._env(env_id)
        raw = RawCall(index=0, name=name, params={k: str(v) for k, v in params.items()})
        tool, args, problem = check_call(_TOOLS, raw)
        content, is_error = await run_call(tool, args, problem, env.ctx)
        return {"is_error": is_error, "content": render_result(content, is_error)}

    async def run_tests(self, env_id: str, restore_tests: bool = True) -> TestReport:
        return await self._env(env_id).run_tests(restore_tests=restore_tests)

    async def reset(self, env_id: str) -> None:
        env = self._env(env_id)
        await env.sandbox.close()  # background jobs, on the loop that started them
        env.reset()

    async def release(self, env_id: str) -> None:
        env = self.envs.pop(env_id, None)
        if env is None:
            raise EnvError(f"no env {env_id!r} is acquired from this actor")
        await env.sandbox.close()
        self.pool.release(env)

    async def rollout(self, task_id: str, policy_spec: str, max_turns: int = 30):
        """One episode of `task_id` driven by the policy `policy_spec` (see
        agent.policy.load_policy): acquire, run and score, release. Returns
        training.env.episode.Episode."""
        from agent.policy import load_policy, register_policy
        from model.policy import local_policy

        register_policy("local", local_policy)  # as tachy's entry point does
        from training.env.episode import run_episode

        policy = load_policy(policy_spec)
        env_id = await self.acquire(task_id)
        try:
            return await run_episode(self._env(env_id), policy, max_turns=max_turns)
        finally:
            try:
                await policy.aclose()
            finally:
                await self.release(env_id)

    async def close(self) -> None:
        for env in self.envs.values():
            await env.sandbox.close()
        self.envs.clear()
        self.pool.close()


# The Ray actor: EnvActor.remote(taskset_dir, size=..., ...), or .options(...) first.
EnvActor = ray.remote(EnvService)
