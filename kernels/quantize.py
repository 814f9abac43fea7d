"""MXFP8 quantize and dequantize along any dimension, and the dual (row- and
column-wise in one pass) variant the backward pass needs.

A tensor is viewed as [outer, N, inner] with the blocked dimension in the middle.
Each program takes BLOCK_R blocks of 32 values (a [BLOCK_R, 32] tile): block r is
(o, b, i) = r decomposed over [outer, N // 32, inner], so consecutive programs read
consecutive memory whether the blocked dimension is the last one (inner = 1: each
block is 32 contiguous values) or not (consecutive blocks are neighbours along
inner). Scales come out laid out [outer, N // 32, inner], i.e. exactly `x.shape`
with `N // 32` in place of `N` — the same as kernels.reference.mx_quantize.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._mx_triton import decode_e4m3, e8m0_scale, encode_e4m3, pow2
from kernels.reference import MX_BLOCK

_ROUNDINGS = ("rceil", "floor")


@triton.jit
def _block_offsets(r, j, N, INNER):
    """Element offsets of value j of block r in a contiguous [outer, N, inner] tensor."""
    blocks = N // 32
    inner = r % INNER
    b = (r // INNER) % blocks
    o = r // (INNER * blocks)
    return o * N * INNER + (b * 32 + j) * INNER + inner


@triton.jit
def _load_fp32(ptr, offsets, mask, BF16: tl.constexpr):
    """Values as fp32. bf16 arrives as its int16 bits and is widened by a shift, which
    keeps subnormals (a float cast may flush them)."""
    if BF16:
        raw = tl.load(ptr + offsets, mask=mask, other=0).to(tl.int32)
        return (raw << 16).to(tl.float32, bitcast=True)
    return tl.load(ptr + offsets, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _quantize_kernel(
    x_ptr, q_ptr, s_ptr, R, N, INNER,
    BLOCK_R: tl.constexpr, RCEIL: tl.constexpr, BF16: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R] block ids
    j = tl.arange(0, 32)
    live = r < R
    offsets = _block_offsets(r[:, None], j[None, :], N, INNER)  # [BLOCK_R, 32]
    x = _load_fp32(x_ptr, offsets, live[:, None], BF16)
    finite = tl.min(((x == x) & (tl.abs(x) != float("inf"))).to(tl.int32), axis=1) == 1
    amax = tl.where(finite, tl.max(tl.abs(x), axis=1), float("inf"))
    s = e8m0_scale(amax, RCEIL)  # [BLOCK_R]
    v = x * pow2(127 - s)[:, None]
    v = tl.minimum(tl.maximum(v, -448.0), 448.0)
    q = encode_e4m3(tl.where(finite[:, None], v, 0.0))
    q = tl.where(finite[:, None], q, 0x7F)
    tl.store(q_ptr + offsets, q.to(tl.uint8), mask=live[:, None])
    tl.store(s_ptr + r, s.to(tl.uint8), mask=live)


@triton.jit
def _dequantize_kernel(
    q_ptr, s_ptr, y_ptr, R, N, INNER, BLOCK_R: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    j = tl.arange(0, 32)
    live = r < R
    offsets = _block_offsets(r[:, None], j[None, :], N, INNER)
    q = tl.load(q_ptr + offsets, mask=live[:, None], other=0).to(tl.int32)
    s = tl.load(s_ptr + r, mask=live, other=0).to(tl.int32)
    y = decode_e4m3(q) * pow2(tl.minimum(s, 254) - 127)[:, None]  # 255: NaN below
    y = tl.where((s == 255)[:, None], float("nan"), y)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=live[:, None])


@triton.jit
def _quantize_dual_kernel(
    x_ptr, qr_ptr, sr_ptr, qc_ptr, sc_ptr, M, K, RCEIL: tl.constexpr, BF16: tl.constexpr,
):  # fmt: skip
    """One [32, 32] tile of a [M, K] tensor: row-wise blocks (along K) and
    column-wise blocks (along M) from a single read."""
    bm = tl.program_id(0)
    bk = tl.program_id(1)
    rows = bm * 32 + tl.arange(0, 32)
    cols = bk * 32 + tl.arange(0, 32)
    offsets = rows[:, None] * K + cols[None, :]
    x = _load_fp32(x_ptr, offsets, rows[:, None] < M, BF16)
    ok = ((x == x) & (tl.abs(x) != float("inf"))).to(tl.int32)
    # Row-wise: each row's 32 values along K.
    row_finite = tl.min(ok, axis=1) == 1
    s_row = e8m0_scale(tl.where(row_finite, tl.max(tl.abs(x), axis=1), float("inf")), RCEIL)
    v = tl.minimum(tl.maximum(x * pow2(127 - s_row)[:, None], -448.0), 448.0)
    q = tl.where(row_finite[:, None], encode_e4m3(tl.where(row_finite[:, None], v, 0.0)), 0x7F)
    tl.store(qr_ptr + offsets, q.to(tl.uint8))
    tl.store(sr_ptr + rows * (K // 32) + bk, s_row.to(tl.uint8))
    # Column-wise: each column's 32 values along M.
    col_finite = tl.min(ok, axis=0) == 1
    s_col = e8m0_scale(tl.where(col_finite, tl.max(tl.abs(x), axis=0), float("inf")), RCEIL)
    v = tl.minimum(tl.maximum(x * pow2(127 - s_col)[None, :], -448.0), 448.0)
    q = tl.where(col_finite[None, :], encode_e4m3(tl.where(col_finite[None, :], v, 0.0)), 0x7F)
    tl.store(qc_ptr + offsets, q.to(tl.uint8))
    tl.store(sc_ptr + bm * K + cols, s_col.to(tl.uint8))


def _view(shape: torch.Size, dim: int) -> tuple[int, int, int, int]:
    """(dim, outer, N, inner) of the [outer, N, inner] view around `dim`."""
    if not shape:
        raise ValueError("cannot quantize a 0-d tensor")
    dim = dim % len(shape)
    n = shape[dim]
    if n % MX_BLOCK:
        raise ValueError(f"dimension {dim} has {n} elements; MXFP8 needs a multiple of {MX_BLOCK}")
    outer = 1
    for size in shape[:dim]:
        outer *= size
    inner = 1
    for size in shape[dim + 1 :]:
        inner *= size
    return dim, outer, n, inner


def _rounding(rounding: str) -> bool:
    if rounding not in _ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; use 'rceil' or 'floor'")
    return rounding == "rceil"


def _check_float(x: torch.Tensor) -> None:
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"mx_quantize takes float32, bfloat16 or float16, not {x.dtype}")


def quantize(
    x: torch.Tensor, dim: int = -1, rounding: str = "rceil", block_r: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton mx_quantize (see kernels.reference.mx_quantize for the meaning)."""
    _check_float(x)
    rceil = _rounding(rounding)
    dim, outer, n, inner = _view(x.shape, dim)
    x = x.contiguous()
    q = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    scale_shape = list(x.shape)
    scale_shape[dim] = n // MX_BLOCK
    s = torch.empty(scale_shape, dtype=torch.uint8, device=x.device)
    blocks = outer * (n // MX_BLOCK) * inner
    if blocks:
        grid = (triton.cdiv(blocks, block_r),)
        bf16 = x.dtype == torch.bfloat16
        source = x.view(torch.int16) if bf16 else x
        _quantize_kernel[grid](
            source, q, s, blocks, n, inner, BLOCK_R=block_r, RCEIL=rceil, BF16=bf16
        )
    return q.view(torch.float8_e4m3fn), s


def dequantize(
    q: torch.Tensor,
    scales: torch.Tensor,
    dim: int = -1,
    dtype: torch.dtype = torch.float32,
    block_r: int = 64,
) -> torch.Tensor:
    """Triton mx_dequantize (see kernels.reference.mx_dequantize)."""
    dim, outer, n, inner = _view(q.shape, dim)
    expected = list(q.shape)
    expected[dim] = n // MX_BLOCK
    if list(scales.shape) != expected:
        raise ValueError(
            f"scales of shape {tuple(scales.shape)} do not fit values of shape {tuple(q.shape)}"
        )
    q = q.contiguous().view(torch.uint8)
    scales = scales.contiguous()
    y = torch.empty(q.shape, dtype=dtype, device=q.device)
    blocks = outer * (n // MX_BLOCK) * inner
    if blocks:
        grid = (triton.cdiv(blocks, block_r),)
        _dequantize_kernel[grid](q, scales, y, blocks, n, inner, BLOCK_R=block_r)
    return y


def quantize_dual(
    x: torch.Tensor, rounding: str = "rceil"
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Triton mx_quantize_dual: ((q, s) along the last dim, (q, s) along the first)."""
    _check_float(x)
    rceil = _rounding(rounding)
    if x.dim() != 2:
        raise ValueError("mx_quantize_dual takes a 2-D tensor")
    m, k = x.shape
    if m % MX_BLOCK or k % MX_BLOCK:
        raise ValueError(f"mx_quantize_dual needs both sides multiples of {MX_BLOCK}, got {m}x{k}")
    x = x.contiguous()
    q_row = torch.empty((m, k), dtype=torch.uint8, device=x.device)
    s_row = torch.empty((m, k // MX_BLOCK), dtype=torch.uint8, device=x.device)
    q_col = torch.empty((m, k), dtype=torch.uint8, device=x.device)
    s_col = torch.empty((m // MX_BLOCK, k), dtype=torch.uint8, device=x.device)
    if m and k:
        bf16 = x.dtype == torch.bfloat16
        _quantize_dual_kernel[(m // MX_BLOCK, k // MX_BLOCK)](
            x.view(torch.int16) if bf16 else x, q_row, s_row, q_col, s_col, m, k,
            RCEIL=rceil, BF16=bf16,
        )  # fmt: skip
    fp8 = torch.float8_e4m3fn
    return (q_row.view(fp8), s_row), (q_col.view(fp8), s_col)
