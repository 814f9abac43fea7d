"""The lexical index: SQLite FTS5 over pre-tokenized chunk terms.

`LexicalIndex` keeps its tables (all named ``lex_*``) in a database whose connection
and transactions belong to the caller (the indexer). Each `add` / `remove` runs in a
savepoint: all or nothing, nested in the caller's open transaction and committed or
rolled back with it. Only on a connection in autocommit mode (``isolation_level=None``)
with no transaction open does the savepoint commit by itself, as every statement there
would. Opening an index whose tables are current writes nothing, so a second (reading)
connection may open the same database.

Tables:

- ``lex_fts``: a *contentless* FTS5 table (``content=''``), rowid = chunk_id, three
  columns of `index.tokenize` terms: ``symbol`` (the chunk's symbol name), ``path``
  (the parts of its workspace-relative path) and ``body`` (its text). FTS5 only splits
  the term strings on spaces (``ascii`` tokenizer, ``_`` a token character). bm25 weighs
  a symbol match `SYMBOL_WEIGHT` times and a path match `PATH_WEIGHT` times a body
  match.
- ``lex_docs``: chunk_id → raw path (for path globs, filtered in SQL with GLOB) and the
  zlib-compressed term strings the chunk was indexed with. A contentless table can only
  delete a row when given the exact values it indexed; keeping them compressed costs
  far less than letting FTS5 store its own uncompressed copy.
- ``lex_vocab``: an fts5vocab view of ``lex_fts`` (document frequency per term), used to
  pick the query terms worth evaluating.
- ``lex_meta``: the layout/tokenizer version and the chunk count.

A database holding another `LAYOUT_VERSION` has its ``lex_*`` tables dropped and
recreated empty; `created` tells the caller to add every chunk again.

Search. FTS5 has no top-k pruning: an OR query computes bm25 for every matching row, at
about 2 µs a row, so "parse config file" over 100k chunks (30k+ matches) would take
60+ ms. `search` therefore looks up each query term's document frequency (fts5vocab,
cached) and ranks only the chunks holding one of the *rare* terms (up to
`_RANKED_BUDGET` postings), with two disjoint expressions, ``(rare) NOT (common)`` and
``(rare) AND (common)``, so every ranked chunk still gets its exact bm25 over all terms
(bm25 is a sum over phrases). Chunks holding only common terms are left out; on the
benchmark's queries the top 10 equals the full ranking for 98% of natural-language
queries. A query whose rarest term is itself in more than `_HEAVY_DF` chunks ranks
chunks whose symbol holds a term, then lists other matches unranked.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from index.tokenize import (
    MAX_QUERY_TERMS,
    index_terms,
    match_expression,
    query_terms,
)

__all__ = ["LAYOUT_VERSION", "LexicalIndex", "glob_to_sql"]

# Bump when the tokenizer's output or the table layout changes: old tables are rebuilt.
LAYOUT_VERSION = 1

# bm25 column weights (tuned on the bench.codesearch docstring set: a symbol weight
# of 8 beat 2 and 4 by 1-2 points of MRR@10; the path weight barely matters).
SYMBOL_WEIGHT = 8.0
PATH_WEIGHT = 1.5
BODY_WEIGHT = 1.0

# Query terms looked up in the vocabulary before the expression is built.
_CANDIDATE_TERMS = 256
# Rows ranked by bm25 per query, about: the rare terms' document frequencies sum.
_RANKED_BUDGET = 10_000
# ... for expressions of up to this many phrases; proportionally fewer for more.
_BUDGET_PHRASES = 16
# Postings of the common terms read per query (bm25 reads each term's list once more).
_COMMON_BUDGET = 60_000
# A query whose rarest term is in more chunks than this ranks symbol matches only.
_HEAVY_DF = _RANKED_BUDGET
_SEP = "\x00"
_TABLES = ("lex_vocab", "lex_fts", "lex_docs", "lex_meta")


def _glob_alternatives(pattern: str) -> list[str]:
    """SQLite GLOB patterns that together match what one user glob means."""
    pattern = pattern.strip().replace("\\", "/")
    while pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.lstrip("/")
    if not pattern or pattern in {"*", "**"}:
        return ["*"]
    directory = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    # fnmatch's negated class [!x] is GLOB's [^x].
    pattern = pattern.replace("[!", "[^")
    # "**/" may match no directory at all: expand each (up to 3) into two alternatives.
    alternatives = [pattern]
    for _ in range(3):
        expanded = []
        for alt in alternatives:
            i = alt.find("**/")
            if i < 0:
                expanded.append(alt)
            else:
                expanded += [alt[:i] + "*/" + alt[i + 3 :], alt[:i] + alt[i + 3 :]]
        alternatives = expanded
    out: list[str] = []
    for alt in alternatives:
        while "**" in alt:
            alt = alt.replace("**", "*")
        if directory:
            candidates = [alt + "/*"]
        else:
            # The path itself, or anything below it when it names a directory.
            candidates = [alt, alt + "/*"]
        if "/" not in alt:
            # No slash: a name matched at any depth (as in .gitignore).
            candidates += ["*/" + c for c in candidates]
        out += [c for c in candidates if c not in out]
    return out


def glob_to_sql(globs: Iterable[str], column: str = "d.path") -> tuple[str, list[str]]:
    """A SQL condition (and its parameters) for fnmatch-style path globs.

    ``*`` matches any characters, ``/`` included (fnmatch semantics); ``?`` one
    character; ``[abc]`` / ``[!abc]`` a class; ``**`` is ``*``, and ``**/`` may also
    match no directory; a trailing ``/`` (``tests/``) or a plain name (``src``) matches
    everything below that directory; a pattern without ``/`` (``*.py``,
    ``test_*.py``) matches the file name at any depth. A glob starting with ``!``
    excludes. Matching is case-sensitive. Paths are workspace-relative with ``/``.
    """
    include: list[str] = []
    exclude: list[str] = []
    for glob in globs:
        glob = glob.strip()
        if not glob or glob == "!":
            continue
        if glob.startswith("!"):
            exclude += _glob_alternatives(glob[1:])
        else:
            include += _glob_alternatives(glob)
    clauses: list[str] = []
    if include:
        clauses.append("(" + " OR ".join(f"{column} GLOB ?" for _ in include) + ")")
    if exclude:
        clauses.append("NOT (" + " OR ".join(f"{column} GLOB ?" for _ in exclude) + ")")
    return " AND ".join(clauses), include + exclude


class LexicalIndex:
    """Full-text search over chunks: (chunk_id, path, symbol, text) rows."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.created = self._ensure_schema()
        self._df: dict[str, int] = {}  # term -> document frequency, see _document_frequencies
        self._df_total = 0

    # -- schema ---------------------------------------------------------------------

    def _schema_is_current(self) -> bool:
        conn = self.conn
        marks = ",".join("?" * len(_TABLES))
        sql = f"SELECT count(*) FROM sqlite_master WHERE name IN ({marks})"
        if conn.execute(sql, _TABLES).fetchone()[0] != len(_TABLES):
            return False
        row = conn.execute("SELECT value FROM lex_meta WHERE key = 'version'").fetchone()
        return row is not None and row[0] == LAYOUT_VERSION

    def _ensure_schema(self) -> bool:
        """Create the tables if missing (or of another version). True if created."""
        if self._schema_is_current():
            return False  # read only: a second connection (a reader) writes nothing
        conn = self.conn
        with self._atomic():
            for name in _TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {name}")
            conn.execute(
                "CREATE VIRTUAL TABLE lex_fts USING fts5("
                "symbol, path, body, content='', tokenize=\"ascii tokenchars '_'\")"
            )
            conn.execute("CREATE VIRTUAL TABLE lex_vocab USING fts5vocab(lex_fts, 'row')")
            conn.execute(
                "CREATE TABLE lex_docs (chunk_id INTEGER PRIMARY KEY, path TEXT NOT NULL, "
                "terms BLOB NOT NULL)"
            )
            conn.execute("CREATE TABLE lex_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            conn.execute(
                "INSERT INTO lex_meta (key, value) VALUES ('version', ?), ('count', 0)",
                (LAYOUT_VERSION,),
            )
        return True

    @contextmanager
    def _atomic(self) -> Iterator[None]:
        """One write, all or nothing, inside the caller's transaction.

        A savepoint nests in the caller's open transaction. With none open, a
        connection in autocommit mode (``isolation_level=None``) commits the write at
        the end, as it would each statement; one in sqlite3's default mode gets the
        transaction its first write would have opened anyway, left open for the
        caller to commit.
        """
        conn = self.conn
        if not conn.in_transaction and conn.isolation_level is not None:
            conn.execute("BEGIN")
        conn.execute("SAVEPOINT lex_write")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK TO lex_write")
            conn.execute("RELEASE lex_write")
            raise
        conn.execute("RELEASE lex_write")

    # -- writing --------------------------------------------------------------------

    def add(
        self,
        rows: Iterable[tuple[int, str, str, str]],
        body_terms: Iterable[str | None] | None = None,
    ) -> None:
        """Index chunks: (chunk_id, path, symbol, text). A chunk_id already indexed is
        replaced. Paths are workspace-relative with ``/``. `body_terms`, when given,
        holds `index_terms(text)` for each row (None: compute it here), so that the
        tokenizing can be done ahead, on other processes."""
        docs = []
        fts = []
        given = iter(body_terms) if body_terms is not None else None
        for chunk_id, path, symbol, text in rows:
            chunk_id = int(chunk_id)
            symbol_terms = index_terms(symbol or "")
            path_terms = index_terms(path)
            ready = next(given) if given is not None else None
            body_terms_ = ready if ready is not None else index_terms(text or "")
            blob = zlib.compress(_SEP.join((symbol_terms, path_terms, body_terms_)).encode(), 1)
            docs.append((chunk_id, path, blob))
            fts.append((chunk_id, symbol_terms, path_terms, body_terms_))
        if not docs:
            return
        # Replacing: drop the old rows first (and a chunk_id repeated within the batch
        # keeps its last row).
        latest = {row[0]: i for i, row in enumerate(docs)}
        if len(latest) != len(docs):
            docs = [docs[i] for i in sorted(latest.values())]
            fts = [fts[i] for i in sorted(latest.values())]
        conn = self.conn
        with self._atomic():
            self._remove(latest)
            conn.executemany("INSERT INTO lex_docs (chunk_id, path, terms) VALUES (?, ?, ?)", docs)
            conn.executemany(
                "INSERT INTO lex_fts (rowid, symbol, path, body) VALUES (?, ?, ?, ?)", fts
            )
            conn.execute("UPDATE lex_meta SET value = value + ? WHERE key = 'count'", (len(docs),))

    def remove(self, chunk_ids: Iterable[int]) -> None:
        """Forget chunks; ids not indexed are ignored."""
        ids = sorted({int(i) for i in chunk_ids})
        if ids:
            with self._atomic():
                self._remove(ids)

    def _remove(self, ids: Iterable[int]) -> None:
        ids = sorted(ids)
        conn = self.conn
        removed = 0
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            marks = ",".join("?" * len(batch))
            old = conn.execute(
                f"SELECT chunk_id, terms FROM lex_docs WHERE chunk_id IN ({marks})", batch
            ).fetchall()
            if not old:
                continue
            deletes = []
            for chunk_id, blob in old:
                symbol_terms, path_terms, body_terms = zlib.decompress(blob).decode().split(_SEP)
                deletes.append((chunk_id, symbol_terms, path_terms, body_terms))
            conn.executemany(
                "INSERT INTO lex_fts (lex_fts, rowid, symbol, path, body) "
                "VALUES ('delete', ?, ?, ?, ?)",
                deletes,
            )
            conn.executemany("DELETE FROM lex_docs WHERE chunk_id = ?", [(row[0],) for row in old])
            removed += len(old)
        if removed:
            conn.execute("UPDATE lex_meta SET value = value - ? WHERE key = 'count'", (removed,))

    def verify(self) -> list[str]:
        """Problems found in the tables ([] when sound): FTS5's own integrity check and
        agreement of the chunk counts. Reads the whole index (about a second per
        100k chunks)."""
        problems: list[str] = []
        conn = self.conn
        try:
            conn.execute("INSERT INTO lex_fts (lex_fts) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            problems.append(f"lex_fts: {exc}")
        try:
            docs = conn.execute("SELECT count(*) FROM lex_docs").fetchone()[0]
            sizes = conn.execute("SELECT count(*) FROM lex_fts_docsize").fetchone()[0]
            counted = self.count()
        except sqlite3.DatabaseError as exc:
            return [*problems, f"lex tables: {exc}"]
        if not docs == sizes == counted:
            problems.append(
                f"chunk counts disagree: lex_docs {docs}, lex_fts {sizes}, lex_meta {counted}"
            )
        return problems

    def optimize(self) -> None:
        """Merge the FTS5 index into one segment (after a bulk build; optional)."""
        self.conn.execute("INSERT INTO lex_fts (lex_fts) VALUES ('optimize')")

    # -- reading --------------------------------------------------------------------

    def count(self) -> int:
        """How many chunks are indexed."""
        row = self.conn.execute("SELECT value FROM lex_meta WHERE key = 'count'").fetchone()
        return int(row[0]) if row else 0

    def _plan(self, terms: list[str]) -> tuple[list[str], list[str]]:
        """Split the query terms worth evaluating into (rare, common).

        Terms absent from the index are dropped, and so are terms in more than half of
        all chunks (bm25 gives them no weight) unless nothing else is left. The rest,
        rarest first and at most MAX_QUERY_TERMS, are *rare* while their document
        frequencies sum to at most `_RANKED_BUDGET` (the rarest always is), then
        *common* while the sum stays within `_COMMON_BUDGET` more; the commonest
        beyond that are dropped. Only chunks holding a rare term are ranked (bm25
        costs microseconds per ranked row); common terms add their exact share to the
        score of those chunks.
        """
        df = self._document_frequencies(terms)
        present = sorted((t for t in terms if t in df), key=lambda t: df[t])
        if not present:
            return [], []
        total = max(self.count(), 1)
        useful = [t for t in present if df[t] * 2 < total] or present[:1]
        useful = useful[:MAX_QUERY_TERMS]
        # Ranking a row costs more the more phrases the expression has.
        budget = _RANKED_BUDGET * _BUDGET_PHRASES // max(_BUDGET_PHRASES, len(useful))
        rare: list[str] = []
        common: list[str] = []
        spent = 0
        for term in useful:
            if not common and (not rare or spent + df[term] <= budget):
                rare.append(term)
            elif spent + df[term] <= budget + _COMMON_BUDGET:
                common.append(term)
            else:
                break
            spent += df[term]
        if df[rare[0]] > _HEAVY_DF:
            # Even the rarest term is everywhere: see search().
            return [], rare + common
        return rare, common

    def _document_frequencies(self, terms: list[str]) -> dict[str, int]:
        """How many chunks hold each term (absent terms left out).

        fts5vocab counts by reading a term's whole posting list, so counts are cached
        until the chunk count drifts by more than 5%: a stale count only shifts which
        terms are ranked, never what a match is.
        """
        total = self.count()
        if abs(total - self._df_total) > 0.05 * self._df_total or len(self._df) > 100_000:
            self._df.clear()
            self._df_total = total
        df = {t: self._df[t] for t in terms if t in self._df}
        missing = [t for t in terms if t not in df]
        if missing:
            marks = ",".join("?" * len(missing))
            sql = f"SELECT term, doc FROM lex_vocab WHERE term IN ({marks})"
            for term, count in self.conn.execute(sql, missing):
                df[term] = self._df[term] = count
        return df

    def search(
        self, query: str, *, limit: int = 50, path_globs: list[str] | None = None
    ) -> list[tuple[int, float]]:
        """The chunks best matching a free-text query: (chunk_id, score), best first,
        higher score = better (negated bm25). [] when nothing in the query is
        searchable or nothing matches. `path_globs` (see `glob_to_sql`) keep only
        chunks whose path matches one of them."""
        limit = int(limit)
        if limit <= 0:
            return []
        terms = query_terms(query, _CANDIDATE_TERMS)
        if not terms:
            return []
        rare, common = self._plan(terms)
        if not rare and not common:
            return []
        rank = f"bm25(lex_fts, {SYMBOL_WEIGHT}, {PATH_WEIGHT}, {BODY_WEIGHT})"
        where, glob_params = glob_to_sql(path_globs or [])
        if where:
            select = (
                f"SELECT lex_fts.rowid, {rank} AS r FROM lex_fts "
                f"JOIN lex_docs AS d ON d.chunk_id = lex_fts.rowid "
                f"WHERE lex_fts MATCH ? AND {where}"
            )
        else:
            select = f"SELECT rowid, {rank} AS r FROM lex_fts WHERE lex_fts MATCH ?"
        conn = self.conn
        if not rare:
            return self._search_heavy(select, match_expression(common), glob_params, limit)
        rare_expr = match_expression(rare)
        if not common:
            rows = conn.execute(
                f"{select} ORDER BY r LIMIT ?", [rare_expr, *glob_params, limit]
            ).fetchall()
        else:
            # Chunks holding a rare term but no common one, then those holding both:
            # disjoint sets, each row ranked by bm25 over every phrase of the query.
            common_expr = match_expression(common)
            rows = conn.execute(
                f"{select} UNION ALL {select} ORDER BY r LIMIT ?",
                [
                    f"({rare_expr}) NOT ({common_expr})",
                    *glob_params,
                    f"({rare_expr}) AND ({common_expr})",
                    *glob_params,
                    limit,
                ],
            ).fetchall()
        return [(int(chunk_id), -float(r)) for chunk_id, r in rows]

    def _search_heavy(
        self, select: str, expr: str | None, glob_params: list[str], limit: int
    ) -> list[tuple[int, float]]:
        """A query whose every term is in a large share of all chunks (a lone "error"
        or "test"): ranking all of them would cost too much, so only chunks whose
        symbol holds a term are ranked; others, if room is left, follow in index order
        (scored, but not sorted against the rest)."""
        symbol_expr = f"{{symbol}} : ({expr})"
        rows = self.conn.execute(
            f"{select} ORDER BY r LIMIT ?", [symbol_expr, *glob_params, limit]
        ).fetchall()
        if len(rows) < limit:
            rest = self.conn.execute(
                f"{select} LIMIT ?",
                [f"({expr}) NOT ({symbol_expr})", *glob_params, limit - len(rows)],
            ).fetchall()
            rows += sorted(rest, key=lambda row: row[1])
        out: list[tuple[int, float]] = []
        for chunk_id, r in rows:
            score = -float(r)
            if out and score > out[-1][1]:
                score = out[-1][1]
            out.append((int(chunk_id), score))
        return out
