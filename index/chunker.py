"""Syntax-aware chunking, after cAST (Zhang et al. 2025, "chunking via abstract syntax trees").

A file becomes a list of `Chunk`s, each a range of whole lines (or, for a line longer
than `max_chars`, a character window of one line), that together cover every non-blank
line exactly once, in order:

- Definitions (functions, classes, methods and their equivalents per language) are the
  units: every definition that fits in `max_chars` is a chunk of its own, however small,
  together with the doc comments, decorators and attributes directly above it.
- A node larger than `max_chars` is split recursively into its children (a class into
  its methods, a huge function into groups of statements); every piece keeps the
  definition's qualified symbol and the headers of the definitions it lies in. A lone
  header line (`class Foo:`, `impl Foo {`) goes with the first piece after it.
- The code between definitions (imports, constants, fields, statements) is merged
  greedily into chunks of up to `max_chars`, belonging to the scope it lies in ("module"
  code at the top level); a run that would end in a piece under `min_chars` is
  rebalanced with the piece before it. Closing braces go with the chunk before them.
- Files without a grammar, and files whose parse is mostly errors, are cut into windows
  of whole lines (breaking at blank lines where possible): kind "lines", language "text".

Sizes are characters of the chunk's text. Line numbers are 1-based and follow `\\n`
only (a `\\r\\n` pair ends a line, its `\\r` is not part of the text), like read_file.
`chunk_file` never raises.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from tree_sitter import Node

from index.languages import (
    CLASS,
    FUNCTION,
    LANGUAGES,
    METHOD,
    NAMESPACE,
    Definition,
    LanguageSpec,
    get_parser,
    language_for,
    sniff_language,
)

__all__ = ["Chunk", "chunk_file", "embedding_text", "language_for"]

log = logging.getLogger(__name__)

MAX_NESTING = 32  # deeper definitions are chunked as plain code (guards the recursion)
# A big file with nearly all of its text in over-long lines (minified) is not parsed.
MINIFIED_FRACTION, MINIFIED_MIN_CHARS = 0.9, 100_000
MAX_ERROR_FRACTION = 0.5  # a parse with more ERROR bytes than this falls back to lines
MAX_HEADER_CHARS = 400  # one definition's header in a signature, at most
MAX_HEADER_LINES = 6
_TRIVIA = re.compile(r"[\s)\]};,]*")  # closing punctuation only: glued to the chunk before


@dataclass(frozen=True, slots=True)
class Chunk:
    path: str  # workspace-relative, '/'-separated (as given by the caller)
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    symbol: str  # qualified name of the innermost named definition the chunk is or lies in
    signature: str  # headers of the enclosing definitions, outermost first, "\n"-joined
    kind: str  # "function" | "method" | "class" | "module" | "lines"
    language: str  # "python", "javascript", ..., or "text"
    text: str  # the source lines start_line..end_line joined with "\n" (or a window of one line)


def embedding_text(chunk: Chunk, *, include_path: bool = True) -> str:
    """What the dense model sees: the path, the enclosing headers the chunk does not
    itself contain (outermost first), and the text. `include_path=False` leaves the path
    out, for a cache keyed by content that must survive renames."""
    parts = [chunk.path] if include_path else []
    if chunk.signature:
        header = chunk.signature.split("\n")
        present = {line.strip() for line in chunk.text.split("\n")}
        keep = len(header)
        for i, line in enumerate(header):
            stripped = line.strip()
            if len(stripped) >= 3 and stripped in present:
                keep = i  # this header (and so every inner one) is in the chunk
                break
        if keep:
            parts.append("\n".join(header[:keep]))
    parts.append(chunk.text)
    return "\n".join(parts)


def chunk_file(path: str, text: str, *, max_chars: int = 1500, min_chars: int = 200) -> list[Chunk]:
    """Chunk one file's text (see the module docstring). Never raises."""
    max_chars = max(int(max_chars), 1)
    min_chars = max(min(int(min_chars), max_chars), 0)
    try:
        lines = _split_lines(text)
    except Exception:  # not a str: nothing sensible to chunk
        log.warning("chunker: %s is not text", path)
        return []
    source = _Source(path, lines, max_chars, min_chars)
    language = None
    try:
        language = sniff_language(path, text)
    except Exception:
        log.exception("chunker: language detection failed for %s", path)
    if language is not None:
        try:
            chunks = _SyntaxChunker(source, LANGUAGES[language]).run()
            if chunks is not None:
                return chunks
        except RecursionError:
            log.warning("chunker: %s nests too deeply; chunking by lines", path)
        except Exception:
            log.exception("chunker: syntax chunking failed for %s; chunking by lines", path)
    try:
        return source.chunks(source.windows(0, len(lines) - 1, _LINES), "text")
    except Exception:  # pragma: no cover - the last resort must not raise either
        log.exception("chunker: line chunking failed for %s", path)
        return []


def _split_lines(text: str) -> list[str]:
    if not isinstance(text, str):
        raise TypeError("text must be str")
    lines = text.split("\n")
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


# --------------------------------------------------------------------------- pieces and scopes


@dataclass(frozen=True, slots=True)
class _Scope:
    kind: str  # the chunk kind of code lying directly in this scope
    symbol: str
    signature: str


_MODULE = _Scope("module", "", "")
_LINES = _Scope("lines", "", "")


@dataclass(slots=True)
class _Piece:
    start: int  # 0-based rows, inclusive
    end: int
    scope: _Scope
    glue: str = ""  # "prev": closing punctuation to fold into the piece before
    cols: tuple[int, int] | None = None  # a character window of the single row `start`
    starts: list[int] | None = None  # a merged group's item rows (where it may be cut)


class _Source:
    """The lines of one file with prefix sums, so any range's size is O(1)."""

    def __init__(self, path: str, lines: list[str], max_chars: int, min_chars: int):
        self.path = path
        self.lines = lines
        self.max = max_chars
        self.min = min_chars
        offsets = [0] * (len(lines) + 1)
        total = 0
        for i, line in enumerate(lines):
            total += len(line) + 1
            offsets[i + 1] = total
        self.offsets = offsets

    def size(self, start: int, end: int) -> int:
        """Characters of rows start..end joined with newlines."""
        return self.offsets[end + 1] - self.offsets[start] - 1

    def blank(self, row: int) -> bool:
        return not self.lines[row].strip()

    def windows(self, start: int, end: int, scope: _Scope) -> list[_Piece]:
        """Whole-line windows of up to max chars over rows start..end, breaking at a
        blank line where that keeps at least half a window; a longer line is cut into
        character windows."""
        pieces: list[_Piece] = []
        limit = self.max
        row = start
        while row <= end:
            while row <= end and self.blank(row):
                row += 1
            if row > end:
                break
            if len(self.lines[row]) > limit:
                pieces.extend(self._cut_line(row, scope))
                row += 1
                continue
            last = row
            last_blank = -1
            while last < end and len(self.lines[last + 1]) <= limit:
                if self.size(row, last + 1) > limit:
                    break
                last += 1
                if self.blank(last):
                    last_blank = last
            if last < end and last_blank > row and self.size(row, last_blank) * 2 >= limit:
                last = last_blank
            while self.blank(last):
                last -= 1
            pieces.append(_Piece(row, last, scope))
            row = last + 1
        if len(pieces) > 1:
            self._rebalance_tail(pieces)
        return pieces

    def _rebalance_tail(self, pieces: list[_Piece]) -> None:
        """Give a tiny last window some lines of the one before it."""
        prev, last = pieces[-2], pieces[-1]
        if prev.cols is not None or last.cols is not None or prev.end + 1 < last.start:
            return
        if self.size(last.start, last.end) >= self.min:
            return
        row = last.start
        while row > prev.start + 1 and self.size(row, last.end) < self.min:
            row -= 1
        while row < last.start and self.blank(row):
            row += 1
        if row < last.start and self.size(row, last.end) <= self.max:
            prev.end = row - 1
            while prev.end > prev.start and self.blank(prev.end):
                prev.end -= 1
            last.start = row

    def _cut_line(self, row: int, scope: _Scope) -> list[_Piece]:
        line = self.lines[row]
        limit = self.max
        pieces = []
        begin = 0
        while begin < len(line):
            stop = min(begin + limit, len(line))
            if stop < len(line):  # prefer to cut after a space or a closing/separating mark
                floor = begin + limit // 2
                best = max(line.rfind(mark, floor, stop) for mark in " ;,)}]")
                if best >= floor:
                    stop = best + 1
            if not line[begin:stop].isspace():  # a window of only spaces is no chunk
                pieces.append(_Piece(row, row, scope, cols=(begin, stop)))
            begin = stop
        return pieces

    def chunks(self, pieces: list[_Piece], language: str) -> list[Chunk]:
        out = []
        lines = self.lines
        for piece in pieces:
            if piece.cols is not None:
                text = lines[piece.start][piece.cols[0] : piece.cols[1]]
            else:
                text = "\n".join(lines[piece.start : piece.end + 1])
            scope = piece.scope
            out.append(
                Chunk(
                    path=self.path,
                    start_line=piece.start + 1,
                    end_line=piece.end + 1,
                    symbol=scope.symbol,
                    signature=scope.signature,
                    kind=scope.kind,
                    language=language,
                    text=text,
                )
            )
        return out

    def finish(self, pieces: list[_Piece]) -> list[_Piece]:
        """Make the pieces tile the non-blank lines: trim blank edges, give any stray
        non-blank line to the piece before it (or after it), re-cut what grew too big."""
        trimmed: list[_Piece] = []
        for piece in pieces:
            if piece.cols is None:
                while piece.start < piece.end and self.blank(piece.start):
                    piece.start += 1
                while piece.end > piece.start and self.blank(piece.end):
                    piece.end -= 1
                if self.blank(piece.start):
                    continue
            if trimmed and piece.start <= trimmed[-1].end and piece.cols is None:
                piece.start = trimmed[-1].end + 1  # never expected; keeps the tiling exact
                if piece.start > piece.end:
                    continue
            trimmed.append(piece)
        out: list[_Piece] = []
        covered = -1  # last row covered so far
        last_row = len(self.lines) - 1
        for i, piece in enumerate(trimmed):
            stray = next((r for r in range(covered + 1, piece.start) if not self.blank(r)), None)
            if stray is not None:
                if out and out[-1].cols is None:
                    out[-1].end = max(
                        r for r in range(covered + 1, piece.start) if not self.blank(r)
                    )
                elif piece.cols is None:
                    piece.start = stray
                else:
                    out.extend(self.windows(stray, piece.start - 1, piece.scope))
            out.append(piece)
            covered = piece.end
            if i == len(trimmed) - 1 and covered < last_row:
                tail = [r for r in range(covered + 1, last_row + 1) if not self.blank(r)]
                if tail:
                    if piece.cols is None:
                        piece.end = tail[-1]
                    else:
                        out.extend(self.windows(tail[0], tail[-1], piece.scope))
        if not trimmed:
            rows = [r for r in range(len(self.lines)) if not self.blank(r)]
            if rows:
                out = self.windows(rows[0], rows[-1], _MODULE)
        final: list[_Piece] = []
        for piece in out:
            if piece.cols is None and self.size(piece.start, piece.end) > self.max:
                final.extend(self.windows(piece.start, piece.end, piece.scope))
            else:
                final.append(piece)
        return final


# --------------------------------------------------------------------------- syntax chunking


@dataclass(slots=True)
class _Item:
    """One sibling in a list being chunked: a syntax node (or a run of rows) with its rows."""

    start: int
    end: int
    node: Node | None
    definition: Definition | None = None
    lead: list[_Item] | None = None  # doc comments / attributes folded into a definition
    forced: bool = False  # always split (the path from a definition down to its body)


def _end_row(node: Node) -> int:
    end = node.end_point
    row = end.row
    if end.column == 0 and row > node.start_point.row:
        row -= 1  # the node ends with its newline
    return row


class _Group:
    """A run of small siblings being merged into one chunk."""

    __slots__ = ("end", "plain", "start", "starts")

    def __init__(self, start: int, end: int):
        self.start = start
        self.end = end
        self.starts = [start]  # first row of each item
        self.plain = False  # holds more than closing punctuation


class _SyntaxChunker:
    def __init__(self, source: _Source, spec: LanguageSpec):
        self.src = source
        self.spec = spec
        self.attachable = spec.comments | spec.attached

    def run(self) -> list[Chunk] | None:
        """The chunks, or None when the parse is too broken to be worth following."""
        src = self.src
        long_chars = sum(len(line) for line in src.lines if len(line) > src.max)
        if (
            src.offsets[-1] > MINIFIED_MIN_CHARS
            and long_chars > MINIFIED_FRACTION * src.offsets[-1]
        ):
            # Minified: nearly all of it must be cut into character windows anyway.
            return src.chunks(src.finish([]), self.spec.name)
        data = "\n".join(src.lines).encode("utf-8", "surrogatepass")
        if not data.strip():
            return []
        tree = get_parser(self.spec.name).parse(data)
        root = tree.root_node
        broken = root.has_error and self._error_bytes(root) > MAX_ERROR_FRACTION * len(data)
        items = self._items(root.children, frozenset())
        pieces = self._chunk_list(items, _MODULE, -1, 0)
        if broken and all(piece.scope is _MODULE for piece in pieces):
            return None  # mostly errors and not one definition recognised: chunk by lines
        return src.chunks(src.finish(pieces), self.spec.name)

    @staticmethod
    def _error_bytes(root: Node) -> int:
        if root.is_error:
            return root.end_byte - root.start_byte
        return sum(c.end_byte - c.start_byte for c in root.children if c.is_error or c.is_missing)

    # ---- items

    def _items(self, nodes: list[Node], forced: frozenset[int]) -> list[_Item]:
        """Sibling nodes as items, doc comments folded into the definition below them."""
        classify = self.spec.classify
        attachable = self.attachable
        out: list[_Item] = []
        for node in nodes:
            start, end = node.start_point.row, _end_row(node)
            if node.id in forced:
                out.append(_Item(start, end, node, forced=True))
                continue
            definition = classify(node) if node.is_named else None
            item = _Item(start, end, node, definition)
            if definition is not None:
                lead: list[_Item] = []
                top = item.start
                while out:
                    prev = out[-1]
                    if (
                        prev.node is None
                        or prev.definition is not None
                        or prev.forced
                        or prev.node.type not in attachable
                        or prev.end < top - 1  # a blank line between
                        or prev.end > top
                        or (len(out) > 1 and out[-2].end >= prev.start)  # a trailing comment
                    ):
                        break
                    lead.insert(0, out.pop())
                    top = prev.start
                if lead:
                    item.lead = lead
                    item.start = top
            out.append(item)
        return out

    def _expand(self, items: list[_Item]) -> list[_Item]:
        """Replace every item that must be split (a forced one, or plain code that is
        too big and spans lines) by its children, recursively; definitions stay."""
        src = self.src
        out: list[_Item] = []
        stack = list(reversed(items))
        while stack:
            item = stack.pop()
            node = item.node
            if (
                node is not None
                and item.definition is None
                and node.child_count
                and (
                    item.forced
                    or (item.end > item.start and src.size(item.start, item.end) > src.max)
                )
            ):
                stack.extend(reversed(self._items(node.children, self._forced)))
                continue
            out.append(item)
        return out

    _forced: frozenset[int] = frozenset()

    # ---- chunking one list of siblings

    def _chunk_list(
        self, items: list[_Item], scope: _Scope, covered: int, nesting: int, header_end: int = -1
    ) -> list[_Piece]:
        """Chunk one list of siblings lying in `scope`; rows up to `covered` are taken.
        `header_end` is the last row of the header of the definition being split."""
        src = self.src
        limit, small = src.max, src.min
        pieces: list[_Piece] = []
        group: _Group | None = None
        flushed = covered  # last row of the last piece emitted

        def flush() -> None:
            nonlocal group, flushed
            if group is None:
                return
            glue = ""
            if not group.plain:
                glue = "prev"  # closing punctuation after a unit
            elif src.size(group.start, group.end) < small:
                _rebalance(src, pieces[-1] if pieces else None, group, scope)
            starts = [row for row in group.starts if group.start <= row <= group.end]
            pieces.append(_Piece(group.start, group.end, scope, glue, starts=starts))
            flushed = group.end
            group = None

        def merge(item: _Item, start: int, end: int) -> None:
            """Add a small piece of code to the open group (greedily, up to max_chars)."""
            nonlocal group
            if group is not None and src.size(group.start, end) > limit:
                flush()
            if group is None:
                start = max(start, flushed + 1)
                if start > end:
                    return
                group = _Group(start, end)
            else:
                group.end = max(group.end, end)
                if start > group.starts[-1]:
                    group.starts.append(start)
            if not group.plain and not _is_trivia(src, item, start, end):
                group.plain = True

        for item in self._expand(items):
            start, end = item.start, item.end
            definition = item.definition if nesting < MAX_NESTING else None
            size = src.size(start, end)
            if definition is not None and start == end and size > limit:
                definition = None  # minified code: the line's windows belong to the scope
            if definition is None and size <= limit:
                merge(item, start, end)
                continue
            # A chunk (or chunks) of its own. It takes the row it shares with what came before.
            if group is not None and group.end >= start:
                if group.start >= start:
                    group = None
                else:
                    group.end = start - 1
            # A lone header (of the definition being split, or a tiny group before a big
            # leaf such as a huge docstring) is carried into the item's first chunk.
            prefix = None
            if group is not None and (
                (nesting and not pieces and group.end <= header_end)
                or (definition is None and src.size(group.start, group.end) < small)
            ):
                if definition is None:
                    prefix, group = group.start, None
                elif size <= limit:
                    if src.size(group.start, end) <= limit:
                        pieces.append(_Piece(group.start, end, self._scope(definition, scope)))
                        flushed, group = end, None
                        continue
                elif src.size(group.start, max(_header_span(definition)[1], start)) <= limit:
                    # The first piece of the split will hold both headers.
                    prefix, group = group.start, None
            flush()
            start = max(start, flushed + 1)
            if start > end:
                continue
            size = src.size(start, end)
            if definition is not None and size > limit:
                pieces.extend(
                    self._split_definition(item, definition, scope, start, nesting, prefix)
                )
            elif definition is not None:
                pieces.append(_Piece(start, end, self._scope(definition, scope)))
            elif size > limit:
                pieces.extend(src.windows(start if prefix is None else prefix, end, scope))
            else:  # what is left after the shared row is small after all
                merge(item, start, end)
                continue
            flushed = end
        flush()
        return _apply_glue(src, pieces)

    def _split_definition(
        self,
        item: _Item,
        definition: Definition,
        scope: _Scope,
        start: int,
        nesting: int,
        prefix: int | None,
    ) -> list[_Piece]:
        """Chunk a definition too big for one chunk by its children, in its own scope;
        `prefix` is the first row of enclosing header lines to carry into the first piece."""
        assert item.node is not None
        inner = self._scope(definition, scope)
        # The path from the item's node down to the body is split whatever its size.
        target = definition.body if definition.body is not None else definition.node
        path = {item.node.id, definition.node.id}
        node: Node | None = target
        for _ in range(64):
            if node is None or node.id == item.node.id:
                break
            path.add(node.id)
            node = node.parent
        children = [_Item(item.node.start_point.row, _end_row(item.node), item.node, forced=True)]
        if item.lead:
            children = item.lead + children
        first = start
        if prefix is not None and prefix < start:
            children.insert(0, _Item(prefix, start - 1, None))
            first = prefix
        saved = self._forced
        self._forced = frozenset(path)
        try:
            header_end = _header_span(definition)[1]
            return self._chunk_list(children, inner, first - 1, nesting + 1, header_end)
        finally:
            self._forced = saved

    def _scope(self, definition: Definition, parent: _Scope) -> _Scope:
        kind = definition.kind
        if kind == FUNCTION and parent.kind == CLASS:
            kind = METHOD
        elif kind == NAMESPACE:
            kind = "module"
        name = definition.name
        symbol = f"{parent.symbol}.{name}" if parent.symbol and name else (name or parent.symbol)
        header = self._header(definition)
        signature = (
            f"{parent.signature}\n{header}"
            if parent.signature and header
            else (header or parent.signature)
        )
        return _Scope(kind, symbol, signature)

    def _header(self, definition: Definition) -> str:
        """The definition's header lines: from its first line to where its body starts."""
        lines = self.src.lines
        first, row, column = _header_span(definition)
        rows = lines[first:row]
        if column is None:
            rows.append(lines[row])
        else:
            prefix = lines[row].encode("utf-8", "surrogatepass")[:column]
            rows.append(prefix.decode("utf-8", "replace"))
        rows = [row.rstrip() for row in rows if row.strip()]
        if len(rows) > MAX_HEADER_LINES:  # a long parameter list, or a misparse after macros
            rows = [*rows[:3], "…", *rows[-2:]]
        header = "\n".join(rows)
        if len(header) > MAX_HEADER_CHARS:
            header = header[:MAX_HEADER_CHARS].rstrip() + " …"
        return header


_NOT_HEADER = frozenset(
    {"decorator", "marker_annotation", "annotation", "attribute_item", "comment",
     "line_comment", "block_comment"}
)  # fmt: skip


def _header_start_row(node: Node) -> int:
    """The row where a definition's header starts: after decorators and annotations
    (`@Override`, TypeScript class decorators) that are part of the node."""
    for child in node.children:
        if child.type in _NOT_HEADER:
            continue
        if child.type == "modifiers":  # Java: annotations, then keywords
            inner = next((m for m in child.children if m.type not in _NOT_HEADER), None)
            if inner is None:
                continue
            return inner.start_point.row
        return child.start_point.row
    return node.start_point.row


def _header_span(definition: Definition) -> tuple[int, int, int | None]:
    """Where a definition's header is: its first row, its last row and the byte column
    where it ends there (None: the whole row). It ends with the last token before the
    body (not at a comment between them); without a body it is the first line."""
    node = definition.node
    first = _header_start_row(node)
    body = definition.body
    if body is not None:
        before = body.prev_sibling
        while before is not None and before.is_extra:
            before = before.prev_sibling
        if before is not None and before.start_byte >= node.start_byte:
            row, column = before.end_point.row, before.end_point.column
        else:
            row, column = body.start_point.row, body.start_point.column
        if first <= row <= _end_row(node):
            return first, row, column
    return first, first, None


def _is_trivia(src: _Source, item: _Item, start: int, end: int) -> bool:
    node = item.node
    if node is not None and not node.is_named and end == start:
        return _TRIVIA.fullmatch(node.type) is not None
    return all(_TRIVIA.fullmatch(src.lines[r]) for r in range(start, end + 1))


def _rebalance(src: _Source, prev: _Piece | None, group: _Group, scope: _Scope) -> None:
    """A run of merged siblings ended in a tiny group: move the boundary with the group
    before it back, so that the last chunk is not a lone statement."""
    if prev is None or prev.starts is None or prev.scope is not scope or prev.end >= group.start:
        return
    for row in reversed(prev.starts[1:]):
        size = src.size(row, group.end)
        if size > src.max:
            return
        if size >= src.min:
            prev.end = row - 1
            prev.starts = [r for r in prev.starts if r < row]
            group.start = row
            return


def _apply_glue(src: _Source, pieces: list[_Piece]) -> list[_Piece]:
    """Fold lone closing punctuation into the chunk before it."""
    if not any(p.glue for p in pieces):
        return pieces
    out: list[_Piece] = []
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if (
            piece.glue == "prev"
            and out
            and out[-1].cols is None
            and src.size(out[-1].start, piece.end) <= src.max
        ):
            out[-1].end = piece.end
            i += 1
            continue
        out.append(piece)
        i += 1
    for piece in out:
        piece.glue = ""
    return out
