"""A contextual layer over the static code model, trained and measured on the embedder
corpus's development packages: how much composition buys, and what it costs.

    python -m bench.contextual_dev --json                 # width 64, 3 epochs, seed 0
    python -m bench.contextual_dev --width 128 --epochs 2 --minilm --json

The static model sums token vectors, so it cannot read a word in the light of its
neighbours; MiniLM can, at ~1/40 of the speed. This measures the step between them:
one pre-norm transformer layer of width W over the first N tokens of a text (--window),
its inputs the static model's own (frozen) token vectors, its masked mean pooled and
mapped back to the static width and added to the static vector before the final
normalisation:

    v(text) = normalise(static(text) + U . mean_t layer(P . e_t + pos_t))

U starts at zero, so the untrained layer is exactly the shipped model (head rule
included). It trains as the static recipe does (training.embed.train): InfoNCE on the
corpus's pairs, both directions (weight --pairs-weight), plus fitting MiniLM's vectors
of the training chunks and of the pairs' queries (REGRESS x (1 - cosine), through a
learnt map to MiniLM's width). The teacher's vectors come from the recipe's cache
(`tachy train embedder --corpus` fills it with the chunks', ~19 min the first time;
the queries' are added on this script's first run).

Measured in the same run, on the 8 dev packages only (never trained on, never reported
as held out): the recipe's dense MRR@10 after every epoch, then bench.hybrid_dev's
905 queries (lexical / dense / hybrid as search ranks them) for the shipped model, the
trained layer (the epoch best on dense), and, with --minilm, MiniLM. Embedding
throughput of each on the same texts. The layer runs in numpy at embedding time, as
the index would run it; training uses torch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bench import common
from training.embed.pipeline import CORPUS_BATCH, Recipe
from training.embed.train import pair_loss

# As the static recipe trains with the corpus (training.embed.pipeline).
REGRESS = Recipe().train.regress_weight  # the weight of fitting MiniLM's vectors
TEMPERATURE = Recipe().train.temperature
BATCH = CORPUS_BATCH  # pairs a step
HEAD_WIDTH = 32  # attention heads of 32 numbers each


@dataclass
class Settings:
    width: int = 64
    ff: int = 256
    window: int = 128  # tokens of a text the layer reads (a chunk's head and first lines)
    epochs: int = 3
    lr: float = 1e-3
    seed: int = 0
    # The pairs' InfoNCE weight; 0 trains on MiniLM's vectors alone (distillation).
    pairs_weight: float = 1.0


def _layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gain + bias


def layer_forward(w: dict[str, np.ndarray], x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The pooled correction [B, D] for token vectors x [B, L, D_static] (mask [B, L]:
    True where a token is); numpy, the twin of Context.forward."""
    b, n, _ = x.shape
    d = w["proj"].shape[1]
    heads = d // HEAD_WIDTH
    h = x @ w["proj"] + w["pos"][:n]
    a = _layer_norm(h, w["ln1_g"], w["ln1_b"]) @ w["qkv"] + w["qkv_b"]
    q, k, v = (
        part.reshape(b, n, heads, HEAD_WIDTH).transpose(0, 2, 1, 3) for part in np.split(a, 3, -1)
    )
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(HEAD_WIDTH)
    keys = mask.copy()
    keys[:, 0] = True  # an empty text still attends somewhere (its output is masked)
    s = np.where(keys[:, None, None, :], s, -1e9)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    h = h + (s @ v).transpose(0, 2, 1, 3).reshape(b, n, d) @ w["out"] + w["out_b"]
    f = _layer_norm(h, w["ln2_g"], w["ln2_b"]) @ w["ff1"] + w["ff1_b"]
    h = h + np.maximum(f, 0) @ w["ff2"] + w["ff2_b"]
    h = _layer_norm(h, w["lnf_g"], w["lnf_b"])
    pooled = (h * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
    return pooled @ w["up"]


def padded(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The id lists as a zero-padded [B, L] index and its mask (True where a token is)."""
    n = max(1, max(len(r) for r in ids))
    index = np.zeros((len(ids), n), dtype=np.int64)
    mask = np.zeros((len(ids), n), dtype=bool)
    for i, row in enumerate(ids):
        index[i, : len(row)] = row
        mask[i, : len(row)] = True
    return index, mask


class ContextualEmbedder:
    """The static model plus a trained layer (module docstring), in numpy: what the index
    would run. Has what CodeIndex needs of an embedder (name, dim, embed)."""

    def __init__(self, static, weights: dict[str, np.ndarray]) -> None:
        self.static, self.weights = static, weights
        self.dim = static.dim
        h = hashlib.blake2b(digest_size=8)
        for key in sorted(weights):
            h.update(key.encode() + weights[key].tobytes())
        self.name = f"{static.name}+ctx@{h.hexdigest()}"

    def embed(self, texts) -> np.ndarray:
        base = self.static.embed(texts)
        if not len(texts):
            return base
        window = self.weights["pos"].shape[0]
        ids = [row[:window] for row in self.static.tokenize(texts)]
        order = np.argsort([len(r) for r in ids])  # like lengths together: less padding
        out = np.empty_like(base)
        for start in range(0, len(ids), 128):
            rows = order[start : start + 128]
            index, mask = padded([ids[i] for i in rows])
            out[rows] = base[rows] + layer_forward(self.weights, self.static._vectors[index], mask)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def train(
    static, corpus, teacher: np.ndarray, query_teacher: np.ndarray, settings: Settings, on_epoch
) -> None:
    """Train the layer on the pairs and on MiniLM's vectors of the chunks (`teacher`) and
    of the pairs' queries (`query_teacher`); on_epoch(epoch, weights, loss) after each
    epoch."""
    torch.manual_seed(settings.seed)
    generator = torch.Generator().manual_seed(settings.seed)
    table = torch.from_numpy(static._vectors)
    model = Context(table, settings.width, settings.ff, settings.window)
    project = torch.nn.Linear(table.shape[1], teacher.shape[1], bias=False)
    optimizer = torch.optim.Adam([*model.parameters(), *project.parameters()], lr=settings.lr)
    pairs, chunks = corpus.pairs, corpus.texts()

    def prepared(texts: list[str]) -> tuple[torch.Tensor, list[list[int]]]:
        base = torch.from_numpy(static.embed(texts))
        return base, [row[: settings.window] for row in static.tokenize(texts)]

    q_base, q_ids = prepared([p.query for p in pairs])
    c_base, c_ids = prepared([p.code for p in pairs])
    k_base, k_ids = prepared(chunks)
    targets = torch.from_numpy(teacher.astype(np.float32))
    query_targets = torch.from_numpy(query_teacher.astype(np.float32))
    chunk_of = torch.tensor([p.chunk for p in pairs])

    def vectors(base: torch.Tensor, ids: list[list[int]], rows: torch.Tensor) -> torch.Tensor:
        return F.normalize(base[rows] + model([ids[i] for i in rows]), dim=1)

    for epoch in range(settings.epochs):
        order = torch.randperm(len(pairs), generator=generator)
        losses = []
        for start in range(0, len(pairs) - 1, BATCH):
            rows = order[start : start + BATCH]
            q, c = vectors(q_base, q_ids, rows), vectors(c_base, c_ids, rows)
            loss = pair_loss(q, c, chunk_of[rows], TEMPERATURE)
            pick = torch.randint(len(chunks), (len(rows),), generator=generator)
            fit = F.cosine_similarity(project(vectors(k_base, k_ids, pick)), targets[pick], dim=1)
            fit_queries = F.cosine_similarity(project(q), query_targets[rows], dim=1)
            distil = (2 - fit.mean() - fit_queries.mean()) / 2
            loss = settings.pairs_weight * loss + REGRESS * distil
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        on_epoch(epoch + 1, model.numpy_weights(), float(np.mean(losses)))


class Context(torch.nn.Module):
    """The layer in torch, for training (layer_forward is its numpy twin)."""

    def __init__(self, table: torch.Tensor, width: int, ff: int, window: int = 128) -> None:
        super().__init__()
        d = width
        self.table, self.heads = table, width // HEAD_WIDTH
        self.proj = torch.nn.Linear(table.shape[1], d, bias=False)
        self.pos = torch.nn.Parameter(torch.randn(window, d) * 0.02)
        self.ln1, self.ln2, self.lnf = (torch.nn.LayerNorm(d) for _ in range(3))
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.ff1 = torch.nn.Linear(d, ff)
        self.ff2 = torch.nn.Linear(ff, d)
        self.up = torch.nn.Linear(d, table.shape[1], bias=False)
        torch.nn.init.zeros_(self.up.weight)  # starts as the static model

    def forward(self, ids: list[list[int]]) -> torch.Tensor:
        index, mask = (torch.from_numpy(a) for a in padded(ids))
        b, n = index.shape
        h = self.proj(self.table[index]) + self.pos[:n]
        q, k, v = (
            t.view(b, n, self.heads, HEAD_WIDTH).transpose(1, 2)
            for t in self.qkv(self.ln1(h)).chunk(3, -1)
        )
        keys = mask.clone()
        keys[:, 0] = True  # an empty text still attends somewhere (its output is masked)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keys[:, None, None, :])
        h = h + self.out(a.transpose(1, 2).reshape(b, n, -1))
        h = h + self.ff2(F.relu(self.ff1(self.ln2(h))))
        h = self.lnf(h) * mask[..., None]
        return self.up(h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1))

    def numpy_weights(self) -> dict[str, np.ndarray]:
        t = lambda p: p.detach().numpy().copy()  # noqa: E731
        return {
            "proj": t(self.proj.weight.T), "pos": t(self.pos),
            "ln1_g": t(self.ln1.weight), "ln1_b": t(self.ln1.bias),
            "qkv": t(self.qkv.weight.T), "qkv_b": t(self.qkv.bias),
            "out": t(self.out.weight.T), "out_b": t(self.out.bias),
            "ln2_g": t(self.ln2.weight), "ln2_b": t(self.ln2.bias),
            "ff1": t(self.ff1.weight.T), "ff1_b": t(self.ff1.bias),
            "ff2": t(self.ff2.weight.T), "ff2_b": t(self.ff2.bias),
            "lnf_g": t(self.lnf.weight), "lnf_b": t(self.lnf.bias),
            "up": t(self.up.weight.T),
        }  # fmt: skip


def throughput(embedder, texts: list[str]) -> float:
    embedder.embed(texts[:64])  # warm
    started = time.perf_counter()
    embedder.embed(texts)
    return round(len(texts) / (time.perf_counter() - started), 1)


def run(settings: Settings, minilm: bool, queries: int, log=print) -> dict:
    from bench.hybrid_dev import collect, dev_sets, study
    from index.embedder import MiniLMEmbedder
    from index.static_embedder import StaticEmbedder
    from training.embed.corpus import trees_by_role
    from training.embed.evaluate import evaluate
    from training.embed.mining import dev_corpus, mine_training
    from training.embed.pipeline import default_cache, teacher_vectors
    from training.embed.split import read_split

    started = time.monotonic()
    static = StaticEmbedder()
    trees = trees_by_role(log=log)
    corpus = mine_training(read_split()["train"], trees["train"], Recipe().mining())
    log(f"{len(corpus.pairs)} pairs, {len(corpus.chunks)} chunks; MiniLM's chunk vectors ...")
    minilm_teacher, store = MiniLMEmbedder(batch_size=512), default_cache() / "teacher.npz"
    teacher = teacher_vectors(minilm_teacher, corpus.texts(), store, "corpus_chunks")
    queries_text = [p.query for p in corpus.pairs]
    query_teacher = teacher_vectors(minilm_teacher, queries_text, store, "corpus_queries")
    dev = dev_corpus(trees["dev"])
    record: dict = {"settings": asdict(settings), "epochs": []}
    record["static_dev_dense"] = evaluate(static, dev)
    log(f"shipped static model, dev dense: {record['static_dev_dense']}")
    best: dict = {"mrr": -1.0}

    def on_epoch(epoch: int, weights: dict, loss: float) -> None:
        scores = evaluate(ContextualEmbedder(static, weights), dev)
        record["epochs"].append({"epoch": epoch, "loss": round(loss, 4), "dev_dense": scores})
        log(
            f"epoch {epoch}: loss {loss:.4f}, dev dense {scores} ({time.monotonic() - started:.0f} s)"
        )
        if scores["mrr@10"] > best["mrr"]:
            best.update(mrr=scores["mrr@10"], epoch=epoch, weights=weights)

    train(static, corpus, teacher, query_teacher, settings, on_epoch)
    contextual = ContextualEmbedder(static, best["weights"])
    record["best_epoch"] = best["epoch"]
    embedders = {"static": static, "contextual": contextual}
    if minilm:
        embedders["minilm"] = MiniLMEmbedder()
    sample = dev.texts()[:2048]
    record["chunks_per_s"] = {
        name: throughput(e, sample if name != "minilm" else sample[:256])
        for name, e in embedders.items()
    }
    log(f"embedding throughput (chunks/s): {record['chunks_per_s']}")
    record["hybrid_dev"] = {}
    with tempfile.TemporaryDirectory(prefix="tachy-contextual-dev-") as tmp:
        work = Path(tmp)
        sets = dev_sets(work / "sets", trees["dev"], queries)
        for name, embedder in embedders.items():
            cases = {
                Path(s.root).name: collect(s, embedder, work / f"{name}-{Path(s.root).name}")
                for s in sets
            }
            found = study(cases, static, grid=False, late=())
            record["hybrid_dev"][name] = {
                m: found[m]["mrr_at_10"] for m in ("lexical", "dense", "hybrid")
            }
            record["hybrid_dev"][name]["queries"] = found["queries"]
            log(f"{name}: {record['hybrid_dev'][name]} ({time.monotonic() - started:.0f} s)")
    hybrid = record["hybrid_dev"]
    summary = {
        "width": settings.width,
        "window": settings.window,
        "pairs_weight": settings.pairs_weight,
        "best_epoch": best["epoch"],
        "dev_dense_static": record["static_dev_dense"]["mrr@10"],
        "dev_dense_contextual": best["mrr"],
        **{f"dev_hybrid_{name}": scores["hybrid"] for name, scores in hybrid.items()},
        **{f"chunks_per_s_{name}": v for name, v in record["chunks_per_s"].items()},
    }
    if minilm:
        summary["speed_ratio_contextual_vs_minilm"] = round(
            record["chunks_per_s"]["contextual"] / record["chunks_per_s"]["minilm"], 1
        )
    return {"summary": summary, "machine": common.machine_info(), **record}


def one_line(s: dict) -> str:
    line = (
        f"contextual layer (width {s['width']}, window {s['window']}, epoch {s['best_epoch']}): dev dense "
        f"{s['dev_dense_static']} -> {s['dev_dense_contextual']}; dev hybrid static "
        f"{s['dev_hybrid_static']} -> {s['dev_hybrid_contextual']}"
    )
    if "dev_hybrid_minilm" in s:
        line += f" (MiniLM {s['dev_hybrid_minilm']}); {s['speed_ratio_contextual_vs_minilm']}x MiniLM's chunks/s"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.contextual_dev", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--width", type=int, default=64, help="the layer's width, a multiple of 32 (64)"
    )
    parser.add_argument("--ff", type=int, default=256, help="its feed-forward width (256)")
    parser.add_argument(
        "--window", type=int, default=128, help="tokens of a text the layer reads (128)"
    )
    parser.add_argument("--epochs", type=int, default=3, help="passes over the pairs (3)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (1e-3)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (0)")
    parser.add_argument(
        "--pairs-weight", type=float, default=1.0,
        help="weight of the pairs' contrastive loss; 0: MiniLM's vectors alone (1)",
    )  # fmt: skip
    parser.add_argument("--queries", type=int, default=150, help="hybrid queries per package (150)")
    parser.add_argument(
        "--minilm", action="store_true", help="measure MiniLM beside it (~3 min more)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.width < HEAD_WIDTH or args.width % HEAD_WIDTH:
        parser.error(f"--width must be a positive multiple of {HEAD_WIDTH}")
    if (
        args.ff < 1
        or args.window < 1
        or args.epochs < 1
        or not args.lr > 0
        or not args.pairs_weight >= 0
    ):
        parser.error("--ff, --window and --epochs must be >= 1, --lr > 0 and --pairs-weight >= 0")
    settings = Settings(
        args.width, args.ff, args.window, args.epochs, args.lr, args.seed, args.pairs_weight
    )
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    record = run(settings, args.minilm, args.queries, log=log)
    common.report(record, args.json, lambda r: json.dumps(r["summary"], indent=1), one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
