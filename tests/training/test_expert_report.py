"""training.eval.experts on a tiny model: identical experts show no drift; experts with
adapters of their own do, and the report's router figures are shares."""

from __future__ import annotations

import torch

from model import Model, preset
from training.eval.experts import expert_report


def test_copies_do_not_drift_and_adapted_experts_do():
    torch.manual_seed(0)
    model = Model(preset("tiny", expert_adapter_rank=4), precision="fp32").eval()
    with torch.no_grad():
        for layer in model.layers:
            moe = layer.mlp
            moe.w_gate_up.copy_(moe.w_gate_up[:1].expand_as(moe.w_gate_up))  # upcycled:
            moe.w_down.copy_(moe.w_down[:1].expand_as(moe.w_down))  # every expert the same
    ids = [torch.randint(0, 8192, (1, 40)) for _ in range(3)]
    copies = expert_report(model, ids)
    assert copies["tokens"] == 120 and len(copies["layers"]) == 4
    assert copies["mean"]["drift"] == 0.0  # B = 0: the adapters add nothing yet
    layer = copies["layers"]["layers.0.mlp"]
    assert 0 < layer["entropy"] <= 1 and abs(sum(layer["load"]) - 1) < 1e-3
    with torch.no_grad():
        for layer in model.layers:
            layer.mlp.adapter_b.normal_(0.0, 0.05)
    assert expert_report(model, ids)["mean"]["drift"] > 0.01
