"""Languages the chunker understands: file extensions, tree-sitter grammars, and per
language which syntax nodes are definitions (the units of a chunk).

Grammars come from the installed `tree-sitter-*` packages; nothing is downloaded. Each
`Language` is built once per process and each `Parser` once per thread (parsers are not
thread-safe), so chunking can run on a thread pool.

A language's `classify(node)` looks at one syntax node as it appears in a list of
siblings (a module's statements, a class body's members, ...) and says whether it is a
definition: its kind, its name, the definition node proper (inside wrappers such as
decorators, `export`, `template <...>` or `const f = () => ...`) and its body.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tree_sitter import Language, Node, Parser

# Definition kinds. "namespace" (C++ namespaces, Rust modules, TypeScript namespaces)
# scopes names like a class but its loose code is chunked as "module" code.
FUNCTION, METHOD, CLASS, NAMESPACE = "function", "method", "class", "namespace"


@dataclass(frozen=True, slots=True)
class Definition:
    kind: str  # FUNCTION | METHOD | CLASS | NAMESPACE
    name: str  # as written, "" when anonymous; may be dotted ("Server.Handle")
    node: Node  # the definition proper (decorators, export etc. stripped)
    body: Node | None  # what follows the header (block, class body, ...), if any


@dataclass(frozen=True, slots=True)
class LanguageSpec:
    name: str
    module: str  # the grammar package
    function: str  # its function that returns the language pointer
    classify: Callable[[Node], Definition | None]
    comments: frozenset[str]  # node types of comments (doc comments attach to the definition below)
    attached: frozenset[str] = (
        frozenset()
    )  # other nodes that attach like doc comments (Rust #[...])


# --------------------------------------------------------------------------- helpers


def _text(node: Node | None) -> str:
    if node is None:
        return ""
    data = node.text
    return data.decode("utf-8", "replace") if data is not None else ""


def _name(node: Node) -> str:
    return _text(node.child_by_field_name("name"))


def _body(node: Node) -> Node | None:
    return node.child_by_field_name("body")


def _first_descendant(node: Node, types: frozenset[str], limit: int = 64) -> Node | None:
    """Breadth-first search for the first node of one of `types` (bounded)."""
    queue = [node]
    seen = 0
    while queue and seen < limit:
        current = queue.pop(0)
        seen += 1
        if current.type in types:
            return current
        queue.extend(current.named_children)
    return None


# --------------------------------------------------------------------------- Python


def _python(node: Node) -> Definition | None:
    kind = node.type
    if kind == "function_definition":
        return Definition(FUNCTION, _name(node), node, _body(node))
    if kind == "class_definition":
        return Definition(CLASS, _name(node), node, _body(node))
    if kind == "decorated_definition":
        inner = node.child_by_field_name("definition")
        return _python(inner) if inner is not None else None
    return None


# --------------------------------------------------------------------------- JavaScript / TypeScript

_JS_FUNCTIONS = frozenset(
    {
        "function_declaration",
        "generator_function_declaration",
        "function_expression",
        "function",
        "generator_function",
        "arrow_function",
    }
)
_JS_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function"}
)
_JS_CLASSES = frozenset({"class_declaration", "abstract_class_declaration", "class"})
_TS_TYPES = frozenset({"interface_declaration", "enum_declaration", "type_alias_declaration"})


def _js_value(node: Node, name: str) -> Definition | None:
    """A function or class used as a value (`const f = () => {}`, `export default class`)."""
    if node.type in _JS_FUNCTION_VALUES:
        return Definition(FUNCTION, name, node, _body(node))
    if node.type in _JS_CLASSES:
        return Definition(CLASS, name, node, _body(node))
    return None


def _javascript(node: Node) -> Definition | None:
    kind = node.type
    if kind in _JS_FUNCTIONS:
        return Definition(FUNCTION, _name(node), node, _body(node))
    if kind in _JS_CLASSES:
        return Definition(CLASS, _name(node), node, _body(node))
    if kind == "method_definition":
        return Definition(METHOD, _name(node), node, _body(node))
    if kind in _TS_TYPES:
        return Definition(CLASS, _name(node), node, _body(node))
    if kind in ("internal_module", "module"):
        return Definition(NAMESPACE, _name(node).strip("'\""), node, _body(node))
    if kind == "export_statement":
        inner = node.child_by_field_name("declaration")
        if inner is not None:
            return _javascript(inner)
        value = node.child_by_field_name("value")
        if value is not None:
            return _js_value(value, _name(value) or "default")
        return None
    if kind == "ambient_declaration":  # declare module "x" { ... }, declare class ...
        for child in node.named_children:
            found = _javascript(child)
            if found is not None:
                return found
        return None
    if kind in ("lexical_declaration", "variable_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        if len(declarators) != 1:
            return None
        value = declarators[0].child_by_field_name("value")
        name = declarators[0].child_by_field_name("name")
        if value is None or name is None or name.type != "identifier":
            return None
        return _js_value(value, _text(name))
    if kind in ("field_definition", "public_field_definition"):
        value = node.child_by_field_name("value")
        name = node.child_by_field_name("property") or node.child_by_field_name("name")
        if value is not None and value.type in _JS_FUNCTION_VALUES:
            return Definition(METHOD, _text(name), value, _body(value))
        return None
    if kind == "expression_statement":
        child = node.named_children[0] if node.named_child_count else None
        if child is None:
            return None
        if child.type == "internal_module":
            return _javascript(child)
        if child.type == "assignment_expression":  # Foo.prototype.bar = function () {}
            right = child.child_by_field_name("right")
            left = child.child_by_field_name("left")
            if right is not None and left is not None and left.end_byte - left.start_byte < 200:
                return _js_value(right, re.sub(r"\s+", "", _text(left)))
        return None
    return None


# --------------------------------------------------------------------------- Go

_GO_TYPE_NAMES = frozenset({"type_identifier"})


def _go_type_spec(spec: Node) -> Definition:
    body = None
    type_node = spec.child_by_field_name("type")
    if type_node is not None and type_node.type == "struct_type":
        body = next(
            (c for c in type_node.named_children if c.type == "field_declaration_list"), None
        )
    return Definition(CLASS, _name(spec), spec, body)


def _go(node: Node) -> Definition | None:
    kind = node.type
    if kind == "function_declaration":
        return Definition(FUNCTION, _name(node), node, _body(node))
    if kind == "method_declaration":
        receiver = node.child_by_field_name("receiver")
        owner = _first_descendant(receiver, _GO_TYPE_NAMES) if receiver is not None else None
        name = _name(node)
        return Definition(METHOD, f"{_text(owner)}.{name}" if owner else name, node, _body(node))
    if kind in ("type_spec", "type_alias"):
        return _go_type_spec(node)
    if kind == "type_declaration":
        specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
        if len(specs) == 1:
            return _go_type_spec(specs[0])
    return None


# --------------------------------------------------------------------------- Rust


def _rust_type_name(node: Node | None) -> str:
    """`Vec<T>` -> "Vec", `fmt::Formatter` -> "Formatter", `&'a str` -> "str"."""
    for _ in range(8):
        if node is None:
            return ""
        if node.type in ("type_identifier", "primitive_type", "identifier"):
            return _text(node)
        inner = node.child_by_field_name("type") or node.child_by_field_name("name")
        if inner is None:
            inner = next(iter(node.named_children), None)
        node = inner
    return _text(node)


def _rust(node: Node) -> Definition | None:
    kind = node.type
    if kind == "function_item":
        return Definition(FUNCTION, _name(node), node, _body(node))
    if kind in ("struct_item", "enum_item", "union_item", "trait_item"):
        return Definition(CLASS, _name(node), node, _body(node))
    if kind == "impl_item":
        return Definition(
            CLASS, _rust_type_name(node.child_by_field_name("type")), node, _body(node)
        )
    if kind == "mod_item" and _body(node) is not None:
        return Definition(NAMESPACE, _name(node), node, _body(node))
    if kind == "macro_definition":
        return Definition(FUNCTION, _name(node), node, None)
    return None


# --------------------------------------------------------------------------- Java

_JAVA_TYPES = frozenset(
    {
        "class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "annotation_type_declaration",
    }
)
_JAVA_METHODS = frozenset(
    {"method_declaration", "constructor_declaration", "compact_constructor_declaration"}
)


def _java(node: Node) -> Definition | None:
    if node.type in _JAVA_TYPES:
        return Definition(CLASS, _name(node), node, _body(node))
    if node.type in _JAVA_METHODS:
        return Definition(METHOD, _name(node), node, _body(node))
    return None


# --------------------------------------------------------------------------- C / C++

_C_NAMES = frozenset(
    {
        "identifier",
        "field_identifier",
        "qualified_identifier",
        "destructor_name",
        "operator_name",
        "template_function",
        "type_identifier",
        "operator_cast",
    }
)
_C_RECORDS = frozenset({"struct_specifier", "union_specifier", "enum_specifier", "class_specifier"})


def _c_declarator_name(node: Node) -> str:
    current = node.child_by_field_name("declarator")
    for _ in range(16):
        if current is None:
            return ""
        if current.type in _C_NAMES:
            return _text(current).replace("::", ".")
        nxt = current.child_by_field_name("declarator")
        if nxt is None:  # parenthesized_declarator and friends: no field
            nxt = next((c for c in current.named_children if c.type != "parameter_list"), None)
        current = nxt
    return ""


def _c_record(node: Node, name: str = "") -> Definition | None:
    if node.type in _C_RECORDS and _body(node) is not None:
        return Definition(CLASS, _name(node) or name, node, _body(node))
    return None


def _c(node: Node) -> Definition | None:
    kind = node.type
    if kind == "function_definition":
        name = _c_declarator_name(node)
        qualified = "." in name and not name.startswith(".")
        return Definition(METHOD if qualified else FUNCTION, name, node, _body(node))
    if kind in _C_RECORDS:
        return _c_record(node)
    if kind in ("declaration", "type_definition", "field_declaration"):
        type_node = node.child_by_field_name("type")
        if type_node is None:
            return None
        typedef = _c_declarator_name(node) if kind == "type_definition" else ""
        return _c_record(type_node, typedef)
    if kind == "namespace_definition":
        return Definition(NAMESPACE, _name(node).replace("::", "."), node, _body(node))
    if kind == "template_declaration":
        for child in node.named_children:
            if child.type != "template_parameter_list":
                found = _c(child)
                if found is not None:
                    return found
        return None
    return None


# --------------------------------------------------------------------------- registry

_C_COMMENTS = frozenset({"comment"})
_JAVA_COMMENTS = frozenset({"line_comment", "block_comment"})
_DECORATORS = frozenset({"decorator"})  # TypeScript member decorators are siblings

LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec("python", "tree_sitter_python", "language", _python, _C_COMMENTS),
        LanguageSpec(
            "javascript",
            "tree_sitter_javascript",
            "language",
            _javascript,
            _C_COMMENTS,
            attached=_DECORATORS,
        ),
        LanguageSpec(
            "typescript",
            "tree_sitter_typescript",
            "language_typescript",
            _javascript,
            _C_COMMENTS,
            attached=_DECORATORS,
        ),
        LanguageSpec(
            "tsx",
            "tree_sitter_typescript",
            "language_tsx",
            _javascript,
            _C_COMMENTS,
            attached=_DECORATORS,
        ),
        LanguageSpec("go", "tree_sitter_go", "language", _go, _C_COMMENTS),
        LanguageSpec(
            "rust",
            "tree_sitter_rust",
            "language",
            _rust,
            _JAVA_COMMENTS,
            attached=frozenset({"attribute_item"}),
        ),
        LanguageSpec("java", "tree_sitter_java", "language", _java, _JAVA_COMMENTS),
        LanguageSpec("c", "tree_sitter_c", "language", _c, _C_COMMENTS),
        LanguageSpec("cpp", "tree_sitter_cpp", "language", _c, _C_COMMENTS),
    )
}

EXTENSIONS: dict[str, str] = {
    **dict.fromkeys((".py", ".pyi", ".pyw"), "python"),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx"), "javascript"),
    **dict.fromkeys((".ts", ".mts", ".cts"), "typescript"),
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    **dict.fromkeys((".c", ".h"), "c"),
    **dict.fromkeys(
        (".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++", ".ipp", ".inl", ".tcc"),
        "cpp",
    ),
}

_SHEBANG = re.compile(rb"^#![^\n]*\b(python[0-9.]*|node|deno|bun)\b")
_CPP_MARKERS = re.compile(
    r"^\s*(namespace\s+\w+\s*\{|template\s*<|class\s+\w+[^;]*\{|(public|private|protected)\s*:)"
    r"|\bstd::",
    re.MULTILINE,
)


def language_for(path: str) -> str | None:
    """The chunker language of a path, by extension; None when no grammar applies."""
    base = os.path.basename(path.replace("\\", "/")).lower()
    _, ext = os.path.splitext(base)
    return EXTENSIONS.get(ext)


def sniff_language(path: str, text: str) -> str | None:
    """`language_for`, refined by content: C++ in a `.h` file, scripts without extension."""
    language = language_for(path)
    if language == "c" and path.lower().endswith(".h") and _CPP_MARKERS.search(text, 0, 200_000):
        return "cpp"
    if language is None and text.startswith("#!"):
        match = _SHEBANG.match(text[:200].encode("utf-8", "replace"))
        if match:
            return "python" if match.group(1).startswith(b"python") else "javascript"
    return language


# --------------------------------------------------------------------------- grammars and parsers

_languages: dict[str, Language] = {}
_languages_lock = threading.Lock()
_local = threading.local()


def get_language(name: str) -> Language:
    """The tree-sitter Language for one of LANGUAGES (built once per process)."""
    language = _languages.get(name)
    if language is None:
        with _languages_lock:
            language = _languages.get(name)
            if language is None:
                spec = LANGUAGES[name]
                module = importlib.import_module(spec.module)
                language = Language(getattr(module, spec.function)())
                _languages[name] = language
    return language


def get_parser(name: str) -> Parser:
    """A Parser for `name`, one per thread (tree-sitter parsers are not thread-safe)."""
    parsers: dict[str, Parser] | None = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = _local.parsers = {}
    parser = parsers.get(name)
    if parser is None:
        parser = parsers[name] = Parser(get_language(name))
    return parser
