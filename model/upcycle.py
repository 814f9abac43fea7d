"""Sparse upcycling: a dense model's MLPs become MoE layers that compute the same thing.

    config, state = upcycle(dense_config, dense_state, Upcycle(experts=8, top_k=2))

Each dense SwiGLU MLP (gate/up/down) becomes E experts that all start as copies of it,
with a router of small random weights (seeded, so the result is reproducible) and
top-k routing with renormalised weights. Whatever experts the router picks, the
renormalised weights sum to one over identical experts, so at step 0 the upcycled
layer is the dense MLP exactly in fp32 (and within MXFP8 rounding with MXFP8 experts).
Training then lets the copies drift apart: tokens routed differently send different
gradients to their experts (Komatsuzaki et al., "Sparse Upcycling", 2022).

Attention, norms, embeddings and the head are the dense model's, untouched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from model.config import ModelConfig


@dataclass(frozen=True)
class Upcycle:
    experts: int = 8
    top_k: int = 2
    router_std: float = 0.02  # the routers' init: N(0, std), from `seed`
    seed: int = 0

    def check(self) -> None:
        if self.experts < 2:
            raise ValueError(f"upcycling needs 2 or more experts, not {self.experts}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k must be in 1..{self.experts}, not {self.top_k}")
        if self.router_std < 0:
            raise ValueError(f"router_std must be >= 0, not {self.router_std}")

    @classmethod
    def parse(cls, text: str) -> Upcycle:
        """'EXPERTS:TOP_K' (e.g. '8:2'), as the command line gives it."""
        try:
            experts, top_k = (int(part) for part in text.split(":"))
        except ValueError:
            raise ValueError(f"--upcycle takes EXPERTS:TOP_K such as 8:2, not {text!r}") from None
        spec = cls(experts=experts, top_k=top_k)
        spec.check()
        return spec


def upcycled_config(dense: ModelConfig, spec: Upcycle) -> ModelConfig:
    """The MoE config: every layer sparse, each expert the dense MLP's width."""
    spec.check()
    if dense.has_moe:
        raise ValueError("the model is already a mixture of experts")
    return dataclasses.replace(
        dense,
        num_experts=spec.experts,
        num_experts_per_tok=spec.top_k,
        moe_intermediate_size=dense.intermediate_size,
        norm_topk_prob=True,  # the renormalisation that makes step 0 exact
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )


def upcycle(
    dense: ModelConfig, state: dict[str, torch.Tensor], spec: Upcycle
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """(MoE config, MoE state dict) from a dense model's config and state dict (our
    names). `state` is not changed; the experts share nothing with it."""
    config = upcycled_config(dense, spec)
    out = dict(state)
    generator = torch.Generator().manual_seed(spec.seed)
    E, D = spec.experts, dense.hidden_size
    for i in range(dense.num_hidden_layers):
        prefix = f"layers.{i}.mlp."
        try:
            gate, up, down = (out.pop(f"{prefix}{p}_proj.weight") for p in ("gate", "up", "down"))
        except KeyError as exc:
            raise ValueError(f"the dense state has no {exc.args[0]}") from None
        gate_up = torch.cat([gate, up]).float()  # [2F, D], gate rows first
        out[f"{prefix}w_gate_up"] = gate_up[None].repeat(E, 1, 1)  # [E, 2F, D]
        out[f"{prefix}w_down"] = down.float()[None].repeat(E, 1, 1)  # [E, D, F]
        router = torch.randn(E, D, generator=generator) * spec.router_std
        out[f"{prefix}gate.weight"] = router.to(gate.dtype)
    return config, out
