"""A damaged index cache under .tachy/index is rebuilt, never a permanent failure:
`tachy search` and `tachy index` run as subprocesses on a workspace whose index
files were left in states a crash, a disk fault or another program can leave."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests.server.test_index_cli import repo, tachy  # repo: the fixture, shared

__all__ = ["repo"]  # used by name, as a fixture


def search(repo: Path, query: str = "parse config file", *extra: str):
    return tachy("search", "--workspace", str(repo), "--json", "--mode", "lexical", *extra, query)


def first_path(done) -> str:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["results"][0]["path"]


def index_dir(repo: Path) -> Path:
    return repo / ".tachy" / "index"


def _undecodable_mark(d: Path) -> None:
    (d / "damaged").write_bytes(b"\xff\xfe\x00 not utf-8 \xc3")


def _mark_is_a_directory(d: Path) -> None:
    (d / "damaged").mkdir()
    (d / "damaged" / "x").write_bytes(b"\xff")


def _garbage_database(d: Path) -> None:
    for name in ("index.db-wal", "index.db-shm"):
        (d / name).unlink(missing_ok=True)
    (d / "index.db").write_bytes(os.urandom(64 * 1024))


def _database_is_a_directory(d: Path) -> None:
    for name in ("index.db", "index.db-wal", "index.db-shm"):
        (d / name).unlink(missing_ok=True)
    (d / "index.db").mkdir()


def _undecodable_schema(d: Path) -> None:
    db = sqlite3.connect(d / "index.db")
    db.execute("UPDATE meta SET value = CAST(x'ff00fe' AS TEXT) WHERE key = 'schema'")
    db.commit()
    db.close()


def _lock_is_a_directory(d: Path) -> None:
    (d / "lock").unlink()
    (d / "lock").mkdir()


@pytest.mark.parametrize(
    "damage",
    [
        _undecodable_mark,
        _mark_is_a_directory,
        _garbage_database,
        _database_is_a_directory,
        _undecodable_schema,
        _lock_is_a_directory,
    ],
)
def test_a_damaged_index_is_rebuilt_by_the_next_search(repo: Path, damage):
    assert tachy("index", str(repo), "--no-dense").returncode == 0
    damage(index_dir(repo))
    done = search(repo)
    assert first_path(done) == "src/config.py"
    assert "Traceback" not in done.stderr
    if damage is not _lock_is_a_directory:  # the lock is not index data: no rebuild
        assert "rebuilding the index" in done.stderr, done.stderr
    assert not (index_dir(repo) / "damaged").exists()
    again = search(repo)
    assert first_path(again) == "src/config.py"
    assert "rebuilding" not in again.stderr  # rebuilt once, then healthy


def test_tachy_index_rebuilds_after_an_undecodable_mark(repo: Path):
    assert tachy("index", str(repo), "--no-dense").returncode == 0
    _undecodable_mark(index_dir(repo))
    done = tachy("index", str(repo), "--no-dense", "--json")
    assert done.returncode == 0, done.stderr
    assert "rebuilding the index" in done.stderr
    assert json.loads(done.stdout)["files"] >= 5
    assert first_path(search(repo)) == "src/config.py"


def test_damaged_vector_files_are_rebuilt_from_the_database(repo: Path):
    assert tachy("index", str(repo)).returncode == 0
    vectors = index_dir(repo) / "vectors"
    for path in vectors.iterdir():
        path.write_bytes(b"\xff\xfe garbage \x00" * 10)
    done = tachy(
        "search", "--workspace", str(repo), "--json", "--mode", "dense", "read settings from a file"
    )
    assert first_path(done) == "src/config.py"
