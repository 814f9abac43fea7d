"""A trained second stage for hybrid search, studied on the development packages.

    python -m bench.rerank_dev --lists-model DIR [--epochs 2] [--lr 1e-3] [--seed 0] [--json]

Issue 35 allows a second stage that rescores hybrid's best candidates at query time.
This trains one, KNRM (kernel-pooled soft matches, Xiong et al., SIGIR 2017), and
measures it on the embedder corpus's 8 development packages beside hybrid as shipped:

    query tokens q_i, a candidate's first L tokens d_j (the static model's tokenizer)
    s_ij   = cos(E[q_i], E[d_j])          E: a token table, from the shipped model's
    f_k(i) = log(1 + sum_j exp(-(s_ij - mu_k)^2 / 2 sigma_k^2))   8 kernels, exact to -0.3
    score  = w . [sum_i g_i f_k(i) over the whole candidate, and over its first HEAD
             tokens] + b, g = the query tokens' learnt weights, normalised

trained end to end (the table too) with a listwise softmax over hybrid's best TOP
candidates of docstring queries from the corpus's training packages, built the way
bench.codesearch builds its sets. Those lists come from `--lists-model`, a static
model that never trained on these packages (`tachy train embedder --out DIR`, without
`--corpus`): the shipped model trained on their docstrings, so its lists put the
answer first far more often than on unseen code (0.59 against 0.37 at rank 1), and a
scorer learnt on them would learn that bias. The fused ranking is hybrid + alpha x
the scorer's score rescaled onto [0, 1] over the candidates, for each alpha of
ALPHAS, after every epoch. Nothing here ships: bench/RESULTS.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import common
from bench.codesearch import is_relevant
from bench.hybrid_dev import PER_FILE, Hit, collect, dev_sets
from index.search import cap_per_file, ranked

TOP, LENGTH, QUERY_TOKENS, HEAD = 30, 192, 24, 32
MUS = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3)
SIGMAS = (1e-3,) + (0.1,) * (len(MUS) - 1)  # the first kernel counts exact matches
ALPHAS = (0.25, 0.5, 1.0, 2.0)
TRAIN_QUERIES = 400  # at most, a training package (dev: hybrid_dev's 150)
BATCH = 16


def candidate_lists(trees: list[Path], model, queries: int, work: Path) -> list[dict]:
    """Per query: its token ids, and hybrid's best TOP candidates as token-id rows,
    hybrid scores, paths and whether each answers it."""
    lists = []
    for eval_set in dev_sets(work / "sets", trees, queries):
        name = Path(eval_set.root).name
        for case in collect(eval_set, model, work / f"{name}-index"):
            top = ranked(case.found, limit=TOP, per_file=10**6)
            rows = [case.found.rows[cid] for cid, _ in top]
            ids = np.zeros((len(rows), LENGTH), dtype=np.int32)
            lengths = np.zeros(len(rows), dtype=np.int32)
            for j, tokens in enumerate(model.tokenize([row[3] for row in rows])):
                tokens = tokens[:LENGTH]
                ids[j, : len(tokens)], lengths[j] = tokens, len(tokens)
            query = list(dict.fromkeys(model.tokenize([case.target.query])[0]))[:QUERY_TOKENS]
            lists.append(
                {
                    "query": query, "ids": ids, "lengths": lengths,
                    "hybrid": np.array([score for _, score in top]),
                    "paths": [row[0] for row in rows],
                    "relevant": [is_relevant(Hit(*row[:3]), case.target) for row in rows],
                }
            )  # fmt: skip
        print(f"  {name}: {len(lists)} lists so far", file=sys.stderr, flush=True)
    return lists


def make_scorer(vectors: np.ndarray):
    import torch
    import torch.nn.functional as F

    class Scorer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            table = torch.from_numpy(vectors.copy())
            self.table = torch.nn.Embedding.from_pretrained(table, freeze=False)
            weight = torch.log(table.norm(dim=1, keepdim=True) + 1e-6)  # rarer: heavier
            self.weight = torch.nn.Embedding.from_pretrained(weight, freeze=False)
            self.mu = torch.tensor(MUS)
            self.sigma = torch.tensor(SIGMAS)
            self.out = torch.nn.Linear(2 * len(MUS), 1)

        def forward(self, query, query_mask, ids, mask):  # [B, Q], [B, Q], [B, C, L], [B, C, L]
            q = F.normalize(self.table(query), dim=-1)
            d = F.normalize(self.table(ids), dim=-1)
            s = torch.einsum("bqh,bclh->bcql", q, d)[..., None]  # [B, C, Q, L, 1]
            k = torch.exp(-((s - self.mu) ** 2) / (2 * self.sigma**2)) * mask[:, :, None, :, None]
            g = F.softplus(self.weight(query)[..., 0]) * query_mask
            g = (g / g.sum(1, keepdim=True).clamp_min(1e-6))[:, None, :, None]  # [B, 1, Q, 1]
            whole = (torch.log1p(k.sum(3)) * g).sum(2)  # [B, C, K]
            head = (torch.log1p(k[:, :, :, :HEAD].sum(3)) * g).sum(2)
            return self.out(torch.cat([whole, head], -1))[..., 0]  # [B, C]

    return Scorer()


def tensors(lists: list[dict]):
    import torch

    B = len(lists)
    query = torch.zeros(B, QUERY_TOKENS, dtype=torch.long)
    query_mask = torch.zeros(B, QUERY_TOKENS)
    ids = torch.zeros(B, TOP, LENGTH, dtype=torch.long)
    mask = torch.zeros(B, TOP, LENGTH)
    relevant = torch.zeros(B, TOP, dtype=torch.bool)
    valid = torch.zeros(B, TOP, dtype=torch.bool)
    for i, item in enumerate(lists):
        n = len(item["paths"])
        query[i, : len(item["query"])] = torch.tensor(item["query"], dtype=torch.long)
        query_mask[i, : len(item["query"])] = 1
        ids[i, :n] = torch.from_numpy(item["ids"]).long()
        mask[i, :n] = (torch.arange(LENGTH) < torch.from_numpy(item["lengths"])[:, None]).float()
        relevant[i, :n] = torch.tensor(item["relevant"])
        valid[i, :n] = True
    return query, query_mask, ids, mask, relevant, valid


def train_epoch(scorer, optimizer, lists: list[dict], rng: np.random.Generator) -> float:
    """One pass over `lists` in a random order (listwise softmax: the answers' share of
    the probability); returns the mean loss."""
    losses, order = [], rng.permutation(len(lists))
    for start in range(0, len(lists), BATCH):
        query, query_mask, ids, mask, relevant, valid = tensors(
            [lists[i] for i in order[start : start + BATCH]]
        )
        s = scorer(query, query_mask, ids, mask).masked_fill(~valid, -1e4)
        loss = (s.logsumexp(1) - s.masked_fill(~relevant, -1e4).logsumexp(1)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return float(np.mean(losses))


def score(scorer, lists: list[dict]) -> list[np.ndarray]:
    """The scorer's score of each list's candidates."""
    import torch

    out = []
    with torch.no_grad():
        for start in range(0, len(lists), 64):
            part = lists[start : start + 64]
            query, query_mask, ids, mask, _, _ = tensors(part)
            scores = scorer(query, query_mask, ids, mask)
            out += [scores[i, : len(item["paths"])].numpy() for i, item in enumerate(part)]
    return out


def mrr_at_10(lists: list[dict], scores: list[np.ndarray] | None, alpha: float | None) -> float:
    """Hybrid alone (scores None), the scorer alone (alpha None) or fused."""
    total = 0.0
    for n, item in enumerate(lists):
        final = item["hybrid"]
        if scores is not None:
            s = scores[n]
            rescaled = (s - s.min()) / max(float(s.max() - s.min()), 1e-9)
            final = s if alpha is None else final + alpha * rescaled
        order = np.argsort(-final, kind="stable")
        kept = cap_per_file([(i, item["paths"][i]) for i in order], PER_FILE)[:10]
        rank = next((r for r, i in enumerate(kept, 1) if item["relevant"][i]), None)
        total += 1 / rank if rank else 0.0
    return round(total / len(lists), 4)


def run(lists_model: Path, epochs: int, lr: float, seed: int) -> dict:
    import torch

    from index.static_embedder import StaticEmbedder
    from training.embed.corpus import trees_by_role

    torch.manual_seed(seed)
    shipped, retriever = StaticEmbedder(), StaticEmbedder(lists_model)
    trees = trees_by_role()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tachy-rerank-dev-") as tmp:
        print("training lists (the corpus's training packages):", file=sys.stderr)
        train = candidate_lists(trees["train"], retriever, TRAIN_QUERIES, Path(tmp) / "train")
        print("development lists:", file=sys.stderr)
        dev = candidate_lists(trees["dev"], shipped, 150, Path(tmp) / "dev")
    train = [item for item in train if any(item["relevant"])]
    scorer = make_scorer(shipped._vectors)
    rest = [*scorer.weight.parameters(), *scorer.out.parameters()]
    optimizer = torch.optim.Adam(
        [{"params": scorer.table.parameters(), "lr": lr}, {"params": rest, "lr": 1e-2}]
    )
    record: dict = {
        "lists_model": str(lists_model), "train_lists": len(train), "dev_queries": len(dev),
        "hybrid": mrr_at_10(dev, None, None), "epochs": [],
    }  # fmt: skip
    rng = np.random.default_rng(seed)
    for epoch in range(1, epochs + 1):
        loss = train_epoch(scorer, optimizer, train, rng)
        scores = score(scorer, dev)
        row = {
            "epoch": epoch, "loss": round(loss, 4),
            "scorer_alone": mrr_at_10(dev, scores, None),
            "fused": {str(a): mrr_at_10(dev, scores, a) for a in ALPHAS},
            "seconds": round(time.monotonic() - started),
        }  # fmt: skip
        print(json.dumps(row), file=sys.stderr, flush=True)
        record["epochs"].append(row)
    best = max((v, e["epoch"], a) for e in record["epochs"] for a, v in e["fused"].items())
    summary = {
        "dev_queries": len(dev), "mrr10_hybrid": record["hybrid"], "best_fused_mrr10": best[0],
        "best_epoch": best[1], "best_alpha": float(best[2]),
        "gain_points": round(100 * (best[0] - record["hybrid"]), 1),
    }  # fmt: skip
    return {"summary": summary, "machine": common.machine_info(), **record}


def one_line(s: dict) -> str:
    return (
        f"rerank dev ({s['dev_queries']} queries): hybrid {s['mrr10_hybrid']}, with the trained "
        f"KNRM stage at best {s['best_fused_mrr10']} (epoch {s['best_epoch']}, alpha "
        f"{s['best_alpha']}): {s['gain_points']:+} points"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rerank_dev", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--lists-model", type=Path, required=True,
        help="a static model that never trained on the corpus's packages (builds the training lists)",
    )  # fmt: skip
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3, help="the token table's (1e-3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    record = run(args.lists_model, args.epochs, args.lr, args.seed)
    common.report(record, args.json, lambda r: json.dumps(r["summary"], indent=1), one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
