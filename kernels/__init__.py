"""MXFP8 kernels for the mixture-of-experts layers (DESIGN.md, "Kernels API").

Every public op dispatches: Triton on CUDA tensors or when TRITON_INTERPRET=1 (the
interpreter runs the same kernels on CPU, which is how CI tests them), else a torch
path on plain CPU (kernels.mx_torch, kernels.moe's torch backend; kernels.moe_ffn is
the one place the expert layer picks its path). `kernels.reference` holds the meaning
of each op, and MX_BLOCK, the MXFP8 block size.

Triton modules are imported on first use, so importing `kernels` stays cheap and a
CPU-only user never compiles anything.
"""

from __future__ import annotations

import os

import torch

from kernels import mx_torch
from kernels.reference import MX_BLOCK


def use_triton(*tensors: torch.Tensor) -> bool:
    """Triton for CUDA tensors, or for any tensor under the Triton interpreter."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return any(t.is_cuda for t in tensors)


def mx_quantize(
    x: torch.Tensor, dim: int = -1, rounding: str = "rceil"
) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP8 quantize along `dim`: (q float8_e4m3fn shaped like x, scales uint8 E8M0
    with x.shape[dim] // 32 along dim). rounding: "rceil" (no clipping) or "floor"."""
    if use_triton(x):
        from kernels import quantize as triton_ops

        return triton_ops.quantize(x, dim, rounding)
    return mx_torch.quantize(x, dim, rounding)


def mx_dequantize(
    q: torch.Tensor, scales: torch.Tensor, dim: int = -1, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The values of MXFP8 data: q * 2^(scale - 127) per block of 32 along `dim`."""
    if use_triton(q, scales):
        from kernels import quantize as triton_ops

        return triton_ops.dequantize(q, scales, dim, dtype)
    return mx_torch.dequantize(q, scales, dim, dtype)


def mx_quantize_dual(
    x: torch.Tensor, rounding: str = "rceil"
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Row-wise and column-wise MXFP8 copies of a 2-D tensor in one pass."""
    if use_triton(x):
        from kernels import quantize as triton_ops

        return triton_ops.quantize_dual(x, rounding)
    return mx_torch.quantize_dual(x, rounding)


from kernels.moe import moe_ffn  # noqa: E402  (it needs use_triton, defined above)

__all__ = ["MX_BLOCK", "moe_ffn", "mx_dequantize", "mx_quantize", "mx_quantize_dual", "use_triton"]
