"""A code-search evaluation set built from real docstrings (CodeSearchNet style).

    python -m bench.codesearch [--source DIR] [--out DIR] [--queries N] [--seed S]
                               [--max-bytes B] [--json]
    python -m bench.codesearch --compare --out DIR [--queries N] [--json]

`--compare` is the benchmark of the embedders: it builds three sets, the evaluation part
of the code embedder's split of the standard library (training/configs/embed-split.json:
code the embedder never trained on), some third-party packages of the venv
(THIRD_PARTY), and the agent's own queries over one of them (AGENT_QUERIES: short
questions in an agent's words, answered by hand, over requests as installed), indexes
each, and reports MRR@10, Recall@10 and query latency of lexical search and of dense
and hybrid search with each embedder (tachy's static model and MiniLM), with each
embedder's throughput, side by side.

From a tree of Python sources (default: the running interpreter's standard library,
without its tests, idlelib, site-packages and caches) it picks functions and methods
whose docstring opens with a usable sentence. The query is that first sentence; the
target is the function (path, qualified name, line range). The sources are copied to a
work directory with every selected function's docstring blanked out, line for line
(each docstring line becomes an empty line), so the answer cannot be found by matching
the docstring and every line number of the copy equals the original's.

A hit answers a query when it lies in the target's file and its line range overlaps the
target function's (decorators included). `reciprocal_rank`, `mrr_at_k` and
`recall_at_k` score ranked hit lists; `EvalSet.save` / `EvalSet.load` keep a set as
JSON. All choices are deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shutil
import sys
import sysconfig
import time
import tokenize
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from training.embed.docstrings import (
    Candidate,
    blank_lines,
    default_source,
    find_candidates,
    normalize,
    read_source,
    source_lines,
    source_units,
)

DEFAULT_QUERIES = 300
DEFAULT_SEED = 0


# ------------------------------------------------------------- the eval set
@dataclass(frozen=True)
class Target:
    """One query and the function that answers it (line numbers of the copy)."""

    qid: int
    query: str
    path: str
    qualname: str
    start_line: int
    end_line: int


@dataclass
class EvalSet:
    root: str  # the work tree the index should be built over
    source: str
    seed: int
    targets: list[Target]
    files: int  # .py files in the work tree
    bytes: int
    lines: int
    units: list[str]  # top-level modules and packages copied
    candidates: int  # usable functions in the copied units, before sampling
    dropped: dict[str, int] = field(default_factory=dict)  # why candidates were left out

    def corpus(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "root": self.root,
            "units": len(self.units),
            "files": self.files,
            "bytes": self.bytes,
            "lines": self.lines,
            "queries": len(self.targets),
            "candidates": self.candidates,
            "dropped": dict(self.dropped),
            "seed": self.seed,
        }

    def save(self, path: Path) -> None:
        data = {**asdict(self), "targets": [asdict(t) for t in self.targets]}
        path.write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, path: Path) -> EvalSet:
        data = json.loads(path.read_text())
        data["targets"] = [Target(**t) for t in data["targets"]]
        return cls(**data)


def build_eval_set(
    work_dir: Path,
    source: Path | None = None,
    n_queries: int = DEFAULT_QUERIES,
    seed: int = DEFAULT_SEED,
    max_bytes: int | None = None,
    units: Iterable[str] | None = None,
) -> EvalSet:
    """Build the evaluation set and its work tree under `work_dir` (which must not
    exist or be empty).

    With `max_bytes`, only a seeded random selection of the source's top-level
    modules and packages is taken, up to about that many bytes of .py source (a unit
    larger than what is left is skipped), so that a corpus can be sized to what can
    be embedded in the time at hand. With `units`, only those top-level modules and
    packages are taken (e.g. the evaluation part of training.embed's split of the
    standard library). Queries are then sampled, seeded, among the
    usable functions of the copied files whose first sentence is unique in the copy
    (case and whitespace ignored) and appears nowhere else in the copy's text once
    the docstrings are blanked.
    """
    source = (source or default_source()).resolve()
    work_dir = Path(work_dir)
    if work_dir.exists() and any(work_dir.iterdir()):
        raise FileExistsError(f"{work_dir} is not empty")
    rng = random.Random(seed)
    by_unit = source_units(source)
    names = sorted(by_unit if units is None else set(units) & set(by_unit))
    if max_bytes is not None:
        rng.shuffle(names)
        chosen, total = [], 0
        for name in names:
            size = sum((source / rel).stat().st_size for rel in by_unit[name])
            if total + size <= max_bytes:
                chosen.append(name)
                total += size
        names = sorted(chosen)

    texts: dict[str, str] = {}
    raw: dict[str, bytes] = {}
    candidates: list[Candidate] = []
    for name in names:
        for relative in by_unit[name]:
            key = relative.as_posix()
            raw[key] = (source / relative).read_bytes()
            text = read_source(source / relative)
            if text is None:
                continue
            texts[key] = text
            candidates.extend(find_candidates(key, text))

    dropped: Counter[str] = Counter()
    counts = Counter(normalize(c.query) for c in candidates)
    unique = []
    for c in candidates:
        if counts[normalize(c.query)] > 1:
            dropped["duplicate_sentence"] += 1
        else:
            unique.append(c)
    order = list(range(len(unique)))
    rng.shuffle(order)

    # Draw in seeded order; keep a candidate only if its sentence appears nowhere in
    # the copy once its own docstring is blanked (not in a comment, a module or class
    # docstring, or the rest of another docstring).
    flat = {path: normalize(text) for path, text in texts.items()}
    kept: list[Candidate] = []
    for index in order:
        if len(kept) >= n_queries:
            break
        c = unique[index]
        needle = normalize(c.query).rstrip(".!?")
        own = normalize(blank_lines(texts[c.path], [(c.doc_start, c.doc_end)]))
        if needle in own or any(needle in text for p, text in flat.items() if p != c.path):
            dropped["sentence_elsewhere"] += 1
            continue
        kept.append(c)
    by_file: dict[str, list[Candidate]] = {}
    for c in kept:
        by_file.setdefault(c.path, []).append(c)
    blanked = {
        path: blank_lines(texts[path], [(c.doc_start, c.doc_end) for c in items])
        for path, items in by_file.items()
    }

    work_dir.mkdir(parents=True, exist_ok=True)
    total_bytes = total_lines = 0
    for path, data in raw.items():
        target = work_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if path in by_file:
            # Keep the file's own encoding (PEP 263) and line endings.
            with (source / path).open("rb") as handle:
                encoding, _ = tokenize.detect_encoding(handle.readline)
            data = blanked[path].encode(encoding)
        target.write_bytes(data)
        total_bytes += len(data)
        total_lines += data.count(b"\n")
    targets = [
        Target(
            qid=i,
            query=c.query,
            path=c.path,
            qualname=c.qualname,
            start_line=c.start_line,
            end_line=c.end_line,
        )
        for i, c in enumerate(kept)
    ]
    return EvalSet(
        root=str(work_dir),
        source=str(source),
        seed=seed,
        targets=targets,
        files=len(raw),
        bytes=total_bytes,
        lines=total_lines,
        units=names,
        candidates=len(candidates),
        dropped=dict(dropped),
    )


def verify(eval_set: EvalSet) -> list[str]:
    """Problems with a built set (empty when sound): each target's range in the copy
    must still start with its def (or decorator) and no docstring of a target may be
    left in the copy."""
    problems = []
    root = Path(eval_set.root)
    for t in eval_set.targets:
        text = read_source(root / t.path)
        if text is None:
            problems.append(f"{t.path}: unreadable")
            continue
        lines = source_lines(text)
        name = t.qualname.rsplit(".", 1)[-1]
        head = "\n".join(lines[t.start_line - 1 : t.end_line])
        if not re.search(rf"\bdef\s+{re.escape(name)}\b", head):
            problems.append(f"{t.path}:{t.start_line}: {t.qualname} not at its range")
        if normalize(t.query).rstrip(".!?") in normalize(text):
            problems.append(f"{t.path}: the query of {t.qualname} is still in the file")
    return problems


# ----------------------------------------------------------------- scoring
class HitLike(Protocol):
    path: str
    start_line: int
    end_line: int


def _norm_path(path: str) -> str:
    return Path(path).as_posix().removeprefix("./")


def is_relevant(hit: HitLike, target: Target) -> bool:
    """A hit is correct when it is in the target's file and its line range overlaps
    the target function's."""
    return (
        _norm_path(hit.path) == _norm_path(target.path)
        and hit.start_line <= target.end_line
        and hit.end_line >= target.start_line
    )


def first_relevant_rank(hits: Sequence[HitLike], target: Target, k: int = 10) -> int | None:
    """The 1-based rank of the first relevant hit among the first k, or None."""
    for rank, hit in enumerate(hits[:k], start=1):
        if is_relevant(hit, target):
            return rank
    return None


def reciprocal_rank(hits: Sequence[HitLike], target: Target, k: int = 10) -> float:
    rank = first_relevant_rank(hits, target, k)
    return 0.0 if rank is None else 1.0 / rank


def mrr_at_k(results: Sequence[Sequence[HitLike]], targets: Sequence[Target], k: int = 10) -> float:
    """Mean reciprocal rank of the first relevant hit in the top k (0 when none)."""
    if len(results) != len(targets):
        raise ValueError(f"{len(results)} result lists for {len(targets)} targets")
    if not targets:
        return 0.0
    return sum(reciprocal_rank(h, t, k) for h, t in zip(results, targets, strict=True)) / len(
        targets
    )


def recall_at_k(
    results: Sequence[Sequence[HitLike]], targets: Sequence[Target], k: int = 10
) -> float:
    """Share of queries with a relevant hit in the top k (one target per query)."""
    if len(results) != len(targets):
        raise ValueError(f"{len(results)} result lists for {len(targets)} targets")
    if not targets:
        return 0.0
    found = sum(
        first_relevant_rank(h, t, k) is not None for h, t in zip(results, targets, strict=True)
    )
    return found / len(targets)


# --------------------------------------------------------------------- CLI
# ------------------------------------------------------------- comparison
# Third-party trees of the venv with docstrings worth searching (none is trained on:
# each is in training.embed.corpus.EVALUATED_PACKAGES, which tests/training/
# test_embed_corpus.py checks against this tuple). bench/data/agent-queries-requests.json
# holds agent-style queries over one of them (tests/bench/test_agent_queries.py).
THIRD_PARTY = ("attr", "click", "httpx", "jinja2", "requests", "rich", "urllib3")
MODES = ("lexical", "dense", "hybrid")


AGENT_QUERIES = Path(__file__).resolve().parent / "data" / "agent-queries-requests.json"


@dataclass
class AgentSet:
    """Hand-written agent queries over an installed package copied as it is (the
    queries are not its docstrings, so nothing is blanked), each with its answers."""

    root: str
    package: str
    version: str
    queries: list[tuple[str, list[Target]]]  # (query, the functions that answer it)

    def corpus(self) -> dict[str, Any]:
        files = sum(1 for _ in Path(self.root).rglob("*.py"))
        return {"root": self.root, "package": f"{self.package} {self.version}",
                "files": files, "queries": len(self.queries)}  # fmt: skip


def build_agent_set(work_dir: Path, path: Path = AGENT_QUERIES) -> AgentSet:
    """Copy the installed package the queries at `path` were written against into
    `work_dir`/PACKAGE and return the set. Refused when another version is installed:
    the answers' line numbers are those of the recorded one."""
    from importlib.metadata import version
    from importlib.util import find_spec

    data = json.loads(path.read_text(encoding="utf-8"))
    installed = version(data["distribution"])
    if installed != data["version"]:
        raise RuntimeError(
            f"{path.name} answers {data['distribution']} {data['version']}; "
            f"{installed} is installed (its line numbers differ)"
        )
    spec = find_spec(data["package"])
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{data['package']} is not importable here")
    target = work_dir / data["package"]
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(Path(spec.origin).parent, target, ignore=shutil.ignore_patterns("__pycache__"))
    queries = [
        (
            q["query"],
            [
                Target(
                    q["qid"],
                    q["query"],
                    f"{data['package']}/{a['path']}",
                    a["qualname"],
                    a["start_line"],
                    a["end_line"],
                )
                for a in q["answers"]
            ],
        )
        for q in data["queries"]
    ]
    return AgentSet(str(work_dir), data["package"], installed, queries)


def best_rank(hits: Sequence[HitLike], answers: Sequence[Target], k: int = 10) -> int | None:
    """The 1-based rank of the first hit among the first k that answers the query
    (lies in any of its answers), or None."""
    ranks = [r for t in answers if (r := first_relevant_rank(hits, t, k)) is not None]
    return min(ranks, default=None)


def mode_scores(
    idx: Any, eval_set: EvalSet | AgentSet, mode: str, **options: Any
) -> dict[str, Any]:
    """MRR@10 and Recall@10 of one search mode over the set's queries (a hit in any of
    a query's answers counts), and the query latencies (p50/p95 ms)."""
    queries = (
        eval_set.queries
        if isinstance(eval_set, AgentSet)
        else [(t.query, [t]) for t in eval_set.targets]
    )
    ranks, times = [], []
    for query, answers in queries:
        started = time.perf_counter()
        hits = idx.search(query, limit=10, mode=mode, **options)
        times.append(time.perf_counter() - started)
        ranks.append(best_rank(hits, answers, 10))
    times.sort()
    n = max(len(ranks), 1)
    return {
        "mrr_at_10": round(sum(1.0 / r for r in ranks if r) / n, 4),
        "recall_at_10": round(sum(r is not None for r in ranks) / n, 4),
        "p50_ms": round(1000 * times[len(times) // 2], 2),
        "p95_ms": round(1000 * times[min(len(times) - 1, int(0.95 * len(times)))], 2),
    }


def compare(work: Path, n_queries: int, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Lexical, dense and hybrid search with each embedder, side by side, on two sets:
    the evaluation part of the embedder's standard-library split (code it was not
    trained on) and THIRD_PARTY packages of the venv. One index per set; each
    embedder embeds it in turn (the index keeps both models' vectors)."""
    from importlib.metadata import PackageNotFoundError, version

    from index.embedder import EMBEDDERS
    from index.indexer import CodeIndex
    from training.embed.split import read_split

    site = Path(sysconfig.get_paths()["purelib"])
    sets = {
        "stdlib-heldout": build_eval_set(
            work / "stdlib-heldout", None, n_queries, seed, units=read_split()["eval"]
        ),
        "third-party": build_eval_set(
            work / "third-party", site, n_queries, seed, units=THIRD_PARTY
        ),
    }
    report: dict[str, Any] = {"sets": {}}
    try:
        sets["agent-requests"] = build_agent_set(work / "agent-requests")
    except RuntimeError as exc:  # another requests than the answers were written for
        report["skipped"] = {"agent-requests": str(exc)}
        log(f"agent-requests: skipped ({exc})")
    versions = {}
    for name in THIRD_PARTY:
        with contextlib.suppress(PackageNotFoundError):
            versions[name] = version({"attr": "attrs"}.get(name, name))
    report["third_party_versions"] = versions
    for name, eval_set in sets.items():
        out: dict[str, Any] = {"corpus": eval_set.corpus()}
        for kind in EMBEDDERS:
            log(f"{name}: indexing with {kind} ...")
            with CodeIndex(eval_set.root, cache_dir=work / f"index-{name}", embedder=kind) as idx:
                stats = idx.update()  # embeds every chunk this embedder has not seen
                embedded, seconds = stats.embedded, stats.embed_seconds
                out["chunks"] = stats.chunks
                if "lexical" not in out:
                    out["lexical"] = mode_scores(idx, eval_set, "lexical")
                out[kind] = {
                    "embed_seconds": round(seconds, 2),
                    "chunks_per_s": round(embedded / seconds, 1) if seconds else None,
                    **{mode: mode_scores(idx, eval_set, mode) for mode in ("dense", "hybrid")},
                }
        report["sets"][name] = out
    return report


def compare_line(report: dict[str, Any]) -> str:
    parts = []
    for name, out in report["sets"].items():
        s, m = out["static"], out["minilm"]
        parts.append(
            f"{name}: MRR@10 lexical {out['lexical']['mrr_at_10']:.3f}, dense static "
            f"{s['dense']['mrr_at_10']:.3f} / minilm {m['dense']['mrr_at_10']:.3f}, hybrid "
            f"static {s['hybrid']['mrr_at_10']:.3f} / minilm {m['hybrid']['mrr_at_10']:.3f}; "
            f"embedding {s['chunks_per_s']:.0f} vs {m['chunks_per_s']:.0f} chunks/s"
        )
    return "codesearch compare: " + " | ".join(parts)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.codesearch", description=__doc__)
    parser.add_argument("--source", type=Path, default=None, help="default: the stdlib")
    parser.add_argument("--out", type=Path, required=True, help="work tree to create")
    parser.add_argument("--queries", type=int, default=DEFAULT_QUERIES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--max-bytes", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the set as JSON")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="build the held-out stdlib and third-party sets under --out and compare "
        "lexical, dense and hybrid search with each embedder (about 15 min on 2 cores)",
    )
    options = parser.parse_args(argv)
    if options.compare:
        report = compare(options.out, options.queries, options.seed)
        if options.json:
            print(json.dumps(report, indent=1))
        print(compare_line(report), file=sys.stderr)
        return 0
    eval_set = build_eval_set(
        options.out, options.source, options.queries, options.seed, options.max_bytes
    )
    problems = verify(eval_set)
    if options.json:
        print(json.dumps({**asdict(eval_set), "problems": problems}, indent=1))
    corpus = eval_set.corpus()
    print(
        f"codesearch: {corpus['queries']} queries over {corpus['files']} files "
        f"({corpus['bytes']} bytes, {corpus['units']} units) in {eval_set.root}; "
        f"{len(problems)} problems",
        file=sys.stderr,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
