"""Training pairs for the code embedder, mined from the standard library's training part.

A pair is (query, code): the first sentence of a function's docstring (the rules of
training.embed.docstrings, the same as the evaluation set's) and the chunk the index
would embed for that function, as the index embeds it (index.chunker's chunks of the
file with the docstrings blanked out, index.indexer.embed_input: enclosing headers and
code, no path). So the model learns on exactly the inputs it sees in use, and a query
never appears verbatim in its code.

    corpus = mine_corpus(read_split()["train"])  # corpus.pairs, corpus.chunks
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from index.chunker import Chunk, chunk_file
from index.indexer import embed_input
from training.embed.docstrings import (
    blank_lines,
    comment_candidates,
    default_source,
    find_candidates,
    normalize,
    read_source,
    source_units,
)


@dataclass(frozen=True)
class Pair:
    query: str
    code: str  # the chunk's embedding input (headers + code, docstring blanked)
    chunk: int  # its index in the corpus's chunks
    path: str  # the function's file (relative to the source tree) and lines
    start_line: int
    end_line: int


@dataclass
class Corpus:
    """Every chunk of a set of files (usable docstrings blanked) and the pairs."""

    chunks: list[Chunk] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)

    def texts(self) -> list[str]:
        """The chunks as the index embeds them."""
        return [embed_input(c.signature, c.text) for c in self.chunks]

    def relevant(self, pair: Pair, chunk: int) -> bool:
        """Whether a chunk answers the pair's query: it lies in the function's file and
        overlaps its lines (bench.codesearch's rule)."""
        c = self.chunks[chunk]
        return (
            c.path == pair.path and c.start_line <= pair.end_line and pair.start_line <= c.end_line
        )


def add_file(corpus: Corpus, path: str, text: str, *, more: bool = False) -> None:
    """Chunk one file into the corpus, with a pair for each usable function: its first
    sentence and the chunk that covers most of it, once every usable docstring of the
    file is blanked. With `more` (training), usable classes and comment blocks make
    pairs too (a comment: the code after it), their text blanked as well."""
    found = find_candidates(path, text, classes=more)
    if more:
        found += comment_candidates(path, text)
    blanked = blank_lines(text, [(c.doc_start, c.doc_end) for c in found])
    base = len(corpus.chunks)
    chunks = chunk_file(path, blanked)
    corpus.chunks.extend(chunks)
    for c in found:
        best, overlap = None, 0
        for i, chunk in enumerate(chunks):
            shared = min(chunk.end_line, c.end_line) - max(chunk.start_line, c.start_line) + 1
            if shared > overlap:
                best, overlap = i, shared
        if best is not None:
            code = embed_input(chunks[best].signature, chunks[best].text)
            if code.strip():
                corpus.pairs.append(
                    Pair(c.query, code, base + best, path, c.start_line, c.end_line)
                )


def mine_corpus(units: Iterable[str], source: Path | None = None, *, more: bool = False) -> Corpus:
    """The chunks and pairs of the given top-level units of `source` (default: the
    stdlib), in a stable order (`more`: see add_file). A query that occurs more than once (overloads, copies)
    is dropped: its pairs would say that one sentence means different code."""
    source = (source or default_source()).resolve()
    by_unit = source_units(source)
    corpus = Corpus()
    for name in sorted(set(units) & set(by_unit)):
        for relative in by_unit[name]:
            text = read_source(source / relative)
            if text is not None:
                add_file(corpus, relative.as_posix(), text, more=more)
    counts = Counter(normalize(p.query) for p in corpus.pairs)
    corpus.pairs = [p for p in corpus.pairs if counts[normalize(p.query)] == 1]
    return corpus


def unit_texts(units: Iterable[str], source: Path | None = None) -> Iterable[str]:
    """The source text of every file of the given units (for token statistics)."""
    source = (source or default_source()).resolve()
    by_unit = source_units(source)
    for name in sorted(set(units) & set(by_unit)):
        for relative in by_unit[name]:
            text = read_source(source / relative)
            if text is not None:
                yield text
