"""Parity with transformers on the dense architectures our decoder covers: Llama (tied
embeddings, Llama 3 and linear RoPE scaling, attention bias), Qwen2 (q/k/v bias) and
Qwen3 (q/k norms), each a random small config written by save_pretrained."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import model as tachy_model  # noqa: E402
from tests.model.test_hf_parity import widen_init  # noqa: E402

VOCAB = 160
BASE = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    rms_norm_eps=1e-5,
)  # fmt: skip
LLAMA3_ROPE = {
    "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
}  # fmt: skip

CASES = {
    # SmolLM2's shape of config: tied embeddings, theta 1e5, no bias, no q/k norms.
    "llama": (transformers.LlamaConfig, dict(tie_word_embeddings=True, rope_theta=1e5)),
    "llama-bias-llama3-rope": (
        transformers.LlamaConfig,
        dict(attention_bias=True, rope_parameters=LLAMA3_ROPE),
    ),
    "llama-linear-rope": (
        transformers.LlamaConfig,
        dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}),
    ),
    "qwen2": (transformers.Qwen2Config, dict(tie_word_embeddings=True)),
    "qwen3": (transformers.Qwen3Config, dict(head_dim=32)),
}


def random_model(cls_config, overrides, seed=0):
    config = cls_config(**BASE, **overrides)
    torch.manual_seed(seed)
    return widen_init(transformers.AutoModelForCausalLM.from_config(config).eval())


@pytest.mark.parametrize("case", sorted(CASES))
def test_fp32_parity(case, tmp_path, torch_path):
    cls_config, overrides = CASES[case]
    ref = random_model(cls_config, overrides)
    ref.save_pretrained(tmp_path)
    ours = tachy_model.from_hf(tmp_path, precision="fp32")
    assert not ours.config.has_moe
    # Long enough for the scaled RoPE frequencies to matter (past 64 positions).
    ids = torch.randint(0, VOCAB, (2, 150), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(input_ids=ids).logits.float()
        got = ours(ids)
    diff = (got - want).abs().max().item()
    assert diff < 1e-4, diff
    # A dense model loads with the default precision too: it has no MXFP8 weights.
    again = tachy_model.from_hf(tmp_path)
    with torch.no_grad():
        assert (again(ids) - want).abs().max().item() < 1e-4


def test_cached_decode_matches_the_full_forward(tmp_path, torch_path):
    """The KV-cache path of a dense Llama agrees with one forward over the whole prompt."""
    ref = random_model(*CASES["llama-bias-llama3-rope"])
    ref.save_pretrained(tmp_path)
    ours = tachy_model.from_hf(tmp_path, precision="fp32")
    ids = torch.randint(0, VOCAB, (1, 90), generator=torch.Generator().manual_seed(2))
    cache = ours.setup_cache(1, 128)
    with torch.no_grad():
        full = ours(ids)
        ours(ids[:, :80], torch.arange(80), cache, cache_len=80)
        steps = [
            ours(ids[:, t : t + 1], torch.tensor([t]), cache, cache_len=t + 1)
            for t in range(80, 90)
        ]
    assert (torch.cat(steps, 1) - full[:, 80:]).abs().max().item() < 1e-4


@pytest.mark.parametrize(
    "change, match",
    [
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling 'yarn'"),
        (
            {"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
            "needs numbers for",
        ),
    ],
)
def test_unsupported_configs_say_what(change, match):
    hf = {**BASE, "model_type": "llama", **change}
    with pytest.raises(ValueError, match=match):
        tachy_model.ModelConfig.from_hf_config(hf)
