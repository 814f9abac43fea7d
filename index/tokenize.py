"""The code-aware tokenizer of the lexical index.

Python's sqlite3 cannot register FTS5 tokenizers, so tokenizing happens here and the
lexical index stores *pre-tokenized* term strings: space-separated terms made only of
``[a-z0-9_]``. FTS5's own tokenizer (``ascii`` with ``tokenchars '_'``) then merely
splits on the spaces, so every term below is exactly one FTS5 token, in documents and in
queries alike, whatever Unicode the source held.

How text becomes terms (`index_terms`):

- A *word* is a run of Unicode word characters (letters, digits, ``_``). Everything else
  separates words, so dotted and kebab names split into their identifiers
  (``os.path.join`` → os, path, join; ``read-file`` → read, file).
- A word splits into *parts* at underscores, at camelCase/PascalCase humps and at
  letter/digit boundaries: ``getHTTPResponse`` → get, http, response; ``read_file`` →
  read, file; ``URLs`` → urls; ``base64`` → base, 64; ``utf8`` → utf (``8`` is dropped,
  see below). Splitting digits off lets ``utf-8``, ``utf_8`` and ``utf8`` meet; the
  whole term below keeps ``base64`` distinct from "base 64".
- A word of two or more parts is also kept *whole*, in one canonical snake form: its
  lowercased parts joined by ``_`` (``getHTTPResponse`` → ``get_http_response``,
  ``read_file`` → ``read_file``, ``base64`` → ``base_64``). camelCase and snake_case
  spellings of one name therefore share their whole term as well as their parts.
  Leading/trailing/doubled underscores carry no meaning (``__init__`` → init).
- Parts are case-folded and lightly stemmed (plural ``s``/``es``/``ies`` and a final
  ``e``: file, files → fil; entries → entry; classes → class), so that "read files"
  finds ``read_file``; stems meet only other stems, in the index and in queries. The
  whole term is not stemmed.
- Dropped: one-character ASCII parts, stop words (English function words and keywords
  found in nearly every chunk, see `STOP_WORDS`), words over `MAX_WORD_CHARS` characters
  and shorter words that look like base64/hex blobs (many tiny alternating parts).
- Non-ASCII letters are folded (NFKD, combining marks removed: ``naïve`` → naive); a
  part still not ASCII after that (CJK, Cyrillic, …) is stored as ``xn_`` + its
  punycode, so it stays one ``[a-z0-9_]`` token.
- Work is bounded: only the first `MAX_TEXT_CHARS` characters of a text are read.

Comments, strings and docstrings are text like any other, so their words are included.

`query_terms` gives the distinct terms of a free-text query (three words or a 100 KB
paste) through the same steps, general words like "return", "value", "function"
(`QUERY_NOISE`) also dropped; `query_expression` turns them into an FTS5 MATCH
expression: at most `MAX_QUERY_TERMS`, each double-quoted, joined with OR. Because every
term is ``[a-z0-9_]+`` and quoted, nothing in a query (quotes, AND/OR/NOT/NEAR, ``*``,
``:``, ``^``, parentheses, ``-``) can reach FTS5 as syntax. (`LexicalIndex.search`
picks its terms with corpus statistics instead: see index.lexical.)
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from itertools import islice

__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "MAX_TEXT_CHARS",
    "MAX_WORD_CHARS",
    "QUERY_NOISE",
    "STOP_WORDS",
    "index_terms",
    "query_expression",
    "query_terms",
    "word_terms",
]

# Words longer than this are blobs (base64, hashes, minified code), not names.
MAX_WORD_CHARS = 64
# index_terms reads at most this much of one text; the chunker keeps chunks far smaller.
MAX_TEXT_CHARS = 256 * 1024
# query_terms reads at most this much of a query (a 100 KB paste fits).
MAX_QUERY_CHARS = 128 * 1024
# A query expression holds at most this many terms.
MAX_QUERY_TERMS = 64

# Terms that occur in most chunks or carry no meaning in a query. Dropped on both sides,
# which keeps posting lists (and OR-query cost) small. Compound whole terms that contain
# them (`is_none`, `get_self`) are kept.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be been before
    being below between both but by can could did do does doing down during each either
    else few for from further had has have having he her here hers him his how however
    i if in into is it its itself just me more most my neither no nor not now of off on
    once only or other our ours out over own same she should so some such than that the
    their theirs them then there these they this those through thus to too under until
    up upon very was we were what when where whether which while who whom why will with
    within would yet you your
    def self cls elif pass none true false null nil var let const
    """.split()  # noqa: SIM905 - a word list reads better as prose
)

# Words that describe code in general ("return the value of the given object"): dropped
# from a query unless nothing else is left. They stay in the index. Stemmed forms.
QUERY_NOISE = frozenset(
    """
    return given specified object valu called function method cod
    """.split()  # noqa: SIM905
)

_WORD_RE = re.compile(r"\w+")
# ASCII text (most code) splits into words three times faster by bytes.translate.
_ASCII_SEPARATORS = bytes(
    b if chr(b).isascii() and (chr(b).isalnum() or b == ord("_")) else ord(" ") for b in range(256)
)
# One camelCase part: an all-caps plural (URLs), an acronym before a capitalised word
# (HTTP in HTTPResponse), a capitalised or lower word, an acronym, a number.
_PART_RE = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_NOT_TERM_CHAR = re.compile(r"[^a-z0-9_]")

# word -> its terms joined by spaces ("" when none). At most _CACHE_MAX words (~30 MB).
_CACHE: dict[str, str] = {}
_CACHE_MAX = 200_000


def _stem(part: str) -> str:
    """A light suffix stemmer for parts: plural ``s``/``es``/``ies`` and a final ``e``
    (files, file → fil; caches, cache → cach; entries → entry; classes → class). The
    stems only ever meet other stems, so they need not be words.
    """
    if len(part) < 4:
        return part
    if part.endswith("ies") and len(part) > 4:
        return part[:-3] + "y"
    if part.endswith("es") and not part.endswith(("aes", "ees", "oes")):
        part = part[:-2]
    elif part[-1] == "s" and not part.endswith(("us", "ss", "is")):
        part = part[:-1]
    if part[-1] == "e" and len(part) > 3:
        part = part[:-1]
    return part


def _ascii_fold(word: str) -> str:
    """NFKD with combining marks removed; ASCII is returned unchanged."""
    if word.isascii():
        return word
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _char_class(c: str) -> str:
    if c.isdigit():
        return "0"
    if c.isupper():
        return "A"
    return "a"  # lower case and caseless letters (CJK, …) run together


def identifier_parts(piece: str) -> list[str]:
    """The camelCase / digit parts of one underscore-free piece, original case."""
    if piece.isascii():
        return _PART_RE.findall(piece)
    classes = "".join(map(_char_class, piece))
    return [piece[m.start() : m.end()] for m in _PART_RE.finditer(classes)]


def _encode(part: str) -> str:
    """A lowercased part as one [a-z0-9_] token."""
    if part.isascii():
        return part
    try:
        code = part.encode("punycode").decode("ascii")
    except UnicodeError:  # pragma: no cover - punycode encodes any str
        return ""
    return "xn_" + _NOT_TERM_CHAR.sub("_", code.lower())


def _looks_like_blob(piece: str, parts: list[str]) -> bool:
    """Long runs of tiny alternating parts: base64, hex digests, random ids."""
    return len(piece) >= 16 and len(parts) * 3 > len(piece)


def _expand(word: str) -> str:
    if len(word) > MAX_WORD_CHARS:
        return ""
    word = _ascii_fold(word)
    raw: list[str] = []
    for piece in word.split("_"):
        if not piece:
            continue
        parts = identifier_parts(piece)
        if _looks_like_blob(piece, parts):
            return ""
        raw.extend(parts)
    lowered = [_encode(p.casefold()) for p in raw]
    lowered = [p for p in lowered if p]
    terms: list[str] = []
    if len(lowered) >= 2:
        terms.append("_".join(lowered))
    for part in lowered:
        if len(part) < 2 and part.isascii():
            continue
        if part in STOP_WORDS:
            continue
        terms.append(_stem(part))
    return " ".join(terms)


def _words(text: str) -> list[str]:
    """The words of a text: runs of Unicode letters, digits and underscores."""
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_SEPARATORS).decode("ascii").split()
    return _WORD_RE.findall(text)


def word_terms(word: str) -> str:
    """The terms of one word, space-separated ('' when none), memoized."""
    terms = _CACHE.get(word)
    if terms is None:
        terms = _expand(word)
        if len(_CACHE) >= _CACHE_MAX:
            # Forget the older half (dicts keep insertion order).
            for old in list(islice(_CACHE, _CACHE_MAX // 2)):
                _CACHE.pop(old, None)
        _CACHE[word] = terms
    return terms


def index_terms(text: str) -> str:
    """The terms of a text for the index, space-separated, in text order.

    Repeated words repeat their terms (term frequency counts in bm25). Reads at most
    `MAX_TEXT_CHARS` characters.
    """
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS]
    words = _words(text)
    cache = _CACHE
    try:
        # The loop runs in C; a word never seen before raises KeyError.
        return " ".join(filter(None, map(cache.__getitem__, words)))
    except KeyError:
        pass
    local = {}
    for word in set(words):
        local[word] = word_terms(word)
    return " ".join(filter(None, map(local.__getitem__, words)))


def query_terms(query: str, max_terms: int | None = None) -> list[str]:
    """The distinct terms of a query, most informative first (no corpus statistics).

    Whole compound identifiers come first (they are the most specific), then parts by
    how often they recur in the query and by length (longer words are rarer), ties kept
    in query order. Reads at most `MAX_QUERY_CHARS` characters.
    """
    if len(query) > MAX_QUERY_CHARS:
        query = query[:MAX_QUERY_CHARS]
    counts: Counter[str] = Counter()
    for word, n in Counter(_words(query)).items():
        terms = word_terms(word)
        if terms:
            for term in terms.split(" "):
                counts[term] += n
    noise = [t for t in counts if t in QUERY_NOISE]
    if len(noise) < len(counts):
        for term in noise:
            del counts[term]
    order = {term: i for i, term in enumerate(counts)}
    ranked = sorted(
        counts,
        key=lambda t: ("_" not in t, -min(counts[t], 3), -min(len(t), 8), order[t]),
    )
    return ranked if max_terms is None else ranked[:max_terms]


def match_expression(terms: list[str]) -> str | None:
    """An FTS5 MATCH expression: every term quoted, joined with OR; None if no terms."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms if t]
    return " OR ".join(quoted) if quoted else None


def query_expression(query: str) -> str | None:
    """An FTS5 MATCH expression for a free-text query, or None when nothing searchable
    remains. At most `MAX_QUERY_TERMS` terms (the most informative, see `query_terms`),
    each quoted, joined with OR: bm25 ranks chunks matching more and rarer terms higher.
    A whole identifier in the query contributes both its whole term and its parts, so
    it weighs more than any one of its parts.
    """
    return match_expression(query_terms(query, MAX_QUERY_TERMS))
