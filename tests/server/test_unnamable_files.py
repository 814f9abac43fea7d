"""Files whose names are not UTF-8 (Linux names are bytes) are left out of the index,
counted, and never crash `tachy index`, `tachy search` or the server's indexing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from index.indexer import CodeIndex
from index.scan import UNNAMABLE
from server import protocol as p
from tests.server.lsp_client import raw_server
from tests.server.test_index_cli import repo, tachy  # repo: the fixture, shared
from tests.server.test_lsp_server import eventually

__all__ = ["repo"]  # used by name, as a fixture

BAD_FILE = b"bad\xff.py"
BAD_DIR = b"dir\xfe"


def add_unnamable_files(root: Path) -> None:
    base = os.fsencode(root)
    with open(os.path.join(base, BAD_FILE), "wb") as handle:
        handle.write(b"def unnamable_marker_one():\n    return 1\n")
    os.mkdir(os.path.join(base, BAD_DIR))
    with open(os.path.join(base, BAD_DIR, b"inner.py"), "wb") as handle:
        handle.write(b"def unnamable_marker_two():\n    return 2\n")


def test_tachy_index_and_search_skip_unnamable_files(repo: Path):
    add_unnamable_files(repo)
    done = tachy("index", str(repo), "--no-dense", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["skipped"][UNNAMABLE] == 2
    assert stats["files"] >= 5
    human = tachy("index", str(repo), "--no-dense")
    assert human.returncode == 0 and f"2 {UNNAMABLE}" in human.stderr, human.stderr

    for query in ("parse config file", "unnamable_marker_one"):
        found = tachy("search", "--workspace", str(repo), "--json", "--mode", "lexical", query)
        assert found.returncode == 0, found.stderr
        assert "Traceback" not in found.stderr
        paths = [r["path"] for r in json.loads(found.stdout)["results"]]
        assert not any("bad" in path or "dir" in path for path in paths), paths
        if query == "parse config file":
            assert paths[0] == "src/config.py"


def test_arguments_that_are_not_utf8_are_searched_not_crashed_on(repo: Path):
    # argv arrives surrogate-escaped: a query or a --path glob with a byte \xff.
    found = tachy(
        "search", "--workspace", str(repo), "--json", "--mode", "lexical",
        "--path", os.fsdecode(b"src/\xfe*"), os.fsdecode(b"parse \xff config"),
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["query"] == "parse \ufffd config"


def test_update_paths_and_unsaved_text_under_unnamable_names(repo: Path):
    add_unnamable_files(repo)
    name = os.fsdecode(BAD_FILE)
    with CodeIndex(repo, dense=False) as index:
        assert index.update().skipped[UNNAMABLE] == 2
        assert index.update_paths([name]).skipped[UNNAMABLE] == 1
        index.update_texts({name: b"def unsaved_unnamable():\n    pass\n"})
        assert index.search("unsaved_unnamable", mode="lexical") == []
        assert index.search(os.fsdecode(b"\xff"), mode="lexical") == []
        assert index.symbols(os.fsdecode(b"unnamable\xff")) == []


async def test_the_server_indexes_a_folder_with_unnamable_files(repo: Path):
    add_unnamable_files(repo)
    async with raw_server() as (proc, c):
        await c.initialize([repo])

        async def found() -> list:
            response = await c.request(p.SEARCH, {"query": "parse config file"})
            return response["result"]["results"]

        results = await eventually(found)
        assert results[0]["uri"].endswith("/src/config.py")
        status = (await c.request(p.INDEX_STATUS))["result"]
        assert status["state"] in ("lexical", "ready"), status
        marker = await c.request(p.SEARCH, {"query": "unnamable_marker_one"})
        assert marker["result"]["results"] == []
        assert proc.returncode is None
