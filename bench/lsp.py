"""Benchmark of the language server over stdio (issue 4).

    python -m bench.lsp [--json] [--corpus PATH] [--queries N] [--sizes SPEC ...]
                        [--repeats N] [--rounds N] [--runs N] [--turns N] [--work DIR]

`tachy serve` is started as a subprocess and driven by a lean JSON-RPC client in this
file (Content-Length framing over the child's stdin/stdout, as an editor does; it
answers the server's requests: progress tokens, registrations, configuration,
applyEdit). Every figure is set against an anchor measured in the same run:

1. tachy/search round trip over stdio, p50/p95 (target p95 < 50 ms), for each corpus
   size, after waiting for tachy/index/status to say lexical/ready. Queries: a fixed
   list of realistic code-search queries, answered `--repeats` times after a warm-up
   pass. Anchor: the same queries through `CodeIndex(corpus, cache_dir=<the server's
   index>, dense=False).search` in this process, after the server has exited (the
   floor); the summary holds the ratio. Also: the round trip of a request whose
   handler does nothing (tachy/review/list), the transport's own floor; the initial
   index time (from `initialized` to the status saying lexical, polled every 50 ms)
   against `CodeIndex.update()` on a fresh cache in this process.
2. didChange to searchable: a document of the corpus is opened (didOpen), then each
   round sends an incremental didChange appending a function with a fresh unique
   name and polls tachy/search (mode lexical) until a result covers that function.
   Anchor: `CodeIndex.update_texts({path: text})` + the same search, in process.
3. Tool completion to its tachy/agent/event notification (target p95 < 20 ms): a
   replay policy (a JSONL file) drives agent runs in a small temporary workspace,
   one tool call per turn (read_file, grep, run_terminal_cmd `true`, list_dir,
   file_search), approval "auto". Each tool_result event's meta carries
   `finished_at` (the server's time.time() when the tool finished); the client
   records its receive time minus that. Anchor: the same replay through
   `agent.executor.Executor` in process, with an on_event callback doing the same.
4. Server memory: VmRSS / VmHWM of the server process (and the RSS of its whole
   process tree: the indexer's forkserver workers are its children), idle after
   initialize + index of the agent workspace, idle after each corpus's index, and
   sampled every 10 ms during agent runs. Anchor: a bare
   `python -c "import pygls.lsp.server ..."` process.

The default corpus is the running interpreter's standard library
(`sysconfig.get_paths()["stdlib"]`), copied to a temporary directory without
site-packages and caches (the directory holds the interpreter's site-packages,
which is not "the standard library"); nothing is ever written into it. A corpus
given with --corpus is indexed in place. The index always lives in a temporary
directory (initializationOptions {"index": {"dense": false, "cacheDir": ...}}):
lexical only, because the embedding pass over the standard library takes about 40
minutes on two cores (bench/RESULTS.md, index); with dense off, the server's default
"hybrid" search is lexical search.

Sizes: each SPEC is `full` (the whole corpus) or a comma-separated list of the
corpus's top-level entries, copied into a directory of their own (default:
`email,json full`). The largest size gives the headline figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.common import ms, stats
from bench.index import copy_stdlib, stdlib_source

REPO = Path(__file__).resolve().parent.parent
SEARCH_TARGET_MS = 50.0
NOTIFY_TARGET_MS = 20.0
DEFAULT_SIZES = ("email,json", "full")
SEARCH_LIMIT = 10
POLL_GAP_S = 0.002  # pause between two searches while waiting for a change
GIVE_UP_S = 10.0
RSS_SAMPLE_S = 0.01
IDLE_SETTLE_S = 1.0
# Files the didChange rounds open, in order of preference (the same file at every
# size where it exists); otherwise the first .py file of 8-40 KB in path order.
CHANGE_FILES = ("email/feedparser.py", "json/decoder.py")
BARE_PYGLS = "import pygls.lsp.server, sys, time; print('ready', flush=True); time.sleep(2)"

QUERIES = (
    "parse http headers",
    "json decoder",
    "thread pool executor shutdown",
    "read a gzip file",
    "tarfile extract all members",
    "url quote unsafe characters",
    "base64 encode bytes",
    "smtp send mail",
    "parse command line arguments",
    "format a traceback",
    "subprocess run with timeout",
    "temporary directory cleanup",
    "socket connect timeout",
    "ssl wrap socket",
    "logging rotating file handler",
    "csv dict writer",
    "sqlite3 connection",
    "decimal rounding",
    "fractions greatest common divisor",
    "datetime strftime format",
    "timezone utc offset",
    "regular expression compile flags",
    "pickle protocol dump",
    "copy deepcopy memo",
    "dataclass field default factory",
    "enum auto value",
    "functools lru cache",
    "itertools chain from iterable",
    "heapq push pop",
    "bisect insort",
    "asyncio event loop run until complete",
    "asyncio gather tasks",
    "queue get nowait",
    "zipfile write compressed",
    "shutil copy tree ignore patterns",
    "os walk directory tree",
    "pathlib glob recursive",
    "fnmatch translate pattern",
    "email message get payload",
    "mime multipart boundary",
    "html escape",
    "xml element tree parse",
    "configparser read ini file",
    "hashlib sha256 digest",
    "random choice weights",
    "statistics median",
    "textwrap dedent",
    "unittest assert raises",
    "inspect signature parameters",
    "importlib import module",
)


# ------------------------------------------------------------------ helpers
_START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def mb(n_bytes: float) -> float:
    return round(n_bytes / 2**20, 1)


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def proc_memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in bytes."""
    out = {"rss": 0, "hwm": 0}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                out["hwm"] = int(line.split()[1]) * 1024
    return out


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def memory_snapshot(pid: int) -> dict[str, Any]:
    """The server's RSS and peak, and the RSS of it with all its descendants, in MB."""
    own = proc_memory(pid)
    kids = descendants(pid)
    tree = own["rss"] + sum(proc_memory(k)["rss"] for k in kids)
    return {
        "rss_mb": mb(own["rss"]),
        "hwm_mb": mb(own["hwm"]),
        "tree_rss_mb": mb(tree),
        "descendants": len(kids),
    }


def tree_summary(root: Path) -> dict[str, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return {
        "files": len(files),
        "py_files": sum(p.suffix == ".py" for p in files),
        "bytes": sum(p.stat().st_size for p in files),
    }


def _letters(n: int, width: int = 4) -> str:
    out = ""
    for _ in range(width):
        n, r = divmod(n, 26)
        out = chr(ord("a") + r) + out
    return out


# ---------------------------------------------------------------- corpora


def make_size(corpus: Path, spec: str, work: Path) -> tuple[str, Path]:
    """(name, root) of one size: the corpus itself, or copies of some of its entries."""
    if spec == "full":
        return "full", corpus
    names = [n.strip().strip("/") for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError(f"empty size spec {spec!r}")
    name = "+".join(names)
    root = work / "sizes" / name.replace("/", "_")
    for entry in names:
        source = corpus / entry
        if source.is_dir():
            shutil.copytree(
                source,
                root / entry,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                symlinks=True,
            )
        elif source.is_file():
            (root / entry).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, root / entry)
        else:
            raise FileNotFoundError(f"size {spec!r}: {source} does not exist")
    return name, root


def change_file(root: Path) -> str:
    for rel in CHANGE_FILES:
        if (root / rel).is_file():
            return rel
    pool = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if p.is_file() and 8_000 <= p.stat().st_size <= 40_000
    )
    if not pool:
        pool = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file())
    if not pool:
        raise FileNotFoundError(f"no .py file in {root} to change")
    return pool[0]


# ------------------------------------------------------------- LSP client
class ServerError(RuntimeError):
    pass


class LspClient:
    """A minimal LSP client over a `tachy serve` subprocess's stdio."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._ids = iter(range(1, 10**9))
        self._pending: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        # (client time.time() at receipt, params) of each tachy/agent/event
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.messages: list[str] = []  # window/showMessage texts
        self.notifications = 0
        self.last_response_bytes = 0
        self._tasks: set[asyncio.Future] = set()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            limit=2**24,
        )
        self._reader = asyncio.create_task(self._read_loop())

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        body = json.dumps(message, separators=(",", ":")).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await self.proc.stdin.drain()

    async def _read_loop(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        try:
            while True:
                length = None
                while True:
                    line = await stdout.readline()
                    if not line:
                        raise EOFError
                    line = line.strip()
                    if not line:
                        break
                    key, _, value = line.partition(b":")
                    if key.strip().lower() == b"content-length":
                        length = int(value)
                if length is None:
                    continue
                body = await stdout.readexactly(length)
                wall, perf = time.time(), time.perf_counter()
                self._dispatch(json.loads(body), wall, perf, length)
        except (EOFError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(
                        ServerError(f"the server closed its output\n{self.log_tail()}")
                    )

    def _dispatch(self, msg: dict[str, Any], wall: float, perf: float, size: int) -> None:
        method = msg.get("method")
        if method is None:  # a response
            future = self._pending.pop(msg.get("id"), None)
            if future is not None and not future.done():
                if "error" in msg:
                    future.set_exception(ServerError(json.dumps(msg["error"])))
                else:
                    future.set_result((msg.get("result"), perf, size))
            return
        if "id" in msg:  # a request from the server
            task = asyncio.ensure_future(self._answer(msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self.notifications += 1
        if method == "tachy/agent/event":
            self.events.append((wall, msg.get("params") or {}))
        elif method == "window/showMessage":
            self.messages.append((msg.get("params") or {}).get("message", ""))

    async def _answer(self, msg: dict[str, Any]) -> None:
        method, params = msg["method"], msg.get("params") or {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
        if method in ("window/workDoneProgress/create", "client/registerCapability"):
            reply["result"] = None
        elif method == "workspace/configuration":
            reply["result"] = [None for _ in params.get("items", [])]
        elif method == "workspace/applyEdit":
            reply["result"] = {"applied": True}
        else:
            reply["error"] = {"code": -32601, "message": f"{method} is not supported"}
        with contextlib.suppress(ConnectionError):
            await self._send(reply)

    async def request_timed(
        self, method: str, params: Any, timeout: float = 120.0
    ) -> tuple[Any, float]:
        """(result, seconds from sending to the response's arrival); the response's
        size in bytes is kept in `last_response_bytes`."""
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        started = time.perf_counter()
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            result, arrived, self.last_response_bytes = await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(request_id, None)
        return result, arrived - started

    async def request(self, method: str, params: Any, timeout: float = 120.0) -> Any:
        return (await self.request_timed(method, params, timeout))[0]

    async def notify(self, method: str, params: Any) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def initialize(self, folder: Path, options: dict[str, Any]) -> float:
        """initialize + initialized; returns the initialize round trip in seconds."""
        params = {
            "processId": os.getpid(),
            "clientInfo": {"name": "bench.lsp"},
            "rootUri": folder.as_uri(),
            "workspaceFolders": [{"uri": folder.as_uri(), "name": folder.name}],
            "capabilities": {
                "window": {"workDoneProgress": True},
                "workspace": {
                    "applyEdit": True,
                    "workspaceEdit": {"documentChanges": True},
                    "workspaceFolders": True,
                },
                "textDocument": {
                    "synchronization": {"didSave": True, "dynamicRegistration": False}
                },
                "general": {"positionEncodings": ["utf-16"]},
            },
            "initializationOptions": options,
        }
        _, took = await self.request_timed("initialize", params, timeout=60)
        await self.notify("initialized", {})
        return took

    async def wait_indexed(self, timeout: float = 900.0, poll_s: float = 0.05) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = await self.request("tachy/index/status", {})
            if status["state"] in ("lexical", "ready"):
                return status
            if status["state"] == "failed":
                raise ServerError(f"indexing failed: {status}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"index not ready after {timeout} s: {status}")
            await asyncio.sleep(poll_s)

    async def stop(self) -> int | None:
        """shutdown + exit; the server's exit code (None if it had to be killed)."""
        code = None
        if self.proc is not None:
            with contextlib.suppress(Exception):
                await self.request("shutdown", None, timeout=60)
                await self.notify("exit", None)
            try:
                code = await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._log.close()
        return code


async def start_server(
    folder: Path, options: dict[str, Any], log_path: Path
) -> tuple[LspClient, dict[str, Any]]:
    """A started, initialized server whose folder is indexed; with its timings."""
    client = LspClient(log_path)
    spawned = time.perf_counter()
    await client.start()
    try:
        init_s = await client.initialize(folder, options)
        initialized = time.perf_counter()
        status = await client.wait_indexed()
    except BaseException:
        await client.stop()
        raise
    ready = time.perf_counter()
    return client, {
        "initialize_round_trip_ms": ms(init_s),
        "spawn_to_initialized_s": round(initialized - spawned, 3),
        "initial_index_s": round(ready - initialized, 3),
        "index_status": {k: status[k] for k in ("state", "files", "chunks", "embedded")},
    }


def index_options(cache_dir: Path, **extra: Any) -> dict[str, Any]:
    return {"index": {"dense": False, "cacheDir": str(cache_dir)}, **extra}


# ---------------------------------------------------------- 1. search
def hit_key(uri_or_path: str, start_line: int) -> str:
    return f"{uri_or_path}:{start_line}"


async def server_ping(client: LspClient, count: int) -> dict[str, Any]:
    """Round trips of tachy/review/list with nothing to list: a handler that does
    no work, so what it costs is the transport and pygls' dispatch (the floor under
    every custom request)."""
    for _ in range(10):
        await client.request("tachy/review/list", {})
    times = []
    for _ in range(count):
        times.append((await client.request_timed("tachy/review/list", {}))[1])
    return {"method": "tachy/review/list", **stats(times)}


async def server_search(
    client: LspClient, root: Path, queries: Sequence[str], repeats: int
) -> tuple[list[float], list[list[str]], list[int]]:
    """Round trips of each query, `repeats` times after a warm-up pass; the results of
    the last pass as "path:start_line" keys (workspace-relative paths); the sizes of
    the responses."""
    prefix = root.as_uri().rstrip("/") + "/"
    tops: list[list[str]] = []
    sizes: list[int] = []
    for query in queries:  # warm-up
        await client.request("tachy/search", {"query": query, "limit": SEARCH_LIMIT})
    times: list[float] = []
    for r in range(repeats):
        gc.collect()
        for query in queries:
            result, took = await client.request_timed(
                "tachy/search", {"query": query, "limit": SEARCH_LIMIT}
            )
            times.append(took)
            sizes.append(client.last_response_bytes)
            if r == repeats - 1:
                tops.append(
                    [
                        hit_key(
                            item["uri"].removeprefix(prefix), item["range"]["start"]["line"] + 1
                        )
                        for item in result["results"]
                    ]
                )
    return times, tops, sizes


def inprocess_search(
    idx: Any, queries: Sequence[str], repeats: int
) -> tuple[list[float], list[list[str]]]:
    tops: list[list[str]] = []
    for query in queries:
        idx.search(query, limit=SEARCH_LIMIT)
    times: list[float] = []
    for r in range(repeats):
        gc.collect()
        for query in queries:
            started = time.perf_counter()
            hits = idx.search(query, limit=SEARCH_LIMIT)
            times.append(time.perf_counter() - started)
            if r == repeats - 1:
                tops.append([hit_key(h.path, h.start_line) for h in hits])
    return times, tops


def agreement(a: list[list[str]], b: list[list[str]]) -> dict[str, Any]:
    same_top = sum(bool(x) and bool(y) and x[0] == y[0] for x, y in zip(a, b, strict=True))
    same_list = sum(x == y for x, y in zip(a, b, strict=True))
    return {
        "queries": len(a),
        "queries_with_results": sum(bool(x) for x in a),
        "same_top_result": same_top,
        "same_result_list": same_list,
    }


# ------------------------------------------------------- 2. didChange
def probe_code(ident: str, number: int) -> str:
    return (
        f"\n\ndef {ident}(readings, weight=0.5):\n"
        f'    """Probe {number} of the didChange benchmark."""\n'
        f"    total = 0.0\n"
        f"    for reading in readings:\n"
        f"        total += reading * weight\n"
        f"    return total / max(len(readings), 1)\n"
    )


def end_position(text: str) -> dict[str, int]:
    """The LSP position (UTF-16) of the end of `text`."""
    lines = text.split("\n")
    last = lines[-1]
    units = len(last.encode("utf-16-le")) // 2
    return {"line": len(lines) - 1, "character": units}


def covers_lsp(item: dict[str, Any], uri: str, line0: int) -> bool:
    rng = item["range"]
    return item["uri"] == uri and rng["start"]["line"] <= line0 < max(
        rng["end"]["line"], rng["start"]["line"] + 1
    )


async def server_didchange(
    client: LspClient, root: Path, rel: str, rounds: int, nonce: str
) -> dict[str, Any]:
    path = root / rel
    uri = path.as_uri()
    text = path.read_text(encoding="utf-8")
    version = 1
    await client.notify(
        "textDocument/didOpen",
        {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}},
    )
    await asyncio.sleep(0.5)  # let the open's own re-index pass
    totals: list[float] = []
    polls: list[int] = []
    missed = []
    for i in range(rounds + 2):  # two warm-up rounds
        ident = f"tachyprobe{nonce}s{_letters(i)}"
        code = probe_code(ident, i)
        def_line = text.count("\n") + 2  # 0-based line of `def` after the two newlines
        start = end_position(text)
        version += 1
        started = time.perf_counter()
        await client.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {"start": start, "end": start}, "text": code}],
            },
        )
        text += code
        found, count = False, 0
        while not found and time.perf_counter() - started < GIVE_UP_S:
            result = await client.request(
                "tachy/search", {"query": ident, "limit": SEARCH_LIMIT, "mode": "lexical"}
            )
            count += 1
            found = any(covers_lsp(item, uri, def_line) for item in result["results"])
            if not found:
                await asyncio.sleep(POLL_GAP_S)
        took = time.perf_counter() - started
        if i < 2:
            continue
        if found:
            totals.append(took)
            polls.append(count)
        else:
            missed.append(ident)
    await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return {
        "file": rel,
        "file_bytes": path.stat().st_size,
        "rounds": rounds,
        "found": len(totals),
        "missed": missed,
        "didchange_to_searchable": stats(totals),
        "searches_per_round_median": statistics.median(polls) if polls else None,
        "poll_gap_ms": POLL_GAP_S * 1000,
        "note": (
            "from sending didChange to the arrival of the first search response that "
            "covers the new function; includes the server's debounce before it indexes "
            "a change (DEBOUNCE_S in server/indexing.py, 20 ms when this was written) "
            "and the polling granularity (one search round trip + the poll gap)"
        ),
    }


def inprocess_didchange(idx: Any, root: Path, rel: str, rounds: int, nonce: str) -> dict[str, Any]:
    text = (root / rel).read_text(encoding="utf-8")
    totals: list[float] = []
    update_s: list[float] = []
    missed = []
    try:
        for i in range(rounds + 2):
            ident = f"tachyprobe{nonce}a{_letters(i)}"
            def_line = text.count("\n") + 3  # 1-based
            text += probe_code(ident, i)
            data = text.encode("utf-8")
            started = time.perf_counter()
            idx.update_texts({rel: data})
            updated = time.perf_counter()
            found = False
            while not found and time.perf_counter() - started < GIVE_UP_S:
                hits = idx.search(ident, limit=SEARCH_LIMIT, mode="lexical")
                found = any(h.path == rel and h.start_line <= def_line <= h.end_line for h in hits)
            took = time.perf_counter() - started
            if i < 2:
                continue
            if found:
                totals.append(took)
                update_s.append(updated - started)
            else:
                missed.append(ident)
    finally:
        idx.update_texts({rel: None})
    return {
        "file": rel,
        "rounds": rounds,
        "found": len(totals),
        "missed": missed,
        "update_texts_plus_search": stats(totals),
        "update_texts": stats(update_s),
    }


# ------------------------------------------------------------- one size
async def bench_size(
    name: str, root: Path, work: Path, queries: Sequence[str], plan: dict[str, Any]
) -> dict[str, Any]:
    from index.indexer import CodeIndex

    cache = work / f"index-{name.replace('/', '_')}"
    nonce = uuid.uuid4().hex[:6]
    rel = change_file(root)
    log(f"size {name}: starting the server on {root} (lexical index into {cache})")
    client, startup = await start_server(
        root, index_options(cache), work / f"server-{name.replace('/', '_')}.log"
    )
    try:
        log(
            f"size {name}: indexed {startup['index_status']['files']} files, "
            f"{startup['index_status']['chunks']} chunks in {startup['initial_index_s']} s"
        )
        await asyncio.sleep(IDLE_SETTLE_S)
        idle = memory_snapshot(client.pid)
        log(f"size {name}: {len(queries)} queries x {plan['repeats']} over stdio")
        server_times, server_tops, sizes = await server_search(
            client, root, queries, plan["repeats"]
        )
        ping = await server_ping(client, plan["pings"])
        log(f"size {name}: didChange-to-searchable, {plan['rounds']} rounds on {rel}")
        change = await server_didchange(client, root, rel, plan["rounds"], nonce)
        after = memory_snapshot(client.pid)
        messages = list(client.messages)
    finally:
        exit_code = await client.stop()
    log(f"size {name}: in-process anchor")
    idx = CodeIndex(root, cache_dir=cache, dense=False)
    try:
        anchor_times, anchor_tops = inprocess_search(idx, queries, plan["repeats"])
        anchor_change = inprocess_didchange(idx, root, rel, plan["rounds"], nonce)
        status = idx.status()
    finally:
        idx.close()
    log(f"size {name}: in-process anchor of the initial index (a fresh cache)")
    fresh = CodeIndex(root, cache_dir=work / f"anchor-{cache.name}", dense=False)
    try:
        started = time.perf_counter()
        fresh.update()
        anchor_index_s = time.perf_counter() - started
    finally:
        fresh.close()
    server = stats(server_times)
    anchor = stats(anchor_times)
    change_s = change["didchange_to_searchable"]
    change_a = anchor_change["update_texts_plus_search"]
    return {
        "root": str(root),
        "tree": tree_summary(root),
        "chunks": status.chunks,
        "server": {
            **startup,
            "initial_index_in_process_s": round(anchor_index_s, 3),
            "initial_index_ratio": ratio(startup["initial_index_s"], anchor_index_s),
            "memory_idle_after_index": idle,
            "memory_after_searches_and_changes": after,
            "exit_code": exit_code,
            "show_messages": messages,
        },
        "search": {
            "queries": len(queries),
            "repeats": plan["repeats"],
            "limit": SEARCH_LIMIT,
            "mode": "hybrid (the server's default; lexical only with dense off)",
            "over_stdio": server,
            "in_process": anchor,
            "p50_ratio": ratio(server.get("p50_ms"), anchor.get("p50_ms")),
            "p95_ratio": ratio(server.get("p95_ms"), anchor.get("p95_ms")),
            "overhead_p50_ms": round(server["p50_ms"] - anchor["p50_ms"], 3),
            "response_bytes_mean": round(statistics.fmean(sizes)),
            "empty_request_round_trip": ping,
            "results": agreement(server_tops, anchor_tops),
        },
        "didchange": {
            "over_stdio": change,
            "in_process": anchor_change,
            "p50_ratio": ratio(change_s.get("p50_ms"), change_a.get("p50_ms")),
            "p95_ratio": ratio(change_s.get("p95_ms"), change_a.get("p95_ms")),
        },
    }


# ------------------------------------------------------------- 3. agent
def call_text(tool: str, **params: object) -> str:
    body = "".join(f"<{key}>{value}</{key}>\n" for key, value in params.items())
    return f'<tool_call name="{tool}">\n{body}</tool_call>\n'


AGENT_CALLS: tuple[tuple[str, dict[str, object]], ...] = (
    ("read_file", {"path": "pkg/decoder.py"}),
    ("grep", {"pattern": "def "}),
    ("run_terminal_cmd", {"command": "true"}),
    ("list_dir", {"path": "pkg"}),
    ("file_search", {"query": "scanner"}),
)


def make_agent_workspace(work: Path, turns: int) -> tuple[Path, Path]:
    """A small workspace (the stdlib's json package as `pkg/`, a README) and a replay
    file of `turns` one-call turns and a final answer."""
    root = work / "agent-workspace"
    shutil.copytree(
        stdlib_source() / "json",
        root / "pkg",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    (root / "README.md").write_text("# demo\n\nA small workspace for the agent benchmark.\n")
    lines = []
    for i in range(turns):
        tool, params = AGENT_CALLS[i % len(AGENT_CALLS)]
        lines.append({"text": f"Step {i + 1}.\n" + call_text(tool, **params)})
    lines.append({"text": "Done: nothing to change."})
    replay = work / "agent-replay.jsonl"
    replay.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root, replay


def lags_from_events(events: list[tuple[float, dict[str, Any]]], session_id: str) -> list[tuple]:
    out = []
    for wall, params in events:
        event = params.get("event", {})
        if params.get("sessionId") == session_id and event.get("event") == "tool_result":
            out.append((event["tool"], wall - event["meta"]["finished_at"], event["is_error"]))
    return out


async def sample_rss(pid: int, stop: asyncio.Event, out: dict[str, int]) -> None:
    while not stop.is_set():
        rss = proc_memory(pid)["rss"]
        out["max_rss"] = max(out.get("max_rss", 0), rss)
        out["samples"] = out.get("samples", 0) + 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RSS_SAMPLE_S)


def summarise_lags(lags: list[tuple]) -> dict[str, Any]:
    by_tool: dict[str, list[float]] = {}
    for tool, lag, _ in lags:
        by_tool.setdefault(tool, []).append(lag)
    return {
        "all": stats([lag for _, lag, _ in lags]),
        "by_tool": {tool: stats(v) for tool, v in sorted(by_tool.items())},
        "errors": sum(bool(e) for _, _, e in lags),
    }


async def bench_agent(work: Path, plan: dict[str, Any]) -> dict[str, Any]:
    root, replay = make_agent_workspace(work, plan["turns"])
    cache = work / "index-agent"
    log(f"agent: starting the server on {root}")
    client, startup = await start_server(
        root,
        index_options(cache, approval="auto", policy=f"replay:{replay}"),
        work / "server-agent.log",
    )
    runs = []
    lags: list[tuple] = []
    sampled: dict[str, int] = {}
    try:
        await asyncio.sleep(IDLE_SETTLE_S)
        idle = memory_snapshot(client.pid)
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_rss(client.pid, stop, sampled))
        for i in range(plan["runs"] + 1):  # the first is a warm-up
            session_id = f"bench-{i}"
            started = time.perf_counter()
            result = await client.request(
                "tachy/agent/run",
                {"prompt": "Look around the package.", "sessionId": session_id},
                timeout=300,
            )
            took = time.perf_counter() - started
            await asyncio.sleep(0.05)  # notifications sent before the response are in
            run_lags = lags_from_events(client.events, session_id)
            if result["stopReason"] != "end_turn":
                raise ServerError(f"agent run ended with {result}\n{client.log_tail()}")
            if len(run_lags) != plan["turns"]:
                raise ServerError(
                    f"expected {plan['turns']} tool results, got {len(run_lags)}: {result}"
                )
            runs.append(
                {
                    "session": session_id,
                    "warm_up": i == 0,
                    "seconds": round(took, 3),
                    "tool_results": len(run_lags),
                }
            )
            if i > 0:
                lags += run_lags
        stop.set()
        await sampler
        during_hwm = memory_snapshot(client.pid)
        await asyncio.sleep(IDLE_SETTLE_S)
        after = memory_snapshot(client.pid)
        notifications = client.notifications
    finally:
        await client.stop()
    log("agent: in-process anchor (Executor)")
    anchor_lags, anchor_runs = await inprocess_agent(root, replay, plan)
    return {
        "workspace": {"root": str(root), **tree_summary(root)},
        "turns_per_run": plan["turns"],
        "tools": [tool for tool, _ in AGENT_CALLS],
        "server": {
            **startup,
            "runs": runs,
            "notifications_received": notifications,
            "memory_idle_after_index": idle,
            "memory_during_runs": {
                "max_sampled_rss_mb": mb(sampled.get("max_rss", 0)),
                "samples": sampled.get("samples", 0),
                "sample_interval_ms": RSS_SAMPLE_S * 1000,
                "hwm_mb": during_hwm["hwm_mb"],
            },
            "memory_after_runs": after,
        },
        "tool_to_notification": summarise_lags(lags),
        "in_process": {"runs": anchor_runs, "tool_to_on_event": summarise_lags(anchor_lags)},
    }


async def inprocess_agent(
    root: Path, replay: Path, plan: dict[str, Any]
) -> tuple[list[tuple], list[dict[str, Any]]]:
    from agent import events as ev
    from agent.executor import Executor
    from agent.lints import LintRunner
    from agent.policy import ReplayPolicy
    from agent.sandbox import Sandbox, SandboxConfig
    from agent.tools import ToolContext
    from agent.workspace import Workspace

    lags: list[tuple] = []
    runs = []
    for i in range(plan["runs"] + 1):
        workspace = Workspace(root)
        ctx = ToolContext(
            workspace=workspace,
            sandbox=Sandbox(workspace, SandboxConfig()),
            linters=LintRunner(workspace),
        )
        run_lags: list[tuple] = []

        def on_event(event: Any, run_lags: list[tuple] = run_lags) -> None:
            if isinstance(event, ev.ToolResult):
                now = time.time()
                run_lags.append((event.tool, now - event.meta["finished_at"], event.is_error))

        executor = Executor(
            ctx, ReplayPolicy.from_file(replay), max_turns=plan["turns"] + 1, on_event=on_event
        )
        started = time.perf_counter()
        result = await executor.run("Look around the package.")
        took = time.perf_counter() - started
        if result.stop_reason != "end_turn":
            raise RuntimeError(f"in-process run ended with {result.stop_reason}: {result.error}")
        runs.append({"warm_up": i == 0, "seconds": round(took, 3), "tool_results": len(run_lags)})
        if i > 0:
            lags += run_lags
    return lags, runs


# ------------------------------------------------------------- 4. memory
async def bare_pygls_memory() -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BARE_PYGLS, stdout=asyncio.subprocess.PIPE, cwd=REPO
    )
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 60)
        await asyncio.sleep(0.2)
        memory = proc_memory(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    return {
        "command": f'python -c "{BARE_PYGLS}"',
        "rss_mb": mb(memory["rss"]),
        "hwm_mb": mb(memory["hwm"]),
    }


# ---------------------------------------------------------------- driver
def make_plan(options: argparse.Namespace) -> dict[str, Any]:
    return {
        "queries": options.queries,
        "repeats": options.repeats,
        "rounds": options.rounds,
        "runs": options.runs,
        "turns": options.turns,
        "pings": 100,
        "sizes": list(options.sizes),
    }


async def run_benchmark(options: argparse.Namespace, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    load_before = os.getloadavg()
    plan = make_plan(options)
    if options.corpus is None:
        log(f"copying the standard library ({stdlib_source()}) without site-packages")
        corpus = copy_stdlib(work / "stdlib")
        corpus_note = f"a copy of {stdlib_source()} without site-packages, dist-packages and caches"
    else:
        corpus = Path(options.corpus).resolve()
        corpus_note = f"{corpus}, indexed in place (the index lives in a temporary directory)"
    if not corpus.is_dir():
        raise SystemExit(f"corpus {corpus} is not a directory")
    queries = [QUERIES[i % len(QUERIES)] for i in range(options.queries)]
    sizes: dict[str, Any] = {}
    for spec in options.sizes:
        name, root = make_size(corpus, spec, work)
        sizes[name] = await bench_size(name, root, work, queries, plan)
    agent = await bench_agent(work, plan)
    bare = await bare_pygls_memory()
    result = {
        "benchmark": "lsp",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python -m bench.lsp " + " ".join(options.argv),
        "machine": common.machine_info(),
        "source": common.source_state(),
        "plan": plan,
        "corpus": corpus_note,
        "dense": False,
        "dense_note": (
            "indexes are lexical only (initializationOptions index.dense=false): the "
            "embedding pass over the standard library takes ~40 min on two cores; with "
            "dense off the server's hybrid search is lexical search"
        ),
        "client": "a lean JSON-RPC client in bench/lsp.py over the server's stdin/stdout",
        "sizes": sizes,
        "agent": agent,
        "bare_pygls_process": bare,
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    result["summary"] = summarise(result)
    return result


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    sizes = result["sizes"]
    head_name = max(sizes, key=lambda n: sizes[n]["chunks"])
    head = sizes[head_name]
    search = head["search"]
    change = head["didchange"]
    agent = result["agent"]
    lag = agent["tool_to_notification"]["all"]
    lag_anchor = agent["in_process"]["tool_to_on_event"]["all"]
    small = agent["server"]
    p95 = search["over_stdio"]["p95_ms"]
    return {
        "headline_size": head_name,
        "headline_chunks": head["chunks"],
        "dense": False,
        "initial_index_s": head["server"]["initial_index_s"],
        "initial_index_inprocess_s": head["server"]["initial_index_in_process_s"],
        "initial_index_ratio_to_inprocess": head["server"]["initial_index_ratio"],
        "search_p50_ms": search["over_stdio"]["p50_ms"],
        "search_p95_ms": p95,
        "search_inprocess_p50_ms": search["in_process"]["p50_ms"],
        "search_inprocess_p95_ms": search["in_process"]["p95_ms"],
        "search_p50_ratio_to_inprocess": search["p50_ratio"],
        "search_p95_ratio_to_inprocess": search["p95_ratio"],
        "search_target_ms": SEARCH_TARGET_MS,
        "search_target_met": p95 < SEARCH_TARGET_MS,
        "search_overhead_p50_ms": search["overhead_p50_ms"],
        "empty_request_round_trip_p50_ms": search["empty_request_round_trip"]["p50_ms"],
        "search_p95_ms_by_size": {n: s["search"]["over_stdio"]["p95_ms"] for n, s in sizes.items()},
        "search_inprocess_p95_ms_by_size": {
            n: s["search"]["in_process"]["p95_ms"] for n, s in sizes.items()
        },
        "chunks_by_size": {n: s["chunks"] for n, s in sizes.items()},
        "initial_index_s_by_size": {n: s["server"]["initial_index_s"] for n, s in sizes.items()},
        "didchange_to_searchable_p50_ms": change["over_stdio"]["didchange_to_searchable"].get(
            "p50_ms"
        ),
        "didchange_to_searchable_p95_ms": change["over_stdio"]["didchange_to_searchable"].get(
            "p95_ms"
        ),
        "didchange_inprocess_p50_ms": change["in_process"]["update_texts_plus_search"].get(
            "p50_ms"
        ),
        "didchange_inprocess_p95_ms": change["in_process"]["update_texts_plus_search"].get(
            "p95_ms"
        ),
        "didchange_p50_ratio_to_inprocess": change["p50_ratio"],
        "didchange_p95_ratio_to_inprocess": change["p95_ratio"],
        "didchange_missed": len(change["over_stdio"]["missed"]),
        "didchange_to_searchable_p95_ms_by_size": {
            n: s["didchange"]["over_stdio"]["didchange_to_searchable"].get("p95_ms")
            for n, s in sizes.items()
        },
        "tool_to_notification_p50_ms": lag["p50_ms"],
        "tool_to_notification_p95_ms": lag["p95_ms"],
        "tool_to_notification_max_ms": lag["max_ms"],
        "tool_to_notification_n": lag["n"],
        "tool_to_on_event_inprocess_p50_ms": lag_anchor["p50_ms"],
        "tool_to_on_event_inprocess_p95_ms": lag_anchor["p95_ms"],
        "tool_to_notification_target_ms": NOTIFY_TARGET_MS,
        "tool_to_notification_target_met": lag["p95_ms"] < NOTIFY_TARGET_MS,
        "rss_idle_small_mb": small["memory_idle_after_index"]["rss_mb"],
        "rss_idle_after_index_mb": head["server"]["memory_idle_after_index"]["rss_mb"],
        "rss_peak_during_index_mb": head["server"]["memory_idle_after_index"]["hwm_mb"],
        "rss_during_run_max_mb": small["memory_during_runs"]["max_sampled_rss_mb"],
        "rss_after_run_mb": small["memory_after_runs"]["rss_mb"],
        "rss_bare_pygls_mb": result["bare_pygls_process"]["rss_mb"],
        "rss_idle_small_ratio_to_bare_pygls": ratio(
            small["memory_idle_after_index"]["rss_mb"], result["bare_pygls_process"]["rss_mb"]
        ),
    }


def one_line(s: dict[str, Any]) -> str:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    return (
        f"lsp: search p95 {s['search_p95_ms']:.1f} ms over stdio on {s['headline_chunks']} "
        f"chunks (x{s['search_p95_ratio_to_inprocess']} in-process "
        f"{s['search_inprocess_p95_ms']:.1f} ms; target < {SEARCH_TARGET_MS:g}: "
        f"{mark(s['search_target_met'])}); index {s['initial_index_s']:.1f} s; "
        f"didChange-to-searchable p50/p95 {s['didchange_to_searchable_p50_ms']}/"
        f"{s['didchange_to_searchable_p95_ms']} ms (in-process {s['didchange_inprocess_p50_ms']}/"
        f"{s['didchange_inprocess_p95_ms']}); tool-to-notification p95 "
        f"{s['tool_to_notification_p95_ms']:.2f} ms (target < {NOTIFY_TARGET_MS:g}: "
        f"{mark(s['tool_to_notification_target_met'])}); RSS idle {s['rss_idle_small_mb']} MB / "
        f"stdlib {s['rss_idle_after_index_mb']} MB / run {s['rss_during_run_max_mb']} MB "
        f"(bare pygls {s['rss_bare_pygls_mb']} MB); lexical only"
    )


def table(result: dict[str, Any]) -> str:
    s = result["summary"]
    m = result["machine"]
    lines = [
        f"machine: {m['cpu_count']} CPUs ({m['cpu_model']}), Python {m['python']}, {m['platform']}",
        f"corpus: {result['corpus']} (lexical only)",
        "",
        f"{'size':<14} {'chunks':>8} {'index s':>8} {'search p50/p95 ms':>18} "
        f"{'in-proc p50/p95':>16} {'didChange p50/p95':>18} {'in-proc':>14}",
    ]
    for name, size in result["sizes"].items():
        se, ch = size["search"], size["didchange"]
        dc = ch["over_stdio"]["didchange_to_searchable"]
        da = ch["in_process"]["update_texts_plus_search"]
        lines.append(
            f"{name:<14} {size['chunks']:>8} {size['server']['initial_index_s']:>8.2f} "
            f"{se['over_stdio']['p50_ms']:>8.2f}/{se['over_stdio']['p95_ms']:<9.2f} "
            f"{se['in_process']['p50_ms']:>7.2f}/{se['in_process']['p95_ms']:<8.2f} "
            f"{dc.get('p50_ms', 0):>8.1f}/{dc.get('p95_ms', 0):<9.1f} "
            f"{da.get('p50_ms', 0):>6.1f}/{da.get('p95_ms', 0):<7.1f}"
        )
    lines += [
        "",
        f"tool -> notification p50/p95/max {s['tool_to_notification_p50_ms']}/"
        f"{s['tool_to_notification_p95_ms']}/{s['tool_to_notification_max_ms']} ms "
        f"(in-process on_event p50/p95 {s['tool_to_on_event_inprocess_p50_ms']}/"
        f"{s['tool_to_on_event_inprocess_p95_ms']} ms)",
        f"RSS MB: idle small {s['rss_idle_small_mb']}, idle after index {s['rss_idle_after_index_mb']}"
        f" (peak {s['rss_peak_during_index_mb']}), during runs {s['rss_during_run_max_mb']}, after "
        f"{s['rss_after_run_mb']}, bare pygls {s['rss_bare_pygls_mb']}",
        f"elapsed {result['elapsed_s']} s",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lsp",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--corpus", default=None, help="a tree to index (default: the stdlib)")
    parser.add_argument(
        "--queries", type=int, default=len(QUERIES), help=f"queries (default {len(QUERIES)})"
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=list(DEFAULT_SIZES),
        metavar="SPEC",
        help="`full` or top-level entries joined by commas (default: email,json full)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="passes over the queries")
    parser.add_argument("--rounds", type=int, default=20, help="didChange rounds per size")
    parser.add_argument("--runs", type=int, default=5, help="agent runs (after a warm-up)")
    parser.add_argument("--turns", type=int, default=30, help="tool turns per agent run")
    parser.add_argument("--work", type=Path, default=None, help="work directory to use and keep")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    options = parser.parse_args(argv)
    options.argv = argv
    for name in ("queries", "repeats", "rounds", "runs", "turns"):
        if getattr(options, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if options.work is not None:
        options.work.mkdir(parents=True, exist_ok=True)
        if any(options.work.iterdir()):
            parser.error(f"{options.work} is not empty")
        result = asyncio.run(run_benchmark(options, options.work.resolve()))
    else:
        with tempfile.TemporaryDirectory(prefix="tachy-bench-lsp-") as tmp:
            result = asyncio.run(run_benchmark(options, Path(tmp)))
    common.report(result, options.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
