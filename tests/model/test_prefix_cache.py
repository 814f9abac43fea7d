"""The engine's prefix cache: sessions continued across turns, a shared system prompt,
an RL group's common prefix, eviction, per-prompt settings (tiny random model).

Every generation is compared with the same prompt run on an engine whose cache is
emptied first: the cache must only save work, never change a token."""

from __future__ import annotations

import threading

import pytest
import torch

from model.batcher import Batcher
from model.generate import Engine, Job, SamplingParams, common_prefix
from model.tokenizer import train_bpe
from tests.model.test_generate import CORPUS, make_model

pytestmark = pytest.mark.usefixtures("torch_path")

GREEDY = SamplingParams(max_new_tokens=12)


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(CORPUS, vocab_size=400)


@pytest.fixture(scope="module")
def model(tokenizer):
    return make_model(tokenizer.vocab_size)


def fresh(model, tokenizer, prompt, params=GREEDY):
    """The reference: the prompt prefilled from nothing."""
    engine = Engine(model, tokenizer, max_batch=1, max_seq=256)
    engine.stop_ids = frozenset()
    return engine.generate([prompt], params)[0]


def same(a, b) -> None:
    assert a.token_ids == b.token_ids
    torch.testing.assert_close(
        torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
    )
    assert torch.equal(a.experts, b.experts)


def ids(n: int, seed: int) -> list[int]:
    return torch.randint(3, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


SYSTEM = ids(60, 1)


def test_common_prefix() -> None:
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2, 3], [1, 2, 3]) == 3
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([5], [1, 2]) == 0
    a = list(range(1000))
    for k in (0, 1, 499, 998):
        assert common_prefix(a, [*a[:k], -1]) == k


def test_a_session_continues_in_place(model, tokenizer) -> None:
    engine = Engine(model, tokenizer, max_batch=1, max_seq=256)
    engine.stop_ids = frozenset()
    prompt = SYSTEM + ids(10, 2)
    first = engine.generate([prompt], GREEDY)[0]
    assert first.cached_tokens == 0
    same(first, fresh(model, tokenizer, prompt))
    # the next turn: the answer (as generated) and a tool result
    turn2 = prompt + first.token_ids + ids(15, 3)
    second = engine.generate([turn2], GREEDY)[0]
    assert second.cached_tokens == len(prompt) + len(first.token_ids)
    same(second, fresh(model, tokenizer, turn2))
    # the answer re-tokenised differently: the cache holds up to where they differ
    turn3 = turn2 + second.token_ids[:4] + [7, 7] + ids(5, 4)
    third = engine.generate([turn3], GREEDY)[0]
    assert third.cached_tokens == len(turn2) + 4
    same(third, fresh(model, tokenizer, turn3))
    # the same prompt again holds all but its last token
    again = engine.generate([turn3], GREEDY)[0]
    assert again.cached_tokens == len(turn3) - 1
    same(again, third)


def test_sessions_share_the_system_prompt_and_survive_eviction(model, tokenizer) -> None:
    engine = Engine(model, tokenizer, max_batch=1, max_seq=256, cache_slots=2)
    engine.stop_ids = frozenset()
    sessions = {name: SYSTEM + ids(8, seed) for name, seed in (("a", 10), ("b", 11), ("c", 12))}
    held = {}
    for turn in range(3):
        for name in ("a", "b", "c"):  # three sessions, two cache rows
            prompt = sessions[name]
            gen = engine.generate([prompt], GREEDY)[0]
            same(gen, fresh(model, tokenizer, prompt))
            assert gen.cached_tokens >= (len(SYSTEM) if (turn, name) != (0, "a") else 0)
            held[name] = gen.cached_tokens
            sessions[name] = prompt + gen.token_ids + ids(6, 100 * turn + ord(name))
    # with 2 rows for 3 sessions in turn, each session was evicted before its next turn
    # and got back only the shared system prompt
    assert all(v == len(SYSTEM) for v in held.values())
    engine = Engine(model, tokenizer, max_batch=1, max_seq=256, cache_slots=3)
    engine.stop_ids = frozenset()
    a, b = SYSTEM + ids(8, 20), SYSTEM + ids(8, 21)
    ga = engine.generate([a], GREEDY)[0]
    engine.generate([b], GREEDY)
    ga2 = engine.generate([a + ga.token_ids + [5]], GREEDY)[0]
    assert ga2.cached_tokens == len(a) + len(ga.token_ids)  # 3 rows: a kept its own


def test_a_batch_shares_its_common_prefix_and_mixes_settings(model, tokenizer) -> None:
    engine = Engine(model, tokenizer, max_batch=4, max_seq=256)
    engine.stop_ids = frozenset()
    group = [SYSTEM + ids(30, 5) + ids(3 + i, 40 + i) for i in range(3)]
    settings = [
        SamplingParams(max_new_tokens=12),
        SamplingParams(max_new_tokens=5),
        SamplingParams(max_new_tokens=9, temperature=0.8, seed=3),
    ]
    gens = engine.generate(group, settings)
    assert [g.cached_tokens for g in gens] == [len(SYSTEM) + 30] * 3
    same(gens[0], fresh(model, tokenizer, group[0], settings[0]))
    same(gens[1], fresh(model, tokenizer, group[1], settings[1]))
    assert len(gens[1].token_ids) == 5 and len(gens[2].token_ids) == 9
    # a sampled row with a seed samples what it samples alone
    assert gens[2].token_ids == fresh(model, tokenizer, group[2], settings[2]).token_ids
    # each continues in its own row next turn, in any order and batch
    turn2 = [group[i] + gens[i].token_ids + [9] for i in (2, 0)]
    again = engine.generate(turn2, GREEDY)
    assert [g.cached_tokens for g in again] == [len(p) - 1 for p in turn2]
    for g, p in zip(again, turn2, strict=True):
        same(g, fresh(model, tokenizer, p))


def test_new_weights_empty_the_cache(model, tokenizer) -> None:
    engine = Engine(model, tokenizer, max_batch=1, max_seq=256)
    prompt = SYSTEM + ids(5, 6)
    engine.generate([prompt], GREEDY)
    engine.load_weights(model.state_dict())
    assert engine.generate([prompt], GREEDY)[0].cached_tokens == 0


def test_per_prompt_cancel_and_limits(model, tokenizer) -> None:
    engine = Engine(model, tokenizer, max_batch=2, max_seq=256)
    engine.stop_ids = frozenset()
    stop = threading.Event()
    stop.set()
    gens = engine.generate([ids(9, 7), ids(9, 8)], GREEDY, cancel=[stop, None])
    assert gens[0].finish_reason == "cancelled" and gens[0].token_ids == []
    assert gens[1].finish_reason == "length" and len(gens[1].token_ids) == 12
    mixed = [SamplingParams(max_new_tokens=0), SamplingParams(max_new_tokens=3)]
    gens = engine.generate([ids(9, 7), ids(9, 8)], mixed)
    assert [len(g.token_ids) for g in gens] == [0, 3]
    with pytest.raises(ValueError, match="2 SamplingParams for 1 prompts"):
        engine.generate([ids(3, 1)], mixed)
    with pytest.raises(ValueError, match="cache_slots 1 < max_batch 2"):
        Engine(model, tokenizer, max_batch=2, cache_slots=1)


def test_the_batcher_lets_waiting_sessions_join_a_running_batch(model, tokenizer) -> None:
    """Continuous batching: sessions that ask while a long generation runs join its
    engine run at once (free rows) and are done long before it, each generating what
    it would alone; a session cancelled while queued never runs."""
    engine = Engine(model, tokenizer, max_batch=4, max_seq=256)
    engine.stop_ids = frozenset()
    runs, joined, finished = [], [], []
    run = engine.run

    def recording(jobs, more=None):
        runs.append(len(jobs))

        def counting(n):
            got = more(n)
            joined.extend(got)
            return got

        return run(jobs, counting)

    engine.run = recording
    batcher = Batcher(engine)
    started = threading.Event()
    busy = batcher.submit(ids(5, 1), SamplingParams(max_new_tokens=150),
                          on_token=lambda *_: started.set())  # fmt: skip
    busy.add_done_callback(lambda _: finished.append("busy"))
    assert started.wait(30)
    prompts = [SYSTEM + ids(4, 30 + i) for i in range(3)]
    settings = [SamplingParams(max_new_tokens=4 + i) for i in range(3)]
    gone = threading.Event()
    gone.set()
    dropped = batcher.submit(ids(4, 9), GREEDY, cancel=gone)
    waiting = [batcher.submit(p, s) for p, s in zip(prompts, settings, strict=True)]
    for i, f in enumerate(waiting):
        f.add_done_callback(lambda _, i=i: finished.append(i))
    results = [f.result(timeout=60) for f in waiting]
    assert busy.result(timeout=60).finish_reason == "length"
    assert dropped.result(timeout=60) is None  # cancelled while queued: never run
    assert runs == [1] and len(joined) == 3  # one engine run; the three joined it
    assert finished[-1] == "busy"  # each joiner was handed its result as it ended
    for gen, p, s in zip(results, prompts, settings, strict=True):
        same(gen, fresh(model, tokenizer, p, s))
    batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit([1], GREEDY)


def test_a_joining_prompt_keeps_the_session_it_displaces(model, tokenizer) -> None:
    """A job that joins mid-run takes a free row; what that row held (a finished
    session's turn) moves to a row outside the batch, so the session's next turn is
    still served from the cache, and every token is what a fresh engine gives."""
    engine = Engine(model, tokenizer, max_batch=1, max_seq=256, cache_slots=3)
    engine.stop_ids = frozenset()
    first, other = SYSTEM + ids(20, 60), ids(30, 61)
    out: dict[str, object] = {}
    queue = [Job(other, GREEDY, lambda g: out.__setitem__("other", g), out.__setitem__)]

    def more(n):
        taken, queue[:] = queue[:n], queue[n:]
        return taken

    engine.run([Job(first, GREEDY, lambda g: out.__setitem__("first", g), print)], more)
    same(out["first"], fresh(model, tokenizer, first))
    same(out["other"], fresh(model, tokenizer, other))
    assert out["other"].cached_tokens == 0
    turn2 = first + out["first"].token_ids + ids(6, 62)
    again = engine.generate([turn2], GREEDY)[0]
    assert again.cached_tokens == len(first) + len(out["first"].token_ids)
    same(again, fresh(model, tokenizer, turn2))


def test_a_bad_job_fails_alone(model, tokenizer) -> None:
    engine = Engine(model, tokenizer, max_batch=2, max_seq=64)
    engine.stop_ids = frozenset()
    out, errors = [], []
    good = Job(ids(5, 70), GREEDY, out.append, errors.append)
    long = Job(ids(80, 71), GREEDY, out.append, errors.append)  # longer than max_seq
    engine.run([good, long])
    assert len(out) == 1 and len(out[0].token_ids) == 12
    assert len(errors) == 1 and "max_seq" in str(errors[0])


def test_the_batcher_makes_its_engine_and_runs_calls_on_its_thread(model, tokenizer) -> None:
    threads = []

    def make() -> Engine:
        threads.append(threading.current_thread())
        return Engine(model, tokenizer, max_batch=2, max_seq=256)

    batcher = Batcher(make)
    engine = batcher.ready()
    assert threads[0] is not threading.current_thread()
    assert batcher.call(threading.current_thread).result(timeout=30) is threads[0]
    assert batcher.submit(ids(4, 1), GREEDY).result(timeout=60).finish_reason in ("length", "stop")
    assert batcher.call(lambda: engine.weights_version).result(timeout=30) == 0
    batcher.close()

    def broken() -> Engine:
        raise ValueError("no such model")

    failed = Batcher(broken)
    with pytest.raises(ValueError, match="no such model"):
        failed.ready()
    with pytest.raises(RuntimeError, match="closed"):
        failed.submit([1], GREEDY)


def test_a_row_copied_into_is_also_copied_from(model, tokenizer) -> None:
    """One call where a prompt's prefix is copied into the oldest row while another
    prompt of the same call copies that row's old content out: every copy must read
    the rows as they were."""
    engine = Engine(model, tokenizer, max_batch=2, max_seq=256, cache_slots=3)
    engine.stop_ids = frozenset()
    a, b = ids(40, 50), ids(40, 51)
    engine.generate([b], GREEDY)  # the oldest row: b
    engine.generate([a], GREEDY)  # then a
    engine.generate([ids(30, 54)], GREEDY)  # the newest: something else
    # two branches sharing 30 tokens each: a's goes into the oldest row (b's), whose
    # content b's branch copies into the last one
    branch_a, branch_b = a[:30] + ids(5, 52), b[:30] + ids(5, 53)
    gens = engine.generate([branch_a, branch_b], GREEDY)
    assert [g.cached_tokens for g in gens] == [30, 30]
    for g, p in zip(gens, (branch_a, branch_b), strict=True):
        same(g, fresh(model, tokenizer, p))
