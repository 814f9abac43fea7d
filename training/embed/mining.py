"""Every kind of training pair the code itself gives, from the standard library's
training part and from the PyPI corpus's packages (issue 35, decision (a)).

~9.5k docstring pairs from the stdlib were too little data. More code gives more
docstrings, and code says what it does in other ways too. A pair's kind (Pair.kind):

    docstring  a function's or class's docstring, first sentence -> its chunk
    comment    a comment block -> the code after it (both as training.embed.pairs)
    name       a function's name in words, split as the lexical index splits
               identifiers ("parse_date_header" -> "parse date header") -> its body:
               its chunk's input without the def line, which holds the name
    test       a test (in a package's tests) that uses exactly one function of the
               package, resolved by name without doubt -> that function's chunk; the
               query is the test's docstring sentence, else its name in words
    signature  a documented function's docstring sentence -> its def line(s) alone,
               so that a def line and its description meet

Every code side comes from the chunks the index embeds (index.indexer.embed_input),
with usable docstrings and comments blanked (pairs.add_file), so no query appears
verbatim in its code (a pair where it does is dropped). A package's paths are
prefixed with its name, so its chunks never meet another tree's.

Then, over all sources at once (`settle`): a query that points to more than one chunk
is dropped (one sentence would mean different code), identical (query, code) pairs are
kept once, and no package keeps more than `package_cap` pairs (a hash of each pair
picks which, the same on every run), so that no single package dominates. The stdlib
is not capped.

`dev_corpus` builds the development evaluation on the corpus's held-out packages the
way bench.codesearch builds its third-party set.

    python -m training.embed.mining [--stdlib]   # pairs per kind and role, as JSON
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import re
import sys
import textwrap
import tokenize
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from index.chunker import chunk_file
from index.indexer import embed_input
from index.tokenize import identifier_parts  # the lexical index's split of one identifier piece
from training.embed.corpus import MARKER, canonical, trees_by_role
from training.embed.docstrings import (
    EXCLUDED_DIRS,
    blank_lines,
    find_candidates,
    first_sentence,
    functions_in,
    normalize,
    read_source,
    source_lines,
    usable_query,
)
from training.embed.pairs import Corpus, Pair, add_file, best_chunk, unit_files
from training.embed.split import read_split

KINDS = ("docstring", "comment", "name", "test", "signature")
PACKAGE_CAP = 1500  # pairs per package, at most
MIN_NAME_WORDS = 2  # a name or test query needs this many words ("run" says nothing)
TESTS_PER_FUNCTION = 3  # test pairs of one function, at most (the first tests found)
STDLIB = "stdlib"

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class MineSettings:
    kinds: tuple[str, ...] = KINDS
    package_cap: int = PACKAGE_CAP

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown pair kinds {unknown}; the kinds are {list(KINDS)}")
        if self.package_cap < 1:
            raise ValueError("the cap of pairs per package must be at least 1")


@dataclass(frozen=True)
class Defined:
    """A function or method of a package's code: where a test pair points."""

    path: str
    name: str
    start_line: int
    end_line: int
    chunk: int  # the corpus chunk that covers most of it


@dataclass
class Package:
    """What mining a package's code leaves for mining its tests."""

    functions: dict[str, list[Defined]] = field(default_factory=dict)  # by name
    classes: set[str] = field(default_factory=set)


# ------------------------------------------------------------------ words
def name_words(name: str) -> list[str]:
    """An identifier's words, split as the lexical index splits it (index.tokenize: at
    underscores, camelCase humps and digits), lower case: `parseHTTPDate2` -> parse,
    http, date, 2. Unlike the index's terms they are not stemmed: a query is prose."""
    return [
        part.casefold() for piece in name.split("_") if piece for part in identifier_parts(piece)
    ]


def contains(code: str, query: str) -> bool:
    """Whether the query (case, spacing and its final stop aside) is in the code."""
    needle = normalize(query).rstrip(".!?")
    return bool(needle) and needle in normalize(code)


def header_end(lines: list[str], node: Function) -> int | None:
    """The last line of a def's header: the line of the colon that closes it (its
    parameters and return annotation may span lines). None when it cannot be read."""
    end = node.end_lineno or node.lineno
    text = "\n".join(lines[node.lineno - 1 : end]) + "\n"
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.OP:
                continue
            if token.string in ("(", "[", "{"):
                depth += 1
            elif token.string in (")", "]", "}"):
                depth -= 1
            elif token.string == ":" and depth == 0:
                return node.lineno + token.start[0] - 1
    except (tokenize.TokenError, SyntaxError):
        return None
    return None


def _is_stub(node: Function) -> bool:
    """A body with nothing but a docstring, `pass`, `...` or `raise NotImplementedError`:
    it says nothing its name does not."""
    for statement in node.body:
        if isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring, or `...`
        if isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(statement):
            continue
        return False
    return True


def _parameters(node: Function) -> list[str]:
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    named += [a for a in (args.vararg, args.kwarg) if a is not None]
    return [a.arg for a in named if a.arg not in ("self", "cls")]


# ------------------------------------------------------------ code files
def _enclosing(signature: str, name: str) -> str:
    """A chunk's headers down to (not including) the def of `name`: the function's own
    header (its lines, perhaps shortened by the chunker) holds its name."""
    own = re.compile(rf"^\s*(async\s+)?def\s+{re.escape(name)}\b")
    lines = signature.split("\n")
    cut = next((i for i, line in enumerate(lines) if own.match(line)), len(lines))
    return "\n".join(lines[:cut])


def _name_pair(
    corpus: Corpus, node: Function, lines: list[str], best: int, path: str, source: str
) -> Pair | None:
    """name -> body: the function's lines after its header, with the enclosing headers
    the index would add (its own def line, which holds the name, left out)."""
    words = name_words(node.name)
    if (
        len(words) < MIN_NAME_WORDS
        or node.name.startswith("__")
        or node.name.lower().startswith("test")
        or _is_stub(node)
    ):
        return None
    end, last = header_end(lines, node), node.end_lineno or node.lineno
    if end is None or end >= last:
        return None  # a one-line def: no body of its own
    body = "\n".join(lines[end:last])
    if re.search(rf"\b{re.escape(node.name)}\b", body) or not body.strip():
        return None  # recursion or a message naming it: the name is in the code
    code = embed_input(_enclosing(corpus.chunks[best].signature, node.name), body)
    query = " ".join(words)
    if contains(code, query):
        return None
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return Pair(query, code, best, path, start, last, "name", source)


def _signature_pair(node: Function, lines: list[str], documented: Pair) -> Pair | None:
    """docstring sentence -> the def line(s) alone (decorators and body left out), for
    a function that takes parameters (else the def line is only its name)."""
    end = header_end(lines, node)
    if end is None or not _parameters(node):
        return None
    code = textwrap.dedent("\n".join(lines[node.lineno - 1 : end]))
    if contains(code, documented.query):
        return None
    return Pair(
        documented.query, code, documented.chunk, documented.path, documented.start_line,
        documented.end_line, "signature", documented.source,
    )  # fmt: skip


def add_code_file(
    corpus: Corpus, path: str, text: str, kinds: Iterable[str], source: str = STDLIB
) -> list[Defined]:
    """Chunk one file into the corpus (as pairs.add_file does for training: usable
    docstrings and comments blanked) with its pairs of the given kinds; returns its
    functions and methods, for tests to point to."""
    kinds = set(kinds)
    first = len(corpus.pairs)
    base, blanked = add_file(corpus, path, text, more=True, source=source)
    mined = corpus.pairs[first:]
    corpus.pairs[first:] = [p for p in mined if p.kind in kinds and not contains(p.code, p.query)]
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = source_lines(blanked)
    chunks = corpus.chunks[base:]
    documented = {(p.start_line, p.end_line): p for p in mined if p.kind == "docstring"}
    defined = []
    for _, node in functions_in(tree):
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        end = node.end_lineno or node.lineno
        best = best_chunk(chunks, start, end)
        if best is None:
            continue
        defined.append(Defined(path, node.name, start, end, base + best))
        if "name" in kinds and (pair := _name_pair(corpus, node, lines, base + best, path, source)):
            corpus.pairs.append(pair)
        if "signature" in kinds and (start, end) in documented:
            pair = _signature_pair(node, lines, documented[(start, end)])
            if pair is not None:
                corpus.pairs.append(pair)
    return defined


# -------------------------------------------------------------- packages
# Top-level directories of an sdist that are not the package's code.
NOT_CODE = frozenset(
    {"doc", "docs", "example", "examples", "demo", "demos", "bench", "benchmark",
     "benchmarks", "benchmarking", "tools", "scripts", "test", "tests", "build", "dist"}
)  # fmt: skip
BUILD_SCRIPTS = frozenset(
    {"setup.py", "conftest.py", "noxfile.py", "tasks.py", "fabfile.py", "versioneer.py",
     "hatch_build.py", "version.py"}
)  # fmt: skip
VENDOR_DIRS = frozenset(
    {"_vendor", "vendor", "_vendored", "vendored", "extern", "_extern", "third_party"}
)
_TEST_DIR = re.compile(r"^_*tests?$|[-_]tests?$|^tests?[-_]|tests$")
_TEST_FILE = re.compile(r"^(test_.*|.*_tests?|tests?|conftest)\.py$")


def is_test_path(relative: PurePosixPath) -> bool:
    """A test module: in a test directory at any depth (tests, test, _tests, e2e-tests,
    yapftests) or named like one (test_x.py, x_test.py, tests.py, conftest.py)."""
    return any(_TEST_DIR.search(part) for part in relative.parts[:-1]) or bool(
        _TEST_FILE.match(relative.name)
    )


def package_files(tree: Path) -> tuple[list[str], list[str]]:
    """(code, tests): posix paths, relative to an sdist's tree, of the package's own
    modules and of its tests. The code is what an install would import: the packages
    (directories with an __init__.py) and top-level modules of the tree or of its
    src/, not its docs, examples, tools, build scripts or vendored copies."""
    root = tree / "src" if (tree / "src").is_dir() else tree
    code, tests = [], []
    for path in sorted(tree.rglob("*.py")):
        relative = PurePosixPath(path.relative_to(tree).as_posix())
        parts = relative.parts
        if not path.is_file() or any(p.startswith(".") for p in parts):
            continue
        if any(p in EXCLUDED_DIRS - {"test", "tests"} or p in VENDOR_DIRS for p in parts[:-1]):
            continue
        if is_test_path(relative):
            tests.append(relative.as_posix())
            continue
        if not path.is_relative_to(root):
            continue
        inner = path.relative_to(root).parts
        if len(inner) == 1:
            if inner[0] not in BUILD_SCRIPTS:
                code.append(relative.as_posix())
        elif inner[0] not in NOT_CODE and (root / inner[0] / "__init__.py").is_file():
            code.append(relative.as_posix())
    return code, tests


def package_name(tree: Path) -> str:
    """The package's name (the corpus cache's marker says it), else the tree's."""
    try:
        return canonical(json.loads((tree / MARKER).read_text())["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return tree.name


def _test_functions(tree: ast.Module) -> Iterator[tuple[list[str], Function]]:
    """The tests of a test module (pytest or unittest style: `test*` functions and
    methods), each with the words of its class's name ("test" left out)."""
    for qualname, node in functions_in(tree):
        if node.name.startswith("test"):
            owner = qualname.rpartition(".")[0]
            words = [w for w in name_words(owner) if w not in ("test", "tests")]
            yield words, node


def _used_names(node: Function) -> set[str]:
    """Names the test calls (`f(...)`, `x.f(...)`) or passes to a call (`raises(E, f)`)."""
    used = set()
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        if isinstance(sub.func, ast.Name):
            used.add(sub.func.id)
        elif isinstance(sub.func, ast.Attribute):
            used.add(sub.func.attr)
        used.update(a.id for a in sub.args if isinstance(a, ast.Name))
    return {n for n in used if not n.startswith("assert")}


def _test_query(words: list[str], node: Function) -> str | None:
    """The test's docstring sentence when usable, else its class's and its own name in
    words ("test" taken off the front)."""
    docstring = ast.get_docstring(node)
    if docstring and usable_query(sentence := first_sentence(docstring)):
        return sentence
    own = name_words(node.name)
    if own and own[0] == "test":
        own = own[1:]
    # The class's words once where the test's own repeat them: TestEscape.test_escape_html
    # is "escape html", TestQueueJoin.test_join_empty is "queue join empty".
    overlap = max(
        k for k in range(min(len(words), len(own)) + 1) if words[len(words) - k :] == own[:k]
    )
    words = words + own[overlap:]
    return " ".join(words) if len(words) >= MIN_NAME_WORDS else None


def resolve_test(
    words: list[str], node: Function, package: Package, helpers: set[str], why: Counter[str]
) -> Defined | None:
    """The one function of the package that the test tests, or None (the reason counted
    in `why`). Conservative: the test must use exactly one of the package's function
    names, and that name must be defined once in the package and not be a class's; a
    test that uses a helper of the tests (which may call anything) is skipped; and the
    test's name must share a word with the function's (`x.get()` on a dict is not a
    test of the package's `get`)."""
    used = _used_names(node)
    if used & helpers:
        why["uses a helper of the tests"] += 1
        return None
    tested = used & package.functions.keys()
    if len(tested) != 1:
        why["uses no function of the package" if not tested else "uses several"] += 1
        return None
    name = tested.pop()
    found = package.functions[name]
    if len(found) != 1 or name in package.classes:
        why["ambiguous name"] += 1
        return None
    said = {w for w in words + name_words(node.name) if len(w) > 2 and w != "test"}
    if not said & set(name_words(name)):
        why["names share no word"] += 1
        return None
    return found[0]


def add_tests(
    corpus: Corpus, tree: Path, tests: list[str], package: Package, source: str, why: Counter[str]
) -> None:
    """test -> tested function pairs from a package's test modules (at most
    TESTS_PER_FUNCTION for one function: a few hundred tests that all open a nursery
    say little more than three do)."""
    parsed = []
    per_function: Counter[tuple[str, int]] = Counter()
    helpers: set[str] = set()
    for relative in tests:
        text = read_source(tree / relative)
        try:
            module = ast.parse(text or "")
        except (SyntaxError, ValueError):
            continue
        parsed.append(module)
        helpers.update(
            node.name
            for node in ast.walk(module)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and not node.name.startswith(("test", "Test"))
        )
    for module in parsed:
        for words, node in _test_functions(module):
            why["tests"] += 1
            query = _test_query(words, node)
            if query is None:
                why["name too short"] += 1
                continue
            target = resolve_test(words, node, package, helpers, why)
            if target is None:
                continue
            if per_function[target.path, target.start_line] >= TESTS_PER_FUNCTION:
                why["more tests of the same function"] += 1
                continue
            chunk = corpus.chunks[target.chunk]
            code = embed_input(chunk.signature, chunk.text)
            if contains(code, query):
                why["query in the code"] += 1
                continue
            corpus.pairs.append(
                Pair(query, code, target.chunk, target.path, target.start_line,
                     target.end_line, "test", source)
            )  # fmt: skip
            per_function[target.path, target.start_line] += 1
            why["paired"] += 1


def mine_package(
    corpus: Corpus, tree: Path, kinds: Iterable[str] = KINDS, *, why: Counter[str] | None = None
) -> None:
    """Add one package tree's code chunks and pairs to the corpus. Its tests give test
    pairs only; they add no chunks (nor pairs of other kinds): what they say is about
    the code they call, which is there already."""
    kinds = set(kinds)
    source = package_name(tree)
    code, tests = package_files(tree)
    package = Package()
    for relative in code:
        text = read_source(tree / relative)
        if text is None:
            continue
        for found in add_code_file(corpus, f"{source}/{relative}", text, kinds, source):
            package.functions.setdefault(found.name, []).append(found)
        try:
            module = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        package.classes.update(n.name for n in ast.walk(module) if isinstance(n, ast.ClassDef))
    if "test" in kinds:
        add_tests(corpus, tree, tests, package, source, why if why is not None else Counter())


def mine_stdlib(
    corpus: Corpus, units: Iterable[str], kinds: Iterable[str] = KINDS, source: Path | None = None
) -> None:
    """Add the given units of the standard library (pairs.mine_corpus's files) with
    pairs of every given kind (it has no tests: its test units are not in the split)."""
    for relative, text in unit_files(units, source):
        add_code_file(corpus, relative, text, kinds)


def _rank(pair: Pair) -> bytes:
    return hashlib.blake2b(f"{pair.query}\0{pair.code}".encode(errors="replace")).digest()


def settle(pairs: list[Pair], package_cap: int = PACKAGE_CAP) -> list[Pair]:
    """The pairs less those whose query points to more than one chunk, each (query,
    code) once, and at most `package_cap` per package (the stdlib is not capped; which
    ones stay is decided by a hash of the pair, so it is the same on every run)."""
    chunks: dict[str, set[int]] = defaultdict(set)
    for p in pairs:
        chunks[normalize(p.query)].add(p.chunk)
    seen: set[tuple[str, str]] = set()
    kept = []
    for p in pairs:
        if len(chunks[normalize(p.query)]) == 1 and (p.query, p.code) not in seen:
            seen.add((p.query, p.code))
            kept.append(p)
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(kept):
        if p.source != STDLIB:
            by_source[p.source].append(i)
    dropped: set[int] = set()
    for rows in by_source.values():
        if len(rows) > package_cap:
            dropped.update(sorted(rows, key=lambda i: _rank(kept[i]))[package_cap:])
    return [p for i, p in enumerate(kept) if i not in dropped]


def mine_training(
    units: Iterable[str],
    trees: Iterable[Path],
    settings: MineSettings | None = None,
    *,
    stdlib: Path | None = None,
    why: Counter[str] | None = None,
) -> Corpus:
    """The training corpus: the stdlib's given units and the package trees, every
    chunk and the settled pairs of settings.kinds (stdlib first, then the trees in the
    given order). `why` counts what became of the packages' tests."""
    settings = settings or MineSettings()
    corpus = Corpus()
    mine_stdlib(corpus, units, settings.kinds, stdlib)
    for tree in trees:
        mine_package(corpus, tree, settings.kinds, why=why)
    corpus.pairs = settle(corpus.pairs, settings.package_cap)
    return corpus


def package_texts(trees: Iterable[Path]) -> Iterator[str]:
    """The source text of every code file of the trees (for token statistics)."""
    for tree in trees:
        for relative in package_files(tree)[0]:
            text = read_source(tree / relative)
            if text is not None:
                yield text


def count_pairs(pairs: Iterable[Pair]) -> dict:
    """How many pairs, by kind and by source (and by kind within each source)."""
    by_kind: Counter[str] = Counter()
    by_source: dict[str, Counter[str]] = defaultdict(Counter)
    for p in pairs:
        by_kind[p.kind] += 1
        by_source[p.source][p.kind] += 1
    return {
        "pairs": sum(by_kind.values()),
        "by_kind": {k: by_kind[k] for k in KINDS if by_kind[k]},
        "by_source": {
            s: {"pairs": sum(c.values()), **{k: c[k] for k in KINDS if c[k]}}
            for s, c in sorted(by_source.items())
        },
    }


# ------------------------------------------------------------ development
def dev_corpus(trees: Iterable[Path]) -> Corpus:
    """The development evaluation on held-out packages, chosen as bench.codesearch
    chooses its third-party queries: functions (not classes) whose docstring's first
    sentence is usable, unique in the set, and found nowhere in the set's text once its
    own docstring is blanked; all of them (no sampling). Only their docstrings are
    blanked, and every chunk of the packages' code is a candidate answer."""
    texts: dict[str, str] = {}
    candidates = []
    for tree in trees:
        source = package_name(tree)
        for relative in package_files(tree)[0]:
            text = read_source(tree / relative)
            if text is not None:
                key = f"{source}/{relative}"
                texts[key] = text
                candidates += find_candidates(key, text)
    counts = Counter(normalize(c.query) for c in candidates)
    flat = {path: normalize(text) for path, text in texts.items()}
    everything = "\0".join(flat.values())
    kept: dict[str, list] = defaultdict(list)
    for c in candidates:
        needle = normalize(c.query).rstrip(".!?")
        if counts[normalize(c.query)] > 1 or everything.count(needle) > flat[c.path].count(needle):
            continue
        if needle in normalize(blank_lines(texts[c.path], [(c.doc_start, c.doc_end)])):
            continue
        kept[c.path].append(c)
    corpus = Corpus()
    for path, text in texts.items():
        found = kept.get(path, [])
        base = len(corpus.chunks)
        chunks = chunk_file(path, blank_lines(text, [(c.doc_start, c.doc_end) for c in found]))
        corpus.chunks.extend(chunks)
        for c in found:
            best = best_chunk(chunks, c.start_line, c.end_line)
            if best is not None:
                code = embed_input(chunks[best].signature, chunks[best].text)
                corpus.pairs.append(
                    Pair(c.query, code, base + best, path, c.start_line, c.end_line,
                         "docstring", path.partition("/")[0])
                )  # fmt: skip
    return corpus


# -------------------------------------------------------------------- report
def report(stdlib: bool = False, settings: MineSettings | None = None) -> dict:
    """Pairs per kind, source and role mined from the corpus's cached trees (and the
    stdlib's training part with `stdlib`), and the size of the development evaluation:
    mining only, no model."""
    settings = settings or MineSettings()
    trees = trees_by_role()
    out: dict = {"kinds": list(settings.kinds), "package_cap": settings.package_cap}
    for role in ("train", "dev"):
        why: Counter[str] = Counter()
        units = read_split()["train"] if stdlib and role == "train" else []
        corpus = mine_training(units, trees[role], settings, why=why)
        out[role] = {
            "packages": len(trees[role]),
            "chunks": len(corpus.chunks),
            **count_pairs(corpus.pairs),
            "tests": dict(why),
        }
    dev = dev_corpus(trees["dev"])
    out["dev_eval"] = {"queries": len(dev.pairs), "chunks": len(dev.chunks)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.embed.mining", description=__doc__)
    parser.add_argument("--stdlib", action="store_true", help="mine the stdlib's part too")
    parser.add_argument("--package-cap", type=int, default=PACKAGE_CAP, metavar="N")
    options = parser.parse_args(argv)
    try:
        out = report(options.stdlib, MineSettings(package_cap=options.package_cap))
    except ValueError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
