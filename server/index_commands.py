"""`tachy index` and `tachy search`: the semantic index from the command line.

Human output (progress bars, summaries, results) goes to stderr; `--json` prints one
JSON document on stdout. Exit codes: 0 ok, 1 the index failed (e.g. busy), 2 bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from agent.cliargs import path_arg

# The index (numpy, tree-sitter, SQLite) loads only when these commands run, so
# `tachy agent` and `tachy --help` start fast.
if TYPE_CHECKING:
    from index.indexer import CodeIndex

EMBEDDERS = ("static", "minilm")  # index.embedder.EMBEDDERS, without importing numpy here


def add_parsers(commands: argparse._SubParsersAction) -> None:
    index = commands.add_parser(
        "index",
        help="build or update the semantic index of a workspace",
        description=(
            "Index a workspace: chunks and the lexical index first (searchable within "
            "seconds), then embeddings for search by meaning. Incremental: only changed "
            "files are read again. The index lives in PATH/.tachy/index unless --cache-dir."
        ),
    )
    index.add_argument("path", type=path_arg, metavar="PATH", help="the workspace to index")
    index.add_argument("--json", action="store_true", help="print statistics as JSON on stdout")
    index.add_argument(
        "--no-dense", action="store_true", help="skip embeddings (lexical search only)"
    )
    index.add_argument(
        "--cache-dir", type=path_arg, metavar="DIR", help="keep the index here instead"
    )
    index.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        default="static",
        help="the model for search by meaning: static (tachy's code model, the default: "
        "thousands of chunks a second) or minilm (a transformer, ~30 a second on two "
        "cores); switching re-embeds the workspace",
    )

    search = commands.add_parser(
        "search",
        help="search a workspace's code by meaning and by words",
        description=(
            "Search the workspace's code. The index is brought up to date (lexically) "
            "first; search by meaning uses the embeddings `tachy index` computed."
        ),
    )
    search.add_argument("query", metavar="QUERY", nargs="?", help="what to look for")
    search.add_argument(
        "--queries",
        type=path_arg,
        metavar="FILE",
        help="one query per line; prints a JSON list of result lists",
    )
    search.add_argument(
        "--workspace", default=".", type=path_arg, metavar="PATH", help="the workspace (default: .)"
    )
    search.add_argument(
        "--limit", type=int, default=10, metavar="N", help="results per query (default 10)"
    )
    search.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    search.add_argument(
        "--mode",
        choices=("hybrid", "lexical", "dense"),
        default="hybrid",
        help="retrieval (default hybrid)",
    )
    search.add_argument(
        "--path", action="append", metavar="GLOB", help="only under this path or glob (repeatable)"
    )
    search.add_argument(
        "--cache-dir",
        type=path_arg,
        metavar="DIR",
        help="the index's directory, if not PATH/.tachy/index",
    )
    search.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        help="the model that embeds the query (default: the one the index was built with)",
    )


class Bar:
    """A one-line progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        width = 30
        filled = int(width * done / total) if total else width
        sys.stderr.write(f"\r{phase:>10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _shown(text: str) -> str:
    """A command-line argument or a path as valid text (for JSON, SQLite, a terminal):
    the bytes it came from, decoded with U+FFFD for those that are not UTF-8."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _open(
    path: Path,
    cache_dir: Path | None,
    *,
    dense: bool = True,
    embedder: str | None = None,
    lock_timeout_s: float = 120,
) -> CodeIndex:
    from index.indexer import CodeIndex

    return CodeIndex(
        path, cache_dir=cache_dir, dense=dense, embedder=embedder or "recorded",
        lock_timeout_s=lock_timeout_s,
    )  # fmt: skip


def _damaged(index: CodeIndex, error: Exception) -> int:
    index.mark_damaged(error)
    print(
        f"tachy: the index in {index.dir} is damaged ({error}); it will be rebuilt the next "
        "time it is opened: run the command again",
        file=sys.stderr,
    )
    return 1


def run_index(args: argparse.Namespace) -> int:
    from index.indexer import CodeIndexError

    try:
        index = _open(args.path, args.cache_dir, dense=not args.no_dense, embedder=args.embedder)
    except CodeIndexError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    bar = Bar()
    try:
        with index:
            if index.rebuilt_because:
                print(f"tachy: rebuilding the index ({index.rebuilt_because})", file=sys.stderr)
            stats = index.update(progress=bar)
            status = index.status()
    except CodeIndexError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 1
    except sqlite3.DatabaseError as exc:
        return _damaged(index, exc)
    report = {
        **dataclasses.asdict(stats),
        "seconds": round(stats.seconds, 3),
        "embedded_now": stats.embedded,
        "embed_seconds": round(stats.embed_seconds, 3),
        "state": status.state,
        "embedded": status.embedded,
        "index_dir": _shown(str(index.dir)),
    }
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(stats.skipped.items()))
        print(
            f"indexed {stats.files} files, {stats.chunks} chunks ({stats.changed_files} changed, "
            f"{stats.removed_files} removed) in {stats.seconds:.1f} s"
            + (f"; skipped {skipped}" if skipped else ""),
            file=sys.stderr,
        )
        if not args.no_dense and not stats.embed_error:
            print(
                f"embedded {stats.embedded} chunks in {stats.embed_seconds:.1f} s; "
                f"{status.embedded}/{status.chunks} have embeddings",
                file=sys.stderr,
            )
    if stats.embed_error:
        print(f"tachy: the index is lexical only: {stats.embed_error}", file=sys.stderr)
        return 1
    return 0


def run_search(args: argparse.Namespace) -> int:
    from index.indexer import CodeIndexError, IndexBusyError

    # Arguments that are not UTF-8 arrive with lone surrogates (surrogateescape), which
    # neither SQLite nor JSON can carry: their bad bytes are searched for as U+FFFD.
    args.query = None if args.query is None else _shown(args.query)
    args.path = None if args.path is None else [_shown(p) for p in args.path]
    if (args.query is None) == (args.queries is None):
        print("tachy: give a QUERY or --queries FILE (not both)", file=sys.stderr)
        return 2
    if args.limit < 1:
        print("tachy: --limit must be at least 1", file=sys.stderr)
        return 2
    if args.queries is not None:
        try:
            queries = [
                q for q in Path(args.queries).read_text(encoding="utf-8").splitlines() if q.strip()
            ]
        except (OSError, UnicodeDecodeError) as exc:
            print(f"tachy: cannot read {args.queries}: {exc}", file=sys.stderr)
            return 2
    else:
        queries = [args.query]
    try:
        index = _open(args.workspace, args.cache_dir, embedder=args.embedder, lock_timeout_s=2)
    except CodeIndexError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    try:
        with index:
            if index.rebuilt_because:
                print(f"tachy: rebuilding the index ({index.rebuilt_because})", file=sys.stderr)
            try:
                index.update()
            except IndexBusyError:
                print(
                    "tachy: another process is updating the index; searching it as it is",
                    file=sys.stderr,
                )
            results = [
                index.search(q, limit=args.limit, paths=args.path, mode=args.mode) for q in queries
            ]
    except CodeIndexError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 1
    except sqlite3.DatabaseError as exc:
        return _damaged(index, exc)
    if args.queries is not None:
        print(msgspec.json.encode(results).decode())
    elif args.json:
        print(msgspec.json.encode({"query": args.query, "results": results[0]}).decode())
    else:
        hits = results[0]
        if not hits:
            print(f"no results for {args.query!r}", file=sys.stderr)
        for hit in hits:
            title = f"{hit.path}:{hit.start_line}-{hit.end_line}"
            print(f"{title}  {hit.symbol}  ({hit.score:.4f})", file=sys.stderr)
            for line in hit.snippet.splitlines()[:4]:
                print(f"    {line}", file=sys.stderr)
    return 0
