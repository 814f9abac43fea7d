"""Adapters on tachy's real model (training.sft.adapters): the part they write assembles
to exactly the model they trained, a part trained further stays one part on the base,
and `tachy train sft` on a part trains, saves and resumes them."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model.hf import CheckpointError
from model.part import assemble
from model.policy import BASE_PART, bundled_checkpoint
from training.sft.adapters import AdaptedModel

pytestmark = [pytest.mark.usefixtures("torch_path"), pytest.mark.timeout(900)]
PROJECT = Path(__file__).resolve().parents[2]


def _step(adapted: AdaptedModel, ids: torch.Tensor, lr: float = 1e-2) -> None:
    opt = torch.optim.AdamW([p for p in adapted.parameters() if p.requires_grad], lr=lr)
    mask = torch.ones_like(ids, dtype=torch.bool)
    out = adapted(ids, return_aux_loss=True, logits_where=mask)
    loss = torch.nn.functional.cross_entropy(out.logits[:-1].float(), ids[0, 1:])
    (loss + 0.01 * out.aux_loss).backward()
    opt.step()


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids)


def test_a_trained_part_assembles_to_the_model_that_was_trained(tmp_path):
    # One model alive at a time: each holds ~2.5 GB of expert values, and a trained one
    # as much again in its backward's cached copies (a CI machine has 23 GB in all).
    adapted, tok = AdaptedModel.from_part(bundled_checkpoint(BASE_PART), rank=2)
    trainable = [n for n, p in adapted.named_parameters() if p.requires_grad]
    assert all(("lora_" in n) or ("norm" in n) or n.endswith("mlp.gate.weight") for n in trainable)
    assert not any("w_gate_up" in n or "embed" in n for n in trainable)  # the base is frozen
    ids = torch.tensor([tok.encode("def add(a, b):\n    return a + b\n")])
    before = _logits(adapted, ids)
    _step(adapted, ids)
    adapted.write_part(tmp_path / "p1")
    trained = _logits(adapted, ids)
    del adapted
    gc.collect()
    assert not torch.equal(trained, before)
    model, _ = assemble(tmp_path / "p1")
    assert torch.equal(_logits(model, ids), trained)  # the sampler computes what training did
    del model
    gc.collect()
    record = json.loads((tmp_path / "p1" / "part.json").read_text())
    q = "layers.0.self_attn.q_proj.weight"
    assert record["tensors"][q + ".lora_a"][1] == [2, 576]
    assert record["tensors"][q + ".lora_b"][1] == [576, 2]
    assert record["size"] < 30 * 2**20

    # Trained again from that part: the deltas are appended along the rank, one part.
    again, _ = AdaptedModel.from_part(tmp_path / "p1", rank=3, seed=1)
    assert torch.equal(_logits(again, ids), trained)  # B = 0: the init model exactly
    _step(again, ids)
    again.write_part(tmp_path / "p2")
    retrained = _logits(again, ids)
    del again
    gc.collect()
    record = json.loads((tmp_path / "p2" / "part.json").read_text())
    assert record["tensors"][q + ".lora_a"][1] == [5, 576]
    model, _ = assemble(tmp_path / "p2")
    assert torch.equal(_logits(model, ids), retrained)  # one product, as assembly computes it


def test_experts_get_adapters_of_their_own_that_train_apart_and_sample_as_trained(tmp_path):
    adapted, tok = AdaptedModel.from_part(
        bundled_checkpoint(BASE_PART), rank=2, expert_rank=4, seed=3
    )
    moe = adapted.model.layers[0].mlp
    trainable = {n for n, p in adapted.named_parameters() if p.requires_grad}
    assert (
        "model.layers.0.mlp.adapter_a" in trainable and "model.layers.0.mlp.adapter_b" in trainable
    )
    ids = torch.tensor([tok.encode("def add(a, b):\n    return a + b\n")])
    assert not torch.equal(moe.adapter_a[0], moe.adapter_a[1])  # each expert its own draw
    assert moe.adapter_b.abs().sum() == 0  # so the model is the part's exactly, at first
    for _ in range(2):
        _step(adapted, ids)
    deltas = torch.einsum("edr,erk->edk", moe.adapter_b.detach(), moe.adapter_a.detach())
    assert (deltas[0] - deltas[1]).abs().max() > 0  # the experts have drifted apart
    adapted.write_part(tmp_path / "p")
    trained = _logits(adapted, ids)
    del adapted
    gc.collect()
    record = json.loads((tmp_path / "p" / "part.json").read_text())
    assert record["tensors"]["layers.0.mlp.adapter_a"][1] == [8, 4, 576]
    model, _ = assemble(tmp_path / "p")
    assert model.config.expert_adapter_rank == 4
    assert torch.equal(_logits(model, ids), trained)  # the sampler computes what training did
    del model
    gc.collect()
    with pytest.raises(ValueError, match="rank 4"):
        AdaptedModel.from_part(tmp_path / "p", rank=2, expert_rank=8)


def test_dense_expert_adapters_ignore_the_router_at_the_same_budget(tmp_path):
    """The dense control (`--dense-expert-adapters`): the same adapter tensors, every one
    applied to every token, so the router no longer changes what the layer computes;
    the part records it and assembles to the model that was trained."""
    adapted, tok = AdaptedModel.from_part(
        bundled_checkpoint(BASE_PART), rank=2, expert_rank=4, seed=3, expert_routing=False
    )
    moe = adapted.model.layers[0].mlp
    assert tuple(moe.adapter_a.shape) == (8, 4, 576)  # the routed adapters' budget
    ids = torch.tensor([tok.encode("def add(a, b):\n    return a + b\n")])
    for _ in range(2):
        _step(adapted, ids)
    assert moe.adapter_b.abs().sum() > 0  # trained
    adapted.write_part(tmp_path / "p")
    trained = _logits(adapted, ids)
    # Routing is moot: another router gives the layer the same output, up to the
    # rounding of its top-k weights' sum (the whole model is compared below, bit for
    # bit: one rounding step of an MXFP8 activation makes its logits jump)
    h = torch.randn(1, 7, 576, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = moe(h)[0]
        moe.gate.weight.copy_(torch.randn_like(moe.gate.weight))
        torch.testing.assert_close(moe(h)[0], y, rtol=0, atol=1e-3)
    del adapted
    gc.collect()
    record = json.loads((tmp_path / "p" / "part.json").read_text())
    assert record["expert_adapters"] == "dense"
    model, _ = assemble(tmp_path / "p")
    assert model.config.expert_adapter_rank == 4 and not model.config.expert_adapter_routing
    assert torch.equal(_logits(model, ids), trained)  # the sampler computes what training did
    del model
    gc.collect()
    with pytest.raises(ValueError, match="dense expert adapters; they keep their kind"):
        AdaptedModel.from_part(tmp_path / "p", rank=2, expert_rank=4)
    record["expert_adapters"] = "sparse"
    (tmp_path / "p" / "part.json").write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match="not 'routed' or 'dense'"):
        assemble(tmp_path / "p")


def _demos(path: Path) -> Path:
    demo = {
        "task_id": "t-1",
        "messages": [
            {"role": "user", "content": "Fix add in calc.py."},
            {"role": "assistant", "content": '<tool_call name="read_file">\n<path>calc.py'
             "</path>\n</tool_call>"},
            {"role": "user", "content": "def add(a, b):\n    return a - b"},
            {"role": "assistant", "content": "The sign is wrong; fixing it."},
        ],
    }  # fmt: skip
    path.write_text("".join(json.dumps(demo | {"task_id": f"t-{i}"}) + "\n" for i in range(3)))
    return path


def _tachy(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(PROJECT)
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args], capture_output=True, text=True, env=env,
        timeout=600,
    )  # fmt: skip


def test_sft_on_a_part_writes_a_part_and_resumes(tmp_path):
    demos, out = _demos(tmp_path / "demos.jsonl"), tmp_path / "sft"
    common = ["train", "sft", "--demos", str(demos), "--out", str(out), "--batch", "2",
              "--heldout", "0", "--threads", "2"]  # fmt: skip
    run = _tachy(
        *common, "--init", str(bundled_checkpoint(BASE_PART)), "--steps", "1", "--lora-rank", "2"
    )
    assert run.returncode == 0, run.stderr
    assert "adapters of rank 2" in run.stderr and (out / "part.json").is_file()
    assert not (out / "manifest.json").exists()
    first = json.loads((out / "part.json").read_text())["sha256"]
    run = _tachy(*common, "--resume", "--steps", "2")
    assert run.returncode == 0, run.stderr
    assert "resuming" in run.stderr and "at step 1" in run.stderr
    assert json.loads((out / "part.json").read_text())["sha256"] != first
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").open()] == [1, 2]
    info = _tachy("model", "info", str(out))
    assert info.returncode == 0, info.stderr
