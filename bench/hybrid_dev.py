"""Hybrid search on the embedder corpus's development packages: where search's weights
and any second stage are tuned (never on a set that a benchmark reports).

    python -m bench.hybrid_dev                  # lexical, dense, hybrid MRR@10
    python -m bench.hybrid_dev --grid           # + every fusion weight of a grid
    python -m bench.hybrid_dev --late 0.5,1,2   # + a late-interaction rescoring
    python -m bench.hybrid_dev --model DIR      # another static model

Each dev package of training/configs/embed-corpus.json becomes a docstring set the way
bench.codesearch builds its third-party sets (the queries' docstrings blanked, every
chunk a candidate answer); packages with fewer than 10 usable queries are left out.
Each is indexed once with the model; the candidates of every query are kept, so a
weight grid costs no search again. The late-interaction rescoring adds to the best
30 hybrid candidates w times MaxSim of the query's tokens over the chunk's, with the
static model's unit token vectors, weighted by the query tokens' norms (ColBERT's
score with a static model's vectors). The anchor is hybrid search as it ships, in
the same run. The JSON's `summary` holds the headline figures; the one-line summary
goes to stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import common
from bench.codesearch import EvalSet, Target, build_eval_set, first_relevant_rank
from index.search import CHUNKS_PER_FILE, Candidates, Weights, cap_per_file, ranked, rescaled
from training.embed.mining import package_files

MIN_QUERIES = 10
LATE_CANDIDATES = 30
PER_FILE = CHUNKS_PER_FILE  # as search() caps a file's chunks
GRID = {
    "lexical": (0.5, 0.75, 1.0),
    "dense": (0.75, 1.0, 1.5),
    "name": (0.75, 1.5, 2.25),
}


@dataclass
class Case:
    target: Target
    found: Candidates


@dataclass
class Hit:  # a row's place, as first_relevant_rank and is_relevant read it
    path: str
    start_line: int
    end_line: int


def package_root(tree: Path) -> tuple[Path, list[str]]:
    """Where a package tree's importable code lies (its src/ or itself), and its
    top-level modules and packages there."""
    root = tree / "src" if (tree / "src").is_dir() else tree
    units = {(tree / code).relative_to(root).parts[0] for code in package_files(tree)[0]}
    return root, sorted(units)


def dev_sets(work: Path, trees: Sequence[Path], queries: int, seed: int = 0) -> list[EvalSet]:
    sets = []
    for tree in trees:
        root, units = package_root(tree)
        built = build_eval_set(
            work / tree.name, source=root, n_queries=queries, seed=seed, units=units
        )
        if len(built.targets) >= MIN_QUERIES:
            sets.append(built)
    return sets


def collect(eval_set: EvalSet, embedder, cache: Path) -> list[Case]:
    """Index the set with the embedder and keep every query's hybrid candidates."""
    from index.indexer import CodeIndex

    with CodeIndex(eval_set.root, cache_dir=cache, embedder=embedder) as idx:
        idx.update()
        return [Case(t, idx.candidates(t.query)) for t in eval_set.targets]


def reciprocal_rank(ranking: list[int], case: Case) -> float:
    rows = case.found.rows
    hits = [Hit(rows[cid][0], rows[cid][1], rows[cid][2]) for cid in ranking[:10]]
    rank = first_relevant_rank(hits, case.target, 10)
    return 1.0 / rank if rank else 0.0


def mode_ranking(case: Case, mode: str, weights: Weights) -> list[int]:
    found = case.found
    if mode != "hybrid":  # one retriever alone, as search(mode=...) ranks it
        found = Candidates(
            lexical=found.lexical if mode == "lexical" else [],
            dense=found.dense if mode == "dense" else [],
            rows=found.rows,
            named=found.named,
            bonus=found.bonus,
        )
    return [cid for cid, _ in ranked(found, limit=10**6, per_file=PER_FILE, weights=weights)]


def late_ranking(case: Case, late: dict[int, float], weight: float) -> list[int]:
    scored = ranked(case.found, limit=10**6, per_file=10**6)
    scores = dict(scored)
    for cid, value in rescaled(list(late.items())).items():
        scores[cid] += weight * value
    order = sorted(scores, key=lambda cid: (-scores[cid], cid))
    return cap_per_file([(cid, case.found.rows[cid][0]) for cid in order], PER_FILE)


def maxsim(model, case: Case) -> dict[int, float]:
    """Late interaction over the best LATE_CANDIDATES hybrid candidates."""
    top = [cid for cid, _ in ranked(case.found, limit=LATE_CANDIDATES, per_file=10**6)]
    vectors = model._vectors
    query = list(dict.fromkeys(model.tokenize([case.target.query])[0]))
    if not query or not top:
        return {}
    norms = np.linalg.norm(vectors[query], axis=1)
    q = vectors[query] / np.maximum(norms[:, None], 1e-12)
    w = norms / max(norms.sum(), 1e-12)
    out = {}
    for cid, ids in zip(top, model.tokenize([case.found.rows[c][3] for c in top]), strict=True):
        d = vectors[np.unique(np.asarray(ids or [0]))]
        d = d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
        out[cid] = float((d @ q.T).max(axis=0) @ w)
    return out


def mean(values: list[float]) -> float:
    return round(float(np.mean(values)), 4) if values else 0.0


def study(
    cases: dict[str, list[Case]], model, grid: bool, late: Sequence[float]
) -> dict[str, object]:
    every = [c for group in cases.values() for c in group]
    out: dict[str, object] = {
        "sets": {name: len(group) for name, group in cases.items()},
        "queries": len(every),
    }
    default = Weights()
    for mode in ("lexical", "dense", "hybrid"):
        out[mode] = {
            "mrr_at_10": mean([reciprocal_rank(mode_ranking(c, mode, default), c) for c in every]),
            "by_set": {
                name: mean([reciprocal_rank(mode_ranking(c, mode, default), c) for c in group])
                for name, group in cases.items()
            },
        }
    if grid:
        scores = []
        for lexical, dense, name in itertools.product(*GRID.values()):
            weights = Weights(lexical, dense, name)
            mrr = mean([reciprocal_rank(mode_ranking(c, "hybrid", weights), c) for c in every])
            scores.append({"lexical": lexical, "dense": dense, "name": name, "mrr_at_10": mrr})
        out["grid"] = sorted(scores, key=lambda s: -s["mrr_at_10"])
    if late:
        sims = [maxsim(model, c) for c in every]
        out["late_interaction"] = {
            str(weight): mean(
                [
                    reciprocal_rank(late_ranking(c, s, weight), c)
                    for c, s in zip(every, sims, strict=True)
                ]
            )
            for weight in late
        }
    return out


def run(model_dir: Path | None, queries: int, grid: bool, late: Sequence[float]) -> dict:
    from index.static_embedder import StaticEmbedder
    from training.embed.corpus import trees_by_role

    model = StaticEmbedder(model_dir)
    trees = trees_by_role()["dev"]
    with tempfile.TemporaryDirectory(prefix="tachy-hybrid-dev-") as tmp:
        work = Path(tmp)
        cases = {}
        for eval_set in dev_sets(work / "sets", trees, queries):
            name = Path(eval_set.root).name
            print(f"{name}: {len(eval_set.targets)} queries", file=sys.stderr, flush=True)
            cases[name] = collect(eval_set, model, work / f"{name}-index")
    record = {"model": model.name, **study(cases, model, grid, late)}
    summary = {
        "queries": record["queries"],
        **{f"mrr10_{m}": record[m]["mrr_at_10"] for m in ("lexical", "dense", "hybrid")},
    }
    if grid:
        best = record["grid"][0]
        summary["best_grid_weights"] = {k: best[k] for k in GRID}
        summary["best_grid_mrr10"] = best["mrr_at_10"]
    if late:
        summary["late_interaction_mrr10"] = record["late_interaction"]
    return {"summary": summary, "machine": common.machine_info(), **record}


def one_line(s: dict) -> str:
    line = (
        f"hybrid dev ({s['queries']} queries): MRR@10 lexical {s['mrr10_lexical']}, "
        f"dense {s['mrr10_dense']}, hybrid as shipped {s['mrr10_hybrid']}"
    )
    if "best_grid_mrr10" in s:
        line += f"; best grid weights {s['best_grid_weights']}: {s['best_grid_mrr10']}"
    if "late_interaction_mrr10" in s:
        line += f"; + late interaction (weight: MRR@10) {s['late_interaction_mrr10']}"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hybrid_dev", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", type=Path, help="a static model directory (the shipped one)")
    parser.add_argument("--queries", type=int, default=150, help="at most N per package (150)")
    parser.add_argument("--grid", action="store_true", help="try every fusion weight of GRID")
    parser.add_argument("--late", default="", help="late-interaction weights, e.g. 0.5,1,2")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        late = [float(w) for w in args.late.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--late takes numbers separated by commas, not {args.late!r}")
    record = run(args.model, args.queries, args.grid, late)
    common.report(record, args.json, lambda r: json.dumps(r["summary"], indent=1), one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
