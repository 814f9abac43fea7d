"""The hand-written agent-style query set (bench/data/agent-queries-*.json, issue 35):
well formed, over a tree bench.codesearch evaluates on, and every answer is where it
says it is in the installed package (parsed with `ast`, nothing imported)."""

from __future__ import annotations

import ast
import json
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path, PurePosixPath

import pytest

from bench.codesearch import THIRD_PARTY
from training.embed.corpus import EVALUATED_PACKAGES, canonical

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"
SETS = sorted(DATA.glob("agent-queries-*.json"))


def definitions(source: str) -> dict[str, list[tuple[int, int]]]:
    """Every function and class of a module by qualified name: its line ranges
    (decorators included; several for an overloaded name)."""
    found: dict[str, list[tuple[int, int]]] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.setdefault(name, []).append((start, child.end_lineno or start))
                walk(child, name + ".")

    walk(ast.parse(source), "")
    return found


def test_there_is_a_set():
    assert SETS, f"no agent-queries-*.json in {DATA}"


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.stem)
def test_the_set_is_well_formed_and_over_an_evaluated_tree(path: Path):
    data = json.loads(path.read_text())
    assert data["about"].strip()
    assert path.stem == f"agent-queries-{data['package']}"
    assert data["package"] in THIRD_PARTY
    assert canonical(data["distribution"]) in EVALUATED_PACKAGES
    queries = data["queries"]
    assert 25 <= len(queries) <= 60
    assert len({q["qid"] for q in queries}) == len(queries)
    assert len({q["query"].lower() for q in queries}) == len(queries)
    for q in queries:
        assert 2 <= len(q["query"].split()) <= 15, q
        assert q["answers"], q
        for a in q["answers"]:
            rel = PurePosixPath(a["path"])
            assert not rel.is_absolute() and ".." not in rel.parts and rel.suffix == ".py", a
            assert 1 <= a["start_line"] <= a["end_line"], a


@pytest.mark.parametrize("path", SETS, ids=lambda p: p.stem)
def test_every_answer_is_at_its_lines_in_the_installed_package(path: Path):
    data = json.loads(path.read_text())
    try:
        installed = version(data["distribution"])
    except PackageNotFoundError:
        pytest.skip(f"{data['distribution']} is not installed")
    if installed != data["version"]:
        pytest.skip(
            f"{path.name} was written for {data['distribution']} {data['version']}, "
            f"{installed} is installed: its line numbers need checking again"
        )
    spec = find_spec(data["package"])
    assert spec and spec.origin
    root = Path(spec.origin).parent
    parsed: dict[str, dict[str, list[tuple[int, int]]]] = {}
    wrong = []
    for q in data["queries"]:
        for a in q["answers"]:
            file = root / a["path"]
            if not file.is_file():
                wrong.append(f"q{q['qid']}: no file {a['path']}")
                continue
            defs = parsed.setdefault(a["path"], definitions(file.read_text(encoding="utf-8")))
            ranges = defs.get(a["qualname"], [])
            recorded = (a["start_line"], a["end_line"])
            if not ranges:
                wrong.append(f"q{q['qid']}: no {a['qualname']} in {a['path']}")
            elif recorded not in ranges:  # exactly one definition's lines, not just overlapping
                wrong.append(f"q{q['qid']}: {a['qualname']} is at {ranges}, not {recorded}")
    assert wrong == []


def test_the_benchmark_scores_the_agent_queries_on_a_real_index(tmp_path):
    """bench.codesearch's agent set: the package copied as it is, a hit in any of a
    query's answers counts, and lexical search over the real index finds some."""
    from bench.codesearch import AGENT_QUERIES, build_agent_set, mode_scores
    from index.indexer import CodeIndex

    recorded = json.loads(AGENT_QUERIES.read_text())
    try:
        agent_set = build_agent_set(tmp_path / "tree")
    except RuntimeError as exc:
        pytest.skip(str(exc))  # another version installed: the line numbers differ
    assert len(agent_set.queries) == len(recorded["queries"])
    query, answers = agent_set.queries[0]
    assert query == recorded["queries"][0]["query"] and len(answers) >= 1
    assert (tmp_path / "tree" / answers[0].path).is_file()
    with CodeIndex(agent_set.root, cache_dir=tmp_path / "index") as idx:
        idx.update()
        scores = mode_scores(idx, agent_set, "lexical")
    assert 0.0 < scores["mrr_at_10"] <= scores["recall_at_10"] <= 1.0, scores


def test_a_query_is_answered_by_its_best_ranked_answer():
    from types import SimpleNamespace

    from bench.codesearch import Target, best_rank

    answers = [Target(1, "q", "a.py", "f", 10, 20), Target(1, "q", "b.py", "g", 1, 5)]
    hit = lambda path, start, end: SimpleNamespace(path=path, start_line=start, end_line=end)  # noqa: E731
    hits = [hit("c.py", 1, 9), hit("b.py", 4, 8), hit("a.py", 15, 16)]
    assert best_rank(hits, answers) == 2  # the second hit lies in the second answer
    assert best_rank(hits, answers, k=1) is None and best_rank([], answers) is None
