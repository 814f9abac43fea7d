"""MXFP8 kernels for the mixture-of-experts layers (DESIGN.md, "Kernels API").

Every public op dispatches: Triton on CUDA tensors or when TRITON_INTERPRET=1 (the
interpreter runs the same kernels on CPU, which is how CI tests them), else a torch
path on plain CPU. `kernels.reference` holds the meaning of each op.
"""

from __future__ import annotations

import os

import torch


def use_triton(*tensors: torch.Tensor) -> bool:
    """Triton for CUDA tensors, or for any tensor under the Triton interpreter."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return any(t.is_cuda for t in tensors)
