"""MXFP8 arithmetic shared by the Triton kernels, from bits: the E8M0 scale of a
block maximum, exact powers of two, and E4M3 encode/decode.

Done with integer operations rather than Triton's fp8 casts so that every backend
(GPU, or the CPU interpreter CI uses, whose fp8 cast rounds differently) produces the
bytes kernels/reference.py defines. The reference's functions of the same names are
the specification; the tests compare them bit for bit.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def e8m0_scale(amax, RCEIL: tl.constexpr):
    """E8M0 scale byte (int32) of fp32 block maxima: 2^(e-8), or 2^(e-7) under RCEIL
    when the mantissa exceeds 1.75 (448 = 1.75 * 2^8); 0 for zero or subnormal
    maxima, 255 (NaN) for NaN or Inf."""
    bits = amax.to(tl.int32, bitcast=True)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    s = exponent - 8
    if RCEIL:
        s += (mantissa > 0x600000).to(tl.int32)
    s = tl.minimum(tl.maximum(s, 0), 254)
    s = tl.where(exponent == 0, 0, s)
    return tl.where(exponent == 0xFF, 255, s)


@triton.jit
def pow2(e):
    """2^e for int32 e in -254..254, exactly, from two normal fp32 factors (2^-127
    and below are subnormal, which some hardware flushes to zero)."""
    half = e >> 1  # arithmetic shift: floor(e / 2)
    rest = e - half
    a = ((half + 127) << 23).to(tl.float32, bitcast=True)
    b = ((rest + 127) << 23).to(tl.float32, bitcast=True)
    return a * b


@triton.jit
def encode_e4m3(v):
    """E4M3 bytes (int32) of fp32 values with |v| <= 448, round to nearest even."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = tl.abs(v)
    abits = a.to(tl.int32, bitcast=True)
    exponent = (abits >> 23) - 127
    mantissa = abits & 0x7FFFFF
    kept = mantissa >> 20
    rest = mantissa & 0xFFFFF
    up = (rest > 0x80000) | ((rest == 0x80000) & ((kept & 1) == 1))
    normal = ((exponent + 7) << 3) + kept + up.to(tl.int32)
    # Below 2^-6: multiples of 2^-9 (exact in fp32), rounded to nearest even.
    scaled = a * 512.0
    whole = tl.floor(scaled)
    frac = scaled - whole
    w = whole.to(tl.int32)
    sub = w + ((frac > 0.5) | ((frac == 0.5) & ((w & 1) == 1))).to(tl.int32)
    return sign | tl.where(a >= 0.015625, normal, sub)


@triton.jit
def decode_e4m3(b):
    """fp32 values of E4M3 bytes (int32 0..255); 0x7F/0xFF are NaN."""
    exponent = (b >> 3) & 0xF
    mantissa = b & 0x7
    normal = (((exponent + 120) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
    sub = mantissa.to(tl.float32) * 0.001953125
    magnitude = tl.where(exponent == 0, sub, normal)
    magnitude = tl.where((b & 0x7F) == 0x7F, float("nan"), magnitude)
    return tl.where((b & 0x80) != 0, -magnitude, magnitude)
