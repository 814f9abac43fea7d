"""The meaning of every kernel, in plain torch (fp32).

Each op in `kernels` has its twin here; the Triton kernels are tested against these,
bit for bit where the result is quantized data, within float tolerance where it is a
sum. Nothing here is fast; everything here is obvious.

MXFP8 (OCP Microscaling Formats v1.0): blocks of 32 consecutive values along one
dimension share a scale 2^(s - 127), s an unsigned byte (E8M0; 255 means NaN); each
value is an FP8 E4M3 number (max 448). We quantize with the "RCEIL" rule: the scale
is the smallest power of two at least amax / 448, so no value is clipped; the OCP
"FLOOR" rule (2^(floor(log2 amax) - 8)) is kept for comparison and may clip.
"""

from __future__ import annotations

import torch

MX_BLOCK = 32  # values per MXFP8 block (one E8M0 scale each): the one definition
E4M3_MAX = 448.0
E8M0_BIAS = 127
E8M0_NAN = 255
# Mantissa bits of 448 = 1.75 * 2^8: an amax with a larger mantissa needs one more
# power of two in its scale.
_MANT_1_75 = 0x600000
_NAN_BYTE = 0x7F  # E4M3 NaN (what every value of a NaN/Inf block is stored as)


def _blocks(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, int]:
    """`x` moved so that `dim` is last and cut into blocks: [..., n // 32, 32]."""
    dim = dim % x.dim()
    n = x.shape[dim]
    if n % MX_BLOCK:
        raise ValueError(f"dimension {dim} has {n} elements; MXFP8 needs a multiple of {MX_BLOCK}")
    moved = x.movedim(dim, -1)
    return moved.reshape(*moved.shape[:-1], n // MX_BLOCK, MX_BLOCK), dim


def scale_bytes(amax: torch.Tensor, rounding: str = "rceil") -> torch.Tensor:
    """E8M0 scale bytes (int32 0..255) for block maxima (fp32, >= 0 or NaN/Inf).

    Computed from the bits of amax, as the kernels do: amax = 1.m * 2^e gives
    2^(e - 8) when 1.m <= 1.75 (448 = 1.75 * 2^8) and 2^(e - 7) above (RCEIL), or
    always 2^(e - 8) (FLOOR). Subnormal and zero maxima get the smallest scale.
    """
    bits = amax.float().view(torch.int32)
    exponent = (bits >> 23) & 0xFF  # biased fp32 exponent
    mantissa = bits & 0x7FFFFF
    s = exponent - 8
    if rounding == "rceil":
        s = s + (mantissa > _MANT_1_75).to(torch.int32)
    elif rounding != "floor":
        raise ValueError(f"unknown rounding {rounding!r}; use 'rceil' or 'floor'")
    s = s.clamp(0, 254)
    s = torch.where(exponent == 0, torch.zeros_like(s), s)  # zero or subnormal amax
    return torch.where(exponent == 0xFF, torch.full_like(s, E8M0_NAN), s)


def pow2(exponent: torch.Tensor) -> torch.Tensor:
    """2^exponent (int tensor, -254..254) as fp32, exactly: built from two normal
    factors, since 2^-127 and below are subnormal (and flushed on some hardware)."""
    half = torch.div(exponent, 2, rounding_mode="floor")
    rest = exponent - half

    def normal(e: torch.Tensor) -> torch.Tensor:
        return ((e + 127).to(torch.int32) << 23).view(torch.float32)

    return normal(half) * normal(rest)


def encode_e4m3(v: torch.Tensor) -> torch.Tensor:
    """FP8 E4M3 bytes (int32 0..255) of fp32 values with |v| <= 448, rounding to
    nearest even, from the bits (the same as torch's cast for such values)."""
    bits = v.view(torch.int32)
    sign = ((bits >> 24) & 0x80).to(torch.int32)
    a = v.abs()
    abits = a.view(torch.int32)
    exponent = (abits >> 23) - 127
    mantissa = abits & 0x7FFFFF
    # Normal range (|v| >= 2^-6): keep 3 mantissa bits, round to nearest even; a
    # carry out of the mantissa moves the exponent up, as it should.
    kept = mantissa >> 20
    rest = mantissa & 0xFFFFF
    up = (rest > 0x80000) | ((rest == 0x80000) & ((kept & 1) == 1))
    normal = ((exponent + 7) << 3) + kept + up.to(torch.int32)
    # Subnormal range: multiples of 2^-9, rounded to nearest even.
    scaled = a * 512.0
    whole = scaled.floor()
    frac = scaled - whole
    odd = (whole.to(torch.int32) & 1) == 1
    sub = whole.to(torch.int32) + ((frac > 0.5) | ((frac == 0.5) & odd)).to(torch.int32)
    magnitude = torch.where(a >= 2.0**-6, normal, sub)
    return sign | magnitude


def decode_e4m3(q: torch.Tensor) -> torch.Tensor:
    """fp32 values of FP8 E4M3 bytes (uint8 or float8_e4m3fn)."""
    if q.dtype == torch.float8_e4m3fn:
        return q.float()
    return q.view(torch.float8_e4m3fn).float()


def mx_quantize(
    x: torch.Tensor, dim: int = -1, rounding: str = "rceil"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q float8_e4m3fn shaped like x, scales uint8 with x.shape[dim] // 32 along dim).

    Values are divided by their block's scale, clamped to +-448 and rounded to
    nearest even. An all-zero block gets scale byte 0; a block holding NaN or Inf
    gets scale 255 (NaN) and E4M3 NaN values.
    """
    blocks, dim = _blocks(x.float(), dim)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    finite = torch.isfinite(blocks).all(dim=-1, keepdim=True)
    amax = torch.where(finite, amax, torch.full_like(amax, float("inf")))
    s = scale_bytes(amax, rounding)
    v = blocks * pow2(E8M0_BIAS - s)
    v = v.clamp(-E4M3_MAX, E4M3_MAX)
    q = encode_e4m3(torch.where(finite, v, torch.zeros_like(v)))
    q = torch.where(finite, q, torch.full_like(q, _NAN_BYTE))
    q = q.to(torch.uint8).reshape(*blocks.shape[:-2], -1).movedim(-1, dim)
    scales = s.to(torch.uint8).squeeze(-1).movedim(-1, dim)
    return q.contiguous().view(torch.float8_e4m3fn), scales.contiguous()


def mx_dequantize(
    q: torch.Tensor, scales: torch.Tensor, dim: int = -1, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The values q * 2^(scale - 127), block by block along `dim` (NaN where the
    scale byte is 255)."""
    blocks, dim = _blocks(decode_e4m3(q), dim)
    s = scales.movedim(dim, -1).to(torch.int32).unsqueeze(-1)
    if s.shape[:-1] != blocks.shape[:-1]:
        raise ValueError(
            f"scales of shape {tuple(scales.shape)} do not fit values of shape {tuple(q.shape)}"
        )
    values = blocks * pow2(s - E8M0_BIAS)
    values = torch.where(s == E8M0_NAN, torch.full_like(values, float("nan")), values)
    return values.reshape(*blocks.shape[:-2], -1).movedim(-1, dim).to(dtype).contiguous()


def mx_quantize_dual(
    x: torch.Tensor, rounding: str = "rceil"
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Row-wise (blocks along the last dim) and column-wise (along the first) copies
    of a 2-D tensor, as the backward pass needs both."""
    if x.dim() != 2:
        raise ValueError("mx_quantize_dual takes a 2-D tensor")
    return mx_quantize(x, -1, rounding), mx_quantize(x, 0, rounding)


# --- MoE twins ---------------------------------------------------------------------
# The meaning of kernels.moe_ffn (and of kernels.routing, which only reorders). Written
# per expert over the (token, choice) pairs p = t*k + j, with no slot layout.

MxWeight = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # fp weights, or (q, scales)


def function_weights(w_gate_up: MxWeight, w_down: MxWeight) -> tuple:
    """The weights as the MoE autograd Functions take them: (w_gate_up, w_down,
    wgu_q, wgu_s, wd_q, wd_s), full-precision ones or (q, scales) pairs, None for the
    other form (autograd Functions take tensors, not tuples)."""
    wgu_q, wgu_s = w_gate_up if isinstance(w_gate_up, tuple) else (None, None)
    wd_q, wd_s = w_down if isinstance(w_down, tuple) else (None, None)
    return (
        None if wgu_q is not None else w_gate_up,
        None if wd_q is not None else w_down,
        wgu_q,
        wgu_s,
        wd_q,
        wd_s,
    )


def mx_round_trip(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The fp32 values an MX operand blocked along `dim` holds: dequantize(quantize(x))."""
    return mx_dequantize(*mx_quantize(x, dim), dim=dim)


def moe_shapes(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w_gate_up: MxWeight,
    w_down: MxWeight,
    *,
    mx: bool = True,
) -> tuple[int, int, int, int, int]:
    """(T, k, D, F, E) of moe_ffn's arguments, or a ValueError/TypeError that says what
    is wrong (with `mx`, D and F must be multiples of the MX block). (Expert ids are
    checked against E by kernels.routing.check_expert_ids.)"""

    def shape(w: MxWeight, name: str) -> tuple[int, ...]:
        if isinstance(w, tuple):
            if len(w) != 2:
                raise TypeError(f"{name} must be a tensor or a (q, scales) pair")
            q, s = w
            if q.dim() != 3 or s.shape != (*q.shape[:2], q.shape[2] // MX_BLOCK):
                raise ValueError(
                    f"{name} (q {tuple(q.shape)}, scales {tuple(s.shape)}) is not MX-quantized "
                    f"along its last dim ([E, N, K] and [E, N, K // {MX_BLOCK}])"
                )
            return tuple(q.shape)
        if w.dim() != 3:
            raise ValueError(f"{name} must be 3-D, got shape {tuple(w.shape)}")
        return tuple(w.shape)

    if x.dim() != 2:
        raise ValueError(f"x must be [T, D], got shape {tuple(x.shape)}")
    T, D = x.shape
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T:
        raise ValueError(f"topk_ids must be [T={T}, k], got shape {tuple(topk_ids.shape)}")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype == torch.bool:
        raise TypeError(f"topk_ids must be an integer tensor, got {topk_ids.dtype}")
    if topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_weights {tuple(topk_weights.shape)} must match topk_ids {tuple(topk_ids.shape)}"
        )
    k = topk_ids.shape[1]
    E, F2, D1 = shape(w_gate_up, "w_gate_up")
    E2, D2, F = shape(w_down, "w_down")
    if mx and (D % MX_BLOCK or F % MX_BLOCK):
        raise ValueError(f"d_model ({D}) and d_ff ({F}) must be multiples of {MX_BLOCK} for MXFP8")
    if D1 != D or D2 != D:
        raise ValueError(
            f"x has d_model {D} but w_gate_up is {(E, F2, D1)} and w_down is {(E2, D2, F)}"
        )
    if F2 != 2 * F:
        raise ValueError(f"w_gate_up has {F2} rows per expert; need 2 * d_ff = {2 * F}")
    if E2 != E:
        raise ValueError(f"w_gate_up has {E} experts but w_down has {E2}")
    return T, k, D, F, E


def _weight_values(w: MxWeight, quantize: bool) -> torch.Tensor:
    """fp32 values a forward GEMM sees: MX along the last (contraction) dim."""
    if isinstance(w, tuple):
        return mx_dequantize(*w, dim=-1)
    return mx_round_trip(w, -1) if quantize else w.float()


def _segment_round_trip(a: torch.Tensor) -> torch.Tensor:
    """MX along the rows (the pairs of one expert, in p order) in blocks of 32, the last
    block zero-padded: what the weight-gradient GEMMs contract over."""
    n = a.shape[0]
    pad = -n % MX_BLOCK
    padded = torch.cat([a, a.new_zeros(pad, *a.shape[1:])]) if pad else a
    return mx_round_trip(padded, 0)[:n]


def _expert_pairs(ids: torch.Tensor, num_experts: int) -> list[torch.Tensor]:
    """For each expert, its pair indices p = t*k + j in increasing order."""
    return [torch.nonzero(ids == e).flatten() for e in range(num_experts)]


def _moe_forward(x, w_pair, ids, tok, k, wgu, wd, quantize):
    """y [T, D] fp32 and the pre-activations gu [N, 2F] fp32. x [T, D] fp32 (already MX
    when quantize), w_pair [N], ids/tok [N] (expert/token of pair p), wgu [E, 2F, D],
    wd [E, D, F] (the values the GEMMs see)."""
    T, N, F = x.shape[0], ids.shape[0], wd.shape[2]
    pairs = _expert_pairs(ids, wgu.shape[0])
    gu = x.new_zeros(N, 2 * F)  # [N, 2F]
    for e, p in enumerate(pairs):
        gu.index_copy_(0, p, x[tok[p]] @ wgu[e].T)
    g, u = gu[:, :F], gu[:, F:]
    h = torch.nn.functional.silu(g) * u  # [N, F]
    if quantize:
        h = mx_round_trip(h, -1)
    out = x.new_zeros(N, wd.shape[1])  # [N, D]
    for e, p in enumerate(pairs):
        out.index_copy_(0, p, (h[p] @ wd[e].T) * w_pair[p, None])
    return _sum_choices(out.view(T, k, -1)), gu


def _sum_choices(per_pair: torch.Tensor) -> torch.Tensor:
    """[T, k, D] -> [T, D], adding j = 0, 1, ... in order (as kernels.routing.combine)."""
    y = per_pair[:, 0]
    for j in range(1, per_pair.shape[1]):
        y = y + per_pair[:, j]
    return y


class _MoEMX(torch.autograd.Function):
    """moe_ffn with quantize=True. Forward: every GEMM operand MX along its contraction
    dim, fp32 math. Backward (straight-through: each quantize step is treated as the
    identity, but each backward GEMM again sees MX operands), for dY [T, D] and each
    pair p = t*k + j routed to expert e with weight w = topk_weights[t, j]:

      dh_raw[p] = MX_D(dY)[t] @ MX_D(W_down[e])                [F]  (W_down blocked along D)
      h[p]      = silu(g) * u of the forward's fp32 [g; u]      (unquantized)
      dw[t, j]  = <dh_raw[p], h[p]>                             (= <dY[t], W_down[e] h[p]>)
      dgu[p]    = SwiGLU'(g, u) applied to w * dh_raw[p]        [2F] (fp32)
      dx[t]     = sum over j, in order, of MX_2F(dgu)[p] @ MX_2F(W_gate_up[e])
      dW_down[e]    = MX_P(w * dY[t])^T @ MX_P(h)         over the pairs P of expert e
      dW_gate_up[e] = MX_P(dgu)^T @ MX_P(x[t])            (x: the unquantized input)

    MX_X(a) = dequantize(quantize(a)) blocked along X; MX_P blocks the pairs of one
    expert, in p order, by 32 (the last block zero-padded): the 32-aligned segments of
    kernels.routing. Pre-quantized weights ((q, s) given) get no gradient; their
    backward copies are MX of their dequantized values along the other dim.
    """

    @staticmethod
    def forward(ctx, x, topk_weights, topk_ids, w_gate_up, w_down, wgu_q, wgu_s, wd_q, wd_s):
        T, k = topk_ids.shape
        ids = topk_ids.reshape(-1).long()
        tok = torch.arange(T, device=x.device).repeat_interleave(k)
        wgu = _weight_values(w_gate_up if wgu_q is None else (wgu_q, wgu_s), True)
        wd = _weight_values(w_down if wd_q is None else (wd_q, wd_s), True)
        xq = mx_round_trip(x, -1)
        y, gu = _moe_forward(xq, topk_weights.reshape(-1).float(), ids, tok, k, wgu, wd, True)
        ctx.save_for_backward(
            x, topk_weights, topk_ids, gu, w_gate_up, w_down, wgu_q, wgu_s, wd_q, wd_s
        )
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, topk_weights, topk_ids, gu, w_gate_up, w_down, wgu_q, wgu_s, wd_q, wd_s = (
            ctx.saved_tensors
        )
        T, k = topk_ids.shape
        N, F = gu.shape[0], gu.shape[1] // 2
        ids = topk_ids.reshape(-1).long()
        tok = torch.arange(T, device=x.device).repeat_interleave(k)
        w_pair = topk_weights.reshape(-1).float()
        wgu = mx_dequantize(wgu_q, wgu_s) if wgu_q is not None else w_gate_up.float()
        wd = mx_dequantize(wd_q, wd_s) if wd_q is not None else w_down.float()
        pairs = _expert_pairs(ids, wgu.shape[0])

        dy = dy.float()
        dy_mx = mx_round_trip(dy, -1)  # [T, D] along D
        wd_mx = mx_round_trip(wd, 1)  # [E, D, F] along D
        dh_raw = gu.new_zeros(N, F)  # [N, F]
        for e, p in enumerate(pairs):
            dh_raw.index_copy_(0, p, dy_mx[tok[p]] @ wd_mx[e])
        g, u = gu[:, :F], gu[:, F:]
        sg = torch.sigmoid(g)
        silu = g * sg
        h = silu * u  # [N, F]
        dw = (dh_raw * h).sum(-1)  # [N]
        dh = dh_raw * w_pair[:, None]
        dgu = torch.cat([dh * u * sg * (1 + g * (1 - sg)), dh * silu], dim=1)  # [N, 2F]

        dx = dtw = dwg = dwd = None
        if ctx.needs_input_grad[0]:
            dgu_mx = mx_round_trip(dgu, -1)  # [N, 2F] along 2F
            wgu_mx = mx_round_trip(wgu, 1)  # [E, 2F, D] along 2F
            dx_pair = gu.new_zeros(N, x.shape[1])  # [N, D]
            for e, p in enumerate(pairs):
                dx_pair.index_copy_(0, p, dgu_mx[p] @ wgu_mx[e])
            dx = _sum_choices(dx_pair.view(T, k, -1)).to(x.dtype)
        if ctx.needs_input_grad[1]:
            dtw = dw.view(T, k).to(topk_weights.dtype)
        if ctx.needs_input_grad[3]:
            xf = x.float()
            dwg = torch.stack(
                [_segment_round_trip(dgu[p]).T @ _segment_round_trip(xf[tok[p]]) for p in pairs]
            ).to(w_gate_up.dtype)  # [E, 2F, D]
        if ctx.needs_input_grad[4]:
            do = dy[tok] * w_pair[:, None]  # [N, D]
            dwd = torch.stack(
                [_segment_round_trip(do[p]).T @ _segment_round_trip(h[p]) for p in pairs]
            ).to(w_down.dtype)  # [E, D, F]
        return dx, dtw, None, dwg, dwd, None, None, None, None


def moe_ffn(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w_gate_up: MxWeight,
    w_down: MxWeight,
    *,
    quantize: bool = True,
) -> torch.Tensor:
    """The meaning of kernels.moe_ffn: SwiGLU experts, weighted and summed.

    x [T, D], topk_weights [T, k], topk_ids [T, k] (int), w_gate_up [E, 2F, D] (gate
    rows first), w_down [E, D, F]; a weight may also be a pre-quantized (q, scales)
    pair, MX along its last dim (no gradient then). Returns y [T, D] in x's dtype:

        y[t] = sum_j w[t, j] * W_down[e] @ (silu(g) * u),  [g; u] = W_gate_up[e] @ x[t],
        e = topk_ids[t, j]

    quantize=True (the kernels' numerics): x, W_gate_up (along D), h = silu(g) * u and
    W_down (along F) pass through MX; fp32 math otherwise; differentiable as described
    in _MoEMX. quantize=False: the plain fp32 model under torch autograd (pre-quantized
    weights are dequantized), the baseline of the error budgets.
    """
    from kernels.routing import check_expert_ids

    T, k, _, _, E = moe_shapes(x, topk_weights, topk_ids, w_gate_up, w_down)
    check_expert_ids(topk_ids, E)
    if quantize:
        return _MoEMX.apply(x, topk_weights, topk_ids, *function_weights(w_gate_up, w_down))
    ids = topk_ids.reshape(-1).long()
    tok = torch.arange(T, device=x.device).repeat_interleave(k)
    wgu = _weight_values(w_gate_up, False)
    wd = _weight_values(w_down, False)
    y, _ = _moe_forward(x.float(), topk_weights.reshape(-1).float(), ids, tok, k, wgu, wd, False)
    return y.to(x.dtype)
