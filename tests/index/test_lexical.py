"""The code-aware tokenizer (index.tokenize) and the FTS5 lexical index (index.lexical)."""

from __future__ import annotations

import random
import re
import sqlite3
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index import lexical
from index.lexical import LexicalIndex, glob_to_sql
from index.tokenize import (
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    MAX_TEXT_CHARS,
    index_terms,
    query_expression,
    query_terms,
)

TERMS_RE = re.compile(r"^([a-z0-9_]+( [a-z0-9_]+)*)?$")
EXPRESSION_RE = re.compile(r'^"[a-z0-9_]+"( OR "[a-z0-9_]+")*$')
HOSTILE = [
    '"',
    '""',
    '"unbalanced',
    "a AND b OR NOT c",
    "NEAR(foo bar, 3)",
    "foo*",
    "*",
    "col:value",
    "symbol : parse",
    "{symbol path}: x",
    "(((",
    ")",
    "-foo +bar ^baz",
    "foo'bar",
    "'; DROP TABLE lex_fts; --",
    "\x00\x01\x02",
    "AND",
    "OR OR OR",
    "NOT",
    "rowid = 1",
    "\\",
    "\u202e\u200b\ufeff",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ℌ𝔞𝔠𝔨𝔰",
    "日本語のテキスト 検索",
    "é" * 100,
]


def terms(text: str) -> list[str]:
    return index_terms(text).split()


# ------------------------------------------------------------------ tokenizer
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("getHTTPResponse", ["get_http_response", "get", "http", "respons"]),
        ("read_file", ["read_file", "read", "fil"]),
        ("os.path.join", ["os", "path", "join"]),
        ("read-file", ["read", "fil"]),
        ("parse_config_file", ["parse_config_file", "pars", "config", "fil"]),
        ("ParseConfigFile", ["parse_config_file", "pars", "config", "fil"]),
        ("parseConfigFile", ["parse_config_file", "pars", "config", "fil"]),
        ("XMLHttpRequest", ["xml_http_request", "xml", "http", "request"]),
        ("IOError", ["io_error", "io", "error"]),
        ("URLs", ["url"]),
        ("__init__", ["init"]),
        ("_private_helper", ["private_helper", "privat", "helper"]),
        ("CONSTANT_NAME", ["constant_name", "constant", "nam"]),
        ("utf8", ["utf_8", "utf"]),
        ("base64", ["base_64", "bas", "64"]),
        ("x86_64", ["x_86_64", "86", "64"]),
        ("sha256sum", ["sha_256_sum", "sha", "256", "sum"]),
        ("files caches classes entries matches", ["fil", "cach", "class", "entry", "match"]),
        ("naïveBayes", ["naive_bayes", "naiv", "bay"]),
        ("the value of self is None", ["valu"]),
        ("is_none", ["is_none"]),
        ("a b c x y z 1 2 3", []),
        ("", []),
        ("  \n\t ;;; ", []),
        ("# parse the config\n'''Docstring words'''", ["pars", "config", "docstring", "word"]),
        ("x" * 65, []),  # over MAX_WORD_CHARS
        ("aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ", []),  # base64
        ("3f2a9b7c4d1e5f6a7b8c9d0e1f2a3b4c5d6e7f80", []),  # a hex digest
    ],
)
def test_index_terms(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


def test_camel_and_snake_share_whole_and_parts() -> None:
    assert terms("getUserName") == terms("get_user_name") == terms("GetUserName")


def test_non_ascii_becomes_single_ascii_terms() -> None:
    out = terms("日本語 テスト Über straße")
    assert len(out) == 4
    assert all(re.fullmatch(r"[a-z0-9_]+", t) for t in out)
    assert out[0].startswith("xn_") and out[1].startswith("xn_")
    assert out[2:] == ["uber", "strass"]  # folded: Ü → U, ß → ss


def test_repeated_words_repeat_terms() -> None:
    assert terms("config config config") == ["config"] * 3


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_index_terms_are_safe_fts_tokens(text: str) -> None:
    assert TERMS_RE.match(index_terms(text))


def test_index_terms_reads_a_bounded_prefix() -> None:
    words = [f"word{i}x" for i in range(200_000)]
    text = " ".join(words)  # ~1.6 MB
    assert len(text) > MAX_TEXT_CHARS
    assert index_terms(text) == index_terms(text[:MAX_TEXT_CHARS])


# ------------------------------------------------------------------ queries
@pytest.mark.parametrize("query", HOSTILE)
def test_query_expression_escapes_hostile_input(query: str) -> None:
    expression = query_expression(query)
    assert expression is None or EXPRESSION_RE.match(expression)


@pytest.mark.parametrize("query", ["", "   ", "!!! ??? ...", "the of and", "a b c", "x"])
def test_query_expression_none_when_nothing_searchable(query: str) -> None:
    assert query_expression(query) is None


def test_query_expression_keeps_whole_identifier_and_parts() -> None:
    expression = query_expression("where is getUserName called")
    assert expression is not None
    quoted = expression.split(" OR ")
    assert quoted[0] == '"get_user_name"'  # whole identifiers first
    assert set(quoted) == {'"get_user_name"', '"get"', '"user"', '"nam"'}


def test_query_terms_deduplicate_and_drop_noise() -> None:
    assert query_terms("Return the value of the given file, the file!") == ["fil"]
    # Noise words stay when they are all the query has.
    assert set(query_terms("return value")) == {"return", "valu"}


def test_query_expression_of_a_large_paste_is_capped() -> None:
    rng = random.Random(1)
    paste = " ".join(f"ident{rng.randrange(10**6)}_{rng.choice('abcdef')}" for _ in range(12_000))
    assert len(paste) > 100_000
    expression = query_expression(paste)
    assert expression is not None and EXPRESSION_RE.match(expression)
    assert len(expression.split(" OR ")) == MAX_QUERY_TERMS
    # Bounded: only the first MAX_QUERY_CHARS characters are read.
    huge = paste * 10
    assert query_terms(huge) == query_terms(huge[:MAX_QUERY_CHARS])


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_query_expression_is_always_valid_fts5(query: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize=\"ascii tokenchars '_'\")")
    conn.execute("INSERT INTO t (x) VALUES ('some words here')")
    expression = query_expression(query)
    if expression is not None:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expression,)).fetchall()


# ------------------------------------------------------------------ the index
CORPUS: list[tuple[str, str, str]] = [
    (
        "src/app/config.py",
        "parse_config_file",
        "def parse_config_file(path):\n    with open(path) as fh:\n        return json.load(fh)\n",
    ),
    (
        "src/app/configparser.py",
        "ConfigParser.read_file",
        "    def read_file(self, f, source=None):\n"
        '        """Like read() but the argument must be a file-like object."""\n'
        "        self._read(f, source)\n",
    ),
    (
        "src/app/configparser.py",
        "ConfigParser.sections",
        "    def sections(self):\n        return list(self._sections.keys())\n",
    ),
    (
        "src/app/io.py",
        "copy_stream",
        "def copy_stream(src, dst):\n    # copies bytes; the file must be open\n"
        "    while chunk := src.read(65536):\n        dst.write(chunk)\n",
    ),
    (
        "src/app/users.py",
        "get_user_name",
        "def get_user_name(user_id):\n    return db.users[user_id].name\n",
    ),
    (
        "web/static/users.js",
        "fetchAccountDetails",
        "function fetchAccountDetails(accountId) {\n  return http.get(`/accounts/${accountId}`);\n}\n",
    ),
    (
        "src/app/tokens.py",
        "tokenize_source",
        "def tokenize_source(src):\n    return list(generate(io.StringIO(src).readline))\n",
    ),
    (
        "src/app/notes.py",
        "summarize_notes",
        "def summarize_notes(notes):\n    # Tokenize each note (tokenize_source would tokenize\n"
        "    # them too), then cut.\n    return [n[:80] for n in notes]\n",
    ),
    (
        "src/app/http.py",
        "HttpClient.get",
        "    def get(self, url, timeout=10):\n        return self.session.request('GET', url)\n",
    ),
    (
        "tests/test_config.py",
        "test_parse_config",
        "def test_parse_config(tmp_path):\n    (tmp_path / 'c.json').write_text('{}')\n"
        "    assert parse_config_file(tmp_path / 'c.json') == {}\n",
    ),
    (
        "docs/guide.md",
        "",
        "# Guide\n\nThe configuration lives in a JSON file that the app reads at start-up.\n",
    ),
    (
        "src/config_defaults.py",
        "DEFAULTS",
        "DEFAULTS = {'level': 'info', 'timeout': 30}  # the default config\n",
    ),
    ("users.txt", "", "alice\nbob\n# user names, one per line\n"),
    (
        "src/app/log.py",
        "setup_logging",
        "def setup_logging(level):\n    logging.basicConfig(level=level)\n",
    ),
    (
        "src/app/cache.py",
        "LRUCache.evict",
        "    def evict(self):\n        key, _ = self._data.popitem(last=False)\n        return key\n",
    ),
    (
        "src/app/db.py",
        "connect_database",
        "def connect_database(url):\n    return sqlite3.connect(url, timeout=30)\n",
    ),
    (
        "src/app/retry.py",
        "retry_with_backoff",
        "def retry_with_backoff(fn, attempts=5):\n    for i in range(attempts):\n"
        "        try:\n            return fn()\n        except OSError:\n"
        "            time.sleep(2 ** i)\n",
    ),
    (
        "web/static/userView.js",
        "renderUserName",
        "export function renderUserName(el, user) {\n  el.textContent = user.name;\n}\n",
    ),
]
# Filler chunks so that bm25's idf is meaningful (query terms in few chunks).
FILLER = [
    (
        f"src/lib/mod{i}.py",
        f"helper_{i}",
        f"def helper_{i}(x):\n    return x * {i} + offset_{i}\n",
    )
    for i in range(40)
]


@pytest.fixture
def conn() -> sqlite3.Connection:
    return sqlite3.connect(":memory:")


@pytest.fixture
def index(conn: sqlite3.Connection) -> LexicalIndex:
    ix = LexicalIndex(conn)
    ix.add((i, path, symbol, text) for i, (path, symbol, text) in enumerate(CORPUS + FILLER))
    return ix


def ids_of(*symbols: str) -> list[int]:
    by_symbol = {symbol: i for i, (_, symbol, _) in enumerate(CORPUS)}
    return [by_symbol[s] for s in symbols]


def top(index: LexicalIndex, query: str, k: int = 3, **kw) -> list[int]:
    return [chunk_id for chunk_id, _ in index.search(query, limit=k, **kw)]


def test_parse_config_file_query(index: LexicalIndex) -> None:
    found = top(index, "parse config file", k=3)
    assert found[0] == ids_of("parse_config_file")[0]
    assert ids_of("ConfigParser.read_file")[0] in found


def test_scores_are_descending_and_positive(index: LexicalIndex) -> None:
    results = index.search("parse config file read", limit=20)
    scores = [s for _, s in results]
    assert len(results) >= 4
    assert scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)


def test_symbol_match_outranks_body_only_match(index: LexicalIndex) -> None:
    # summarize_notes says "tokenize" three times in its body; tokenize_source once in
    # its name and once in its body.
    tokenize_source, summarize_notes = ids_of("tokenize_source", "summarize_notes")
    found = top(index, "tokenize", k=5)
    assert found.index(tokenize_source) < found.index(summarize_notes)


@pytest.mark.parametrize(
    ("query", "symbol"),
    [
        ("getUserName", "get_user_name"),  # camelCase query, snake_case code
        ("fetch_account_details", "fetchAccountDetails"),  # and the other way round
        ("render user name", "renderUserName"),
        ("LruCache evict", "LRUCache.evict"),
        ("retryWithBackoff", "retry_with_backoff"),
    ],
)
def test_identifier_styles_meet(index: LexicalIndex, query: str, symbol: str) -> None:
    assert top(index, query, k=1) == ids_of(symbol)


def test_whole_identifier_beats_its_parts(index: LexicalIndex) -> None:
    # renderUserName and get_user_name both hold "user" and "name"; the whole
    # identifier decides.
    assert top(index, "get_user_name", k=1) == ids_of("get_user_name")
    assert top(index, "renderUserName", k=1) == ids_of("renderUserName")


def test_path_terms_are_searchable(index: LexicalIndex) -> None:
    assert top(index, "guide", k=1) == [[p for p, _, _ in CORPUS].index("docs/guide.md")]


@pytest.mark.parametrize(
    ("globs", "expected"),
    [
        (["src/**"], lambda p: p.startswith("src/")),
        (["src/"], lambda p: p.startswith("src/")),
        (["src"], lambda p: p.startswith("src/")),
        (["*.py"], lambda p: p.endswith(".py")),
        (["*.js", "docs/"], lambda p: p.endswith(".js") or p.startswith("docs/")),
        (["tests/"], lambda p: p.startswith("tests/")),
        (["!tests/"], lambda p: not p.startswith("tests/")),
        (["*.py", "!src/app/**"], lambda p: p.endswith(".py") and not p.startswith("src/app/")),
        (["src/**/config*.py"], lambda p: re.match(r"src/.*config.*\.py$", p) is not None),
        (["**/users.*"], lambda p: p.rsplit("/", 1)[-1].startswith("users.")),
        (["test_*.py"], lambda p: p.rsplit("/", 1)[-1].startswith("test_")),
        (["./web/static/user?iew.js"], lambda p: p == "web/static/userView.js"),
        (["src/app/[!c]*.py"], lambda p: re.match(r"src/app/[^c].*\.py$", p) is not None),
        (["nowhere/"], lambda p: False),
        ([], lambda p: True),
    ],
)
def test_path_globs(index: LexicalIndex, globs: list[str], expected) -> None:
    corpus = CORPUS + FILLER
    # Every chunk holds "def", "function", "return" or "the"... so search each one's
    # own symbol-free words: the union of results over a few broad queries.
    query = "config user name file return tokenize helper guide element get default"
    found = {i for i, _ in index.search(query, limit=1000, path_globs=globs)}
    everything = {i for i, _ in index.search(query, limit=1000)}
    want = {i for i in everything if expected(corpus[i][0])}
    assert found == want


def test_path_globs_apply_before_limit(index: LexicalIndex) -> None:
    # The best test chunk ranks below several src/ chunks; a glob still finds it first.
    assert top(index, "parse config file", k=1, path_globs=["tests/"]) == ids_of(
        "test_parse_config"
    )


def test_glob_to_sql_shapes() -> None:
    where, params = glob_to_sql(["src/", "!*.md"])
    assert where.count("GLOB ?") == len(params)
    assert "src/*" in params and "*/*.md" in params
    assert glob_to_sql([]) == ("", [])
    assert glob_to_sql(["", "  ", "!"]) == ("", [])


@pytest.mark.parametrize("query", ["parse config file", "get user name", "http get url timeout"])
def test_ranking_only_rare_term_chunks_keeps_exact_scores(
    index: LexicalIndex, monkeypatch, query: str
) -> None:
    """With a tiny ranking budget only chunks holding the rarest term are ranked, but
    each keeps the score it has when every chunk is ranked."""
    full = dict(index.search(query, limit=1000))
    monkeypatch.setattr(lexical, "_RANKED_BUDGET", 1)
    monkeypatch.setattr(lexical, "_HEAVY_DF", 10**9)
    rare, common = index._plan(query_terms(query))
    assert len(rare) == 1 and common
    partial = index.search(query, limit=1000)
    assert partial and len(partial) < len(full)
    for chunk_id, score in partial:
        assert score == pytest.approx(full[chunk_id], rel=1e-9)
    assert partial[0][0] == max(full, key=full.__getitem__)


def test_common_terms_beyond_the_budget_are_dropped(index: LexicalIndex, monkeypatch) -> None:
    monkeypatch.setattr(lexical, "_RANKED_BUDGET", 1)
    monkeypatch.setattr(lexical, "_COMMON_BUDGET", 0)
    rare, common = index._plan(query_terms("parse config file"))
    assert len(rare) == 1 and not common


def test_a_query_of_only_very_common_terms_ranks_symbol_matches(
    index: LexicalIndex, monkeypatch
) -> None:
    monkeypatch.setattr(lexical, "_HEAVY_DF", 1)
    results = index.search("config", limit=50)
    found = [chunk_id for chunk_id, _ in results]
    with_symbol = ids_of(
        "parse_config_file", "ConfigParser.read_file", "ConfigParser.sections", "test_parse_config"
    )
    assert set(found[:4]) == set(with_symbol)
    assert ids_of("DEFAULTS")[0] in found[4:]  # body and path matches follow
    scores = [s for _, s in results]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("query", ["", "   ", "the", "?!", "a b c", "\x00"])
def test_empty_queries_return_nothing(index: LexicalIndex, query: str) -> None:
    assert index.search(query) == []


def test_limit(index: LexicalIndex) -> None:
    assert index.search("parse config file", limit=0) == []
    assert len(index.search("parse config file return", limit=2)) == 2


def test_unknown_terms_return_nothing(index: LexicalIndex) -> None:
    assert index.search("zyzzyva quux") == []


def test_large_query_finds_its_source(index: LexicalIndex) -> None:
    rng = random.Random(7)
    noise = " ".join(f"noise{rng.randrange(10**9)}" for _ in range(6_000))
    retry = next(text for _, symbol, text in CORPUS if symbol == "retry_with_backoff")
    paste = noise + "\n" + retry * 3 + noise  # in ~110 KB
    assert len(paste) > 100_000
    found = top(index, paste, k=3)
    assert found[0] == ids_of("retry_with_backoff")[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=st.one_of(st.text(), st.sampled_from(HOSTILE)))
def test_search_never_raises(query: str) -> None:
    conn = sqlite3.connect(":memory:")
    ix = LexicalIndex(conn)
    ix.add((i, p, s, t) for i, (p, s, t) in enumerate(CORPUS))
    results = ix.search(query, path_globs=["src/**", "!*[", "["])
    assert all(isinstance(i, int) and isinstance(s, float) for i, s in results)


# ------------------------------------------------------------------ consistency
def test_add_remove_search_consistency(conn: sqlite3.Connection) -> None:
    """Random adds, replacements and removals against a model: a one-word query
    returns exactly the chunks that hold the word."""
    rng = random.Random(3)
    vocabulary = [f"word{c}{d}" for c in "abcdefgh" for d in "xyz"]
    ix = LexicalIndex(conn)
    model: dict[int, set[str]] = {}
    for step in range(60):
        batch = []
        for _ in range(rng.randrange(1, 20)):
            chunk_id = rng.randrange(200)
            words = set(rng.sample(vocabulary, rng.randrange(1, 6)))
            batch.append((chunk_id, f"src/f{chunk_id % 7}.py", "", " ".join(sorted(words))))
        ix.add(batch)
        for chunk_id, _, _, text in batch:  # the last row of an id wins
            model[chunk_id] = set(text.split())
        gone = rng.sample(sorted(model), min(len(model), rng.randrange(0, 8)))
        ix.remove([*gone, 10_000 + step])  # unknown ids are ignored
        for chunk_id in gone:
            del model[chunk_id]
        assert ix.count() == len(model)
        for word in rng.sample(vocabulary, 4):
            want = {i for i, words in model.items() if word in words}
            assert {i for i, _ in ix.search(word, limit=1000)} == want
    assert ix.verify() == []
    ix.remove(list(model))
    assert ix.count() == 0
    assert ix.search(" ".join(vocabulary)) == []
    assert ix.verify() == []


def test_replacing_a_chunk_forgets_its_old_text(index: LexicalIndex) -> None:
    chunk_id = ids_of("connect_database")[0]
    before = index.count()
    index.add([(chunk_id, "src/app/db.py", "open_pool", "def open_pool(): pass\n")])
    assert index.count() == before
    assert chunk_id not in top(index, "connect database sqlite", k=50)
    assert top(index, "open pool", k=1) == [chunk_id]


def test_the_caller_owns_the_transaction(conn: sqlite3.Connection) -> None:
    ix = LexicalIndex(conn)
    conn.commit()
    ix.add([(1, "a.py", "alpha_beta", "gamma delta")])
    assert conn.in_transaction  # nothing committed by the index
    assert top(ix, "gamma") == [1]
    conn.rollback()
    assert ix.count() == 0
    assert ix.search("gamma") == []
    assert ix.verify() == []


def test_reopening_keeps_the_index(tmp_path) -> None:
    path = tmp_path / "index.db"
    conn = sqlite3.connect(path)
    ix = LexicalIndex(conn)
    assert ix.created
    ix.add([(5, "pkg/mod.py", "frobnicate", "def frobnicate(): ...")])
    conn.commit()
    conn.close()

    conn = sqlite3.connect(path)
    ix = LexicalIndex(conn)
    assert not ix.created
    assert ix.count() == 1
    assert top(ix, "frobnicate") == [5]
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names and all(name.startswith("lex_") for name in names)
    conn.close()


def test_another_layout_version_is_rebuilt(tmp_path, monkeypatch) -> None:
    path = tmp_path / "index.db"
    conn = sqlite3.connect(path)
    LexicalIndex(conn).add([(1, "a.py", "", "frobnicate")])
    conn.commit()
    monkeypatch.setattr(lexical, "LAYOUT_VERSION", lexical.LAYOUT_VERSION + 1)
    ix = LexicalIndex(conn)
    assert ix.created
    assert ix.count() == 0
    assert ix.search("frobnicate") == []


def test_verify_reports_disagreement(index: LexicalIndex, conn: sqlite3.Connection) -> None:
    assert index.verify() == []
    conn.execute("DELETE FROM lex_docs WHERE chunk_id = 0")
    assert index.verify()


def test_index_package_imports_no_agent_or_server() -> None:
    code = (
        "import sys, index.lexical, index.tokenize; "
        "print([m for m in sys.modules if m.split('.')[0] in ('agent', 'server')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_autocommit_connection_writes_atomically(tmp_path) -> None:
    path = tmp_path / "index.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    ix = LexicalIndex(writer)
    reader = LexicalIndex(sqlite3.connect(path, isolation_level=None))
    assert not reader.created
    ix.add([(1, "a.py", "alpha", "gamma"), (2, "b.py", "beta", "gamma")])
    assert not writer.in_transaction
    assert {i for i, _ in reader.search("gamma")} == {1, 2}  # committed, seen by the reader
    # Inside the caller's transaction nothing is visible until it commits.
    writer.execute("BEGIN")
    ix.remove([1])
    assert {i for i, _ in reader.search("gamma")} == {1, 2}
    writer.execute("COMMIT")
    assert {i for i, _ in reader.search("gamma")} == {2}


class FailingConnection(sqlite3.Connection):
    """Fails the FTS5 insert of an add, after lex_docs has been written."""

    fail = False

    def executemany(self, sql, rows):  # type: ignore[override]
        if self.fail and sql.startswith("INSERT INTO lex_fts (rowid"):
            raise sqlite3.OperationalError("disk I/O error (simulated)")
        return super().executemany(sql, rows)


@pytest.mark.parametrize("isolation_level", [None, ""])
def test_a_failed_add_leaves_nothing_behind(isolation_level: str | None) -> None:
    conn = sqlite3.connect(":memory:", factory=FailingConnection, isolation_level=isolation_level)
    ix = LexicalIndex(conn)
    ix.add([(1, "a.py", "", "gamma")])
    conn.fail = True
    with pytest.raises(sqlite3.OperationalError):
        ix.add([(1, "a.py", "", "replaced"), (2, "b.py", "", "delta")])
    conn.fail = False
    assert ix.count() == 1
    assert ix.search("delta") == ix.search("replaced") == []
    assert top(ix, "gamma") == [1]
    assert ix.verify() == []
