"""The rollout buffer (training/rl/buffer.py) on stand-in actors: groups named and spread
round-robin, ready only when all their runs are in, taken in the order they finished, a
failed run masked, and abort stopping what still runs."""

from __future__ import annotations

import pytest

from training.rl import buffer as buffer_module
from training.rl.buffer import RolloutBuffer
from training.rl.rollout_worker import RolloutResult, RolloutSettings


class Ref:
    def __init__(self, rid: str, task_id: str, fail: bool) -> None:
        self.rid, self.task_id, self.fail = rid, task_id, fail


class FakeRay:
    """ray.wait finishes the refs in the order `finish` names their rollouts."""

    def __init__(self) -> None:
        self.finish: list[str] = []

    def wait(self, refs, num_returns=1, timeout=None):
        order = {rid: i for i, rid in enumerate(self.finish)}
        refs = sorted(refs, key=lambda r: order.get(r.rid, len(order)))
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        if ref.fail:
            raise RuntimeError("worker died")
        return RolloutResult(ref.rid, ref.task_id, "scored", 1.0, "final", 0.5)


class Remote:
    def __init__(self, fn) -> None:
        self.remote = fn


class Worker:
    def __init__(self, name: str, failing: set[str] = frozenset()) -> None:
        self.name, self.calls, self.aborted = name, [], []
        self.rl_rollout = Remote(self._rollout)
        self.abort = Remote(self.aborted.append)
        self.failing = failing

    def _rollout(self, rid, task_id, sampler, settings, hint):
        self.calls.append((rid, task_id, sampler) + ((hint,) if hint else ()))
        return Ref(rid, task_id, rid in self.failing)


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(buffer_module, "ray", fake)
    return fake


def test_groups_are_named_spread_and_ready_when_all_runs_are_in(fake_ray):
    workers = [Worker("w0"), Worker("w1")]
    buf = RolloutBuffer(workers, ["i0", "i1", "i2"], 2)
    first = buf.launch(3, RolloutSettings(), "a")
    second = buf.launch(3, RolloutSettings(), "b")
    assert (first.gid, second.gid) == ("s3g1", "s3g2")
    # run n = launched * group_size + i goes to worker n % 2 and sampler n % 3
    assert workers[0].calls == [("s3g1.0", first.task_id, "i2"), ("s3g2.0", second.task_id, "i1")]
    assert workers[1].calls == [("s3g1.1", first.task_id, "i0"), ("s3g2.1", second.task_id, "i2")]
    assert (buf.running, buf.ready) == (2, 0)

    fake_ray.finish = ["s3g2.0", "s3g1.0", "s3g2.1", "s3g1.1"]
    buf.collect()
    buf.collect()
    assert (buf.running, buf.ready) == (2, 0)  # one run of each group is in
    buf.collect()
    assert (buf.running, buf.ready) == (1, 1)
    buf.collect()
    assert (buf.running, buf.ready) == (0, 2)
    [taken] = buf.take(1)
    assert [r.rollout_id for r in taken.results] == ["s3g2.0", "s3g2.1"]  # the first to finish
    assert buf.ready == 1
    [rest] = buf.take(5)
    assert [r.rollout_id for r in rest.results] == ["s3g1.0", "s3g1.1"]
    assert buf.take(1) == []


def test_a_failed_run_is_masked_and_abort_stops_what_runs(fake_ray):
    worker = Worker("w", failing={"s0g1.1"})
    buf = RolloutBuffer([worker], ["i"], 2, launched=0)
    buf.launch(0, RolloutSettings(), "a", hint=2)
    assert worker.calls[0] == ("s0g1.0", "a", "i", 2)  # the hint goes to the worker
    fake_ray.finish = ["s0g1.0", "s0g1.1"]
    buf.collect()
    buf.collect()
    [group] = buf.take(1)
    assert group.hint == 2
    results = group.results
    assert [(r.status, r.masked) for r in results] == [("scored", False), ("error", True)]
    assert results[1].error == "RuntimeError: worker died"

    buf.launch(1, RolloutSettings(), "a")
    buf.launch(1, RolloutSettings(), "a")
    fake_ray.finish = ["s1g2.0", "s1g2.1"]
    buf.collect()
    buf.collect()
    buf.abort()
    assert sorted(worker.aborted) == ["s1g3.0", "s1g3.1"]  # only the runs still out
    assert (buf.running, buf.ready) == (0, 0)
    assert buf.launched == 3  # the count goes on: the next group is g4
    assert buf.launch(1, RolloutSettings(), "a").gid == "s1g4"
