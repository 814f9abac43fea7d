"""The docstring code-search set (bench/codesearch.py) on tiny synthetic trees."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

from bench.codesearch import (
    EvalSet,
    Target,
    build_eval_set,
    first_relevant_rank,
    is_relevant,
    mrr_at_k,
    recall_at_k,
    reciprocal_rank,
    verify,
)
from training.embed.docstrings import (
    blank_lines,
    find_candidates,
    first_sentence,
    is_boilerplate,
    usable_query,
)


class Hit(NamedTuple):
    path: str
    start_line: int
    end_line: int


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


MATHS = '''
"""A module about numbers."""

import functools


def add_numbers(a, b):
    """Add two numbers together and return their sum.

    More words that are not the first sentence.
    """
    return a + b


class Parser:
    """A tiny parser."""

    @functools.lru_cache
    def parse_header(self, line):
        """Split a header line into its name and its value."""
        name, _, value = line.partition(":")
        return name.strip(), value.strip()

    def only_doc(self):
        """This method has nothing but a docstring in it."""

    def same_line(self): "Docstring on the same line as the def."; return 1

    def short(self):
        """Too short."""
        return 2

    def outer(self):
        """Return the outer value of the parser object."""

        def inner():
            """Compute the inner value of the nested helper."""
            return 3

        return inner()
'''


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    write(root, "maths.py", MATHS)
    write(
        root,
        "pkg/strings.py",
        '''
        def reverse_text(text):
            """Reverse the characters of a piece of text."""
            return text[::-1]


        def shout_text(text):
            """Turn every letter of the text into upper case."""
            return text.upper()


        def duplicate_one(x):
            """Return the given value without any change at all."""
            return x
        ''',
    )
    write(
        root,
        "pkg/other.py",
        '''
        # Note: compute the checksum of a block of bytes (see checksum below).


        def duplicate_two(x):
            """Return the given value without any change at all."""
            return x


        def checksum(data):
            """Compute the checksum of a block of bytes."""
            return sum(data) % 256
        ''',
    )
    write(
        root,
        "tests/test_maths.py",
        '''
        def test_add():
            """Check that adding two numbers gives their sum."""
            assert 1 + 1 == 2
        ''',
    )
    write(
        root,
        "pkg/__pycache__/junk.py",
        '''
        def cached():
            """A file in a cache directory that must be ignored."""
            return 0
        ''',
    )
    return root


# ----------------------------------------------------------------- sentences
@pytest.mark.parametrize(
    ("docstring", "expected"),
    [
        ("Add two numbers.\n\nMore text.", "Add two numbers."),
        (
            "Split a header line\n    into name and value. Then more.",
            "Split a header line into name and value.",
        ),
        ("Use a tool, e.g. a hammer. Done.", "Use a tool, e.g. a hammer."),
        ("No final period here", "No final period here"),
        ("Is it ready? Yes.", "Is it ready?"),
        ("Version 1.2 of the format is read. Rest.", "Version 1.2 of the format is read."),
    ],
)
def test_first_sentence(docstring: str, expected: str) -> None:
    assert first_sentence(docstring) == expected


@pytest.mark.parametrize(
    "sentence",
    [
        "Return self.",
        "Return repr(self).",
        "Implement iter(self).",
        "Initialize self. See help(type(self)) for accurate signature.",
        "Same as the other function in this module.",
        "Deprecated, use something else instead please.",
        "S.find(sub[, start[, end]]) -> int",
        "parse(text) -> tree of nodes",
        'comment = "(" *([FWS] ccontent) [FWS] ")"',
        "self // other: The floor() of self/other.",
        ">>> f(1) returns two here",
    ],
)
def test_boilerplate_is_rejected(sentence: str) -> None:
    assert is_boilerplate(sentence)
    assert not usable_query(sentence)


def test_usable_query_needs_four_words_of_prose() -> None:
    assert usable_query("Add two numbers together.")
    assert usable_query("Split a header line into its name and value.")
    assert not usable_query("Add two numbers.")  # three words
    assert not usable_query("Add 1 2 3.")  # numbers are not words
    assert not usable_query(" ".join(["word"] * 60) + ".")  # not a summary
    assert not is_boilerplate("Return the sum of two numbers.")


# ---------------------------------------------------------------- candidates
def test_find_candidates_picks_functions_and_methods() -> None:
    source = textwrap.dedent(MATHS).lstrip("\n")
    found = {c.qualname: c for c in find_candidates("maths.py", source)}
    # only_doc: nothing but a docstring; same_line: not on its own line; short: three
    # words; inner: nested in a function.
    assert set(found) == {"add_numbers", "Parser.parse_header", "Parser.outer"}
    add = found["add_numbers"]
    assert add.query == "Add two numbers together and return their sum."
    lines = source.split("\n")
    assert lines[add.start_line - 1].startswith("def add_numbers")
    assert lines[add.end_line - 1].strip() == "return a + b"
    assert (add.doc_start, add.doc_end) == (add.start_line + 1, add.start_line + 4)
    parse = found["Parser.parse_header"]
    assert lines[parse.start_line - 1].strip() == "@functools.lru_cache"  # decorator included
    assert lines[parse.start_line].strip().startswith("def parse_header")


def test_find_candidates_survives_bad_source() -> None:
    assert find_candidates("bad.py", "def broken(:\n    pass\n") == []


def test_blank_lines_keeps_numbering_and_endings() -> None:
    source = "a\r\nb\r\nc\x0cstill c\nd\n"
    out = blank_lines(source, [(2, 2), (3, 3)])
    assert out == "a\r\n\r\n\nd\n"
    assert out.count("\n") == source.count("\n")


# ---------------------------------------------------------------- the set
def test_build_blanks_docstrings_and_keeps_line_numbers(tree: Path, tmp_path: Path) -> None:
    eval_set = build_eval_set(tmp_path / "work", tree, n_queries=50, seed=1)
    work = Path(eval_set.root)
    queries = {t.qualname: t for t in eval_set.targets}
    # tests/ and __pycache__/ are left out; the duplicate sentence and the sentence that
    # also appears in a comment are dropped.
    assert set(queries) == {
        "add_numbers",
        "Parser.parse_header",
        "Parser.outer",
        "reverse_text",
        "shout_text",
    }
    assert eval_set.dropped == {"duplicate_sentence": 2, "sentence_elsewhere": 1}
    assert not (work / "tests").exists()
    assert not (work / "pkg" / "__pycache__").exists()
    assert eval_set.files == 3
    for rel in ("maths.py", "pkg/strings.py", "pkg/other.py"):
        original = (tree / rel).read_text().split("\n")
        copy = (work / rel).read_text().split("\n")
        assert len(copy) == len(original)
        ast.parse("\n".join(copy))
        changed = [i for i, (a, b) in enumerate(zip(original, copy, strict=True)) if a != b]
        assert all(copy[i] == "" for i in changed)
    copy = (work / "maths.py").read_text()
    for target in eval_set.targets:
        assert target.query not in (work / target.path).read_text()
    # Docstrings of functions that are not targets stay.
    assert "A tiny parser." in copy
    assert "Compute the inner value" in copy
    assert verify(eval_set) == []


def test_build_is_deterministic_and_sampled(tree: Path, tmp_path: Path) -> None:
    a = build_eval_set(tmp_path / "a", tree, n_queries=3, seed=7)
    b = build_eval_set(tmp_path / "b", tree, n_queries=3, seed=7)
    assert len(a.targets) == 3
    assert [(t.path, t.qualname) for t in a.targets] == [(t.path, t.qualname) for t in b.targets]
    seen = {
        tuple(t.qualname for t in build_eval_set(tmp_path / f"s{s}", tree, 3, s).targets)
        for s in range(8)
    }
    assert len(seen) > 1  # the seed matters
    # Only the sampled functions lose their docstrings.
    sampled = {t.qualname for t in a.targets}
    copy = (Path(a.root) / "pkg" / "strings.py").read_text()
    assert ("Reverse the characters" in copy) == ("reverse_text" not in sampled)


def test_build_max_bytes_takes_whole_units(tree: Path, tmp_path: Path) -> None:
    maths_size = (tree / "maths.py").stat().st_size
    eval_set = build_eval_set(tmp_path / "w", tree, n_queries=50, seed=0, max_bytes=maths_size)
    assert eval_set.units == ["maths.py"]
    assert {t.path for t in eval_set.targets} == {"maths.py"}
    assert not (Path(eval_set.root) / "pkg").exists()


def test_build_refuses_a_non_empty_work_dir(tree: Path, tmp_path: Path) -> None:
    work = tmp_path / "w"
    write(work, "x.py", "x = 1\n")
    with pytest.raises(FileExistsError):
        build_eval_set(work, tree)


def test_build_keeps_encoding_and_crlf(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    latin = (
        '# -*- coding: latin-1 -*-\r\ndef grüße(x):\r\n    """Return a friendly greeting '
        'for the given person."""\r\n    return "hé " + x\r\n'
    )
    (root / "greet.py").write_bytes(latin.encode("latin-1"))
    eval_set = build_eval_set(tmp_path / "w", root, n_queries=5)
    assert [t.qualname for t in eval_set.targets] == ["grüße"]
    data = (Path(eval_set.root) / "greet.py").read_bytes()
    assert data == (
        '# -*- coding: latin-1 -*-\r\ndef grüße(x):\r\n\r\n    return "hé " + x\r\n'
    ).encode("latin-1")


def test_save_and_load_round_trip(tree: Path, tmp_path: Path) -> None:
    eval_set = build_eval_set(tmp_path / "w", tree, n_queries=4)
    eval_set.save(tmp_path / "set.json")
    loaded = EvalSet.load(tmp_path / "set.json")
    assert loaded == eval_set
    assert loaded.corpus()["queries"] == 4


def test_verify_reports_a_leaked_docstring(tree: Path, tmp_path: Path) -> None:
    eval_set = build_eval_set(tmp_path / "w", tree, n_queries=50)
    target = eval_set.targets[0]
    path = Path(eval_set.root) / target.path
    path.write_text(path.read_text() + f"\n# {target.query}\n")
    assert any("still in the file" in p for p in verify(eval_set))


# ------------------------------------------------------------------ scoring
TARGET = Target(qid=0, query="q", path="pkg/a.py", qualname="f", start_line=10, end_line=20)


@pytest.mark.parametrize(
    ("hit", "relevant"),
    [
        (Hit("pkg/a.py", 10, 20), True),
        (Hit("pkg/a.py", 1, 10), True),  # touches the first line
        (Hit("pkg/a.py", 20, 40), True),  # touches the last line
        (Hit("pkg/a.py", 1, 200), True),  # a chunk holding the whole function
        (Hit("./pkg/a.py", 12, 14), True),
        (Hit("pkg/a.py", 1, 9), False),
        (Hit("pkg/a.py", 21, 30), False),
        (Hit("pkg/b.py", 10, 20), False),
        (Hit("a.py", 10, 20), False),
    ],
)
def test_is_relevant(hit: Hit, relevant: bool) -> None:
    assert is_relevant(hit, TARGET) is relevant


def test_ranks_and_metrics() -> None:
    miss = Hit("other.py", 1, 100)
    good = Hit("pkg/a.py", 15, 16)
    assert first_relevant_rank([miss, miss, good, good], TARGET) == 3
    assert reciprocal_rank([miss, good], TARGET) == 0.5
    assert reciprocal_rank([miss] * 10 + [good], TARGET) == 0.0  # rank 11 is past k
    assert reciprocal_rank([miss] * 10 + [good], TARGET, k=11) == pytest.approx(1 / 11)
    results = [[good], [miss, miss, good], [miss], []]
    targets = [TARGET] * 4
    assert mrr_at_k(results, targets) == pytest.approx((1 + 1 / 3) / 4)
    assert recall_at_k(results, targets) == 0.5
    assert recall_at_k(results, targets, k=1) == 0.25
    assert mrr_at_k([], []) == 0.0
    with pytest.raises(ValueError):
        mrr_at_k([[good]], targets)
    with pytest.raises(ValueError):
        recall_at_k([[good]], targets)
