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

BLOCK = 32
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
    if n % BLOCK:
        raise ValueError(f"dimension {dim} has {n} elements; MXFP8 needs a multiple of {BLOCK}")
    moved = x.movedim(dim, -1)
    return moved.reshape(*moved.shape[:-1], n // BLOCK, BLOCK), dim


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
