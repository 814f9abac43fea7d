"""file_search, grep and codebase_search."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agent.tools.find import fuzzy_rank
from agent.workspace import Workspace
from tests.agent.tool_helpers import fails, ok
from tests.conftest import make_context


# ---------------------------------------------------------------- file_search
@pytest.fixture
def search_repo(repo):
    for rel in [
        "src/calculator/engine.py",
        "src/calculator/__init__.py",
        "docs/calculus.md",
        "tests/test_parser.py",
        "tests/conftest.py",
        "scripts/calc_tests_report.sh",
        "web/CalcTestView.tsx",
    ]:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x\n")
    return repo


async def test_file_search_words_in_any_order(search_repo, ctx):
    content = await ok(ctx, "file_search", query="calc test")
    assert content.splitlines()[0] == "tests/test_calc.py"
    assert set(content.splitlines()) >= {"tests/test_calc.py", "scripts/calc_tests_report.sh"}
    assert "src/calc.py" not in content.splitlines()  # no 'test' in it


async def test_file_search_prefers_file_names(search_repo, ctx):
    assert (await ok(ctx, "file_search", query="calc.py")).splitlines()[0] == "src/calc.py"
    assert (await ok(ctx, "file_search", query="engine")).splitlines() == [
        "src/calculator/engine.py"
    ]
    assert (await ok(ctx, "file_search", query="ctv")).splitlines()[0] == "web/CalcTestView.tsx"


async def test_file_search_limit(search_repo, ctx):
    content = await ok(ctx, "file_search", query="c", limit=2)
    assert len(content.splitlines()) == 2
    assert "<limit>" in await fails(ctx, "file_search", query="c", limit=0)


async def test_file_search_no_match(search_repo, ctx):
    assert await ok(ctx, "file_search", query="kubernetes") == "No file paths match 'kubernetes'."


async def test_file_search_empty_query(ctx):
    assert await fails(ctx, "file_search", query="   ") == "Error: query is empty"


async def test_file_search_is_deterministic(search_repo, ctx):
    first = await ok(ctx, "file_search", query="t")
    assert first == await ok(ctx, "file_search", query="t")


def test_fuzzy_rank_ties_break_by_path():
    assert fuzzy_rank("a", ["b/a", "a/a"], 5) == ["a/a", "b/a"]
    assert fuzzy_rank("", ["a"], 5) == []
    assert fuzzy_rank("zz", ["a/b"], 5) == []


# ----------------------------------------------------------------------- grep
async def test_grep_matches_in_path_order(ctx):
    content = await ok(ctx, "grep", pattern=r"def \w+")
    assert content.splitlines() == [
        "src/calc.py:1:def add(a, b):",
        "src/calc.py:5:def sub(a, b):",
        "tests/test_calc.py:4:def test_add():",
        "tests/test_calc.py:8:def test_sub():",
    ]


class _Unsaved(Workspace):
    """A workspace with editor buffers, as the language server's has."""

    buffers: dict[str, bytes]

    def unsaved(self) -> dict[str, bytes]:
        return dict(self.buffers)


async def test_grep_searches_unsaved_text_in_its_place(repo):
    (repo / "src" / "zoo.py").write_text("def zebra(): pass\n")
    ctx = make_context(repo)
    ctx.workspace.__class__ = _Unsaved
    ctx.workspace.buffers = {
        "src/calc.py": b"def add(a, b):\n    return a + b\n\ndef zebra_too(): pass\n",
        "src/new.py": b"def fresh(): pass\n",  # not saved yet at all
        ".env": b"def secret(): pass\n",  # secret: never shown
    }
    content = await ok(ctx, "grep", pattern=r"def \w+")
    assert content.splitlines() == [
        "src/calc.py:1:def add(a, b):",
        "src/calc.py:4:def zebra_too(): pass",
        "src/new.py:1:def fresh(): pass",
        "src/zoo.py:1:def zebra(): pass",
        "tests/test_calc.py:4:def test_add():",
        "tests/test_calc.py:8:def test_sub():",
    ]
    # The path, glob and case rules apply to unsaved text as to files.
    assert await ok(ctx, "grep", pattern="ZEBRA", path="src/calc.py", ignore_case="true") == (
        "src/calc.py:4:def zebra_too(): pass"
    )
    assert await ok(ctx, "grep", pattern="def", glob="new.py") == "src/new.py:1:def fresh(): pass"
    assert (
        await ok(ctx, "grep", pattern="zebra", path="tests") == "No matches for 'zebra' in tests."
    )
    capped = await ok(ctx, "grep", pattern="def", max_results="2")
    assert capped.splitlines()[:2] == [
        "src/calc.py:1:def add(a, b):",
        "src/calc.py:4:def zebra_too(): pass",
    ]
    assert "4 more matching lines" in capped


async def test_grep_glob(ctx, repo):
    (repo / "notes.txt").write_text("def not_python\n")
    content = await ok(ctx, "grep", pattern="def", glob="*.txt")
    assert content == "notes.txt:1:def not_python"
    content = await ok(ctx, "grep", pattern="def", glob="test_*.py")
    assert content.splitlines() == [
        "tests/test_calc.py:4:def test_add():",
        "tests/test_calc.py:8:def test_sub():",
    ]


async def test_grep_ignore_case(ctx):
    assert await ok(ctx, "grep", pattern="DEF ADD") == "No matches for 'DEF ADD'."
    assert (
        await ok(ctx, "grep", pattern="DEF ADD", ignore_case="true")
        == "src/calc.py:1:def add(a, b):"
    )


async def test_grep_max_results_cap(repo, ctx):
    (repo / "many.txt").write_text("".join(f"hit {i}\n" for i in range(1, 151)))
    content = await ok(ctx, "grep", pattern="hit", path="many.txt")
    lines = content.splitlines()
    assert len(lines) == 101
    assert lines[99] == "many.txt:100:hit 100"
    assert lines[100] == (
        "[... 50 more matching lines not shown; narrow the pattern, path or glob, or raise max_results]"
    )
    content = await ok(ctx, "grep", pattern="hit", path="many.txt", max_results=3)
    assert content.splitlines() == [
        "many.txt:1:hit 1",
        "many.txt:2:hit 2",
        "many.txt:3:hit 3",
        "[... 147 more matching lines not shown; narrow the pattern, path or glob, or raise max_results]",
    ]
    assert "<max_results>" in await fails(ctx, "grep", pattern="hit", max_results=5000)


async def test_grep_invalid_regex_is_a_clear_error(ctx):
    content = await fails(ctx, "grep", pattern="(unclosed")
    assert content.startswith("Error: ripgrep rejected the search: ")
    assert "regex parse error" in content
    assert "unclosed group" in content
    assert "No such file" not in content


async def test_grep_no_matches(ctx):
    assert await ok(ctx, "grep", pattern="zebra") == "No matches for 'zebra'."
    assert await ok(ctx, "grep", pattern="zebra", path="src") == "No matches for 'zebra' in src."


async def test_grep_path_restriction(ctx):
    content = await ok(ctx, "grep", pattern="return", path="src")
    assert content.splitlines() == [
        "src/calc.py:2:    return a - b",
        "src/calc.py:6:    return a - b",
    ]
    assert await ok(ctx, "grep", pattern="add", path="tests/test_calc.py") == (
        "tests/test_calc.py:1:from src.calc import add, sub\n"
        "tests/test_calc.py:4:def test_add():\n"
        "tests/test_calc.py:5:    assert add(2, 3) == 5"
    )
    assert await fails(ctx, "grep", pattern="x", path="nope") == "Error: nope does not exist"


async def test_grep_skips_ignored_and_secret_files(repo, ctx):
    (repo / "build" / "gen.py").write_text("hunter2\n")
    (repo / ".tachyignore").write_text("vault/\n")
    (repo / "vault").mkdir()
    (repo / "vault" / "pw.txt").write_text("hunter2\n")
    (repo / "sub").mkdir()
    (repo / "sub" / ".gitignore").write_text("*.dat\n")
    (repo / "sub" / "x.dat").write_text("hunter2\n")
    (repo / "sub" / ".tachyignore").write_text("hidden.txt\n")
    (repo / "sub" / "hidden.txt").write_text("hunter2\n")
    (repo / "id_ed25519").write_text("hunter2\n")
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("hunter2\n")
    (repo / "ok.txt").write_text("hunter2 is fine here\n")
    assert await ok(ctx, "grep", pattern="hunter2") == "ok.txt:1:hunter2 is fine here"


async def test_grep_ignores_ignore_files_above_the_workspace(tmp_path):
    # The workspace's rules decide, as for every other tool: a .gitignore in a
    # directory above the root must not hide files from grep alone.
    (tmp_path / ".gitignore").write_text("*.py\n")
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("needle\n")
    ctx = make_context(root)
    await ok(ctx, "read_file", path="src/a.py")
    assert await ok(ctx, "grep", pattern="needle") == "src/a.py:1:needle"


async def test_grep_ignores_dot_ignore_files(repo, ctx):
    (repo / ".ignore").write_text("README.md\n")
    (repo / ".rgignore").write_text("src/\n")
    content = await ok(ctx, "grep", pattern="demo|def add")
    assert content.splitlines() == ["README.md:1:# demo", "src/calc.py:1:def add(a, b):"]


async def test_grep_file_names_with_colons(repo, ctx):
    (repo / "odd:name.txt").write_text("a:b:needle\n")
    assert await ok(ctx, "grep", pattern="needle") == "odd:name.txt:1:a:b:needle"


async def test_grep_cuts_long_lines(repo, ctx):
    (repo / "wide.txt").write_text("needle" + "x" * 1000 + "\n")
    content = await ok(ctx, "grep", pattern="needle")
    assert content == "wide.txt:1:needle" + "x" * 294 + " [...]"


async def test_grep_sees_a_new_tachyignore(repo, ctx):
    assert "README.md" in await ok(ctx, "grep", pattern="demo")
    (repo / ".tachyignore").write_text("README.md\n")  # the user adds a rule
    assert await ok(ctx, "grep", pattern="demo") == "No matches for 'demo'."


async def test_grep_keeps_hiding_what_a_loosened_gitignore_hid(repo, ctx):
    """The agent may edit .gitignore, but rules only tighten during a run: dropping a
    rule (or adding a negation) does not uncover what it hid."""
    assert "debug.log" not in await ok(ctx, "grep", pattern="log line")
    await ok(ctx, "write_file", path=".gitignore", content="build/\n")
    await ok(ctx, "write_file", path="sub/.gitignore", content="!debug.log\n")
    (repo / "sub" / "debug.log").write_text("log line\n")
    assert await ok(ctx, "grep", pattern="log line") == "No matches for 'log line'."
    await fails(ctx, "read_file", path="debug.log")
    await fails(ctx, "read_file", path="sub/debug.log")


# ------------------------------------------------------------ codebase_search
async def test_codebase_search_without_index(ctx):
    content = await fails(ctx, "codebase_search", query="where is addition")
    assert content == (
        "Error: the semantic index is not available in this session; use grep to "
        "search for exact text or file_search to find files by name"
    )


@dataclass
class Hit:
    path: str
    start_line: int
    end_line: int
    snippet: str
    symbol: str | None = None


class FakeIndex:
    def __init__(self, hits):
        self.hits = hits
        self.calls = []

    def search(self, query, *, paths, limit):
        self.calls.append((query, paths, limit))
        return self.hits[:limit]


async def test_codebase_search_formats_hits(ctx):
    ctx.index = FakeIndex(
        [
            Hit("src/calc.py", 1, 2, "def add(a, b):\n    return a - b\n\n", "add"),
            Hit("tests/test_calc.py", 4, 5, "def test_add():\n    assert add(2, 3) == 5"),
        ]
    )
    content = await ok(ctx, "codebase_search", query="addition")
    assert content == (
        "src/calc.py:1-2 add\n"
        "def add(a, b):\n"
        "    return a - b\n"
        "\n"
        "tests/test_calc.py:4-5\n"
        "def test_add():\n"
        "    assert add(2, 3) == 5"
    )
    assert ctx.index.calls == [("addition", None, 10)]


async def test_codebase_search_passes_paths_and_limit(ctx):
    ctx.index = FakeIndex([Hit("src/calc.py", 1, 2, "def add(a, b):", "add")] * 3)
    content = await ok(ctx, "codebase_search", query="add", paths="src\ntests/*.py", limit=1)
    assert content == "src/calc.py:1-2 add\ndef add(a, b):"
    assert ctx.index.calls == [("add", ["src", "tests/*.py"], 1)]
    assert "<limit>" in await fails(ctx, "codebase_search", query="add", limit=99)


async def test_codebase_search_no_hits(ctx):
    ctx.index = FakeIndex([])
    assert await ok(ctx, "codebase_search", query="quantum") == "No code found for 'quantum'."


async def test_codebase_search_never_shows_hidden_files(ctx):
    ctx.index = FakeIndex(
        [
            Hit(".env", 1, 1, "API_KEY=hunter2"),
            Hit("build/out.txt", 1, 1, "generated"),
            Hit("../outside.py", 1, 1, "outside"),
            Hit("src/calc.py", 1, 2, "def add(a, b):", "add"),
        ]
    )
    assert await ok(ctx, "codebase_search", query="key") == "src/calc.py:1-2 add\ndef add(a, b):"
    ctx.index = FakeIndex([Hit(".env", 1, 1, "API_KEY=hunter2")])
    assert await ok(ctx, "codebase_search", query="key") == "No code found for 'key'."
