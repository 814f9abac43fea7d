"""Syntax-aware chunking: units, splits, merges, exact line ranges and the tiling
property (every non-blank line in exactly one chunk, in order, text equal to the lines)."""

from __future__ import annotations

import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index.chunker import Chunk, chunk_file, embedding_text, language_for

STDLIB = Path(textwrap.__file__).parent


def source_lines(text: str) -> list[str]:
    return [line.removesuffix("\r") for line in text.split("\n")]


def assert_tiles(text: str, chunks: list[Chunk], max_chars: int = 1500) -> None:
    """Chunks cover every non-blank line exactly once, in order, without overlap; a
    chunk's text is exactly its lines (or, for an over-long line, consecutive character
    windows that together make the line, less any window of only spaces); no chunk is
    over max_chars, blank, or starts or ends with a blank line."""
    lines = source_lines(text)
    covered: dict[int, int] = {}
    pieces: dict[int, list[str]] = {}
    last = 0
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines), chunk
        assert chunk.text.strip(), chunk
        assert len(chunk.text) <= max_chars, (chunk.start_line, len(chunk.text))
        exact = "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        if chunk.text == exact and chunk.start_line not in pieces:
            assert chunk.start_line > last, (chunk, last)
            assert exact.split("\n")[0].strip() and exact.split("\n")[-1].strip()
            for row in range(chunk.start_line, chunk.end_line + 1):
                covered[row] = covered.get(row, 0) + 1
        else:  # a character window of one long line
            assert chunk.start_line == chunk.end_line, chunk
            assert chunk.start_line >= last, (chunk, last)
            if chunk.start_line == last:
                assert chunk.start_line in pieces, (chunk, last)
            pieces.setdefault(chunk.start_line, []).append(chunk.text)
        last = chunk.end_line
    for row, parts in pieces.items():
        line, at = lines[row - 1], 0
        for part in parts:  # consecutive windows; one of only spaces may be left out
            gap = len(line) - len(line[at:].lstrip())
            at = next(q for q in range(at, max(gap, at) + 1) if line.startswith(part, q))
            at += len(part)
        assert not line[at:].strip(), row
        covered[row] = covered.get(row, 0) + 1
    for row, line in enumerate(lines, 1):
        if line.strip():
            assert covered.get(row) == 1, (row, line)


def shape(chunks: list[Chunk]) -> list[tuple[str, str, int, int]]:
    return [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks]


# --------------------------------------------------------------------------- per language

PYTHON = '''\
"""Parsing helpers."""

import re
from dataclasses import dataclass

WORD = re.compile(r"\\w+")


@dataclass
class Token:
    text: str
    start: int


class Parser(Base):
    """Parses text."""

    class Error(Exception):
        pass

    def parse(self, text: str) -> list[Token]:
        # Scan the words.
        return [Token(m.group(), m.start()) for m in WORD.finditer(text)]

    @property
    def name(self) -> str:
        return "parser"


def main():
    print(Parser().parse("a b"))


if __name__ == "__main__":
    main()
'''

JAVASCRIPT = """\
'use strict';
const path = require('path');

/**
 * Joins paths.
 */
function join(a, b) {
  return path.join(a, b);
}

class Cache {
  constructor() {
    this.map = new Map();
  }

  get(key) {
    return this.map.get(key);
  }
}

const double = (x) => x * 2;

Cache.prototype.clear = function () {
  this.map.clear();
};

module.exports = { join, Cache, double };
"""

TYPESCRIPT = """\
import { readFile } from "fs";
import type { Config } from "./config";

/** A parsed document. */
export interface Document {
  uri: string;
  version: number;
}

export type Handler = (doc: Document) => void;

export enum Level {
  Debug,
  Info,
}

// Parses documents.
export class Parser<T> extends Base implements Runner {
  private cache = new Map<string, T>();

  constructor(private readonly config: Config) {
    super();
  }

  /** Parse one document. */
  async parse(text: string): Promise<T> {
    const tree = this.grammar.parse(text);
    return this.convert(tree);
  }

  handle = (doc: Document): void => {
    this.cache.delete(doc.uri);
  };
}

export const loadConfig = async (path: string): Promise<Config> => {
  const raw = await readFile(path, "utf8");
  return JSON.parse(raw);
};

export default function main(): void {
  new Parser(loadConfig("x")).parse("");
}

namespace Util {
  export function clamp(x: number): number {
    return Math.max(0, x);
  }
}
"""

TSX = """\
import React, { useState } from "react";

type Props = { label: string };

/** A counter button. */
export function Counter({ label }: Props) {
  const [n, setN] = useState(0);
  return <button onClick={() => setN(n + 1)}>{label}: {n}</button>;
}

export const App = () => (
  <div>
    <Counter label="clicks" />
  </div>
);
"""

GO = """\
package server

import (
\t"fmt"
\t"net/http"
)

// Server serves requests.
type Server struct {
\taddr string
}

type (
\tID   int
\tName string
)

// NewServer makes a server.
func NewServer(addr string) *Server {
\treturn &Server{addr: addr}
}

// Handle answers one request.
func (s *Server) Handle(w http.ResponseWriter, r *http.Request) {
\tfmt.Fprintf(w, "hello %s", r.URL.Path)
}

func (s Server) String() string { return s.addr }
"""

RUST = """\
use std::fmt;

/// A point in the plane.
#[derive(Debug, Clone)]
pub struct Point {
    x: f64,
    y: f64,
}

impl Point {
    /// Makes a point.
    pub fn new(x: f64, y: f64) -> Self {
        Point { x, y }
    }

    fn norm(&self) -> f64 {
        (self.x * self.x + self.y * self.y).sqrt()
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "({}, {})", self.x, self.y)
    }
}

pub enum Shape {
    Circle(f64),
    Square(f64),
}

pub trait Area {
    fn area(&self) -> f64;
}

mod tests {
    fn check() {}
}
"""

JAVA = """\
package com.example;

import java.util.List;

/**
 * A shopping cart.
 */
@Entity
public class Cart extends Base {
    private final List<Item> items;

    /** Makes an empty cart. */
    public Cart() {
        this.items = new ArrayList<>();
    }

    @Override
    public int total() {
        return items.stream().mapToInt(Item::price).sum();
    }

    interface Listener {
        void changed(Cart cart);
    }

    enum State { OPEN, CLOSED }
}
"""

C = """\
#include <stdio.h>
#include <stdlib.h>

#define MAX 10

/* A node of the list. */
struct node {
    int value;
    struct node *next;
};

typedef struct {
    int x, y;
} point_t;

static int count;

/* Sums the list. */
static int
sum(const struct node *head)
{
    int total = 0;
    for (; head; head = head->next)
        total += head->value;
    return total;
}

int main(void) {
    printf("%d\\n", sum(NULL));
    return 0;
}
"""

CPP = """\
#include <string>

namespace geo {

// A shape.
template <typename T>
class Shape : public Base {
 public:
  explicit Shape(T size) : size_(size) {}
  virtual ~Shape() = default;

  T area() const {
    return size_ * size_;
  }

 private:
  T size_;
};

double Circle::area() const {
  return 3.14 * r_ * r_;
}

}  // namespace geo

int main() {
  geo::Shape<int> s(2);
  return s.area();
}
"""

# With max_chars=150 and min_chars=0 every definition is a unit, and the classes (and
# the odd long function) are split into their members.
EXPECTED = {
    "src/parse.py": (
        PYTHON,
        "python",
        [
            ("module", "", 1, 6),
            ("class", "Token", 9, 12),
            ("class", "Parser", 15, 16),
            ("class", "Parser.Error", 18, 19),
            ("method", "Parser.parse", 21, 23),
            ("method", "Parser.name", 25, 27),
            ("function", "main", 30, 31),
            ("module", "", 34, 35),
        ],
    ),
    "lib/cache.js": (
        JAVASCRIPT,
        "javascript",
        [
            ("module", "", 1, 2),
            ("function", "join", 4, 9),
            ("class", "Cache", 11, 19),
            ("function", "double", 21, 21),
            ("function", "Cache.prototype.clear", 23, 25),
            ("module", "", 27, 27),
        ],
    ),
    "src/parser.ts": (
        TYPESCRIPT,
        "typescript",
        [
            ("module", "", 1, 2),
            ("class", "Document", 4, 8),
            ("class", "Handler", 10, 10),
            ("class", "Level", 12, 15),
            ("class", "Parser", 17, 19),
            ("method", "Parser.constructor", 21, 23),
            ("method", "Parser.parse", 25, 29),
            ("method", "Parser.handle", 31, 34),
            ("function", "loadConfig", 36, 39),
            ("function", "main", 41, 43),
            ("module", "Util", 45, 49),
        ],
    ),
    "ui/Counter.tsx": (
        TSX,
        "tsx",
        [
            ("module", "", 1, 1),
            ("class", "Props", 3, 3),
            ("function", "Counter", 5, 7),
            ("function", "Counter", 8, 9),
            ("function", "App", 11, 15),
        ],
    ),
    "server/server.go": (
        GO,
        "go",
        [
            ("module", "", 1, 6),
            ("class", "Server", 8, 11),
            ("module", "", 13, 16),
            ("function", "NewServer", 18, 21),
            ("method", "Server.Handle", 23, 26),
            ("method", "Server.String", 28, 28),
        ],
    ),
    "src/point.rs": (
        RUST,
        "rust",
        [
            ("module", "", 1, 1),
            ("class", "Point", 3, 8),
            ("method", "Point.new", 10, 14),  # with the lone `impl Point {` line
            ("method", "Point.norm", 16, 19),
            ("class", "Point", 21, 25),
            ("class", "Shape", 27, 30),
            ("class", "Area", 32, 34),
            ("module", "tests", 36, 38),
        ],
    ),
    "src/Cart.java": (
        JAVA,
        "java",
        [
            ("module", "", 1, 3),
            ("class", "Cart", 5, 10),
            ("method", "Cart.Cart", 12, 15),
            ("method", "Cart.total", 17, 20),
            ("class", "Cart.Listener", 22, 24),
            ("class", "Cart.State", 26, 27),
        ],
    ),
    "src/list.c": (
        C,
        "c",
        [
            ("module", "", 1, 4),
            ("class", "node", 6, 10),
            ("class", "point_t", 12, 14),
            ("module", "", 16, 16),
            ("function", "sum", 18, 24),
            ("function", "sum", 25, 26),
            ("function", "main", 28, 31),
        ],
    ),
    "src/shape.cpp": (
        CPP,
        "cpp",
        [
            ("module", "", 1, 1),
            ("class", "geo.Shape", 3, 8),  # with the lone `namespace geo {` line
            ("method", "geo.Shape.Shape", 9, 9),
            ("method", "geo.Shape.~Shape", 10, 10),
            ("method", "geo.Shape.area", 12, 14),
            ("class", "geo.Shape", 16, 18),
            ("method", "geo.Circle.area", 20, 24),
            ("function", "main", 26, 29),
        ],
    ),
}


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_each_language_chunks_into_its_definitions(path):
    text, language, expected = EXPECTED[path]
    chunks = chunk_file(path, text, max_chars=150, min_chars=0)
    assert shape(chunks) == expected
    assert {c.language for c in chunks} == {language}
    assert {c.path for c in chunks} == {path}
    assert_tiles(text, chunks, max_chars=150)


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_each_language_at_default_sizes_tiles_the_file(path):
    text, language, _ = EXPECTED[path]
    chunks = chunk_file(path, text)
    assert chunks and {c.language for c in chunks} == {language}
    assert_tiles(text, chunks)


def test_signatures_hold_the_enclosing_headers_outermost_first():
    chunks = {c.symbol: c for c in chunk_file("p.py", PYTHON, max_chars=150, min_chars=0)}
    assert chunks["Parser.parse"].signature == (
        "class Parser(Base):\n    def parse(self, text: str) -> list[Token]:"
    )
    assert chunks["Parser.Error"].signature == "class Parser(Base):\n    class Error(Exception):"
    assert chunks["Parser.name"].signature == "class Parser(Base):\n    def name(self) -> str:"
    assert chunks["Parser"].signature == "class Parser(Base):"
    assert chunks["Token"].signature == "class Token:"
    assert chunks[""].signature == ""

    ts = {c.symbol: c for c in chunk_file("p.ts", TYPESCRIPT, max_chars=150, min_chars=0)}
    assert ts["Parser.parse"].signature == (
        "export class Parser<T> extends Base implements Runner\n"
        "  async parse(text: string): Promise<T>"
    )
    assert ts["loadConfig"].signature == (
        "export const loadConfig = async (path: string): Promise<Config> =>"
    )
    go = {c.symbol: c for c in chunk_file("s.go", GO, max_chars=150, min_chars=0)}
    assert go["Server.Handle"].signature == (
        "func (s *Server) Handle(w http.ResponseWriter, r *http.Request)"
    )
    c = {c.symbol: c for c in chunk_file("l.c", C, max_chars=150, min_chars=0)}
    assert c["sum"].signature == "static int\nsum(const struct node *head)"
    java = {c.symbol: c for c in chunk_file("C.java", JAVA, max_chars=150, min_chars=0)}
    assert java["Cart.total"].signature == "public class Cart extends Base\n    public int total()"


def test_doc_comments_decorators_and_attributes_belong_to_the_definition():
    by_symbol = {c.symbol: c for c in chunk_file("p.py", PYTHON, max_chars=150, min_chars=0)}
    assert by_symbol["Token"].text.startswith("@dataclass\nclass Token:")
    assert by_symbol["Parser.name"].text.startswith("    @property\n    def name")
    rust = chunk_file("p.rs", RUST, max_chars=1500, min_chars=0)
    assert rust[1].symbol == "Point"
    assert rust[1].text.startswith("/// A point in the plane.\n#[derive(Debug, Clone)]\npub struct")
    java = chunk_file("C.java", JAVA, max_chars=1500, min_chars=0)
    assert java[1].text.startswith("/**\n * A shopping cart.\n */\n@Entity\npublic class Cart")
    go = {c.symbol: c for c in chunk_file("s.go", GO, max_chars=1500, min_chars=0)}
    assert go["NewServer"].text.startswith("// NewServer makes a server.\nfunc NewServer")
    ts = "@Component({\n  selector: 'app',\n})\nexport class App {\n  @HostListener('click')\n  onClick(): void {\n    this.n = 1;\n  }\n}\n"
    assert shape(chunk_file("app.ts", ts, max_chars=80, min_chars=0)) == [
        ("class", "App", 1, 4),
        ("method", "App.onClick", 5, 9),
    ]
    assert chunk_file("app.ts", ts, max_chars=80, min_chars=0)[1].signature == (
        "export class App\n  onClick(): void"
    )
    # A comment separated by a blank line is not a doc comment.
    text = "x = 1\n\n# Section.\n\ndef f():\n    return 1\n"
    assert shape(chunk_file("s.py", text, min_chars=0)) == [
        ("module", "", 1, 3),
        ("function", "f", 5, 6),
    ]


# --------------------------------------------------------------------------- split and merge


def big_function(name: str = "handle", statements: int = 80, indent: str = "") -> str:
    body = "".join(
        f"{indent}    value_{i} = compute(value_{i - 1 if i else 0}, {i})  # step {i}\n"
        for i in range(statements)
    )
    return f"{indent}def {name}(request, *, retries=3):\n{indent}    '''Handle it.'''\n{body}{indent}    return value_0\n"


def test_an_oversized_function_is_split_into_statement_groups_keeping_its_symbol():
    text = "import os\n\n\n" + big_function() + "\n\nX = 1\n"
    chunks = chunk_file("h.py", text)
    assert_tiles(text, chunks)
    pieces = [c for c in chunks if c.symbol == "handle"]
    assert len(pieces) >= 3
    assert {c.kind for c in pieces} == {"function"}
    assert {c.signature for c in pieces} == {"def handle(request, *, retries=3):"}
    assert pieces[0].start_line == 4 and pieces[0].text.startswith("def handle(")
    assert pieces[-1].end_line == 4 + 82
    assert shape(chunks)[0] == ("module", "", 1, 1)
    assert shape(chunks)[-1] == ("module", "", 89, 89)  # `X = 1` is not part of handle
    assert all(len(c.text) <= 1500 for c in pieces)
    assert all(len(c.text) >= 200 for c in pieces)  # no lone trailing statement
    # The dense model sees the header of a piece that does not start with it, once.
    assert embedding_text(pieces[1]).startswith(
        "h.py\ndef handle(request, *, retries=3):\n    value_"
    )
    assert embedding_text(pieces[0]) == "h.py\n" + pieces[0].text


def test_a_split_does_not_end_in_a_lone_statement():
    # Greedily, lines 1-11 fill a chunk (198 chars) and `return v` is left alone; the
    # boundary moves back so that the last piece reaches min_chars.
    text = "def f():\n" + "    v = compute(1)\n" * 10 + "    return v\n"
    chunks = chunk_file("f.py", text, max_chars=198, min_chars=50)
    assert shape(chunks) == [("function", "f", 1, 9), ("function", "f", 10, 12)]
    assert len(chunks[1].text) == 50


def test_an_oversized_class_is_split_into_its_methods():
    methods = "\n".join(big_function(f"m{i}", statements=12, indent="    ") for i in range(4))
    text = 'class Service(Base):\n    """A service."""\n\n    retries = 3\n\n' + methods
    chunks = chunk_file("svc.py", text)
    assert_tiles(text, chunks)
    assert [c.symbol for c in chunks] == [
        "Service",
        "Service.m0",
        "Service.m1",
        "Service.m2",
        "Service.m3",
    ]
    assert [c.kind for c in chunks] == ["class", "method", "method", "method", "method"]
    assert chunks[2].signature == "class Service(Base):\n    def m1(request, *, retries=3):"
    assert embedding_text(chunks[2]).startswith(
        "svc.py\nclass Service(Base):\n    def m1(request, *, retries=3):"
    )


def test_a_split_method_in_a_nested_class_keeps_the_qualified_name():
    inner = big_function("run", statements=40, indent="        ")
    text = "class Outer:\n    class Inner:\n" + inner
    chunks = chunk_file("n.py", text)
    assert_tiles(text, chunks)
    assert {c.symbol for c in chunks} == {"Outer.Inner.run"}
    assert {c.kind for c in chunks} == {"method"}
    assert {c.signature for c in chunks} == {
        "class Outer:\n    class Inner:\n        def run(request, *, retries=3):"
    }
    assert chunks[0].start_line == 1  # the lone class headers are glued to the first piece


def test_code_between_definitions_merges_and_definitions_stay_units():
    # At the default sizes the docstring, imports and constant merge into one module
    # chunk; every definition is a chunk of its own, however small.
    assert shape(chunk_file("p.py", PYTHON)) == [
        ("module", "", 1, 6),
        ("class", "Token", 9, 12),
        ("class", "Parser", 15, 27),
        ("function", "main", 30, 31),
        ("module", "", 34, 35),
    ]
    # A long run of constants: greedy chunks of up to max_chars, none under min_chars.
    constants = "".join(f"SETTING_{i} = 'value number {i}'\n" for i in range(300))
    chunks = chunk_file("settings.py", constants)
    assert_tiles(constants, chunks)
    assert {(c.kind, c.symbol) for c in chunks} == {("module", "")}
    assert len(chunks) == -(-len(constants) // 1500)
    assert all(200 <= len(c.text) <= 1500 for c in chunks)
    # The fields of a split class merge into "class" chunks, the first with the header.
    fields = "".join(f"    field_{i}: int = {i}\n" for i in range(150))
    text = "class Config:\n" + fields + "\n" + big_function("load", 10, indent="    ")
    chunks = chunk_file("config.py", text)
    assert_tiles(text, chunks)
    assert chunks[0].start_line == 1 and len(chunks) >= 4
    assert {(c.kind, c.symbol) for c in chunks[:-1]} == {("class", "Config")}
    assert (chunks[-1].kind, chunks[-1].symbol) == ("method", "Config.load")
    # Closing braces after a unit are glued to it, not left alone.
    js = (
        "class A {\n"
        + "".join(f"  m{i}() {{\n    return {'x' * 60};\n  }}\n" for i in range(3))
        + "}\n"
    )
    chunks = chunk_file("a.js", js, max_chars=100, min_chars=0)
    assert chunks[-1].text.endswith("  }\n}") and chunks[-1].symbol == "A.m2"


def test_a_small_definition_between_units_is_its_own_chunk():
    text = big_function("a", 10) + "\n\ndef tiny():\n    return 1\n\n\n" + big_function("b", 10)
    assert [(c.kind, c.symbol) for c in chunk_file("t.py", text)] == [
        ("function", "a"),
        ("function", "tiny"),
        ("function", "b"),
    ]


def test_huge_docstring_is_cut_into_line_windows_within_the_definition():
    doc = "\n".join(f"    Line {i} of the documentation of this function." for i in range(120))
    text = f'def documented():\n    """\n{doc}\n    """\n    return 1\n'
    chunks = chunk_file("d.py", text)
    assert_tiles(text, chunks)
    assert len(chunks) >= 4
    assert {c.symbol for c in chunks} == {"documented"}
    assert chunks[0].start_line == 1


# --------------------------------------------------------------------------- tiling over real code


@pytest.mark.parametrize("package", ["json", "email", "asyncio"])
def test_stdlib_packages_tile_exactly(package):
    files = sorted((STDLIB / package).rglob("*.py"))
    assert files
    for file in files:
        text = file.read_text(encoding="utf-8")
        chunks = chunk_file(str(file.relative_to(STDLIB)), text)
        assert_tiles(text, chunks)
        assert all(c.language == "python" and c.kind != "lines" for c in chunks), file


def test_stdlib_tiles_at_small_sizes_too():
    text = (STDLIB / "json" / "decoder.py").read_text(encoding="utf-8")
    for max_chars, min_chars in [(1, 0), (40, 10), (300, 100), (100, 500)]:
        assert_tiles(
            text,
            chunk_file("decoder.py", text, max_chars=max_chars, min_chars=min_chars),
            max(max_chars, 1),
        )


CODE_LINES = [
    "def f(x):", "    return x", "class A:", "    pass", "function g() {", "}", "};", "{",
    "fn main() {", "impl A {", "func (s *S) M() {", "#include <x.h>", "int f(void) {",
    "public class B {", "export const h = () => {", "'''", '"""', "/*", "*/", "// c", "# c",
    "", "  ", "\t", "x" * 80, "\u2028", "\r", "é漢字🙂", "@decorator", "    if x:", ")",
]  # fmt: skip
EXTENSIONS = [".py", ".js", ".ts", ".tsx", ".go", ".rs", ".java", ".c", ".h", ".cpp", ".md", ""]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.one_of(st.sampled_from(CODE_LINES), st.text(max_size=40)), max_size=60),
    ext=st.sampled_from(EXTENSIONS),
    max_chars=st.integers(1, 400),
    min_chars=st.integers(0, 200),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_any_text_tiles_and_never_raises(lines, ext, max_chars, min_chars, newline):
    text = newline.join(lines)
    chunks = chunk_file(f"f{ext}", text, max_chars=max_chars, min_chars=min_chars)
    assert_tiles(text, chunks, max_chars=max_chars)


# --------------------------------------------------------------------------- bad input


def test_empty_and_blank_files_have_no_chunks():
    assert chunk_file("a.py", "") == []
    assert chunk_file("a.py", " \n\t\n\n") == []
    assert chunk_file("a.md", "\n\n") == []


def test_minified_javascript_is_cut_into_character_windows_of_its_one_line():
    one = "function f{0}(a,b){{var c=a+b;if(c>{0}){{return c*{0}}}return [a,b,{{x:{0}}}]}};"
    text = "".join(one.format(i) for i in range(40_000))[:2_000_000]
    chunks = chunk_file("dist/app.min.js", text)
    assert len(chunks) >= 2_000_000 // 1500
    assert {(c.start_line, c.end_line) for c in chunks} == {(1, 1)}
    assert "".join(c.text for c in chunks) == text
    assert max(len(c.text) for c in chunks) <= 1500
    assert {c.language for c in chunks} == {"javascript"}
    # A smaller one is parsed, but the windows of a line of many functions belong to none.
    small = "".join(one.format(i) for i in range(300))
    chunks = chunk_file("dist/small.min.js", small)
    assert len(chunks) > 10 and "".join(c.text for c in chunks) == small
    assert {(c.kind, c.symbol, c.start_line) for c in chunks} == {("module", "", 1)}


def test_a_long_line_inside_a_function_keeps_the_function_symbol():
    text = "def f(x):\n    y = 1\n    DATA = '" + "ab " * 2000 + "'\n    return DATA\n"
    chunks = chunk_file("a.py", text)
    assert_tiles(text, chunks)
    line_3 = [c for c in chunks if c.start_line == 3]
    assert len(line_3) == 5
    assert {c.symbol for c in line_3} == {"f"}


def test_syntax_errors_keep_the_good_definitions():
    text = (
        big_function("before", 8)
        + "\n\ndef broken(:\n    return )(\n\n\n"
        + big_function("after", 8)
    )
    chunks = chunk_file("e.py", text)
    assert_tiles(text, chunks)
    symbols = {c.symbol for c in chunks}
    assert {"before", "after"} <= symbols


def test_a_mostly_broken_file_falls_back_to_line_windows():
    text = "".join(f"<<< ]] {i} )) ::: @@ !!\n" for i in range(200))
    chunks = chunk_file("bad.py", text)
    assert_tiles(text, chunks)
    assert {(c.kind, c.language, c.symbol, c.signature) for c in chunks} == {
        ("lines", "text", "", "")
    }


def test_crlf_gives_the_same_chunks_as_lf():
    lf = chunk_file("p.py", PYTHON, max_chars=150, min_chars=0)
    crlf = chunk_file("p.py", PYTHON.replace("\n", "\r\n"), max_chars=150, min_chars=0)
    assert crlf == lf
    assert not any("\r" in c.text for c in crlf)


def test_tabs_odd_unicode_nul_and_lone_surrogates_do_not_break_it():
    text = (
        "def f():\n\treturn '漢字 🙂 \u2028 \u200b'\n\n"
        "def g():\n    return '\udcff\x00'\n\x0c\nclass K:\n    π = 3.14\n"
    )
    chunks = chunk_file("u.py", text, min_chars=0)
    assert_tiles(text, chunks)
    assert [c.symbol for c in chunks] == ["f", "g", "K"]
    assert chunk_file("x.c", "int main(){\x00return 0;}\n")[0].symbol == "main"


def test_pathological_nesting_does_not_raise():
    deep_defs = "".join("    " * i + f"def f{i}():\n" for i in range(300)) + "    " * 300 + "pass\n"
    assert_tiles(deep_defs, chunk_file("d.py", deep_defs))
    parens = "x = " + "(" * 20_000 + ")" * 20_000 + "\n"
    assert_tiles(parens, chunk_file("p.py", parens))
    brackets = "x = " + "[\n" * 3000 + "]\n" * 3000
    assert_tiles(brackets, chunk_file("b.js", brackets, max_chars=10, min_chars=0), max_chars=10)


# --------------------------------------------------------------------------- fallback and languages


def test_markdown_falls_back_to_line_windows_breaking_at_blank_lines():
    paragraphs = [
        "\n".join(f"Paragraph {p} sentence {s} about the index." for s in range(6))
        for p in range(12)
    ]
    text = "# Title\n\n" + "\n\n".join(paragraphs) + "\n"
    chunks = chunk_file("docs/README.md", text, max_chars=600)
    assert_tiles(text, chunks, max_chars=600)
    assert len(chunks) > 1
    assert {(c.kind, c.language, c.symbol, c.signature) for c in chunks} == {
        ("lines", "text", "", "")
    }
    lines = source_lines(text)
    for chunk in chunks[:-1]:  # every window ends at the end of a paragraph
        assert lines[chunk.end_line] == ""


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("a.py", "python"), ("a.pyi", "python"), ("a.js", "javascript"), ("a.mjs", "javascript"),
        ("a.cjs", "javascript"), ("a.jsx", "javascript"), ("a.ts", "typescript"),
        ("a.d.ts", "typescript"), ("a.tsx", "tsx"), ("a.go", "go"), ("a.rs", "rust"),
        ("A.java", "java"), ("a.c", "c"), ("a.h", "c"), ("a.cc", "cpp"), ("a.cpp", "cpp"),
        ("a.cxx", "cpp"), ("a.hpp", "cpp"), ("a.hh", "cpp"), ("dir.x/A.PY", "python"),
        ("README.md", None), ("a.yaml", None), ("Makefile", None), ("a.toml", None), ("py", None),
    ],
)  # fmt: skip
def test_language_for(path, language):
    assert language_for(path) == language


def test_cpp_header_and_shebang_scripts_are_recognised():
    header = "namespace a {\nclass B {\n public:\n  int c() { return 1; }\n};\n}\n"
    assert {c.language for c in chunk_file("b.h", header)} == {"cpp"}
    assert {c.language for c in chunk_file("b.h", "int c(void) { return 1; }\n")} == {"c"}
    script = "#!/usr/bin/env python3\ndef main():\n    pass\n"
    assert {c.language for c in chunk_file("bin/tool", script)} == {"python"}


def test_embedding_text():
    chunks = {c.symbol: c for c in chunk_file("src/p.py", PYTHON, max_chars=150, min_chars=0)}
    # A method that starts with its own header gets only the class header.
    assert embedding_text(chunks["Parser.parse"]) == (
        "src/p.py\nclass Parser(Base):\n" + chunks["Parser.parse"].text
    )
    # Decorators above the header do not hide it.
    assert embedding_text(chunks["Parser.name"]) == (
        "src/p.py\nclass Parser(Base):\n" + chunks["Parser.name"].text
    )
    # A chunk that starts with (or holds) its header gets no repeat.
    assert embedding_text(chunks["Token"]) == "src/p.py\n" + chunks["Token"].text
    assert embedding_text(chunks[""]) == "src/p.py\n" + chunks[""].text
    assert embedding_text(chunks["Parser.parse"], include_path=False) == (
        "class Parser(Base):\n" + chunks["Parser.parse"].text
    )
    lines = chunk_file("notes.md", "# Notes\n\nSome text.\n")
    assert embedding_text(lines[0]) == "notes.md\n# Notes\n\nSome text."


def test_chunking_is_thread_safe_and_deterministic():
    files = sorted((STDLIB / "json").glob("*.py")) + sorted((STDLIB / "asyncio").glob("*.py"))[:10]
    inputs = [(f.name, f.read_text(encoding="utf-8")) for f in files]
    expected = [chunk_file(name, text) for name, text in inputs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            assert list(pool.map(lambda args: chunk_file(*args), inputs)) == expected
    for (_, text), chunks in zip(inputs, expected, strict=True):
        assert_tiles(text, chunks)


def test_chunk_is_frozen():
    chunk = chunk_file("a.py", "x = 1\n")[0]
    assert chunk == Chunk("a.py", 1, 1, "", "", "module", "python", "x = 1")
    with pytest.raises(AttributeError):
        chunk.text = "y"  # type: ignore[misc]


def test_index_imports_neither_agent_nor_server():
    import index.chunker
    import index.languages

    for module in (index.chunker, index.languages):
        source = Path(module.__file__).read_text()
        assert "from agent" not in source and "import agent" not in source
        assert "from server" not in source and "import server" not in source
    assert "index.chunker" in sys.modules
