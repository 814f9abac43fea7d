"""Parity with transformers' Qwen3MoeForCausalLM on random tiny configs written by
save_pretrained (and the same weights rewritten in the fused-experts layout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import model as tachy_model  # noqa: E402
from model.hf import CheckpointError  # noqa: E402

VOCAB = 128


def hf_config(**overrides):
    kw = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
        rope_theta=10000.0, max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    kw.update(overrides)
    return transformers.Qwen3MoeConfig(**kw)


def widen_init(m):
    """Weights larger than transformers' default init, so every path matters."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return m


def random_hf_model(config, seed: int = 0):
    torch.manual_seed(seed)
    return widen_init(transformers.Qwen3MoeForCausalLM(config).eval())


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> tuple[Path, object]:
    m = random_hf_model(hf_config())
    path = tmp_path_factory.mktemp("hf")
    m.save_pretrained(path)
    return path, m


def hf_logits(m, ids):
    with torch.no_grad():
        return m(input_ids=ids).logits.float()


def input_ids(seed: int = 1, shape=(2, 24)):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, shape, generator=g)


def test_save_pretrained_layout_is_per_expert(hf_dir):
    from safetensors import safe_open

    path, _ = hf_dir
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.layers.0.mlp.experts.0.gate_proj.weight" in names
    assert "model.layers.1.mlp.gate_proj.weight" in names  # the dense mlp_only layer


def test_fp32_parity(hf_dir, torch_path):
    path, ref = hf_dir
    ours = tachy_model.from_hf(path, precision="fp32")
    ids = input_ids()
    with torch.no_grad():
        got = ours(ids)
    diff = (got - hf_logits(ref, ids)).abs().max().item()
    assert diff < 1e-4, diff


def _fuse(path: Path, out: Path, num_layers: int, num_experts: int) -> None:
    from safetensors.torch import load_file, save_file

    sd = load_file(str(path / "model.safetensors"))
    for i in range(num_layers):
        pre = f"model.layers.{i}.mlp.experts"
        if f"{pre}.0.gate_proj.weight" not in sd:
            continue
        gu = [
            torch.cat([sd.pop(f"{pre}.{j}.gate_proj.weight"), sd.pop(f"{pre}.{j}.up_proj.weight")])
            for j in range(num_experts)
        ]
        dn = [sd.pop(f"{pre}.{j}.down_proj.weight") for j in range(num_experts)]
        sd[f"{pre}.gate_up_proj"] = torch.stack(gu).contiguous()
        sd[f"{pre}.down_proj"] = torch.stack(dn).contiguous()
    out.mkdir()
    save_file(sd, str(out / "model.safetensors"))
    (out / "config.json").write_text((path / "config.json").read_text())


def test_fused_layout_parity(hf_dir, tmp_path, torch_path):
    path, ref = hf_dir
    fused = tmp_path / "fused"
    _fuse(path, fused, 3, 8)
    ours = tachy_model.from_hf(fused, precision="fp32")
    ids = input_ids(2)
    with torch.no_grad():
        got = ours(ids)
    assert (got - hf_logits(ref, ids)).abs().max().item() < 1e-4


def test_sharded_checkpoint(tmp_path, torch_path):
    ref = random_hf_model(
        hf_config(num_hidden_layers=2, mlp_only_layers=[], tie_word_embeddings=True), 3
    )
    ref.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    ours = tachy_model.from_hf(tmp_path, precision="fp32")
    ids = input_ids(3)
    with torch.no_grad():
        assert (ours(ids) - hf_logits(ref, ids)).abs().max().item() < 1e-4


def test_mxfp8_parity(hf_dir, torch_path):
    path, ref = hf_dir
    ours = tachy_model.from_hf(path, precision="mxfp8")
    assert ours.quantized
    ids = input_ids(4)
    with torch.no_grad():
        got = ours(ids).float()
    want = hf_logits(ref, ids)
    kl = torch.nn.functional.kl_div(
        got.log_softmax(-1), want.log_softmax(-1), log_target=True, reduction="none"
    ).sum(-1)
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
    assert kl.mean().item() < 1e-2, kl.mean().item()
    assert cos.item() > 0.99, cos.item()


def test_errors(hf_dir, tmp_path):
    path, _ = hf_dir
    with pytest.raises(FileNotFoundError):
        tachy_model.from_hf(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        tachy_model.from_hf(empty)

    other = tmp_path / "neox"
    other.mkdir()
    cfg = json.loads((path / "config.json").read_text())
    (other / "config.json").write_text(
        json.dumps({**cfg, "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]})
    )
    with pytest.raises(CheckpointError, match=r"unsupported architecture.*llama, qwen2"):
        tachy_model.from_hf(other)

    from safetensors.torch import load_file, save_file

    sd = load_file(str(path / "model.safetensors"))
    cases = {
        "missing": ({k: v for k, v in sd.items() if k != "model.norm.weight"}, "missing"),
        "missing_expert": (
            {k: v for k, v in sd.items() if k != "model.layers.0.mlp.experts.3.up_proj.weight"},
            "missing expert",
        ),
        "unexpected": ({**sd, "model.layers.0.extra.weight": torch.zeros(2)}, "unexpected"),
        "shape": ({**sd, "model.norm.weight": torch.ones(65)}, "shape"),
    }
    for name, (tensors, match) in cases.items():
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text((path / "config.json").read_text())
        save_file(tensors, str(d / "model.safetensors"))
        with pytest.raises(CheckpointError, match=match):
            tachy_model.from_hf(d, precision="fp32")
