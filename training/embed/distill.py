"""Distil a static model from the MiniLM we ship: one vector per vocabulary entry.

The recipe of model2vec (Minish Lab), written here on our own MiniLM encoder so that it
needs no transformers and no download:

1. every vocabulary entry v (but padding and the unused slots) goes through MiniLM as
   "[CLS] v [SEP]"; its mean-pooled output is v's vector;
2. PCA to `dim` dimensions (centred, the top components of the vocabulary's vectors);
3. each vector is scaled by its SIF weight a / (a + p(v)), p(v) the token's frequency in
   the training corpus (code passed through index.static_embedder.code_words), so that
   a text's mean vector is dominated by its rare, telling tokens.

Why not model2vec's own `distill`: it loads the teacher through transformers and
skeletoken and estimates frequencies from the vocabulary's order (a natural-language
proxy); here the teacher is our own encoder and the frequencies are counted on code.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from index.embedder import MiniLMEmbedder, load_tokenizer
from index.static_embedder import MODEL_TYPE, code_words

SKIP = re.compile(r"^\[(PAD|unused\d+)\]$")


def token_vectors(teacher: MiniLMEmbedder) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM's vector of every vocabulary entry ([V, H]) and a mask of the entries
    kept (padding and [unusedN] slots are left at zero)."""
    tokenizer = load_tokenizer(teacher.model_dir)
    vocab, size = tokenizer.get_vocab(), tokenizer.get_vocab_size()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    keep = np.ones(size, dtype=bool)
    for token, i in vocab.items():
        if SKIP.match(token):
            keep[i] = False
    ids = np.flatnonzero(keep)
    vectors = np.zeros((size, teacher.dim), dtype=np.float32)
    vectors[ids] = teacher.embed_ids([[cls, int(i), sep] for i in ids])
    return vectors, keep


def pca(vectors: np.ndarray, keep: np.ndarray, dim: int) -> np.ndarray:
    """The kept rows centred and projected on their top `dim` principal components."""
    rows = vectors[keep].astype(np.float64)
    mean = rows.mean(axis=0)
    _, _, vt = np.linalg.svd(rows - mean, full_matrices=False)
    out = np.zeros((len(vectors), dim), dtype=np.float32)
    out[keep] = ((rows - mean) @ vt[:dim].T).astype(np.float32)
    return out


def plain_tokenizer(model_dir: Path):
    """The model's tokenizer without truncation or padding (the static embedder's)."""
    tok = load_tokenizer(model_dir)
    tok.no_truncation()
    return tok


def token_counts(tokenizer, texts: Iterable[str], vocab: int) -> np.ndarray:
    """How often each token occurs in `texts` (as the static embedder tokenizes them:
    `tokenizer` without truncation)."""
    counts = np.zeros(vocab, dtype=np.int64)
    batch: list[str] = []

    def flush() -> None:
        for enc in tokenizer.encode_batch(batch, add_special_tokens=False):
            np.add(counts, np.bincount(enc.ids, minlength=len(counts)), out=counts)
        batch.clear()

    for text in texts:
        batch.append(code_words(text))
        if len(batch) == 256:
            flush()
    if batch:
        flush()
    return counts


def sif_weights(counts: np.ndarray, a: float) -> np.ndarray:
    """a / (a + p) per token, p its smoothed frequency (a count of 1 added to each)."""
    p = (counts + 1) / float(counts.sum() + len(counts))
    return (a / (a + p)).astype(np.float32)


def distill(
    texts: Iterable[str],
    *,
    dim: int = 256,
    sif: float = 1e-3,
    teacher: MiniLMEmbedder | None = None,
) -> tuple[np.ndarray, dict]:
    """The static vectors [V, dim] distilled from `teacher` (default: the MiniLM we ship),
    weighted by token frequencies counted on `texts`; and a record of how."""
    teacher = teacher or MiniLMEmbedder(batch_size=512)
    raw, keep = token_vectors(teacher)
    reduced = pca(raw, keep, dim)
    counts = token_counts(plain_tokenizer(teacher.model_dir), texts, len(raw))
    vectors = reduced * sif_weights(counts, sif)[:, None]
    info = {
        "teacher": teacher.name,
        "dim": dim,
        "sif": sif,
        "kept_tokens": int(keep.sum()),
        "corpus_tokens": int(counts.sum()),
        "seen_tokens": int((counts > 0).sum()),
    }
    return vectors, info


def save_model(out: Path, vectors: np.ndarray, teacher_dir: Path, info: dict) -> None:
    """Write a model directory index.static_embedder.StaticEmbedder reads."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({"vectors": vectors.astype(np.float16)}, str(out / "vectors.safetensors"))
    shutil.copyfile(teacher_dir / "tokenizer.json", out / "tokenizer.json")
    config = {"model_type": MODEL_TYPE, "dim": int(vectors.shape[1]), **info}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
