"""The model config: one dataclass for the architectures we run, presets, and the Hugging
Face config.json mapping.

The architectures are the Llama family's decoder with per-layer dense or MoE feed-forward
blocks: Llama (SmolLM2), Qwen2/2.5 (bias on the q/k/v projections), Qwen3 (RMSNorm on each
query and key head) and Qwen3-MoE (sparse layers). They differ only in the switches below;
the defaults are Qwen3-MoE's, which is what checkpoints written before the switches existed
hold.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kernels.reference import MX_BLOCK  # the expert GEMM dims must be multiples of it


@dataclass
class ModelConfig:
    vocab_size: int = 151936
    hidden_size: int = 2048
    intermediate_size: int = 6144  # dense MLP (mlp_only_layers / decoder_sparse_step)
    moe_intermediate_size: int = 768
    num_hidden_layers: int = 48
    num_attention_heads: int = 32
    num_key_value_heads: int = 4
    head_dim: int = 128
    num_experts: int = 128
    num_experts_per_tok: int = 8
    norm_topk_prob: bool = True
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] = field(default_factory=list)
    router_aux_loss_coef: float = 0.001
    qk_norm: bool = True  # Qwen3: RMSNorm over each query/key head before RoPE
    qkv_bias: bool = False  # Qwen2, Llama attention_bias: bias on q/k/v projections
    o_bias: bool = False  # Llama attention_bias: bias on the output projection too
    # RoPE frequency scaling: None, {"rope_type": "linear", "factor": f} or Llama 3's
    # {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"}
    rope_scaling: dict[str, Any] | None = None
    # Per-expert low-rank adapters beside the experts (MoE.adapter_a/b): what makes
    # upcycled experts, identical copies of one MLP, differ when they are trained.
    expert_adapter_rank: int = 0
    # False: every expert's adapter applies to every token whatever the router chose, one
    # dense adapter of rank E x r beside the MLP: the dense control for the routed
    # adapters at the same trainable budget (bench/RESULTS.md, issue 33).
    expert_adapter_routing: bool = True

    def __post_init__(self) -> None:
        self.mlp_only_layers = [int(i) for i in self.mlp_only_layers]
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first inconsistent field."""
        positive = [
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "decoder_sparse_step",
        ]  # fmt: skip
        for name in positive:
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.expert_adapter_rank < 0:
            raise ValueError(f"expert_adapter_rank must be >= 0, got {self.expert_adapter_rank}")
        if self.num_experts < 0:
            raise ValueError(f"num_experts must be >= 0, got {self.num_experts}")
        if any(self.is_moe_layer(i) for i in range(self.num_hidden_layers)):
            if not 0 < self.num_experts_per_tok <= self.num_experts:
                raise ValueError(
                    f"num_experts_per_tok ({self.num_experts_per_tok}) must be in "
                    f"1..num_experts ({self.num_experts})"
                )
            if self.moe_intermediate_size <= 0:
                raise ValueError("moe_intermediate_size must be positive")
        dense = not all(self.is_moe_layer(i) for i in range(self.num_hidden_layers))
        if dense and self.intermediate_size <= 0:
            raise ValueError("intermediate_size must be positive when a layer is dense")
        bad = [i for i in self.mlp_only_layers if not 0 <= i < self.num_hidden_layers]
        if bad:
            raise ValueError(f"mlp_only_layers {bad} out of range 0..{self.num_hidden_layers - 1}")
        check_rope_scaling(self.rope_scaling)

    @property
    def has_moe(self) -> bool:
        return any(self.is_moe_layer(i) for i in range(self.num_hidden_layers))

    def check_mx(self) -> None:
        """The MXFP8 expert kernels need hidden and moe_intermediate sizes in blocks of 32
        (a model without MoE layers has no MXFP8 weights)."""
        if not self.has_moe:
            return
        for name in ("hidden_size", "moe_intermediate_size"):
            if getattr(self, name) % MX_BLOCK:
                raise ValueError(
                    f"MXFP8 experts need {name} to be a multiple of {MX_BLOCK}, got "
                    f"{getattr(self, name)} (use precision='fp32')"
                )

    def is_moe_layer(self, i: int) -> bool:
        """Qwen3-MoE's rule: sparse unless listed in mlp_only_layers or off the step."""
        return (
            i not in self.mlp_only_layers
            and self.num_experts > 0
            and (i + 1) % self.decoder_sparse_step == 0
        )

    @property
    def num_params(self) -> int:
        """Total parameter count (embedding and head counted separately unless tied)."""
        return self._count(active=False)

    @property
    def num_active_params(self) -> int:
        """Parameters used per token: only num_experts_per_tok experts per MoE layer."""
        return self._count(active=True)

    def _count(self, active: bool) -> int:
        D, H, KV, hd = (
            self.hidden_size,
            self.num_attention_heads,
            self.num_key_value_heads,
            self.head_dim,
        )
        attn = D * H * hd + 2 * D * KV * hd + H * hd * D
        attn += 2 * hd * self.qk_norm + (H + 2 * KV) * hd * self.qkv_bias + D * self.o_bias
        n = self.vocab_size * D * (1 if self.tie_word_embeddings else 2) + D
        for i in range(self.num_hidden_layers):
            n += attn + 2 * D
            if self.is_moe_layer(i):
                e = self.num_experts_per_tok if active else self.num_experts
                n += D * self.num_experts + e * 3 * D * self.moe_intermediate_size
                n += e * 2 * D * self.expert_adapter_rank
            else:
                n += 3 * D * self.intermediate_size
        return n

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown ModelConfig fields: {unknown}")
        return cls(**d)

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> ModelConfig:
        """From a Hugging Face config.json dict (transformers 4.x or 5.x keys) of a model
        we implement: Llama (SmolLM2 …), Qwen2/2.5, Qwen3 or Qwen3-MoE. ValueError names
        what is not supported."""
        model_type = hf.get("model_type")
        archs = hf.get("architectures") or []
        if model_type not in HF_ARCHITECTURES:
            known = {a for a in archs if a in HF_ARCHITECTURES.values()}
            if not known:
                raise ValueError(
                    f"unsupported architecture (model_type={model_type!r}, architectures="
                    f"{archs}); tachy implements {', '.join(sorted(HF_ARCHITECTURES))}"
                )
            model_type = next(t for t, a in HF_ARCHITECTURES.items() if a in known)
        if hf.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {hf['hidden_act']!r} (need 'silu')")
        if hf.get("mlp_bias"):
            raise ValueError("mlp_bias=True is not supported")
        if hf.get("use_sliding_window"):
            raise ValueError("sliding-window attention is not supported")
        rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
        theta = float(hf.get("rope_theta", rope.pop("rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        scaling = None
        if rope_type != "default":
            scaling = {k: v for k, v in rope.items() if k != "type"} | {"rope_type": rope_type}
        H = hf["num_attention_heads"]
        kw: dict[str, Any] = dict(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf.get("intermediate_size", 0),
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=H,
            num_key_value_heads=hf.get("num_key_value_heads") or H,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // H,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=hf.get("max_position_embeddings", 32768),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qk_norm=model_type in ("qwen3", "qwen3_moe"),
        )
        if model_type == "qwen2":
            kw["qkv_bias"] = True  # Qwen2's q/k/v always carry a bias; o_proj never
        else:
            kw["qkv_bias"] = kw["o_bias"] = bool(hf.get("attention_bias", False))
        if model_type != "qwen3_moe":
            return cls(**kw, num_experts=0, num_experts_per_tok=0, moe_intermediate_size=0)
        experts = hf.get("num_experts", hf.get("num_local_experts"))
        if experts is None:
            raise ValueError("config.json has neither num_experts nor num_local_experts")
        return cls(
            **kw,
            moe_intermediate_size=hf["moe_intermediate_size"],
            num_experts=experts,
            num_experts_per_tok=hf["num_experts_per_tok"],
            norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
            decoder_sparse_step=hf.get("decoder_sparse_step", 1),
            mlp_only_layers=list(hf.get("mlp_only_layers") or []),
            router_aux_loss_coef=hf.get("router_aux_loss_coef", 0.001),
        )


# Hugging Face model_type -> the class transformers builds for it.
HF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}

ROPE_SCALING_KEYS = {
    "linear": {"factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
}


def check_rope_scaling(scaling: dict[str, Any] | None) -> None:
    """ValueError unless `scaling` is None or a RoPE scaling we implement, complete."""
    if scaling is None:
        return
    kind = scaling.get("rope_type")
    if kind not in ROPE_SCALING_KEYS:
        raise ValueError(
            f"unsupported rope scaling {kind!r}; tachy implements {sorted(ROPE_SCALING_KEYS)}"
        )
    missing = sorted(
        k for k in ROPE_SCALING_KEYS[kind] if not isinstance(scaling.get(k), int | float)
    )
    if missing:
        raise ValueError(f"rope scaling {kind!r} needs numbers for {missing}")


PRESETS: dict[str, dict[str, Any]] = {
    # ~2.6M parameters: trains on a 2-core CPU.
    "tiny": dict(
        vocab_size=8192, hidden_size=128, intermediate_size=384, moe_intermediate_size=64,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=8, num_experts_per_tok=2, rope_theta=10000.0, max_position_embeddings=2048,
        tie_word_embeddings=True,
    ),
    # ~0.3B total parameters.
    "small": dict(
        vocab_size=32768, hidden_size=512, intermediate_size=1536, moe_intermediate_size=256,
        num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
        num_experts=32, num_experts_per_tok=4, rope_theta=1e6, max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
    # The Qwen3-30B-A3B shape.
    "30b-a3b": dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, rope_theta=1e6, max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
}  # fmt: skip


def preset(name: str, **overrides: Any) -> ModelConfig:
    """A named config ("tiny", "small", "30b-a3b"), fields overridable."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    return ModelConfig(**{**PRESETS[name], **overrides})
