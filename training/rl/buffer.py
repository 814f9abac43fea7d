"""The rollout buffer between the rollout workers and the trainer: groups of rollouts
launched on the workers, collected as they finish, and taken by the controller whole.

    buffer = RolloutBuffer(workers, samplers, group_size=4)
    buffer.launch(version, settings, "calc-1", hint=0)   # one group: group_size runs of a task
    while buffer.ready < 2:
        buffer.collect()                  # wait for the next rollout to finish
    groups = buffer.take(2)               # the first 2 groups to finish
    buffer.abort()                        # stop what still runs (the run is over)

A group is `group_size` runs of one task from the same start; it is ready when all its
runs are in. Runs are spread round-robin over the workers and the inference actors. A
run whose worker failed comes back as a masked "error" result, never an exception. The
buffer knows nothing of steps or staleness: when to launch and how many groups to take
is the controller's (training/rl/controller.py), and so is which task a group runs
(training/rl/curriculum.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray

from training.rl.rollout_worker import RolloutResult, RolloutSettings


@dataclass
class Group:
    gid: str  # "s{version}g{n}": launched at policy version `version`, the n-th group
    task_id: str
    hint: int = 0  # the hint level its runs have (training.rl.curriculum)
    results: list[RolloutResult] = field(default_factory=list)


class RolloutBuffer:
    """Groups in flight (launched, some runs still out) and ready (all runs in, in the
    order they finished). `launched` counts groups over the buffer's life and names them;
    give a new buffer the old one's count to go on where it stopped."""

    def __init__(
        self,
        workers: list[Any],  # RolloutWorker actor handles
        samplers: list[Any],  # InferenceActor handles
        group_size: int,
        *,
        launched: int = 0,
    ) -> None:
        self.workers, self.samplers = workers, samplers
        self.group_size = group_size
        self.launched = launched
        self._refs: dict[Any, tuple[str, str, Any]] = {}  # ObjectRef -> (gid, rid, worker)
        self._running: dict[str, Group] = {}
        self._ready: list[Group] = []

    @property
    def running(self) -> int:
        """Groups launched whose runs are not all in."""
        return len(self._running)

    @property
    def ready(self) -> int:
        """Groups whose runs are all in, not yet taken."""
        return len(self._ready)

    def launch(self, version: int, settings: RolloutSettings, task_id: str, hint: int = 0) -> Group:
        """Start one group: `group_size` runs of `task_id` at policy `version`, with a
        hint of level `hint`."""
        self.launched += 1
        group = Group(f"s{version}g{self.launched}", task_id, hint)
        self._running[group.gid] = group
        for i in range(self.group_size):
            n = self.launched * self.group_size + i
            worker = self.workers[n % len(self.workers)]
            sampler = self.samplers[n % len(self.samplers)]
            rid = f"{group.gid}.{i}"
            ref = worker.rl_rollout.remote(rid, group.task_id, sampler, settings, hint)
            self._refs[ref] = (group.gid, rid, worker)
        return group

    def collect(self) -> None:
        """Wait for the next rollout to finish; a group whose runs are all in is ready."""
        done, _ = ray.wait(list(self._refs), num_returns=1)
        for ref in done:
            gid, rid, _worker = self._refs.pop(ref)
            group = self._running[gid]
            try:
                result = ray.get(ref)
            except Exception as exc:  # a worker failed: the run is masked, not fatal
                result = RolloutResult(rid, group.task_id, "error", 0.0, "error", 0.0)
                result.error = f"{type(exc).__name__}: {exc}"
            group.results.append(result)
            if len(group.results) == self.group_size:
                self._ready.append(self._running.pop(gid))

    def take(self, n: int) -> list[Group]:
        """The first `n` ready groups; the rest stay."""
        batch, self._ready = self._ready[:n], self._ready[n:]
        return batch

    def abort(self, timeout_s: float = 120) -> None:
        """Stop every rollout still running and wait for them; forget every group (the
        count of groups launched stays)."""
        for _gid, rid, worker in self._refs.values():
            worker.abort.remote(rid)
        if self._refs:
            ray.wait(list(self._refs), num_returns=len(self._refs), timeout=timeout_s)
        self._refs.clear()
        self._running.clear()
        self._ready.clear()
