"""The code embedder's whole recipe, from the standard library to a model directory.

    mine     the training part of the split (training/configs/embed-split.json):
             every chunk, and (query, code) pairs from docstrings and comments; with
             `corpus`, also the PyPI corpus's training packages
             (training/configs/embed-corpus.json), and pairs of every kind the code
             gives (names, tests, signatures: training.embed.mining)
    distil   MiniLM -> one vector per vocabulary entry, PCA, SIF weights counted on
             the training part (training.embed.distill)
    teach    MiniLM's vectors of every training chunk (the slow step, ~8 min on two
             cores: cached in CACHE/teacher.npz, default ~/.cache/tachy/embed, reused
             while the corpus is unchanged)
    train    contrastive on the pairs + fitting MiniLM's chunk vectors
             (training.embed.train)
    save     OUT/{config.json, tokenizer.json, vectors.safetensors}: what
             index.static_embedder.StaticEmbedder loads, with the head rule it
             applies when embedding (head_lines, head_weight: see there)
    evaluate dense MRR@10 / Recall@10 on the evaluation part (functions' docstrings);
             with `corpus`, on the corpus's development packages as well ("dev")

Nothing of the evaluation part or of the development packages is used before the
last step (the development packages are only downloaded with the rest).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from training.embed.mining import KINDS, PACKAGE_CAP, MineSettings
from training.embed.train import TrainSettings

# Pairs per step (each the others' negatives) with the PyPI corpus: 1024 beat 256 and
# 512 on the development packages (bench/RESULTS.md, issue 35); the shipped model's.
CORPUS_BATCH = 1024


@dataclass
class Recipe:
    """What the shipped model was built with (tuned on a part of the training units,
    bench/RESULTS.md)."""

    dim: int = 256
    sif: float = 1e-4
    # The embedder's head rule. Applied when embedding only: training the table with
    # it in the loop did worse on the development units (bench/RESULTS.md).
    head_lines: int = 4
    head_weight: float = 0.6
    train: TrainSettings = field(
        default_factory=lambda: TrainSettings(epochs=6, lr=3e-3, regress_weight=3.0)
    )
    # Train on the PyPI corpus's "train" packages too, with pairs of `kinds` (from the
    # stdlib as well), at most `package_cap` per package; report its "dev" packages.
    # The shipped model was trained so, with train.batch = CORPUS_BATCH.
    corpus: bool = False
    kinds: tuple[str, ...] = KINDS
    package_cap: int = PACKAGE_CAP

    def mining(self) -> MineSettings:
        return MineSettings(kinds=self.kinds, package_cap=self.package_cap)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tachy" / "embed"


def _texts_key(texts: list[str]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def teacher_vectors(teacher, texts: list[str], cache: Path, name: str) -> np.ndarray:
    """MiniLM's vectors of `texts`, from `cache` (an .npz) when it holds them for exactly
    these texts, else computed and added to it."""
    key = _texts_key(texts)
    stored: dict[str, np.ndarray] = {}
    if cache.is_file():
        with np.load(cache) as saved:
            stored = {k: saved[k] for k in saved.files}
        if stored.get(f"{name}_key") is not None and str(stored[f"{name}_key"]) == key:
            return stored[name]
    vectors = teacher.embed(texts)
    stored[name], stored[f"{name}_key"] = vectors, np.array(key)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **stored)
    return vectors


def build(
    out: Path, recipe: Recipe, *, cache: Path | None = None, log: Callable[[str], None] = print
) -> dict:
    """Run the recipe into `out` (teacher vectors cached in `cache`, default
    default_cache()); returns the record written to its config.json."""
    from index.embedder import MiniLMEmbedder
    from index.static_embedder import StaticEmbedder
    from training.embed.distill import distill, plain_tokenizer, save_model
    from training.embed.evaluate import evaluate
    from training.embed.mining import count_pairs
    from training.embed.pairs import mine_corpus, unit_texts
    from training.embed.split import read_split
    from training.embed.train import train

    started = time.monotonic()
    split = read_split()
    trees: dict[str, list[Path]] = {}
    texts = unit_texts(split["train"])
    if recipe.corpus:
        from training.embed.corpus import trees_by_role
        from training.embed.mining import mine_training, package_texts

        trees = trees_by_role(log=log)
        corpus = mine_training(split["train"], trees["train"], recipe.mining())
        texts = itertools.chain(texts, package_texts(trees["train"]))
    else:
        corpus = mine_corpus(split["train"], more=True)
    counts = count_pairs(corpus.pairs)
    log(
        f"mined {len(corpus.pairs)} pairs, {len(corpus.chunks)} chunks from {len(split['train'])} "
        f"training units and {len(trees.get('train', []))} packages; by kind {counts['by_kind']}"
    )
    teacher = MiniLMEmbedder(batch_size=512)
    vectors, info = distill(texts, dim=recipe.dim, sif=recipe.sif, teacher=teacher)
    log(f"distilled {info['kept_tokens']} token vectors ({time.monotonic() - started:.0f} s)")
    settings = recipe.train
    chunks = corpus.texts()
    targets = None
    if settings.regress_weight:
        store = (cache or default_cache()) / "teacher.npz"
        log(f"MiniLM's vectors of the training chunks (cached in {store}) ...")
        # Keyed by the texts themselves: a change of the corpus (or of its mining) is a
        # change of the key; with the corpus under its own name, so that both stay.
        name = "corpus_chunks" if recipe.corpus else "chunks"
        targets = teacher_vectors(teacher, chunks, store, name)
        log(f"  done ({time.monotonic() - started:.0f} s)")

    def show(epoch: int, _table: np.ndarray, loss: float) -> None:
        log(f"epoch {epoch}/{settings.epochs}: loss {loss:.4f}")

    trained = train(
        vectors, plain_tokenizer(teacher.model_dir), corpus.pairs, settings, chunks=chunks,
        chunk_targets=targets, on_epoch=show,
    )  # fmt: skip
    record = {
        **info,
        "head_lines": recipe.head_lines,
        "head_weight": recipe.head_weight,
        "train": settings.as_dict(),
        "pairs": len(corpus.pairs),
        "chunks": len(corpus.chunks),
        "split": "training/configs/embed-split.json",
        "pair_counts": counts,
    }
    if recipe.corpus:
        record["corpus"] = "training/configs/embed-corpus.json"
        record["mining"] = {"kinds": list(recipe.kinds), "package_cap": recipe.package_cap}
    save_model(out, trained, teacher.model_dir, record)
    record["eval"] = evaluate(StaticEmbedder(out), mine_corpus(split["eval"]))
    if recipe.corpus:
        from training.embed.mining import dev_corpus

        record["dev"] = evaluate(StaticEmbedder(out), dev_corpus(trees["dev"]))
        log(f"development packages: {record['dev']}")
    record["seconds"] = round(time.monotonic() - started, 1)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **record}, indent=1) + "\n")
    log(f"held-out (evaluation part): {record['eval']}")
    return record
