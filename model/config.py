"""The model config: a dataclass for the Qwen3-MoE family, presets, and the Hugging Face
config.json mapping."""

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

    def check_mx(self) -> None:
        """The MXFP8 expert kernels need hidden and moe_intermediate sizes in blocks of 32."""
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
        attn = D * H * hd + 2 * D * KV * hd + H * hd * D + 2 * hd
        n = self.vocab_size * D * (1 if self.tie_word_embeddings else 2) + D
        for i in range(self.num_hidden_layers):
            n += attn + 2 * D
            if self.is_moe_layer(i):
                e = self.num_experts_per_tok if active else self.num_experts
                n += D * self.num_experts + e * 3 * D * self.moe_intermediate_size
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
        """From a Hugging Face Qwen3-MoE config.json dict (transformers 4.x or 5.x keys)."""
        model_type = hf.get("model_type")
        archs = hf.get("architectures") or []
        if model_type != "qwen3_moe" and "Qwen3MoeForCausalLM" not in archs:
            raise ValueError(
                f"not a Qwen3-MoE config (model_type={model_type!r}, architectures={archs}); "
                "only the Qwen3-MoE architecture is supported"
            )
        if hf.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {hf['hidden_act']!r} (need 'silu')")
        if hf.get("attention_bias"):
            raise ValueError("attention_bias=True is not supported")
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"unsupported rope scaling {rope_type!r}")
        theta = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
        H = hf["num_attention_heads"]
        experts = hf.get("num_experts", hf.get("num_local_experts"))
        if experts is None:
            raise ValueError("config.json has neither num_experts nor num_local_experts")
        return cls(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf.get("intermediate_size", 0),
            moe_intermediate_size=hf["moe_intermediate_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=H,
            num_key_value_heads=hf.get("num_key_value_heads", H),
            head_dim=hf.get("head_dim") or hf["hidden_size"] // H,
            num_experts=experts,
            num_experts_per_tok=hf["num_experts_per_tok"],
            norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            max_position_embeddings=hf.get("max_position_embeddings", 32768),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            decoder_sparse_step=hf.get("decoder_sparse_step", 1),
            mlp_only_layers=list(hf.get("mlp_only_layers") or []),
            router_aux_loss_coef=hf.get("router_aux_loss_coef", 0.001),
        )


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
