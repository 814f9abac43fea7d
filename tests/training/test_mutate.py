"""The AST mutation engine: each operator, the skips, byte-exact application, undoing."""

from __future__ import annotations

import ast
import sysconfig
import textwrap
from pathlib import Path

import pytest

from training.tasks.mutate import (
    OPERATORS,
    MutationError,
    apply_mutation,
    find_mutations,
    fix_edit,
    mutation_scope,
    revert_text,
    sample_mutations,
)
from training.tasks.taskset import Mutation


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _pairs(source: str, operator: str | None = None) -> list[tuple[str, str]]:
    return [
        (m.original, m.mutated)
        for m in find_mutations(source, "m.py")
        if operator is None or m.operator == operator
    ]


def _by_op(source: str, operator: str) -> list[Mutation]:
    return [m for m in find_mutations(source, "m.py") if m.operator == operator]


def test_operators_are_described():
    assert set(OPERATORS) >= {
        "binary_operator",
        "comparison",
        "boolean",
        "constant",
        "off_by_one",
        "remove_statement",
        "swap_arguments",
        "return_value",
    }
    assert all(desc and "\n" not in desc for desc in OPERATORS.values())


def test_binary_operator():
    source = _src(
        """
        def f(a, b):
            x = a + b
            y = a * b
            z = a // b
            w = a << b
            v = a & b
            x += 2
            return x, y, z, w, v
        """
    )
    pairs = _pairs(source, "binary_operator")
    assert ("a + b", "a - b") in pairs
    assert ("a * b", "a / b") in pairs
    assert ("a // b", "a / b") in pairs
    assert ("a << b", "a >> b") in pairs
    assert ("a & b", "a | b") in pairs
    assert ("x += 2", "x -= 2") in pairs
    m = next(m for m in _by_op(source, "binary_operator") if m.original == "a + b")
    assert m.line == 2 and m.description == "`+` changed to `-` in `f`"
    assert apply_mutation(source, m) == source.replace("a + b", "a - b")


def test_binary_operator_keeps_meaning_with_parentheses():
    source = _src(
        """
        def f(a, b, c):
            return c * a ** b
        """
    )
    pairs = _pairs(source, "binary_operator")
    assert ("a ** b", "(a * b)") in pairs  # not `c * a * b`


def test_string_concatenation_is_not_an_arithmetic_site():
    source = _src(
        """
        def f(name):
            return "hello " + name
        """
    )
    assert _pairs(source, "binary_operator") == []


def test_comparison():
    source = _src(
        """
        def f(a, b, xs, ys):
            return [a < b, a >= b, a == b, a is None, a in xs, b not in ys, a is not b]
        """
    )
    pairs = _pairs(source, "comparison")
    assert pairs == [
        ("a < b", "a <= b"),
        ("a >= b", "a > b"),
        ("a == b", "a != b"),
        ("a is None", "a is not None"),
        ("a in xs", "a not in xs"),
        ("b not in ys", "b in ys"),
        ("a is not b", "a is b"),
    ]
    m = _by_op(source, "comparison")[0]
    assert m.description == "`<` changed to `<=` in `f`"


def test_comparison_chain_and_comments_between_operands():
    source = _src(
        """
        def f(a, b, c):
            return (a <  # low
                    b < c)
        """
    )
    pairs = _pairs(source, "comparison")
    assert ("a <  # low\n            b < c", "a <=  # low\n            b < c") in pairs
    assert ("a <  # low\n            b < c", "a <  # low\n            b <= c") in pairs
    for m in _by_op(source, "comparison"):
        assert "# low" in apply_mutation(source, m)


def test_boolean():
    source = _src(
        """
        def f(a, b, c):
            if a and b:
                return not c
            return a or b and c
        """
    )
    pairs = _pairs(source, "boolean")
    assert ("a and b", "a or b") in pairs
    assert ("not c", "c") in pairs
    assert ("a or b and c", "a and b and c") in pairs
    assert ("b and c", "(b or c)") in pairs  # `a or b or c` would be the same tree shape


def test_constant():
    source = _src(
        """
        def f(items, flag=True):
            sep = ''
            parts = ','.join(items)
            return parts[:3], sep, flag, 0
        """
    )
    pairs = _pairs(source, "constant")
    assert ("True", "False") in pairs
    assert ("''", "'x'") in pairs
    assert ("','", "''") in pairs
    assert ("3", "4") in pairs and ("3", "2") in pairs
    assert ("0", "1") in pairs and ("0", "-1") not in pairs
    longer = _src(
        """
        def g(d):
            return d['key'], 'a longer message'
        """
    )
    assert _pairs(longer, "constant") == []


def test_off_by_one():
    source = _src(
        """
        def f(xs, count, lo, hi, i):
            for j in range(count):
                pass
            for k in range(1, len(xs) - 1):
                pass
            return xs[lo:], xs[:hi], xs[i + 1], len(xs) > j
        """
    )
    pairs = _pairs(source, "off_by_one")
    assert ("count", "count - 1") in pairs  # range stop
    assert ("len(xs) - 1", "len(xs)") in pairs
    assert ("lo", "lo + 1") in pairs  # slice start
    assert ("hi", "hi - 1") in pairs  # slice end
    assert (
        "    return xs[lo:], xs[:hi], xs[i + 1], len(xs) > j",
        "    return xs[lo:], xs[:hi], xs[i], len(xs) > j",
    ) in pairs
    assert ("len(xs)", "len(xs) - 1") in pairs


def test_remove_statement():
    source = _src(
        """
        def total(xs):
            \"\"\"Sum the positive values.\"\"\"
            result = 0
            for x in xs:
                if x < 0:
                    continue
                result += x  # keep a running sum
                record(x)
            return result


        def single(x):
            return x
        """
    )
    removed = [m.original for m in _by_op(source, "remove_statement")]
    assert removed == [
        "        if x < 0:\n            continue\n",
        "        result += x  # keep a running sum\n",
        "        record(x)\n",
    ]
    m = _by_op(source, "remove_statement")[1]
    assert m.mutated == "" and m.line == 7
    assert m.description == "`result += x` removed in `total`"
    out = apply_mutation(source, m)
    assert out == source.replace("        result += x  # keep a running sum\n", "")
    # never the only statement, the docstring, the only return, or the plain `result = 0`
    assert all("return" not in r and '"""' not in r and "result = 0" not in r for r in removed)


def test_remove_statement_updates_only():
    source = _src(
        """
        def f(xs):
            count = 0
            count = count + len(xs)
            self_total = [x for x in xs]
            return count, self_total
        """
    )
    removed = [m.original.strip() for m in _by_op(source, "remove_statement")]
    assert removed == ["count = count + len(xs)"]


def test_swap_arguments():
    source = _src(
        """
        def f(a, b):
            g(a, b)
            h(a, a)
            max(a, b)
            return divmod(a + 1, b)
        """
    )
    pairs = _pairs(source, "swap_arguments")
    assert pairs == [("a, b", "b, a"), ("a + 1, b", "b, a + 1")]


def test_return_value():
    source = _src(
        """
        def ready(a, b) -> bool:
            return a < b


        def either(a, b):
            return a or b


        def name(a):
            return a
        """
    )
    pairs = _pairs(source, "return_value")
    assert pairs == [("a < b", "not a < b"), ("a or b", "not (a or b)")]


def test_skips():
    source = _src(
        '''
        """Module docstring 1."""
        from __future__ import annotations

        import logging
        from typing import TYPE_CHECKING

        __version__ = "1.0.1"
        LIMIT = 10
        log = logging.getLogger(__name__)

        if TYPE_CHECKING:
            X = 1 + 2


        @decorate(1 + 2)
        def f(x: int = 1, y: "list[int] | None" = None) -> int:
            """Docstring with 1 + 2 < 3."""
            assert x > 0, "x must be positive"
            print(x + 1, "a")
            log.info("x=%d", x - 1)
            warnings.warn("w", DeprecationWarning, stacklevel=2)
            msg = f"{x + 1}"
            return x


        class C:
            size: int = 3

            def __repr__(self):
                return f"C({self.size + 1})"

            def __str__(self):
                return str(self.size - 1)


        if __name__ == "__main__":
            f(1 + 2)
        '''
    )
    found = find_mutations(source, "m.py")
    # only the default `x: int = 1` is a site: everything else is skipped
    assert [(m.original, m.mutated) for m in found] == [("1", "0"), ("1", "2")]


def test_every_other_byte_is_kept():
    source = _src(
        """
        def f(a,b):   # odd   spacing
            return (a+b)*2 if a<b else  b   # trailing
        """
    )
    for m in find_mutations(source, "m.py"):
        out = apply_mutation(source, m)
        if m.mutated:
            at = source.index(
                m.original, sum(len(x) for x in source.splitlines(True)[: m.line - 1])
            )
            assert out[:at] == source[:at]
            assert out[at + len(m.mutated) :] == source[at + len(m.original) :]
        assert "# odd   spacing" in out and "# trailing" in out


def test_non_ascii_source_uses_byte_offsets():
    source = _src(
        """
        def grüße(naïve, straße):
            text = "ünïcödé ✓" + naïve
            return len(straße) < 3 and text != "✓"
        """
    )
    pairs = _pairs(source)
    assert ("len(straße) < 3", "len(straße) <= 3") in pairs
    assert ('text != "✓"', 'text == "✓"') in pairs
    assert ('len(straße) < 3 and text != "✓"', 'len(straße) < 3 or text != "✓"') in pairs
    for m in find_mutations(source, "m.py"):
        out = apply_mutation(source, m)
        assert revert_text(out, m) == source
        old, new = fix_edit(out, m)
        assert out.count(old) == 1 and out.replace(old, new) == source
        assert "grüße" in m.description or m.description


def test_ambiguous_text_widens_to_the_line():
    source = _src(
        """
        def f(a, b):
            return g(a + b) + h(a + b)
        """
    )
    muts = [m for m in _by_op(source, "binary_operator")]
    assert any(m.original == "    return g(a + b) + h(a + b)" for m in muts)
    for m in muts:
        assert apply_mutation(source, m) != source


def test_apply_on_changed_source_raises():
    source = _src(
        """
        def f(a, b):
            return a < b
        """
    )
    m = _by_op(source, "comparison")[0]
    moved = "# a new first line\n" + source
    with pytest.raises(MutationError, match="not there"):
        apply_mutation(moved, m)
    with pytest.raises(MutationError, match="past the end"):
        apply_mutation("x = 1", m)
    noop = Mutation(operator="comparison", path="m.py", line=2, original="a < b", mutated="a  <  b")
    with pytest.raises(MutationError, match="unchanged"):
        apply_mutation(source, noop)
    broken = Mutation(operator="comparison", path="m.py", line=2, original="a < b", mutated="a <")
    with pytest.raises(MutationError, match="does not parse"):
        apply_mutation(source, broken)
    with pytest.raises(MutationError, match="not valid Python"):
        find_mutations("def f(:\n", "bad.py")


def test_fix_edit_round_trips_and_is_unique():
    source = _src(
        """
        def f(xs, seen):
            total = 0
            for x in xs:
                total += x
                seen.append(x)
            for x in xs:
                total += x
                seen.append(x)
            return total


        def g(xs):
            total = 0
            for x in xs:
                total += x
            return total
        """
    )
    mutations = find_mutations(source, "m.py")
    assert any(m.operator == "remove_statement" for m in mutations)
    for m in mutations:
        out = apply_mutation(source, m)
        old, new = fix_edit(out, m)
        assert out.count(old) == 1, (m, old)
        assert out.replace(old, new, 1) == source
        assert old.splitlines()  # whole lines, never empty


def test_fix_edit_at_end_of_file_without_newline():
    source = "def f(x):\n    x.append(1)\n    x.append(2)"
    for m in find_mutations(source, "m.py"):
        out = apply_mutation(source, m)
        old, new = fix_edit(out, m)
        assert out.count(old) == 1 and out.replace(old, new) == source


def test_crlf_source():
    source = "def f(a, b):\r\n    c = a - 1\r\n    c += b\r\n    return c < b\r\n"
    mutations = find_mutations(source, "m.py")
    assert {m.operator for m in mutations} >= {"comparison", "binary_operator", "remove_statement"}
    for m in mutations:
        out = apply_mutation(source, m)
        assert revert_text(out, m) == source
        old, new = fix_edit(out, m)
        assert out.replace(old, new) == source


def test_sample_is_deterministic_and_spread():
    source = _src(
        """
        def a(x, y):
            return x + y < 3 and x - y > 1 or x * y == 4


        def b(xs):
            for i in range(1, len(xs) - 1):
                xs[i] += xs[i - 1] * 2
            return xs[:2]


        def c(s):
            if s == "":
                return False
            return s.startswith("#") or s.endswith(",")
        """
    )
    candidates = find_mutations(source, "m.py")
    first = sample_mutations(candidates, 8, seed=3)
    assert first == sample_mutations(list(reversed(candidates)), 8, seed=3)
    assert len(first) == 8 and len(set(first)) == 8
    assert len({m.operator for m in first}) >= 5
    scopes = [mutation_scope(m) for m in first]
    assert {scopes.count(s) for s in set(scopes)} <= {2, 3, 4}  # spread over a, b, c
    assert sample_mutations(candidates, 8, seed=4) != first
    assert len(sample_mutations(candidates, 10_000, seed=1)) == len(set(candidates))


_STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.mark.parametrize("name", ["textwrap.py", "bisect.py", "heapq.py", "json/decoder.py"])
def test_real_modules_every_candidate_applies(name):
    source = (_STDLIB / name).read_text(encoding="utf-8")
    mutations = find_mutations(source, name)
    assert len(mutations) > 50
    assert {m.operator for m in mutations} >= {
        "binary_operator",
        "comparison",
        "constant",
        "off_by_one",
        "remove_statement",
        "swap_arguments",
    }
    assert mutations == find_mutations(source, name)  # deterministic
    original_dump = ast.dump(ast.parse(source))
    for m in mutations:
        out = apply_mutation(source, m)  # parses and differs, or raises
        assert ast.dump(ast.parse(out)) != original_dump
        assert revert_text(out, m) == source
        old, new = fix_edit(out, m)
        assert out.count(old) == 1 and out.replace(old, new, 1) == source
