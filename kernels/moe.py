"""kernels.moe_ffn: the MoE SwiGLU expert layer on MXFP8 grouped GEMMs, differentiable.

    y[t] = sum_j w[t, j] * W_down[e] @ (silu(g) * u),  [g; u] = W_gate_up[e] @ x[t],
    e = topk_ids[t, j]

Its meaning, forward and backward, is kernels.reference.moe_ffn (quantize=True). The
layer is five grouped GEMMs over the expert-sorted slot layout of kernels.routing
(S slots, expert e owning offsets[e]:offsets[e+1], 32-aligned), shapes for T tokens,
top-k, E experts, d_model D and d_ff F:

    forward   gate_up_swiglu  x[token] [S, D]  . W_gate_up[e]^T -> h [S, F] (MX), preact [S, 2F]
              down_weighted   h [S, F]  . W_down[e]^T, * weight -> out_slots [S, D]; combine -> y
    backward  grad_down       dY[token] [S, D] . W_down[e]      -> dh_raw [S, F] (MX along D)
              grad_gate_up    dGU [S, 2F] . W_gate_up[e]        -> dx_slots [S, D] (MX along 2F)
              weight_grad     (w*dY)^T h, dGU^T x[token] per segment -> dW_down, dW_gate_up
                              (MX along the slots)

`moe_ffn` is the one place that chooses how the layer runs:

    Triton         on CUDA or under TRITON_INTERPRET=1: MoEFFN on kernels.grouped_gemm
    torch, train   gradients wanted, or full-precision weights: MoEFFN on TorchGemms
                   below (dequantize the MX operands, fp32 matmuls per expert segment)
    torch, sample  pre-quantized weights, no gradient: torch_experts with MX-rounded
                   activations, the same numerics; eagerly a pass per chosen expert,
                   in a compiled decode step static-shape strategies (one graph)
    unquantized    quantize=False (the fp32 model, the parity baseline): torch_experts
                   without any rounding, under plain autograd

Routing, permute and combine are shape-static torch ops, so the Triton path never
waits on the host. TorchGemms is meant for CPU: on a CUDA tensor (only if
kernels.grouped_gemm were missing) its segment loop reads the offsets on the host.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from kernels import mx_torch, reference, use_triton
from kernels.reference import MxWeight
from kernels.routing import Routing, combine, gather_rows, permute, route

# ------------------------------------------------------------------- torch backend


def _segment_mm(a: Tensor, b: Tensor, offsets: Tensor) -> Tensor:
    """a [S, K] fp32, b [E, K, N] fp32 -> [S, N]: rows of segment e times b[e] (rows
    past offsets[E] are zero). A loop over the experts' non-empty segments: on CPU
    (this path's home) it beats torch._grouped_mm, which is slow there, by far."""
    out = a.new_zeros(a.shape[0], b.shape[2])
    bounds = offsets.tolist()
    for e in range(b.shape[0]):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            out[lo:hi] = a[lo:hi] @ b[e]
    return out


def _segment_outer(a: Tensor, b: Tensor, offsets: Tensor) -> Tensor:
    """a [S, M], b [S, N] -> [E, M, N]: sum over the slots of segment e of a_i^T b_i."""
    bounds = offsets.tolist()
    return torch.stack(
        [
            a[bounds[e] : bounds[e + 1]].T @ b[bounds[e] : bounds[e + 1]]
            for e in range(len(bounds) - 1)
        ]
    )


def _dq(q: Tensor, s: Tensor, dim: int = -1) -> Tensor:
    return mx_torch.dequantize(q, s, dim)


# Dequantized expert weights, kept while their MX tensor lives: pre-quantized sampling
# weights are the same tensors on every call, so each is dequantized once; weights
# quantized inside a training step are new each step and their entry goes with them.
_DEQUANTIZED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def dequantized_weights(
    q: Tensor, s: Tensor, dim: int = -1, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The values of MX expert weights in `dtype`, cached by q's identity (checked
    against the versions of q and s, so an in-place change is never served stale).

    bfloat16 holds every MXFP8 value exactly (an e4m3 value, 3 mantissa bits, times a
    power of two within fp32's exponent range fits bf16's 7 bits and 8-bit exponent),
    so the sampler caches its weights as bf16: the same numbers as fp32 in half the
    memory (1.25 GB instead of 2.5 for tachy's model) and half the bytes read per
    token; its matmuls still run in fp32 on the slices it uses."""
    stamp = (q._version, s.data_ptr(), s._version, dim, dtype)
    hit = _DEQUANTIZED.get(q)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    w = _dq(q, s, dim).to(dtype)
    _DEQUANTIZED[q] = (stamp, w)
    return w


# Column-wise MX copies of pre-quantized expert weights, for the backward pass of a model
# whose experts are frozen (adapter training: the weights are the same tensors on every
# step, so their re-blocking along the other dim is done once, not in every backward).
_COLWISE: WeakIdKeyDictionary = WeakIdKeyDictionary()


def colwise_copy(ops, q: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
    """(q, scales) of pre-quantized weights [E, M, N] re-blocked along dim 1, as the
    backward's GEMMs read them: quantize(dequantize(q, s, -1), 1), cached by q's
    identity and checked against the versions of q and s."""
    stamp = (q._version, s.data_ptr(), s._version, ops.quantize)
    hit = _COLWISE.get(q)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    copy = ops.quantize(ops.dequantize(q, s, -1), 1)
    _COLWISE[q] = (stamp, copy)
    return copy


class TorchGemms:
    """The grouped GEMMs of kernels.grouped_gemm, in torch: dequantize, fp32 matmul."""

    quantize = staticmethod(mx_torch.quantize)
    dequantize = staticmethod(mx_torch.dequantize)

    @staticmethod
    def gate_up_swiglu(x_q, x_s, token, offsets, w_q, w_s, *, save_preact: bool):
        x = gather_rows(_dq(x_q, x_s), token)  # [S, D]
        gu = _segment_mm(x, dequantized_weights(w_q, w_s).transpose(1, 2), offsets)  # [S, 2F]
        g, u = gu.chunk(2, dim=1)
        h_q, h_s = mx_torch.quantize(torch.nn.functional.silu(g) * u, -1)  # [S, F]
        return h_q, h_s, (gu if save_preact else None)

    @staticmethod
    def down_weighted(h_q, h_s, w_q, w_s, offsets, weight):
        out = _segment_mm(
            _dq(h_q, h_s), dequantized_weights(w_q, w_s).transpose(1, 2), offsets
        )  # [S, D]
        return out * weight[:, None]

    @staticmethod
    def grad_down(dy_slots_q, dy_slots_s, w_q_colwise, w_s_colwise, offsets):
        w = dequantized_weights(w_q_colwise, w_s_colwise, dim=1)  # [E, D, F]
        return _segment_mm(_dq(dy_slots_q, dy_slots_s), w, offsets)  # [S, F]

    @staticmethod
    def grad_gate_up(dgu_q, dgu_s, w_q_colwise, w_s_colwise, offsets):
        w = dequantized_weights(w_q_colwise, w_s_colwise, dim=1)  # [E, 2F, D]
        return _segment_mm(_dq(dgu_q, dgu_s), w, offsets)  # [S, D]

    @staticmethod
    def weight_grad(a_q_colwise, a_s_colwise, b_q_colwise, b_s_colwise, offsets, num_experts):
        a = _dq(a_q_colwise, a_s_colwise, dim=0)  # [S, M]
        b = _dq(b_q_colwise, b_s_colwise, dim=0)  # [S, N]
        return _segment_outer(a, b, offsets)  # [E, M, N], E = num_experts = len(offsets) - 1


# ------------------------------------------------------- torch experts (no autograd Function)

DENSE_EXPERT_TOKENS = 16  # up to this many tokens, every expert runs on every token
STRATEGIES = ("pairs", "dense", "loop")
# From this many weights per expert's gate_up (2F * D) an eager pass per expert beats
# copying the chosen experts' weights out: SmolLM2's MLP upcycled (1.8M) decodes one
# sequence ~2x faster by the loop, the tiny preset's experts (16K) ~2x slower.
LOOP_EXPERT_SIZE = 1 << 18
# Inside a compiled graph, large experts take "pairs" up to this many (token, expert)
# pairs (a decode batch of 32 at top-2): gathering the chosen experts, dequantized
# inline from MXFP8, reads a fraction of what "dense" reads and computes k/E of it
# (bench.generate smollm2, the mxfp8-compile side at batch 8).
COMPILED_PAIRS = 64


def expert_strategy(T: int, k: int, E: int, expert_size: int = 0) -> str:
    """How torch_experts runs T tokens with top-k of E experts of `expert_size`
    gate_up weights each.

    Eagerly, large experts always "loop": one pass per chosen expert over its tokens
    reads each chosen expert's weights once, in place. Otherwise, and always inside a
    compiled graph (where the loop's host read would break the graph): "pairs" (gather
    the few chosen weights; decoding one sequence, or a decode batch of large experts),
    "dense" (every expert on every token, weighted by the routing; a decode batch of
    small experts), else "loop"."""
    large = expert_size >= LOOP_EXPERT_SIZE
    if not torch.compiler.is_compiling() and large:
        return "loop"
    if T * k <= E or (large and T * k <= COMPILED_PAIRS):
        return "pairs"
    return "dense" if T <= DENSE_EXPERT_TOKENS else "loop"


_WORKSPACE = threading.local()


def _fp32(w: Tensor) -> Tensor:
    """One expert's weights in fp32, converted from the bf16 cache into a buffer reused
    call after call (per thread and shape): a fresh tensor per expert and token would
    cost page faults on megabytes of new memory each time, which dominated decoding in
    a worker thread, where glibc serves such sizes with new mappings."""
    if w.dtype == torch.float32:
        return w
    buffers = _WORKSPACE.__dict__.setdefault("buffers", {})
    # a buffer made under inference_mode cannot be written outside it: one of each
    key = (tuple(w.shape), w.device, torch.is_inference_mode_enabled())
    buf = buffers.get(key)
    if buf is None:
        buf = buffers[key] = torch.empty(w.shape, dtype=torch.float32, device=w.device)
    return buf.copy_(w)


def _pair_matvec(w: Tensor, ids: Tensor, v: Tensor) -> Tensor:
    """w [E, N, K], ids [P], v [P, K] -> [P, N]: w[ids[p]] @ v[p] for each pair p.
    Eagerly a batched matmul over the gathered weights; inside a compiled graph a
    multiply-and-sum, which Inductor fuses with the gather into one loop that reads
    each chosen weight once instead of copying it out first."""
    if torch.compiler.is_compiling():
        return (w[ids].float() * v[:, None, :]).sum(-1)
    return torch.bmm(w[ids].float(), v[:, :, None])[..., 0]


def torch_experts(
    x: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    w_gate_up: Tensor,
    w_down: Tensor,
    *,
    mx_activations: bool,
    strategy: str | None = None,
) -> Tensor:
    """SwiGLU experts in plain torch ops, fp32: x [T, D], topk_weights/ids [T, k],
    w_gate_up [E, 2F, D], w_down [E, D, F] (values) -> [T, D] fp32.

    With mx_activations, x and the SwiGLU output are rounded through MXFP8 exactly where
    MoEFFN quantizes them, so on dequantized MX weights it computes MoEFFN's forward (up
    to fp32 summation order); without, it is the unquantized layer.

    Three ways (`strategy`, default expert_strategy's choice): "pairs" gathers the
    weights of each (token, expert) pair and batches the matmuls; "dense" runs every
    expert on every token and weights the results by the routing (zero for experts not
    chosen); "loop" makes one pass per expert over its tokens. The first two have static
    shapes and read nothing on the host, so a compiled decode step is one graph."""
    T, k = topk_ids.shape
    E = w_gate_up.shape[0]
    strategy = strategy or expert_strategy(T, k, E, w_gate_up[0].numel())
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")

    def mx(a: Tensor) -> Tensor:  # [n, 32m] -> the same values rounded through MXFP8
        return mx_torch.dequantize(*mx_torch.quantize(a, -1)) if mx_activations else a

    x = mx(x.float())
    ids = topk_ids.reshape(-1)  # [T*k]
    if strategy == "pairs":
        xs = x.repeat_interleave(k, 0)  # [T*k, D]
        g, u = _pair_matvec(w_gate_up, ids, xs).chunk(2, dim=-1)  # [T*k, F] each
        out = _pair_matvec(w_down, ids, mx(F.silu(g) * u))  # [T*k, D]
        out = out * topk_weights.reshape(-1, 1).float()
        return out.view(T, k, -1).sum(1)
    if strategy == "dense":
        route_ = torch.zeros(T, E, dtype=torch.float32, device=x.device)
        route_ = route_.scatter(1, topk_ids, topk_weights.float())  # [T, E]
        g, u = torch.matmul(x, w_gate_up.float().transpose(1, 2)).chunk(2, dim=-1)  # [E, T, F]
        h = mx((F.silu(g) * u).reshape(E * T, -1)).view(E, T, -1)
        out = torch.bmm(h, w_down.float().transpose(1, 2))  # [E, T, D]
        return torch.einsum("etd,te->td", out, route_)
    tok = torch.arange(T, device=x.device).repeat_interleave(k)  # [T*k]
    w = topk_weights.reshape(-1)
    y = torch.zeros(T, x.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        sel = (ids == e).nonzero().squeeze(1)
        t = tok[sel]
        g, u = (x[t] @ _fp32(w_gate_up[e]).T).chunk(2, dim=-1)  # [n, F] each
        out = mx(F.silu(g) * u) @ _fp32(w_down[e]).T  # [n, D]
        y = y.index_add(0, t, out * w[sel, None].float())
    return y


def _values(w: MxWeight) -> Tensor:
    """The values of expert weights: full precision as they are; pre-quantized ones
    dequantized once per weight tensor (the cache above, in bf16: exact), or inline
    inside a compiled graph, which cannot consult the cache (a Python dict) and is
    never stale. torch_experts takes each slice it multiplies to fp32."""
    if not isinstance(w, tuple):
        return w
    if torch.compiler.is_compiling():
        return mx_torch.dequantize(*w)
    # One expert (shared_expert) is cached in fp32: a tenth of the memory of all eight
    # in bf16, and no per-call conversion of megabytes of weights.
    dtype = torch.float32 if w[0].shape[0] == 1 else torch.bfloat16
    return dequantized_weights(*w, dtype=dtype)


# ------------------------------------------------------------------- shared frozen experts

# Experts upcycled from one dense MLP are identical copies, and while they are frozen
# (pre-quantized MX weights: sampling, and training that leaves them be, such as the
# experts' low-rank adapters of model.MoE) they stay so. Then
#     sum_j w[t, j] * E_(e_j)(x[t]) = (sum_j w[t, j]) * E_0(x[t]),
# so each token needs one expert pass, not top-k: half the expert work at top-2, with
# the same MXFP8 weights in the same kernels, and the router's gradient through the
# weights' sum unchanged. Whether the copies are identical is checked once per weight
# tensor (stamped with the tensors' versions, so an in-place change is seen).
_SHARED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def shared_expert(w_gate_up: MxWeight, w_down: MxWeight) -> tuple[MxWeight, MxWeight] | None:
    """Expert 0's pre-quantized weights as a one-expert layer ([1, ...] views, the same
    objects call after call so the caches above keep them) when every expert's MX
    weights are bit-identical; None otherwise, and for full-precision weights (which
    may be trained apart) or inside a compiled graph (which cannot read this cache)."""
    if not (isinstance(w_gate_up, tuple) and isinstance(w_down, tuple)):
        return None
    if torch.compiler.is_compiling() or w_gate_up[0].shape[0] == 1:
        return None
    tensors = (*w_gate_up, *w_down)
    stamp = tuple((t.data_ptr(), t._version) for t in tensors)
    hit = _SHARED.get(w_gate_up[0])
    if hit is not None and hit[0] == stamp:
        return hit[1]

    def same(t: Tensor) -> bool:  # every expert's bytes equal expert 0's
        b = t.view(torch.uint8)
        return bool((b == b[:1]).all())

    shared = None
    if all(same(t) for t in tensors):
        # Views of detached aliases, not of the tensors themselves: a view keeps its base
        # alive, and an entry whose value kept its own key alive would never leave this
        # weak-keyed cache (every model loaded and dropped would stay in memory).
        gq, gs, dq, ds = (t.detach()[:1] for t in tensors)
        shared = ((gq, gs), (dq, ds))
    _SHARED[w_gate_up[0]] = (stamp, shared)
    return shared


# ------------------------------------------------------------------- dispatch (the one place)


def _backend(*tensors: Tensor):
    """Triton (kernels.grouped_gemm + the Triton quantize) on CUDA or under
    TRITON_INTERPRET=1 once kernels/grouped_gemm.py exists; else TorchGemms."""
    if not use_triton(*tensors):
        return TorchGemms
    try:
        from kernels import grouped_gemm
    except ModuleNotFoundError as exc:
        if exc.name != "kernels.grouped_gemm":
            raise
        return TorchGemms
    import kernels  # the public quantize ops dispatch to Triton under the same rule

    return SimpleNamespace(
        quantize=kernels.mx_quantize,
        dequantize=kernels.mx_dequantize,
        gate_up_swiglu=grouped_gemm.gate_up_swiglu,
        down_weighted=grouped_gemm.down_weighted,
        grad_down=grouped_gemm.grad_down,
        grad_gate_up=grouped_gemm.grad_gate_up,
        weight_grad=grouped_gemm.weight_grad,
    )


# ------------------------------------------------------------------- autograd Function


def _permute_mx(q: Tensor, s: Tensor, r: Routing) -> tuple[Tensor, Tensor]:
    """Row-wise MX rows [T, D] and scales [T, D // 32] -> the slot layout (padding: 0)."""
    return permute(q, r), permute(s, r)


class MoEFFN(torch.autograd.Function):
    """Forward and backward as kernels.reference._MoEMX defines them, on the slot layout."""

    @staticmethod
    def forward(ctx, x, topk_weights, topk_ids, w_gate_up, w_down, wgu_q, wgu_s, wd_q, wd_s):
        T, E = x.shape[0], (wgu_q if wgu_q is not None else w_gate_up).shape[0]
        ops = _backend(x)
        r = route(topk_ids, topk_weights, E)
        given_q = (wgu_q, wgu_s, wd_q, wd_s)  # kept for backward only when pre-quantized
        if wgu_q is None:
            wgu_q, wgu_s = ops.quantize(w_gate_up, -1)  # [E, 2F, D] along D
        if wd_q is None:
            wd_q, wd_s = ops.quantize(w_down, -1)  # [E, D, F] along F
        x_q, x_s = ops.quantize(x, -1)  # [T, D] along D
        h_q, h_s, preact = ops.gate_up_swiglu(
            x_q, x_s, r.token, r.offsets, wgu_q, wgu_s, save_preact=any(ctx.needs_input_grad)
        )
        out_slots = ops.down_weighted(h_q, h_s, wd_q, wd_s, r.offsets, r.weight)  # [S, D]
        y = combine(out_slots, r, T)  # [T, D]

        ctx.save_for_backward(
            x, r.token, r.pair, r.weight, r.offsets, r.slot, preact, w_gate_up, w_down, *given_q
        )
        ctx.dtypes = (x.dtype, topk_weights.dtype)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        (x, token, pair, weight, offsets, slot, preact, w_gate_up, w_down,
         wgu_q, wgu_s, wd_q, wd_s) = ctx.saved_tensors  # fmt: skip
        r = Routing(token=token, pair=pair, weight=weight, offsets=offsets, slot=slot)
        T, E = x.shape[0], offsets.shape[0] - 1
        ops = _backend(dy)
        need_x, need_tw, _, need_wgu, need_wd = ctx.needs_input_grad[:5]

        def colwise(w: Tensor | None, q: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
            """The weights MX along dim 1: quantized from w, or re-blocked from the given
            (frozen) MX weights once and cached."""
            return ops.quantize(w, 1) if w is not None else colwise_copy(ops, q, s)

        # dh_raw = dY[token] @ W_down[e] with both MX along D.
        dy = dy.float()
        dy_q, dy_s = ops.quantize(dy, -1)  # [T, D]
        wd_cq, wd_cs = colwise(w_down, wd_q, wd_s)  # [E, D, F] along D
        dh_raw = ops.grad_down(*_permute_mx(dy_q, dy_s, r), wd_cq, wd_cs, offsets)  # [S, F]

        # SwiGLU backward from the fp32 pre-activations; the router's gradient.
        g, u = preact.chunk(2, dim=1)  # [S, F] each
        sg = torch.sigmoid(g)
        silu = g * sg
        h = silu * u  # [S, F]
        d_weight = (dh_raw * h).sum(-1)  # [S]: <dY[t], W_down[e] h>
        dh = dh_raw * weight[:, None]
        dgu = torch.cat([dh * u * sg * (1 + g * (1 - sg)), dh * silu], dim=1)  # [S, 2F]

        dx = dtw = dwg = dwd = None
        if need_x:
            wgu_cq, wgu_cs = colwise(w_gate_up, wgu_q, wgu_s)  # along 2F
            dx_slots = ops.grad_gate_up(*ops.quantize(dgu, -1), wgu_cq, wgu_cs, offsets)
            dx = combine(dx_slots, r, T).to(ctx.dtypes[0])  # [T, D]
        if need_tw:
            dtw = d_weight.index_select(0, slot.reshape(-1)).view_as(slot).to(ctx.dtypes[1])
        if need_wgu:
            x_slots = permute(x.float(), r)  # [S, D]
            dwg = ops.weight_grad(*ops.quantize(dgu, 0), *ops.quantize(x_slots, 0), offsets, E)
            dwg = dwg.to(w_gate_up.dtype)  # [E, 2F, D]
        if need_wd:
            do = permute(dy, r) * weight[:, None]  # [S, D]: d(unweighted down output)
            dwd = ops.weight_grad(*ops.quantize(do, 0), *ops.quantize(h, 0), offsets, E)
            dwd = dwd.to(w_down.dtype)  # [E, D, F]
        return dx, dtw, None, dwg, dwd, None, None, None, None


def moe_ffn(
    x: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    w_gate_up: MxWeight,
    w_down: MxWeight,
    *,
    quantize: bool = True,
) -> Tensor:
    """SwiGLU experts on MXFP8 (see the module docstring and kernels.reference.moe_ffn).

    x [T, D], topk_weights [T, k], topk_ids [T, k] int, w_gate_up [E, 2F, D] (gate rows
    first), w_down [E, D, F]: full-precision weights (quantized here, and given
    gradients), or pre-quantized (q, scales) pairs MX along the last dim (for
    sampling; no gradient). D and F multiples of 32. quantize=False: nothing is
    rounded (the fp32 baseline; pre-quantized weights are dequantized). Returns y [T, D]
    in x's dtype. The one place that picks the path (the module docstring).
    """
    # Clear errors for bad arguments (the MX block only matters where something is MX).
    mx = quantize or isinstance(w_gate_up, tuple) or isinstance(w_down, tuple)
    reference.moe_shapes(x, topk_weights, topk_ids, w_gate_up, w_down, mx=mx)
    shared = shared_expert(w_gate_up, w_down)
    if shared is not None:  # identical frozen experts: one pass per token (above)
        w_gate_up, w_down = shared
        topk_weights = topk_weights.sum(-1, keepdim=True)  # [T, 1]
        topk_ids = torch.zeros_like(topk_ids[:, :1])
    pre_quantized = isinstance(w_gate_up, tuple)
    sampling = pre_quantized and not torch.is_grad_enabled() and not use_triton(x)
    if not quantize or sampling:
        y = torch_experts(
            x, topk_weights, topk_ids, _values(w_gate_up), _values(w_down),
            mx_activations=quantize,
        )  # fmt: skip
        return y.to(x.dtype)
    weights = reference.function_weights(w_gate_up, w_down)
    return MoEFFN.apply(x, topk_weights, topk_ids, *weights)
