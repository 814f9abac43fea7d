"""`tachy index` and `tachy search` run as subprocesses, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_repo


def tachy(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[2],
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo")
    (root / "src" / "config.py").write_text(
        "def parse_config_file(path):\n"
        '    """Read KEY=VALUE lines into a dict."""\n'
        "    with open(path) as handle:\n"
        '        return dict(line.strip().split("=", 1) for line in handle if "=" in line)\n'
    )
    return root


def test_index_then_search_lexically(repo):
    done = tachy("index", str(repo), "--no-dense", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["files"] >= 5 and stats["chunks"] >= 5 and stats["state"] == "lexical"
    found = tachy(
        "search", "--workspace", str(repo), "--json", "--mode", "lexical", "parse config file"
    )
    assert found.returncode == 0, found.stderr
    results = json.loads(found.stdout)["results"]
    assert results[0]["path"] == "src/config.py"
    assert results[0]["symbol"] == "parse_config_file"
    assert set(results[0]) == {"path", "start_line", "end_line", "symbol", "score", "snippet"}


def test_search_builds_the_index_when_missing_and_prints_to_stderr(repo):
    found = tachy("search", "--workspace", str(repo), "--mode", "lexical", "def add")
    assert found.returncode == 0, found.stderr
    assert found.stdout == ""
    assert "src/calc.py:" in found.stderr


def test_batch_queries_give_a_list_of_result_lists(repo, tmp_path):
    queries = tmp_path / "queries.txt"
    queries.write_text("parse config file\n\nadd\n")
    found = tachy(
        "search", "--workspace", str(repo), "--mode", "lexical", "--queries", str(queries)
    )
    assert found.returncode == 0, found.stderr
    results = json.loads(found.stdout)
    assert len(results) == 2 and all(isinstance(r, list) for r in results)
    assert results[0][0]["path"] == "src/config.py"


def test_dense_index_with_the_bundled_model(repo):
    done = tachy("index", str(repo), "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["state"] == "ready" and stats["embedded"] == stats["chunks"]
    found = tachy(
        "search", "--workspace", str(repo), "--json", "--mode", "dense", "read settings from a file"
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "src/config.py"


def test_usage_errors(repo, tmp_path):
    assert tachy("index", str(tmp_path / "missing")).returncode == 2
    assert tachy("search", "--workspace", str(repo)).returncode == 2
    assert (
        tachy(
            "search", "--workspace", str(repo), "--queries", str(tmp_path / "nope.txt")
        ).returncode
        == 2
    )
    # No `tachy index` first: the search's own update embeds what it indexes.
    dense_first = tachy("search", "--workspace", str(repo), "--mode", "dense", "x")
    assert dense_first.returncode == 0, dense_first.stderr
