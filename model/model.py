"""The transformer, gpt-fast style: one file, a dataclass config, shapes in comments.
One decoder serves Llama (SmolLM2), Qwen2, Qwen3 and Qwen3-MoE: the config's switches
choose q/k norms, attention biases, RoPE scaling and dense or MoE feed-forward per layer. Notation: B batch, L new tokens, S cache length, D hidden, H query heads,
KV key/value heads, hd head_dim, E experts, k experts per token, F expert d_ff, V vocab,
T = B * L tokens.

Module names follow the Hugging Face checkpoint (minus its "model." prefix), so that
model.hf maps names one to one except for the stacked experts.

precision:
  "fp32"   every weight full precision and nothing quantized in the expert path
           (kernels.moe_ffn(quantize=False)): the parity baseline.
  "mxfp8"  experts through kernels.moe_ffn: full-precision nn.Parameters quantized inside
           the kernel (training), or, after `quantize_experts()`, pre-quantized (q, scales)
           buffers (sampling; no gradient to the experts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import kernels
from model.config import ModelConfig

PRECISIONS = ("fp32", "mxfp8")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # One fused op (the formula of Qwen3's RMSNorm: fp32 statistics, then the
        # weight in the input's dtype); decoding calls it ~4 times per layer per token.
        h = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return self.weight * h.to(x.dtype)


def rope_inv_freq(config: ModelConfig) -> Tensor:
    """The RoPE inverse frequencies [hd/2] (fp32), scaled as config.rope_scaling says."""
    hd = config.head_dim
    # On the CPU even while a model is built on the meta device: a non-persistent buffer
    # is not loaded with the weights.
    steps = torch.arange(0, hd, 2, device="cpu").float()
    inv_freq = 1.0 / (config.rope_theta ** (steps / hd))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    factor = float(scaling["factor"])
    if scaling["rope_type"] == "linear":
        return inv_freq / factor
    # Llama 3: long wavelengths slowed by `factor`, short ones kept, a smooth ramp between.
    old_context = float(scaling["original_max_position_embeddings"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    ramp = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return torch.where(medium, ramp, scaled)


def rope_cos_sin(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """positions [B, L], inv_freq [hd/2] -> cos, sin [B, L, hd] (fp32; rotate_half layout:
    halves repeat)."""
    freqs = positions.float()[..., None] * inv_freq.to(positions.device)  # [B, L, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [B, L, hd]
    return emb.cos(), emb.sin()


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, n, L, hd], cos/sin [B, L, hd]."""
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    return x * cos + rotate_half(x) * sin


class KVCache(nn.Module):
    """A static KV cache for every layer: k, v [layers, B, KV, S, hd]. Forward with a cache
    writes the new keys/values at `positions` and attends over slots <= each position."""

    def __init__(
        self,
        batch: int,
        max_seq: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        shape = (num_layers, batch, num_kv_heads, max_seq, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    @property
    def max_seq(self) -> int:
        return self.k.shape[3]

    def update(
        self, layer: int, positions: Tensor, k: Tensor, v: Tensor, length: int
    ) -> tuple[Tensor, Tensor]:
        """positions [B, L], k/v [B, KV, L, hd] -> the layer's first `length` slots, k, v
        [B, KV, length, hd]. The write goes to the whole buffer (never to a view of it:
        under torch.compile a write into a slice would copy the cache every step)."""
        B = k.shape[0]
        rows = torch.arange(B, device=k.device)[:, None]  # [B, 1]
        # advanced indices around a slice: the indexed view is [B, L, KV, hd]
        at = (torch.full_like(rows, layer), rows, slice(None), positions)
        self.k[at] = k.transpose(1, 2).to(self.k.dtype)
        self.v[at] = v.transpose(1, 2).to(self.v.dtype)
        return self.k[layer, :B, :, :length], self.v[layer, :B, :, :length]

    def reset(self) -> None:
        self.k.zero_()
        self.v.zero_()

    def copy_rows(self, src: list[int], dst: list[int], length: int) -> None:
        """Rows dst[j] get the first `length` slots of rows src[j], every layer (the source
        rows are read before any is written, so a permutation is safe)."""
        if length > 0 and src:
            for buf in (self.k, self.v):
                buf[:, dst, :, :length] = buf[:, src, :, :length]


class PrefixKV:
    """The keys and values of a prefix every row shares (a system prompt), computed once
    without gradient; a forward over the tokens that follow it attends to them. It is
    used as a cache (Model.forward(ids, positions=P.., cache=prefix, cache_len=P + L)),
    but writes nothing: `update` returns the prefix's K/V with the new tokens' after
    them, so a training forward backpropagates through the new tokens as usual (the
    prefix's own K/V get no gradient: that is the saving)."""

    def __init__(self, k: Tensor, v: Tensor) -> None:
        self.k, self.v = k, v  # [layers, 1, KV, P, hd], detached
        self.length = k.shape[3]

    @property
    def batch(self) -> int:
        return 1 << 30  # any batch: the prefix is broadcast over the rows

    @property
    def max_seq(self) -> int:
        return 1 << 30

    def update(
        self, layer: int, positions: Tensor, k: Tensor, v: Tensor, length: int
    ) -> tuple[Tensor, Tensor]:
        B = k.shape[0]
        pk = self.k[layer].expand(B, -1, -1, -1).to(k.dtype)
        pv = self.v[layer].expand(B, -1, -1, -1).to(v.dtype)
        return torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)


class CacheRows:
    """Some rows of a KVCache seen as a batch: batch row b is cache row rows[b]. The
    engine prefills a prompt that joins a decode batch mid-run through it, into the row
    it was given, while the other rows keep their place."""

    def __init__(self, cache: KVCache, rows: list[int]) -> None:
        self.cache = cache
        self.rows = torch.tensor(rows, device=cache.k.device)  # [B]

    @property
    def batch(self) -> int:
        return len(self.rows)

    @property
    def max_seq(self) -> int:
        return self.cache.max_seq

    def update(
        self, layer: int, positions: Tensor, k: Tensor, v: Tensor, length: int
    ) -> tuple[Tensor, Tensor]:
        at = (layer, self.rows[:, None], slice(None), positions)  # indexed view [B, L, KV, hd]
        self.cache.k[at] = k.transpose(1, 2).to(self.cache.k.dtype)
        self.cache.v[at] = v.transpose(1, 2).to(self.cache.v.dtype)
        return self.cache.k[layer, self.rows, :, :length], self.cache.v[
            layer, self.rows, :, :length
        ]


@torch.no_grad()
def prefix_kv(model: nn.Module, ids: Tensor) -> PrefixKV:
    """The K/V of `ids` [P] through `model` (a Model, or anything that forwards like
    one on its weights, such as training.sft.adapters.AdaptedModel), without gradient."""
    c, P = model.config, ids.shape[0]
    cache = KVCache(1, P, c.num_hidden_layers, c.num_key_value_heads, c.head_dim)
    model(ids[None], cache=cache, cache_len=P, logits_at=ids.new_zeros(1))
    return PrefixKV(cache.k.clone(), cache.v.clone())


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        D, H, KV, hd = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.layer, self.n_head, self.n_kv, self.head_dim = layer, H, KV, hd
        self.q_proj = nn.Linear(D, H * hd, bias=config.qkv_bias)
        self.k_proj = nn.Linear(D, KV * hd, bias=config.qkv_bias)
        self.v_proj = nn.Linear(D, KV * hd, bias=config.qkv_bias)
        self.o_proj = nn.Linear(H * hd, D, bias=config.o_bias)
        if config.qk_norm:  # Qwen3: per head, before RoPE
            self.q_norm = RMSNorm(hd, config.rms_norm_eps)
            self.k_norm = RMSNorm(hd, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = nn.Identity()

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        positions: Tensor,
        cache: KVCache | None,
        cache_len: int,
    ) -> Tensor:
        B, L, _ = x.shape
        hd = self.head_dim
        q = self.q_norm(self.q_proj(x).view(B, L, self.n_head, hd)).transpose(1, 2)  # [B,H,L,hd]
        k = self.k_norm(self.k_proj(x).view(B, L, self.n_kv, hd)).transpose(1, 2)  # [B,KV,L,hd]
        v = self.v_proj(x).view(B, L, self.n_kv, hd).transpose(1, 2)  # [B, KV, L, hd]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)

        if cache is None:
            mask, causal = None, True
        else:
            k, v = cache.update(self.layer, positions, k, v, cache_len)  # [B, KV, S, hd]
            slots = torch.arange(k.shape[2], device=x.device)
            mask = slots[None, None, :] <= positions[:, :, None]  # [B, L, S]
            mask, causal = mask[:, None], False  # [B, 1, L, S]
        # Grouped-query attention without materialising the repeated K/V heads.
        y = F.scaled_dot_product_attention(
            q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask, is_causal=causal, enable_gqa=True
        )
        return self.o_proj(y.transpose(1, 2).reshape(B, L, self.n_head * hd))


class MLP(nn.Module):
    """Dense SwiGLU (mlp_only_layers)."""

    def __init__(self, hidden: int, ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ff, bias=False)
        self.up_proj = nn.Linear(hidden, ff, bias=False)
        self.down_proj = nn.Linear(ff, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def route(
    logits: Tensor, top_k: int, norm_topk_prob: bool, replay: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Router logits [T, E] -> topk_weights [T, k] fp32, topk_ids [T, k]:

        p = softmax(logits)                   # over all experts, fp32
        ids = topk(p)  or the replayed ids    # replay [T, k]; rows of -1: own top-k
        w = p[ids] / sum(p[ids])  if norm_topk_prob  else p[ids]

    Routing replay (RL) runs a training forward through the experts the sampler chose,
    so the policy ratio compares the same network; the weights still come from this
    router, which gets its gradient. With the ids top-k would pick, it is the plain
    routing bit for bit."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # [T, E]
    topk_w, topk_ids = torch.topk(probs, top_k, dim=-1)  # [T, k]
    if replay is not None:
        ids = replay.to(device=probs.device, dtype=torch.long)
        topk_ids = torch.where(ids[:, :1] < 0, topk_ids, ids)
        topk_w = probs.gather(1, topk_ids)
    if norm_topk_prob:
        topk_w = topk_w / topk_w.sum(dim=-1, keepdim=True)
    return topk_w, topk_ids


class MoE(nn.Module):
    """Top-k softmax router and stacked SwiGLU experts.

    The experts are full-precision Parameters w_gate_up [E, 2F, D] (gate rows first)
    and w_down [E, D, F], or, once quantized for sampling, MXFP8 (q, scales) buffers
    that only this class names: a state dict with full-precision experts loads into
    quantized ones by quantizing them on the way in (the load hook, as gpt-fast's
    Attention.load_hook), so importers and the RL weight sync need not know."""

    WEIGHTS = ("w_gate_up", "w_down")

    def __init__(self, config: ModelConfig, precision: str, quantized: bool = False):
        super().__init__()
        D, E, Fe = config.hidden_size, config.num_experts, config.moe_intermediate_size
        self.top_k, self.norm_topk_prob, self.precision = (
            config.num_experts_per_tok,
            config.norm_topk_prob,
            precision,
        )
        self.gate = nn.Linear(D, E, bias=False)  # router
        self.quantized = quantized
        if quantized:
            self._mx_buffers(
                torch.empty(E, 2 * Fe, D, dtype=torch.float8_e4m3fn),
                torch.empty(E, 2 * Fe, D // kernels.MX_BLOCK, dtype=torch.uint8),
                torch.empty(E, D, Fe, dtype=torch.float8_e4m3fn),
                torch.empty(E, D, Fe // kernels.MX_BLOCK, dtype=torch.uint8),
            )
        else:
            self.w_gate_up = nn.Parameter(torch.empty(E, 2 * Fe, D))  # gate rows first
            self.w_down = nn.Parameter(torch.empty(E, D, Fe))
        r = self.adapter_rank = config.expert_adapter_rank
        self.adapter_routing = config.expert_adapter_routing
        if r:
            self.adapter_a = nn.Parameter(torch.empty(E, r, D))  # x -> r, per expert
            self.adapter_b = nn.Parameter(torch.empty(E, D, r))  # r -> out, per expert
        self._register_load_state_dict_pre_hook(self._load_hook)

    def _mx_buffers(self, gu_q: Tensor, gu_s: Tensor, d_q: Tensor, d_s: Tensor) -> None:
        self.register_buffer("w_gate_up_q", gu_q)  # [E, 2F, D] float8_e4m3fn
        self.register_buffer("w_gate_up_s", gu_s)  # [E, 2F, D/32] uint8 E8M0
        self.register_buffer("w_down_q", d_q)  # [E, D, F]
        self.register_buffer("w_down_s", d_s)  # [E, D, F/32]

    @classmethod
    def quantize_state(cls, state: dict[str, Tensor], prefix: str) -> None:
        """Replace the full-precision experts under `prefix` in `state` by MXFP8 (q,
        scales) entries, as a quantized MoE holds them (in place)."""
        for name in cls.WEIGHTS:
            key = prefix + name
            if key in state:
                q, s = kernels.mx_quantize(state.pop(key).float(), -1)
                state[f"{key}_q"], state[f"{key}_s"] = q, s

    def _load_hook(self, state_dict, prefix, *args) -> None:
        if self.quantized:
            self.quantize_state(state_dict, prefix)

    @torch.no_grad()
    def quantize_experts(self) -> None:
        """Replace the expert Parameters by MXFP8 (q, scales) buffers (inference only)."""
        if self.quantized:
            return
        gu = kernels.mx_quantize(self.w_gate_up.detach().float(), -1)
        d = kernels.mx_quantize(self.w_down.detach().float(), -1)
        del self.w_gate_up, self.w_down
        self._mx_buffers(*gu, *d)
        self.quantized = True

    def expert_weights(self):
        if self.quantized:
            return (self.w_gate_up_q, self.w_gate_up_s), (self.w_down_q, self.w_down_s)
        return self.w_gate_up, self.w_down

    def forward(self, x: Tensor, replay: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, L, D] -> y [B, L, D], router logits [T, E], topk_ids [T, k]. `replay`
        [B, L, k]: route each token to these experts instead of its own top-k (rows of
        -1 route themselves); see route()."""
        B, L, D = x.shape
        h = x.reshape(-1, D)  # [T, D]
        logits = self.gate(h)  # [T, E]
        replayed = None if replay is None else replay.reshape(-1, self.top_k)
        topk_w, topk_ids = route(logits, self.top_k, self.norm_topk_prob, replayed)
        quantize = self.precision == "mxfp8"
        y = kernels.moe_ffn(
            h, topk_w.to(x.dtype), topk_ids, *self.expert_weights(), quantize=quantize
        )
        if self.adapter_rank:
            y = y + self.adapters(h, topk_w, topk_ids)
        return y.view(B, L, D), logits, topk_ids

    def adapters(self, h: Tensor, topk_w: Tensor, topk_ids: Tensor) -> Tensor:
        """The experts' low-rank adapters, in parallel with the experts, mixed by the
        same routing weights: sum_k w_k B_(e_k) A_(e_k) h. h [T, D] -> [T, D].

        Full precision and outside the MXFP8 kernel, so the experts stay exactly as
        sampled and trainer and sampler run this same code. Every expert's A is applied
        (E * r columns: cheaper than gathering per token at these sizes); the weights
        of experts outside a token's top-k are zero. Without routing
        (config.expert_adapter_routing False) every adapter gets the token's whole
        routing weight: one dense adapter of rank E x r, whatever the router chose."""
        T, (E, r, D) = h.shape[0], self.adapter_a.shape
        z = (h @ self.adapter_a.reshape(E * r, D).t()).view(T, E, r)  # [T, E, r]
        if self.adapter_routing:
            gates = torch.zeros(T, E, dtype=z.dtype, device=z.device)
            gates = gates.scatter(1, topk_ids, topk_w.to(z.dtype))  # [T, E]
        else:
            gates = topk_w.to(z.dtype).sum(-1, keepdim=True).expand(T, E)  # 1 when normed
        z = (z * gates[..., None]).reshape(T, E * r)
        return z @ self.adapter_b.permute(0, 2, 1).reshape(E * r, D)  # [T, D]


@torch.no_grad()
def init_expert_adapters(moe: MoE, generator: torch.Generator) -> None:
    """A: random, a different draw for every expert (so each expert's B gets its own
    gradient: what breaks the symmetry of identical upcycled experts); B: zero, so
    the model computes exactly what it did without adapters."""
    E, r, D = moe.adapter_a.shape
    moe.adapter_a.copy_(torch.randn(E, r, D, generator=generator) / D**0.5)
    moe.adapter_b.zero_()


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, precision: str, quantized: bool):
        super().__init__()
        self.is_moe = config.is_moe_layer(layer)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if self.is_moe:
            self.mlp = MoE(config, precision, quantized)
        else:
            self.mlp = MLP(config.hidden_size, config.intermediate_size)

    def forward(self, x, cos, sin, positions, cache, cache_len, replay=None):
        """x [B, L, D] -> x [B, L, D], (router logits [T, E], topk_ids [T, k]) or None."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, positions, cache, cache_len)
        h = self.post_attention_layernorm(x)
        if self.is_moe:
            y, logits, ids = self.mlp(h, replay)
            return x + y, (logits, ids)
        return x + self.mlp(h), None


@dataclass
class ModelOutput:
    logits: Tensor  # [B, L, V]
    routing: Tensor | None = None  # topk_ids [moe layers, B, L, k]
    aux_loss: Tensor | None = None  # scalar load-balancing loss (unscaled by the coef)


class Model(nn.Module):
    def __init__(self, config: ModelConfig, precision: str = "mxfp8", quantized: bool = False):
        super().__init__()
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if precision == "mxfp8" or quantized:
            config.check_mx()
        self.config, self.precision = config, precision
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, precision, quantized) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        if not any(t.is_meta for t in self.parameters()):
            self.apply(self._init_weights)

    @classmethod
    def from_state_dict(
        cls,
        config: ModelConfig,
        state: dict[str, Tensor],
        precision: str = "fp32",
        quantized: bool = False,
    ) -> Model:
        """A model in eval mode holding `state` (our names, shapes already checked; a
        tied head may be absent), built on the meta device so no weight is allocated
        twice. A quantized model quantizes full-precision experts as they load."""
        with torch.device("meta"):
            model = cls(config, precision=precision, quantized=quantized)
        model.load_state_dict(state, strict=False, assign=True)
        if config.tie_word_embeddings:
            model.lm_head.weight = model.embed_tokens.weight
        return model.eval()

    @staticmethod
    @torch.no_grad()
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            m.weight.normal_(0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                m.bias.zero_()
        elif isinstance(m, MoE):
            if not m.quantized:
                m.w_gate_up.normal_(0.0, 0.02)
                m.w_down.normal_(0.0, 0.02)
            if m.adapter_rank:
                init_expert_adapters(m, torch.Generator().manual_seed(0))

    @property
    def quantized(self) -> bool:
        return any(isinstance(m, MoE) and m.quantized for m in self.modules())

    def sampling_state(self) -> dict[str, Tensor]:
        """The weights as a sampling copy of this model holds them: a detached CPU copy
        of the state dict, MXFP8 experts quantized (what the RL trainer ships to its
        inference actors; it loads into a quantized Model)."""
        state = {k: v.detach().to("cpu", copy=True) for k, v in self.state_dict().items()}
        if self.precision == "mxfp8":
            for name, module in self.named_modules():
                if isinstance(module, MoE) and not module.quantized:
                    MoE.quantize_state(state, f"{name}.")
        return state

    def quantize_experts(self) -> Model:
        """Pre-quantize every expert weight to MXFP8 buffers (inference; sets mxfp8)."""
        self.config.check_mx()
        for m in self.modules():
            if isinstance(m, MoE):
                m.quantize_experts()
                m.precision = "mxfp8"
        self.precision = "mxfp8"
        return self

    def setup_cache(self, batch: int, max_seq: int, dtype: torch.dtype | None = None) -> KVCache:
        c = self.config
        if max_seq > c.max_position_embeddings:
            raise ValueError(
                f"max_seq {max_seq} > max_position_embeddings {c.max_position_embeddings}"
            )
        w = self.embed_tokens.weight
        return KVCache(
            batch, max_seq, c.num_hidden_layers, c.num_key_value_heads, c.head_dim,
            dtype=dtype or w.dtype, device=w.device,
        )  # fmt: skip

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        *,
        cache_len: int | None = None,
        replay_routing: Tensor | None = None,
        return_routing: bool = False,
        return_aux_loss: bool = False,
        logits_at: Tensor | None = None,
        logits_where: Tensor | None = None,
    ) -> Tensor | ModelOutput:
        """input_ids [B, L] -> logits [B, L, V]; a ModelOutput when routing or the aux loss
        is asked for. positions [L] or [B, L] (default 0..L-1); with `cache` the new K/V are
        written at `positions` and each token attends to cache slots <= its position among
        the first `cache_len` slots (default all max_seq: pass the slots in use, since
        attention costs grow with it). `replay_routing` [moe layers, B, L, k]: route
        token (b, t) of MoE layer i to replay_routing[i, b, t] (see route()). `logits_at`
        [B]: the one position of each row whose logits are wanted (prefill: the head over
        every prompt token would cost more than a layer), logits [B, 1, V]. `logits_where`
        [B, L] bool: only the positions it marks, logits [N, V] in row-major order (a
        fine-tuning loss on the assistant's tokens needs no head over the rest)."""
        B, L = input_ids.shape
        if positions is None:
            positions = torch.arange(L, device=input_ids.device)
        if positions.dim() == 1:
            positions = positions[None].expand(B, L)  # [B, L]
        if positions.shape != (B, L):
            raise ValueError(f"positions {tuple(positions.shape)} must be [L] or [B={B}, L={L}]")
        if cache is not None:
            cache_len = cache.max_seq if cache_len is None else cache_len
            if cache.batch < B:
                raise ValueError(f"batch {B} exceeds the cache's batch {cache.batch}")
            if not 0 < cache_len <= cache.max_seq:
                raise ValueError(f"cache_len {cache_len} outside 1..{cache.max_seq}")
            # A host sync: skipped inside a compiled graph (the engine checks its positions).
            if not torch.compiler.is_compiling() and int(positions.max()) >= cache_len:
                raise ValueError(
                    f"position {int(positions.max())} beyond the cache length {cache_len}"
                )
        if replay_routing is not None:
            n_moe = sum(layer.is_moe for layer in self.layers)
            want = (n_moe, B, L, self.config.num_experts_per_tok)
            if tuple(replay_routing.shape) != want:
                raise ValueError(
                    f"replay_routing {tuple(replay_routing.shape)} must be [moe layers, B, L, k]"
                    f" = {list(want)}"
                )
        cos, sin = rope_cos_sin(positions, self.inv_freq)

        x = self.embed_tokens(input_ids)  # [B, L, D]
        routers = []
        for layer in self.layers:
            replay = None
            if replay_routing is not None and layer.is_moe:
                replay = replay_routing[len(routers)]  # [B, L, k]
            x, r = layer(x, cos, sin, positions, cache, cache_len, replay)
            if r is not None:
                routers.append(r)
        if logits_at is not None:
            x = x[torch.arange(B, device=x.device), logits_at][:, None]  # [B, 1, D]
        elif logits_where is not None:
            x = x[logits_where]  # [N, D]
        logits = self.lm_head(self.norm(x))  # [B, L, V] (or [B, 1, V], [N, V])
        if not (return_routing or return_aux_loss):
            return logits
        out = ModelOutput(logits=logits)
        if return_routing:
            k = self.config.num_experts_per_tok
            ids = [ids.view(B, L, k) for _, ids in routers]
            out.routing = torch.stack(ids) if ids else input_ids.new_zeros(0, B, L, k)
        if return_aux_loss:
            out.aux_loss = load_balancing_loss(routers, self.config.num_experts)
        return out


def load_balancing_loss(routers: list[tuple[Tensor, Tensor]], num_experts: int) -> Tensor:
    """Switch/Qwen load balancing, averaged over MoE layers: E * sum_e f_e * P_e, with f_e
    the fraction of the T*k routing choices sent to expert e and P_e the mean router
    probability of e. 1.0 when perfectly balanced; differentiable through P."""
    if not routers:
        return torch.zeros(())
    losses = []
    for logits, ids in routers:  # [T, E], [T, k]
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        counts = torch.zeros(num_experts, device=ids.device).index_add_(
            0, ids.reshape(-1), torch.ones(ids.numel(), device=ids.device)
        )
        f = counts / ids.numel()  # [E]
        losses.append(num_experts * (f * probs.mean(0)).sum())
    return torch.stack(losses).mean()
