"""Hybrid ranking: lexical and dense results fused by reciprocal rank.

Reciprocal rank fusion (Cormack et al. 2009) needs no score calibration between the
two retrievers: each contributes 1 / (K + rank) per result. On top of that, a chunk
whose symbol the query names gets a boost, and no file may take more than a few of
the places, so one long file cannot crowd out the rest.

K and the cap were tuned on docstring queries over a part of the standard library's
training units that the shipped embedder did not train on (bench/RESULTS.md, issue
19): K = 10 rewards agreement near the top more than the paper's 60 (+3 points of
MRR@10 with either embedder), and a cap of 5 instead of 3 gives back most of the
recall the cap cost (the function a docstring describes often shares its file with
several near misses) while one file still cannot fill a page of 10.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

import msgspec

RRF_K = 10
# A symbol named in the query counts like one more first-place vote.
SYMBOL_BOOST = 1.0 / (RRF_K + 1)
CHUNKS_PER_FILE = 5
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class SearchHit(msgspec.Struct, frozen=True):
    path: str
    start_line: int
    end_line: int
    symbol: str
    score: float
    snippet: str


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Fused scores of ids from several best-first rankings."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def query_identifiers(query: str) -> set[str]:
    """Identifiers in the query, lowercased: dotted names whole and by part."""
    found: set[str] = set()
    for match in _IDENT.finditer(query[:10_000]):
        name = match.group(0).lower()
        found.add(name)
        found.update(name.split("."))
    return found


def symbol_named(symbol: str, identifiers: set[str]) -> bool:
    """True when the query names the symbol: in full (`Parser.parse`), or by a last part
    distinctive enough to mean it (`parse_config`, `readFile`; not a plain word such as
    `parse`, which a query uses as an ordinary word)."""
    if not symbol:
        return False
    last = symbol.rsplit(".", 1)[-1]
    distinctive = "_" in last.strip("_") or any(c.isupper() for c in last[1:])
    return symbol.lower() in identifiers or (distinctive and last.lower() in identifiers)


def normalise_globs(paths: Sequence[str] | None) -> list[str] | None:
    """Path filters as fnmatch globs: a plain path means that file or everything under
    that directory; globs are taken as they are ('*' also crosses '/')."""
    if not paths:
        return None
    globs = []
    for raw in paths:
        path = raw.strip().replace("\\", "/").removeprefix("./")
        if not path or path in (".", "/"):
            return None  # the whole workspace
        if any(ch in path for ch in "*?["):
            globs.append(path)
        else:
            path = path.rstrip("/")
            globs += [path, f"{path}/*"]
    return globs


def path_matches(path: str, globs: Sequence[str] | None) -> bool:
    return globs is None or any(fnmatch.fnmatchcase(path, glob) for glob in globs)


def cap_per_file(ranked: Sequence[tuple[int, str]], per_file: int) -> list[int]:
    """Ids in order, keeping at most `per_file` for each path."""
    seen: dict[str, int] = {}
    kept = []
    for chunk_id, path in ranked:
        if seen.get(path, 0) < per_file:
            seen[path] = seen.get(path, 0) + 1
            kept.append(chunk_id)
    return kept
