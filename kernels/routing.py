"""MoE routing on the device, without host synchronisation.

Each token t picks k experts (topk_ids [T, k]) with weights (topk_weights [T, k]).
`route` sorts the T*k (token, choice) pairs by expert into one "slot" layout of static
length S, in which expert e owns the slots offsets[e]:offsets[e+1]; each expert's
segment is padded with empty slots to a multiple of `align` (32: one MX block along
the slot dimension, which the weight-gradient GEMM contracts over). Within an expert
the pairs keep their t*k + j order (a stable sort), so the layout, and every sum
built on it, is deterministic.

Nothing reads tensor data on the host: no .item(), no .tolist(), no boolean masks,
every shape comes from T, k, E and `align`. The only data check (expert ids in range)
raises on CPU and is a device-side assert on CUDA. Plain torch ops, each of which
would be one small kernel (a histogram, a scan, a stable sort, a scatter).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Routing:
    token: Tensor  # [S] int64: source token row of each slot; T for a padding slot
    pair: Tensor  # [S] int64: t*k + j of the (token, choice) in each slot; T*k for padding
    weight: Tensor  # [S] fp32: routing weight of the slot (0 for padding)
    offsets: Tensor  # [E + 1] int64: expert e owns slots offsets[e]:offsets[e+1]
    slot: Tensor  # [T, k] int64: the slot of each (token, choice)

    @property
    def num_slots(self) -> int:  # S
        return self.token.shape[0]

    @property
    def num_experts(self) -> int:  # E
        return self.offsets.shape[0] - 1


def num_slots(num_pairs: int, num_experts: int, align: int = 32) -> int:
    """S: room for every pair plus the worst-case padding of every expert, aligned."""
    return _round_up(num_pairs + num_experts * (align - 1), align)


def _round_up(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def check_expert_ids(topk_ids: Tensor, num_experts: int) -> None:
    """Every id in [0, E): a ValueError on CPU; a device-side assert (no sync) on CUDA."""
    if topk_ids.numel() == 0:
        return
    ok = (topk_ids >= 0).all() & (topk_ids < num_experts).all()
    if topk_ids.device.type == "cpu":
        if not bool(ok):
            bad = topk_ids[(topk_ids < 0) | (topk_ids >= num_experts)]
            raise ValueError(
                f"topk_ids must lie in [0, {num_experts}); found {bad.unique()[:8].tolist()}"
            )
    else:
        torch._assert_async(ok, f"topk_ids must lie in [0, {num_experts})")


def route(topk_ids: Tensor, topk_weights: Tensor, num_experts: int, align: int = 32) -> Routing:
    """Sort the (token, choice) pairs by expert into `align`-aligned segments."""
    if topk_ids.dim() != 2:
        raise ValueError(f"topk_ids must be [T, k], got shape {tuple(topk_ids.shape)}")
    if (
        topk_ids.dtype.is_floating_point
        or topk_ids.dtype.is_complex
        or topk_ids.dtype == torch.bool
    ):
        raise TypeError(f"topk_ids must be an integer tensor, got {topk_ids.dtype}")
    if topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_weights {tuple(topk_weights.shape)} must match topk_ids {tuple(topk_ids.shape)}"
        )
    if num_experts < 1 or align < 1:
        raise ValueError(f"need num_experts >= 1 and align >= 1, got {num_experts}, {align}")
    check_expert_ids(topk_ids, num_experts)
    T, k = topk_ids.shape
    E, N = num_experts, T * k
    S = num_slots(N, E, align)
    device = topk_ids.device

    ids = topk_ids.reshape(N).long()  # [N] expert of pair p = t*k + j
    counts = torch.zeros(E, dtype=torch.long, device=device).scatter_add_(
        0, ids, torch.ones_like(ids)
    )  # [E] pairs per expert (a histogram; bincount would sync to size its output)
    padded = (counts + align - 1) // align * align  # [E]
    offsets = torch.zeros(E + 1, dtype=torch.long, device=device)
    offsets[1:] = torch.cumsum(padded, 0)  # [E + 1] segment starts, multiples of align
    starts = torch.cumsum(counts, 0) - counts  # [E] start of expert e among the sorted pairs

    order = torch.sort(ids, stable=True).indices  # [N] pairs sorted by expert, p order within
    e_sorted = ids[order]  # [N]
    rank = torch.arange(N, device=device) - starts[e_sorted]  # [N] position inside the expert
    dest = offsets[e_sorted] + rank  # [N] slot of the i-th sorted pair

    token = torch.full((S,), T, dtype=torch.long, device=device).scatter_(0, dest, order // k)
    pair = torch.full((S,), N, dtype=torch.long, device=device).scatter_(0, dest, order)
    weight = torch.zeros(S, dtype=torch.float32, device=device).scatter_(
        0, dest, topk_weights.reshape(N).float()[order]
    )
    slot = torch.empty(N, dtype=torch.long, device=device).scatter_(0, order, dest).view(T, k)
    return Routing(token=token, pair=pair, weight=weight, offsets=offsets, slot=slot)


def gather_rows(x: Tensor, token: Tensor) -> Tensor:
    """x [T, D] -> [S, D]: row token[i] of x in row i, zeros where token[i] == T. Any
    dtype (fp8 included), so quantized rows and their scales gather alike."""
    raw = x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x
    padded = torch.cat([raw, raw.new_zeros(1, raw.shape[1])])  # [T + 1, D]: row T is zero
    out = padded.index_select(0, token)  # [S, D]
    return out.view(x.dtype) if x.dtype == torch.float8_e4m3fn else out


def permute(x: Tensor, routing: Routing) -> Tensor:
    """x [T, D] -> [S, D] in the slot layout: x[token[i]] in slot i, zeros in padding."""
    T = routing.slot.shape[0]
    if x.dim() != 2 or x.shape[0] != T:
        raise ValueError(f"permute takes [T={T}, D] rows, got shape {tuple(x.shape)}")
    return gather_rows(x, routing.token)


def combine(out_slots: Tensor, routing: Routing, T: int) -> Tensor:
    """[S, D] -> [T, D]: y[t] = sum over j = 0..k-1 of out_slots[slot[t, j]], added in
    j order (one gather per choice, no atomics: bit-identical from run to run)."""
    S = routing.num_slots
    if out_slots.dim() != 2 or out_slots.shape[0] != S:
        raise ValueError(f"combine takes [S={S}, D] slots, got shape {tuple(out_slots.shape)}")
    if routing.slot.shape[0] != T:
        raise ValueError(f"routing is for {routing.slot.shape[0]} tokens, not {T}")
    k = routing.slot.shape[1]
    y = out_slots.index_select(0, routing.slot[:, 0])  # [T, D]
    for j in range(1, k):
        y = y + out_slots.index_select(0, routing.slot[:, j])
    return y
