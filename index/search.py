"""Hybrid ranking: one score from what the retrievers and the chunk's name say.

The lexical index (bm25) and the dense index (cosine) each return their best
candidates. Their scores are rescaled per query onto [0, 1] (a retriever's best
candidate 1, its weakest 0, a candidate it did not return 0) and summed with weights,
plus two signals about the chunk's symbol:

- how close the query is to the symbol's name in meaning (cosine of the query and the
  name, split into words, under tachy's static code model: `def get_content_length`
  for "Return the length of the body"), because the name is the densest summary of a
  definition and a chunk's mean vector dilutes it among all its code;
- a bonus when the query names the symbol outright (`Parser.parse`, `load_config`):
  small when the name is one word of a sentence (docstrings often mention other
  symbols), large when the query is nothing but that name (a lookup by name).

Finally no file may take more than a few places, so one long file cannot crowd out
the rest. This rescoring replaced reciprocal rank fusion (K = 10). The weights were
tuned on docstring queries over the development units of the standard library's
training split (hybrid MRR@10 0.395 -> 0.470 with tachy's embedder, 0.438 -> 0.533 with
MiniLM; the optimum is flat); on held-out code (`python -m bench.codesearch --compare`)
hybrid with tachy's embedder rose 8 points on the stdlib's evaluation units and 8.5 on
third-party packages (bench/RESULTS.md, issue 19).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec


@dataclass(frozen=True)
class Weights:
    """How much each signal counts in the hybrid score (see the module docstring)."""

    lexical: float = 0.75
    dense: float = 1.0
    name: float = 1.5


WEIGHTS = Weights()
# Small on docstring queries (it costs them 0.1 points), decisive when a query
# spells out an identifier.
NAMED_BONUS = 0.25
# A query that is one identifier and nothing else (`Vector.length`) is looking the
# symbol up: its match then outweighs any one retriever.
NAME_QUERY_BONUS = 1.0
CHUNKS_PER_FILE = 5
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class SearchHit(msgspec.Struct, frozen=True):
    path: str
    start_line: int
    end_line: int
    symbol: str
    score: float
    snippet: str


def rescaled(scored: Sequence[tuple[int, float]]) -> dict[int, float]:
    """A retriever's (id, score) candidates with scores mapped onto [0, 1]: the best 1,
    the weakest 0 (all 1 when they tie)."""
    if not scored:
        return {}
    values = [score for _, score in scored]
    low, high = min(values), max(values)
    if high <= low:
        return {item: 1.0 for item, _ in scored}
    return {item: (score - low) / (high - low) for item, score in scored}


def fused_scores(
    lexical: Sequence[tuple[int, float]],
    dense: Sequence[tuple[int, float]],
    name_similarity: Mapping[int, float],
    named: set[int],
    bonus: float = NAMED_BONUS,
    weights: Weights = WEIGHTS,
) -> dict[int, float]:
    """The hybrid score of every candidate either retriever returned (see the module
    docstring); `name_similarity` and `named` are by candidate id, `bonus` is what a
    named symbol gains (named_bonus of the query)."""
    lexical_part, dense_part = rescaled(lexical), rescaled(dense)
    return {
        item: weights.lexical * lexical_part.get(item, 0.0)
        + weights.dense * dense_part.get(item, 0.0)
        + weights.name * name_similarity.get(item, 0.0)
        + (bonus if item in named else 0.0)
        for item in {*lexical_part, *dense_part}
    }


@dataclass
class Candidates:
    """What search ranks for one query: each retriever's (chunk id, score) pairs, the
    chunks' rows by id ((path, start_line, end_line, text, symbol)), how close the
    query is to each chunk's symbol name, the chunks whose symbol it names, and what
    a named symbol gains. CodeIndex.candidates builds it; tuning reads it too."""

    lexical: list[tuple[int, float]] = field(default_factory=list)
    dense: list[tuple[int, float]] = field(default_factory=list)
    rows: dict[int, tuple] = field(default_factory=dict)
    names: dict[int, float] = field(default_factory=dict)
    named: set[int] = field(default_factory=set)
    bonus: float = NAMED_BONUS


def ranked(
    found: Candidates, *, limit: int, per_file: int, weights: Weights = WEIGHTS
) -> list[tuple[int, float]]:
    """The best (chunk id, hybrid score) pairs, best first, at most `per_file` a file."""
    scores = fused_scores(
        found.lexical, found.dense, found.names, found.named, found.bonus, weights
    )
    ordered = sorted(scores, key=lambda cid: (-scores[cid], cid))
    kept = cap_per_file([(cid, found.rows[cid][0]) for cid in ordered], per_file)[:limit]
    return [(cid, scores[cid]) for cid in kept]


def named_bonus(query: str) -> float:
    """What a symbol the query names gains: NAME_QUERY_BONUS when the query is a single
    (dotted) identifier, else NAMED_BONUS."""
    return NAME_QUERY_BONUS if _IDENT.fullmatch(query.strip()) else NAMED_BONUS


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
