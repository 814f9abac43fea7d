"""Training pairs for the code embedder, mined from the standard library's training part.

A pair is (query, code): the first sentence of a function's docstring (the rules of
training.embed.docstrings, the same as the evaluation set's) and the chunk the index
would embed for that function, as the index embeds it (index.chunker's chunks of the
file with the docstrings blanked out, index.indexer.embed_input: enclosing headers and
code, no path). So the model learns on exactly the inputs it sees in use, and a query
never appears verbatim in its code.

    corpus = mine_corpus(read_split()["train"])  # corpus.pairs, corpus.chunks

training.embed.mining adds pairs of other kinds (names, tests, signatures) on the same
chunks, and the PyPI corpus's packages.
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
    # What gave the pair (training.embed.mining.KINDS) and where from ("stdlib" or a
    # package's name): the trainer can weight kinds, the recipe reports counts.
    kind: str = "docstring"
    source: str = "stdlib"


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


def best_chunk(chunks: list[Chunk], start_line: int, end_line: int) -> int | None:
    """The index of the chunk that shares most lines with start_line..end_line (the
    first of equals), None when none does."""
    best, overlap = None, 0
    for i, chunk in enumerate(chunks):
        shared = min(chunk.end_line, end_line) - max(chunk.start_line, start_line) + 1
        if shared > overlap:
            best, overlap = i, shared
    return best


def add_file(
    corpus: Corpus, path: str, text: str, *, more: bool = False, source: str = "stdlib"
) -> tuple[int, str]:
    """Chunk one file into the corpus, with a pair for each usable function: its first
    sentence and the chunk that covers most of it, once every usable docstring of the
    file is blanked. With `more` (training), usable classes and comment blocks make
    pairs too (a comment: the code after it), their text blanked as well.

    Returns the index of the file's first chunk in the corpus and the blanked text,
    from which training.embed.mining draws more pairs on the same chunks."""
    found = [("docstring", c) for c in find_candidates(path, text, classes=more)]
    if more:
        found += [("comment", c) for c in comment_candidates(path, text)]
    blanked = blank_lines(text, [(c.doc_start, c.doc_end) for _, c in found])
    base = len(corpus.chunks)
    chunks = chunk_file(path, blanked)
    corpus.chunks.extend(chunks)
    for kind, c in found:
        best = best_chunk(chunks, c.start_line, c.end_line)
        if best is not None:
            code = embed_input(chunks[best].signature, chunks[best].text)
            if code.strip():
                corpus.pairs.append(
                    Pair(c.query, code, base + best, path, c.start_line, c.end_line, kind, source)
                )
    return base, blanked


def mine_corpus(units: Iterable[str], source: Path | None = None, *, more: bool = False) -> Corpus:
    """The chunks and pairs of the given top-level units of `source` (default: the
    stdlib), in a stable order (`more`: see add_file). A query that occurs more than once (overloads, copies)
    is dropped: its pairs would say that one sentence means different code."""
    corpus = Corpus()
    for relative, text in unit_files(units, source):
        add_file(corpus, relative, text, more=more)
    counts = Counter(normalize(p.query) for p in corpus.pairs)
    corpus.pairs = [p for p in corpus.pairs if counts[normalize(p.query)] == 1]
    return corpus


def unit_files(units: Iterable[str], source: Path | None = None) -> Iterable[tuple[str, str]]:
    """(path relative to `source`, text) of every readable file of the given top-level
    units of `source` (default: the stdlib), in a stable order."""
    source = (source or default_source()).resolve()
    by_unit = source_units(source)
    for name in sorted(set(units) & set(by_unit)):
        for relative in by_unit[name]:
            text = read_source(source / relative)
            if text is not None:
                yield relative.as_posix(), text


def unit_texts(units: Iterable[str], source: Path | None = None) -> Iterable[str]:
    """The source text of every file of the given units (for token statistics)."""
    return (text for _, text in unit_files(units, source))
