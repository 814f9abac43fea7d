"""CodeIndex: the semantic index of one workspace, persisted under .tachy/index/.

One SQLite database (WAL) holds everything that must survive a crash:

- `files`      path -> size, mtime, content hash (the last scan)
- `blobs`      the content-addressed chunk cache: file hash -> its chunks, so a
               renamed, restored or duplicated file is never chunked again
- `chunks`     the live chunks: id, path, (file hash, seq) into `blobs`
- `embeddings` embedding key (hash of the text the model sees) + model -> vector,
               so a chunk is never embedded twice, whatever file it lands in
- `lex_*`      the FTS5 lexical index (index.lexical)
- `meta`       schema version, embedding model, the vector epoch

Each batch of files is one transaction, so a killed indexer leaves the index as of
its last batch, never a mix. The faiss store is derived data: it is saved with the
epoch of the database it mirrors and rebuilt from `embeddings` when the two differ
(a crash between them), so it can never return ids that the database disowns; search
also drops any id it cannot find. A database that fails its integrity check, or has
another schema version, is deleted and rebuilt.

An editor's unsaved text wins over the disk: `set_overlay` records a document's
buffer, and updates index those bytes in place of the file's (the same skip rules and
caches), under a state no stat can match, so the disk version comes back by itself
once the buffer is dropped.

Ignore rules bind the caches too: a search never returns a file the rules (or the
secret names) hide now, even one indexed before it was ignored, and the next update
purges such a file's text and vectors, not only its chunks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import multiprocessing
import os
import posixpath
import shutil
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from index import statedir
from index.chunker import Chunk, chunk_file, embedding_text
from index.errors import CodeIndexError, IndexBusyError
from index.ignore import IGNORE_FILES, IgnoreRules, is_secret_name
from index.lexical import LAYOUT_VERSION, LexicalIndex
from index.lifeline import die_with
from index.scan import (
    UNNAMABLE,
    FileState,
    StatDiff,
    content_state,
    is_nameable,
    load_file,
    merkle_root,
    stat_diff,
)
from index.search import (
    CHUNKS_PER_FILE,
    Candidates,
    SearchHit,
    named_bonus,
    normalise_globs,
    path_matches,
    query_identifiers,
    ranked,
    symbol_named,
)
from index.tokenize import index_terms

log = logging.getLogger(__name__)
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Log a degraded-but-working condition once per process, not once per query."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


SCHEMA_VERSION = 2
# Chunks that are (a piece of) a definition, for symbols(). A "module" chunk is one
# when it has a symbol (a namespace); a file's top-level code has none, nor do "lines"
# windows.
_DEFINITION = "kind IN ('function', 'method', 'class', 'module') AND symbol != ''"
# The length of a qualified symbol's last part: rtrim() strips every character but "."
# from its right end, which leaves the qualifier.
_NAME_LENGTH = "length(symbol) - length(rtrim(symbol, replace(symbol, '.', '')))"
# symbols() reads names from covering indexes, never the blobs (their text makes a
# scan of the table several times slower): by symbol (a definition's chunks) and by
# name length, shortest first (so a query that most names match can stop early).
_SYMBOL_INDEXES = (
    "CREATE INDEX IF NOT EXISTS blobs_by_symbol ON blobs(kind, symbol, start_line)",
    "CREATE INDEX IF NOT EXISTS blobs_by_name_length "
    f"ON blobs(({_NAME_LENGTH}), kind, symbol, start_line) WHERE {_DEFINITION}",
)
# The lexical index's layout (its tokenizer) is part of what the database holds.
_SCHEMA_TAG = f"{SCHEMA_VERSION}.{LAYOUT_VERSION}"
FILES_PER_TRANSACTION = 100
DAMAGED_MARK = "damaged"  # a file: the database failed in use; rebuild on next open
SKIPPED = "skipped:"  # in place of a content hash: the file is known and not indexed
PARALLEL_ABOVE_FILES = 200  # updates this big chunk on worker processes
MAX_WORKERS = 4
GC_MIN_ORPHANS = 100  # cached contents no file has are kept up to this many at least
EMBED_BATCH = 128
CANDIDATES = 50  # taken from each retriever before fusion
SNIPPET_LINES = 12
MAX_QUERY_CHARS = 100_000
# In place of an mtime: the state was indexed from an editor's unsaved text. No file
# has it, so every stat scan reads the file again (and finds the disk version once the
# buffer is dropped).
UNSAVED_MTIME_NS = -1
MAX_SYMBOL_QUERY_CHARS = 200
# A symbol query matching more chunks than this is read one match tier at a time.
SYMBOL_SCAN_ROWS = 2000

Progress = Callable[[str, int, int], None]  # (phase, done, total)
# (path, state or why it is skipped, cache rows or None, lexical terms): see prepare_content
Prepared = tuple[str, FileState | str, list[tuple] | None, list[str]]


@dataclass
class UpdateStats:
    files: int = 0
    chunks: int = 0
    changed_files: int = 0
    removed_files: int = 0
    reused_files: int = 0  # changed files whose chunks came from the cache
    chunked_files: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    seconds: float = 0.0  # all of it, embedding included
    root_hash: str = ""
    embedded: int = 0  # chunks given a vector by this update (cache hits not counted)
    embed_seconds: float = 0.0
    embed_error: str = ""  # why dense search is unavailable ("" when it is not)


@dataclass
class IndexStatus:
    state: str  # empty | lexical (embeddings pending) | ready
    files: int
    chunks: int
    embedded: int


class SymbolHit(msgspec.Struct, frozen=True):
    """A definition, as LSP workspace/symbol reports it."""

    path: str
    name: str  # the last part of the qualified symbol
    container: str  # the qualified name it lies in, "" at the top level
    kind: str  # the chunk kind: function | method | class | module (a namespace)
    start_line: int  # 1-based, inclusive
    end_line: int


def embed_input(signature: str, text: str) -> str:
    """The text the dense model sees for a chunk: its enclosing headers and its code,
    not its path, so a renamed file keeps its vectors."""
    return embedding_text(Chunk("", 0, 0, "", signature, "", "", text), include_path=False)


def prepare_file(
    root: str, rel: str, old_hash: str | None, is_cached: Callable[[str], bool]
) -> Prepared:
    """prepare_content for a file on disk, its stat recorded with its hash."""
    loaded = load_file(Path(root), rel)
    if isinstance(loaded, str):
        return rel, loaded, None, []
    info, data = loaded
    return prepare_content(
        rel, data, old_hash, is_cached, size=info.st_size, mtime_ns=info.st_mtime_ns
    )


def prepare_content(
    rel: str,
    data: bytes,
    old_hash: str | None,
    is_cached: Callable[[str], bool],
    *,
    size: int | None = None,
    mtime_ns: int = UNSAVED_MTIME_NS,
) -> Prepared:
    """Judge, hash and, when the content is new to the chunk cache, chunk one file's
    bytes: read from disk, or (by default) an editor's unsaved text.

    Returns (path, state or why it is skipped, rows, terms): rows None when the content
    did not change, [] when the cache already holds its chunks, else the new cache rows,
    with the lexical index's terms of each row's text (tokenizing is as costly as
    chunking, so it is done here too, on worker processes in big updates).
    """
    state = content_state(rel, data, size=len(data) if size is None else size, mtime_ns=mtime_ns)
    if isinstance(state, str):
        return rel, state, None, []
    if state.hash == old_hash:
        return rel, state, None, []
    if is_cached(state.hash):
        return rel, state, [], []
    chunks = chunk_file(rel, data.decode("utf-8", "replace"))
    if not chunks:
        # An empty (or blank) file still gets a cache row so it is not read again.
        return rel, state, [(state.hash, 0, 1, 1, "", "", "empty", "text", "", "")], [""]
    rows = [
        (
            state.hash,
            seq,
            c.start_line,
            c.end_line,
            c.symbol,
            c.signature,
            c.kind,
            c.language,
            c.text,
            _key(embed_input(c.signature, c.text)),
        )
        for seq, c in enumerate(chunks)
    ]
    return rel, state, rows, [index_terms(c.text) for c in chunks]


_worker_view: sqlite3.Connection | None = None


def _prepare_in_worker(root: str, db_path: str, rel: str, old_hash: str | None) -> Prepared:
    """prepare_file on a worker process, with its own read-only view of the cache."""
    global _worker_view
    if _worker_view is None:
        _worker_view = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    view = _worker_view

    def is_cached(digest: str) -> bool:
        return (
            view.execute("SELECT 1 FROM blobs WHERE hash=? LIMIT 1", (digest,)).fetchone()
            is not None
        )

    return prepare_file(root, rel, old_hash, is_cached)


def _remove(path: Path) -> None:
    """Delete one entry of the index directory, whatever it became (a file, a symlink,
    a directory where a file belongs): the index is a cache, and what cannot be
    removed is a clear error instead of the same failure at every open."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CodeIndexError(
            f"cannot remove the damaged index file {path}: {exc.strerror or exc}; delete it"
        ) from None


def _key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=16).hexdigest()


def _workspace_path(path: str) -> str:
    """A workspace-relative path as the index keys it: '/'-separated, normalised."""
    return posixpath.normpath(path.replace("\\", "/").strip("/"))


def _with_overlay(diff: StatDiff, overlay: Mapping[str, bytes]) -> StatDiff:
    """A stat scan's verdict, corrected for unsaved text: such a file is read (from
    the text) whatever its stat says, and is not gone while it is unsaved."""
    return StatDiff(
        {p: s for p, s in diff.unchanged.items() if p not in overlay},
        [p for p in diff.suspects if p not in overlay] + sorted(overlay),
        [p for p in diff.gone if p not in overlay],
        diff.unnamable,
    )


def _sql_text(text: str) -> str:
    """`text` as SQLite (and JSON) can take it: a lone surrogate (an undecodable byte of
    a command-line argument, a "\\ud800" escape in an LSP request) becomes "?"."""
    return text.encode("utf-8", "replace").decode("utf-8")


# Candidates for a symbol query (LIKE patterns over qualified symbols), and their files.
_SYMBOL_CANDIDATES = (
    "SELECT c.path, symbol, start_line FROM blobs b {index} CROSS JOIN chunks c "
    f"ON c.hash = b.hash AND c.seq = b.seq WHERE {_DEFINITION} "
    "AND (symbol LIKE ? ESCAPE '\\' OR symbol LIKE ? ESCAPE '\\')"
)
_SYMBOLS_LIKE = _SYMBOL_CANDIDATES.format(index="") + " LIMIT ?"
_SYMBOLS_SHORTEST_FIRST = (
    _SYMBOL_CANDIDATES.format(index="INDEXED BY blobs_by_name_length") + f" ORDER BY {_NAME_LENGTH}"
)
# Files in path order (the chunks_by_path index), so reading can stop early.
_SYMBOLS_BY_PATH = (
    "SELECT c.path, symbol, start_line FROM chunks c CROSS JOIN blobs b "
    f"ON b.hash = c.hash AND b.seq = c.seq WHERE {_DEFINITION} ORDER BY c.path"
)
# One definition's chunks and those of the definitions named inside it: the symbols
# from "Name" up to "Name/" ("/" follows "."), a range of blobs_by_symbol.
_SYMBOL_CHUNKS = (
    "SELECT symbol, kind, start_line, end_line, signature FROM blobs b "
    "CROSS JOIN chunks c ON c.hash = b.hash AND c.seq = b.seq "
    f"WHERE {_DEFINITION} AND symbol >= ? AND symbol < ? AND c.path = ?"
)


def _like(text: str) -> str:
    """`text` for a LIKE pattern. LIKE ignores case for ASCII only, so any other
    character that has a case matches any one character: the pattern only narrows,
    _match_tier decides."""
    return "".join(
        "\\" + ch if ch in "\\%_" else "_" if not ch.isascii() and ch.lower() != ch.upper() else ch
        for ch in text
    )


def _symbol_stages(needle: str) -> list[tuple[int, tuple[str, ...]]]:
    """(the match tier a stage finds every match of, with the tiers before it; its two
    LIKE patterns over qualified symbols): prefixes of the name (exact names among
    them), substrings, subsequences (for one character, the same as substrings)."""
    like = _like(needle)
    stages = [(1, (like + "%", "%." + like + "%")), (2, ("%" + like + "%",) * 2)]
    if len(needle) > 1:
        stages.append((3, ("%" + "%".join(_like(ch) for ch in needle) + "%",) * 2))
    return stages


def _match_tier(needle: str, target: str) -> int | None:
    """0 exact, 1 prefix, 2 substring, 3 subsequence, None no match (`needle` is
    lower case; `target` is compared ignoring case)."""
    target = target.lower()
    if target == needle:
        return 0
    if target.startswith(needle):
        return 1
    if needle in target:
        return 2
    rest = iter(target)
    return 3 if all(ch in rest for ch in needle) else None


class _SymbolRanking:
    """The candidates of one symbol query, each (path, symbol) under its best key:
    (match tier, name length, name not in the query's case, path, line)."""

    def __init__(self, query: str) -> None:
        self.query = query
        self.needle = query.lower()
        self.qualified = "." in query  # then the whole symbol is matched
        self.keys: dict[tuple[str, str], tuple] = {}

    def add(self, path: str, symbol: str, start: int) -> None:
        target = symbol if self.qualified else symbol.rpartition(".")[2]
        tier = _match_tier(self.needle, target)
        if tier is not None:
            key = (tier, len(target), self.query not in target, path, start, symbol)
            self.keys[path, symbol] = min(key, self.keys.get((path, symbol), key))

    def complete(self, tier: int, limit: int, length: float = float("inf")) -> bool:
        """Whether `limit` pairs rank before any pair not seen yet, when every match
        better than `tier` is in, and those at `tier` with names up to `length` long
        (a match found on the way, with a longer name, does not count)."""
        ahead = sum(k[0] < tier or (k[0] == tier and k[1] <= length) for k in self.keys.values())
        return ahead >= limit

    def best(self, limit: int) -> list[tuple[str, str]]:
        return [(path, symbol) for *_, path, _, symbol in sorted(self.keys.values())[:limit]]


def _definition(path: str, symbol: str, rows: list[tuple]) -> SymbolHit | None:
    """One definition from chunks of its file (symbol, kind, start, end, signature):
    it starts where its first chunk does and ends with the last chunk that is its own
    or lies inside it (a split class's methods carry its header first in their
    signature; a Go method named Type.Name does not, and stays outside the type)."""
    own = [row for row in rows if row[0] == symbol]
    if not own:
        return None
    _, kind, start, _, signature = min(own, key=lambda row: row[2])
    inner, header = symbol + ".", signature + "\n"
    end = max(
        row[3]
        for row in rows
        if row[0] == symbol or (row[0].startswith(inner) and row[4].startswith(header))
    )
    container, _, name = symbol.rpartition(".")
    return SymbolHit(path, name, container, kind, start, end)


def _batches(items: Sequence[Any], size: int = 500) -> Iterator[list[Any]]:
    """`items` in lists of at most `size`: SQLite limits the parameters of a statement."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _ignore_files_state(root: Path, directory: str) -> tuple:
    """What stat() says of one directory's ignore files: any edit, replacement, creation
    or deletion of one changes it."""
    states = []
    for name in IGNORE_FILES:
        try:
            info = os.stat(root / directory / name)
        except OSError:
            states.append(None)
            continue
        states.append((info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return tuple(states)


class _VisibleNow:
    """Which indexed paths the ignore rules let through *now*, for searches: a file
    indexed before the user ignored it (or before its name counted as a secret) is
    never returned, even before the next update purges it. The rules are cached, and
    each call stat()s the ignore files of the directories it asks about: any change
    since they were read, and the rules are read again. Searches run on many threads,
    hence the lock (IgnoreRules is not thread-safe)."""

    def __init__(self, root: Path) -> None:
        self.rules = IgnoreRules(root)
        self._seen: dict[str, tuple] = {}  # directory -> _ignore_files_state when read
        self._lock = threading.Lock()

    def filter(self, paths: Iterable[str]) -> set[str]:
        paths = set(paths)
        directories = set()
        for path in paths:
            parts = path.split("/")[:-1]
            directories.update("/".join(parts[:depth]) for depth in range(len(parts) + 1))
        with self._lock:
            changed = False
            for directory in directories:
                state = _ignore_files_state(self.rules.root, directory)
                changed = changed or self._seen.get(directory, state) != state
                self._seen[directory] = state
            if changed:
                self.rules.invalidate()
            return {
                path
                for path in paths
                if not self.rules.is_ignored(path) and not is_secret_name(path.rsplit("/", 1)[-1])
            }


def _nonempty_file(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


class CodeIndex:
    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        embedder: Any = "default",
        dense: bool = True,
        lock_timeout_s: float = 120.0,
        rules: IgnoreRules | None = None,
    ) -> None:
        """`rules`: what decides which files are indexed, when not the workspace's
        ignore files as they are now (an agent run passes its own, which only
        tighten)."""
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise CodeIndexError(f"{root} is not a directory")
        try:
            if cache_dir:
                self.dir = Path(cache_dir).resolve()
                self.dir.mkdir(parents=True, exist_ok=True)
            else:
                # In the workspace, where commands write: made and checked with no
                # symlink followed, so the index never lands where a planted link points.
                self.dir = statedir.ensure(self.root, "index")
        except OSError as exc:
            raise CodeIndexError(f"cannot create the index directory: {exc.strerror}") from None
        # The writer's: read afresh by every update().
        self.rules = rules if rules is not None else IgnoreRules(self.root)
        self._visible = _VisibleNow(self.root)  # the searches'
        self.dense = dense and embedder is not None
        self._embedder_spec = embedder
        self._embedder: Any = None
        self._vectors: Any = None
        self._lock = threading.RLock()  # guards the writing connection
        self._read_lock = threading.Lock()  # guards the reading connection
        self._write_mutex = threading.Lock()  # one writer per process (flock: per machine)
        self.rebuilt_because: str | None = None
        self._lock_timeout_s = lock_timeout_s
        self._lock_file = self._open_lock_file()
        # Editors' unsaved text by path; updates index it in place of the disk's.
        self._overlay: dict[str, bytes] = {}
        self._overlay_lock = threading.Lock()
        self._changed_since_gc = 0
        self._conn = self._open_database()
        self.lexical = LexicalIndex(self._conn)
        # Searches read through their own connection: WAL lets them run while a
        # writer's transaction is open, so indexing never blocks a query.
        self._reader = sqlite3.connect(self.dir / "index.db", check_same_thread=False, timeout=30)
        self._lexical_reader = LexicalIndex(self._reader)
        # Set by close(): an embedding pass in progress stops between batches.
        self._stop = threading.Event()
        # One embedding pass at a time in this process (the editor's indexing thread and
        # an agent's search both update): a second waits, then finds only what is new.
        self._embedding = threading.Lock()

    def _open_lock_file(self):
        """The file whose flock makes writers take turns; held for our lifetime. One
        that is a directory is replaced (a file is never deleted: another process may
        hold its lock)."""
        path = self.dir / "lock"
        try:
            try:
                return open(path, "a+")  # closed by close()
            except IsADirectoryError:
                _remove(path)
                return open(path, "a+")
        except OSError as exc:
            raise CodeIndexError(f"cannot open {path}: {exc.strerror or exc}") from None

    # ------------------------------------------------------------ database
    def _open_database(self) -> sqlite3.Connection:
        path = self.dir / "index.db"
        # The common case, an index in good order, opens without waiting for a writer.
        if self._damage_noted() is None and _nonempty_file(path):
            try:
                return self._connect(path, create=False)
            except (sqlite3.DatabaseError, CodeIndexError):
                pass  # looked at again below, under the lock
        # Creating, repairing or starting afresh takes the writers' lock, and looks
        # again once it has it: another opener may have just done it. (Without the
        # lock, one opener's transient "database is locked" was taken for damage and
        # deleted the database under the other.)
        with self._writer():
            damage = self._damage_noted()
            if damage is None:
                try:
                    return self._connect(path)
                except (sqlite3.DatabaseError, CodeIndexError) as exc:
                    damage = str(exc)
            # Corrupt, foreign or from another schema: start afresh (it is a cache).
            self._discard(reason=damage)
            _remove(self.dir / DAMAGED_MARK)
            return self._connect(path)

    def _damage_noted(self) -> str | None:
        """Why the database was marked damaged, or None when it was not. The mark's
        mere presence is the verdict: whatever it holds (a crash or a disk fault can
        leave any bytes, even a directory) it is only read for the message."""
        try:
            with open(self.dir / DAMAGED_MARK, "rb") as handle:
                why = handle.read(1000).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = f"the index was marked damaged (the mark is unreadable: {exc.strerror or exc})"
        return why or "the index was marked damaged"

    def mark_damaged(self, error: Exception) -> None:
        """Called when the database fails in use: the next open rebuilds it."""
        with contextlib.suppress(OSError):
            (self.dir / DAMAGED_MARK).write_text(f"the index database failed: {error}")

    def _connect(self, path: Path, *, create: bool = True) -> sqlite3.Connection:
        """Open the database (creating its schema when `create`; else a database without
        one is an error, left for the caller to create under the lock)."""
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            tables = {
                row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if "meta" in tables:
                row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if row is None or row[0] != _SCHEMA_TAG:
                    raise CodeIndexError("the index was written by another version of tachy")
                # The full check reads the whole file (about a second per 100 MB), so it
                # runs only when the last user did not close the index cleanly.
                clean = conn.execute("SELECT value FROM meta WHERE key='clean'").fetchone()
                unclean = clean is None or clean[0] != "1"
                if unclean and conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                    raise CodeIndexError("the index database failed its integrity check")
                for statement in _SYMBOL_INDEXES:  # databases made before symbols() lack them
                    conn.execute(statement)
            elif create:
                self._create_schema(conn)
            else:
                raise CodeIndexError("the index database has no schema yet")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '0')")
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        conn.executescript(
            f"""
            BEGIN;
            CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS files(
                path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, hash TEXT) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS blobs(
                hash TEXT, seq INTEGER, start_line INTEGER, end_line INTEGER, symbol TEXT,
                signature TEXT, kind TEXT, language TEXT, text TEXT, embed_key TEXT,
                PRIMARY KEY(hash, seq)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS chunks(
                id INTEGER PRIMARY KEY, path TEXT, hash TEXT, seq INTEGER);
            CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(path);
            CREATE INDEX IF NOT EXISTS chunks_by_blob ON chunks(hash, seq);
            {_SYMBOL_INDEXES[0]};
            {_SYMBOL_INDEXES[1]};
            -- Chunks waiting for a vector: between an update's chunking and its
            -- embedding, or left by an update without dense search or a killed process.
            CREATE TABLE IF NOT EXISTS pending(chunk_id INTEGER PRIMARY KEY);
            CREATE TABLE IF NOT EXISTS embeddings(
                key TEXT, model TEXT, vector BLOB, PRIMARY KEY(key, model)) WITHOUT ROWID;
            INSERT OR REPLACE INTO meta VALUES ('schema', '{_SCHEMA_TAG}');
            INSERT OR IGNORE INTO meta VALUES ('vector_epoch', '0');
            COMMIT;
            """
        )

    def _discard(self, reason: str) -> None:
        for name in ("index.db", "index.db-wal", "index.db-shm", "vectors"):
            _remove(self.dir / name)
        self.rebuilt_because = reason

    def _meta(self, key: str, default: str = "") -> str:
        rows = self._read("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else default

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    @contextlib.contextmanager
    def _transaction(self):
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._read_lock:
            return self._reader.execute(sql, params).fetchall()

    @contextlib.contextmanager
    def _writer(self):
        """Exclusive across processes: two `tachy index` runs take turns."""
        with self._write_mutex:
            deadline = time.monotonic() + self._lock_timeout_s
            while True:
                try:
                    fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise IndexBusyError(
                            f"another tachy process has been updating the index in {self.dir} "
                            f"for over {self._lock_timeout_s:.0f} s"
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)

    # -------------------------------------------------------------- update
    def update(self, *, progress: Progress | None = None) -> UpdateStats:
        """Bring the index up to date with the workspace: chunks, the lexical index and,
        for a dense index, the vectors (from the cache, else embedded now). Files with
        unsaved text are indexed from it."""
        started = time.perf_counter()
        with self._writer():
            self.rules.invalidate()
            overlay = self._live_overlay()
            previous = self._file_states()
            diff = _with_overlay(stat_diff(self.root, self.rules, previous), overlay)
            stats = self._apply(diff.suspects, diff.gone, previous, progress, overlay)
            self._forget_hidden(diff.gone, previous)
            if diff.unnamable:
                stats.skipped[UNNAMABLE] = diff.unnamable
            stats.root_hash = merkle_root({**diff.unchanged, **self._file_states(diff.suspects)})
            with self._transaction():
                self._set_meta("root_hash", stats.root_hash)
            if stats.changed_files or stats.removed_files:
                self._collect_garbage()
        self._embed_new(stats, progress)
        stats.files, stats.chunks = self._counts()
        stats.seconds = time.perf_counter() - started
        return stats

    def update_paths(self, paths: Iterable[str]) -> UpdateStats:
        """Re-index the given workspace-relative files now (after a save or an edit),
        vectors included: the fastest path to searchable."""
        started = time.perf_counter()
        wanted = sorted({_workspace_path(p) for p in paths})
        unnamable = [p for p in wanted if not is_nameable(p)]
        wanted = [p for p in wanted if is_nameable(p)]
        with self._writer():
            if any(path.rsplit("/", 1)[-1] in IGNORE_FILES for path in wanted):
                self.rules.invalidate()  # an ignore file changed: judge by what it says now
            overlay = self._live_overlay(wanted)
            previous = self._file_states(wanted)
            visible = []
            gone = []
            for path in wanted:
                target = self.root / path
                if path in overlay or (
                    target.is_file() and self._indexable(path) and self._inside(target)
                ):
                    visible.append(path)
                elif path in previous:
                    gone.append(path)
            stats = self._apply(visible, gone, previous, None, overlay)
            self._forget_hidden(gone, previous)
            if unnamable:
                stats.skipped[UNNAMABLE] = len(unnamable)
            # Every edit of an open file leaves its previous content in the caches.
            self._changed_since_gc += stats.changed_files + stats.removed_files
            if self._changed_since_gc >= GC_MIN_ORPHANS:
                self._collect_garbage()
        self._embed_new(stats, None)
        stats.files, stats.chunks = self._counts()
        stats.seconds = time.perf_counter() - started
        return stats

    def set_overlay(self, path: str, data: bytes | None) -> None:
        """Record an editor's unsaved text for a workspace-relative file (None: the
        buffer was closed or saved, the disk holds the truth again). Only recorded:
        the next update or update_paths indexes it."""
        if data is not None and not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"unsaved text must be bytes, not {type(data).__name__}")
        path = _workspace_path(path)
        with self._overlay_lock:
            if data is None:
                self._overlay.pop(path, None)
            else:
                self._overlay[path] = bytes(data)

    def update_texts(self, texts: Mapping[str, bytes | None]) -> UpdateStats:
        """set_overlay for each path, then index those paths now: what an editor's
        changes (and closes) call."""
        for path, data in texts.items():
            self.set_overlay(path, data)
        return self.update_paths(texts)

    def _live_overlay(self, paths: Iterable[str] | None = None) -> dict[str, bytes]:
        """The unsaved texts (of `paths`, or all) that are indexed in place of the disk."""
        with self._overlay_lock:
            texts = dict(self._overlay)
        if paths is not None:
            texts = {p: texts[p] for p in paths if p in texts}
        return {path: data for path, data in texts.items() if self._overlay_applies(path)}

    def _overlay_applies(self, path: str) -> bool:
        """Unsaved text is indexed where a file would be: visible to the ignore rules
        (never a secret), inside the root, and not in place of anything but a regular
        file (a symlink or a directory keeps the disk's verdict)."""
        target = self.root / path
        if not (is_nameable(path) and self._indexable(path) and self._inside(target)):
            return False
        try:
            return stat.S_ISREG(os.lstat(target).st_mode)
        except FileNotFoundError:
            return True  # a new file, not saved yet
        except OSError:
            return False

    def _forget_hidden(self, gone: Sequence[str], previous: Mapping[str, FileState]) -> None:
        """Purge what the caches hold of files that left the index because they are
        hidden now (ignored, or named like a secret), not merely deleted: their chunks'
        text and vectors, unless another visible file has the same content. (The cache
        keeps a deleted file's chunks for a later restore; an ignored file's text must
        not stay under .tachy/.) Their chunks and lexical rows are gone already."""
        hashes = {
            previous[path].hash
            for path in gone
            if path in previous
            and not previous[path].hash.startswith(SKIPPED)
            and not self._indexable(path)
        }
        if not hashes:
            return
        with self._transaction() as conn:
            for part in _batches(sorted(hashes)):
                marks = ",".join("?" * len(part))
                shared = {
                    r[0]
                    for r in conn.execute(f"SELECT hash FROM files WHERE hash IN ({marks})", part)
                }
                hashes -= shared  # a visible file has this content too
            for part in _batches(sorted(hashes)):
                marks = ",".join("?" * len(part))
                keys = [
                    r[0]
                    for r in conn.execute(
                        f"SELECT embed_key FROM blobs WHERE hash IN ({marks})", part
                    )
                ]
                conn.execute(f"DELETE FROM blobs WHERE hash IN ({marks})", part)
                for keys_part in _batches(keys):
                    conn.execute(
                        f"DELETE FROM embeddings WHERE key IN ({','.join('?' * len(keys_part))}) "
                        "AND key NOT IN (SELECT embed_key FROM blobs)",
                        keys_part,
                    )

    def _collect_garbage(self) -> None:
        """Bound the caches: chunks and embeddings of contents no file has any more are
        kept (a branch switch back finds them) until they outnumber the live files;
        then they all go."""
        self._changed_since_gc = 0
        with self._lock:
            orphans = self._conn.execute(
                "SELECT COUNT(DISTINCT hash) FROM blobs WHERE hash NOT IN (SELECT hash FROM files)"
            ).fetchone()[0]
            live = self._conn.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            if orphans <= max(live, GC_MIN_ORPHANS):
                return
            with self._transaction() as conn:
                conn.execute("DELETE FROM blobs WHERE hash NOT IN (SELECT hash FROM files)")
                conn.execute(
                    "DELETE FROM embeddings WHERE key NOT IN (SELECT embed_key FROM blobs)"
                )

    def _indexable(self, path: str) -> bool:
        return not self.rules.is_ignored(path) and not is_secret_name(path.rsplit("/", 1)[-1])

    def _inside(self, target: Path) -> bool:
        real = Path(os.path.realpath(target))
        return self.root in real.parents

    def _file_states(self, paths: Sequence[str] | None = None) -> dict[str, FileState]:
        if paths is None:
            rows = self._read("SELECT path, size, mtime_ns, hash FROM files")
        else:
            rows = []
            for start in range(0, len(paths), 500):
                part = list(paths[start : start + 500])
                marks = ",".join("?" * len(part))
                rows += self._read(
                    f"SELECT path, size, mtime_ns, hash FROM files WHERE path IN ({marks})", part
                )
        return {path: FileState(size, mtime, digest) for path, size, mtime, digest in rows}

    def _apply(
        self,
        suspects: Sequence[str],
        gone: Sequence[str],
        previous: dict[str, FileState],
        progress: Progress | None,
        overlay: Mapping[str, bytes],
    ) -> UpdateStats:
        stats = UpdateStats()
        removals = list(gone)
        total = len(suspects)
        batch: list[tuple[str, FileState, list[tuple] | None, list[str]]] = []

        def flush() -> None:
            if batch or removals:
                self._write_batch(batch, removals, stats)
                batch.clear()
                removals.clear()

        prepared = self._prepared(suspects, previous, overlay)
        for done, (path, outcome, rows, terms) in enumerate(prepared, 1):
            if isinstance(outcome, str):
                stats.skipped[outcome] = stats.skipped.get(outcome, 0) + 1
                old = previous.get(path)
                if old is not None and not old.hash.startswith(SKIPPED):
                    removals.append(path)  # it had chunks
                state = self._skipped_state(path, outcome, overlay)
                if state is not None:
                    batch.append((path, state, None, []))
            else:
                if rows is not None:
                    stats.changed_files += 1
                    if rows:
                        stats.chunked_files += 1
                    else:
                        stats.reused_files += 1
                batch.append((path, outcome, rows, terms))
            if len(batch) >= FILES_PER_TRANSACTION:
                flush()
            if progress is not None and (done % 50 == 0 or done == total):
                progress("files", done, total)
        flush()
        return stats

    def _skipped_state(
        self, path: str, reason: str, overlay: Mapping[str, bytes]
    ) -> FileState | None:
        """What remembers a verdict: the file's stat, so that an unchanged binary or
        generated file is not read again next time; for unsaved text the unsaved mark,
        so that the disk is read again once it is dropped. None: the file vanished."""
        if path in overlay:
            return FileState(len(overlay[path]), UNSAVED_MTIME_NS, SKIPPED + reason)
        try:
            info = os.lstat(self.root / path)
        except OSError:
            return None
        return FileState(info.st_size, info.st_mtime_ns, SKIPPED + reason)

    def _prepared(
        self,
        suspects: Sequence[str],
        previous: dict[str, FileState],
        overlay: Mapping[str, bytes],
    ) -> Iterator[Prepared]:
        """prepare_content for the suspects with unsaved text (here: the workers read
        the disk), then prepare_file for the others: on worker processes for big
        updates (chunking is CPU-bound Python), in this process for a few files."""
        for path in suspects:
            if path in overlay:
                old = previous[path].hash if path in previous else None
                yield prepare_content(path, overlay[path], old, self._blob_cached)
        suspects = [p for p in suspects if p not in overlay]
        root = str(self.root)
        olds = [previous[p].hash if p in previous else None for p in suspects]
        if len(suspects) < PARALLEL_ABOVE_FILES or (os.cpu_count() or 1) < 2:
            for path, old in zip(suspects, olds, strict=True):
                yield prepare_file(root, path, old, self._blob_cached)
            return
        context = multiprocessing.get_context("forkserver")  # no fork of our threads
        # The forkserver and each worker exit when this process does, even by SIGKILL
        # (index.lifeline). The preload takes effect when the forkserver starts.
        context.set_forkserver_preload(["__main__", "index.forkserver_lifeline"])
        workers = min(os.cpu_count() or 1, MAX_WORKERS)
        db = str(self.dir / "index.db")
        n = len(suspects)
        done = 0
        try:
            with ProcessPoolExecutor(
                max_workers=workers,
                mp_context=context,
                initializer=die_with,
                initargs=(os.getpid(),),
            ) as pool:
                results = pool.map(
                    _prepare_in_worker, [root] * n, [db] * n, suspects, olds, chunksize=16
                )
                for result in results:
                    yield result
                    done += 1
        except BrokenProcessPool:
            # Workers cannot start where __main__ cannot be re-imported (a script piped
            # to `python -`): carry on in this process.
            for path, old in zip(suspects[done:], olds[done:], strict=True):
                yield prepare_file(root, path, old, self._blob_cached)

    def _blob_cached(self, digest: str) -> bool:
        return bool(self._read("SELECT 1 FROM blobs WHERE hash=? LIMIT 1", (digest,)))

    def _write_batch(
        self,
        batch: list[tuple[str, FileState, list[tuple] | None, list[str]]],
        removals: list[str],
        stats: UpdateStats,
    ) -> None:
        # Chunks whose text was embedded before (a rename, a restored file) get their
        # vectors from the cache, whether or not the store is loaded now.
        model = self._meta("embed_model")
        added_vectors: list[tuple[int, bytes]] = []
        removed_ids: list[int] = []
        with self._lock:
            with self._transaction() as conn:
                for path in removals:
                    removed_ids += self._remove_path(conn, path)
                    conn.execute("DELETE FROM files WHERE path=?", (path,))
                    stats.removed_files += 1
                for path, state, rows, terms in batch:
                    conn.execute(
                        "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)",
                        (path, state.size, state.mtime_ns, state.hash),
                    )
                    if rows is None:
                        continue
                    removed_ids += self._remove_path(conn, path)
                    if rows:
                        conn.executemany(
                            "INSERT OR IGNORE INTO blobs VALUES (?,?,?,?,?,?,?,?,?,?)", rows
                        )
                    seqs = conn.execute(
                        "SELECT seq, symbol, text, embed_key FROM blobs WHERE hash=? AND kind != 'empty' "
                        "ORDER BY seq",
                        (state.hash,),
                    ).fetchall()
                    # Ids are ours to assign: this process holds the writer lock.
                    first = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM chunks").fetchone()[
                        0
                    ]
                    ids = range(first, first + len(seqs))
                    conn.executemany(
                        "INSERT INTO chunks(id, path, hash, seq) VALUES (?, ?, ?, ?)",
                        [
                            (i, path, state.hash, seq)
                            for i, (seq, *_) in zip(ids, seqs, strict=True)
                        ],
                    )
                    lexical_rows = [
                        (i, path, symbol, text)
                        for i, (_, symbol, text, _) in zip(ids, seqs, strict=True)
                    ]
                    waiting = []
                    for chunk_id, (*_, embed_key) in zip(ids, seqs, strict=True):
                        cached = (
                            model
                            and conn.execute(
                                "SELECT vector FROM embeddings WHERE key=? AND model=?",
                                (embed_key, model),
                            ).fetchone()
                        )
                        if cached:
                            added_vectors.append((chunk_id, cached[0]))
                        else:
                            waiting.append((chunk_id,))
                    conn.executemany("INSERT INTO pending VALUES (?)", waiting)
                    # Fresh rows come with their terms; cached ones are tokenized here.
                    self.lexical.add(lexical_rows, terms if rows else None)
                if model and (removed_ids or added_vectors):
                    self._bump_epoch(conn)
            if self._vectors is not None:
                if removed_ids:
                    self._vectors.remove(removed_ids)
                if added_vectors:
                    ids = np.array([i for i, _ in added_vectors], dtype=np.int64)
                    self._vectors.add(
                        ids,
                        np.stack([np.frombuffer(v, dtype=np.float32) for _, v in added_vectors]),
                    )

    def _remove_path(self, conn: sqlite3.Connection, path: str) -> list[int]:
        ids = [row[0] for row in conn.execute("SELECT id FROM chunks WHERE path=?", (path,))]
        if ids:
            self.lexical.remove(ids)
            conn.execute("DELETE FROM chunks WHERE path=?", (path,))
            conn.executemany("DELETE FROM pending WHERE chunk_id=?", [(i,) for i in ids])
        return ids

    def _bump_epoch(self, conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='vector_epoch'")

    def _counts(self) -> tuple[int, int]:
        files = self._read("SELECT COUNT(*) FROM files WHERE hash NOT LIKE 'skipped:%'")[0][0]
        chunks = self._read("SELECT COUNT(*) FROM chunks")[0][0]
        return files, chunks

    # --------------------------------------------------------------- dense
    @property
    def embedder(self) -> Any:
        if not self.dense:
            raise CodeIndexError("dense search is switched off for this index")
        if self._embedder is None:
            spec = self._embedder_spec
            if isinstance(spec, str):
                from index.embedder import DEFAULT_EMBEDDER, embedder_kind, shared_embedder

                if spec == "recorded":  # the one whose vectors the index holds
                    spec = embedder_kind(self._meta("embed_model") or "") or DEFAULT_EMBEDDER
                elif spec == "default":
                    spec = DEFAULT_EMBEDDER
                self._embedder = shared_embedder(spec)
            else:
                self._embedder = spec
        return self._embedder

    def _store(self) -> Any:
        """The vector store, loaded or rebuilt so that it mirrors the database."""
        if self._vectors is not None:
            return self._vectors
        from index.vectors import VectorStore, VectorStoreError

        embedder = self.embedder
        with self._lock:
            if self._meta("embed_model") != embedder.name:
                # Another model: its vectors mean nothing to this one.
                with self._transaction() as conn:
                    self._set_meta("embed_model", embedder.name)
                    self._bump_epoch(conn)
                    # What waits for a vector is now: every chunk this model has not seen.
                    conn.execute("DELETE FROM pending")
                    conn.execute(
                        "INSERT INTO pending SELECT c.id FROM chunks c "
                        "JOIN blobs b ON b.hash = c.hash AND b.seq = c.seq WHERE NOT EXISTS "
                        "(SELECT 1 FROM embeddings e WHERE e.key = b.embed_key AND e.model = ?)",
                        (embedder.name,),
                    )
                shutil.rmtree(self.dir / "vectors", ignore_errors=True)
            epoch = self._meta("vector_epoch", "0")
            store = None
            saved = self.dir / "vectors"
            with contextlib.suppress(OSError, VectorStoreError, ValueError):
                if (saved / "epoch").read_text().strip() == epoch:
                    store = VectorStore.load(saved, embedder.dim)
            if store is None:
                store = VectorStore(embedder.dim)
                ids, vectors = [], []
                rows = self._conn.execute(
                    "SELECT c.id, e.vector FROM chunks c JOIN blobs b ON b.hash = c.hash AND b.seq = c.seq "
                    "JOIN embeddings e ON e.key = b.embed_key AND e.model = ?",
                    (embedder.name,),
                )
                for chunk_id, blob in rows:
                    ids.append(chunk_id)
                    vectors.append(np.frombuffer(blob, dtype=np.float32))
                    if len(ids) >= 10_000:
                        store.add(np.array(ids, dtype=np.int64), np.stack(vectors))
                        ids, vectors = [], []
                if ids:
                    store.add(np.array(ids, dtype=np.int64), np.stack(vectors))
                store.compact()
            self._vectors = store
            return store

    def pending_count(self) -> int:
        if not self.dense:
            return 0
        return self._read("SELECT COUNT(*) FROM pending")[0][0]

    def _embed_new(self, stats: UpdateStats, progress: Progress | None) -> None:
        """Embed what an update left without a vector, before it returns. The static
        model keeps pace with chunking (the stdlib in well under a minute, a saved file
        in milliseconds), so a file is searchable densely as soon as lexically and no
        embedding thread is needed. A model that cannot be loaded leaves the index
        lexical, and stats.embed_error says why."""
        if not self.dense:
            return
        from index.embedder import EmbedderError

        started = time.perf_counter()
        try:
            stats.embedded = self.embed_pending(progress=progress)
        except EmbedderError as exc:
            stats.embed_error = str(exc)
            _warn_once(f"dense search is unavailable: {exc}")
        stats.embed_seconds = time.perf_counter() - started

    def embed_pending(self, *, limit: int | None = None, progress: Progress | None = None) -> int:
        """Embed chunks that have no vector yet (`limit`: at most that many, for
        measuring), in path order. update() calls this; it is public for what leaves
        chunks waiting: an update of an index opened without dense search, or a process
        killed while embedding. Returns how many chunks were embedded (cache hits do
        not count)."""
        with self._embedding:
            return self._embed_pending(limit, progress)

    def _embed_pending(self, limit: int | None, progress: Progress | None) -> int:
        store = self._store()
        model = self.embedder.name
        # The pending list keeps this proportional to what changed, not to the index.
        rows = self._read(
            "SELECT c.id, c.path, b.embed_key, b.text, b.signature FROM pending p "
            "JOIN chunks c ON c.id = p.chunk_id JOIN blobs b ON b.hash = c.hash AND b.seq = c.seq"
        )
        if not rows:
            return 0  # nothing to do, nothing to save (every search's update comes here)
        rows.sort(key=lambda r: (r[1], r[0]))
        if limit is not None:
            rows = rows[:limit]
        done = 0
        for start in range(0, len(rows), EMBED_BATCH):
            if self._stop.is_set():
                break
            batch = rows[start : start + EMBED_BATCH]
            # One vector per distinct text: duplicates share it, and texts embedded
            # before (by an earlier batch) come from the cache.
            texts: dict[str, str] = {}
            for _, _, key, text, signature in batch:
                texts.setdefault(key, embed_input(signature, text))
            by_key = self._cached_vectors(list(texts), model)
            keys = [k for k in texts if k not in by_key]
            if keys:
                vectors = np.asarray(
                    self.embedder.embed([texts[k] for k in keys]), dtype=np.float32
                )
                by_key.update(zip(keys, vectors, strict=True))
            # The store changes under the same lock as the database, so a concurrent
            # save_vectors() never pairs a store with an epoch it does not match.
            with self._writer(), self._lock:
                with self._transaction() as conn:
                    conn.executemany(
                        "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                        [(k, model, by_key[k].tobytes()) for k in keys],
                    )
                    live = {
                        row[0]
                        for row in conn.execute(
                            f"SELECT id FROM chunks WHERE id IN ({','.join('?' * len(batch))})",
                            [r[0] for r in batch],
                        )
                    }
                    conn.executemany(
                        "DELETE FROM pending WHERE chunk_id=?", [(r[0],) for r in batch]
                    )
                    self._bump_epoch(conn)
                kept = [r for r in batch if r[0] in live]  # a file may have changed meanwhile
                if kept:
                    store.add(
                        np.array([r[0] for r in kept], dtype=np.int64),
                        np.stack([by_key[r[2]] for r in kept]),
                    )
            done += len(keys)
            if progress is not None:
                progress("embeddings", min(start + len(batch), len(rows)), len(rows))
        if store.needs_compaction():
            store.compact()
        self.save_vectors()
        return done

    def _cached_vectors(self, keys: list[str], model: str) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            for key, blob in self._read(
                f"SELECT key, vector FROM embeddings WHERE model=? AND key IN ({','.join('?' * len(part))})",
                [model, *part],
            ):
                found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def save_vectors(self) -> None:
        """Persist the vector store with the epoch it mirrors (atomic per file)."""
        if self._vectors is None:
            return
        with self._lock:
            epoch = self._meta("vector_epoch", "0")
            target = self.dir / "vectors"
            self._vectors.save(target)
            tmp = target / "epoch.tmp"
            tmp.write_text(epoch)
            os.replace(tmp, target / "epoch")

    # -------------------------------------------------------------- search
    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        paths: Sequence[str] | None = None,
        mode: str = "hybrid",
        per_file: int = CHUNKS_PER_FILE,
    ) -> list[SearchHit]:
        """The chunks that best answer `query`. mode: hybrid | lexical | dense. Hybrid
        scores the candidates of both retrievers with their symbols' names
        (index.search); before anything is embedded, the lexical candidates alone."""
        found = self.candidates(query, paths=paths, mode=mode)
        return [
            self._hit(found.rows[cid], score)
            for cid, score in ranked(found, limit=limit, per_file=per_file)
        ]

    def candidates(
        self, query: str, *, paths: Sequence[str] | None = None, mode: str = "hybrid"
    ) -> Candidates:
        """What search() ranks for `query`: each retriever's candidates among the chunks
        that may be shown, with the signals about their symbols (index.search)."""
        if mode not in ("hybrid", "lexical", "dense"):
            raise CodeIndexError(f"unknown search mode {mode!r}; use hybrid, lexical or dense")
        query = _sql_text(query[:MAX_QUERY_CHARS])
        if not query.strip():
            return Candidates()
        globs = normalise_globs(None if paths is None else [_sql_text(p) for p in paths])
        lexical: list[tuple[int, float]] = []
        dense: list[tuple[int, float]] = []
        if mode != "dense":
            with self._read_lock:
                lexical = self._lexical_reader.search(query, limit=CANDIDATES, path_globs=globs)
        # Hybrid skips the model while nothing is embedded (no point loading it).
        if mode == "dense" or (mode == "hybrid" and self.dense and self._has_embeddings()):
            found = self._dense_candidates(query, globs)
            if mode == "dense" and found is None:
                raise CodeIndexError("no embeddings yet: run `tachy index` to compute them")
            dense = found or []
        rows = self._rows(list(dict.fromkeys(cid for cid, _ in [*lexical, *dense])))
        visible = self._visible.filter(row[0] for row in rows.values())
        rows = {cid: row for cid, row in rows.items() if row[0] in visible}
        # Rescaled over what may be shown: a hidden or vanished chunk sets no bound.
        lexical = [(cid, score) for cid, score in lexical if cid in rows]
        dense = [(cid, score) for cid, score in dense if cid in rows]
        identifiers = query_identifiers(query)
        return Candidates(
            lexical=lexical,
            dense=dense,
            rows=rows,
            names=self._name_similarity(query, rows) if mode == "hybrid" else {},
            named={cid for cid, row in rows.items() if symbol_named(row[4], identifiers)},
            bonus=named_bonus(query),
        )

    def _name_similarity(self, query: str, rows: dict[int, tuple]) -> dict[int, float]:
        """Cosine of the query and each chunk's symbol name (its last part), under the
        static code model whatever the index's embedder (it takes a few ms for a
        page of candidates). {} when that model cannot be loaded."""
        from index.embedder import EmbedderError, shared_embedder

        names = {cid: row[4].rsplit(".", 1)[-1] for cid, row in rows.items() if row[4]}
        if not names:
            return {}
        try:
            model = shared_embedder("static")
        except EmbedderError as exc:
            _warn_once(f"search ranks without symbol names: {exc}")
            return {}
        unique = sorted(set(names.values()))
        vectors = model.embed([query, *unique])
        similarity = dict(zip(unique, (vectors[1:] @ vectors[0]).tolist(), strict=True))
        return {cid: similarity[name] for cid, name in names.items()}

    def _has_embeddings(self) -> bool:
        if self._vectors is not None:
            return len(self._vectors) > 0
        model = self._meta("embed_model")
        return bool(
            model and self._read("SELECT 1 FROM embeddings WHERE model=? LIMIT 1", (model,))
        )

    def _dense_candidates(
        self, query: str, globs: list[str] | None
    ) -> list[tuple[int, float]] | None:
        """The dense index's best (chunk_id, cosine) pairs under the path filters;
        None when nothing is embedded."""
        store = self._store()
        if len(store) == 0:
            return None
        vector = np.asarray(self.embedder.embed([query]), dtype=np.float32)[0]
        k = CANDIDATES * (5 if globs else 1)
        ranked = store.search(vector, k)
        if globs is None:
            return ranked[:CANDIDATES]
        paths = {cid: row[0] for cid, row in self._rows([cid for cid, _ in ranked]).items()}
        return [
            (cid, score)
            for cid, score in ranked
            if cid in paths and path_matches(paths[cid], globs)
        ][:CANDIDATES]

    def _rows(self, ids: list[int]) -> dict[int, tuple]:
        """id -> (path, start, end, text, symbol) for ids that still exist."""
        found: dict[int, tuple] = {}
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            for row in self._read(
                "SELECT c.id, c.path, b.start_line, b.end_line, b.text, b.symbol FROM chunks c "
                "JOIN blobs b ON b.hash = c.hash AND b.seq = c.seq "
                f"WHERE c.id IN ({','.join('?' * len(part))})",
                part,
            ):
                found[row[0]] = row[1:]
        return found

    @staticmethod
    def _hit(row: tuple, score: float) -> SearchHit:
        path, start, end, text, symbol = row
        lines = text.split("\n")
        snippet = "\n".join(lines[:SNIPPET_LINES])
        if len(lines) > SNIPPET_LINES:
            snippet += f"\n[... {len(lines) - SNIPPET_LINES} more lines]"
        return SearchHit(path, start, end, symbol, round(score, 6), snippet)

    # ------------------------------------------------------------- symbols
    def symbols(self, query: str, *, limit: int = 100) -> list[SymbolHit]:
        """Definitions whose name matches `query` the way editors' symbol pickers do:
        case-insensitive, as a subsequence ("prsCfg" finds parse_config), an exact
        name first, then prefixes, substrings, subsequences; ties to the shorter name,
        then to the query's case, then by path and line. A query with a dot matches
        qualified names ("Vector.len"). An empty query lists the first definitions by
        path and line. Whitespace in the query is ignored."""
        wanted = _sql_text("".join(query.split())[:MAX_SYMBOL_QUERY_CHARS])
        if limit <= 0:
            return []
        chosen = self._symbol_matches(wanted, limit) if wanted else self._first_symbols(limit)
        return self._symbol_hits(chosen)

    def _symbol_matches(self, query: str, limit: int) -> list[tuple[str, str]]:
        """The best `limit` (path, symbol) pairs. A query that few names match is one
        scan; a broad one (a letter) is read one match tier at a time, shortest names
        first, and stops once no later name can make the cut."""
        ranking = _SymbolRanking(query)
        stages = _symbol_stages(ranking.needle)
        everything = stages[-1][1]
        rows = self._read(_SYMBOLS_LIKE, (*everything, SYMBOL_SCAN_ROWS))
        if len(rows) >= SYMBOL_SCAN_ROWS:
            if not ranking.qualified:
                for tier, patterns in stages:
                    self._rank_shortest_first(ranking, patterns, tier, limit)
                    if ranking.complete(tier, limit):
                        break
                return ranking.best(limit)
            # A qualified match is ranked by the whole symbol's length: read them all.
            rows = self._read(_SYMBOLS_LIKE, (*everything, -1))
        for row in rows:
            ranking.add(*row)
        return ranking.best(limit)

    def _rank_shortest_first(
        self, ranking: _SymbolRanking, patterns: tuple[str, ...], tier: int, limit: int
    ) -> None:
        """Rank one stage's candidates, shortest name first, until `limit` pairs match
        up to `tier` and the names of the length reached are all in."""
        with self._read_lock:
            cursor = self._reader.execute(_SYMBOLS_SHORTEST_FIRST, patterns)
            try:
                length = 0
                for path, symbol, start in cursor:
                    name_length = len(symbol) - symbol.rfind(".") - 1
                    if name_length > length:
                        if ranking.complete(tier, limit, length):
                            return
                        length = name_length
                    ranking.add(path, symbol, start)
            finally:
                cursor.close()  # ends the read transaction

    def _first_symbols(self, limit: int) -> list[tuple[str, str]]:
        """The first `limit` (path, symbol) pairs by path and line, reading whole
        files of definitions in path order until there are enough."""
        first: dict[tuple[str, str], int] = {}
        with self._read_lock:
            cursor = self._reader.execute(_SYMBOLS_BY_PATH)
            try:
                last = None
                for path, symbol, start in cursor:
                    if path != last and len(first) >= limit:
                        break
                    last = path
                    first[path, symbol] = min(start, first.get((path, symbol), start))
            finally:
                cursor.close()  # ends the read transaction
        return sorted(first, key=lambda key: (key[0], first[key], key[1]))[:limit]

    def _symbol_hits(self, chosen: list[tuple[str, str]]) -> list[SymbolHit]:
        """The hits for (path, symbol) pairs (one gone since it was chosen, or hidden by
        the ignore rules since it was indexed, is left out)."""
        visible = self._visible.filter(path for path, _ in chosen)
        chosen = [(path, symbol) for path, symbol in chosen if path in visible]
        hits = []
        with self._read_lock:
            for path, symbol in chosen:
                rows = self._reader.execute(_SYMBOL_CHUNKS, (symbol, symbol + "/", path))
                hit = _definition(path, symbol, rows.fetchall())
                if hit is not None:
                    hits.append(hit)
        return hits

    # -------------------------------------------------------------- status
    def status(self) -> IndexStatus:
        files, chunks = self._counts()
        embedded = (
            chunks - self._read("SELECT COUNT(*) FROM pending")[0][0]
            if self._meta("embed_model")
            else 0
        )
        state = "empty" if files == 0 else ("ready" if chunks and embedded >= chunks else "lexical")
        return IndexStatus(state, files, chunks, embedded)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self.save_vectors()
        with self._lock:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '1')")
            self._conn.close()
        with self._read_lock:
            self._reader.close()
        self._lock_file.close()

    def __enter__(self) -> CodeIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FreshIndex:
    """A workspace's index as the agent's codebase_search uses it: opened on first use
    and brought up to date (changed files only, vectors included) before every search,
    since the agent edits files between searches."""

    def __init__(self, root: str | os.PathLike[str], **options: Any) -> None:
        self.root = root
        self.options = options
        self._index: CodeIndex | None = None

    def search(
        self, query: str, *, paths: Sequence[str] | None = None, limit: int = 10
    ) -> list[SearchHit]:
        return self._fresh().search(query, paths=paths, limit=limit)

    def symbols(self, query: str, *, limit: int = 100) -> list[SymbolHit]:
        return self._fresh().symbols(query, limit=limit)

    def _fresh(self) -> CodeIndex:
        if self._index is None:
            self._index = CodeIndex(self.root, lock_timeout_s=5, **self.options)
        with contextlib.suppress(IndexBusyError):  # another indexer: search what is there
            self._index.update()
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None
