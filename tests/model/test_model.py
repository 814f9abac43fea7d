"""The model: presets, KV cache, routing info, aux loss, training, our checkpoint format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import model as M
from model import CheckpointError, KVCache, Model, ModelConfig, preset
from model.model import route

pytestmark = pytest.mark.usefixtures("torch_path")  # kernels' torch path (no interpreter)


def small_config(**overrides) -> ModelConfig:
    kw = dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
        rope_theta=10000.0, max_position_embeddings=128,
    )  # fmt: skip
    kw.update(overrides)
    return ModelConfig(**kw)


def make_model(precision="mxfp8", seed=0, **overrides) -> Model:
    torch.manual_seed(seed)
    m = Model(small_config(**overrides), precision=precision).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, 0.1)
    return m


def ids(shape=(2, 20), seed=1, vocab=256):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ presets and config


def test_presets_construct():
    tiny = Model(preset("tiny"))
    n = sum(p.numel() for p in tiny.parameters())
    assert 1_000_000 < n < 10_000_000 and n == tiny.config.num_params
    with torch.device("meta"):
        small = Model(preset("small"))
        big = Model(preset("30b-a3b"))
    assert sum(p.numel() for p in small.parameters()) == small.config.num_params
    total = sum(p.numel() for p in big.parameters())
    assert total == big.config.num_params
    assert 30.0e9 < total < 31.0e9  # Qwen3-30B-A3B: 30.5B total
    assert 3.1e9 < big.config.num_active_params < 3.5e9  # 3.3B active


def test_config_errors():
    with pytest.raises(ValueError, match="multiple of 32"):
        Model(small_config(hidden_size=48, num_attention_heads=3, num_key_value_heads=1))
    Model(small_config(hidden_size=48, num_attention_heads=3, num_key_value_heads=1), "fp32")
    with pytest.raises(ValueError, match="num_key_value_heads"):
        small_config(num_key_value_heads=3)
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        small_config(num_experts_per_tok=9)
    with pytest.raises(ValueError, match="precision"):
        Model(small_config(), precision="bf16")
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")


# ------------------------------------------------------------------ forward, routing, aux


def test_routing_and_aux_loss():
    m = make_model("mxfp8")
    m.train()
    out = m(ids(), return_routing=True, return_aux_loss=True)
    assert out.logits.shape == (2, 20, 256)
    assert out.routing.shape == (2, 2, 20, 2)  # [MoE layers, B, L, k]: layers 0 and 2
    assert out.routing.min() >= 0 and out.routing.max() < 8
    assert torch.isfinite(out.aux_loss) and out.aux_loss.item() >= 1.0 - 1e-6
    out.aux_loss.backward()
    g = m.layers[0].mlp.gate.weight.grad
    assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0
    assert isinstance(m(ids()), torch.Tensor)  # plain call: logits only


def test_cpu_sampling_of_quantized_experts_matches_kernel(torch_path):
    """Sampling pre-quantized experts on a CPU takes the plain-torch layer (static
    shapes, compilable); it computes what kernels.moe_ffn does, which training runs."""
    m = make_model("mxfp8").quantize_experts()
    x = ids((2, 5))
    with torch.no_grad():
        sampled = m(x)  # kernels.moe.torch_experts(mx_activations=True)
    with torch.enable_grad():
        trained = m(x)  # kernels.moe_ffn (grad mode on)
    torch.testing.assert_close(sampled, trained, rtol=1e-5, atol=1e-5)


def test_quantize_experts_same_numerics():
    m = make_model("mxfp8")
    x = ids()
    with torch.no_grad():
        before = m(x)
        m.quantize_experts()
        after = m(x)
    assert m.quantized and not any(n.split(".")[-1] == "w_gate_up" for n, _ in m.named_parameters())
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ KV cache


@pytest.mark.parametrize("precision", ["fp32", "mxfp8"])
def test_kv_cache_prefill_decode_matches_full(precision):
    m = make_model(precision)
    x = ids((2, 16))
    with torch.no_grad():
        full = m(x)
        cache = m.setup_cache(batch=2, max_seq=32)
        assert isinstance(cache, KVCache)
        steps = [m(x[:, :10], torch.arange(10), cache=cache)]
        for t in range(10, 16):
            steps.append(m(x[:, t : t + 1], torch.tensor([t]), cache=cache))
    got = torch.cat(steps, dim=1)
    assert (got - full).abs().max().item() < 1e-5


def test_kv_cache_per_row_positions_and_errors():
    m = make_model("fp32")
    x = ids((2, 12))
    with torch.no_grad():
        full = m(x)
        cache = m.setup_cache(batch=2, max_seq=12)
        m(x[:, :8], cache=cache)
        pos = torch.tensor([[8, 9], [8, 9]])
        two = m(x[:, 8:10], pos, cache=cache)
        assert (two - full[:, 8:10]).abs().max().item() < 1e-5
        with pytest.raises(ValueError, match="beyond the cache length"):
            m(x[:, :1], torch.tensor([12]), cache=cache)
        with pytest.raises(ValueError, match="batch"):
            m(ids((3, 2)), cache=cache)


# ------------------------------------------------------------------ training


def test_training_step_reduces_loss():
    torch.manual_seed(0)
    m = Model(preset("tiny"), precision="mxfp8").train()
    batch = torch.randint(
        0, m.config.vocab_size, (4, 33), generator=torch.Generator().manual_seed(0)
    )
    inp, tgt = batch[:, :-1], batch[:, 1:]
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        out = m(inp, return_aux_loss=True)
        ce = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), tgt.flatten())
        loss = ce + m.config.router_aux_loss_coef * out.aux_loss
        opt.zero_grad()
        loss.backward()
        assert m.layers[0].mlp.w_gate_up.grad is not None
        opt.step()
        losses.append(ce.item())
    assert losses[-1] < losses[0] - 0.5, losses


# ------------------------------------------------------------------ checkpoint format


@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("tie", [False, True])
def test_save_load_exact(tmp_path, quantize, tie):
    m = make_model("mxfp8", tie_word_embeddings=tie)
    if quantize:
        m.quantize_experts()
    M.save(m, tmp_path / "ckpt")
    back = M.load(tmp_path / "ckpt")
    assert back.quantized == quantize and back.precision == m.precision
    assert back.config == m.config
    if tie:
        assert back.lm_head.weight is back.embed_tokens.weight
    x = ids()
    with torch.no_grad():
        assert torch.equal(back(x), m(x))


def test_save_load_fp32(tmp_path):
    m = make_model("fp32")
    M.save(m, tmp_path)
    back = M.load(tmp_path)
    assert back.precision == "fp32"
    with torch.no_grad():
        assert torch.equal(back(ids()), m(ids()))


@pytest.fixture
def saved(tmp_path) -> Path:
    m = make_model("mxfp8").quantize_experts()
    return M.save(m, tmp_path / "ckpt")


def _rewrite_manifest(path: Path, **changes) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_load_refuses_truncated(saved):
    f = saved / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated"):
        M.load(saved)


def test_load_refuses_hash_mismatch(saved):
    f = saved / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="hash"):
        M.load(saved)


def test_load_refuses_wrong_version_and_format(saved):
    _rewrite_manifest(saved, version=99)
    with pytest.raises(CheckpointError, match="version"):
        M.load(saved)
    _rewrite_manifest(saved, version=1, format="other")
    with pytest.raises(CheckpointError, match="format"):
        M.load(saved)


def test_load_refuses_missing_files(saved, tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        M.load(tmp_path / "nothing")
    (saved / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"manifest\.json"):
        M.load(saved)


def test_load_refuses_missing_tensor_and_mismatched_config(saved):
    import hashlib

    from safetensors.torch import load_file, save_file

    f = saved / "model.safetensors"
    sd = load_file(str(f))
    sd.pop("layers.0.mlp.w_down_s")
    save_file(sd, str(f))
    _rewrite_manifest(
        saved, sha256=hashlib.sha256(f.read_bytes()).hexdigest(), size=f.stat().st_size
    )
    with pytest.raises(CheckpointError, match=r"missing tensors \['layers\.0\.mlp\.w_down_s'\]"):
        M.load(saved)


def test_load_refuses_config_mismatch(saved):
    meta = json.loads((saved / "config.json").read_text())
    meta["config"]["moe_intermediate_size"] = 64
    (saved / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="w_gate_up"):
        M.load(saved)


def test_expert_adapters_mix_by_the_routing_weights_and_start_as_no_change():
    torch.manual_seed(0)
    plain = Model(preset("tiny"), precision="fp32")
    adapted = Model(preset("tiny", expert_adapter_rank=4), precision="fp32")
    adapted.load_state_dict(plain.state_dict(), strict=False)
    ids = torch.randint(0, 8192, (2, 12))
    with torch.no_grad():
        assert torch.equal(adapted(ids), plain(ids))  # B = 0: exactly the model without
    moe = adapted.layers[0].mlp
    with torch.no_grad():
        moe.adapter_b.normal_(0.0, 0.1)
    h = torch.randn(5, moe.adapter_a.shape[2])
    w, e = route(moe.gate(h), 2, True)
    want = torch.stack([
        sum(w[t, k] * (moe.adapter_b[e[t, k]] @ (moe.adapter_a[e[t, k]] @ h[t])) for k in range(2))
        for t in range(5)
    ])  # fmt: skip
    torch.testing.assert_close(moe.adapters(h, w, e), want, rtol=1e-5, atol=1e-6)
    # Distinct experts now: the routers get a gradient (identical experts give none).
    out = adapted(ids, return_aux_loss=True)
    out.logits.float().pow(2).mean().backward()
    assert moe.gate.weight.grad is not None and moe.gate.weight.grad.abs().sum() > 0
    assert moe.adapter_a.grad.abs().sum() > 0
