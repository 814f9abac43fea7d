"""The rollout buffer between the rollout workers and the trainer: groups of rollouts
launched on the workers, collected as they finish, and taken by the controller whole.

    buffer = RolloutBuffer(workers, samplers, TaskSampler(task_ids, seed), group_size=4)
    buffer.launch(version, settings)      # one group: group_size runs of the next task
    while buffer.ready < 2:
        buffer.collect()                  # wait for the next rollout to finish
    results = buffer.take(2)              # the first 2 groups to finish, their runs flat
    buffer.abort()                        # stop what still runs (the run is over)

A group is `group_size` runs of one task from the same start; it is ready when all its
runs are in. Runs are spread round-robin over the workers and the inference actors. A
run whose worker failed comes back as a masked "error" result, never an exception. The
buffer knows nothing of steps or staleness: when to launch and how many groups to take
is the controller's (training/rl/controller.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray

from training.rl.rollout_worker import RolloutResult, RolloutSettings
from training.sft.common import epoch_permutation


class TaskSampler:
    """Tasks in a fresh permutation per epoch, seeded by (seed, epoch); its position is
    (epoch, cursor), saved with the checkpoint."""

    def __init__(self, task_ids: list[str], seed: int) -> None:
        if not task_ids:
            raise ValueError("no training tasks")
        self.task_ids, self.seed = sorted(task_ids), seed
        self.epoch, self.cursor = 0, 0

    def next(self) -> str:
        if self.cursor == len(self.task_ids):
            self.epoch, self.cursor = self.epoch + 1, 0
        perm = epoch_permutation(len(self.task_ids), self.seed, self.epoch)
        task = self.task_ids[perm[self.cursor]]
        self.cursor += 1
        return task


@dataclass
class Group:
    gid: str  # "s{version}g{n}": launched at policy version `version`, the n-th group
    task_id: str
    results: list[RolloutResult] = field(default_factory=list)


class RolloutBuffer:
    """Groups in flight (launched, some runs still out) and ready (all runs in, in the
    order they finished). `launched` counts groups over the buffer's life and names them;
    give a new buffer the old one's count to go on where it stopped."""

    def __init__(
        self,
        workers: list[Any],  # RolloutWorker actor handles
        samplers: list[Any],  # InferenceActor handles
        tasks: TaskSampler,
        group_size: int,
        *,
        launched: int = 0,
    ) -> None:
        self.workers, self.samplers, self.tasks = workers, samplers, tasks
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

    def launch(self, version: int, settings: RolloutSettings) -> Group:
        """Start one group: `group_size` runs of the next task, at policy `version`."""
        self.launched += 1
        group = Group(f"s{version}g{self.launched}", self.tasks.next())
        self._running[group.gid] = group
        for i in range(self.group_size):
            n = self.launched * self.group_size + i
            worker = self.workers[n % len(self.workers)]
            sampler = self.samplers[n % len(self.samplers)]
            rid = f"{group.gid}.{i}"
            ref = worker.rl_rollout.remote(rid, group.task_id, sampler, settings)
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

    def take(self, n: int) -> list[RolloutResult]:
        """The results of the first `n` ready groups, group by group; the rest stay."""
        batch, self._ready = self._ready[:n], self._ready[n:]
        return [r for g in batch for r in g.results]

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
