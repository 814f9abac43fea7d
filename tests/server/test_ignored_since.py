"""A file indexed and then ignored (.tachyignore, .gitignore, a secret name) is never
returned by a search, even before the index is updated, and the next update purges
its text and vectors from .tachy/index: through the CLI, the LSP server's
tachy/search and CodeIndex itself."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from index.indexer import CodeIndex
from server import protocol as p
from tests.index.test_indexer import HashingEmbedder
from tests.server.lsp_client import raw_server
from tests.server.test_index_cli import repo  # the fixture, shared
from tests.server.test_lsp_server import eventually

__all__ = ["repo"]  # used by name, as a fixture

PROJECT = Path(__file__).resolve().parents[2]
WORD = "zanzibarquokka"
PLAN = "src/plan.py"


def add_plan(repo: Path, name: str = PLAN) -> None:
    (repo / name).write_text(f"def {WORD}_plan():\n    return '{WORD} secret plan'\n")


def stored(repo: Path, path: str = PLAN) -> dict[str, int]:
    """What the index database still holds of `path` and of its text."""
    db = sqlite3.connect(repo / ".tachy" / "index" / "index.db")
    try:
        counts = {
            "files": db.execute("SELECT COUNT(*) FROM files WHERE path=?", (path,)),
            "chunks": db.execute("SELECT COUNT(*) FROM chunks WHERE path=?", (path,)),
            "lexical": db.execute("SELECT COUNT(*) FROM lex_docs WHERE path=?", (path,)),
            "text": db.execute("SELECT COUNT(*) FROM blobs WHERE text LIKE ?", (f"%{WORD}%",)),
        }
        return {name: cursor.fetchone()[0] for name, cursor in counts.items()}
    finally:
        db.close()


def tachy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        capture_output=True, text=True, timeout=300, cwd=PROJECT, env=env,
    )  # fmt: skip


def cli_search(repo: Path, *, env: dict[str, str] | None = None) -> list[dict]:
    done = tachy("search", "--workspace", str(repo), "--json", "--mode", "lexical", WORD, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["results"]


class HeldLock:
    """Holds the index's writer lock, as a long `tachy index` would: `tachy search`
    then searches the index as it stands, without updating it first."""

    def __init__(self, repo: Path) -> None:
        self.handle = open(repo / ".tachy" / "index" / "lock", "a+")  # noqa: SIM115

    def __enter__(self) -> HeldLock:
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def test_cli_search_never_returns_a_file_ignored_since_and_index_purges_it(repo: Path):
    add_plan(repo)
    assert tachy("index", str(repo), "--no-dense").returncode == 0
    assert [r["path"] for r in cli_search(repo)] == [PLAN]
    (repo / ".tachyignore").write_text(f"{PLAN}\n")
    with HeldLock(repo):  # no update before this search: the filter alone hides it
        assert cli_search(repo) == []
    assert stored(repo)["chunks"] == 1  # still indexed: nothing updated it yet
    assert tachy("index", str(repo), "--no-dense").returncode == 0
    assert stored(repo) == {"files": 0, "chunks": 0, "lexical": 0, "text": 0}
    assert cli_search(repo) == []


def test_a_name_that_became_a_secret_is_hidden_and_purged(repo: Path):
    add_plan(repo, "src/deploy.conf")
    assert tachy("index", str(repo), "--no-dense").returncode == 0
    secret = {**os.environ, "TACHY_SECRET_PATTERNS": "deploy.conf"}
    with HeldLock(repo):
        assert cli_search(repo, env=secret) == []
    assert cli_search(repo, env=secret) == []  # this one updated the index first
    assert stored(repo, "src/deploy.conf") == {"files": 0, "chunks": 0, "lexical": 0, "text": 0}


def embedding_keys(repo: Path, path: str = PLAN) -> list[str]:
    with closing(sqlite3.connect(repo / ".tachy" / "index" / "index.db")) as db:
        return [
            row[0]
            for row in db.execute(
                "SELECT b.embed_key FROM chunks c JOIN blobs b ON b.hash = c.hash "
                "AND b.seq = c.seq WHERE c.path = ?",
                (path,),
            )
        ]


def vectors_of(repo: Path, keys: list[str]) -> int:
    with closing(sqlite3.connect(repo / ".tachy" / "index" / "index.db")) as db:
        marks = ",".join("?" * len(keys))
        return db.execute(
            f"SELECT COUNT(*) FROM embeddings WHERE key IN ({marks})", keys
        ).fetchone()[0]


def lexical(index: CodeIndex) -> set[str]:
    return {hit.path for hit in index.search(WORD, mode="lexical")}


def dense(index: CodeIndex) -> set[str]:
    return {hit.path for hit in index.search(WORD, mode="dense", limit=50)}


def test_a_nested_gitignore_hides_at_once_and_the_update_purges_vectors(repo: Path):
    add_plan(repo)
    (repo / "src" / "copy.py").write_text((repo / PLAN).read_text())  # the same content
    with CodeIndex(repo, embedder=HashingEmbedder()) as index:
        index.update()
        assert lexical(index) == {PLAN, "src/copy.py"}
        keys = embedding_keys(repo)
        assert keys and vectors_of(repo, keys) == len(keys)
        assert {h.path for h in index.symbols(WORD)} == {PLAN, "src/copy.py"}
        (repo / "src" / ".gitignore").write_text("plan.py\n")
        # Searched without an update: lexically, densely, by symbol.
        assert lexical(index) == {"src/copy.py"}
        assert dense(index) & {PLAN, "src/copy.py"} == {"src/copy.py"}
        assert {h.path for h in index.symbols(WORD)} == {"src/copy.py"}
        index.update()
        assert stored(repo)["chunks"] == 0
        assert stored(repo)["text"] == 1  # the visible copy keeps the shared content
        # Both hidden now: nothing of the content stays, vectors included.
        (repo / "src" / ".gitignore").write_text("plan.py\ncopy.py\n")
        index.update()
        assert stored(repo, "src/copy.py") == {"files": 0, "chunks": 0, "lexical": 0, "text": 0}
        assert dense(index) & {PLAN, "src/copy.py"} == set()
        assert vectors_of(repo, keys) == 0
        # Un-ignored, they come back from the disk.
        (repo / "src" / ".gitignore").write_text("")
        index.update()
        assert lexical(index) == {PLAN, "src/copy.py"}


async def test_lsp_search_never_returns_a_file_ignored_since(repo: Path):
    add_plan(repo)
    async with raw_server() as (_, c):
        await c.initialize([repo])

        async def found() -> list:
            response = await c.request(p.SEARCH, {"query": WORD})
            return [r["uri"] for r in response["result"]["results"]]

        assert (await eventually(found))[0].endswith(PLAN)
        (repo / ".tachyignore").write_text("src/\n")  # the editor is not told
        assert await found() == []
        # Told (a watched-files change), the server looks again and purges it.
        c.notify(
            "workspace/didChangeWatchedFiles",
            {"changes": [{"uri": (repo / ".tachyignore").as_uri(), "type": 2}]},
        )

        async def purged() -> bool:
            await c.request(p.INDEX_STATUS)
            return stored(repo)["chunks"] == 0 and stored(repo)["text"] == 0

        await eventually(purged)
        assert await found() == []
