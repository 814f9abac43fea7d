"""Benchmark of the semantic codebase index (issue 3).

    python -m bench.index [--json] [--quick] [--work DIR]

Corpora (copied to a temporary directory first; nothing is downloaded):

- **stdlib**: this interpreter's standard library without site-packages and caches,
  every file as a user's checkout would hold it (about 1,800 .py files and 650 others).
- **eval**: the docstring code-search set of `bench.codesearch`: a seeded selection of
  the standard library's modules and packages (no tests, no idlelib) with the sampled
  functions' docstrings blanked; queries are the docstrings' first sentences; about
  9k chunks.
- **100k**: the .py/.pyi files of some big packages of this project's virtual
  environment (torch, sympy, pip): about 120k chunks.
- **site-packages**: the whole site-packages of the venv, read in place (over 10,000
  .py files, about 350k chunks), for a cold start on a large tree.

Measured in one run:

1. Cold start to the first lexical result on the stdlib (target < 10 s), in a fresh
   process with a fresh cache: interpreter start, imports, `CodeIndex(..., dense=False)`,
   `update()` and the first `search(mode="lexical")`. Anchor: ripgrep (the venv's
   `rg`) finding a word of the query over the same tree. Where the time goes: timers
   around the indexer's steps in one of the runs, the machine's busy CPU time, and a
   cProfile of one update (main process). The same cold start on site-packages. Then
   the cold start of the default, dense index: `update()` embeds every chunk before
   it returns (no background thread since issue 35), then the first hybrid search.
2. Dense indexing throughput of the index's default embedder (tachy's static code
   model, index/models/tachy-code-static): `embed_pending(limit=N)` on the stdlib index
   (a bounded subset: the first N chunks of the index's own order), split into
   tokenizing, the model and the rest (database, vector store); the whole stdlib's
   embedding time is extrapolated. The eval corpus and the 100k corpus are then
   embedded in full (more figures). MiniLM's throughput and quality beside it:
   `python -m bench.codesearch --compare`.
3. Save-to-searchable for one changed file: a probe function with a new unique
   identifier is written into a file, then `update_paths([file])`, then searches until
   the probe is found: lexical on the stdlib index (target p95 < 200 ms); dense on the
   fully embedded eval index, `update_paths` (which embeds the file's new chunks) + a
   dense search for the probe's docstring (target p95 < 1 s). The same dense pipeline on the 100k
   index (its probe vector is not meaningful there, so only the time counts).
4. Query latency p50/p95 for lexical, dense and hybrid search (target p95 < 50 ms;
   issue 19: hybrid < 30 ms at 100k chunks) on the eval index and on the 100k index,
   every chunk with its real vector, with the dense time split into embedding the
   query and searching the vector store. Memory per chunk: bytes of the index
   directory on disk, and the RSS a fresh process gains by opening the index and
   running lexical and dense queries (after the embedding model is loaded, so only the
   index counts).
5. Retrieval quality on the docstring set: MRR@10 and Recall@10 of lexical only, dense
   only and hybrid, side by side on the same index (goal: hybrid beats the better of
   the two by >= 3 points of MRR), and the same without the cap on chunks per file.
   The set mixes the static model's training and evaluation units of the stdlib, so
   these are figures of the index at work, not of generalisation: held-out quality is
   `bench.codesearch --compare`'s.

Progress goes to stderr. A full run takes about 10 minutes on two cores, `--quick`
(smaller corpora, fewer repeats) about 1. (Until issue 19 this benchmark measured
MiniLM, with stand-in vectors at 100k because embedding 100k chunks took an hour; those
figures stay in bench/RESULTS.md.)
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import gc
import hashlib
import inspect
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import common
from bench.codesearch import EvalSet, build_eval_set, is_relevant, mrr_at_k, recall_at_k
from bench.common import ms, stats

REPO = Path(__file__).resolve().parent.parent
COLD_TARGET_S = 10.0
SAVE_LEXICAL_TARGET_MS = 200.0
SAVE_DENSE_TARGET_MS = 1000.0
QUERY_TARGET_MS = 50.0
HYBRID_MARGIN_TARGET = 3.0  # points of MRR@10 over the better single retriever
MODES = ("lexical", "dense", "hybrid")
# The first lexical search of the cold start, and the word ripgrep looks for.
COLD_QUERY = "decompress a gzip file"
RG_WORDS = ("gzip", "decompress")
PROBE_WORDS = [
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "glacier",
    "harbor",
    "iris",
    "juniper",
    "kelp",
    "lagoon",
    "meadow",
    "nebula",
    "orchid",
    "prairie",
    "quartz",
    "reef",
    "savanna",
    "tundra",
    "umber",
    "valley",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
]
TEXT_SUFFIXES = (".py", ".pyi")

_START = time.perf_counter()


# ------------------------------------------------------------------ helpers
def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def rss_bytes() -> int:
    """The process's resident set size now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def machine_busy_s() -> float:
    """CPU seconds all cores of the machine have spent busy since boot (/proc/stat:
    everything but idle and iowait), whoever used them."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    busy = sum(values) - values[3] - values[4]  # idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def mib(n: float) -> float:
    return round(n / 2**20, 1)


def rg_binary() -> str | None:
    return shutil.which("rg", path=str(Path(sys.executable).parent)) or shutil.which("rg")


def tree_summary(root: Path) -> dict[str, int]:
    files = [p for p in root.rglob("*") if p.is_file() and ".tachy" not in p.parts]
    return {
        "files": len(files),
        "py_files": sum(p.suffix == ".py" for p in files),
        "bytes": sum(p.stat().st_size for p in files),
    }


# --------------------------------------------------------------- corpora
def stdlib_source() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def copy_stdlib(target: Path) -> Path:
    """The standard library as a checkout would hold it (no site-packages, no caches)."""
    shutil.copytree(
        stdlib_source(),
        target,
        ignore=shutil.ignore_patterns("site-packages", "dist-packages", "__pycache__", "*.pyc"),
        symlinks=True,
    )
    return target


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def copy_packages(target: Path, packages: Sequence[str]) -> Path:
    """The .py/.pyi files of some installed packages (no binaries, no data)."""
    source = site_packages()
    for name in packages:
        base = source / name
        if not base.is_dir():
            raise FileNotFoundError(f"package {name} is not installed in {source}")
        for path in base.rglob("*"):
            if path.suffix in TEXT_SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                dest = target / path.relative_to(source)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
    return target


# -------------------------------------------------------------- embedders
class TimedEmbedder:
    """Wraps an embedder (same name and vectors) and adds up where its time goes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.reset()

    def reset(self) -> None:
        self.calls = self.texts = self.tokens = self.padded_tokens = 0
        self.total_s = self.tokenize_s = self.forward_s = 0.0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        out = self.inner.embed(texts)
        self.total_s += time.perf_counter() - started
        self.calls += 1
        self.texts += len(texts)
        timings = getattr(self.inner, "last_timings", None)
        if timings is not None:
            self.tokens += timings.tokens
            self.padded_tokens += timings.padded_tokens
            self.tokenize_s += timings.tokenize_s
            self.forward_s += timings.forward_s
        return out

    def report(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "texts": self.texts,
            "tokens": self.tokens,
            "padded_tokens": self.padded_tokens,
            "embed_s": round(self.total_s, 3),
            "tokenize_s": round(self.tokenize_s, 3),
            "forward_s": round(self.forward_s, 3),
        }


def index_embedder() -> Any:
    """The index's default embedder (tachy's static code model), loaded and warmed."""
    from index.embedder import default_embedder

    embedder = default_embedder()
    embedder.embed(["warm up the model"])
    return embedder


# ------------------------------------------------------- timers (where time goes)
@contextlib.contextmanager
def step_timers() -> Iterator[dict[str, dict[str, float]]]:
    """Time the indexer's steps in this process by wrapping what it calls (functions
    of index.indexer, methods of CodeIndex and LexicalIndex; a generator is timed
    while it produces each item); anything not found is left out. Work done on the
    indexer's worker processes shows as the time spent waiting for their results."""
    import index.indexer as indexer
    import index.lexical as lexical

    found: dict[str, dict[str, float]] = {}
    patches: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return
        slot = found.setdefault(label, {"seconds": 0.0, "calls": 0})

        def timed_items(items: Iterator[Any]) -> Iterator[Any]:
            while True:
                started = time.perf_counter()
                try:
                    item = next(items)
                except StopIteration:
                    return
                finally:
                    slot["seconds"] += time.perf_counter() - started
                yield item

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                out = original(*args, **kwargs)
            finally:
                slot["seconds"] += time.perf_counter() - started
                slot["calls"] += 1
            return timed_items(out) if inspect.isgenerator(out) else out

        patches.append((owner, attr, original))
        setattr(owner, attr, timed)

    wrap(indexer, "stat_diff", "scan (stat + ignore rules)")
    wrap(indexer.CodeIndex, "_prepared", "read + chunk files (waiting for chunking workers)")
    wrap(indexer.CodeIndex, "_write_batch", "write batches (SQLite + lexical)")
    wrap(lexical.LexicalIndex, "add", "  of which lexical insert (tokenize + FTS5)")
    wrap(indexer, "merkle_root", "merkle root")
    try:
        yield found
    finally:
        for owner, attr, original in reversed(patches):
            setattr(owner, attr, original)


def profile_top(
    profile: cProfile.Profile, limit: int = 15, key: str = "own", prefix: str = ""
) -> list[dict[str, Any]]:
    """The functions with the most own (or cumulative) time, with their file:line;
    with `prefix`, only functions in files under it (relative to the repository)."""
    st = pstats.Stats(profile)
    rows = []
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in st.stats.items():  # type: ignore[attr-defined]
        short = filename
        for base in (str(REPO) + "/", sysconfig.get_paths()["stdlib"] + "/"):
            short = short.replace(base, "")
        if prefix and not short.startswith(prefix):
            continue
        rank = tottime if key == "own" else cumtime
        rows.append((rank, tottime, cumtime, ncalls, short, line, func))
    rows.sort(reverse=True)
    return [
        {
            "function": f"{short}:{line}({func})",
            "own_s": round(tottime, 4),
            "cumulative_s": round(cumtime, 4),
            "calls": ncalls,
        }
        for _, tottime, cumtime, ncalls, short, line, func in rows[:limit]
    ]


def profile_cumulative(profile: cProfile.Profile, names: dict[str, str]) -> dict[str, float]:
    """Cumulative seconds of chosen functions ("file suffix:function" -> label)."""
    st = pstats.Stats(profile)
    out: dict[str, float] = {}
    for (filename, _, func), (_, _, _, cumtime, _) in st.stats.items():  # type: ignore[attr-defined]
        for key, label in names.items():
            suffix, name = key.split(":")
            if filename.endswith(suffix) and func == name:
                out[label] = round(out.get(label, 0.0) + cumtime, 3)
    return out


# --------------------------------------------------------------- workers
def run_worker(spec: dict[str, Any], timeout_s: float = 900) -> dict[str, Any]:
    """Run a measurement in a fresh interpreter (`--worker`); its JSON answer."""
    spec = {**spec, "spawned_at": time.time()}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "bench.index", "--worker", json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(
            f"worker {spec['kind']} failed ({out.returncode}):\n{out.stderr[-4000:]}"
        )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = round(wall, 3)
    return result


def worker_cold(spec: dict[str, Any]) -> dict[str, Any]:
    """Cold start in this fresh process: import, open, update, first search (lexical;
    hybrid when `spec["dense"]`, whose update embeds every chunk first)."""
    t_start = spec["spawned_at"]
    t0 = time.perf_counter()
    from index.indexer import CodeIndex

    t_import = time.perf_counter()
    timers_cm = step_timers() if spec.get("timers") else contextlib.nullcontext({})
    with timers_cm as timers:
        dense = bool(spec.get("dense"))
        idx = CodeIndex(spec["root"], cache_dir=spec["cache"], embedder="default", dense=dense)
        t_open = time.perf_counter()
        busy_before = machine_busy_s()
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        st = idx.update()
        t_update = time.perf_counter()
        busy = machine_busy_s() - busy_before
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    hits = idx.search(spec["query"], limit=10, mode="hybrid" if dense else "lexical")
    t_search = time.perf_counter()
    first_result_after_spawn = time.time() - t_start
    idx.close()
    return {
        "first_result_s": round(first_result_after_spawn, 3),
        "interpreter_start_s": round(first_result_after_spawn - (t_search - t0), 3),
        "import_s": round(t_import - t0, 3),
        "open_s": round(t_open - t_import, 3),
        "update_s": round(t_update - t_open, 3),
        "of_which_embedding_s": round(st.embed_seconds, 3),
        "embedded": st.embedded,
        "first_search_ms": ms(t_search - t_update),
        "hits": len(hits),
        "top_hit": f"{hits[0].path}:{hits[0].start_line}" if hits else None,
        "files": st.files,
        "chunks": st.chunks,
        "changed_files": st.changed_files,
        "skipped": st.skipped,
        "timers": {
            k: {"seconds": round(v["seconds"], 3), "calls": v["calls"]} for k, v in timers.items()
        },
        "update_cpu_s_main_process": round(
            cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime, 3
        ),
        # Chunking workers are not our direct children (forkserver), so their CPU is
        # seen only as the whole machine's busy time (other load included).
        "update_machine_busy_cpu_s": round(busy, 3),
        "update_cores_busy_on_average": round(busy / (t_update - t_open), 2),
        "peak_rss_mib": mib(peak_rss_bytes()),
    }


def worker_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """RSS a fresh process gains by opening an index and querying it (the embedding
    model is loaded before the baseline, so it does not count)."""
    from index.indexer import CodeIndex

    embedder = index_embedder()
    gc.collect()
    before_faiss = rss_bytes()
    import index.vectors  # noqa: F401 - the library is a fixed cost, not per chunk

    gc.collect()
    base = rss_bytes()
    t0 = time.perf_counter()
    idx = CodeIndex(spec["root"], cache_dir=spec["cache"], embedder=embedder, dense=True)
    open_s = time.perf_counter() - t0
    found = idx.status().chunks
    if found != spec["chunks"]:
        why = getattr(idx, "rebuilt_because", None)
        raise RuntimeError(
            f"reopening the index found {found} chunks, not {spec['chunks']}"
            + (f"; it was discarded and rebuilt: {why}" if why else "")
        )
    opened = rss_bytes()
    lexical_first = []
    for query in spec["queries"]:
        t = time.perf_counter()
        idx.search(query, limit=10, mode="lexical")
        lexical_first.append(time.perf_counter() - t)
    after_lexical = rss_bytes()
    t = time.perf_counter()
    idx.search(spec["queries"][0], limit=10, mode="dense")
    first_dense_s = time.perf_counter() - t
    for query in spec["queries"]:
        idx.search(query, limit=10, mode="hybrid")
    after_dense = rss_bytes()
    status = idx.status()
    idx.close()
    chunks = max(status.chunks, 1)
    return {
        "chunks": status.chunks,
        "baseline_rss_mib (model loaded)": mib(base),
        "faiss_import_mib": mib(base - before_faiss),
        "open_s": round(open_s, 3),
        "first_lexical_ms": ms(lexical_first[0]),
        "first_dense_ms": ms(first_dense_s),
        "rss_growth_open_mib": mib(opened - base),
        "rss_growth_lexical_mib": mib(after_lexical - base),
        "rss_growth_dense_mib": mib(after_dense - base),
        "rss_bytes_per_chunk_lexical": round((after_lexical - base) / chunks),
        "rss_bytes_per_chunk_all": round((after_dense - base) / chunks),
    }


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "cold": worker_cold,
    "memory": worker_memory,
}


# ---------------------------------------------------------- 1. cold start
def bench_rg(root: Path, repeats: int) -> dict[str, Any]:
    rg = rg_binary()
    if rg is None:
        return {"available": False}
    out: dict[str, Any] = {"available": True, "binary": rg}
    cases = {f"word {w!r}": ["--fixed-strings", w] for w in RG_WORDS}
    cases["any word of the query"] = [arg for w in COLD_QUERY.split() for arg in ("-e", w)]
    for name, args in cases.items():
        argv = [rg, "-n", "--no-messages", *args, str(root)]
        matches = subprocess.run(argv, capture_output=True, check=False).stdout.count(b"\n")
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            samples.append(time.perf_counter() - started)
        out[name] = {**stats(samples), "matching_lines": matches}
    return out


def bench_cold(root: Path, work: Path, plan: dict[str, Any]) -> dict[str, Any]:
    runs = []
    cache = work / "stdlib-cache"
    for i in range(plan["cold_runs"]):
        shutil.rmtree(cache, ignore_errors=True)
        timers = i == plan["cold_runs"] - 1  # the last run also times the steps
        log(f"cold start {i + 1}/{plan['cold_runs']}{' (with step timers)' if timers else ''}")
        result = run_worker(
            {
                "kind": "cold",
                "root": str(root),
                "cache": str(cache),
                "query": COLD_QUERY,
                "timers": timers,
            }
        )
        log(
            f"  first lexical result after {result['first_result_s']:.2f} s "
            f"({result['files']} files, {result['chunks']} chunks)"
        )
        runs.append(result)
    firsts = sorted(r["first_result_s"] for r in runs)
    return {
        "query": COLD_QUERY,
        "cache": "fresh directory per run; page cache warm (the tree was just copied)",
        "runs": runs,
        "first_result_s_median": round(statistics.median(firsts), 3),
        "first_result_s_max": round(firsts[-1], 3),
        "cache_dir": str(cache),
    }


def bench_profile_update(root: Path, work: Path) -> dict[str, Any]:
    """cProfile of one cold lexical `update()` (in this process, fresh cache)."""
    from index.indexer import CodeIndex

    cache = work / "profile-cache"
    shutil.rmtree(cache, ignore_errors=True)
    idx = CodeIndex(root, cache_dir=cache, dense=False)
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    idx.update()
    profile.disable()
    elapsed = time.perf_counter() - started
    idx.close()
    shutil.rmtree(cache, ignore_errors=True)
    return {
        "update_s_under_profiler": round(elapsed, 3),
        "note": "this process only: files are read and chunked on worker processes for "
        "updates of more than a few hundred files",
        "cumulative_s": profile_cumulative(
            profile,
            {
                "index/scan.py:stat_diff": "scan",
                "index/indexer.py:_prepared": "waiting for read + chunk",
                "index/indexer.py:_write_batch": "write batches (SQLite + lexical)",
                "index/lexical.py:add": "lexical insert",
                "index/tokenize.py:index_terms": "lexical tokenize",
            },
        ),
        "top_own_time": profile_top(profile),
        "index_functions_by_cumulative_time": profile_top(
            profile, limit=15, key="cumulative", prefix="index/"
        ),
    }


# ------------------------------------------------------- 2. dense throughput
def bench_throughput(idx: Any, timed: TimedEmbedder, limit: int) -> dict[str, Any]:
    timed.reset()
    before = idx.status()
    started = time.perf_counter()
    done = idx.embed_pending(limit=limit)
    elapsed = time.perf_counter() - started
    report = timed.report()
    rate = done / elapsed if elapsed else 0.0
    total = before.chunks
    return {
        "subset": f"the first {limit} pending chunks in embed_pending's own order (path order)",
        "chunks_embedded": done,
        "seconds": round(elapsed, 3),
        "chunks_per_s": round(rate, 1),
        "embedder": report,
        "model_forward_share": round(report["forward_s"] / elapsed, 3) if elapsed else None,
        "tokenize_share": round(report["tokenize_s"] / elapsed, 3) if elapsed else None,
        "outside_model_s (database, vector store, batching)": round(elapsed - report["embed_s"], 3),
        "mean_tokens_per_chunk": round(report["tokens"] / max(report["texts"], 1), 1),
        "padding_overhead": round(report["padded_tokens"] / max(report["tokens"], 1), 3),
        "index_chunks": total,
        "extrapolated_full_embed_s": round(total / rate, 1) if rate else None,
    }


# -------------------------------------------------------- 3. save-to-searchable
def _letters(n: int, width: int = 4) -> str:
    out = ""
    for _ in range(width):
        n, r = divmod(n, 26)
        out = chr(ord("a") + r) + out
    return out


class Probe:
    """A function with a unique name and a unique docstring, appended to a file."""

    def __init__(self, number: int, nonce: str) -> None:
        self.ident = f"tachyprobe{nonce}{_letters(number)}"
        digest = hashlib.sha256(f"{nonce}{number}".encode()).digest()
        w = [PROBE_WORDS[b % len(PROBE_WORDS)] for b in digest[:6]]
        self.sentence = (
            f"Estimate how much {w[0]} and {w[1]} drift into the {w[2]} {w[3]} "
            f"after the {w[4]} {w[5]} storm"
        )
        self.code = (
            f"\n\ndef {self.ident}(readings, {w[0]}_weight=0.5):\n"
            f'    """{self.sentence}."""\n'
            f"    {w[1]}_total = 0.0\n"
            f"    for reading in readings:\n"
            f"        {w[1]}_total += reading * {w[0]}_weight\n"
            f"    return {w[1]}_total / max(len(readings), 1)\n"
        )


def pick_files(root: Path, count: int, low: int, high: int, seed: int) -> list[str]:
    """`count` .py files of `low`..`high` bytes, seeded choice, sorted by path."""
    import random

    pool = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if low <= p.stat().st_size <= high and ".tachy" not in p.parts
    )
    chosen = random.Random(seed).sample(pool, min(count, len(pool)))
    return sorted(chosen)


def _found(hits: Sequence[Any], path: str, span: tuple[int, int]) -> bool:
    return any(h.path == path and h.start_line <= span[1] and h.end_line >= span[0] for h in hits)


def bench_save(
    idx: Any,
    root: Path,
    files: list[str],
    edits: int,
    dense: bool,
    nonce: str,
    give_up_s: float = 5.0,
    profile_last: bool = False,
) -> dict[str, Any]:
    """`edits` saves, cycling through `files`; each time from writing the file to a
    search that returns the probe. Files are restored afterwards. With `profile_last`
    the last save runs under cProfile (and is not counted)."""
    profile = cProfile.Profile() if profile_last else None
    originals = {
        rel: (root / rel).read_text(encoding="utf-8", errors="surrogateescape") for rel in files
    }
    total_s: list[float] = []
    update_s: list[float] = []
    embed_s: list[float] = []
    search_s: list[float] = []
    embedded_counts: list[int] = []
    missed = []
    try:
        for i in range(edits + 1 + (profile is not None)):  # the first is a warm-up
            profiling = profile is not None and i == edits + 1
            rel = files[i % len(files)]
            probe = Probe(i, nonce)
            original = originals[rel]
            text = original + ("" if original.endswith("\n") else "\n") + probe.code.lstrip("\n")
            span_start = text[: text.index(f"def {probe.ident}")].count("\n") + 1
            span = (span_start, span_start + 5)  # def .. return
            gc.collect()
            if profiling:
                profile.enable()  # type: ignore[union-attr]
            t0 = time.perf_counter()
            (root / rel).write_text(text, encoding="utf-8", errors="surrogateescape")
            updated = idx.update_paths([rel])  # a dense index embeds the new chunks too
            t1 = time.perf_counter()
            n = updated.embedded
            if dense:
                while True:
                    hits = idx.search(probe.sentence, limit=10, mode="dense")
                    if _found(hits, rel, span) or time.perf_counter() - t0 > give_up_s:
                        break
            else:
                while True:
                    hits = idx.search(probe.ident, limit=10, mode="lexical")
                    if _found(hits, rel, span) or time.perf_counter() - t0 > give_up_s:
                        break
            t3 = time.perf_counter()
            found = _found(hits, rel, span)
            if profiling:
                profile.disable()  # type: ignore[union-attr]
            if i == 0 or profiling:
                continue
            if not found:
                missed.append(
                    {
                        "edit": i,
                        "file": rel,
                        "probe": probe.ident,
                        "top_hits": [f"{h.path}:{h.start_line}-{h.end_line}" for h in hits[:3]],
                    }
                )
            total_s.append(t3 - t0)
            update_s.append(t1 - t0)
            embed_s.append(updated.embed_seconds)
            search_s.append(t3 - t1)
            embedded_counts.append(n)
    finally:
        for rel, text in originals.items():
            (root / rel).write_text(text, encoding="utf-8", errors="surrogateescape")
        idx.update_paths(list(originals))
    out: dict[str, Any] = {
        "edits": len(total_s),
        "files": {rel: (root / rel).stat().st_size for rel in files},
        "save_to_searchable": stats(total_s),
        "write_plus_update_paths": stats(update_s),
        "search_until_found": stats(search_s),
        "found": len(total_s) - len(missed),
        "missed": missed,
    }
    if dense:
        out["of_which_embedding"] = stats(embed_s)
    if profile is not None:
        out["profile_of_one_save"] = {
            "top_own_time": profile_top(profile, limit=10),
            "index_functions_by_cumulative_time": profile_top(
                profile, limit=10, key="cumulative", prefix="index/"
            ),
        }
        out["chunks_embedded_per_save"] = {
            "median": statistics.median(embedded_counts) if embedded_counts else 0,
            "max": max(embedded_counts, default=0),
        }
    return out


# --------------------------------------------------------- 4./5. queries
def run_queries(
    idx: Any, queries: Sequence[str], mode: str, **options: Any
) -> tuple[list[list[Any]], list[float]]:
    results, times = [], []
    for query in queries:
        started = time.perf_counter()
        hits = idx.search(query, limit=10, mode=mode, **options)
        times.append(time.perf_counter() - started)
        results.append(hits)
    return results, times


def bench_latency(idx: Any, queries: Sequence[str]) -> dict[str, Any]:
    """p50/p95 of each mode over the queries (after one warm-up query per mode)."""
    out = {}
    for mode in MODES:
        idx.search(queries[0], limit=10, mode=mode)
        _, times = run_queries(idx, queries, mode)
        out[mode] = stats(times)
    return out


def dense_breakdown(idx: Any, embedder: Any, queries: Sequence[str]) -> dict[str, Any]:
    """Where a dense query's time goes: embedding the query, and searching the vector
    store alone (the index's private store: a diagnostic)."""
    embed_s, store_s = [], []
    store = getattr(idx, "_vectors", None)
    for query in queries:
        started = time.perf_counter()
        vector = np.asarray(embedder.embed([query]), dtype=np.float32)[0]
        embed_s.append(time.perf_counter() - started)
        if store is not None:
            started = time.perf_counter()
            store.search(vector, 50)
            store_s.append(time.perf_counter() - started)
    return {
        "query_embedding": stats(embed_s),
        "vector_store_search_k50": stats(store_s) if store_s else None,
    }


def bench_quality(idx: Any, eval_set: EvalSet) -> dict[str, Any]:
    targets = eval_set.targets
    queries = [t.query for t in targets]
    out: dict[str, Any] = {}
    per_query: dict[str, list[int | None]] = {}
    for mode in MODES:
        idx.search(queries[0], limit=10, mode=mode)
        results, times = run_queries(idx, queries, mode)
        ranks = []
        spans = []
        for hits, target in zip(results, targets, strict=True):
            rank = next((r for r, h in enumerate(hits[:10], 1) if is_relevant(h, target)), None)
            ranks.append(rank)
            if rank is not None:
                hit = hits[rank - 1]
                spans.append(hit.end_line - hit.start_line + 1)
        per_query[mode] = ranks
        out[mode] = {
            "mrr_at_10": round(mrr_at_k(results, targets, 10), 4),
            "recall_at_10": round(recall_at_k(results, targets, 10), 4),
            "recall_at_1": round(recall_at_k(results, targets, 1), 4),
            "latency": stats(times),
            "median_lines_of_relevant_hit": statistics.median(spans) if spans else None,
        }
    best_single = max(out["lexical"]["mrr_at_10"], out["dense"]["mrr_at_10"])
    margin = round((out["hybrid"]["mrr_at_10"] - best_single) * 100, 2)
    lex, den = per_query["lexical"], per_query["dense"]
    out["hybrid_minus_best_single_mrr_points"] = margin
    out["overlap"] = {
        "found_by_both": sum(
            a is not None and b is not None for a, b in zip(lex, den, strict=True)
        ),
        "lexical_only": sum(a is not None and b is None for a, b in zip(lex, den, strict=True)),
        "dense_only": sum(a is None and b is not None for a, b in zip(lex, den, strict=True)),
        "neither": sum(a is None and b is None for a, b in zip(lex, den, strict=True)),
    }
    # Diagnostic: the same without the cap on chunks per file (the target's file is
    # often the one holding most of the near misses).
    uncapped = {}
    for mode in MODES:
        results, _ = run_queries(idx, queries, mode, per_file=10)
        uncapped[mode] = {
            "mrr_at_10": round(mrr_at_k(results, targets, 10), 4),
            "recall_at_10": round(recall_at_k(results, targets, 10), 4),
        }
    out["without_per_file_cap"] = uncapped
    out["per_query_ranks"] = [
        {"qid": t.qid, **{m: per_query[m][i] for m in MODES}} for i, t in enumerate(targets)
    ]
    return out


def index_disk(idx_dir: Path, chunks: int) -> dict[str, Any]:
    total = dir_bytes(idx_dir)
    vectors = dir_bytes(idx_dir / "vectors") if (idx_dir / "vectors").exists() else 0
    return {
        "bytes": total,
        "mib": mib(total),
        "vector_store_bytes": vectors,
        "bytes_per_chunk": round(total / max(chunks, 1)),
        "bytes_per_chunk_without_vectors": round((total - vectors) / max(chunks, 1)),
    }


def store_stats(idx: Any) -> dict[str, Any] | None:
    store = getattr(idx, "_vectors", None)
    with contextlib.suppress(Exception):
        return store.stats() if store is not None else None
    return None


# ------------------------------------------------------------------- driver
def machine_info() -> dict[str, Any]:
    mem = ""
    with contextlib.suppress(OSError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    versions = {}
    for name in ("numpy", "faiss", "torch", "tokenizers", "tree_sitter"):
        with contextlib.suppress(Exception):
            versions[name] = __import__(name).__version__
    import sqlite3

    return {**common.machine_info(), "memory": mem, "sqlite": sqlite3.sqlite_version, **versions}


def make_plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "cold_runs": 1,
            "rg_repeats": 3,
            "profile_update": False,
            "throughput_chunks": 1024,
            "save_files": 5,
            "save_edits": 10,
            "eval_queries": 60,
            "eval_max_bytes": 250_000,
            "levels": [{"name": "networkx", "packages": ["networkx"]}],
            "level_queries": 60,
            "level_save_edits": 5,
            "site_packages_cold": False,
        }
    return {
        "cold_runs": 3,
        "rg_repeats": 10,
        "profile_update": True,
        "throughput_chunks": 8192,
        "save_files": 10,
        "save_edits": 30,
        "eval_queries": 300,
        "eval_max_bytes": 4_500_000,
        "levels": [{"name": "100k", "packages": ["torch", "sympy", "pip"]}],
        "level_queries": 300,
        "level_save_edits": 10,
        "site_packages_cold": True,
    }


def bench_level(
    spec: dict[str, Any],
    work: Path,
    embedder: Any,
    queries: Sequence[str],
    plan: dict[str, Any],
    nonce: str,
) -> dict[str, Any]:
    """Embedding, query latency, memory and the save pipeline on an index of a given
    size, every chunk embedded for real."""
    from index.indexer import CodeIndex

    name = spec["name"]
    tree = work / f"level-{name}"
    if "packages" in spec:
        log(f"level {name}: copying {', '.join(spec['packages'])} from site-packages")
        copy_packages(tree, spec["packages"])
        corpus: dict[str, Any] = {"packages": spec["packages"], "suffixes": list(TEXT_SUFFIXES)}
    else:
        log(f"level {name}: copying about {spec['stdlib_bytes']} bytes of the stdlib")
        subset = build_eval_set(tree, n_queries=0, seed=1, max_bytes=spec["stdlib_bytes"])
        corpus = {"stdlib_units": len(subset.units), "no_tests": True}
    corpus.update(tree_summary(tree))
    cache = work / f"level-{name}-cache"
    idx = CodeIndex(tree, cache_dir=cache, embedder=embedder, dense=True)
    t = time.perf_counter()
    st = idx.update()  # chunks, lexical index and every vector
    update_s = time.perf_counter() - t
    embedded, embed_s = st.embedded, st.embed_seconds
    status = idx.status()
    log(
        f"  {st.files} files, {st.chunks} chunks in {update_s:.1f} s, of which embedding "
        f"{embed_s:.1f} s; query latency over {status.chunks} chunks"
    )
    latency = bench_latency(idx, queries)
    latency["breakdown"] = dense_breakdown(idx, embedder, queries)
    log(
        "  p95 lexical/dense/hybrid "
        + "/".join(f"{latency[m]['p95_ms']:.1f}" for m in MODES)
        + " ms; save pipeline"
    )
    scan_s = []
    for _ in range(5):
        t = time.perf_counter()
        idx.pending_count()  # the same NOT EXISTS join embed_pending starts with
        scan_s.append(time.perf_counter() - t)
    files = pick_files(tree, plan["save_files"], 8_000, 40_000, seed=5)
    save = bench_save(
        idx,
        tree,
        files,
        plan["level_save_edits"],
        dense=True,
        nonce=nonce,
        profile_last=True,
    )
    store = store_stats(idx)
    idx.close()
    disk = index_disk(cache, status.chunks)
    log(f"  memory: a fresh process opens the {name} index")
    memory = run_worker(
        {"kind": "memory", "root": str(tree), "cache": str(cache), "queries": list(queries[:50]),
         "chunks": status.chunks}
    )  # fmt: skip
    return {
        "corpus": corpus,
        "files": st.files,
        "chunks": status.chunks,
        "update_s": round(update_s, 3),  # to searchable, lexically and densely
        "update_chunks_per_s": round(st.chunks / update_s, 1) if update_s else None,
        "of_which_embedding_s": round(embed_s, 3),
        "embed_chunks_per_s": round(embedded / embed_s, 1) if embed_s else None,
        "pending_count_when_none_pending": stats(scan_s),
        "dense_vectors": f"{embedder.name} for {status.embedded} of {status.chunks} chunks",
        "vector_store": store,
        "latency": latency,
        "disk": disk,
        "memory": memory,
        "save_dense": save,
    }


def run_benchmark(quick: bool, work: Path) -> dict[str, Any]:
    from index.indexer import CodeIndex

    plan = make_plan(quick)
    load_before = os.getloadavg()
    started = time.perf_counter()
    nonce = _letters(int(time.time()) % 26**4)
    result: dict[str, Any] = {}

    # ---- 1. the stdlib: cold start against ripgrep, where the time goes
    log("copying the standard library")
    stdlib = copy_stdlib(work / "stdlib")
    result["stdlib_corpus"] = {"source": str(stdlib_source()), **tree_summary(stdlib)}
    cold = bench_cold(stdlib, work, plan)
    log("ripgrep anchor")
    cold["ripgrep_anchor"] = bench_rg(stdlib, plan["rg_repeats"])
    if plan["profile_update"]:
        log("profiling one cold update()")
        cold["profile"] = bench_profile_update(stdlib, work)
    if plan["site_packages_cold"]:
        log(f"cold start on the whole site-packages in place ({site_packages()})")
        cache = work / "site-packages-cache"
        sp = run_worker(
            {"kind": "cold", "root": str(site_packages()), "cache": str(cache), "query": COLD_QUERY,
             "timers": True}
        )  # fmt: skip
        sp["disk"] = index_disk(cache, sp["chunks"])
        shutil.rmtree(cache, ignore_errors=True)
        cold["site_packages"] = {
            "root": str(site_packages()),
            "tree": tree_summary(site_packages()),
            **sp,
        }
        log(
            f"  first lexical result after {sp['first_result_s']:.1f} s ({sp['files']} files, {sp['chunks']} chunks)"
        )
    result["cold_start"] = cold

    # ---- 2. dense throughput on the stdlib index, 3a. lexical saves there
    log("loading the embedding model")
    t = time.perf_counter()
    embedder = index_embedder()
    model_load_s = time.perf_counter() - t
    timed = TimedEmbedder(embedder)
    # The cold runs' index is lexical (every chunk waits for a vector); a dense index's
    # update() would embed them all, so the rescan and the lexical saves use it as it is.
    idx = CodeIndex(stdlib, cache_dir=Path(cold["cache_dir"]), dense=False)
    t = time.perf_counter()
    rescan = idx.update()
    cold["unchanged_rescan_s"] = round(time.perf_counter() - t, 3)
    cold["unchanged_rescan_changed_files"] = rescan.changed_files
    log(f"save-to-searchable, lexical: {plan['save_edits']} saves on the stdlib index")
    files = pick_files(stdlib, plan["save_files"], 8_000, 40_000, seed=3)
    save_lexical = bench_save(
        idx, stdlib, files, plan["save_edits"], dense=False, nonce=nonce, profile_last=True
    )
    save_lexical["index_chunks"] = idx.status().chunks
    result["save_lexical"] = save_lexical
    log(
        f"  p50 {save_lexical['save_to_searchable']['p50_ms']} ms, "
        f"p95 {save_lexical['save_to_searchable']['p95_ms']} ms"
    )
    idx.close()
    idx = CodeIndex(stdlib, cache_dir=Path(cold["cache_dir"]), embedder=timed, dense=True)
    log(f"dense throughput: embed_pending(limit={plan['throughput_chunks']}) on the stdlib index")
    throughput = bench_throughput(idx, timed, plan["throughput_chunks"])
    throughput["model_load_s"] = round(model_load_s, 3)
    throughput["model"] = embedder.name
    result["dense_throughput"] = throughput
    log(
        f"  {throughput['chunks_per_s']} chunks/s; full stdlib "
        f"~{throughput['extrapolated_full_embed_s']} s"
    )
    idx.close()
    log("cold start of the default (dense) index: update() embeds every chunk")
    dense_cache = work / "stdlib-dense-cache"
    shutil.rmtree(dense_cache, ignore_errors=True)
    dense_cold = run_worker(
        {"kind": "cold", "root": str(stdlib), "cache": str(dense_cache), "query": COLD_QUERY,
         "dense": True}
    )  # fmt: skip
    shutil.rmtree(dense_cache, ignore_errors=True)
    cold["dense"] = dense_cold
    log(
        f"  first hybrid result after {dense_cold['first_result_s']:.1f} s "
        f"(embedding {dense_cold['of_which_embedding_s']:.1f} s of it)"
    )

    # ---- 5. quality on the docstring set, 4. latency with real vectors, 3b. dense saves
    log("building the docstring evaluation set")
    eval_set = build_eval_set(
        work / "eval", n_queries=plan["eval_queries"], seed=0, max_bytes=plan["eval_max_bytes"]
    )
    eval_root = Path(eval_set.root)
    eval_cache = work / "eval-cache"
    timed.reset()
    idx = CodeIndex(eval_root, cache_dir=eval_cache, embedder=timed, dense=True)
    t = time.perf_counter()
    st = idx.update()  # chunks, lexical index and every vector
    update_s = time.perf_counter() - t
    embedded, embed_s = st.embedded, st.embed_seconds
    log(
        f"  {st.files} files, {st.chunks} chunks, {len(eval_set.targets)} queries; "
        f"indexed in {update_s:.1f} s, of which embedding {embed_s:.1f} s"
    )
    status = idx.status()
    eval_index = {
        "files": st.files,
        "chunks": status.chunks,
        "embedded": status.embedded,
        "update_s": round(update_s, 3),
        "of_which_embedding_s": round(embed_s, 3),
        "embedded_now": embedded,
        "chunks_per_s": round(embedded / embed_s, 1) if embed_s else None,
        "embedder": timed.report(),
        "vector_store": store_stats(idx),
        "disk": index_disk(eval_cache, status.chunks),
    }
    log(f"  embedded {embedded} in {embed_s:.1f} s ({eval_index['chunks_per_s']} chunks/s)")
    log("retrieval quality: lexical, dense, hybrid")
    quality = bench_quality(idx, eval_set)
    for mode in MODES:
        log(
            f"  {mode}: MRR@10 {quality[mode]['mrr_at_10']:.3f}, "
            f"Recall@10 {quality[mode]['recall_at_10']:.3f}"
        )
    eval_breakdown = dense_breakdown(idx, embedder, [t.query for t in eval_set.targets[:100]])
    log(f"save-to-searchable, dense: {plan['save_edits']} saves on the eval index")
    eval_files = pick_files(eval_root, plan["save_files"], 8_000, 40_000, seed=4)
    save_dense = bench_save(
        idx, eval_root, eval_files, plan["save_edits"], dense=True, nonce=nonce, profile_last=True
    )
    save_dense["index_chunks"] = idx.status().chunks
    log(
        f"  p50 {save_dense['save_to_searchable']['p50_ms']} ms, "
        f"p95 {save_dense['save_to_searchable']['p95_ms']} ms, "
        f"found {save_dense['found']}/{save_dense['edits']}"
    )
    idx.close()
    log("memory: a fresh process opens the eval index")
    memory_eval = run_worker(
        {"kind": "memory", "root": str(eval_root), "cache": str(eval_cache),
         "queries": [t.query for t in eval_set.targets[:50]], "chunks": eval_index["chunks"]}
    )  # fmt: skip
    levels = {
        "eval": {
            "chunks": eval_index["chunks"],
            "dense_vectors": f"{embedder.name} for every chunk",
            "latency": {
                **{mode: quality[mode]["latency"] for mode in MODES},
                "breakdown": eval_breakdown,
            },
            "disk": eval_index["disk"],
            "memory": memory_eval,
        }
    }

    # ---- 4. latency and memory at larger sizes
    queries = [t.query for t in eval_set.targets]
    queries = (queries * (plan["level_queries"] // max(len(queries), 1) + 1))[
        : plan["level_queries"]
    ]
    for spec in plan["levels"]:
        levels[spec["name"]] = bench_level(spec, work, embedder, queries, plan, nonce)

    elapsed = time.perf_counter() - started
    result.update(
        {
            "eval_set": {**eval_set.corpus(), "index": eval_index},
            "quality": quality,
            "save_dense": save_dense,
            "levels": levels,
        }
    )
    return finish(result, plan, quick, load_before, elapsed)


def marginal_rss(levels: dict[str, Any]) -> int | None:
    """RSS bytes per extra chunk between the smallest and the largest index (the fixed
    costs of an open index cancel out)."""
    ordered = sorted(levels.values(), key=lambda level: level["chunks"])
    small, large = ordered[0], ordered[-1]
    extra = large["chunks"] - small["chunks"]
    if extra <= 0:
        return None
    grown = large["memory"]["rss_growth_dense_mib"] - small["memory"]["rss_growth_dense_mib"]
    return round(grown * 2**20 / extra)


def finish(
    result: dict[str, Any], plan: dict[str, Any], quick: bool, load_before: Any, elapsed: float
) -> dict[str, Any]:
    cold = result["cold_start"]
    rg = cold["ripgrep_anchor"]
    rg_ms = rg.get(f"word {RG_WORDS[0]!r}", {}).get("p50_ms") if rg.get("available") else None
    q = result["quality"]
    levels = result["levels"]
    best = max(q["lexical"]["mrr_at_10"], q["dense"]["mrr_at_10"])
    save_lex = result["save_lexical"]["save_to_searchable"]
    save_den = result["save_dense"]["save_to_searchable"]
    p95s = [levels[name]["latency"][m]["p95_ms"] for name in levels for m in MODES]
    summary: dict[str, Any] = {
        "cold_start_first_lexical_s": cold["first_result_s_median"],
        "cold_start_target_s": COLD_TARGET_S,
        "cold_start_target_met": cold["first_result_s_max"] < COLD_TARGET_S,
        "stdlib_files": cold["runs"][0]["files"],
        "stdlib_chunks": cold["runs"][0]["chunks"],
        "ripgrep_word_ms": rg_ms,
        "cold_start_vs_ripgrep": round(cold["first_result_s_median"] * 1000 / rg_ms, 1)
        if rg_ms
        else None,
        "cold_start_dense_first_hybrid_s": cold["dense"]["first_result_s"],
        "cold_start_dense_embedding_s": cold["dense"]["of_which_embedding_s"],
        "site_packages_cold_start_s": cold.get("site_packages", {}).get("first_result_s"),
        "site_packages_chunks": cold.get("site_packages", {}).get("chunks"),
        "dense_chunks_per_s": result["dense_throughput"]["chunks_per_s"],
        "dense_chunks_per_s_eval_corpus": result["eval_set"]["index"]["chunks_per_s"],
        **{
            f"dense_chunks_per_s_{name}": level["embed_chunks_per_s"]
            for name, level in levels.items()
            if "embed_chunks_per_s" in level
        },
        **{
            f"save_dense_p95_ms_{name}": level["save_dense"]["save_to_searchable"]["p95_ms"]
            for name, level in levels.items()
            if "save_dense" in level
        },
        "stdlib_full_embed_s_extrapolated": result["dense_throughput"]["extrapolated_full_embed_s"],
        "save_lexical_p50_ms": save_lex["p50_ms"],
        "save_lexical_p95_ms": save_lex["p95_ms"],
        "save_lexical_target_ms": SAVE_LEXICAL_TARGET_MS,
        "save_lexical_target_met": save_lex["p95_ms"] < SAVE_LEXICAL_TARGET_MS
        and not result["save_lexical"]["missed"],
        "save_dense_p50_ms": save_den["p50_ms"],
        "save_dense_p95_ms": save_den["p95_ms"],
        "save_dense_target_ms": SAVE_DENSE_TARGET_MS,
        "save_dense_target_met": save_den["p95_ms"] < SAVE_DENSE_TARGET_MS
        and not result["save_dense"]["missed"],
        "save_dense_missed": len(result["save_dense"]["missed"]),
        **{
            f"query_p95_ms_{name}_{m}": levels[name]["latency"][m]["p95_ms"]
            for name in levels
            for m in MODES
        },
        **{f"chunks_{name}": levels[name]["chunks"] for name in levels},
        "dense_vectors": {name: levels[name]["dense_vectors"] for name in levels},
        "query_target_ms": QUERY_TARGET_MS,
        "query_target_met": max(p95s) < QUERY_TARGET_MS,
        **{
            f"disk_bytes_per_chunk_{name}": levels[name]["disk"]["bytes_per_chunk"]
            for name in levels
        },
        **{
            f"rss_bytes_per_chunk_{name}": levels[name]["memory"]["rss_bytes_per_chunk_all"]
            for name in levels
        },
        "rss_bytes_per_chunk_marginal": marginal_rss(levels),
        "eval_queries": result["eval_set"]["queries"],
        "eval_chunks": result["eval_set"]["index"]["chunks"],
        **{f"mrr10_{m}": q[m]["mrr_at_10"] for m in MODES},
        **{f"recall10_{m}": q[m]["recall_at_10"] for m in MODES},
        "hybrid_minus_best_single_mrr_points": q["hybrid_minus_best_single_mrr_points"],
        "hybrid_margin_target_points": HYBRID_MARGIN_TARGET,
        "hybrid_margin_target_met": (q["hybrid"]["mrr_at_10"] - best) * 100 >= HYBRID_MARGIN_TARGET,
        "peak_rss_mib": mib(peak_rss_bytes()),
    }
    return {
        "benchmark": "index",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python -m bench.index" + (" --quick" if quick else "") + " --json",
        "machine": machine_info(),
        "source": common.source_state(),
        "plan": plan,
        **result,
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "elapsed_s": round(elapsed, 1),
        "summary": summary,
    }


def one_line(s: dict[str, Any]) -> str:
    def mark(ok: bool | None) -> str:
        return "n/a" if ok is None else ("ok" if ok else "MISSED")

    names = [key.removeprefix("chunks_") for key in s if key.startswith("chunks_")]
    latency = "; ".join(
        f"@{s['chunks_' + n]} " + "/".join(f"{s[f'query_p95_ms_{n}_{m}']:.0f}" for m in MODES)
        for n in names
    )
    return (
        f"index: cold start {s['cold_start_first_lexical_s']:.2f} s to first lexical result "
        f"({s['stdlib_chunks']} chunks; rg {s['ripgrep_word_ms']} ms; "
        f"target < {COLD_TARGET_S:g} s: {mark(s['cold_start_target_met'])}), "
        f"{s['cold_start_dense_first_hybrid_s']:.2f} s to first hybrid result; "
        f"dense {s['dense_chunks_per_s']:.1f} chunks/s; "
        f"save p95 lexical {s['save_lexical_p95_ms']:.0f} ms "
        f"({mark(s['save_lexical_target_met'])}), dense {s['save_dense_p95_ms']:.0f} ms "
        f"({mark(s['save_dense_target_met'])}); query p95 lex/dense/hybrid ms {latency} "
        f"({mark(s['query_target_met'])}); MRR@10 lex/dense/hybrid "
        f"{s['mrr10_lexical']:.3f}/{s['mrr10_dense']:.3f}/{s['mrr10_hybrid']:.3f} "
        f"(hybrid {s['hybrid_minus_best_single_mrr_points']:+.1f} pts: "
        f"{mark(s['hybrid_margin_target_met'])})"
    )


def table(result: dict[str, Any]) -> str:
    s = result["summary"]
    m = result["machine"]
    lines = [
        f"machine: {m['cpu_count']} CPUs ({m['cpu_model']}), Python {m['python']}, {m['platform']}",
        "",
        f"cold start to first lexical result: {s['cold_start_first_lexical_s']} s "
        f"({s['stdlib_files']} files, {s['stdlib_chunks']} chunks); "
        f"rg word {s['ripgrep_word_ms']} ms",
        f"dense throughput: {s['dense_chunks_per_s']} chunks/s (subset), "
        f"{s['dense_chunks_per_s_eval_corpus']} chunks/s (eval corpus); "
        f"full stdlib ~{s['stdlib_full_embed_s_extrapolated']} s",
        f"save-to-searchable: lexical p50 {s['save_lexical_p50_ms']} / "
        f"p95 {s['save_lexical_p95_ms']} ms; dense p50 {s['save_dense_p50_ms']} / "
        f"p95 {s['save_dense_p95_ms']} ms",
        "",
        f"{'query latency ms':<24} {'lexical p50/p95':>16} {'dense p50/p95':>16} "
        f"{'hybrid p50/p95':>16}",
    ]
    for name, level in result["levels"].items():
        lat = level["latency"]
        cells = [f"{lat[mo]['p50_ms']:.1f}/{lat[mo]['p95_ms']:.1f}" for mo in MODES]
        label = f"{name} ({level['chunks']} chunks)"
        lines.append(f"{label:<24} " + " ".join(f"{c:>16}" for c in cells))
    lines.append("")
    q = result["quality"]
    lines.append(
        f"quality ({s['eval_queries']} queries, {s['eval_chunks']} chunks): mode, MRR@10, Recall@10"
    )
    for mo in MODES:
        lines.append(f"   {mo:>8} {q[mo]['mrr_at_10']:.3f} {q[mo]['recall_at_10']:.3f}")
    lines.append(f"   hybrid - best single: {s['hybrid_minus_best_single_mrr_points']:+.2f} points")
    lines.append("")
    for name, level in result["levels"].items():
        lines.append(
            f"memory {name}: disk {level['disk']['bytes_per_chunk']} B/chunk, "
            f"RSS {level['memory']['rss_bytes_per_chunk_all']} B/chunk"
        )
    lines.append(f"peak RSS {s['peak_rss_mib']} MiB; elapsed {result['elapsed_s']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.index", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--quick", action="store_true", help="small corpora, few repeats (a smoke run)"
    )
    parser.add_argument("--work", type=Path, default=None, help="work directory to use and keep")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker is not None:
        spec = json.loads(options.worker)
        print(json.dumps(WORKERS[spec["kind"]](spec)))
        return 0
    if options.work is not None:
        options.work.mkdir(parents=True, exist_ok=True)
        if any(options.work.iterdir()):
            parser.error(f"{options.work} is not empty")
        result = run_benchmark(options.quick, options.work)
    else:
        with tempfile.TemporaryDirectory(prefix="tachy-bench-index-") as tmp:
            result = run_benchmark(options.quick, Path(tmp))
    common.report(result, options.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
