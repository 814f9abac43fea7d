"""The faiss vector store: add/remove by id, flat or IVF, a delta segment and tombstones.

Vectors are L2-normalised float32 rows keyed by int64 chunk ids; scores are inner
products (= cosine). The store has two segments:

- **main**: an exact `IndexFlatIP` (wrapped in `IndexIDMap2`) while the store is small,
  an `IndexIVFFlat` (inner product, spherical k-means, nlist ~ 4*sqrt(n), nprobe tuned
  at build time for recall@10 >= 0.95 against exact search; it keeps ids itself) above
  `ivf_threshold`. It is never modified in place: `compact()` builds a new one and
  swaps it in, so searches run on it without holding the lock.
- **delta**: a small exact `IndexFlatIP` (in `IndexIDMap2`) that takes every add.

A removed id is deleted from the delta at once; a removed or replaced id whose copy
lies in main is *tombstoned*: searches over-fetch from main and drop tombstoned ids
(k + tombstones at most, so the answer is exact), and `compact()` folds the delta
into main and drops the dead vectors for good. HNSW is not used: it cannot delete.

Concurrency: one lock guards the state; `compact()` and `save()` take a snapshot under
it, do their slow work (k-means, copying, writing) outside it, and `compact()` swaps
its result in under the lock, replaying what changed meanwhile. So searches and adds
from other threads never wait for a compaction.

On disk (`save`/`load`): generation-named files (main, delta, tombstones) plus a
`manifest.json` (format version, dim, kind, counts, nprobe, size and CRC32 of every
file) that is replaced atomically last; a crash at any point leaves the old store or
the new one. A main file unchanged since the last save is kept, not written again, so
saving after a few edits costs milliseconds. `load` checks every file against the manifest before faiss reads it and
raises `VectorStoreError` on anything missing, corrupt or mismatched.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMAT_VERSION", "VectorStore", "VectorStoreError"]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
RECALL_TARGET = 0.96  # on synthetic queries (see _synthetic_queries), for >= 0.95 in use
_FILE_PREFIXES = ("main-", "delta-", "tombstones-")


class VectorStoreError(RuntimeError):
    """A saved vector store is missing, corrupt, or does not match what was asked for."""


def _faiss() -> Any:
    import faiss

    return faiss


def _new_flat(dim: int) -> Any:
    faiss = _faiss()
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))


def _flat_contents(index: Any) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of an IndexIDMap2(IndexFlatIP), copied."""
    faiss = _faiss()
    n = index.ntotal
    if n == 0:
        return np.zeros(0, np.int64), np.zeros((0, index.d), np.float32)
    inner = faiss.downcast_index(index.index)
    vecs = faiss.rev_swig_ptr(inner.get_xb(), n * index.d).reshape(n, index.d).copy()
    return faiss.vector_to_array(index.id_map).astype(np.int64), vecs


def _ivf_contents(index: Any, *, vectors: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """(ids, vectors) of an IndexIVFFlat, copied list by list."""
    faiss = _faiss()
    invlists = index.invlists
    ids: list[np.ndarray] = []
    vecs: list[np.ndarray] = []
    for lst in range(index.nlist):
        size = invlists.list_size(lst)
        if size == 0:
            continue
        ids.append(faiss.rev_swig_ptr(invlists.get_ids(lst), size).copy())
        if vectors:
            codes = faiss.rev_swig_ptr(invlists.get_codes(lst), size * invlists.code_size)
            vecs.append(codes.copy().view(np.float32).reshape(size, index.d))
    all_ids = np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, np.int64)
    if not vectors:
        return all_ids, None
    all_vecs = np.concatenate(vecs) if vecs else np.zeros((0, index.d), np.float32)
    return all_ids, all_vecs


def _main_ids(index: Any, kind: str) -> np.ndarray:
    if kind == "flat":
        return _faiss().vector_to_array(index.id_map).astype(np.int64)
    return _ivf_contents(index, vectors=False)[0]


def ivf_nlist(n: int) -> int:
    """~4*sqrt(n) lists, but at least 39 training points per list (faiss's minimum)."""
    return max(1, min(round(4 * math.sqrt(n)), n // 39))


def _synthetic_queries(vectors: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """Stand-ins for real queries, to tune nprobe: half are data points drowned in noise
    (cos ~0.3 to their source), half the normalised mean of 8 random data points.

    Real queries lie far from every chunk: on MiniLM embeddings of stdlib code, a
    docstring sentence's best match has cos ~0.46, and recall@10 against nprobe
    follows these two kinds closely (easier stand-ins, such as lightly perturbed
    data points, chose an nprobe that gave real queries only 0.92)."""
    rng = np.random.default_rng(seed)
    n, dim = vectors.shape
    half = count // 2
    noisy = vectors[rng.integers(0, n, half)] + rng.standard_normal((half, dim)).astype(
        np.float32
    ) * (3.0 / math.sqrt(dim))
    means = vectors[rng.integers(0, n, (count - half, 8))].sum(axis=1)
    q = np.concatenate([noisy, means]).astype(np.float32)
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    return q


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over rows of |found ∩ truth| / |truth| (ids; -1 ignored)."""
    hits = sum(
        len(set(f[f >= 0].tolist()) & set(t[t >= 0].tolist()))
        for f, t in zip(found, truth, strict=True)
    )
    total = sum(int((t >= 0).sum()) for t in truth)
    return hits / total if total else 1.0


def _build_ivf(ids: np.ndarray, vecs: np.ndarray, dim: int) -> tuple[Any, int]:
    """Train and fill an IndexIVFFlat; returns it and the tuned nprobe."""
    faiss = _faiss()
    n = len(ids)
    nlist = ivf_nlist(n)
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.spherical = True  # unit vectors: keep the centroids on the sphere
    ivf.cp.seed = 1234
    ivf.cp.max_points_per_centroid = 40  # k-means on a sample of 40*nlist points (faiss asks 39+)
    ivf.train(vecs)
    ivf.add_with_ids(vecs, ids)
    # nprobe: the smallest that reaches RECALL_TARGET recall@10 against exact search.
    queries = _synthetic_queries(vecs, min(256, n))
    k = min(10, n)
    _, truth = faiss.knn(queries, vecs, k, metric=faiss.METRIC_INNER_PRODUCT)
    truth = ids[truth]
    nprobe = nlist
    for p in (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512):
        if p >= nlist:
            break
        ivf.nprobe = p
        _, found = ivf.search(queries, k)
        if recall_at_k(found, truth) >= RECALL_TARGET:
            nprobe = p
            break
    ivf.nprobe = nprobe
    return ivf, nprobe


@contextmanager
def _single_threaded() -> Iterator[None]:
    """Run faiss calls of this thread on one OpenMP thread. A single query is ~10 ms at
    100k vectors on one core; split over the cores of a 2-core box it gets 3-10x
    *slower* whenever another process holds a core (threads spin at barriers). The
    setting is per calling thread, so compactions elsewhere keep all cores."""
    faiss = _faiss()
    prev = faiss.omp_get_max_threads()
    if prev != 1:
        faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        if prev != 1:
            faiss.omp_set_num_threads(prev)


def _as_ids(ids: Any) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"ids must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"ids must be integers, got {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ValueError("ids must be >= 0 (faiss uses -1 for 'no result')")
    return arr


def _write_file(path: Path, write: Any) -> dict[str, Any]:
    """Write via `write(tmp_path)`, fsync, rename into place; return size and CRC32."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    crc = 0
    with tmp.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return {"name": path.name, "size": path.stat().st_size, "crc32": crc}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class VectorStore:
    """Inner-product vector search by int64 id with add, replace and remove.

    dim: vector width. ivf_threshold: above this many live vectors, compact() builds
    an IVF main segment (below half of it, back to exact flat). delta_limit: delta
    size (or tombstone count) at which needs_compaction() says so.
    """

    def __init__(self, dim: int, *, ivf_threshold: int = 50_000, delta_limit: int = 5_000):
        if dim < 1:
            raise ValueError("dim must be >= 1")
        self.dim = int(dim)
        self.ivf_threshold = int(ivf_threshold)
        self.delta_limit = max(1, int(delta_limit))
        self._lock = threading.Lock()  # guards everything below
        self._maint = threading.Lock()  # one compact() or save() at a time
        # main segment: replaced, never mutated (searched outside the lock)
        self._main: Any = _new_flat(self.dim)
        self._kind = "flat"
        self._nprobe = 0
        self._trained_n = 0  # live vectors when the IVF was trained
        self._main_ids: frozenset[int] = frozenset()  # ids physically in main
        self._tomb: frozenset[int] = frozenset()  # ids in main whose copy there is dead
        # delta segment: mutated under the lock
        self._delta: Any = _new_flat(self.dim)
        self._delta_ids: set[int] = set()
        self._touched: set[int] | None = None  # ids added/removed while compacting
        self._main_gen = 0  # bumped whenever compact() swaps in a new main segment
        # (directory, main_gen, manifest entry) of the last main file written or read:
        # save() reuses that file while main is unchanged
        self._saved_main: tuple[str, int, dict[str, Any]] | None = None

    # -- introspection

    def __len__(self) -> int:
        with self._lock:
            return len(self._main_ids) - len(self._tomb) + len(self._delta_ids)

    def __contains__(self, id: object) -> bool:
        try:
            key = int(id)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return False
        with self._lock:
            return key in self._delta_ids or (key in self._main_ids and key not in self._tomb)

    @property
    def kind(self) -> str:
        """'flat' or 'ivf': the kind of the main segment."""
        return self._kind

    @property
    def nprobe(self) -> int:
        return self._nprobe

    def ids(self) -> np.ndarray:
        """All live ids, sorted."""
        with self._lock:
            live = (self._main_ids - self._tomb) | self._delta_ids
        return np.array(sorted(live), dtype=np.int64)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "kind": self._kind,
                "dim": self.dim,
                "live": len(self._main_ids) - len(self._tomb) + len(self._delta_ids),
                "main": len(self._main_ids),
                "delta": len(self._delta_ids),
                "tombstones": len(self._tomb),
                "nprobe": self._nprobe,
                "nlist": int(self._main.nlist) if self._kind == "ivf" else 0,
            }

    # -- writes

    def _as_vectors(self, vectors: Any, n: int) -> np.ndarray:
        arr = np.asarray(vectors)
        if arr.ndim != 2 or arr.shape != (n, self.dim):
            raise ValueError(f"vectors must have shape ({n}, {self.dim}), got {arr.shape}")
        if arr.dtype.kind != "f":
            raise ValueError(f"vectors must be floating point, got {arr.dtype}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if not np.isfinite(arr).all():
            raise ValueError("vectors contain NaN or infinity")
        return arr

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under ids; an id already present is replaced (a repeated id within
        one call: the last row wins)."""
        id_arr = _as_ids(ids)
        vecs = self._as_vectors(vectors, len(id_arr))
        if len(id_arr) == 0:
            return
        uniq, first_in_reversed = np.unique(id_arr[::-1], return_index=True)
        if len(uniq) != len(id_arr):  # keep the last occurrence of each id
            keep = np.sort(len(id_arr) - 1 - first_in_reversed)
            id_arr, vecs = id_arr[keep], vecs[keep]
        id_list = id_arr.tolist()
        with self._lock:
            again = [i for i in id_list if i in self._delta_ids]
            if again:
                self._delta.remove_ids(np.array(again, dtype=np.int64))
            dead = [i for i in id_list if i in self._main_ids and i not in self._tomb]
            if dead:
                self._tomb = self._tomb.union(dead)
            self._delta.add_with_ids(vecs, id_arr)
            self._delta_ids.update(id_list)
            if self._touched is not None:
                self._touched.update(id_list)

    def remove(self, ids: Iterable[int]) -> None:
        """Remove ids (unknown ids are ignored); they are never returned again."""
        id_list = _as_ids(np.fromiter((int(i) for i in ids), dtype=np.int64)).tolist()
        if not id_list:
            return
        with self._lock:
            gone = [i for i in id_list if i in self._delta_ids]
            if gone:
                self._delta.remove_ids(np.array(gone, dtype=np.int64))
                self._delta_ids.difference_update(gone)
            dead = [i for i in id_list if i in self._main_ids and i not in self._tomb]
            if dead:
                self._tomb = self._tomb.union(dead)
            if self._touched is not None:
                self._touched.update(id_list)

    # -- search

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k best (id, inner product) pairs, best first (ties: lower id first)."""
        q = np.asarray(query)
        if q.ndim == 1:
            q = q[None, :]
        if q.shape != (1, self.dim):
            raise ValueError(
                f"query must have shape ({self.dim},) or (1, {self.dim}), got {q.shape}"
            )
        q = np.ascontiguousarray(q, dtype=np.float32)
        if not np.isfinite(q).all():
            raise ValueError("query contains NaN or infinity")
        if k <= 0:
            return []
        with _single_threaded():
            return self._search(q, k)

    def _search(self, q: np.ndarray, k: int) -> list[tuple[int, float]]:
        results: list[tuple[int, float]] = []
        with self._lock:
            main, tomb = self._main, self._tomb
            n_delta = self._delta.ntotal
            if n_delta:
                scores, found = self._delta.search(q, min(k, n_delta))
                results.extend(
                    (int(i), float(s)) for s, i in zip(scores[0], found[0], strict=True) if i >= 0
                )
        n_main = main.ntotal
        if n_main:
            # Over-fetch past tombstoned hits; k + len(tomb) always leaves k live ones.
            cap = min(n_main, k + len(tomb))
            fetch = min(cap, k + min(len(tomb), k + 16))
            while True:
                scores, found = main.search(q, fetch)
                valid = found[0] >= 0
                hits = [
                    (int(i), float(s))
                    for s, i in zip(scores[0][valid], found[0][valid], strict=True)
                    if int(i) not in tomb
                ]
                if len(hits) >= k or fetch >= cap or int(valid.sum()) < fetch:
                    break
                fetch = min(cap, fetch * 4)
            results.extend(hits[:k])
        results.sort(key=lambda r: (-r[1], r[0]))
        return results[:k]

    # -- maintenance

    def _wanted_kind(self, live: int) -> str:
        if self._kind == "ivf":
            return "ivf" if live > self.ivf_threshold // 2 else "flat"
        return "ivf" if live > self.ivf_threshold else "flat"

    def _needs_retrain(self, live: int) -> bool:
        return self._kind == "ivf" and (live > 2 * self._trained_n or live < self._trained_n // 2)

    def needs_compaction(self) -> bool:
        """True when the delta or the tombstones have grown past delta_limit, or the main
        segment should change kind (flat <-> IVF) or be retrained (size doubled/halved)."""
        with self._lock:
            n_delta, n_tomb = len(self._delta_ids), len(self._tomb)
            live = len(self._main_ids) - n_tomb + n_delta
            if n_delta >= self.delta_limit or n_tomb >= self.delta_limit:
                return True
            if n_tomb and n_tomb > len(self._main_ids) // 4:
                return True
            return self._wanted_kind(live) != self._kind or self._needs_retrain(live)

    def compact(self) -> None:
        """Fold the delta into main and drop tombstoned vectors; switch main between flat
        and IVF (or retrain the IVF) as its size asks. Safe to call from a background
        thread while others add, remove and search: they are not blocked meanwhile."""
        with self._maint:
            with self._lock:
                main, kind, main_ids, tomb = self._main, self._kind, self._main_ids, self._tomb
                d_ids, d_vecs = _flat_contents(self._delta)
                live = len(main_ids) - len(tomb) + len(d_ids)
                want = self._wanted_kind(live)
                retrain = self._needs_retrain(live)
                if not len(d_ids) and not tomb and want == kind and not retrain:
                    return
                self._touched = set()
            try:
                if want == kind and not retrain:
                    new_main = _faiss().clone_index(main)
                    if tomb:
                        new_main.remove_ids(np.fromiter(tomb, dtype=np.int64, count=len(tomb)))
                    if len(d_ids):
                        new_main.add_with_ids(d_vecs, d_ids)
                    nprobe, trained_n = self._nprobe, self._trained_n
                else:
                    if kind == "flat":
                        m_ids, m_vecs = _flat_contents(main)
                    else:
                        m_ids, m_vecs = _ivf_contents(main)
                    if tomb:
                        alive = ~np.isin(m_ids, np.fromiter(tomb, np.int64, len(tomb)))
                        m_ids, m_vecs = m_ids[alive], m_vecs[alive]
                    all_ids = np.concatenate([m_ids, d_ids])
                    all_vecs = np.concatenate([m_vecs, d_vecs])
                    del m_ids, m_vecs
                    if want == "ivf":
                        new_main, nprobe = _build_ivf(all_ids, all_vecs, self.dim)
                        trained_n = len(all_ids)
                    else:
                        new_main = _new_flat(self.dim)
                        new_main.add_with_ids(all_vecs, all_ids)
                        nprobe, trained_n = 0, 0
                new_main_ids = (main_ids - tomb).union(d_ids.tolist())
            except BaseException:
                with self._lock:
                    self._touched = None
                raise
            with self._lock:
                touched = self._touched or set()
                self._touched = None
                # The delta keeps what was added since the snapshot. It is rebuilt, not
                # shrunk: faiss's remove_ids never returns the memory of removed rows.
                folded = {i for i in d_ids.tolist() if i not in touched}
                if folded:
                    now_ids, now_vecs = _flat_contents(self._delta)
                    keep = np.fromiter((i not in folded for i in now_ids.tolist()), bool)
                    self._delta = _new_flat(self.dim)
                    if keep.any():
                        self._delta.add_with_ids(now_vecs[keep], now_ids[keep])
                    self._delta_ids.difference_update(folded)
                self._main, self._kind, self._main_ids = new_main, want, new_main_ids
                self._main_gen += 1
                self._nprobe, self._trained_n = nprobe, trained_n
                # Whatever changed since the snapshot makes its copy in main stale.
                self._tomb = frozenset(touched & new_main_ids)

    # -- persistence

    def save(self, directory: Path) -> None:
        """Write the store under `directory` atomically (see the module docstring)."""
        faiss = _faiss()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with self._maint:
            with self._lock:
                main, kind, main_ids = self._main, self._kind, self._main_ids
                nprobe, trained_n, main_gen = self._nprobe, self._trained_n, self._main_gen
                delta = faiss.clone_index(self._delta)
                tomb = np.array(sorted(self._tomb), dtype=np.int64)
            gen = f"{time.time_ns():x}"
            where = str(directory.resolve())
            saved = self._saved_main
            if (
                saved is not None
                and saved[:2] == (where, main_gen)
                and _size(directory / saved[2]["name"]) == saved[2]["size"]
            ):
                main_entry = saved[2]  # main unchanged since it was written: keep the file
            else:
                main_entry = _write_file(
                    directory / f"main-{gen}.faiss", lambda p: faiss.write_index(main, str(p))
                )
            files = {
                "main": main_entry,
                "delta": _write_file(
                    directory / f"delta-{gen}.faiss", lambda p: faiss.write_index(delta, str(p))
                ),
                "tombstones": _write_file(
                    directory / f"tombstones-{gen}.npy",
                    lambda p: p.write_bytes(_npy_bytes(tomb)),
                ),
            }
            manifest = {
                "format": FORMAT_VERSION,
                "dim": self.dim,
                "kind": kind,
                "nprobe": nprobe,
                "trained_n": trained_n,
                "counts": {
                    "main": len(main_ids),
                    "delta": int(delta.ntotal),
                    "tombstones": len(tomb),
                    "live": len(main_ids) - len(tomb) + int(delta.ntotal),
                },
                "files": files,
            }
            _write_file(
                directory / MANIFEST,
                lambda p: p.write_text(json.dumps(manifest, indent=1), encoding="utf-8"),
            )
            _fsync_dir(directory)
            self._saved_main = (where, main_gen, main_entry)
            keep = {f["name"] for f in files.values()}
            for path in directory.iterdir():  # only our own files: others may share it
                ours = path.name.startswith(_FILE_PREFIXES) or path.name == MANIFEST + ".tmp"
                if ours and path.name not in keep:
                    path.unlink(missing_ok=True)

    @classmethod
    def load(
        cls,
        directory: Path,
        dim: int,
        *,
        ivf_threshold: int = 50_000,
        delta_limit: int = 5_000,
    ) -> VectorStore:
        """Read a store written by save(). Raises VectorStoreError if anything is missing,
        truncated, corrupt, of another format version or of another dim."""
        directory = Path(directory)
        manifest = _read_manifest(directory / MANIFEST)
        if manifest["dim"] != dim:
            raise VectorStoreError(
                f"vector store {directory} holds {manifest['dim']}-d vectors, {dim}-d expected"
            )
        paths = {key: _checked_file(directory, manifest, key) for key in _FILE_KEYS}
        faiss = _faiss()
        counts, kind = manifest["counts"], manifest["kind"]
        try:
            main = faiss.read_index(str(paths["main"]))
            delta = faiss.read_index(str(paths["delta"]))
            tomb = np.load(paths["tombstones"], allow_pickle=False)
        except (RuntimeError, OSError, ValueError, MemoryError) as exc:
            raise VectorStoreError(f"vector store {directory} is corrupt: {exc}") from exc

        def bad(why: str) -> VectorStoreError:
            return VectorStoreError(f"vector store {directory} is inconsistent: {why}")

        if kind == "flat":
            main = _downcast_idmap(main)
            if main is None:
                raise bad("main segment is not a flat id map")
        else:
            if not isinstance(main, faiss.IndexIVFFlat):
                raise bad("main segment is not an IVF index")
            if not main.is_trained or manifest["nprobe"] < 1:
                raise bad("IVF main segment is untrained")
            main.nprobe = int(manifest["nprobe"])
        delta = _downcast_idmap(delta)
        if delta is None:
            raise bad("delta segment is not a flat id map")
        for name, index in (("main", main), ("delta", delta)):
            if index.d != dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
                raise bad(f"{name} segment has dim {index.d} / metric {index.metric_type}")
            if index.ntotal != counts[name]:
                raise bad(f"{name} segment holds {index.ntotal} vectors, manifest says so many")
        if tomb.dtype != np.int64 or tomb.ndim != 1 or len(tomb) != counts["tombstones"]:
            raise bad("tombstones file does not match the manifest")
        main_ids = _main_ids(main, kind).tolist()
        delta_ids = faiss.vector_to_array(delta.id_map).astype(np.int64).tolist()
        main_set, delta_set, tomb_set = set(main_ids), set(delta_ids), set(tomb.tolist())
        if len(main_set) != len(main_ids) or len(delta_set) != len(delta_ids):
            raise bad("duplicate ids")
        if not tomb_set <= main_set:
            raise bad("tombstones for ids that are not in the main segment")
        if delta_set & (main_set - tomb_set):
            raise bad("ids live in both the main and the delta segment")

        store = cls(dim, ivf_threshold=ivf_threshold, delta_limit=delta_limit)
        store._main, store._kind = main, kind
        store._nprobe = int(manifest["nprobe"]) if kind == "ivf" else 0
        store._trained_n = int(manifest["trained_n"])
        store._main_ids, store._tomb = frozenset(main_set), frozenset(tomb_set)
        store._delta, store._delta_ids = delta, delta_set
        store._saved_main = (str(directory.resolve()), 0, manifest["files"]["main"])
        return store


_FILE_KEYS = ("main", "delta", "tombstones")


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _downcast_idmap(index: Any) -> Any | None:
    """The index as an IndexIDMap2 over an IndexFlatIP, or None if it is not one.
    (read_index returns the concrete class; downcast_index would return a proxy that
    does not own the index, so only the inner index is downcast, for the check.)"""
    faiss = _faiss()
    if not isinstance(index, faiss.IndexIDMap2):
        return None
    if not isinstance(faiss.downcast_index(index.index), faiss.IndexFlatIP):
        return None
    return index


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VectorStoreError(f"vector store: {path} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise VectorStoreError(f"vector store: {path} is unreadable: {exc}") from exc
    if not isinstance(manifest, dict):
        raise VectorStoreError(f"vector store: {path} is not a JSON object")
    if manifest.get("format") != FORMAT_VERSION:
        raise VectorStoreError(
            f"vector store: {path} has format {manifest.get('format')!r}, "
            f"this version reads {FORMAT_VERSION}"
        )
    try:
        ok = (
            isinstance(manifest["dim"], int)
            and manifest["kind"] in ("flat", "ivf")
            and isinstance(manifest["nprobe"], int)
            and isinstance(manifest["trained_n"], int)
            and all(isinstance(manifest["counts"][k], int) for k in _FILE_KEYS)
            and all(
                isinstance(manifest["files"][k]["name"], str)
                and isinstance(manifest["files"][k]["size"], int)
                and isinstance(manifest["files"][k]["crc32"], int)
                for k in _FILE_KEYS
            )
        )
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise VectorStoreError(f"vector store: {path} is malformed")
    return manifest


def _checked_file(directory: Path, manifest: dict[str, Any], key: str) -> Path:
    """The path of one data file, after checking its size and CRC32 against the manifest."""
    entry = manifest["files"][key]
    name = entry["name"]
    if Path(name).name != name or not name.startswith(_FILE_PREFIXES):
        raise VectorStoreError(f"vector store: bad file name {name!r} in the manifest")
    path = directory / name
    try:
        size = path.stat().st_size
        if size != entry["size"]:
            raise VectorStoreError(
                f"vector store: {path} has {size} bytes, {entry['size']} expected (truncated?)"
            )
        crc = 0
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 22):
                crc = zlib.crc32(chunk, crc)
    except FileNotFoundError:
        raise VectorStoreError(f"vector store: {path} is missing") from None
    except OSError as exc:
        raise VectorStoreError(f"vector store: cannot read {path}: {exc}") from exc
    if crc != entry["crc32"]:
        raise VectorStoreError(f"vector store: {path} is corrupt (checksum mismatch)")
    return path
