"""Task families, graded by difficulty: which bug a task holds and how it is made.

The mutation operators of training.tasks.mutate make bugs whose only evidence is a
wrong value; for a small model they are the hard tier. The families below it are
bugs whose evidence points at the fix, so a model can learn to read a traceback
before it must learn to reason about code:

    tier 1  the evidence names the fix
            misspelled_name   a name or attribute misspelled (the NameError or
                              AttributeError names it, and the line)
            missing_import    an import removed (NameError for the name it brought)
            wrong_literal     a literal changed where the failing assertion shows both
                              values (kept only when it does)
            wrong_keyword     a keyword argument misnamed (TypeError names it)
    tier 2  several sites: rewards parallel calls
            renamed_symbol    a function renamed at its definition and in the tests but
                              not at its call sites in other modules ("finish the rename")
            two_files         the same tier-1 slip in two files
    tier 3  mutation          today's operators (mutate.OPERATORS)

Every family produces `Variant`s: the fix sites (each a Mutation whose `original` is
the fixed text and `mutated` the buggy one, lines counted in the buggy file), the
files of the fixed state where it is not the clean snapshot (a rename), and the
buggy files. The builder runs the tests on them and keeps a variant when the tests
catch it; the scripted expert undoes every site.

    for variant in sample_variants(project_files, "misspelled_name", 10, seed=0): ...
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import random
import re
import tokenize
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from training.tasks import mutate
from training.tasks.taskset import Mutation


@dataclass(frozen=True)
class Family:
    name: str
    tier: int
    description: str
    max_turns: int  # a rollout's turn budget: the expert needs fewer, a model a few more


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("misspelled_name", 1, "a name or attribute misspelled (the error names it)", 6),
        Family("missing_import", 1, "an import removed (NameError for what it brought)", 6),
        Family("wrong_literal", 1, "a literal changed; the failing assertion shows both values", 6),
        Family("wrong_keyword", 1, "a keyword argument misnamed (TypeError names it)", 6),
        Family("renamed_symbol", 2, "a rename finished at the definition and tests only", 6),
        Family("two_files", 2, "the same tier-1 slip in two files", 8),
        Family("mutation", 3, "one mutation operator (operator, bound, statement, ...)", 8),
    )
}
TIER1 = [name for name, f in FAMILIES.items() if f.tier == 1]


class FamilyError(ValueError):
    """A family list that names no family; the message lists the ones there are."""


def parse_families(spec: str) -> list[str]:
    """ "all" or a comma-separated list of family names, in FAMILIES order; FamilyError
    naming the unknown ones."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise FamilyError("no family named; give 'all' or some of: " + ", ".join(FAMILIES))
    if names == ["all"]:
        return list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise FamilyError(
            f"unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
            f"the families are: {', '.join(FAMILIES)} (or 'all')"
        )
    return [n for n in FAMILIES if n in names]


def family_help() -> str:
    """The families for --help, easiest first."""
    return "; ".join(f"{f.name} (tier {f.tier}): {f.description}" for f in FAMILIES.values())


@dataclass
class Variant:
    """One candidate task: sites to fix, the buggy files, the fixed state's files where
    it is not the clean snapshot, and a sentence the instruction opens with."""

    family: str
    sites: list[Mutation]
    buggy: dict[str, str]  # path -> buggy text (tests included where the bug needs them)
    fixed: dict[str, str] = field(default_factory=dict)  # path -> fixed text, if not clean
    intro: str = ""
    extra: dict[str, str] = field(default_factory=dict)  # kept in the task's metadata

    @property
    def key(self) -> tuple:
        return tuple((m.path, m.line, m.original, m.mutated, m.operator) for m in self.sites)


# --------------------------------------------------------------- spelling slips
def misspell(word: str, rng: random.Random) -> str:
    """The word with one typing slip: an inner letter dropped, two adjacent inner letters
    swapped, or one doubled (first and last letters kept, so it still reads as the word)."""
    inner = [i for i in range(1, len(word) - 1) if word[i].isalpha()]
    slips = []
    for i in inner:
        slips.append(word[:i] + word[i + 1 :])  # dropped
        if i + 1 < len(word) - 1 and word[i] != word[i + 1] and word[i + 1].isalpha():
            slips.append(word[:i] + word[i + 1] + word[i] + word[i + 2 :])  # swapped
        slips.append(word[:i] + word[i] + word[i:])  # doubled
    slips = [s for s in slips if s != word]
    return rng.choice(slips) if slips else word


def _rng(*parts: object) -> random.Random:
    return random.Random(zlib.crc32("/".join(map(str, parts)).encode()))


_BUILTINS = set(dir(builtins)) | set(keyword.kwlist) | {"self", "cls"}


def _identifiers(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
    return names


def _functions(tree: ast.Module) -> Iterable[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(dotted scope, function) for every def, methods included, outermost first."""

    def walk(body: list[ast.stmt], scope: list[str]):
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if stmt.name not in mutate._SKIP_FUNCTIONS:
                    yield ".".join([*scope, stmt.name]), stmt
                    yield from walk(stmt.body, [*scope, stmt.name])
            elif isinstance(stmt, ast.ClassDef):
                yield from walk(stmt.body, [*scope, stmt.name])

    yield from walk(tree.body, [])


def _body_nodes(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterable[ast.AST]:
    """The nodes of a function's body, without its docstring, nested defs' signatures
    kept; annotations, asserts and logging calls left out (a slip there proves nothing)."""
    body = fn.body[1:] if fn.body and mutate._is_docstring(fn.body[0]) else fn.body
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # visited as functions of their own
        if (
            isinstance(node, ast.Assert)
            or mutate._is_log_call(node)
            or isinstance(node, ast.JoinedStr)
        ):
            continue
        yield node
        for name, value in ast.iter_fields(node):
            if name in {"annotation", "returns", "type_comment"}:
                continue
            children = value if isinstance(value, list) else [value]
            stack.extend(c for c in reversed(children) if isinstance(c, ast.AST))


def _finish(t: mutate._Text, path: str, family: str, start: int, end: int, mutated: str,
            description: str, kind: str = "expr") -> Mutation | None:  # fmt: skip
    candidate = mutate._Candidate(family, start, end, mutated, description, kind)
    if not mutate._check_local(t.text, candidate):
        return None
    return mutate._finish(t, path, candidate)


def _module_bindings(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level: defs, classes, imports, assignments."""
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


# ---------------------------------------------------------------- tier 1: sites
def misspelled_name_sites(source: str, path: str) -> list[Mutation]:
    """A name a function reads (a parameter, a local, a module-level name; four letters
    or more), or an attribute of `self` the class assigns, misspelled to a name that
    exists nowhere in the module."""
    tree = ast.parse(source)
    t = mutate._Text(source)
    taken = _identifiers(tree) | _BUILTINS
    module_names = _module_bindings(tree)
    own_attrs = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    }
    found: list[Mutation] = []
    for scope, fn in _functions(tree):
        bound = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        bound |= {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        for node in _body_nodes(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                name = node.id
                if len(name) < 4 or name in _BUILTINS or name.startswith("__"):
                    continue
                if name not in bound and name not in module_names:
                    continue
                start, end = t.span(node)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and node.attr in own_attrs
                and len(node.attr) >= 4
            ):
                name = node.attr
                start, end = t.span(node)
                start = end - len(name)
            else:
                continue
            slip = misspell(name, _rng(path, node.lineno, node.col_offset, name))
            if slip == name or slip in taken:
                continue
            what = "attribute" if isinstance(node, ast.Attribute) else "name"
            m = _finish(t, path, "misspelled_name", start, end, slip,
                        f"{what} `{name}` misspelled `{slip}` in `{scope}`")  # fmt: skip
            if m is not None:
                found.append(m)
    return found


def missing_import_sites(source: str, path: str) -> list[Mutation]:
    """A module-level import statement (not `from __future__`) removed whole."""
    tree = ast.parse(source)
    t = mutate._Text(source)
    found = []
    for stmt in tree.body:
        if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            continue
        start = t.starts[stmt.lineno - 1]
        end = t.starts[stmt.end_lineno] if stmt.end_lineno < len(t.starts) else len(source)
        text = source[start:end]
        if (
            not text.endswith("\n")
            or source[t.offset(stmt.lineno, 0) : t.offset(stmt.lineno, stmt.col_offset)].strip()
        ):
            continue  # the last line without a newline, or something before it on its line
        names = ", ".join(a.asname or a.name for a in stmt.names)
        m = _finish(t, path, "missing_import", start, end, "",
                    f"the import of {names} removed", kind="remove")  # fmt: skip
        if m is not None:
            found.append(m)
    return found


_STRING_SWAPS = {"-": "_", "_": "-", ",": ";", ";": ",", ":": "=", "=": ":", ".": ",",
                 " ": "  ", "/": "|", "|": "/", "%": "#", "#": "%"}  # fmt: skip


def _literal_slip(value: object, rng: random.Random) -> object | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value + rng.choice((-1, 1)) if abs(value) >= 2 else None
    if isinstance(value, float):
        return round(value * rng.choice((0.5, 2.0, 10.0)), 6) if value else None
    if isinstance(value, str):
        words = re.findall(r"[A-Za-z]{4,}", value)
        if words:
            word = rng.choice(words)
            return value.replace(word, misspell(word, rng), 1)
        if 0 < len(value) <= 3 and value in _STRING_SWAPS:
            return _STRING_SWAPS[value]
    return None


def wrong_literal_sites(source: str, path: str) -> list[Mutation]:
    """A number or string literal in a function changed (a word misspelled, a separator
    swapped, a number moved). Only those the failing assertion then shows are kept;
    see `literal_shown`."""
    tree = ast.parse(source)
    t = mutate._Text(source)
    found = []
    for scope, fn in _functions(tree):
        for node in _body_nodes(fn):
            if not isinstance(node, ast.Constant):
                continue
            slip = _literal_slip(node.value, _rng(path, node.lineno, node.col_offset))
            if slip is None or slip == node.value:
                continue
            text = source[slice(*t.span(node))]
            if isinstance(node.value, str) and (text[:1] not in "'\"" or "\\" in text):
                continue  # prefixed, or escapes: the repr would not be the source
            quote = text[0] if isinstance(node.value, str) else ""
            new = f"{quote}{slip}{quote}" if quote else repr(slip)
            if quote and quote in str(slip):
                continue
            m = _finish(t, path, "wrong_literal", *t.span(node), new,
                        f"literal {text} changed to {new} in `{scope}`")  # fmt: skip
            if m is not None:
                found.append(m)
    return found


_KEYWORD_ALIASES = {"key": "by", "reverse": "descending", "default": "fallback",
                    "start": "begin", "sep": "separator", "maxsplit": "max_split",
                    "ndigits": "digits", "strict": "exact", "encoding": "charset",
                    "initial": "init"}  # fmt: skip


def wrong_keyword_sites(source: str, path: str) -> list[Mutation]:
    """A keyword argument of a call given under a wrong name: a common alias
    (`ndigits` -> `digits`), an underscore added or dropped, or a typing slip."""
    tree = ast.parse(source)
    t = mutate._Text(source)
    found = []
    for scope, fn in _functions(tree):
        for node in _body_nodes(fn):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg is None or len(kw.arg) < 3:
                    continue
                if kw.arg in _KEYWORD_ALIASES:
                    wrong = _KEYWORD_ALIASES[kw.arg]
                elif "_" in kw.arg.strip("_"):
                    wrong = kw.arg.replace("_", "")
                else:
                    wrong = misspell(kw.arg, _rng(path, kw.lineno, kw.col_offset, kw.arg))
                if wrong == kw.arg:
                    continue
                start = t.offset(kw.lineno, kw.col_offset)
                if t.text[start : start + len(kw.arg)] != kw.arg:
                    continue
                m = _finish(t, path, "wrong_keyword", start, start + len(kw.arg), wrong,
                            f"keyword `{kw.arg}=` given as `{wrong}=` in `{scope}`")  # fmt: skip
                if m is not None:
                    found.append(m)
    return found


SITE_FINDERS = {
    "misspelled_name": misspelled_name_sites,
    "missing_import": missing_import_sites,
    "wrong_literal": wrong_literal_sites,
    "wrong_keyword": wrong_keyword_sites,
    "mutation": mutate.find_mutations,
}


def literal_shown(m: Mutation, output: str) -> bool:
    """True when the failing tests' E lines show both the right and the wrong value of
    a changed literal (what makes wrong_literal a tier-1 family)."""
    errors = "\n".join(line for line in output.splitlines() if line.startswith("E "))
    prefix = 0
    while prefix < min(len(m.original), len(m.mutated)) and m.original[prefix] == m.mutated[prefix]:
        prefix += 1
    for text in (m.original, m.mutated):
        literal = _literal_at(text, prefix)
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError):
            return False
        if isinstance(value, str):
            if not value.strip() or value not in errors:
                return False
        elif not re.search(rf"(?<![\w.]){re.escape(repr(value))}(?![\w.])", errors):
            return False
    return True


def _literal_at(text: str, offset: int) -> str:
    """The string or number token of `text` (a line or so of code) covering `offset`."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    reader = io.StringIO(text).readline
    try:
        for tok in tokenize.generate_tokens(reader):
            if tok.type in (tokenize.STRING, tokenize.NUMBER):
                lo = starts[tok.start[0] - 1] + tok.start[1]
                hi = starts[tok.end[0] - 1] + tok.end[1]
                if lo <= offset < hi:
                    return text[lo:hi]
    except (tokenize.TokenError, SyntaxError):
        pass
    return ""


# ------------------------------------------------------------ tier 2: several sites
_RENAMES = {"remove": "drop", "parse": "read", "compute": "calc", "count": "tally",
            "find": "locate", "make": "build", "build": "make", "split": "divide",
            "format": "render", "normalize": "clean", "expand": "unfold", "merge": "combine",
            "check": "verify", "get": "fetch", "total": "sum", "is": "looks", "has": "holds",
            "to": "as", "add": "put", "apply": "run", "load": "read", "first": "head",
            "last": "tail", "common": "shared", "running": "cumulative", "word": "token",
            "words": "tokens", "limit": "cap", "mean": "average", "median": "middle"}  # fmt: skip


def new_name(old: str, taken: set[str], rng: random.Random) -> str | None:
    """A name someone might rename `old` to: a word of it swapped for a synonym, else a
    prefix (functions) or suffix (classes); None when every choice is taken."""
    choices = []
    if old[:1].isupper():
        choices = [old + "Store", "Base" + old, old + "Impl"]
    else:
        words = old.split("_")
        for i, word in enumerate(words):
            if word in _RENAMES:
                choices.append("_".join([*words[:i], _RENAMES[word], *words[i + 1 :]]))
        choices += [f"compute_{old}", f"{old}_of"]
    for name in choices:
        if name not in taken and name.isidentifier() and not keyword.iskeyword(name):
            return name
    return None


def rename_tokens(source: str, old: str, new: str) -> str | None:
    """source with every NAME token `old` that is not an attribute (`x.old`) spelled
    `new`; None when the source does not tokenize."""
    previous = None
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    edits = []
    for tok in tokens:
        if (
            tok.type == tokenize.NAME
            and tok.string == old
            and not (
                previous is not None and previous.type == tokenize.OP and previous.string == "."
            )
        ):
            edits.append(starts[tok.start[0] - 1] + tok.start[1])
        if tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            previous = tok
    result, at = [], 0
    for offset in edits:
        result.append(source[at:offset])
        result.append(new)
        at = offset + len(old)
    result.append(source[at:])
    return "".join(result)


def renamed_symbol_variants(
    files: dict[str, str], source_files: list[str], test_files: list[str], seed: int
) -> list[Variant]:
    """For each top-level function or class used on two or more lines of the other
    source code: the rename done at its definition and in the tests, left undone at
    its call sites (each a site). Most files touched first."""
    trees: dict[str, ast.Module] = {}
    for path, text in files.items():
        try:
            trees[path] = ast.parse(text)
        except SyntaxError:
            continue
    taken = set().union(*(_identifiers(t) for t in trees.values())) | _BUILTINS
    variants = []
    for path in source_files:
        tree = trees.get(path)
        if tree is None:
            continue
        for stmt in tree.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            old = stmt.name
            if len(old) < 5 or old.startswith("__"):
                continue
            new = new_name(old, taken, _rng(path, old, seed))
            if new is None:
                continue
            variant = _rename_variant(files, source_files, test_files, path, stmt.lineno, old, new)
            if variant is not None:
                variants.append(variant)
    variants.sort(key=lambda v: (-len({m.path for m in v.sites}), -len(v.sites), v.key))
    return variants


def _rename_variant(files, source_files, test_files, path, def_line, old, new) -> Variant | None:
    fixed: dict[str, str] = {}
    for name in [*source_files, *test_files]:
        text = files.get(name)
        if text is None or old not in text:
            continue
        renamed = rename_tokens(text, old, new)
        if renamed is None:
            return None
        if renamed != text:
            fixed[name] = renamed
    if path not in fixed:
        return None
    buggy = dict(fixed)
    sites: list[Mutation] = []
    for name in source_files:
        if name not in fixed:
            continue
        clean_lines = files[name].splitlines(keepends=True)
        fixed_lines = fixed[name].splitlines(keepends=True)
        if len(clean_lines) != len(fixed_lines):
            return None
        keep = []
        for number, (before, after) in enumerate(zip(clean_lines, fixed_lines, strict=True), 1):
            if before != after and not (name == path and number == def_line):
                sites.append(Mutation(
                    operator="renamed_symbol", path=name, line=number,
                    original=after.rstrip("\r\n"), mutated=before.rstrip("\r\n"),
                    description=f"`{old}` not yet renamed `{new}`",
                ))  # fmt: skip
                keep.append(before)
            else:
                keep.append(after)
        buggy[name] = "".join(keep)
    if len(sites) < 2:
        return None
    return Variant(
        family="renamed_symbol",
        sites=sites,
        buggy=buggy,
        fixed=fixed,
        intro=f"I renamed `{old}` to `{new}` in `{path}` and in the tests, but the test "
        "suite fails now. Please finish the rename.",
        extra={"old_name": old, "new_name": new},
    )


def single_site_variants(
    family: str, files: dict[str, str], source_files: list[str], n: int, seed: int
) -> list[Variant]:
    """n single-site variants of a tier-1 family or of the mutation operators, spread
    over operators, files and functions (mutate.sample_mutations)."""
    sites = sites_of(SITE_FINDERS[family], files, source_files)
    picked = mutate.sample_mutations(sites, n, seed)
    return [v for m in picked if (v := _single(family, files, m)) is not None]


def sites_of(finder, files: dict[str, str], source_files: list[str]) -> list[Mutation]:
    sites: list[Mutation] = []
    for path in source_files:
        text = files.get(path)
        if text is None:
            continue
        try:
            sites += finder(text, path)
        except (mutate.MutationError, SyntaxError, ValueError):
            continue  # a file our parser cannot read gives no sites
    return sites


def _single(family: str, files: dict[str, str], m: Mutation) -> Variant | None:
    try:
        text = mutate.apply_mutation(files[m.path], m)
    except mutate.MutationError:
        return None
    return Variant(family=family, sites=[m], buggy={m.path: text})


def two_file_variants(
    files: dict[str, str], source_files: list[str], n: int, seed: int
) -> list[Variant]:
    """n pairs of tier-1 sites of the same kind in two different files."""
    rng = random.Random(seed)
    pairs = []
    for family in TIER1:
        by_file: dict[str, list[Mutation]] = {}
        for m in sites_of(SITE_FINDERS[family], files, source_files):
            by_file.setdefault(m.path, []).append(m)
        paths = sorted(by_file)
        for i, a in enumerate(paths):
            for b in paths[i + 1 :]:
                pairs.append((family, rng.choice(by_file[a]), rng.choice(by_file[b])))
    rng.shuffle(pairs)
    out = []
    used: set[str] = set()
    # families in turn, so a set of pairs is not all of one kind
    by_family: dict[str, list] = {}
    for pair in pairs:
        by_family.setdefault(pair[0], []).append(pair)
    while len(out) < n and any(by_family.values()):
        for family in TIER1:
            group = by_family.get(family) or []
            while group:
                _, a, b = group.pop()
                key = f"{a.path}:{a.line}/{b.path}:{b.line}"
                if key in used:
                    continue
                used.add(key)
                try:
                    buggy = {a.path: mutate.apply_mutation(files[a.path], a),
                             b.path: mutate.apply_mutation(files[b.path], b)}  # fmt: skip
                except mutate.MutationError:
                    continue
                out.append(Variant(family="two_files", sites=[a, b], buggy=buggy))
                break
            if len(out) >= n:
                break
    return out


def fixed_files(files: dict[str, str], sites: list[Mutation]) -> dict[str, str]:
    """A task's files (path -> buggy text) with every site undone: the state its tests
    are judged against (the clean snapshot's text, or a finished rename)."""
    fixed = dict(files)
    for m in sorted(sites, key=lambda m: (m.path, -m.line)):
        fixed[m.path] = mutate.revert_text(fixed[m.path], m)
    return fixed


def variants(
    family: str, files: dict[str, str], source_files: list[str], test_files: list[str],
    n: int, seed: int,
) -> list[Variant]:  # fmt: skip
    """Up to n candidate variants of `family` from a project's files (path -> text)."""
    if family == "renamed_symbol":
        return renamed_symbol_variants(files, source_files, test_files, seed)[:n]
    if family == "two_files":
        return two_file_variants(files, source_files, n, seed)
    return single_site_variants(family, files, source_files, n, seed)
