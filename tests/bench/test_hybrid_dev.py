"""The dev-package study of hybrid search (bench/hybrid_dev.py) on a hand-made package:
sets built from a package's importable code only, candidates kept per query, and the
study's rankings equal to what search() returns."""

from __future__ import annotations

import textwrap
from pathlib import Path

from bench.hybrid_dev import (
    collect,
    dev_sets,
    late_ranking,
    maxsim,
    mode_ranking,
    package_root,
    study,
)
from index.search import Weights

FUNCTIONS = [
    ("read_settings", "Read the settings file and return a dictionary of options."),
    ("mean_of", "Compute the arithmetic average of a list of numbers."),
    ("slugify", "Turn a title into a lowercase slug joined by dashes."),
    ("retry_call", "Call a function again after a delay until it stops failing."),
    ("parse_header", "Split an HTTP header value into its parameters."),
    ("merge_maps", "Combine two mappings, the second winning on shared keys."),
    ("count_words", "Count how often each word occurs in a text."),
    ("clamp_value", "Limit a number to lie between a lower and an upper bound."),
    ("hex_digest", "Hash the bytes with SHA-256 and give the hexadecimal digest."),
    ("flatten_list", "Flatten nested lists into one flat list of items."),
    ("chunked", "Cut an iterable into tuples of a fixed size."),
]


def make_package(tree: Path) -> None:
    pkg = tree / "src" / "toolbox"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for i, (name, doc) in enumerate(FUNCTIONS):
        body = f'def {name}(value, other=None):\n    """{doc}"""\n    return value + {i}\n'
        (pkg / f"mod_{i}.py").write_text(body)
    (tree / "setup.py").write_text('"""Build script: not importable code."""\n')
    (tree / "docs").mkdir()
    (tree / "docs" / "conf.py").write_text(
        textwrap.dedent('''
        def setup(app):
            """Register the documentation's own extension with Sphinx."""
        ''')
    )


def test_sets_come_from_the_importable_code_and_rank_as_search_does(tmp_path: Path):
    from index.indexer import CodeIndex
    from index.static_embedder import StaticEmbedder

    tree = tmp_path / "toolbox-1.0"
    make_package(tree)
    root, units = package_root(tree)
    assert root == tree / "src" and units == ["toolbox"]
    sets = dev_sets(tmp_path / "sets", [tree], queries=50)
    assert len(sets) == 1 and len(sets[0].targets) == len(FUNCTIONS)
    assert all(t.path.startswith("toolbox/") for t in sets[0].targets)  # no docs, no setup.py
    model = StaticEmbedder()
    cases = collect(sets[0], model, tmp_path / "index")
    with CodeIndex(sets[0].root, cache_dir=tmp_path / "index", embedder=model) as idx:
        for case in cases[:4]:
            hits = idx.search(case.target.query, limit=10)
            ranking = mode_ranking(case, "hybrid", Weights())[:10]
            rows = case.found.rows
            assert [(h.path, h.start_line) for h in hits] == [
                (rows[c][0], rows[c][1]) for c in ranking
            ]
    # A late weight of 0 changes nothing; the study reports every mode and the grid.
    for case in cases:
        plain = mode_ranking(case, "hybrid", Weights())
        assert late_ranking(case, maxsim(model, case), 0.0)[:10] == plain[:10]
    record = study({"toolbox": cases}, model, grid=True, late=[0.5])
    assert record["queries"] == len(FUNCTIONS)
    assert 0 < record["hybrid"]["mrr_at_10"] <= 1
    assert len(record["grid"]) == 27 and "0.5" in record["late_interaction"]


def test_a_package_with_too_few_queries_is_left_out(tmp_path: Path):
    tree = tmp_path / "tiny-0.1"
    (tree / "tiny").mkdir(parents=True)
    (tree / "tiny" / "__init__.py").write_text(
        'def one():\n    """Return the number one as an integer."""\n    return 1\n'
    )
    assert dev_sets(tmp_path / "sets", [tree], queries=50) == []
