"""Injecting bugs into Python source by AST mutation, at the text level.

A mutation changes one small span of a module (an operator, a comparison, a
constant, a bound, one statement, the order of two arguments) and keeps every other
byte -- comments, formatting, quoting -- exactly as it was, so the diff a task shows
is the one-line slip a person makes, and the scripted expert can undo it with one
`edit_file` call.

    candidates = find_mutations(source, "pkg/mod.py")   # every site, in source order
    picked = sample_mutations(candidates, 20, seed=1)      # spread over operators, functions
    buggy = apply_mutation(source, picked[0])              # verified: parses, AST differs
    old, new = fix_edit(buggy, picked[0])                  # the edit that undoes it

Positions come from the AST (lineno/col_offset/end_lineno/end_col_offset; columns
are UTF-8 byte offsets). A Mutation records only its start line and the `original`
and `mutated` texts, so spans are chosen such that `original` occurs exactly once
starting on that line of the clean module (and `mutated` exactly once on that line
of the mutated one): when a node's text is ambiguous there, the span widens to the
whole line(s). find_mutations checks each candidate locally (the changed span parses
and its AST differs, parentheses added where precedence would change the meaning);
apply_mutation checks the whole module.
"""

from __future__ import annotations

import ast
import bisect
import functools
import itertools
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from training.tasks.taskset import Mutation

OPERATORS: dict[str, str] = {
    "binary_operator": "an arithmetic or bitwise operator swapped (+/-, *//, //→/, %→//, <</>>, &/|)",
    "comparison": "a comparison weakened, strengthened or negated (< / <=, == / !=, is / is not, in / not in)",
    "boolean": "`and`/`or` swapped, or a `not` removed",
    "constant": "a small int moved by one, True/False flipped, an empty or short separator string changed",
    "off_by_one": "a bound moved by one: range() arguments, `x - 1`/`x + 1`, slice bounds, len(x)",
    "remove_statement": "one statement dropped from a function body (an update, a call, an if without else, continue/break)",
    "swap_arguments": "two different positional arguments of a call swapped",
    "return_value": "a boolean return negated (`return x` → `return not x`)",
}


class MutationError(Exception):
    """A mutation that cannot be applied or undone here; the message says why."""


# --- source positions ---------------------------------------------------------------

_NEWLINE = re.compile(r"\r\n|\r|\n")


class _Text:
    """A module's text with AST positions (line, UTF-8 byte column) mapped to offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def offset(self, lineno: int, col: int) -> int:
        start = self.starts[lineno - 1]
        end = self.starts[lineno] if lineno < len(self.starts) else len(self.text)
        line = self.text[start:end]
        if line.isascii():
            return start + col
        return start + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def line_of(self, offset: int) -> int:
        """0-based index of the line holding offset."""
        return bisect.bisect_right(self.starts, offset) - 1

    def line_end(self, index: int) -> int:
        """Offset of the end of line `index`, before its line break."""
        if index + 1 < len(self.starts):
            nxt = self.starts[index + 1]
            return nxt - (2 if self.text[nxt - 2 : nxt] == "\r\n" else 1)
        return len(self.text)

    def line_range(self, index: int) -> tuple[int, int]:
        """[start, start of the next line) of line `index`."""
        nxt = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.text) + 1
        return self.starts[index], nxt


def _occurrences(text: str, needle: str, lo: int, hi: int) -> list[int]:
    """Offsets in [lo, hi) where needle starts (overlapping ones included)."""
    found, at = [], text.find(needle, lo)
    while 0 <= at < hi:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


def _locate(text: str, needle: str, line: int, what: str, path: str) -> int:
    """The one offset where needle starts on 1-based `line` of text; MutationError if not one."""
    t = _Text(text)
    if not 1 <= line <= len(t.starts):
        raise MutationError(
            f"{path}: line {line} is past the end of the file ({len(t.starts)} lines)"
        )
    lo, hi = t.line_range(line - 1)
    if needle == "":
        return lo
    found = _occurrences(text, needle, lo, hi)
    if not found:
        raise MutationError(
            f"{path}:{line}: the {what} text {_short(needle)!r} is not there; "
            "the file changed since the mutation was found"
        )
    if len(found) > 1:
        raise MutationError(
            f"{path}:{line}: the {what} text {_short(needle)!r} occurs {len(found)} times on that line"
        )
    return found[0]


def _short(text: str, limit: int = 40) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def _dump(tree: ast.AST) -> str:
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


# --- precedence (what needs parentheses) --------------------------------------------

_OR, _AND, _NOT, _CMP, _BOR, _BXOR, _BAND, _SHIFT, _ARITH, _TERM, _FACTOR, _POWER, _AWAIT, _ATOM = (
    range(3, 17)
)
_BINOP_PREC = {
    ast.BitOr: _BOR,
    ast.BitXor: _BXOR,
    ast.BitAnd: _BAND,
    ast.LShift: _SHIFT,
    ast.RShift: _SHIFT,
    ast.Add: _ARITH,
    ast.Sub: _ARITH,
    ast.Mult: _TERM,
    ast.Div: _TERM,
    ast.FloorDiv: _TERM,
    ast.Mod: _TERM,
    ast.MatMult: _TERM,
    ast.Pow: _POWER,
}


def _precedence(node: ast.AST) -> int:
    if isinstance(node, ast.BinOp):
        return _BINOP_PREC[type(node.op)]
    if isinstance(node, ast.BoolOp):
        return _OR if isinstance(node.op, ast.Or) else _AND
    if isinstance(node, ast.UnaryOp):
        return _NOT if isinstance(node.op, ast.Not) else _FACTOR
    if isinstance(node, ast.Compare):
        return _CMP
    if isinstance(node, ast.Await):
        return _AWAIT
    if isinstance(node, (ast.IfExp, ast.Lambda, ast.NamedExpr, ast.Yield, ast.YieldFrom)):
        return 1
    return _ATOM


def _binding(parent: ast.AST | None, node: ast.AST) -> int | None:
    """How tightly the parent binds the node (None: any expression fits there)."""
    if isinstance(parent, (ast.BinOp, ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Await)):
        return _precedence(parent)
    if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node:
        return _ATOM
    if isinstance(parent, ast.Call) and parent.func is node:
        return _ATOM
    if isinstance(parent, ast.Starred):
        return _BOR
    return None


# --- finding candidates -------------------------------------------------------------

_LOG_METHODS = {
    "debug",
    "info",
    "warning",
    "warn",
    "error",
    "exception",
    "critical",
    "log",
    "fatal",
}
_LOG_OWNERS = {"logging", "logger", "log", "_log", "_logger", "LOGGER", "LOG", "warnings"}
_SKIP_FUNCTIONS = {"__repr__", "__str__", "__format__", "__rich_repr__"}
_SYMMETRIC_CALLS = {"max", "min", "gcd", "lcm", "hypot", "isclose"}
_BOOL_CALLS = {"isinstance", "issubclass", "any", "all", "bool", "callable", "hasattr"}
_BOOL_METHODS = {
    "startswith",
    "endswith",
    "isdigit",
    "isalpha",
    "isalnum",
    "isspace",
    "islower",
    "isupper",
}
_SMALL_INT = 1 << 16

_BINOP_SWAP: dict[type, tuple[type, str, str]] = {
    ast.Add: (ast.Sub, "+", "-"),
    ast.Sub: (ast.Add, "-", "+"),
    ast.Mult: (ast.Div, "*", "/"),
    ast.Div: (ast.Mult, "/", "*"),
    ast.FloorDiv: (ast.Div, "//", "/"),
    ast.Mod: (ast.FloorDiv, "%", "//"),
    ast.Pow: (ast.Mult, "**", "*"),
    ast.LShift: (ast.RShift, "<<", ">>"),
    ast.RShift: (ast.LShift, ">>", "<<"),
    ast.BitAnd: (ast.BitOr, "&", "|"),
    ast.BitOr: (ast.BitAnd, "|", "&"),
    ast.BitXor: (ast.BitOr, "^", "|"),
}
_CMP_SWAP: dict[type, tuple[str, str, str]] = {  # op -> (pattern in the source, shown, new)
    ast.Lt: (r"<", "<", "<="),
    ast.LtE: (r"<=", "<=", "<"),
    ast.Gt: (r">", ">", ">="),
    ast.GtE: (r">=", ">=", ">"),
    ast.Eq: (r"==", "==", "!="),
    ast.NotEq: (r"!=", "!=", "=="),
    ast.Is: (r"\bis\b", "is", "is not"),
    ast.IsNot: (r"\bis\s+not\b", "is not", "is"),
    ast.In: (r"\bin\b", "in", "not in"),
    ast.NotIn: (r"\bnot\s+in\b", "not in", "in"),
}


@dataclass
class _Candidate:
    operator: str
    start: int
    end: int
    mutated: str
    description: str
    kind: str  # "expr", "stmt" (checked by parsing the span), "remove" (whole lines)


def _mask_comments(gap: str) -> str:
    return re.sub(r"#[^\r\n]*", lambda m: " " * len(m.group()), gap)


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _is_log_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in {"print", "warn"}
    if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS:
        owner = func.value
        if isinstance(owner, ast.Attribute):  # self.logger.info
            owner_name = owner.attr
        elif isinstance(owner, ast.Name):
            owner_name = owner.id
        else:
            return False
        return owner_name in _LOG_OWNERS or owner_name.lower().endswith("logger")
    return False


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_dunder_assign(node: ast.stmt) -> bool:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return any(
        isinstance(t, ast.Name) and t.id.startswith("__") and t.id.endswith("__") for t in targets
    )


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


class _Finder:
    """Walks one module and collects candidate mutations (in source order)."""

    def __init__(self, source: str) -> None:
        self.t = _Text(source)
        self.source = source
        self.found: list[_Candidate] = []
        self.scope: list[str] = []
        self.function_returns: list[int] = []  # returns in each enclosing function
        self.bool_function: list[bool] = []
        self.bindings: list[dict[str, int]] = []  # name -> first line bound, per function
        self.functions = 0  # depth of function nesting: only code in functions is mutated

    # helpers
    def text(self, node: ast.AST) -> str:
        s, e = self.t.span(node)
        return self.source[s:e]

    def where(self) -> str:
        return f" in `{'.'.join(self.scope)}`" if self.scope else " at module level"

    def add(
        self, operator: str, node_or_span, mutated: str, description: str, kind: str = "expr"
    ) -> None:
        if not self.functions:
            return  # module and class level: a mutation there breaks every import, not logic
        if isinstance(node_or_span, tuple):
            start, end = node_or_span
        else:
            start, end = self.t.span(node_or_span)
        self.found.append(
            _Candidate(operator, start, end, mutated, description + self.where(), kind)
        )

    def wrap(self, node: ast.AST, parent: ast.AST | None, new_text: str, new_prec: int) -> str:
        """new_text in parentheses when it binds looser than the node it replaces needs."""
        bind = _binding(parent, node)
        if bind is None or new_prec >= _precedence(node) or new_prec > bind:
            return new_text
        start, end = self.t.span(node)
        before = self.source[:start].rstrip()
        after = self.source[end:].lstrip()
        if before.endswith("(") and after.startswith(")"):
            return new_text
        return f"({new_text})"

    def replace_token(
        self, gap_start: int, gap_end: int, pattern: str, new: str
    ) -> tuple[int, int, str] | None:
        """The one operator token matching pattern between two operands, replaced."""
        gap = _mask_comments(self.source[gap_start:gap_end])
        if "\\" in gap:
            return None
        matches = list(re.finditer(pattern, gap))
        if len(matches) != 1:
            return None
        m = matches[0]
        return gap_start + m.start(), gap_start + m.end(), new

    def edit_node(self, node: ast.AST, edits: list[tuple[int, int, str]]) -> str:
        """The node's text with (start, end, new) edits applied (absolute offsets)."""
        start, end = self.t.span(node)
        out, at = [], start
        for s, e, new in sorted(edits):
            out.append(self.source[at:s])
            out.append(new)
            at = e
        out.append(self.source[at:end])
        return "".join(out)

    # walking
    def run(self, tree: ast.Module) -> list[_Candidate]:
        self.body(tree.body, owner=tree)
        return self.found

    def body(self, stmts: list[ast.stmt], owner: ast.AST) -> None:
        for i, stmt in enumerate(stmts):
            if (
                i == 0
                and _is_docstring(stmt)
                and isinstance(
                    owner, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                )
            ):
                continue
            self.statement(stmt, stmts, owner)

    def statement(self, stmt: ast.stmt, siblings: list[ast.stmt], owner: ast.AST) -> None:
        if isinstance(
            stmt, (ast.Assert, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Pass)
        ):
            return
        if _is_dunder_assign(stmt) and not self.scope:
            return
        if isinstance(stmt, ast.Expr) and (_is_log_call(stmt.value) or _is_docstring(stmt)):
            return
        if isinstance(stmt, ast.If) and (_is_main_guard(stmt) or _is_type_checking(stmt)):
            return
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name in _SKIP_FUNCTIONS:
                return
            self.function(stmt)
            return
        if isinstance(stmt, ast.ClassDef):
            self.scope.append(stmt.name)
            for base in [*stmt.bases, *(k.value for k in stmt.keywords)]:
                self.expr(base, stmt)
            self.body(stmt.body, owner=stmt)
            self.scope.pop()
            return
        if self.function_returns:
            self.maybe_remove(stmt, siblings, owner)
        if isinstance(stmt, ast.Return) and stmt.value is not None and self.bool_function:
            self.negate_return(stmt)
        if isinstance(stmt, ast.AugAssign):
            self.augassign(stmt)
        for field_name, value in ast.iter_fields(stmt):
            if field_name in {"annotation", "returns", "type_comment", "decorator_list"}:
                continue
            if isinstance(value, list):
                if value and isinstance(value[0], ast.stmt):
                    self.body(value, owner=stmt)
                else:
                    for item in value:
                        self.child(item, stmt)
            else:
                self.child(value, stmt)

    def child(self, value: object, parent: ast.AST) -> None:
        if isinstance(value, ast.expr):
            self.expr(value, parent)
        elif isinstance(value, ast.stmt):
            self.statement(value, [value], parent)
        elif isinstance(
            value, ast.AST
        ):  # excepthandler, comprehension, keyword, withitem, match_case...
            for field_name, sub in ast.iter_fields(value):
                if field_name in {"annotation", "type_comment"}:
                    continue
                if isinstance(sub, list):
                    if sub and isinstance(sub[0], ast.stmt):
                        self.body(sub, owner=value)
                    else:
                        for item in sub:
                            self.child(item, value)
                else:
                    self.child(sub, value)

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(fn.name)
        self.functions += 1
        for default in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
            self.expr(default, fn.args)
        returns = sum(1 for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None)
        is_bool = isinstance(fn.returns, ast.Name) and fn.returns.id == "bool"
        bindings = {
            a.arg: fn.lineno for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        }
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                bindings[n.id] = min(bindings.get(n.id, n.lineno), n.lineno)
        self.function_returns.append(returns)
        self.bool_function.append(is_bool)
        self.bindings.append(bindings)
        self.body(fn.body, owner=fn)
        self.function_returns.pop()
        self.bool_function.pop()
        self.bindings.pop()
        self.functions -= 1
        self.scope.pop()

    def expr(self, node: ast.expr, parent: ast.AST | None) -> None:
        if isinstance(node, ast.JoinedStr) or _is_log_call(node):
            return
        if isinstance(node, ast.Lambda):
            self.expr(node.body, node)
            return
        handler = getattr(self, f"on_{type(node).__name__}", None)
        if handler is not None:
            handler(node, parent)
        for value in ast.iter_child_nodes(node):
            if isinstance(value, ast.expr):
                self.expr(value, node)
            elif isinstance(value, ast.AST):
                self.child(value, node)

    # --- operators -------------------------------------------------------------------

    def on_BinOp(self, node: ast.BinOp, parent: ast.AST | None) -> None:
        swap = _BINOP_SWAP.get(type(node.op))
        if swap is not None and not self.stringy(node):
            new_op, old_sym, new_sym = swap
            new_prec = _BINOP_PREC[new_op]
            children_ok = (
                all(
                    _precedence(c) > new_prec or (_precedence(c) == new_prec and c is node.left)
                    for c in (node.left, node.right)
                )
                or new_prec <= _BINOP_PREC[type(node.op)]
            )
            _, left_end = self.t.span(node.left)
            right_start, _ = self.t.span(node.right)
            edit = self.replace_token(
                left_end, right_start, re.escape(old_sym) + r"(?![=*/<>])", new_sym
            )
            if edit and children_ok:
                text = self.wrap(node, parent, self.edit_node(node, [edit]), new_prec)
                self.add("binary_operator", node, text, f"`{old_sym}` changed to `{new_sym}`")
        # off by one: `x - 1` / `x + 1` -> `x`
        if isinstance(node.op, (ast.Add, ast.Sub)) and _int_value(node.right) == 1:
            self.add(
                "off_by_one",
                node,
                self.text(node.left),
                f"`{_short(self.text(node))}` changed to `{_short(self.text(node.left))}`",
            )

    def stringy(self, node: ast.BinOp) -> bool:
        """Concatenation or repetition of strings, where swapping the operator is noise."""
        for side in (node.left, node.right):
            if isinstance(side, ast.JoinedStr) or (
                isinstance(side, ast.Constant) and isinstance(side.value, (str, bytes))
            ):
                return True
        return isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant)

    def augassign(self, stmt: ast.AugAssign) -> None:
        swap = _BINOP_SWAP.get(type(stmt.op))
        if swap is None or (
            isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, (str, bytes))
        ):
            return
        _, old_sym, new_sym = swap
        _, target_end = self.t.span(stmt.target)
        value_start, _ = self.t.span(stmt.value)
        edit = self.replace_token(target_end, value_start, re.escape(old_sym) + "=", new_sym + "=")
        if edit:
            self.add(
                "binary_operator",
                stmt,
                self.edit_node(stmt, [edit]),
                f"`{old_sym}=` changed to `{new_sym}=`",
                kind="stmt",
            )

    def on_Compare(self, node: ast.Compare, parent: ast.AST | None) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            pattern, old, new = _CMP_SWAP[type(op)]
            _, left_end = self.t.span(operands[i])
            right_start, _ = self.t.span(operands[i + 1])
            if type(op) in (ast.Lt, ast.Gt):
                pattern += "(?!=)"
            edit = self.replace_token(left_end, right_start, pattern, new)
            if edit:
                self.add(
                    "comparison", node, self.edit_node(node, [edit]), f"`{old}` changed to `{new}`"
                )
        for operand in operands:  # len(x) -> len(x) - 1 where it is compared
            if (
                isinstance(operand, ast.Call)
                and _call_name(operand) == "len"
                and isinstance(operand.func, ast.Name)
            ):
                self.add(
                    "off_by_one",
                    operand,
                    f"{self.text(operand)} - 1",
                    f"`{_short(self.text(operand))}` changed to `{_short(self.text(operand))} - 1`",
                )

    def on_BoolOp(self, node: ast.BoolOp, parent: ast.AST | None) -> None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        edits = []
        for left, right in itertools.pairwise(node.values):
            _, left_end = self.t.span(left)
            right_start, _ = self.t.span(right)
            edit = self.replace_token(left_end, right_start, rf"\b{old}\b", new)
            if edit is None:
                return
            edits.append(edit)
        new_prec = _OR if new == "or" else _AND
        text = self.wrap(node, parent, self.edit_node(node, edits), new_prec)
        self.add("boolean", node, text, f"`{old}` changed to `{new}`")

    def on_UnaryOp(self, node: ast.UnaryOp, parent: ast.AST | None) -> None:
        if not isinstance(node.op, ast.Not):
            return
        text = self.text(node)
        rest = text[3:]
        if not text.startswith("not") or "\\" in rest or "#" in rest:
            return
        self.add("boolean", node, rest.lstrip(), f"`not` removed from `{_short(text)}`")

    def on_Constant(self, node: ast.Constant, parent: ast.AST | None) -> None:
        value = node.value
        text = self.text(node)
        if isinstance(value, bool):
            self.add("constant", node, str(not value), f"`{value}` changed to `{not value}`")
        elif type(value) is int and 0 <= value <= _SMALL_INT and text.isdigit():
            self.add("constant", node, str(value + 1), f"`{text}` changed to `{value + 1}`")
            if value >= 1:
                self.add("constant", node, str(value - 1), f"`{text}` changed to `{value - 1}`")
        elif isinstance(value, str) and self.sensible_string(node, parent, text):
            quote = text[0]
            new = f"{quote}x{quote}" if value == "" else quote * 2
            self.add("constant", node, new, f"`{_short(text)}` changed to `{new}`")

    def sensible_string(self, node: ast.Constant, parent: ast.AST | None, text: str) -> bool:
        """Empty strings and short separators used as values, not keys or messages."""
        if not text or text[0] not in "'\"" or text[:3] in ("'''", '"""') or "\\" in text:
            return False
        if len(node.value) > 3 or node.value.strip(" ,;:|-_/.\t") != "":
            return False
        if isinstance(parent, ast.Subscript) and parent.slice is node:
            return False
        if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
            return False
        return not (isinstance(parent, ast.Call) and _is_log_call(parent))

    def on_Call(self, node: ast.Call, parent: ast.AST | None) -> None:
        name = _call_name(node)
        if (
            name == "range"
            and isinstance(node.func, ast.Name)
            and 1 <= len(node.args) <= 3
            and not node.keywords
        ):
            bounds = (
                [("stop", node.args[0])]
                if len(node.args) == 1
                else [("start", node.args[0]), ("stop", node.args[1])]
            )
            for label, arg in bounds:
                self.bound(arg, "+ 1" if label == "start" else "- 1", f"range {label}")
        positional = node.args
        if name in _SYMMETRIC_CALLS or any(isinstance(a, ast.Starred) for a in positional):
            return
        for a, b in itertools.pairwise(positional):
            if _dump(a) == _dump(b):
                continue
            a_start, a_end = self.t.span(a)
            b_start, b_end = self.t.span(b)
            gap = self.source[a_end:b_start]
            if "#" in gap or "\\" in gap:
                continue
            swapped = self.source[b_start:b_end] + gap + self.source[a_start:a_end]
            self.add(
                "swap_arguments",
                (a_start, b_end),
                swapped,
                f"arguments `{_short(self.text(a), 20)}` and `{_short(self.text(b), 20)}` of `{_short(name or 'call', 20)}()` swapped",
            )

    def on_Subscript(self, node: ast.Subscript, parent: ast.AST | None) -> None:
        sl = node.slice
        if isinstance(sl, ast.Slice):
            if sl.lower is not None:
                self.bound(sl.lower, "+ 1", "slice start")
            if sl.upper is not None:
                self.bound(sl.upper, "- 1", "slice end")

    def bound(self, node: ast.expr, change: str, label: str) -> None:
        """A bound moved by one (ints are the constant operator's; `x ± 1` is on_BinOp's)."""
        if isinstance(node, ast.Constant) or (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, (ast.Add, ast.Sub))
            and _int_value(node.right) == 1
        ):
            return
        if isinstance(node, ast.UnaryOp) and _int_value(node.operand) is not None:
            return
        text = self.text(node)
        new = f"{text} {change}" if _precedence(node) > _ARITH else f"({text}) {change}"
        self.add("off_by_one", node, new, f"{label} `{_short(text)}` changed to `{_short(new)}`")

    def negate_return(self, stmt: ast.Return) -> None:
        value = stmt.value
        assert value is not None
        if isinstance(value, ast.Constant) or (
            isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)
        ):
            return
        obviously_bool = (
            isinstance(value, (ast.Compare, ast.BoolOp))
            or (isinstance(value, ast.Call) and (_call_name(value) in _BOOL_CALLS | _BOOL_METHODS))
            or (self.bool_function and self.bool_function[-1])
        )
        if not obviously_bool:
            return
        text = self.text(value)
        new = f"not {text}" if _precedence(value) >= _NOT else f"not ({text})"
        self.add(
            "return_value",
            value,
            new,
            f"`return {_short(text, 30)}` changed to `return {_short(new, 34)}`",
        )

    # --- removing statements ----------------------------------------------------------

    def maybe_remove(self, stmt: ast.stmt, siblings: list[ast.stmt], owner: ast.AST) -> None:
        real = [s for i, s in enumerate(siblings) if not (i == 0 and _is_docstring(s))]
        if len(real) < 2 or stmt not in real:
            return
        if isinstance(stmt, ast.Return):
            if self.function_returns[-1] < 2 or (
                stmt is real[-1] and isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef))
            ):
                return
        elif isinstance(stmt, ast.If):
            if stmt.orelse:
                return
        elif isinstance(stmt, ast.Expr):
            if not isinstance(stmt.value, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)):
                return
        elif isinstance(stmt, ast.Assign):
            if not all(self.updates(t, stmt) for t in stmt.targets):
                return
        elif not isinstance(stmt, (ast.AugAssign, ast.Continue, ast.Break)):
            return
        start, end = self.t.span(stmt)
        first = self.t.line_of(start)
        last = self.t.line_of(end)
        head = self.source[self.t.starts[first] : start]
        tail = self.source[end : self.t.line_end(last)]
        if head.strip() or (tail.strip() and not tail.strip().startswith("#")):
            return
        line_start, _ = self.t.line_range(first)
        _, next_start = self.t.line_range(last)
        next_start = min(next_start, len(self.source))
        first_line = self.source[start : min(end, self.t.line_end(first))]
        self.add(
            "remove_statement",
            (line_start, next_start),
            "",
            f"`{_short(first_line)}` removed",
            kind="remove",
        )

    def updates(self, target: ast.expr, stmt: ast.stmt) -> bool:
        """An assignment that updates state: an attribute or item, or a name bound before."""
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            return True
        if not isinstance(target, ast.Name):
            return False
        first = self.bindings[-1].get(target.id)
        return first is not None and first < stmt.lineno


def _check_local(source: str, c: _Candidate) -> bool:
    """The changed span alone parses and differs from the original span."""
    if c.kind == "remove":
        return True
    original = source[c.start : c.end]
    try:
        if c.kind == "stmt":
            before, after = ast.parse(original), ast.parse(c.mutated)
        else:
            before = ast.parse(f"(\n{original}\n)", mode="eval")
            after = ast.parse(f"(\n{c.mutated}\n)", mode="eval")
    except SyntaxError:
        return False
    return _dump(before) != _dump(after)


def _finish(t: _Text, path: str, c: _Candidate) -> Mutation | None:
    """The candidate as a Mutation whose texts are unambiguous on their line (widened to
    whole lines when the node's text is not), or None when even that is ambiguous."""
    source = t.text
    start, end, mutated = c.start, c.end, c.mutated
    for attempt in range(2):
        original = source[start:end]
        line = t.line_of(start)
        lo, hi = t.line_range(line)
        after = source[:start] + mutated + source[end:]
        ok = _occurrences(source, original, lo, hi) == [start] and (
            mutated == ""
            or _occurrences(after, mutated, lo, hi + len(mutated) - len(original)) == [start]
        )
        if ok:
            return Mutation(
                operator=c.operator,
                path=path,
                line=line + 1,
                original=original,
                mutated=mutated,
                description=c.description,
            )
        if attempt == 0 and c.kind != "remove":
            last = t.line_of(max(start, end - 1))
            new_start, new_end = t.starts[line], t.line_end(last)
            mutated = source[new_start:start] + mutated + source[end:new_end]
            start, end = new_start, new_end
    return None


def find_mutations(source: str, path: str) -> list[Mutation]:
    """Every candidate mutation of a module, in source order (then operator order).

    Skips docstrings, annotations, decorators, asserts, logging/print/warnings calls,
    `__repr__`/`__str__`, module dunders (`__version__`, `__all__`), the
    `if __name__ == "__main__"` and `if TYPE_CHECKING` blocks, f-strings, and any change
    that does not parse or leaves the AST as it was. MutationError when the module
    itself does not parse.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise MutationError(f"{path}: not valid Python ({exc.msg}, line {exc.lineno})") from None
    finder = _Finder(source)
    candidates = finder.run(tree)
    order = {name: i for i, name in enumerate(OPERATORS)}
    candidates.sort(key=lambda c: (c.start, order[c.operator], c.end, c.mutated))
    seen: set[tuple[int, int, str]] = set()
    out: list[Mutation] = []
    for c in candidates:
        key = (c.start, c.end, c.mutated)
        if key in seen or not _check_local(source, c):
            continue
        seen.add(key)
        mutation = _finish(finder.t, path, c)
        if mutation is not None:
            out.append(mutation)
    return out


# --- applying and undoing -------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _module_dump(source: str) -> str:
    """The clean module's AST dump, kept: a builder applies many mutants to one module."""
    return _dump(ast.parse(source))


def apply_mutation(source: str, m: Mutation) -> str:
    """source with m applied, byte for byte elsewhere; MutationError when `m.original` is
    not (exactly once) on line m.line, or the result does not parse or is unchanged."""
    at = _locate(source, m.original, m.line, "original", m.path)
    result = source[:at] + m.mutated + source[at + len(m.original) :]
    try:
        after = ast.parse(result)
    except SyntaxError as exc:
        raise MutationError(
            f"{m.path}:{m.line}: the mutated module does not parse ({exc.msg})"
        ) from None
    try:
        before = _module_dump(source)
    except SyntaxError as exc:
        raise MutationError(
            f"{m.path}: the module does not parse before the mutation ({exc.msg})"
        ) from None
    if before == _dump(after):
        raise MutationError(f"{m.path}:{m.line}: the mutation leaves the module's AST unchanged")
    return result


def revert_text(mutated_source: str, m: Mutation) -> str:
    """The clean module back from the mutated one (MutationError if m is not there)."""
    at = _locate(mutated_source, m.mutated, m.line, "mutated", m.path)
    return mutated_source[:at] + m.original + mutated_source[at + len(m.mutated) :]


def fix_edit(mutated_source: str, m: Mutation) -> tuple[str, str]:
    """(old_string, new_string) for edit_file that undoes m in the mutated module: whole
    lines around the change, widened (above first, then below) until old_string occurs
    exactly once in the file."""
    at = _locate(mutated_source, m.mutated, m.line, "mutated", m.path)
    end = at + len(m.mutated)
    t = _Text(mutated_source)
    first = t.line_of(at)
    last = t.line_of(max(at, end - 1))
    if not m.mutated:  # a removed statement: the lines on both sides of the gap
        first = max(first - 1, 0)
    top = len(t.starts) - 1
    grow_up = True
    while True:
        lo, hi = t.starts[first], t.line_end(last)
        if hi < end:  # the change ends in the last line's break (end of file)
            hi = end
        old = mutated_source[lo:hi]
        if old and len(_occurrences(mutated_source, old, 0, len(mutated_source))) == 1:
            new = mutated_source[lo:at] + m.original + mutated_source[end:hi]
            return old, new
        if first == 0 and last == top:
            raise MutationError(
                f"{m.path}: no unique context for the fix (the file is all repeats)"
            )
        if (grow_up and first > 0) or last == top:
            first -= 1
        else:
            last += 1
        grow_up = not grow_up


# --- sampling ---------------------------------------------------------------------------

_SCOPE = re.compile(r" in `([^`]*)`$")


def mutation_scope(m: Mutation) -> str:
    """path::function the mutation lies in (from its description), for spreading samples."""
    found = _SCOPE.search(m.description)
    return f"{m.path}::{found.group(1) if found else '<module>'}"


def _sort_key(m: Mutation) -> tuple:
    return (m.path, m.line, m.operator, m.original, m.mutated)


def sample_mutations(candidates: Iterable[Mutation], n: int, seed: int) -> list[Mutation]:
    """n mutations chosen deterministically (independent of the input's order): operators
    in turn, and within an operator the function and file used least so far."""
    rng = random.Random(seed)
    by_operator: dict[str, list[Mutation]] = {}
    for m in sorted(set(candidates), key=_sort_key):
        by_operator.setdefault(m.operator, []).append(m)
    for group in by_operator.values():
        rng.shuffle(group)
    operators = sorted(
        by_operator, key=lambda op: (list(OPERATORS).index(op) if op in OPERATORS else 99, op)
    )
    rng.shuffle(operators)
    used_scope: Counter[str] = Counter()
    used_file: Counter[str] = Counter()
    chosen: list[Mutation] = []
    while len(chosen) < n and any(by_operator.values()):
        for op in operators:
            group = by_operator[op]
            if not group or len(chosen) >= n:
                continue
            best = min(
                range(len(group)),
                key=lambda i: (used_scope[mutation_scope(group[i])], used_file[group[i].path], i),
            )
            m = group.pop(best)
            used_scope[mutation_scope(m)] += 1
            used_file[m.path] += 1
            chosen.append(m)
    return chosen
