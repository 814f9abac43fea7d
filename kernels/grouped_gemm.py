"""Grouped GEMMs with MXFP8 operands over the expert-sorted slot layout of
kernels.routing: the two forward GEMMs of the expert FFN (the token gather fused into
the first, SwiGLU and MX re-quantization in its epilogue; the routing-weight multiply
in the second's), the two input gradients, and the weight gradient (contraction along
each expert's token segment).

Layout: S slots; expert e owns slots offsets[e]:offsets[e+1] (int64 [E + 1], every
offset a multiple of 32, offsets[E] <= S; slots past offsets[E] belong to no expert
and come out zero). token[S] is the source row of each slot (T for a padding slot,
whose outputs are zero). MX operands are (q float8_e4m3fn, scales uint8 E8M0) with
blocks of 32 along the named dim, as kernels.reference.mx_quantize makes them.

Tiles along the slot dim never straddle two experts: with BLOCK_M rows per tile,
expert e has cdiv(count_e, BLOCK_M) tiles, and program m finds its expert and tile
in-kernel from a prefix sum over the E + 1 offsets (`_expert_tile`). The grid is sized
from shapes alone (there are at most min(cdiv(S, BLOCK_M) + E, S // 32) tiles), so
nothing waits on the host; programs past the last tile exit at once.

The product of two MX tiles (`_mx_dot`) has three variants (the `TACHY_MX_DOT`
environment variable picks one; "auto" is the default):
- "dequant" (Hopper, and the interpreter): decode FP8 to fp32, multiply each 32-block
  by its power-of-two scale, cast to BF16 and use a BF16 dot with fp32 accumulation.
  An E4M3 value (4 significant bits) times 2^k is exact in BF16 (8 bits) and BF16
  products are exact in fp32, so only the fp32 summation order differs from
  dequantize-then-fp32-matmul. Under the interpreter the dot is fp32 instead: its
  tl.dot multiplies BF16 tensors as their raw uint16 bits.
- "fp8" (EXPERIMENT, never run on a GPU): an FP8 tl.dot per 32-wide K block, its fp32
  partial product scaled by both blocks' scales and added to the accumulator.
- "scaled" (Blackwell, capability >= 10; "auto" picks it there; NEVER RUN on a GPU):
  tl.dot_scaled with E4M3 values and E8M0 scales.
All three run under the interpreter in the tests and compile for sm_90a and sm_100a
(checked without a GPU); none has run on a GPU or been timed.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from kernels._mx_triton import e8m0_scale, encode_e4m3, pow2
from kernels.reference import MX_BLOCK

_MODES = {"dequant": 0, "fp8": 1, "scaled": 2}

# Tile sizes. Under the interpreter each program costs numpy calls, so tiles are as
# large as the small test shapes allow; BLOCK_M = 64 (two MX blocks) also makes the
# tests cover experts whose last tile is a partial one. The GPU sizes are a first
# guess, not tuned and never run: compiled for sm_90a without a GPU, they use BF16
# wgmma and do not spill registers (ptxas -v).
INTERPRETER_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 1}
GPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
# The gate/up kernel holds two accumulators: half as wide.
GPU_GATE_UP_CONFIG = {**GPU_CONFIG, "BLOCK_N": 64}


# ----------------------------------------------------------------------------------
# Shared device functions


@triton.jit
def _expert_tile(pid, offsets_ptr, E, BLOCK_M: tl.constexpr, E_POW2: tl.constexpr):
    """(expert, first row, end row) of tile `pid` in the slot layout; the rows are
    empty (first >= end) for a program past the last tile."""
    idx = tl.arange(0, E_POW2)
    live = idx < E
    lo = tl.load(offsets_ptr + idx, mask=live, other=0)
    hi = tl.load(offsets_ptr + idx + 1, mask=live, other=0)
    tiles = (hi - lo + BLOCK_M - 1) // BLOCK_M
    last = tl.cumsum(tiles, 0)  # tiles of experts 0..e together
    e = tl.sum((last <= pid).to(tl.int32), 0)  # experts wholly before this tile
    pick = idx == e
    first = tl.sum(tl.where(pick, lo + (pid - (last - tiles)) * BLOCK_M, 0), 0)
    end = tl.sum(tl.where(pick, hi, 0), 0)
    return e.to(tl.int64), first, end


@triton.jit
def _decode(bits, INTERPRET: tl.constexpr):
    """fp32 values of E4M3 bytes (uint8). The hardware cast decodes 0x7F/0xFF as NaN;
    the interpreter's reads them as 480, so it gets the NaN explicitly."""
    v = bits.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    if INTERPRET:
        v = tl.where((bits & 0x7F) == 0x7F, float("nan"), v)
    return v


@triton.jit
def _scale_factor(s):
    """2^(s - 127) of E8M0 bytes (uint8), NaN for byte 255."""
    return tl.where(s == 255, float("nan"), pow2(tl.minimum(s.to(tl.int32), 254) - 127))


@triton.jit
def _mx_dot(
    acc, a_bits, a_s, b_bits, b_s,
    MODE: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """acc + A @ B for MX tiles: A bits [BLOCK_M, BLOCK_K] with scales a_s
    [BLOCK_M, BLOCK_K // 32] (blocks along K), B bits [BLOCK_K, BLOCK_N] with scales
    b_s [BLOCK_K // 32, BLOCK_N]. Masked-off elements must come in as zero bytes."""
    KB: tl.constexpr = BLOCK_K // 32
    if MODE == 0:  # dequantize in registers, then a BF16 (fp32 in the interpreter) dot
        fa = tl.broadcast_to(_scale_factor(a_s)[:, :, None], (BLOCK_M, KB, 32))
        a = _decode(a_bits, INTERPRET) * tl.reshape(fa, (BLOCK_M, BLOCK_K))
        fb = tl.broadcast_to(_scale_factor(b_s)[:, None, :], (KB, 32, BLOCK_N))
        b = _decode(b_bits, INTERPRET) * tl.reshape(fb, (BLOCK_K, BLOCK_N))
        if INTERPRET:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
    elif MODE == 1:  # EXPERIMENT (untested on a GPU): FP8 dot per 32-block, scaled after
        tl.static_assert(BLOCK_K == 32, "the fp8 variant takes one MX block per step")
        part = tl.dot(
            a_bits.to(tl.float8e4nv, bitcast=True), b_bits.to(tl.float8e4nv, bitcast=True)
        )
        sa = tl.reshape(a_s, (BLOCK_M,)).to(tl.int32)
        sb = tl.reshape(b_s, (BLOCK_N,)).to(tl.int32)
        f = pow2(sa[:, None] + sb[None, :] - 254)
        f = tl.where((sa[:, None] == 255) | (sb[None, :] == 255), float("nan"), f)
        acc += part * f
    else:  # Blackwell (untested on a GPU): MX tensor cores
        acc = tl.dot_scaled(
            a_bits.to(tl.float8e4nv, bitcast=True), a_s, "e4m3",
            b_bits.to(tl.float8e4nv, bitcast=True), tl.trans(b_s), "e4m3", acc,
        )  # fmt: skip
    return acc


@triton.jit
def _load_rows(q_ptr, s_ptr, rows, row_ok, k0, K, BLOCK_K: tl.constexpr):
    """Bits [R, BLOCK_K] and scales [R, BLOCK_K // 32] of rows of a row-major [*, K]
    MX tensor blocked along K (scales [*, K // 32]), from column k0."""
    k = k0 + tl.arange(0, BLOCK_K)
    kb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    bits = tl.load(
        q_ptr + rows[:, None] * K + k[None, :], mask=row_ok[:, None] & (k < K)[None, :], other=0
    )
    s = tl.load(
        s_ptr + rows[:, None] * (K // 32) + kb[None, :],
        mask=row_ok[:, None] & (kb < K // 32)[None, :],
        other=0,
    )
    return bits, s


@triton.jit
def _load_b(
    q_ptr, s_ptr, k0, K, cols, col_ok, stride_k, stride_n, s_stride_k, s_stride_n,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    """Bits [BLOCK_K, N-tile] and scales [BLOCK_K // 32, N-tile] of one expert's B
    operand, element (k, n) at k * stride_k + n * stride_n, blocked along K."""
    k = k0 + tl.arange(0, BLOCK_K)
    kb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    bits = tl.load(
        q_ptr + k[:, None] * stride_k + cols[None, :] * stride_n,
        mask=(k < K)[:, None] & col_ok[None, :],
        other=0,
    )
    s = tl.load(
        s_ptr + kb[:, None] * s_stride_k + cols[None, :] * s_stride_n,
        mask=(kb < K // 32)[:, None] & col_ok[None, :],
        other=0,
    )
    return bits, s


# ----------------------------------------------------------------------------------
# Kernels


@triton.jit
def _gate_up_swiglu_kernel(
    x_ptr, xs_ptr, token_ptr, w_ptr, ws_ptr, offsets_ptr, hq_ptr, hs_ptr, pre_ptr,
    T, E, F, D,
    SAVE_PREACT: tl.constexpr, MODE: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    E_POW2: tl.constexpr,
):  # fmt: skip
    """One [BLOCK_M slots, BLOCK_N of F] tile: gate and up accumulators over D with
    the x rows gathered by token, then h = silu(g) * u quantized along F."""
    e, first, end = _expert_tile(tl.program_id(0), offsets_ptr, E, BLOCK_M, E_POW2)
    if first >= end:
        return
    rows = first + tl.arange(0, BLOCK_M)
    live = rows < end
    tok = tl.load(token_ptr + rows, mask=live, other=T)
    has_token = tok < T  # padding slots read nothing and so come out zero
    tok = tl.where(has_token, tok, 0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < F
    w_e = w_ptr + e * (2 * F) * D
    ws_e = ws_ptr + e * (2 * F) * (D // 32)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        a_bits, a_s = _load_rows(x_ptr, xs_ptr, tok, has_token, k0, D, BLOCK_K)
        # W[e] is [2F, D] blocked along D: element (k, n) of B = W^T at n * D + k.
        g_bits, g_s = _load_b(w_e, ws_e, k0, D, cols, col_ok, 1, D, 1, D // 32, BLOCK_K)
        u_bits, u_s = _load_b(
            w_e + F * D, ws_e + F * (D // 32), k0, D, cols, col_ok, 1, D, 1, D // 32, BLOCK_K
        )
        acc_g = _mx_dot(acc_g, a_bits, a_s, g_bits, g_s, MODE, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K)
        acc_u = _mx_dot(acc_u, a_bits, a_s, u_bits, u_s, MODE, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K)

    out_ok = live[:, None] & col_ok[None, :]
    if SAVE_PREACT:
        pre = pre_ptr + rows[:, None] * (2 * F) + cols[None, :]
        tl.store(pre, acc_g, mask=out_ok)
        tl.store(pre + F, acc_u, mask=out_ok)

    # SwiGLU, then MX quantization along F (RCEIL), as kernels.reference.mx_quantize.
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    NB: tl.constexpr = BLOCK_N // 32
    h = tl.reshape(h, (BLOCK_M, NB, 32))
    ok = (h == h) & (tl.abs(h) != float("inf"))
    finite = tl.min(ok.to(tl.int32), axis=2) == 1
    amax = tl.where(finite, tl.max(tl.where(ok, tl.abs(h), 0.0), axis=2), float("inf"))
    s = e8m0_scale(amax, True)  # [BLOCK_M, NB]
    v = h * pow2(127 - s)[:, :, None]
    v = tl.minimum(tl.maximum(v, -448.0), 448.0)
    q = encode_e4m3(tl.where(finite[:, :, None], v, 0.0))
    q = tl.where(finite[:, :, None], q, 0x7F)
    q = tl.reshape(q, (BLOCK_M, BLOCK_N))
    tl.store(hq_ptr + rows[:, None] * F + cols[None, :], q.to(tl.uint8), mask=out_ok)
    sb = tl.program_id(1) * NB + tl.arange(0, NB)
    tl.store(
        hs_ptr + rows[:, None] * (F // 32) + sb[None, :],
        s.to(tl.uint8),
        mask=live[:, None] & (sb < F // 32)[None, :],
    )


@triton.jit
def _grouped_mm_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, offsets_ptr, weight_ptr, c_ptr,
    E, N, K,
    stride_be, stride_bk, stride_bn, stride_bse, stride_bsk, stride_bsn,
    WEIGHTED: tl.constexpr, MODE: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    E_POW2: tl.constexpr,
):  # fmt: skip
    """c[i] = (weight[i] *) a[i] @ B[e] for the slots i of expert e: a [S, K] blocked
    along K (scales [S, K // 32]); B[e] [K, N] blocked along K, addressed by strides
    (scales (kb, n) at e * stride_bse + kb * stride_bsk + n * stride_bsn)."""
    e, first, end = _expert_tile(tl.program_id(0), offsets_ptr, E, BLOCK_M, E_POW2)
    if first >= end:
        return
    rows = first + tl.arange(0, BLOCK_M)
    live = rows < end
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    b_e = b_ptr + e * stride_be
    bs_e = bs_ptr + e * stride_bse
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a_bits, a_s = _load_rows(a_ptr, as_ptr, rows, live, k0, K, BLOCK_K)
        b_bits, b_s = _load_b(
            b_e, bs_e, k0, K, cols, col_ok, stride_bk, stride_bn, stride_bsk, stride_bsn, BLOCK_K
        )
        acc = _mx_dot(acc, a_bits, a_s, b_bits, b_s, MODE, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K)
    if WEIGHTED:
        acc = acc * tl.load(weight_ptr + rows, mask=live, other=0.0)[:, None]
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=live[:, None] & col_ok[None, :])


@triton.jit
def _weight_grad_kernel(
    a_ptr, as_ptr, b_ptr, bs_ptr, offsets_ptr, c_ptr, M, N,
    MODE: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """dW[e][m, n] = sum over the slots i of expert e of a[i, m] * b[i, n]: a [S, M]
    and b [S, N] both blocked along S (scales [S // 32, M] and [S // 32, N])."""
    e = tl.program_id(0).to(tl.int64)
    tiles_n = tl.cdiv(N, BLOCK_N)
    m = (tl.program_id(1) // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = (tl.program_id(1) % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = m < M
    n_ok = n < N
    first = tl.load(offsets_ptr + e)
    end = tl.load(offsets_ptr + e + 1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i0 in range(first, end, BLOCK_K):  # an empty segment leaves zeros
        i = i0 + tl.arange(0, BLOCK_K)
        ib = i0 // 32 + tl.arange(0, BLOCK_K // 32)
        i_ok = i < end
        ib_ok = ib < end // 32
        # A operand = a^T: [BLOCK_M, BLOCK_K] read transposed.
        a_bits = tl.load(
            a_ptr + i[None, :] * M + m[:, None], mask=m_ok[:, None] & i_ok[None, :], other=0
        )
        a_s = tl.load(
            as_ptr + ib[None, :] * M + m[:, None], mask=m_ok[:, None] & ib_ok[None, :], other=0
        )
        b_bits, b_s = _load_b(b_ptr, bs_ptr, i0, end, n, n_ok, N, 1, N, 1, BLOCK_K)
        acc = _mx_dot(acc, a_bits, a_s, b_bits, b_s, MODE, INTERPRET, BLOCK_M, BLOCK_N, BLOCK_K)
    out = c_ptr + e * M * N + m[:, None] * N + n[None, :]
    tl.store(out, acc, mask=m_ok[:, None] & n_ok[None, :])


# ----------------------------------------------------------------------------------
# Launchers


@functools.cache
def _capability(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def dot_mode(device: torch.device) -> str:
    """The MX product variant for tensors on `device`: TACHY_MX_DOT if set to one of
    "dequant", "fp8", "scaled"; else ("auto") "scaled" on Blackwell (capability >= 10),
    "dequant" elsewhere (Hopper, older GPUs, the interpreter)."""
    mode = os.environ.get("TACHY_MX_DOT", "auto")
    if mode == "auto":
        if device.type == "cuda" and _capability(device.index or 0) >= 10:
            return "scaled"
        return "dequant"
    if mode not in _MODES:
        raise ValueError(f"TACHY_MX_DOT={mode!r}; use 'auto', 'dequant', 'fp8' or 'scaled'")
    return mode


def _launch_options(device: torch.device, gate_up: bool = False) -> dict:
    """Tile sizes, mode and the interpreter flag for a launch on `device`."""
    mode = dot_mode(device)
    interpret = device.type != "cuda"
    if interpret:
        config = dict(INTERPRETER_CONFIG)
    else:
        config = dict(GPU_GATE_UP_CONFIG if gate_up else GPU_CONFIG)
    if mode == "fp8":
        config["BLOCK_K"] = 32
    return {"MODE": _MODES[mode], "INTERPRET": interpret, **config}


def _check_mx(name: str, q: torch.Tensor, s: torch.Tensor, shape: tuple, scale_shape: tuple):
    if q.dtype != torch.float8_e4m3fn:
        raise TypeError(f"{name}_q must be float8_e4m3fn, not {q.dtype}")
    if s.dtype != torch.uint8:
        raise TypeError(f"{name}_s must be uint8 E8M0 scales, not {s.dtype}")
    if tuple(q.shape) != tuple(shape):
        raise ValueError(f"{name}_q has shape {tuple(q.shape)}, expected {tuple(shape)}")
    if tuple(s.shape) != tuple(scale_shape):
        raise ValueError(
            f"{name}_s has shape {tuple(s.shape)}, expected {tuple(scale_shape)} "
            f"(MX scales for {name}_q of shape {tuple(q.shape)})"
        )


def _check_multiple(**sizes: int) -> None:
    for name, size in sizes.items():
        if size % MX_BLOCK:
            raise ValueError(f"{name} = {size} must be a multiple of {MX_BLOCK} (one MX block)")


def _check_2d(name: str, t: torch.Tensor) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")


def _check_3d(name: str, t: torch.Tensor) -> None:
    if t.dim() != 3:
        raise ValueError(f"{name} must be 3-D [E, rows, cols], got shape {tuple(t.shape)}")


def _check_offsets(offsets: torch.Tensor, num_experts: int) -> None:
    if offsets.dim() != 1 or offsets.shape[0] != num_experts + 1:
        raise ValueError(
            f"offsets must have E + 1 = {num_experts + 1} entries, got shape {tuple(offsets.shape)}"
        )
    if offsets.dtype != torch.int64:
        raise TypeError(f"offsets must be int64, not {offsets.dtype}")


def _check_slots(name: str, t: torch.Tensor, num_slots: int, dtype: torch.dtype) -> None:
    if t.dim() != 1 or t.shape[0] != num_slots:
        raise ValueError(f"{name} must have S = {num_slots} entries, got shape {tuple(t.shape)}")
    if t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, not {t.dtype}")


def _check_device(*tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"all operands must be on one device, got {sorted(map(str, devices))}")


def _u8(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _tiles_m(num_slots: int, num_experts: int, block_m: int) -> int:
    """Most tiles the slot layout can need: each expert adds at most one partial tile,
    and every tile holds at least one 32-block."""
    return min(triton.cdiv(num_slots, block_m) + num_experts, num_slots // MX_BLOCK)


def gate_up_swiglu(x_q, x_s, token, offsets, w_q, w_s, *, save_preact: bool):
    """(h_q [S, F] float8_e4m3fn, h_s [S, F // 32] uint8, preact [S, 2F] fp32 or None).

    Slot i of expert e: gu = x[token[i]] @ W[e]^T accumulated in fp32, [g | u] =
    gu; h = silu(g) * u quantized along F (RCEIL, as kernels.reference.mx_quantize).
    x_q [T, D] with x_s [T, D // 32]; w_q [E, 2F, D] (gate rows first) with w_s
    [E, 2F, D // 32]. Padding slots (token T) and slots past offsets[E] are zeros.
    """
    _check_2d("x_q", x_q)
    _check_3d("w_q", w_q)
    T, D = x_q.shape
    E, two_f, _ = w_q.shape
    F = two_f // 2
    if token.dim() != 1:
        raise ValueError(f"token must be 1-D [S], got shape {tuple(token.shape)}")
    S = token.shape[0]
    if two_f != 2 * F:
        raise ValueError(f"w_q has {two_f} rows; expected 2F (gate rows, then up rows)")
    _check_multiple(S=S, D=D, F=F)
    _check_mx("x", x_q, x_s, (T, D), (T, D // MX_BLOCK))
    _check_mx("w", w_q, w_s, (E, 2 * F, D), (E, 2 * F, D // MX_BLOCK))
    _check_slots("token", token, S, torch.int64)
    _check_offsets(offsets, E)
    _check_device(x_q, x_s, token, offsets, w_q, w_s)
    device = x_q.device
    h_q = torch.zeros((S, F), dtype=torch.uint8, device=device)
    h_s = torch.zeros((S, F // MX_BLOCK), dtype=torch.uint8, device=device)
    preact = torch.zeros((S, 2 * F), dtype=torch.float32, device=device) if save_preact else None
    if S and F:
        opts = _launch_options(device, gate_up=True)
        grid = (_tiles_m(S, E, opts["BLOCK_M"]), triton.cdiv(F, opts["BLOCK_N"]))
        _gate_up_swiglu_kernel[grid](
            _u8(x_q), x_s.contiguous(), token.contiguous(), _u8(w_q), w_s.contiguous(),
            offsets.contiguous(), h_q, h_s, preact if save_preact else h_q,
            T, E, F, D, SAVE_PREACT=save_preact, E_POW2=triton.next_power_of_2(E), **opts,
        )  # fmt: skip
    return h_q.view(torch.float8_e4m3fn), h_s, preact


def _grouped_mm(a_q, a_s, b_q, b_s, offsets, weight, n, b_strides, bs_strides):
    """Launch _grouped_mm_kernel: out [S, n] fp32 (zeros outside every segment)."""
    S, K = a_q.shape
    E = b_q.shape[0]
    out = torch.zeros((S, n), dtype=torch.float32, device=a_q.device)
    if S and n:
        opts = _launch_options(a_q.device)
        grid = (_tiles_m(S, E, opts["BLOCK_M"]), triton.cdiv(n, opts["BLOCK_N"]))
        weighted = weight is not None
        _grouped_mm_kernel[grid](
            _u8(a_q), a_s.contiguous(), _u8(b_q), b_s.contiguous(), offsets.contiguous(),
            weight.contiguous() if weighted else out, out,
            E, n, K, *b_strides, *bs_strides,
            WEIGHTED=weighted, E_POW2=triton.next_power_of_2(E), **opts,
        )  # fmt: skip
    return out


def down_weighted(h_q, h_s, w_q, w_s, offsets, weight):
    """out_slots [S, D] fp32: out_slots[i] = weight[i] * (h[i] @ W_down[e]^T).

    h_q [S, F] with h_s [S, F // 32]; w_q [E, D, F] blocked along F (w_s
    [E, D, F // 32]); weight [S] fp32 (0 for padding slots).
    """
    _check_2d("h_q", h_q)
    _check_3d("w_q", w_q)
    S, F = h_q.shape
    E, D, _ = w_q.shape
    _check_multiple(S=S, D=D, F=F)
    _check_mx("h", h_q, h_s, (S, F), (S, F // MX_BLOCK))
    _check_mx("w", w_q, w_s, (E, D, F), (E, D, F // MX_BLOCK))
    _check_offsets(offsets, E)
    _check_slots("weight", weight, S, torch.float32)
    _check_device(h_q, h_s, w_q, w_s, offsets, weight)
    # B[e] = W_down[e]^T: element (f, d) at d * F + f; scale (fb, d) at d * (F // 32) + fb.
    return _grouped_mm(
        h_q,
        h_s,
        w_q,
        w_s,
        offsets,
        weight,
        D,
        (D * F, 1, F),
        (D * (F // MX_BLOCK), 1, F // MX_BLOCK),
    )


def grad_down(dy_q, dy_s, w_q, w_s, offsets):
    """dh [S, F] fp32: dh[i] = dy[i] @ W_down[e].

    dy_q [S, D] with dy_s [S, D // 32]; W_down blocked along D (the column-wise copy):
    w_q [E, D, F] with w_s [E, D // 32, F].
    """
    _check_2d("dy_q", dy_q)
    _check_3d("w_q", w_q)
    S, D = dy_q.shape
    E, _, F = w_q.shape
    _check_multiple(S=S, D=D, F=F)
    _check_mx("dy", dy_q, dy_s, (S, D), (S, D // MX_BLOCK))
    _check_mx("w", w_q, w_s, (E, D, F), (E, D // MX_BLOCK, F))
    _check_offsets(offsets, E)
    _check_device(dy_q, dy_s, w_q, w_s, offsets)
    return _grouped_mm(
        dy_q, dy_s, w_q, w_s, offsets, None, F, (D * F, F, 1), ((D // MX_BLOCK) * F, F, 1)
    )


def grad_gate_up(dgu_q, dgu_s, w_q, w_s, offsets):
    """dx_slots [S, D] fp32: dx_slots[i] = dgu[i] @ W_gate_up[e].

    dgu_q [S, 2F] with dgu_s [S, 2F // 32]; W_gate_up blocked along 2F (the
    column-wise copy): w_q [E, 2F, D] with w_s [E, 2F // 32, D].
    """
    _check_2d("dgu_q", dgu_q)
    _check_3d("w_q", w_q)
    S, two_f = dgu_q.shape
    E, _, D = w_q.shape
    _check_multiple(S=S, D=D, F=two_f // 2)
    if two_f % (2 * MX_BLOCK):
        raise ValueError(f"dgu_q has {two_f} columns; expected 2F with F a multiple of {MX_BLOCK}")
    _check_mx("dgu", dgu_q, dgu_s, (S, two_f), (S, two_f // MX_BLOCK))
    _check_mx("w", w_q, w_s, (E, two_f, D), (E, two_f // MX_BLOCK, D))
    _check_offsets(offsets, E)
    _check_device(dgu_q, dgu_s, w_q, w_s, offsets)
    return _grouped_mm(
        dgu_q, dgu_s, w_q, w_s, offsets, None, D, (two_f * D, D, 1), ((two_f // MX_BLOCK) * D, D, 1)
    )


def weight_grad(a_q, a_s, b_q, b_s, offsets, num_experts):
    """dW [E, M, N] fp32: dW[e] = sum over the slots i of expert e of a[i]^T b[i].

    a_q [S, M] and b_q [S, N], both blocked along the slot dim S (a_s [S // 32, M],
    b_s [S // 32, N]); an expert with no slots gets zeros.
    """
    _check_2d("a_q", a_q)
    _check_2d("b_q", b_q)
    S, M = a_q.shape
    N = b_q.shape[1]
    _check_multiple(S=S)
    _check_mx("a", a_q, a_s, (S, M), (S // MX_BLOCK, M))
    _check_mx("b", b_q, b_s, (S, N), (S // MX_BLOCK, N))
    _check_offsets(offsets, num_experts)
    _check_device(a_q, a_s, b_q, b_s, offsets)
    out = torch.empty((num_experts, M, N), dtype=torch.float32, device=a_q.device)
    if num_experts and M and N:
        opts = _launch_options(a_q.device)
        grid = (num_experts, triton.cdiv(M, opts["BLOCK_M"]) * triton.cdiv(N, opts["BLOCK_N"]))
        _weight_grad_kernel[grid](
            _u8(a_q), a_s.contiguous(), _u8(b_q), b_s.contiguous(), offsets.contiguous(), out,
            M, N, **opts,
        )  # fmt: skip
    return out
