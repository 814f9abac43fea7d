"""kernels.routing: the expert-sorted slot layout, permute and combine."""

from __future__ import annotations

import itertools

import pytest
import torch

from kernels.routing import Routing, combine, num_slots, permute, route

# (T, k, E): k = 1, T = 1, E larger than T * k (most experts empty), duplicates.
SHAPES = [(1, 1, 1), (1, 2, 8), (5, 1, 64), (37, 3, 5), (100, 4, 16), (64, 2, 2)]


def random_routing(T: int, k: int, E: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct experts per token when E >= k (as top-k gives), weights in (0, 1)."""
    g = torch.Generator().manual_seed(seed)
    if k <= E:
        ids = torch.rand(T, E, generator=g).argsort(dim=1)[:, :k]
    else:
        ids = torch.randint(0, E, (T, k), generator=g)
    return ids, torch.rand(T, k, generator=g)


def segments(r: Routing) -> list[tuple[int, int]]:
    bounds = r.offsets.tolist()
    return list(itertools.pairwise(bounds))


@pytest.mark.parametrize(("T", "k", "E"), SHAPES)
def test_offsets_are_aligned_and_hold_each_experts_pairs(T: int, k: int, E: int) -> None:
    ids, w = random_routing(T, k, E)
    r = route(ids, w, E)
    S = num_slots(T * k, E)
    assert r.token.shape == r.pair.shape == r.weight.shape == (S,)
    assert r.offsets.shape == (E + 1,) and r.slot.shape == (T, k)
    assert r.token.dtype == r.pair.dtype == r.offsets.dtype == r.slot.dtype == torch.int64
    assert r.weight.dtype == torch.float32
    assert S % 32 == 0 and r.offsets[0] == 0 and r.offsets[-1] <= S
    assert bool((r.offsets % 32 == 0).all()) and bool((r.offsets.diff() >= 0).all())
    counts = torch.bincount(ids.flatten(), minlength=E)
    for e, (lo, hi) in enumerate(segments(r)):
        assert hi - lo == -(-int(counts[e]) // 32) * 32  # count rounded up to 32
        if counts[e] == 0:
            assert lo == hi  # an expert with no tokens owns no slots


@pytest.mark.parametrize(("T", "k", "E"), SHAPES)
def test_each_pair_sits_in_exactly_one_slot_of_its_expert(T: int, k: int, E: int) -> None:
    ids, w = random_routing(T, k, E, seed=1)
    r = route(ids, w, E)
    flat = r.slot.flatten()
    assert flat.unique().numel() == T * k  # no two pairs share a slot
    t = torch.arange(T).repeat_interleave(k)
    assert torch.equal(r.token[flat], t)
    assert torch.equal(r.pair[flat], torch.arange(T * k))
    assert torch.equal(r.weight[flat], w.flatten())
    e = ids.flatten()
    assert bool(((r.offsets[e] <= flat) & (flat < r.offsets[e + 1])).all())


@pytest.mark.parametrize(("T", "k", "E"), SHAPES)
def test_padding_slots_are_marked(T: int, k: int, E: int) -> None:
    ids, w = random_routing(T, k, E, seed=2)
    r = route(ids, w, E)
    padding = torch.ones(r.num_slots, dtype=torch.bool)
    padding[r.slot.flatten()] = False
    assert int(padding.sum()) == r.num_slots - T * k
    assert bool((r.token[padding] == T).all())
    assert bool((r.pair[padding] == T * k).all())
    assert bool((r.weight[padding] == 0).all())


@pytest.mark.parametrize(("T", "k", "E"), SHAPES)
def test_slots_keep_pair_order_within_an_expert(T: int, k: int, E: int) -> None:
    ids, w = random_routing(T, k, E, seed=3)
    r = route(ids, w, E)
    for e, (lo, hi) in enumerate(segments(r)):
        expected = torch.nonzero(ids.flatten() == e).flatten()  # pairs t*k + j in order
        n = expected.numel()
        assert torch.equal(r.pair[lo : lo + n], expected)  # real slots first, in order
        assert bool((r.pair[lo + n : hi] == T * k).all())  # then the segment's padding


def test_duplicate_choices_get_separate_slots() -> None:
    ids = torch.tensor([[3, 3], [0, 3]])
    r = route(ids, torch.tensor([[0.5, 0.25], [1.0, 2.0]]), 4)
    assert r.slot.flatten().unique().numel() == 4
    assert r.pair[32:35].tolist() == [0, 1, 3]  # expert 3, after expert 0's segment


def test_num_slots_depends_on_shapes_only() -> None:
    a = route(torch.zeros(40, 2, dtype=torch.long), torch.ones(40, 2), 8)
    b = route(torch.arange(80).view(40, 2) % 8, torch.ones(40, 2), 8)
    assert a.num_slots == b.num_slots == num_slots(80, 8) == 352  # 80 + 8 * 31, to 32
    assert route(torch.zeros(40, 2, dtype=torch.long), torch.ones(40, 2), 8, align=8).num_slots == (
        num_slots(80, 8, 8)
    )


def test_route_never_reads_data_on_the_host() -> None:
    # Meta tensors hold no data: any .item(), .tolist(), nonzero or boolean mask in
    # route would raise here, so this shows the layout is sized from shapes alone.
    ids = torch.empty(10, 2, dtype=torch.long, device="meta")
    r = route(ids, torch.empty(10, 2, device="meta"), 4)
    assert r.token.shape == (num_slots(20, 4),) and r.slot.shape == (10, 2)
    assert r.offsets.shape == (5,)


def test_route_is_deterministic() -> None:
    ids, w = random_routing(200, 4, 16, seed=4)
    a, b = route(ids, w, 16), route(ids.clone(), w.clone(), 16)
    for name in ("token", "pair", "weight", "offsets", "slot"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize(("T", "k", "E"), SHAPES)
def test_permute_then_combine(T: int, k: int, E: int) -> None:
    torch.manual_seed(0)
    ids, w = random_routing(T, k, E, seed=5)
    r = route(ids, w, E)
    x = torch.randn(T, 64)
    slots = permute(x, r)
    assert slots.shape == (r.num_slots, 64)
    assert bool((slots[r.token == T] == 0).all())  # padding rows are zero
    assert torch.equal(slots[r.slot[:, 0]], x)
    # Weighted round trip: sum_j w[t, j] * x[t].
    y = combine(slots * r.weight[:, None], r, T)
    expected = sum(w[:, j, None] * x for j in range(k))
    assert torch.allclose(y, expected, rtol=1e-6, atol=1e-6)


def test_combine_adds_choices_in_order_and_is_bit_reproducible() -> None:
    torch.manual_seed(0)
    T, k, E = 50, 4, 8
    ids, w = random_routing(T, k, E, seed=6)
    r = route(ids, w, E)
    out_slots = torch.randn(r.num_slots, 32) * 1e3
    y = combine(out_slots, r, T)
    expected = out_slots[r.slot[:, 0]]
    for j in range(1, k):
        expected = expected + out_slots[r.slot[:, j]]
    assert torch.equal(y, expected)
    assert torch.equal(combine(out_slots.clone(), route(ids, w, E), T), y)


def test_permute_keeps_fp8_and_scale_bytes() -> None:
    ids, w = random_routing(8, 2, 4, seed=7)
    r = route(ids, w, 4)
    q = torch.randn(8, 32).to(torch.float8_e4m3fn)
    s = torch.randint(0, 255, (8, 1), dtype=torch.uint8)
    pq, ps = permute(q, r), permute(s, r)
    assert pq.dtype == torch.float8_e4m3fn and ps.dtype == torch.uint8
    assert torch.equal(pq.view(torch.uint8)[r.slot[:, 1]], q.view(torch.uint8))
    assert torch.equal(ps[r.slot[:, 1]], s)
    assert bool((ps[r.token == 8] == 0).all())


@pytest.mark.parametrize("bad", [-1, 4])
def test_expert_ids_out_of_range_are_refused(bad: int) -> None:
    ids = torch.tensor([[0, 1], [2, bad]])
    with pytest.raises(ValueError, match=r"topk_ids must lie in \[0, 4\)"):
        route(ids, torch.ones(2, 2), 4)


def test_bad_routing_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="integer"):
        route(torch.zeros(2, 2), torch.ones(2, 2), 4)
    with pytest.raises(ValueError, match="must match"):
        route(torch.zeros(2, 2, dtype=torch.long), torch.ones(2, 3), 4)
    with pytest.raises(ValueError, match=r"\[T, k\]"):
        route(torch.zeros(4, dtype=torch.long), torch.ones(4), 4)
    r = route(torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1), 4)
    with pytest.raises(ValueError, match="permute"):
        permute(torch.ones(3, 32), r)
    with pytest.raises(ValueError, match="combine"):
        combine(torch.ones(r.num_slots + 1, 32), r, 2)
