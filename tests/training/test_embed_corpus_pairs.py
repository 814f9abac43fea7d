"""Pairs of every kind from a package's code (training/embed/mining.py): docstrings,
comments, names, tests and signatures, on a hand-made package tree; the rules over
all of them (no query in its code, one chunk per query, each pair once, a cap per
package); the development evaluation; and one real package of the corpus's cache."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path, PurePosixPath

import pytest

from training.embed.corpus import MARKER, default_cache, read_corpus, tree_dir
from training.embed.mining import (
    KINDS,
    PACKAGE_CAP,
    MineSettings,
    contains,
    count_pairs,
    dev_corpus,
    header_end,
    is_test_path,
    mine_package,
    mine_training,
    name_words,
    package_files,
    settle,
)
from training.embed.pairs import Corpus, Pair
from training.embed.pipeline import Recipe, _texts_key

REPO = Path(__file__).resolve().parents[2]

PARSING = '''
import time


def parse_date_header(value, strict=False):
    """Turn an HTTP date header into a datetime in UTC.

    More words.
    """
    # Split the header into its weekday, day, month and year fields.
    parts = value.replace(",", " ").split()
    if strict and len(parts) != 6:
        raise ValueError(value)
    return time.strptime(" ".join(parts[1:5]), "%d %b %Y %H:%M:%S")


def format_date_header(when):
    """Write a datetime as the text of an HTTP date header."""
    return when.strftime("%a, %d %b %Y %H:%M:%S GMT")


def merge_fields(first, second):
    return [*first, *second]


class Reader:
    def read_all_lines(self, stream):
        lines = []
        for line in stream:
            lines.append(line.rstrip("\\n"))
        return lines

    def close(self):
        self.closed = True

    def not_done_yet(self):
        raise NotImplementedError
'''

OTHER = """
def merge_fields(left, right):
    return {**left, **right}
"""

TESTS = '''
from datetools.parsing import format_date_header, merge_fields, parse_date_header


def test_parse_date_header_in_utc():
    assert parse_date_header("Sun, 06 Nov 1994 08:49:37 GMT").tm_year == 1994


def test_merge_fields_keeps_order():
    assert merge_fields([1], [2]) == [1, 2]


def test_round_trip(when):
    assert parse_date_header(format_date_header(when))


class TestReader:
    def test_lines_are_read_all(self, stream):
        """The reader gives every line of a stream without its newline."""
        assert Reader().read_all_lines(stream) == ["a"]


class TestFormat:
    def test_format_date_header_in_gmt(self, when):
        assert format_date_header(when).endswith("GMT")

    def test_weekday(self, when):
        assert format_date_header(when)[:3] == "Sun"

    def test_day(self, when):
        assert format_date_header(when)[5:7] == "06"

    def test_month(self, when):
        assert format_date_header(when)[8:11] == "Nov"
'''


def make_tree(root: Path) -> Path:
    """A small sdist-like tree: a package, its tests, docs and a build script."""
    tree = root / "datetools-1.0"
    files = {
        "datetools/__init__.py": "",
        "datetools/parsing.py": PARSING,
        "datetools/other.py": OTHER,
        "tests/test_parsing.py": TESTS,
        "docs/conf.py": 'def setup_sphinx_app(app):\n    """Add the roles."""\n    app.x = 1\n',
        "setup.py": "from setuptools import setup\n\nsetup()\n",
    }
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(textwrap.dedent(text))
    (tree / MARKER).write_text(json.dumps({"name": "DateTools", "version": "1.0"}))
    return tree


def mined(tmp_path: Path) -> tuple[Corpus, Counter[str]]:
    corpus, why = Corpus(), Counter()
    mine_package(corpus, make_tree(tmp_path), why=why)
    corpus.pairs = settle(corpus.pairs)
    return corpus, why


def test_identifiers_split_into_words_as_the_lexical_index_splits_them():
    assert name_words("parse_date_header") == ["parse", "date", "header"]
    assert name_words("parseHTTPDate2") == ["parse", "http", "date", "2"]
    assert name_words("__init__") == ["init"]


def test_a_def_header_may_span_lines():
    import ast

    source = "def f(a,\n      b: dict[str, int] = {'x': 1},\n) -> int:\n    return a\n"
    node = ast.parse(source).body[0]
    assert header_end(source.split("\n"), node) == 3
    node = ast.parse("def g(key=lambda x: x): return 1\n").body[0]
    assert header_end(["def g(key=lambda x: x): return 1"], node) == 1


def test_the_package_code_is_its_modules_not_its_tests_docs_or_build_scripts(tmp_path: Path):
    code, tests = package_files(make_tree(tmp_path))
    assert code == ["datetools/__init__.py", "datetools/other.py", "datetools/parsing.py"]
    assert tests == ["tests/test_parsing.py"]
    for path in ("pkg/tests/x.py", "pkg/_tests/x.py", "e2e-tests/x.py", "pkg/test_x.py",
                 "x_test.py", "tests.py", "conftest.py"):  # fmt: skip
        assert is_test_path(PurePosixPath(path)), path
    assert not is_test_path(PurePosixPath("trio/testing/_check.py"))


def test_every_kind_is_mined_from_a_package(tmp_path: Path):
    corpus, _ = mined(tmp_path)
    by_kind: dict[str, dict[str, Pair]] = {}
    for p in corpus.pairs:
        by_kind.setdefault(p.kind, {})[p.query] = p
    assert set(by_kind) == set(KINDS)
    assert {p.source for p in corpus.pairs} == {"datetools"}
    assert all(p.path.startswith("datetools/datetools/") for p in corpus.pairs)
    assert set(by_kind["docstring"]) == {
        "Turn an HTTP date header into a datetime in UTC.",
        "Write a datetime as the text of an HTTP date header.",
    }
    assert set(by_kind["comment"]) == {
        "Split the header into its weekday, day, month and year fields."
    }
    # names: the body without the def line; one-word names and stubs make none
    names = by_kind["name"]
    assert set(names) == {"parse date header", "format date header", "read all lines"}
    body = names["parse date header"].code
    assert "parts = value.replace" in body and "def parse_date_header" not in body
    assert names["read all lines"].code.startswith("class Reader:")
    # signatures: the def line alone, for the documented functions that take parameters
    signatures = {p.query: p.code for p in by_kind["signature"].values()}
    assert signatures == {
        "Turn an HTTP date header into a datetime in UTC.": (
            "def parse_date_header(value, strict=False):"
        ),
        "Write a datetime as the text of an HTTP date header.": "def format_date_header(when):",
    }
    # a signature pair points to its function's chunk, as its docstring pair does
    doc = by_kind["docstring"]["Turn an HTTP date header into a datetime in UTC."]
    assert by_kind["signature"][doc.query].chunk == doc.chunk


def test_no_query_appears_in_its_code(tmp_path: Path):
    corpus, _ = mined(tmp_path)
    assert corpus.pairs
    for p in corpus.pairs:
        assert not contains(p.code, p.query), p
        assert p.query.rstrip(".") not in p.code
        assert corpus.relevant(p, p.chunk)


def test_a_test_pairs_with_the_one_function_it_tests_and_ambiguous_tests_are_skipped(
    tmp_path: Path,
):
    corpus, why = mined(tmp_path)
    tests = {p.query: p for p in corpus.pairs if p.kind == "test"}
    assert set(tests) == {
        "parse date header in utc",
        "The reader gives every line of a stream without its newline.",  # its docstring
        "format date header in gmt",  # TestFormat.test_format_date_header_in_gmt
        "format weekday",
        "format day",  # and no more tests of format_date_header
    }
    parse = tests["parse date header in utc"]
    lines = PARSING.split("\n")
    assert parse.path == "datetools/datetools/parsing.py"
    assert lines[parse.start_line - 1].startswith("def parse_date_header(")
    assert "def parse_date_header(value, strict=False):" in parse.code
    assert "Turn an HTTP date header" not in parse.code  # its docstring is blanked
    reader = tests["The reader gives every line of a stream without its newline."]
    assert "def read_all_lines(self, stream):" in reader.code
    # merge_fields is defined twice in the package; the round trip uses two functions
    assert why["tests"] == 8 and why["paired"] == 5
    assert why["ambiguous name"] == 1 and why["uses several"] == 1
    assert why["more tests of the same function"] == 1


def test_one_query_never_means_two_chunks_and_each_pair_is_kept_once():
    def pair(query: str, code: str, chunk: int, kind: str = "docstring") -> Pair:
        return Pair(query, code, chunk, "f.py", 1, 2, kind, "pkg")

    pairs = [
        pair("Open the file.", "a", 0),
        pair("open the  file.", "b", 1),  # the same query (case, spacing), another chunk
        pair("Close the file quickly.", "c", 2),
        pair("Close the file quickly.", "c", 2),  # the same pair again
        pair("Close the file quickly.", "def close(f):", 2, "signature"),  # same chunk
    ]
    assert [(p.code, p.kind) for p in settle(pairs)] == [
        ("c", "docstring"), ("def close(f):", "signature"),
    ]  # fmt: skip


def test_the_cap_holds_per_package_and_not_for_the_stdlib():
    pairs = [
        Pair(f"query {source} {i}", f"code {i}", n, "f.py", 1, 1, "name", source)
        for n, (source, i) in enumerate(
            (s, i) for s, count in (("stdlib", 9), ("big", 10), ("small", 2)) for i in range(count)
        )
    ]
    kept = settle(pairs, package_cap=3)
    counts = Counter(p.source for p in kept)
    assert counts == {"stdlib": 9, "big": 3, "small": 2}
    again = settle(list(reversed(pairs)), package_cap=3)  # which stay: not the order's choice
    assert {(p.query, p.code) for p in kept} == {(p.query, p.code) for p in again}
    assert count_pairs(kept) == {
        "pairs": 14,
        "by_kind": {"name": 14},
        "by_source": {
            "big": {"pairs": 3, "name": 3},
            "small": {"pairs": 2, "name": 2},
            "stdlib": {"pairs": 9, "name": 9},
        },
    }


def test_counts_per_kind_are_reported_and_kinds_can_be_chosen(tmp_path: Path):
    tree = make_tree(tmp_path)
    corpus = mine_training([], [tree], MineSettings(package_cap=4))
    counts = count_pairs(corpus.pairs)
    assert counts["pairs"] == 4 == counts["by_source"]["datetools"]["pairs"]
    full = count_pairs(mine_training([], [tree]).pairs)
    assert full["by_kind"] == {"docstring": 2, "comment": 1, "name": 3, "test": 5, "signature": 2}
    only = mine_training([], [tree], MineSettings(kinds=("name", "test")))
    assert {p.kind for p in only.pairs} == {"name", "test"}
    assert len(only.chunks) == len(corpus.chunks)  # the same chunks whatever the kinds
    with pytest.raises(ValueError, match="unknown pair kinds"):
        MineSettings(kinds=("docstring", "names"))
    with pytest.raises(ValueError, match="at least 1"):
        MineSettings(package_cap=0)


def test_the_development_set_is_built_like_the_benchmarks_third_party_set(tmp_path: Path):
    dev = dev_corpus([make_tree(tmp_path)])
    assert [p.query for p in dev.pairs] == [
        "Turn an HTTP date header into a datetime in UTC.",
        "Write a datetime as the text of an HTTP date header.",
    ]  # functions' docstrings only: no comments, names, tests or signatures
    assert {c.path for c in dev.chunks} == {
        "datetools/datetools/other.py", "datetools/datetools/parsing.py",
    }  # fmt: skip
    for p in dev.pairs:
        assert not contains(p.code, p.query) and dev.relevant(p, p.chunk)


def test_the_corpus_changes_the_teachers_key_and_the_recipe_takes_its_settings():
    stdlib = ["def f():\n    return 1"]
    assert _texts_key(stdlib) != _texts_key([*stdlib, "def g():\n    return 2"])
    recipe = Recipe(corpus=True, package_cap=10, kinds=("docstring", "test"))
    assert recipe.mining() == MineSettings(kinds=("docstring", "test"), package_cap=10)
    assert Recipe().corpus is False  # the shipped recipe is the stdlib's alone
    import argparse

    from training.embed import cli

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["embedder", "--out", "m"])
    assert (args.corpus, args.package_cap) == (False, PACKAGE_CAP)


def test_train_embedder_refuses_a_package_cap_under_one(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", "train", "embedder", "--out", str(tmp_path / "m"),
         "--corpus", "--package-cap", "0"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "--package-cap must be at least 1" in out.stderr, out.stderr
    assert not (tmp_path / "m").exists()


def test_mining_a_real_package_of_the_cache():
    """arrow, if the corpus's cache holds it (nothing is downloaded here)."""
    entry = next(e for e in read_corpus() if e.name == "arrow")
    tree = tree_dir(entry, default_cache())
    if not (tree / MARKER).is_file():
        pytest.skip(f"{tree} is not in the cache (python -m training.embed.corpus --download)")
    started = time.monotonic()
    corpus, why = Corpus(), Counter()
    mine_package(corpus, tree, why=why)
    corpus.pairs = settle(corpus.pairs)
    counts = count_pairs(corpus.pairs)
    assert set(counts["by_kind"]) == set(KINDS) and counts["pairs"] > 100
    assert set(counts["by_source"]) == {"arrow"} and why["paired"] > 10
    assert not any(contains(p.code, p.query) for p in corpus.pairs)
    assert time.monotonic() - started < 60


class FakeTeacher:
    """MiniLM's stand-in: the real tokenizer's directory, zero vectors."""

    name = "fake"

    def __init__(self, **_options) -> None:
        from index.embedder import default_model_dir

        self.model_dir = default_model_dir()

    def embed(self, texts):
        import numpy as np

        return np.zeros((len(texts), 4), dtype=np.float32)


class FakeEmbedder:
    def __init__(self, _model_dir) -> None:
        pass

    def embed(self, texts):
        import numpy as np

        rows = np.random.default_rng(len(texts)).normal(size=(len(texts), 8))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_the_recipe_mines_the_corpus_and_reports_its_development_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """build() with --corpus, every slow step faked: the pairs and chunks it trains on,
    the texts it counts tokens on, the teacher's cache entry and the record."""
    import numpy as np

    import training.embed.pipeline as pipeline

    train_tree, dev_tree = make_tree(tmp_path / "train"), make_tree(tmp_path / "dev")
    (dev_tree / MARKER).write_text(json.dumps({"name": "DevTools"}))
    seen: dict = {}

    def distill(texts, *, dim, sif, teacher):
        seen["texts"] = list(texts)
        return np.zeros((30522, dim), dtype=np.float32), {"kept_tokens": 1}

    def train(vectors, _tokenizer, pairs, _settings, *, chunks, chunk_targets, on_epoch):
        seen["pairs"], seen["chunks"] = pairs, chunks
        return vectors

    monkeypatch.setattr("index.embedder.MiniLMEmbedder", FakeTeacher)
    monkeypatch.setattr("index.static_embedder.StaticEmbedder", FakeEmbedder)
    monkeypatch.setattr("training.embed.distill.distill", distill)
    monkeypatch.setattr("training.embed.train.train", train)
    monkeypatch.setattr(
        "training.embed.split.read_split", lambda: {"train": ["colorsys.py"], "eval": ["shlex.py"]}
    )
    monkeypatch.setattr(
        "training.embed.corpus.trees_by_role",
        lambda **_: {"train": [train_tree], "dev": [dev_tree]},
    )
    recipe = pipeline.Recipe(dim=8, corpus=True, package_cap=4)
    record = pipeline.build(tmp_path / "model", recipe, cache=tmp_path / "cache", log=lambda _: 0)
    sources = Counter(p.source for p in seen["pairs"])
    assert sources["datetools"] == 4 and sources["stdlib"] > 0 and "devtools" not in sources
    assert any(c.startswith("def parse_date_header") for c in seen["chunks"])
    assert any("def parse_date_header" in t for t in seen["texts"])  # token counts
    assert record["pair_counts"]["by_source"]["datetools"]["pairs"] == 4
    assert record["mining"] == {"kinds": list(KINDS), "package_cap": 4}
    assert record["dev"]["queries"] == 2 and record["eval"]["queries"] > 0
    with np.load(tmp_path / "cache" / "teacher.npz") as cached:
        assert "corpus_chunks" in cached.files and "chunks" not in cached.files
    assert json.loads((tmp_path / "model" / "config.json").read_text())["dev"] == record["dev"]
