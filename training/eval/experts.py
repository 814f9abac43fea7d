"""Do the experts differ? Router entropy and load per layer, and how far apart the
experts' outputs have drifted, measured on real tokens.

Upcycled experts start as copies of one MLP: whatever the router says, the top-k mix
of copies is the dense MLP, and the router gets no useful gradient. Experts with their
own adapters (MoE.adapters) can drift apart. This reads, over the tokens of some
conversations, at every MoE layer:

    entropy    the router's mean entropy over the experts, as a share of log E (1: no
               preference, 0: one expert always)
    load       the share of top-k assignments each expert gets (1/E each: balanced)
    drift      how different the experts' outputs are on the same hidden states: the
               mean over tokens and experts of |y_e - mean_e y_e| / |mean_e y_e|, where
               y_e is expert e's output (the MXFP8 MLP plus its adapter); 0 for copies

    report = expert_report(model, [ids, ...])      # ids: [1, L] token tensors
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

import kernels
from model.model import MoE


@torch.no_grad()
def expert_report(model: nn.Module, batches: list[Tensor], max_tokens: int = 4096) -> dict:
    """Per MoE layer: entropy, load, drift (see the module docstring), and their means."""
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, MoE)]
    seen: dict[str, dict[str, list[Tensor]]] = {n: {"h": [], "logits": []} for n, _ in layers}

    def hook(name: str):
        def keep(module, args, output):
            h = args[0].reshape(-1, args[0].shape[-1])
            seen[name]["h"].append(h.float())
            seen[name]["logits"].append(output[1].float())

        return keep

    handles = [m.register_forward_hook(hook(n)) for n, m in layers]
    try:
        used = 0
        for ids in batches:
            if used >= max_tokens:
                break
            model(ids[:, : max_tokens - used])
            used += min(ids.shape[1], max_tokens - used)
    finally:
        for handle in handles:
            handle.remove()
    out = {}
    for name, moe in layers:
        h = torch.cat(seen[name]["h"])
        logits = torch.cat(seen[name]["logits"])
        E, k = logits.shape[1], moe.top_k
        probs = torch.softmax(logits, dim=-1)
        entropy = float(-(probs * probs.clamp_min(1e-12).log()).sum(-1).mean()) / math.log(E)
        top = torch.topk(probs, k, dim=-1).indices
        load = torch.bincount(top.flatten(), minlength=E).float() / top.numel()
        out[name] = {
            "entropy": round(entropy, 4),
            "load": [round(float(x), 4) for x in load],
            "load_max_over_mean": round(float(load.max() * E), 3),
            "drift": round(_drift(moe, h[:512]), 5),
        }
    mean = {
        key: round(sum(v[key] for v in out.values()) / len(out), 5) if out else None
        for key in ("entropy", "load_max_over_mean", "drift")
    }
    return {"layers": out, "mean": mean, "tokens": used}


def _drift(moe: MoE, h: Tensor) -> float:
    """Mean relative distance of each expert's output from the experts' mean output."""
    T, E = h.shape[0], moe.gate.weight.shape[0]
    outputs = []
    for e in range(E):
        ids = torch.full((T, 1), e, dtype=torch.long)
        ones = torch.ones(T, 1, dtype=h.dtype)
        y = kernels.moe_ffn(h, ones, ids, *moe.expert_weights(), quantize=moe.precision == "mxfp8")
        if moe.adapter_rank:
            y = y + moe.adapters(h, ones, ids)
        outputs.append(y)
    ys = torch.stack(outputs)  # [E, T, D]
    centre = ys.mean(0)
    scale = centre.norm(dim=-1).clamp_min(1e-9)  # [T]
    return float(((ys - centre).norm(dim=-1) / scale).mean())
