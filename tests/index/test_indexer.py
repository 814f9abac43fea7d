"""CodeIndex end to end on small real workspaces: incremental updates, the caches,
crash safety, bad input and hybrid search. Index mechanics use a small hashing
embedder (fast, counts its calls); the real MiniLM model is covered by
test_embedder.py and by test_search_quality.py."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from index.errors import CodeIndexError
from index.indexer import CodeIndex, FreshIndex


class HashingEmbedder:
    """Bag of words hashed into 256 dimensions: similar texts get similar vectors."""

    name = "test-hashing-256"
    dim = 256

    def __init__(self) -> None:
        self.texts_embedded = 0

    def embed(self, texts):
        self.texts_embedded += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-9)


CALC = '''"""Arithmetic helpers."""


def add_numbers(a, b):
    """Add two numbers."""
    return a + b


def parse_config_file(path):
    """Read the settings file and return a dict."""
    with open(path) as handle:
        return dict(line.split("=", 1) for line in handle)


class Vector:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def length(self):
        return (self.x**2 + self.y**2) ** 0.5
'''

APP_JS = """export function renderWidget(el, props) {
  const title = props.title || "untitled";
  el.innerHTML = `<h1>${title}</h1>`;
  return el;
}

export class EventBus {
  constructor() { this.handlers = {}; }
  emit(name, payload) { (this.handlers[name] || []).forEach((h) => h(payload)); }
}
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "web").mkdir()
    (root / "src" / "calc.py").write_text(CALC)
    (root / "web" / "app.js").write_text(APP_JS)
    (root / "README.md").write_text("# Demo\n\nA demo project for the index tests.\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "build").mkdir()
    (root / "build" / "gen.py").write_text("def generated_function():\n    pass\n")
    (root / "debug.log").write_text("parse_config_file failed\n")
    (root / ".env").write_text("SECRET_TOKEN=hunter2\n")
    return root


def open_index(root: Path, **options) -> CodeIndex:
    options.setdefault("embedder", HashingEmbedder())
    return CodeIndex(root, **options)


def lines_of(root: Path, hit) -> str:
    lines = (root / hit.path).read_text().split("\n")
    return "\n".join(lines[hit.start_line - 1 : hit.end_line])


def test_update_indexes_visible_files_only(workspace):
    with open_index(workspace) as index:
        stats = index.update()
        assert stats.files == 4  # calc.py, app.js, README.md, .gitignore
        assert stats.chunks >= 3
        paths = {
            hit.path
            for hit in index.search("generated_function secret token", mode="lexical", limit=50)
        }
        assert paths.isdisjoint({"build/gen.py", ".env", "debug.log"})
        top = index.search("parse_config_file", mode="lexical")[0]
        assert (top.path, top.symbol) == ("src/calc.py", "parse_config_file")
        assert "def parse_config_file(path):" in top.snippet


def test_hits_point_at_the_exact_lines(workspace):
    with open_index(workspace) as index:
        index.update()
        for hit in index.search("Vector length renderWidget", mode="lexical", limit=20):
            text = lines_of(workspace, hit)
            assert hit.snippet.split("\n")[0] == text.split("\n")[0]


def test_incremental_update_reads_only_changed_files(workspace):
    with open_index(workspace) as index:
        index.update()
        again = index.update()
        assert again.changed_files == 0 and again.chunked_files == 0
        calc = workspace / "src" / "calc.py"
        calc.write_text(CALC.replace("parse_config_file", "load_settings_file"))
        changed = index.update()
        assert changed.changed_files == 1
        assert index.search("load_settings_file", mode="lexical")[0].symbol == "load_settings_file"
        assert all(
            h.symbol != "parse_config_file"
            for h in index.search("parse_config_file", mode="lexical")
        )


def test_touched_file_with_same_content_is_not_rechunked(workspace):
    with open_index(workspace) as index:
        index.update()
        calc = workspace / "src" / "calc.py"
        os.utime(calc, ns=(1, 1))
        stats = index.update()
        assert stats.changed_files == 0 and stats.chunked_files == 0


def test_rename_and_duplicates_reuse_chunks_and_embeddings(workspace):
    embedder = HashingEmbedder()
    with open_index(workspace, embedder=embedder) as index:
        assert index.update().embedded > 0
        used = embedder.texts_embedded
        (workspace / "src" / "calc.py").rename(workspace / "src" / "arith.py")
        (workspace / "copy_of_app.js").write_text(APP_JS)
        stats = index.update()
        assert stats.chunked_files == 0  # both contents were chunked before
        assert stats.reused_files == 2
        assert stats.embedded == 0 and index.embed_pending() == 0
        assert embedder.texts_embedded == used  # nothing embedded again
        dense = index.search("parse config file settings dict", mode="dense")
        assert dense[0].path == "src/arith.py"
        assert index.status().state == "ready"


def test_removed_files_leave_both_indexes(workspace):
    with open_index(workspace) as index:
        index.update()
        (workspace / "web" / "app.js").unlink()
        stats = index.update()
        assert stats.removed_files == 1
        for mode in ("lexical", "dense", "hybrid"):
            assert all(
                h.path != "web/app.js"
                for h in index.search("renderWidget EventBus emit", mode=mode)
            )


def test_hybrid_uses_both_and_caps_chunks_per_file(workspace):
    many = "\n\n".join(
        f"def handler_{i}(event):\n    return dispatch(event, {i})\n" * 1 for i in range(40)
    )
    (workspace / "src" / "handlers.py").write_text(many)
    with open_index(workspace) as index:
        index.update()
        before = index.search("dispatch event handler", mode="hybrid", limit=10)
        index.embed_pending()
        hits = index.search("dispatch event handler", mode="hybrid", limit=10, per_file=2)
        assert sum(h.path == "src/handlers.py" for h in hits) <= 2
        assert before  # hybrid works lexically before any embedding exists


def test_path_filters(workspace):
    with open_index(workspace) as index:
        index.update()
        index.embed_pending()
        for mode in ("lexical", "dense", "hybrid"):
            hits = index.search("title handlers render", paths=["web"], mode=mode, limit=20)
            assert hits and all(h.path.startswith("web/") for h in hits), mode
            hits = index.search("add numbers", paths=["*.py"], mode=mode, limit=20)
            assert all(h.path.endswith(".py") for h in hits), mode


def test_symbol_named_in_query_ranks_first(workspace):
    (workspace / "src" / "other.py").write_text(
        "def unrelated():\n    # the length, length, length of a vector, vector, vector\n    return 0\n"
    )
    with open_index(workspace) as index:
        index.update()
        # bm25 and the hashing embedder both prefer the comment; a query that is
        # nothing but the name is a lookup, and the name outweighs them.
        lexical = index._lexical_reader.search("Vector.length", limit=5)
        assert index._rows([lexical[0][0]])[lexical[0][0]][4] == "unrelated"
        assert index.search("Vector.length", mode="lexical")[0].symbol == "Vector"
        assert index.search("Vector.length")[0].symbol == "Vector"
        index.embed_pending()
        assert index.search("Vector.length")[0].symbol == "Vector"
        # in a sentence the name is one word among others: a small bonus only
        assert index.search("the Vector.length", mode="lexical")[0].symbol == "unrelated"


def test_a_query_that_is_only_a_name_is_a_lookup():
    from index.search import NAME_QUERY_BONUS, NAMED_BONUS, fused_scores, named_bonus

    for query in ("Vector.length", "  parse_config_file ", "readFile", "parse"):
        assert named_bonus(query) == NAME_QUERY_BONUS, query
    for query in ("Return Vector.length", "parse the config", "Vector.length()", "a-b"):
        assert named_bonus(query) == NAMED_BONUS, query
    lexical, named = [(1, 9.0), (2, 1.0)], {2}
    assert fused_scores(lexical, [], {}, named, NAME_QUERY_BONUS)[2] == NAME_QUERY_BONUS
    assert fused_scores(lexical, [], {}, named)[2] == NAMED_BONUS


def test_hybrid_ranks_by_what_a_name_means(workspace):
    # Same bodies, names sharing no word with the query: only the meaning of the
    # names (under the static code model) tells them apart.
    body = "    for entry in os.scandir(where):\n        os.unlink(entry.path)\n"
    (workspace / "src" / "files.py").write_text(
        f"import os\n\n\ndef render_page(where):\n{body}\n\ndef cleanup_tmp_dir(where):\n{body}"
    )
    with open_index(workspace) as index:
        index.update()
        index.embed_pending()
        hits = index.search("remove temporary files", paths=["src/files.py"])
        symbols = [h.symbol for h in hits]
        assert symbols[0] == "cleanup_tmp_dir" and "render_page" in symbols


def test_vectors_persist_and_are_rebuilt_when_out_of_step(workspace):
    with open_index(workspace) as index:
        index.update()
        index.embed_pending()
        expected = [(h.path, h.start_line) for h in index.search("parse config", mode="dense")]
    assert (workspace / ".tachy" / "index" / "vectors" / "epoch").exists()
    with open_index(workspace) as index:
        assert [
            (h.path, h.start_line) for h in index.search("parse config", mode="dense")
        ] == expected
    # A crash between the database commit and the vector save: epochs differ.
    (workspace / ".tachy" / "index" / "vectors" / "epoch").write_text("-1")
    with open_index(workspace) as index:
        assert [
            (h.path, h.start_line) for h in index.search("parse config", mode="dense")
        ] == expected


def test_corrupt_database_is_detected_and_rebuilt(workspace):
    with open_index(workspace) as index:
        index.update()
    db = workspace / ".tachy" / "index" / "index.db"
    data = bytearray(db.read_bytes())
    data[100:4096] = os.urandom(3996)
    db.write_bytes(bytes(data))
    for name in ("index.db-wal", "index.db-shm"):
        (db.parent / name).unlink(missing_ok=True)
    with open_index(workspace) as index:
        assert index.rebuilt_because
        index.update()
        assert index.search("parse_config_file", mode="lexical")[0].symbol == "parse_config_file"


def test_other_schema_version_is_rebuilt(workspace):
    with open_index(workspace) as index:
        index.update()
    db = sqlite3.connect(workspace / ".tachy" / "index" / "index.db")
    db.execute("UPDATE meta SET value='999' WHERE key='schema'")
    db.commit()
    db.close()
    with open_index(workspace) as index:
        assert "another version" in index.rebuilt_because


def test_bad_files_are_skipped_with_reasons(workspace):
    (workspace / "big.log.txt").write_bytes(b"")
    with open(workspace / "big.log.txt", "r+b") as handle:  # 2 GB, sparse
        handle.truncate(2 * 1024**3)
    (workspace / "bundle.js").write_text("var a=1;" * 2000 + "\n")
    (workspace / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (workspace / "latin.py").write_bytes("name = 'café'\n".encode("latin-1"))
    (workspace / "loop_a").symlink_to("loop_b")
    (workspace / "loop_b").symlink_to("loop_a")
    (workspace / "src" / "up").symlink_to("..")
    with open_index(workspace) as index:
        stats = index.update()
        assert stats.skipped == {"oversized": 1, "generated": 1, "binary": 1}
        assert index.search("name caf", mode="lexical")[0].path == "latin.py"


def test_files_vanishing_mid_index(workspace, monkeypatch):
    for i in range(30):
        (workspace / f"mod_{i}.py").write_text(f"def function_{i}():\n    return {i}\n")
    import index.indexer as indexer_module

    real_load = indexer_module.load_file

    def vanishing(root, rel):
        if rel == "mod_7.py":
            (root / rel).unlink()
        return real_load(root, rel)

    monkeypatch.setattr(indexer_module, "load_file", vanishing)
    with open_index(workspace) as index:
        stats = index.update()
        assert stats.skipped.get("vanished") == 1
        assert not index.search("function_7", mode="lexical")


def test_empty_workspace_and_huge_or_empty_queries(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    with open_index(root) as index:
        assert index.update().files == 0
        assert index.status().state == "empty"
        assert index.search("anything") == []
        assert index.search("") == []
        assert index.search("parse " * 20_000) == []


def test_huge_query_is_bounded(workspace):
    with open_index(workspace) as index:
        index.update()
        index.embed_pending()
        hits = index.search("parse_config_file " + "x" * 100_000, mode="hybrid")
        assert hits[0].symbol == "parse_config_file"


def test_not_a_directory(tmp_path):
    with pytest.raises(CodeIndexError):
        CodeIndex(tmp_path / "missing")


def test_concurrent_writers_take_turns(workspace):
    for i in range(200):
        (workspace / f"gen_{i}.py").write_text(f"def generated_{i}(x):\n    return x * {i}\n" * 20)
    errors = []

    def run():
        try:
            with CodeIndex(workspace, dense=False) as index:
                index.update()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with CodeIndex(workspace, dense=False) as index:
        assert index.status().files == 204
        assert index.search("generated_150", mode="lexical")[0].path == "gen_150.py"


def test_killed_indexer_leaves_a_consistent_index(workspace):
    for i in range(400):
        (workspace / f"bulk_{i}.py").write_text(
            f"def bulk_{i}(value):\n    return value + {i}\n" * 30
        )
    script = (
        "import sys; from index.indexer import CodeIndex\n"
        "CodeIndex(sys.argv[1], dense=False).update(progress=lambda *a: print(*a, flush=True))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(workspace)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path.cwd(),
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # kill it in the middle of indexing
        if line.startswith("files 150"):
            proc.kill()
            break
    proc.wait()
    with CodeIndex(workspace, dense=False) as index:
        for hit in index.search("bulk value return", mode="lexical", limit=50):
            assert hit.snippet.split("\n")[0] == lines_of(workspace, hit).split("\n")[0]
        index.update()
        assert index.status().files == 404


def test_fresh_index_sees_edits_between_searches(workspace):
    fresh = FreshIndex(workspace, embedder=HashingEmbedder())
    try:
        assert fresh.search("parse_config_file", limit=3)[0].path == "src/calc.py"
        (workspace / "src" / "new_module.py").write_text("def brand_new_helper():\n    return 42\n")
        assert fresh.search("brand_new_helper", limit=3)[0].path == "src/new_module.py"
    finally:
        fresh.close()


def test_an_update_leaves_every_chunk_searchable_densely(workspace):
    with open_index(workspace) as index:
        stats = index.update()
        assert stats.embedded == stats.chunks > 0 and not stats.embed_error
        assert index.status().state == "ready" and index.pending_count() == 0
        (workspace / "src" / "calc.py").write_text(
            CALC + "\n\ndef saved_just_now():\n    return 1\n"
        )
        saved = index.update_paths(["src/calc.py"])  # a save: dense at once, no thread
        assert saved.embedded >= 1 and index.status().state == "ready"
        hits = index.search("saved_just_now", mode="dense", limit=50)
        assert any(h.symbol == "saved_just_now" for h in hits)


def test_chunks_left_without_vectors_are_embedded_by_the_next_update(workspace):
    # An update without dense search (or a process killed while embedding) leaves
    # chunks waiting; the next dense update of the same index embeds them.
    with open_index(workspace, dense=False) as index:
        chunks = index.update().chunks
    with open_index(workspace) as index:
        assert index.pending_count() == chunks and index.status().state == "lexical"
        stats = index.update()
        assert stats.changed_files == 0 and stats.embedded == chunks
        assert index.status().state == "ready"


def test_an_embedder_that_cannot_load_leaves_the_index_lexical(workspace, monkeypatch):
    from index import embedder as embedders

    def broken(kind):
        raise embedders.EmbedderError("embedding model: /nowhere/model.safetensors is missing")

    monkeypatch.setattr(embedders, "shared_embedder", broken)
    with open_index(workspace, embedder="static") as index:
        stats = index.update()
        assert "is missing" in stats.embed_error and stats.embedded == 0
        assert index.status().state == "lexical"
        assert index.search("parse_config_file", mode="lexical")[0].path == "src/calc.py"


def test_unreadable_files_are_skipped(workspace, monkeypatch):
    from index import beneath

    real_open = beneath.open_file

    def guarded(root, rel, *args, **kwargs):  # root reads anything: refuse by hand
        if str(rel).endswith("app.js"):
            raise PermissionError(13, "Permission denied")
        return real_open(root, rel, *args, **kwargs)

    monkeypatch.setattr(beneath, "open_file", guarded)
    with open_index(workspace) as index:
        stats = index.update()
        assert stats.skipped == {"unreadable: Permission denied": 1}
        assert stats.files == 3


def test_damage_found_in_use_is_rebuilt_on_next_open(workspace):
    with open_index(workspace) as index:
        index.update()
        index.mark_damaged(sqlite3.DatabaseError("database disk image is malformed"))
    with open_index(workspace) as index:
        assert "malformed" in index.rebuilt_because
        assert index.update().files == 4


def test_unclean_shutdown_runs_the_integrity_check(workspace, monkeypatch):
    index = open_index(workspace)
    index.update()
    index._conn.close()  # as if the process died: 'clean' stays 0
    checks = []
    real_connect = sqlite3.connect

    class Spy:
        def __init__(self, conn):
            self.conn = conn

        def execute(self, sql, *args):
            if "quick_check" in sql:
                checks.append(sql)
            return self.conn.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.conn, name)

    monkeypatch.setattr("index.indexer.sqlite3.connect", lambda *a, **k: Spy(real_connect(*a, **k)))
    with open_index(workspace):
        pass
    assert len(checks) == 1
    with open_index(workspace):
        pass
    assert len(checks) == 1  # closed cleanly the last time: no full check


def test_caches_of_vanished_contents_are_bounded(workspace, monkeypatch):
    monkeypatch.setattr("index.indexer.GC_MIN_ORPHANS", 0)
    with open_index(workspace) as index:
        index.update()
        index.embed_pending()
        calc = workspace / "src" / "calc.py"
        for version in range(8):  # eight saves: eight contents no file has any more
            calc.write_text(CALC + f"\n\ndef version_{version}():\n    return {version}\n")
            index.update()
        blobs = index._read("SELECT COUNT(DISTINCT hash) FROM blobs")[0][0]
        assert blobs <= 2 * index.status().files + 1
        assert index.search("version_7", mode="lexical")[0].symbol == "version_7"


def test_two_threads_updating_at_once_embed_each_chunk_once(workspace):
    # The editor's indexing thread and an agent's search both update the index.
    class SlowEmbedder(HashingEmbedder):
        def embed(self, texts):
            time.sleep(0.3)  # long enough for the other thread to arrive meanwhile
            return super().embed(texts)

    embedder = SlowEmbedder()
    with open_index(workspace, embedder=embedder) as index:
        index.update()
        before = embedder.texts_embedded
        (workspace / "src" / "late.py").write_text(
            "".join(f"def late_{i}():\n    return {i}\n\n\n" for i in range(3))
        )
        stats: list = []
        threads = [threading.Thread(target=lambda: stats.append(index.update())) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        new = len(index._read("SELECT id FROM chunks WHERE path='src/late.py'"))
        assert new >= 3 and embedder.texts_embedded - before == new
        assert sorted(s.embedded for s in stats) == [0, new] and index.pending_count() == 0


def test_only_changed_chunks_are_embedded_again(workspace):
    with open_index(workspace) as index:
        stats = index.update()
        assert stats.embedded == index.status().chunks and index.pending_count() == 0
        (workspace / "web" / "app.js").write_text(APP_JS + "\nexport const answer = 42;\n")
        saved = index.update_paths(["web/app.js"])
        app_chunks = len(index._read("SELECT id FROM chunks WHERE path='web/app.js'"))
        # Only the new code is embedded: the file's unchanged functions keep their vectors.
        assert app_chunks > 1 and saved.embedded == 1 and index.pending_count() == 0
    other = HashingEmbedder()
    other.name = "test-hashing-other"
    with open_index(workspace, embedder=other) as index:  # another model: all wait again
        index.embed_pending(limit=1)
        assert index.pending_count() == index.status().chunks - 1
        assert index.update().embedded == index.status().chunks - 1


# ---------------------------------------------------------------- unsaved editor text


def found(index: CodeIndex, query: str) -> set[tuple[str, str]]:
    """(path, symbol) of the chunks a lexical search finds."""
    return {(h.path, h.symbol) for h in index.search(query, mode="lexical", limit=50)}


def test_unsaved_text_wins_over_disk_in_search(workspace):
    with open_index(workspace, dense=False) as index:
        index.update()
        edited = CALC.replace("parse_config_file", "read_settings_file").encode()
        stats = index.update_texts({"src/calc.py": edited})
        assert stats.changed_files == 1
        top = index.search("read_settings_file", mode="lexical")[0]
        assert (top.path, top.symbol) == ("src/calc.py", "read_settings_file")
        assert "def read_settings_file(path):" in top.snippet
        assert ("src/calc.py", "parse_config_file") not in found(index, "parse_config_file")
        # A full scan keeps the unsaved text: the disk version does not come back.
        index.update()
        assert ("src/calc.py", "parse_config_file") not in found(index, "parse_config_file")
        assert ("src/calc.py", "read_settings_file") in found(index, "read_settings_file")


def test_dropping_unsaved_text_restores_the_disk_version(workspace):
    with open_index(workspace, dense=False) as index:
        index.update()
        calc = CALC.replace("parse_config_file", "read_settings_file").encode()
        app = APP_JS.replace("renderWidget", "paintWidget").encode()
        index.update_texts({"src/calc.py": calc, "web/app.js": app})
        # Closed without saving: the fast path re-reads the disk.
        stats = index.update_texts({"src/calc.py": None})
        assert stats.changed_files == 1 and stats.reused_files == 1  # disk chunks cached
        assert ("src/calc.py", "parse_config_file") in found(index, "parse_config_file")
        assert ("src/calc.py", "read_settings_file") not in found(index, "read_settings_file")
        # Dropped with set_overlay alone: the next full scan finds the disk version.
        index.set_overlay("web/app.js", None)
        assert index.update().changed_files == 1
        assert ("web/app.js", "renderWidget") in found(index, "renderWidget")
        assert ("web/app.js", "paintWidget") not in found(index, "paintWidget")
        assert index.update().changed_files == 0  # and then it is settled


def test_unchanged_unsaved_text_is_not_rechunked(workspace):
    with open_index(workspace, dense=False) as index:
        index.update()
        index.set_overlay("src/calc.py", (CALC + "\ndef unsaved_helper():\n    pass\n").encode())
        first = index.update()
        assert first.changed_files == 1 and first.chunked_files == 1
        again = index.update()
        assert again.changed_files == 0 and again.chunked_files == 0
        assert index.update_paths(["src/calc.py"]).changed_files == 0
        assert ("src/calc.py", "unsaved_helper") in found(index, "unsaved_helper")
        # Unsaved text equal to the disk's changes nothing either.
        index.set_overlay("web/app.js", APP_JS.encode())
        assert index.update().changed_files == 0
        index.set_overlay("web/app.js", None)
        assert index.update().changed_files == 0


def test_new_unsaved_file_is_indexed_and_goes_with_its_buffer(workspace):
    draft = ("src/new/draft.py", "draft_only_function")
    with open_index(workspace, dense=False) as index:
        index.update()
        text = b"def draft_only_function():\n    return 'not saved yet'\n"
        stats = index.update_texts({"src/new/draft.py": text})
        assert stats.changed_files == 1 and stats.files == 5
        assert draft in found(index, "draft_only_function")
        index.update()  # the file is not on disk, and is not gone while unsaved
        assert draft in found(index, "draft_only_function")
        stats = index.update_texts({"src/new/draft.py": None})
        assert stats.removed_files == 1 and stats.files == 4
        assert draft not in found(index, "draft_only_function")
        index.set_overlay("src/new/draft.py", text)
        index.update()
        index.set_overlay("src/new/draft.py", None)
        assert index.update().removed_files == 1


def test_ignored_or_secret_unsaved_text_is_never_indexed(workspace):
    texts = {
        "build/gen.py": b"def hidden_marker_one():\n    pass\n",  # ignored directory
        "debug.log": b"hidden_marker_two\n",  # ignored pattern
        "notes.log": b"hidden_marker_three\n",  # ignored, not on disk
        ".env": b"hidden_marker_four=1\n",  # a secret
        "src/.env.local": b"hidden_marker_five=1\n",  # a secret, not on disk
        ".tachy/index/x.py": b"hidden_marker_six = 1\n",  # always hidden
        "../outside.py": b"hidden_marker_seven = 1\n",  # outside the workspace
        "src": b"hidden_marker_eight = 1\n",  # a directory
    }
    with open_index(workspace, dense=False) as index:
        index.update()
        stats = index.update_texts(texts)
        assert stats.changed_files == 0 and stats.files == 4
        index.update()
        hits = index.search("hidden_marker", mode="lexical", limit=50)
        assert not [h for h in hits if "hidden_marker" in h.snippet]
        assert index.status().files == 4


def test_binary_unsaved_text_is_skipped(workspace):
    calc = ("src/calc.py", "parse_config_file")
    with open_index(workspace, dense=False) as index:
        index.update()
        stats = index.update_texts({"src/calc.py": b"def f():\x00\x01\x02 binary\n"})
        assert stats.skipped == {"binary": 1} and stats.removed_files == 1
        assert calc not in found(index, "parse_config_file")
        assert index.update().changed_files == 0  # still binary, still skipped
        assert calc not in found(index, "parse_config_file")
        index.update_texts({"src/calc.py": b"x" * (2 * 1024 * 1024)})
        assert index.update().skipped.get("oversized") == 1
        index.update_texts({"src/calc.py": None})
        assert calc in found(index, "parse_config_file")


def test_unsaved_text_is_read_here_when_workers_read_the_disk(workspace, monkeypatch):
    monkeypatch.setattr("index.indexer.PARALLEL_ABOVE_FILES", 2)
    for i in range(4):
        (workspace / f"mod_{i}.py").write_text(f"def saved_{i}():\n    return {i}\n")
    with open_index(workspace, dense=False) as index:
        index.set_overlay("mod_1.py", b"def unsaved_one():\n    return 1\n")
        index.update()
        assert ("mod_1.py", "unsaved_one") in found(index, "unsaved_one")
        assert ("mod_1.py", "saved_1") not in found(index, "saved_1")
        assert ("mod_2.py", "saved_2") in found(index, "saved_2")


def test_unsaved_text_must_be_bytes(workspace):
    with open_index(workspace, dense=False) as index, pytest.raises(TypeError, match="bytes"):
        index.set_overlay("src/calc.py", "text")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- symbols

RANKED = """def parse():
    return 1


def do_parse():
    return 2


def prepare_settings():
    return 3


def parse_config():
    return 4


def unrelated():
    return 5
"""

METHOD_BODY = "".join(
    f"        total += {i} * value  # keeps the method long enough to split the class\n"
    for i in range(20)
)
# Too long for one chunk: the class is split into its methods, and they into pieces.
SETTINGS = (
    'class Settings:\n    """Holds the settings."""\n\n'
    f"    def __init__(self, value):\n        total = 0\n{METHOD_BODY}        self.total = total\n\n"
    f"    def parse_value(self, value):\n        total = 0\n{METHOD_BODY}        return total\n"
)


def test_symbols_rank_exact_prefix_substring_subsequence(workspace):
    (workspace / "src" / "ranked.py").write_text(RANKED)
    with open_index(workspace, dense=False) as index:
        index.update()
        hits = index.symbols("parse")
        assert [(h.path, h.name) for h in hits] == [
            ("src/ranked.py", "parse"),  # exact
            ("src/ranked.py", "parse_config"),  # prefixes, the shorter first
            ("src/calc.py", "parse_config_file"),
            ("src/ranked.py", "do_parse"),  # substring
            ("src/ranked.py", "prepare_settings"),  # subsequence
        ]
        assert [h.name for h in index.symbols("PARSE")][:2] == ["parse", "parse_config"]
        assert {h.name for h in index.symbols("prsCfg")} == {"parse_config", "parse_config_file"}
        assert index.symbols("no_such_symbol_anywhere") == []
        assert index.symbols("   ") == index.symbols("")  # blank is empty


def test_symbols_report_a_method_in_a_class(workspace):
    (workspace / "src" / "settings.py").write_text(SETTINGS)
    lines = SETTINGS.split("\n")
    with open_index(workspace, dense=False) as index:
        index.update()
        (method,) = index.symbols("parse_value")
        assert (method.path, method.name, method.container, method.kind) == (
            "src/settings.py",
            "parse_value",
            "Settings",
            "method",
        )
        assert lines[method.start_line - 1] == "    def parse_value(self, value):"
        assert lines[method.end_line - 1] == "        return total"
        (cls,) = index.symbols("Settings")
        assert (cls.name, cls.container, cls.kind, cls.start_line) == ("Settings", "", "class", 1)
        assert cls.end_line == method.end_line  # the class holds its methods
        (init,) = index.symbols("__init__")
        assert init.container == "Settings" and init.end_line < method.start_line
        assert [h.name for h in index.symbols("Settings.parse")] == ["parse_value"]
        js = {h.name: h for h in index.symbols("render")}
        assert js["renderWidget"].kind == "function" and js["renderWidget"].start_line == 1


def test_symbols_limit_and_empty_query(workspace):
    for i in range(30):
        (workspace / f"mod_{i:02}.py").write_text(
            f"def helper_{i}():\n    return {i}\n\n\ndef other_{i}():\n    return 0\n"
        )
    with open_index(workspace, dense=False) as index:
        index.update()
        first = index.symbols("", limit=5)
        assert [(h.path, h.name) for h in first] == [
            ("mod_00.py", "helper_0"),
            ("mod_00.py", "other_0"),
            ("mod_01.py", "helper_1"),
            ("mod_01.py", "other_1"),
            ("mod_02.py", "helper_2"),
        ]
        everything = index.symbols("", limit=1000)
        assert len(everything) == 60 + 5  # calc.py: 3 definitions; app.js: 2
        assert everything == sorted(everything, key=lambda h: (h.path, h.start_line))
        assert len(index.symbols("helper", limit=7)) == 7
        assert len(index.symbols("helper")) == 30
        assert index.symbols("helper", limit=0) == []
        assert [h.name for h in index.symbols("helper_1", limit=2)] == ["helper_1", "helper_10"]


BROAD = (
    "def ab():\n    pass\n\n\ndef tab():\n    pass\n\n\ndef stable():\n    pass\n\n\n"
    "def a_b():\n    pass\n\n\ndef Abc():\n    pass\n\n\n"
    # Its container starts with "ab" and its name holds "ab": the prefix stage finds it
    # on the way, and it must not count before the shorter substrings.
    f"class Abacus:\n    def total_writable(self, value):\n        total = 0\n{METHOD_BODY}"
    "        return total\n\n"
    f"    def count(self, value):\n        total = 0\n{METHOD_BODY}        return total\n"
)


def test_broad_symbol_queries_rank_like_narrow_ones(workspace, monkeypatch):
    (workspace / "src" / "ranked.py").write_text(RANKED)
    (workspace / "src" / "broad.py").write_text(BROAD)
    with open_index(workspace, dense=False) as index:
        index.update()
        queries = ["ab", "Ab", "a", "t", "ta", "parse", "p_s", "dp", "Abacus.c", "xyz"]
        narrow = {(q, n): index.symbols(q, limit=n) for q in queries for n in range(1, 12)}
        monkeypatch.setattr("index.indexer.SYMBOL_SCAN_ROWS", 2)  # every query is broad
        for (query, limit), hits in narrow.items():
            assert index.symbols(query, limit=limit) == hits, (query, limit)
        assert [h.name for h in index.symbols("ab")] == [
            "ab",  # exact
            "Abc",  # prefix
            "tab",  # substrings, the shorter first
            "stable",
            "total_writable",
            "a_b",  # subsequences: after every substring, however short
            "add_numbers",
        ]
        assert [h.name for h in index.symbols("Abacus.c")] == ["count"]


def test_symbols_follow_unsaved_text(workspace):
    with open_index(workspace, dense=False) as index:
        index.update()
        index.update_texts({"src/calc.py": CALC.replace("add_numbers", "sum_numbers").encode()})
        assert [h.name for h in index.symbols("sum_numbers")] == ["sum_numbers"]
        assert index.symbols("add_numbers") == []


def test_symbol_indexes_are_added_to_older_databases(workspace):
    names = ("blobs_by_symbol", "blobs_by_name_length")
    with open_index(workspace, dense=False) as index:
        index.update()
        with index._lock:
            for name in names:
                index._conn.execute(f"DROP INDEX {name}")
    with open_index(workspace, dense=False) as index:
        found = index._read("SELECT name FROM sqlite_master WHERE type='index'")
        assert set(names) <= {name for (name,) in found}
        assert [h.name for h in index.symbols("add_numbers")] == ["add_numbers"]
