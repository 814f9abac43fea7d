"""The plain-torch path of MXFP8 quantize and dequantize (CPU without Triton).

Bit for bit the reference (tests hold them to it on the edge cases), but fast: torch's
own fp32 -> E4M3 cast rounds exactly as reference.encode_e4m3 for |v| <= 448, and the
scales are table look-ups, where the reference builds everything from bits.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels import reference

# 2^(s - 127) and 2^(127 - s) for each scale byte s, exactly (reference.pow2); the
# NaN byte 255 decodes to NaN.
_BYTES = torch.arange(256, dtype=torch.int32)
_SCALE = reference.pow2(_BYTES - reference.E8M0_BIAS).masked_fill(_BYTES == 255, float("nan"))
_INV_SCALE = reference.pow2(reference.E8M0_BIAS - _BYTES.clamp(max=254))


def quantize(x: Tensor, dim: int = -1, rounding: str = "rceil") -> tuple[Tensor, Tensor]:
    """reference.mx_quantize bit for bit, with torch's own fp32 -> E4M3 cast (about
    50x faster on CPU than encoding from bits)."""
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"mx_quantize takes float32, bfloat16 or float16, not {x.dtype}")
    if x.shape[dim] % reference.MX_BLOCK:
        raise ValueError(
            f"dimension {dim} has {x.shape[dim]} elements; MXFP8 needs a multiple of {reference.MX_BLOCK}"
        )
    moved = x.float().movedim(dim, -1)
    blocks = moved.reshape(*moved.shape[:-1], -1, reference.MX_BLOCK)  # [..., n // 32, 32]
    s = reference.scale_bytes(blocks.abs().amax(-1, keepdim=True), rounding)  # NaN/Inf -> 255
    v = (blocks * _INV_SCALE.to(x.device)[s]).clamp(-reference.E4M3_MAX, reference.E4M3_MAX)
    q = torch.where(s == reference.E8M0_NAN, 0x7F, v.to(torch.float8_e4m3fn).view(torch.uint8))
    q = q.reshape(moved.shape).movedim(-1, dim).contiguous().view(torch.float8_e4m3fn)
    return q, s.squeeze(-1).to(torch.uint8).movedim(-1, dim).contiguous()


def dequantize(q: Tensor, s: Tensor, dim: int = -1, dtype: torch.dtype = torch.float32) -> Tensor:
    """reference.mx_dequantize bit for bit, with a table look-up per scale (several
    times faster on CPU)."""
    moved = q.float().movedim(dim, -1)  # torch's E4M3 decode is exact
    blocks = moved.reshape(*moved.shape[:-1], -1, reference.MX_BLOCK)  # [..., n // 32, 32]
    scale = _SCALE.to(q.device)[s.movedim(dim, -1).long()]  # [..., n // 32]
    if scale.shape != blocks.shape[:-1]:
        raise ValueError(
            f"scales of shape {tuple(s.shape)} do not fit values of shape {tuple(q.shape)}"
        )
    values = (blocks * scale[..., None]).reshape(moved.shape).movedim(-1, dim)
    return values.to(dtype).contiguous()


def quantize_dual(
    x: Tensor, rounding: str = "rceil"
) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """Row-wise and column-wise copies of a 2-D tensor."""
    if x.dim() != 2:
        raise ValueError("mx_quantize_dual takes a 2-D tensor")
    return quantize(x, -1, rounding), quantize(x, 0, rounding)
