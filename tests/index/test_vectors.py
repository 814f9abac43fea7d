"""The faiss vector store: exactness, IVF recall, remove/replace, compaction, persistence."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import index.vectors as vectors_mod
from index.vectors import VectorStore, VectorStoreError, recall_at_k

DIM = 32


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def random_vectors(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal((n, dim)))


def clustered(n: int, dim: int, clusters: int, spread: float, seed: int) -> np.ndarray:
    """Unit vectors around `clusters` centres; `spread` ~ norm of the noise."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((clusters, dim)))
    labels = rng.integers(0, clusters, n)
    noise = rng.standard_normal((n, dim)).astype(np.float32) * (spread / np.sqrt(dim))
    return unit(centres[labels] + noise)


def brute_force(live: dict[int, np.ndarray], query: np.ndarray, k: int) -> list[int]:
    ids = sorted(live)
    if not ids:
        return []
    scores = np.stack([live[i] for i in ids]) @ query
    order = sorted(range(len(ids)), key=lambda j: (-scores[j], ids[j]))
    return [ids[j] for j in order[:k]]


def result_ids(store: VectorStore, query: np.ndarray, k: int) -> list[int]:
    return [i for i, _ in store.search(query, k)]


def test_flat_top_k_is_exact_across_main_and_delta() -> None:
    x = random_vectors(3000)
    ids = np.random.default_rng(1).choice(10**12, size=3000, replace=False).astype(np.int64)
    store = VectorStore(DIM)
    store.add(ids[:2000], x[:2000])
    store.compact()  # main: 2000, delta: 1000
    store.add(ids[2000:], x[2000:])
    assert store.kind == "flat" and len(store) == 3000
    live = dict(zip(ids.tolist(), x, strict=True))
    for q in random_vectors(25, seed=2):
        got = store.search(q, 10)
        assert [i for i, _ in got] == brute_force(live, q, 10)
        np.testing.assert_allclose([s for _, s in got], [live[i] @ q for i, _ in got], rtol=1e-5)
        assert all(a[1] >= b[1] for a, b in itertools.pairwise(got))


def test_query_shapes_and_small_k() -> None:
    store = VectorStore(DIM)
    assert store.search(random_vectors(1)[0], 5) == []  # empty store
    x = random_vectors(5)
    store.add(np.arange(5), x)
    assert store.search(x[0], 0) == []
    assert len(store.search(x[0], 50)) == 5
    assert store.search(x[0], 3) == store.search(x[0][None, :], 3)
    assert store.search(x[0], 1)[0][0] == 0
    with pytest.raises(ValueError):
        store.search(np.zeros(DIM + 1, np.float32), 3)
    with pytest.raises(ValueError):
        store.add(np.arange(2), random_vectors(2, dim=DIM + 1))
    with pytest.raises(ValueError):
        store.add(np.array([-1]), random_vectors(1))
    with pytest.raises(ValueError):
        store.add(np.array([7]), np.full((1, DIM), np.nan, np.float32))


def test_remove_is_never_returned() -> None:
    x = random_vectors(400)
    store = VectorStore(DIM)
    store.add(np.arange(300), x[:300])
    store.compact()
    store.add(np.arange(300, 400), x[300:])
    removed = {*range(0, 400, 3)}  # from main (tombstones) and from the delta
    store.remove(removed)
    store.remove([10**9])  # unknown: ignored
    live = {i: x[i] for i in range(400) if i not in removed}

    def check() -> None:
        assert len(store) == len(live)
        for i in range(400):
            assert (i in store) == (i in live)
        for i in range(0, 400, 7):
            got = result_ids(store, x[i], 20)  # the removed vector itself is the best match
            assert not removed & set(got)
            assert got == brute_force(live, x[i], 20)

    check()
    store.compact()
    assert store.stats()["tombstones"] == 0
    check()
    # re-added, then removed again: still gone, before and after compaction
    store.add(np.array([0, 3]), x[[0, 3]])
    live[0], live[3] = x[0], x[3]
    removed -= {0, 3}
    assert result_ids(store, x[3], 1) == [3]
    check()
    store.compact()
    store.remove([0, 3])
    del live[0], live[3]
    removed |= {0, 3}
    check()
    store.compact()
    check()


def test_many_tombstones_on_top_still_give_k_results() -> None:
    """The best 200 matches are all removed: search must over-fetch past them."""
    rng = np.random.default_rng(3)
    base = unit(rng.standard_normal(DIM))
    near = unit(base + rng.standard_normal((200, DIM)).astype(np.float32) * 0.01)
    far = random_vectors(1000, seed=4)
    store = VectorStore(DIM)
    store.add(np.arange(200), near)
    store.add(np.arange(1000, 2000), far)
    store.compact()
    store.remove(range(200))
    live = {1000 + i: v for i, v in enumerate(far)}
    assert result_ids(store, base, 10) == brute_force(live, base, 10)


def test_re_add_replaces() -> None:
    x = random_vectors(50)
    v1, v2 = x[0], x[1]
    store = VectorStore(DIM)
    store.add(np.arange(2, 50), x[2:])
    store.add(np.array([7]), v1[None, :])  # replaces id 7
    got = store.search(v1, 50)
    assert got[0][0] == 7 and got[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [i for i, _ in got].count(7) == 1
    store.compact()
    store.add(np.array([7]), v2[None, :])  # replaces id 7 held in main
    for q in (v1, v2, x[7]):
        ids = result_ids(store, q, 50)
        assert ids.count(7) == 1 and len(ids) == 48
    hit = dict(store.search(v1, 50))[7]
    assert hit == pytest.approx(float(v1 @ v2), abs=1e-5)
    assert result_ids(store, v2, 1) == [7]
    # a repeated id within one add: the last row wins
    store.add(np.array([9, 9]), np.stack([v1, v2]))
    assert len(store) == 48 and dict(store.search(v2, 2)).keys() == {7, 9}


def test_ivf_recall_and_removal() -> None:
    dim, n = 64, 60_000
    x = clustered(n, dim, clusters=300, spread=1.0, seed=5)  # cos to centre ~0.7
    store = VectorStore(dim, ivf_threshold=20_000)
    store.add(np.arange(n), x)
    assert store.needs_compaction()
    store.compact()
    stats = store.stats()
    assert stats["kind"] == "ivf" and stats["nlist"] > 100 and 1 <= stats["nprobe"] < stats["nlist"]
    rng = np.random.default_rng(6)
    sources = x[rng.integers(0, n, 200)]
    queries = unit(sources + rng.standard_normal((200, dim)).astype(np.float32) * (0.6 / 8))
    truth = np.argsort(-(queries @ x.T), axis=1)[:, :10]
    found = np.array([result_ids(store, q, 10) for q in queries])
    assert recall_at_k(found, truth) >= 0.95
    # removal in IVF: never returned, before and after compaction
    removed = set(truth[:20].ravel().tolist())
    store.remove(removed)
    for q in queries[:20]:
        assert not removed & set(result_ids(store, q, 10))
    store.compact()
    assert store.kind == "ivf" and len(store) == n - len(removed)
    for q in queries[:20]:
        assert not removed & set(result_ids(store, q, 10))


def test_kind_follows_size() -> None:
    x = random_vectors(1200)
    store = VectorStore(DIM, ivf_threshold=1000, delta_limit=100)
    assert not store.needs_compaction()
    store.add(np.arange(500), x[:500])
    assert store.needs_compaction()  # delta over its limit
    store.compact()
    assert store.kind == "flat" and not store.needs_compaction()
    store.add(np.arange(500, 1200), x[500:])
    store.compact()
    assert store.kind == "ivf" and not store.needs_compaction()
    store.remove(range(800))  # below half the threshold: back to exact search
    assert store.needs_compaction()
    store.compact()
    assert store.kind == "flat" and len(store) == 400
    live = {i: x[i] for i in range(800, 1200)}
    assert result_ids(store, x[900], 10) == brute_force(live, x[900], 10)


# --- persistence --------------------------------------------------------------------


def _populated(kind: str) -> tuple[VectorStore, np.ndarray]:
    if kind == "ivf":
        x = clustered(5000, DIM, clusters=40, spread=0.8, seed=7)
        store = VectorStore(DIM, ivf_threshold=2000)
    else:
        x = random_vectors(3000, seed=7)
        store = VectorStore(DIM)
    store.add(np.arange(len(x) - 500), x[:-500])
    store.compact()
    store.add(np.arange(len(x) - 500, len(x)), x[-500:])  # a delta
    store.remove(range(0, len(x), 11))  # tombstones and delta removals
    store.add(np.array([1]), x[2:3])  # a replacement
    assert store.kind == kind
    return store, x


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_save_load_round_trip(tmp_path: Path, kind: str) -> None:
    store, x = _populated(kind)
    store.save(tmp_path / "vec")
    loaded = VectorStore.load(tmp_path / "vec", DIM)
    assert loaded.stats() == store.stats()
    assert len(loaded) == len(store)
    assert np.array_equal(loaded.ids(), store.ids())
    for q in x[::97]:
        assert loaded.search(q, 10) == store.search(q, 10)
    # and it keeps working: compact, save again over the old one
    loaded.compact()
    loaded.save(tmp_path / "vec")
    again = VectorStore.load(tmp_path / "vec", DIM)
    for q in x[::97]:
        assert again.search(q, 10) == store.search(q, 10)
    (tmp_path / "vec" / "epoch.tmp").write_text("someone else's")
    loaded.save(tmp_path / "vec")
    names = sorted(p.name for p in (tmp_path / "vec").iterdir())
    assert len(names) == 5 and "epoch.tmp" in names, names  # old generations cleaned up


def test_save_rewrites_main_only_when_it_changed(tmp_path: Path) -> None:
    store, x = _populated("flat")
    directory = tmp_path / "vec"
    store.save(directory)
    first = _file(directory, "main")
    store.add(np.array([10**6]), x[:1])
    store.remove([5])
    store.save(directory)  # only the delta and the tombstones changed
    assert _file(directory, "main") == first
    loaded = VectorStore.load(directory, DIM)
    assert 10**6 in loaded and 5 not in loaded and len(loaded) == len(store)
    loaded.save(directory)
    assert _file(directory, "main") == first
    loaded.compact()
    loaded.save(directory)
    assert _file(directory, "main") != first and not first.exists()
    again = VectorStore.load(directory, DIM)
    for q in x[::101]:
        assert again.search(q, 10) == store.search(q, 10)


def _saved(tmp_path: Path) -> Path:
    store, _ = _populated("flat")
    store.save(tmp_path / "vec")
    return tmp_path / "vec"


def _file(directory: Path, key: str) -> Path:
    manifest = json.loads((directory / "manifest.json").read_text())
    return directory / manifest["files"][key]["name"]


def test_load_missing(tmp_path: Path) -> None:
    with pytest.raises(VectorStoreError, match="missing"):
        VectorStore.load(tmp_path / "nothing", DIM)
    directory = _saved(tmp_path)
    _file(directory, "tombstones").unlink()
    with pytest.raises(VectorStoreError, match="missing"):
        VectorStore.load(directory, DIM)


@pytest.mark.parametrize("key", ["main", "delta", "tombstones"])
def test_load_truncated(tmp_path: Path, key: str) -> None:
    directory = _saved(tmp_path)
    path = _file(directory, key)
    path.write_bytes(path.read_bytes()[:-9])
    with pytest.raises(VectorStoreError, match="truncated"):
        VectorStore.load(directory, DIM)


def test_load_garbage(tmp_path: Path) -> None:
    directory = _saved(tmp_path)
    path = _file(directory, "main")
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = np.random.default_rng(0).bytes(64)
    path.write_bytes(bytes(data))  # same size, different bytes
    with pytest.raises(VectorStoreError, match="corrupt"):
        VectorStore.load(directory, DIM)
    (directory / "manifest.json").write_bytes(b"\x00\xffgarbage")
    with pytest.raises(VectorStoreError):
        VectorStore.load(directory, DIM)
    (directory / "manifest.json").write_text('{"format": 1, "dim": 32}')
    with pytest.raises(VectorStoreError, match="malformed"):
        VectorStore.load(directory, DIM)


def test_load_mismatch(tmp_path: Path) -> None:
    directory = _saved(tmp_path)
    with pytest.raises(VectorStoreError, match="64-d expected"):
        VectorStore.load(directory, 64)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["format"] = 99
    (directory / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(VectorStoreError, match="format"):
        VectorStore.load(directory, DIM)
    manifest["format"] = 1
    manifest["counts"]["main"] += 1  # manifest and data disagree
    (directory / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(VectorStoreError, match="inconsistent"):
        VectorStore.load(directory, DIM)


def test_interrupted_save_leaves_the_old_store(tmp_path: Path, monkeypatch) -> None:
    store, x = _populated("flat")
    directory = tmp_path / "vec"
    store.save(directory)
    before = [store.search(q, 5) for q in x[:20]]
    store.add(np.arange(10_000, 10_100), random_vectors(100, seed=9))

    original = vectors_mod._write_file
    calls = []

    def write_then_crash(path, write):
        calls.append(path.name)
        if path.name == "manifest.json":
            write(path.with_name(path.name + ".tmp"))  # a half-done manifest write
            raise OSError("killed")
        return original(path, write)

    monkeypatch.setattr(vectors_mod, "_write_file", write_then_crash)
    with pytest.raises(OSError):
        store.save(directory)
    assert "manifest.json" in calls
    loaded = VectorStore.load(directory, DIM)  # the old generation, intact
    assert [loaded.search(q, 5) for q in x[:20]] == before


# --- concurrency --------------------------------------------------------------------


def test_changes_during_compaction_are_kept(monkeypatch) -> None:
    """Adds, replaces and removes that land while compact() builds its new main segment."""
    x = random_vectors(700, seed=10)
    store = VectorStore(DIM)
    store.add(np.arange(300), x[:300])
    store.compact()  # main: 0..299
    store.add(np.arange(300, 400), x[300:400])  # delta: 300..399, folded by the next compact
    store.remove([0, 1])  # tombstones in the snapshot

    started, release = threading.Event(), threading.Event()
    real = vectors_mod._faiss()

    class Paused:
        def __getattr__(self, name):
            return getattr(real, name)

        def clone_index(self, index):
            started.set()
            assert release.wait(10)
            return real.clone_index(index)

    monkeypatch.setattr(vectors_mod, "_faiss", lambda: Paused())
    worker = threading.Thread(target=store.compact)
    worker.start()
    assert started.wait(10)
    live = {i: x[i] for i in range(2, 400)}
    store.remove([5, 305])  # in main / in the folded delta
    del live[5], live[305]
    store.add(np.array([6, 306]), x[[600, 601]])  # replace in main / in the folded delta
    live[6], live[306] = x[600], x[601]
    store.add(np.array([1, 500]), x[[602, 500]])  # re-add a tombstoned id; a new one
    live[1], live[500] = x[602], x[500]
    assert len(store) == len(live)  # searches and reads work meanwhile
    assert result_ids(store, x[600], 1) == [6]
    release.set()
    worker.join(10)
    assert not worker.is_alive()
    assert len(store) == len(live) and np.array_equal(store.ids(), sorted(live))
    for q in [*x[[5, 6, 305, 306, 1, 500, 600, 601, 602]], *random_vectors(10, seed=11)]:
        assert result_ids(store, q, 15) == brute_force(live, q, 15)
    monkeypatch.undo()
    store.compact()
    for q in x[[5, 6, 305, 306, 600, 601]]:
        assert result_ids(store, q, 15) == brute_force(live, q, 15)


def test_concurrent_add_remove_search_compact() -> None:
    store = VectorStore(DIM, ivf_threshold=3000, delta_limit=100)
    x = random_vectors(6000, seed=12)
    errors: list[BaseException] = []
    stop = threading.Event()
    removed_below = [0]  # every id % 5 == 0 under this has been removed
    counts = {"search": 0, "compact": 0}

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                stop.set()

        return run

    def writer():
        for start in range(0, 6000, 50):
            store.add(np.arange(start, start + 50), x[start : start + 50])
            store.remove(range(start, start + 50, 5))
            removed_below[0] = start + 50
            time.sleep(0.001)
        stop.set()

    def searcher():
        rng = np.random.default_rng()
        while not stop.is_set():
            below = removed_below[0]
            for i, _ in store.search(x[rng.integers(6000)], 10):
                assert i % 5 != 0 or i >= below  # removed ids never come back
            counts["search"] += 1

    def compactor():
        while not stop.is_set():
            if store.needs_compaction():
                store.compact()
                counts["compact"] += 1
            time.sleep(0.001)

    threads = [threading.Thread(target=guard(f)) for f in (writer, searcher, searcher, compactor)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert counts["compact"] >= 3 and counts["search"] >= 10, counts
    assert len(store) == 6000 - 1200
    store.compact()
    assert store.kind == "ivf" and len(store) == 4800
    assert not any(i % 5 == 0 for i in store.ids().tolist())
