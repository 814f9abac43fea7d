"""Routing replay for the training forward: route every token to the experts the
sampler chose for it instead of to its own top-k.

    out = model(ids, return_routing=True)                       # the sampler's routing
    check_experts(model, out.routing)                           # [moe_layers, B, L, k]
    logits = model(ids, replay_routing=out.routing)             # routed exactly as recorded

Why: an MoE's top-k is discontinuous, so the trainer (other numerics: full-precision
weights, a batched forward instead of a KV-cache decode) can pick other experts than the
sampler for a few tokens, and the policy-gradient ratio of those tokens would compare two
different networks. The model does the replay itself (`Model.forward(...,
replay_routing=experts)`, model.model.route gives the formula); this module checks a
recorded routing thoroughly before a trainer trusts it (the model checks only its
shape, on the hot path).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.model import MoE


def moe_modules(model: nn.Module) -> list[MoE]:
    """The MoE modules in layer order: the order of ModelOutput.routing's first dim
    (`model` a Model, or a module wrapping one: an adapted model)."""
    return [m for m in model.modules() if isinstance(m, MoE)]


def check_experts(model: nn.Module, experts: Tensor) -> None:
    """experts [moe_layers, B, L, k]: integer ids in [0, E) or whole rows of -1, distinct
    within a token. Raises ValueError naming the problem."""
    c = model.config
    n_moe = len(moe_modules(model))
    if experts.dim() != 4 or experts.shape[0] != n_moe or experts.shape[3] != c.num_experts_per_tok:
        raise ValueError(
            f"experts must be [moe_layers={n_moe}, B, L, k={c.num_experts_per_tok}], "
            f"got {tuple(experts.shape)}"
        )
    if experts.is_floating_point() or experts.is_complex() or experts.dtype == torch.bool:
        raise ValueError(f"experts must hold integer ids, got {experts.dtype}")
    if experts.numel() == 0:
        return
    e = experts.long()
    free = e < 0
    if bool((free.any(-1) & ~free.all(-1)).any()):
        raise ValueError("a token's experts must be all >= 0 or all -1 (route freely)")
    if int(e.max()) >= c.num_experts or bool((e < -1).any()):
        raise ValueError(f"expert ids must be in [0, {c.num_experts}) or -1")
    s = e.sort(-1).values
    if bool(((s[..., 1:] == s[..., :-1]) & ~free[..., 1:]).any()):
        raise ValueError("a token is routed to the same expert twice")
