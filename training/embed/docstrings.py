"""Functions with docstrings in Python source: the queries of code search.

A function's docstring says in words what its code does, so the first sentence of a
docstring is a natural search query and the function (its docstring taken out) the
answer. Two users: bench.codesearch builds its evaluation set from them, and the code
embedder's trainer (training.embed) mines its training pairs with the same rules, so
training and evaluation agree on what a usable query is.

`find_candidates` lists the usable functions of one file; `blank_lines` replaces a
docstring by empty lines (line numbers unchanged); `source_units` groups a tree's
files by top-level module or package, the unit by which trees are split.
"""

from __future__ import annotations

import ast
import re
import sysconfig
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def functions_in(
    tree: ast.Module, classes: bool = False
) -> Iterable[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    """Module-level functions and methods of (possibly nested) classes (and, with
    `classes`, the classes themselves), with their qualified names. Functions nested in
    functions are left out."""

    def walk(body: list[ast.stmt], prefix: str) -> Iterable[tuple[str, Any]]:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef):
                if classes:
                    yield prefix + node.name, node
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


def find_candidates(path: str, source: str, *, classes: bool = False) -> list[Candidate]:
    """The usable functions of one file (`path` is only recorded), and with `classes`
    the usable classes too (a class's lines are all of its body)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source_lines(source)
    found = []
    for qualname, node in functions_in(tree, classes):
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


_PRAGMA = re.compile(r"#\s*(noqa|type:|pragma|pylint|fmt:|isort|-\*-|!)", re.IGNORECASE)


def comment_candidates(path: str, source: str, max_lines: int = 12) -> list[Candidate]:
    """Comment blocks of one file as queries: consecutive lines holding only a comment
    whose text is a usable query (pragmas, shebangs and commented-out code are not),
    each answered by the code that follows it, up to the next blank line (at most
    `max_lines`). `doc_start`/`doc_end` are the comment's lines (to blank out)."""
    lines = source_lines(source)
    found = []
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("#"):
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].lstrip().startswith("#"):
            i += 1
        block = lines[start:i]
        if any(_PRAGMA.match(line.strip()) for line in block):
            continue
        text = " ".join(line.strip().lstrip("#").strip() for line in block)
        sentence = first_sentence(text)
        end = i
        while end < len(lines) and end - i < max_lines and lines[end].strip():
            end += 1
        if end == i or not usable_query(sentence):
            continue
        found.append(
            Candidate(
                path=path, qualname="", query=sentence, start_line=i + 1, end_line=end,
                doc_start=start + 1, doc_end=i,
            )
        )  # fmt: skip
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
