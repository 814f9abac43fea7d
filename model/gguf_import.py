"""Import a GGUF file (llama.cpp's format) into our Model and Tokenizer, read with the
format's own library, `gguf`.

    config, state, tokenizer = read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    model = from_gguf(path)                  # fp32 weights, dequantized

What is rebuilt from the file:
  weights    every tensor dequantized to fp32 by `gguf.quants` (F32, F16, BF16, Q4_0,
             Q4_1, Q8_0, the K-quants, …); llama.cpp stores Llama's q/k projections
             with the rows of each head interleaved for its RoPE, so they are permuted
             back to the Hugging Face order our RoPE (rotate_half) expects.
  config     from the `{arch}.*` keys: layers, sizes, heads, RoPE θ and linear scaling,
             RMSNorm ε, tied embeddings (no `output.weight` tensor).
  tokenizer  a byte-level BPE from `tokenizer.ggml.{tokens,merges,token_type}` with the
             pre-tokenizer the file's `tokenizer.ggml.pre` names; control tokens are
             special; eos and pad from their ids; the chat template kept verbatim.

Architectures: llama (SmolLM2, Llama 2/3 without rope_freqs), qwen2, qwen3. Anything
else, a quantization `gguf` cannot dequantize, a truncated file or a tensor of the wrong
shape is a CheckpointError that says which.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.config import ModelConfig
from model.hf import CheckpointError
from model.model import Model
from model.tokenizer import IM_END, IM_START, Tokenizer, TokenizerError

ARCHITECTURES = ("llama", "qwen2", "qwen3")

# GGUF tensor names -> ours ({i}: the layer).
_GLOBAL = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")

# GGUF token types (llama.cpp's llama_token_type).
_CONTROL, _USER_DEFINED = 3, 4

# The pre-tokenizer regexes llama.cpp applies for `tokenizer.ggml.pre`, as tokenizers
# pre-tokenizers. SmolLM's splits digits one by one before GPT-2's byte-level split.
_PRE_TOKENIZERS = ("gpt2", "default", "smollm")


def open_gguf(path: Path) -> Any:
    import gguf  # the format's own reader (numpy only)

    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # truncated, not GGUF, unknown version: the reader says which
        raise CheckpointError(f"{path}: not a readable GGUF file ({exc})") from exc


def _field(reader: Any, key: str, default: Any = ...) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is ...:
            raise CheckpointError(f"GGUF metadata has no {key!r}")
        return default
    return field.contents()


def gguf_config(reader: Any) -> ModelConfig:
    """Our ModelConfig from a GGUF file's metadata (and its tensor names)."""
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            f"GGUF architecture {arch!r} is not implemented; tachy reads {', '.join(ARCHITECTURES)}"
        )
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise CheckpointError("GGUF rope_freqs (Llama 3.1 RoPE factors) is not supported")
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    tokens = _field(reader, "tokenizer.ggml.tokens", None)
    vocab = _field(reader, f"{arch}.vocab_size", None) or (len(tokens) if tokens else None)
    if vocab is None:
        raise CheckpointError("GGUF metadata gives neither a vocab_size nor a token list")
    scaling = None
    kind = _field(reader, f"{arch}.rope.scaling.type", "none")
    if kind == "linear":
        scaling = {
            "rope_type": "linear",
            "factor": float(_field(reader, f"{arch}.rope.scaling.factor")),
        }
    elif kind != "none":
        raise CheckpointError(f"GGUF rope scaling {kind!r} is not supported")
    try:
        return ModelConfig(
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
            num_hidden_layers=int(_field(reader, f"{arch}.block_count")),
            num_attention_heads=heads,
            num_key_value_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
            head_dim=int(_field(reader, f"{arch}.attention.key_length", hidden // heads)),
            rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
            rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
            rope_scaling=scaling,
            max_position_embeddings=int(_field(reader, f"{arch}.context_length")),
            tie_word_embeddings="output.weight" not in names,
            qk_norm=arch == "qwen3",
            qkv_bias="blk.0.attn_q.bias" in names,
            o_bias="blk.0.attn_output.bias" in names,
            num_experts=0,
            num_experts_per_tok=0,
            moe_intermediate_size=0,
        )
    except ValueError as exc:
        raise CheckpointError(f"GGUF metadata describes no model we can build: {exc}") from exc


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order: within each head it interleaves the two halves
    that the Hugging Face layout (and rotate_half) keeps apart."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _tensor(t: Any) -> torch.Tensor:
    """A reader tensor dequantized to fp32, shaped [rows, cols] as PyTorch keeps it."""
    from gguf import GGMLQuantizationType, quants

    shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists the fastest dim first
    try:
        kind = GGMLQuantizationType(int(t.tensor_type))
        data = quants.dequantize(t.data, kind)
    except (NotImplementedError, ValueError) as exc:
        raise CheckpointError(
            f"GGUF tensor {t.name}: quantization {getattr(t.tensor_type, 'name', t.tensor_type)} "
            f"cannot be dequantized by gguf ({exc})"
        ) from exc
    if data.size != int(np.prod(shape)):
        raise CheckpointError(f"GGUF tensor {t.name}: {data.size} values for shape {list(shape)}")
    return torch.from_numpy(np.array(data, dtype=np.float32).reshape(shape))  # writable copy


def gguf_state(reader: Any, config: ModelConfig) -> dict[str, torch.Tensor]:
    """Every weight under our names, fp32, checked against `config`'s shapes."""
    arch = _field(reader, "general.architecture")
    with torch.device("meta"):
        expected = Model(config, precision="fp32").state_dict()
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight")
    state: dict[str, torch.Tensor] = {}
    unexpected = []
    for t in reader.tensors:
        m = _BLOCK.match(t.name)
        name = _GLOBAL.get(t.name) if m is None else None
        if m is not None and m.group(2) in _LAYER:
            name = f"layers.{m.group(1)}.{_LAYER[m.group(2)]}"
        if name is None or name not in expected:
            unexpected.append(t.name)
            continue
        w = _tensor(t)
        if arch == "llama" and m is not None and m.group(2) in ("attn_q.weight", "attn_k.weight"):
            heads = config.num_attention_heads if "attn_q" in t.name else config.num_key_value_heads
            w = _unpermute(w, heads)
        if w.shape != expected[name].shape:
            raise CheckpointError(
                f"GGUF tensor {t.name}: shape {list(w.shape)}, the metadata needs "
                f"{list(expected[name].shape)}"
            )
        state[name] = w
    if unexpected:
        raise CheckpointError(f"GGUF tensors tachy does not know: {sorted(unexpected)[:8]}")
    missing = sorted(set(expected) - set(state))
    if missing:
        raise CheckpointError(f"GGUF file lacks tensors (our names): {missing[:8]}")
    return state


def gguf_tokenizer(reader: Any) -> Tokenizer:
    """The file's byte-level BPE tokenizer, with its special tokens and chat template."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors
    from tokenizers import Tokenizer as Backend

    kind = _field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise CheckpointError(
            f"GGUF tokenizer model {kind!r} is not supported (tachy reads byte-level BPE, 'gpt2')"
        )
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    if pre not in _PRE_TOKENIZERS:
        raise CheckpointError(
            f"GGUF pre-tokenizer {pre!r} is not supported; tachy knows {', '.join(_PRE_TOKENIZERS)}"
        )
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    types = list(_field(reader, "tokenizer.ggml.token_type", [1] * len(tokens)))
    backend = Backend(models.BPE({tok: i for i, tok in enumerate(tokens)}, merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        digits = pre_tokenizers.Digits(individual_digits=True)
        backend.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    else:
        backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens(
        [
            AddedToken(tok, special=True, normalized=False)
            for tok, ty in zip(tokens, types, strict=True)
            if ty == _CONTROL
        ]
    )
    backend.add_tokens(
        [
            AddedToken(tok, normalized=False)
            for tok, ty in zip(tokens, types, strict=True)
            if ty == _USER_DEFINED
        ]
    )

    def token(key: str) -> str | None:
        i = _field(reader, key, None)
        return None if i is None or not 0 <= int(i) < len(tokens) else tokens[int(i)]

    template = _field(reader, "tokenizer.chat_template", None)
    if template is not None and not (IM_START in template and IM_END in template):
        raise CheckpointError(
            "GGUF chat template is not ChatML (<|im_start|> … <|im_end|>), the one chat "
            "format tachy renders"
        )
    try:
        return Tokenizer(
            backend,
            eos_token=token("tokenizer.ggml.eos_token_id"),
            pad_token=token("tokenizer.ggml.padding_token_id"),
            chat_template=template,
        )
    except TokenizerError as exc:
        raise CheckpointError(f"GGUF tokenizer: {exc}") from exc


def read_gguf(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor], Tokenizer]:
    """(config, fp32 state dict under our names, tokenizer) of a GGUF file."""
    reader = open_gguf(Path(path))
    config = gguf_config(reader)
    return config, gguf_state(reader, config), gguf_tokenizer(reader)


def from_gguf(path: str | Path) -> tuple[Model, Tokenizer]:
    """The GGUF file's model (fp32, eval mode) and tokenizer."""
    config, state, tokenizer = read_gguf(path)
    return Model.from_state_dict(config, state), tokenizer
