"""A code-search evaluation set built from real docstrings (CodeSearchNet style).

    python -m bench.codesearch [--source DIR] [--out DIR] [--queries N] [--seed S]
                               [--max-bytes B] [--json]

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
import ast
import json
import random
import re
import sys
import sysconfig
import tokenize
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

DEFAULT_QUERIES = 300
DEFAULT_SEED = 0
MIN_WORDS = 4
MAX_WORDS = 40
# Directory names never taken into the evaluation tree, at any depth.
EXCLUDED_DIRS = frozenset(
    {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__"}
)

# First sentences that describe nothing a user would search for.
_BOILERPLATE = re.compile(
    r"""^(
        return\s+(self|repr\(self\)|str\(self\)|hash\(self\))(?!\w)
      | (initialize|implement)\s+self\b
      | implement\s+\w+\(
      | see\s+(help|the)\b
      | same\s+as\b
      | alias\s+(for|of)\b
      | deprecated\b
      | (this\s+method\s+is\s+)?(for\s+)?internal\s+use\b
      | (todo|xxx|fixme)\b
      | docstring\b
      | (un)?documented\b
      | (override|overridden|overrides)\b
      | (dummy|stub|placeholder)\b
      | not\s+implemented\b
      | this\s+(function|method)\s+(is\s+)?(deprecated|obsolete)\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)
# A signature line such as "S.find(sub[, start[, end]]) -> int" or "f(x) -> y".
_SIGNATURE = re.compile(r"^[\w.]+\s*\(.*\)\s*(->|$)|->")
# Code or grammar rather than prose: "comment = "(" *([FWS] ccontent)", "self // other".
_CODE_LIKE = re.compile(r"\s=\s|//|[\[\]{}|<>]|\w\(\s*\w*\s*\)\s*:")
_ABBREVIATIONS = frozenset({"e.g", "i.e", "etc", "vs", "cf", "approx", "resp", "no", "mr", "dr"})


# ------------------------------------------------------------------ queries
def first_sentence(docstring: str) -> str:
    """The first sentence of a docstring's first paragraph, whitespace collapsed.

    A sentence ends at '.', '!' or '?' followed by whitespace or the end of the
    paragraph, unless the word before the period is a common abbreviation ("e.g.").
    Without such an ending the whole first paragraph is the sentence.
    """
    paragraph = re.split(r"\n\s*\n", docstring.strip(), maxsplit=1)[0]
    text = " ".join(paragraph.split())
    for match in re.finditer(r"[.!?](?=\s|$)", text):
        end = match.start()
        word = text[:end].rsplit(" ", 1)[-1].lower().lstrip("(")
        if text[end] == "." and word in _ABBREVIATIONS:
            continue
        return text[: end + 1]
    return text


def is_boilerplate(sentence: str) -> bool:
    """True for first sentences that say nothing searchable ("Return self.", a bare
    signature line, "Same as X.", "Deprecated.", doctest prompts, code or grammar
    rather than prose, ...)."""
    text = sentence.strip()
    if not text:
        return True
    if _BOILERPLATE.match(text) or _SIGNATURE.search(text) or _CODE_LIKE.search(text):
        return True
    return ">>>" in text or "::" in text


def usable_query(sentence: str) -> bool:
    """A first sentence usable as a query: MIN_WORDS..MAX_WORDS words, with letters,
    not boilerplate."""
    words = [w for w in sentence.split() if any(c.isalpha() for c in w)]
    return MIN_WORDS <= len(words) <= MAX_WORDS and not is_boilerplate(sentence)


def normalize(text: str) -> str:
    """Lower case, whitespace collapsed: the form used to find duplicate sentences."""
    return " ".join(text.lower().split())


# -------------------------------------------------------------- candidates
@dataclass(frozen=True)
class Candidate:
    """A function or method with a usable docstring, as found in a source file."""

    path: str  # relative to the tree root, posix
    qualname: str
    query: str
    start_line: int  # first decorator or the def line, 1-based
    end_line: int  # last line of the body, inclusive
    doc_start: int  # docstring lines, 1-based, inclusive
    doc_end: int


def _docstring_node(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Expr | None:
    if not node.body:
        return None
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return first
    return None


def _blankable(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: Sequence[str]) -> bool:
    """Whether the docstring can be replaced by empty lines and leave valid code: it
    sits on lines of its own (nothing but whitespace before it, nothing but a comment
    after it) and the body has another statement starting on a later line."""
    doc = _docstring_node(node)
    if doc is None or len(node.body) < 2 or doc.end_lineno is None:
        return False
    if doc.lineno <= node.lineno or node.body[1].lineno <= doc.end_lineno:
        return False
    # ast's column offsets count UTF-8 bytes.
    if lines[doc.lineno - 1].encode()[: doc.col_offset].strip():
        return False
    tail = lines[doc.end_lineno - 1].encode()[doc.end_col_offset or 0 :].strip()
    return not tail or tail.startswith(b"#")


def _functions(tree: ast.Module) -> Iterable[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and methods of (possibly nested) classes, with their
    qualified names. Functions nested in functions are left out."""

    def walk(body: list[ast.stmt], prefix: str) -> Iterable[tuple[str, Any]]:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.If):  # e.g. `if sys.platform == "win32":`
                yield from walk(node.body, prefix)
                yield from walk(node.orelse, prefix)
            elif isinstance(node, ast.Try):  # e.g. `try: import _c except ImportError:`
                for block in (node.body, *(h.body for h in node.handlers), node.orelse):
                    yield from walk(block, prefix)
                yield from walk(node.finalbody, prefix)

    yield from walk(tree.body, "")


def read_source(path: Path) -> str | None:
    """The file's text decoded as Python does (PEP 263 cookie), or None."""
    try:
        with path.open("rb") as handle:
            encoding, _ = tokenize.detect_encoding(handle.readline)
        return path.read_bytes().decode(encoding)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
        return None


def find_candidates(path: str, source: str) -> list[Candidate]:
    """The usable functions of one file (`path` is only recorded)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source_lines(source)
    found = []
    for qualname, node in _functions(tree):
        doc_node = _docstring_node(node)
        docstring = ast.get_docstring(node)
        if doc_node is None or not docstring or not _blankable(node, lines):
            continue
        sentence = first_sentence(docstring)
        if not usable_query(sentence):
            continue
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        found.append(
            Candidate(
                path=path,
                qualname=qualname,
                query=sentence,
                start_line=start,
                end_line=node.end_lineno or node.lineno,
                doc_start=doc_node.lineno,
                doc_end=doc_node.end_lineno or doc_node.lineno,
            )
        )
    return found


def source_lines(source: str) -> list[str]:
    """The source's lines as Python numbers them: split at newlines only (a form feed
    or other Unicode line break inside a line does not start a new one)."""
    return [line.removesuffix("\r") for line in source.split("\n")]


def blank_lines(source: str, spans: Iterable[tuple[int, int]]) -> str:
    """The source with the given 1-based inclusive line spans replaced by empty lines
    (line endings kept, so every line keeps its number)."""
    lines = source.split("\n")
    for start, end in spans:
        for number in range(start, end + 1):
            lines[number - 1] = "\r" if lines[number - 1].endswith("\r") else ""
    return "\n".join(lines)


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


def default_source() -> Path:
    """This interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def _excluded(relative: Path) -> bool:
    parts = relative.parts
    if any(part in EXCLUDED_DIRS for part in parts[:-1]):
        return True
    return any(part.startswith(".") for part in parts)


def source_units(source: Path) -> dict[str, list[Path]]:
    """The tree's top-level modules and packages, each with its .py files (relative
    paths, sorted), excluded directories left out."""
    units: dict[str, list[Path]] = {}
    for path in sorted(source.rglob("*.py")):
        relative = path.relative_to(source)
        if _excluded(relative) or not path.is_file():
            continue
        units.setdefault(relative.parts[0], []).append(relative)
    return units


def build_eval_set(
    work_dir: Path,
    source: Path | None = None,
    n_queries: int = DEFAULT_QUERIES,
    seed: int = DEFAULT_SEED,
    max_bytes: int | None = None,
) -> EvalSet:
    """Build the evaluation set and its work tree under `work_dir` (which must not
    exist or be empty).

    With `max_bytes`, only a seeded random selection of the source's top-level
    modules and packages is taken, up to about that many bytes of .py source (a unit
    larger than what is left is skipped), so that a corpus can be sized to what can
    be embedded in the time at hand. Queries are then sampled, seeded, among the
    usable functions of the copied files whose first sentence is unique in the copy
    (case and whitespace ignored) and appears nowhere else in the copy's text once
    the docstrings are blanked.
    """
    source = (source or default_source()).resolve()
    work_dir = Path(work_dir)
    if work_dir.exists() and any(work_dir.iterdir()):
        raise FileExistsError(f"{work_dir} is not empty")
    rng = random.Random(seed)
    units = source_units(source)
    names = sorted(units)
    if max_bytes is not None:
        rng.shuffle(names)
        chosen, total = [], 0
        for name in names:
            size = sum((source / rel).stat().st_size for rel in units[name])
            if total + size <= max_bytes:
                chosen.append(name)
                total += size
        names = sorted(chosen)

    texts: dict[str, str] = {}
    raw: dict[str, bytes] = {}
    candidates: list[Candidate] = []
    for name in names:
        for relative in units[name]:
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
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.codesearch", description=__doc__)
    parser.add_argument("--source", type=Path, default=None, help="default: the stdlib")
    parser.add_argument("--out", type=Path, required=True, help="work tree to create")
    parser.add_argument("--queries", type=int, default=DEFAULT_QUERIES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--max-bytes", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the set as JSON")
    options = parser.parse_args(argv)
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
