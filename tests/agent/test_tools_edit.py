"""edit_file, read_lints, todo_write and the rendering of results."""

from __future__ import annotations

import pytest

from agent.render import MAX_RESULT_CHARS, cap_middle, clean_terminal_text, render_result
from agent.tools.edit import MAX_EDIT_BYTES
from tests.agent.tool_helpers import fails, ok
from tests.conftest import call_tool

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


# ------------------------------------------------------------------ edit_file
async def test_edit_file_replaces_exact_text_and_shows_diff_and_lints(repo, ctx):
    content = await ok(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="def add(a, b):\n    return a - b",
        new_string="def add(a, b):\n    return a + b",
    )
    assert content == (
        "Edited src/calc.py (replaced 1 occurrence):\n"
        "@@ -1,5 +1,5 @@\n"
        " def add(a, b):\n"
        "-    return a - b\n"
        "+    return a + b\n"
        " \n"
        " \n"
        " def sub(a, b):\n"
        "\n"
        "Lints: the edit introduced no problems."
    )
    assert (repo / "src" / "calc.py").read_text() == CALC.replace("a - b", "a + b", 1)
    assert ctx.workspace.checkpoints == {"src/calc.py": CALC.encode()}


async def test_edit_file_diff_line_numbers_far_down(repo, ctx):
    (repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    content = await ok(
        ctx, "edit_file", path="long.txt", old_string="line 50\n", new_string="L50\n"
    )
    assert "@@ -47,7 +47,7 @@" in content
    assert "-line 50\n+L50" in content


async def test_edit_file_absent_old_string(repo, ctx):
    content = await fails(
        ctx, "edit_file", path="src/calc.py", old_string="import numpy", new_string="x"
    )
    assert content == (
        "Error: old_string was not found in src/calc.py. Read the file again; it may differ "
        "from what you expect."
    )
    assert (repo / "src" / "calc.py").read_text() == CALC
    assert ctx.workspace.checkpoints == {}


async def test_edit_file_whitespace_mismatch_shows_nearest_candidate(repo, ctx):
    content = await fails(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="def sub(a, b):\n  return a - b",  # two spaces instead of four
        new_string="def sub(a, b):\n  return b - a",
    )
    assert content == (
        "Error: old_string was not found in src/calc.py exactly, but lines 5-6 match it except "
        "for whitespace (indentation, tabs or trailing spaces). The file has:\n"
        "     5\tdef sub(a, b):\n"
        "     6\t    return a - b\n"
        "Copy the text exactly as it is in the file (without the line numbers)."
    )
    assert (repo / "src" / "calc.py").read_text() == CALC


async def test_edit_file_tab_mismatch(repo, ctx):
    content = await fails(
        ctx, "edit_file", path="src/calc.py", old_string="\treturn a - b", new_string="x"
    )
    assert "lines 2-2 match it except for whitespace" in content


async def test_edit_file_similar_text_shows_most_similar_candidate(repo, ctx):
    content = await fails(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="def sub(x, y):\n    return x - y",
        new_string="def sub(x, y):\n    return y - x",
    )
    assert content.startswith(
        "Error: old_string was not found in src/calc.py. The most similar text ("
    )
    assert (
        "% alike) is at lines 5-6:\n     5\tdef sub(a, b):\n     6\t    return a - b\n" in content
    )
    assert content.endswith("Read the file again and copy the text exactly.")
    assert (repo / "src" / "calc.py").read_text() == CALC


async def test_edit_file_ambiguous_match_reports_count_and_lines(repo, ctx):
    content = await fails(
        ctx, "edit_file", path="src/calc.py", old_string="return a - b", new_string="return 0"
    )
    assert content == (
        "Error: old_string occurs 2 times in src/calc.py (at lines 2, 6); include more "
        "surrounding lines to pick one, or set replace_all to true to change every occurrence"
    )
    assert (repo / "src" / "calc.py").read_text() == CALC


async def test_edit_file_replace_all(repo, ctx):
    content = await ok(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="a - b",
        new_string="b - a",
        replace_all="true",
    )
    assert content.startswith("Edited src/calc.py (replaced 2 occurrences):\n")
    assert (repo / "src" / "calc.py").read_text() == CALC.replace("a - b", "b - a")


async def test_edit_file_replace_all_with_single_occurrence(repo, ctx):
    content = await ok(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="def add",
        new_string="def plus",
        replace_all="true",
    )
    assert content.startswith("Edited src/calc.py (replaced 1 occurrence):\n")


async def test_edit_file_keeps_crlf_line_endings(repo, ctx):
    (repo / "win.py").write_bytes(b"x = 1\r\ny = 2\r\nz = 3\r\n")
    content = await ok(
        ctx, "edit_file", path="win.py", old_string="x = 1\ny = 2", new_string="x = 10\ny = 20"
    )
    assert (repo / "win.py").read_bytes() == b"x = 10\r\ny = 20\r\nz = 3\r\n"
    assert "\r" not in content
    assert "-x = 1\n-y = 2\n+x = 10\n+y = 20" in content


async def test_edit_file_same_old_and_new(repo, ctx):
    content = await fails(
        ctx, "edit_file", path="src/calc.py", old_string="def add", new_string="def add"
    )
    assert content == "Error: old_string and new_string are the same; there is nothing to change"


async def test_edit_file_empty_old_string(repo, ctx):
    content = await fails(ctx, "edit_file", path="src/calc.py", old_string="", new_string="x = 1")
    assert (
        content
        == "Error: old_string is empty; use write_file to create a file or replace all of it"
    )
    assert (repo / "src" / "calc.py").read_text() == CALC


async def test_edit_file_deleting_text(repo, ctx):
    await ok(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="\n\ndef sub(a, b):\n    return a - b\n",
        new_string="",
    )
    assert (repo / "src" / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


async def test_edit_file_non_utf8_refused(repo, ctx):
    data = "naïve = 1\n".encode("latin-1")
    (repo / "latin1.py").write_bytes(data)
    content = await fails(ctx, "edit_file", path="latin1.py", old_string="= 1", new_string="= 2")
    assert content == "Error: latin1.py is not valid UTF-8; edit_file only edits UTF-8 text"
    assert (repo / "latin1.py").read_bytes() == data


async def test_edit_file_binary_refused(repo, ctx):
    data = b"abc\x00def"
    (repo / "blob.bin").write_bytes(data)
    content = await fails(ctx, "edit_file", path="blob.bin", old_string="abc", new_string="xyz")
    assert content == "Error: blob.bin is a binary file; edit_file only edits text"
    assert (repo / "blob.bin").read_bytes() == data


async def test_edit_file_too_large_refused(repo, ctx):
    with open(repo / "huge.txt", "wb") as handle:
        handle.write(b"needle\n")
        handle.truncate(MAX_EDIT_BYTES + 1)
    content = await fails(ctx, "edit_file", path="huge.txt", old_string="needle", new_string="pin")
    assert content == "Error: huge.txt is larger than 8 MiB; edit_file does not edit it"


async def test_edit_file_missing_file_and_directory(ctx):
    assert await fails(ctx, "edit_file", path="nope.py", old_string="a", new_string="b") == (
        "Error: nope.py does not exist"
    )
    assert "is a directory" in await fails(
        ctx, "edit_file", path="src", old_string="a", new_string="b"
    )


async def test_edit_file_missing_parameter(ctx):
    content = await fails(ctx, "edit_file", path="src/calc.py", old_string="a")
    assert "<new_string>" in content


async def test_edit_file_lints_an_unused_import(repo, ctx):
    content = await ok(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="def add(a, b):",
        new_string="import os\n\n\ndef add(a, b):",
    )
    assert content.endswith("\n\nLints (1 new):\nsrc/calc.py:1:8: F401 `os` imported but unused")


async def test_edit_file_reports_only_the_problems_it_introduced(repo, ctx):
    (repo / "src" / "calc.py").write_text("import os\n\n\n" + CALC)  # an old problem
    content = await ok(
        ctx, "edit_file", path="src/calc.py", old_string="    return a - b\n\n\ndef sub",
        new_string="    return a + b\n\n\ndef sub",
    )  # fmt: skip
    assert content.endswith(
        "\n\nLints: the edit introduced no problems (1 from before remain; read_lints shows them)."
    )
    content = await ok(
        ctx, "edit_file", path="src/calc.py", old_string="import os\n",
        new_string="import os\nimport sys\n",
    )  # fmt: skip
    assert content.endswith("\n\nLints (1 new):\nsrc/calc.py:2:8: F401 `sys` imported but unused")


async def test_edit_file_lints_a_syntax_error(repo, ctx):
    content = await ok(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="def add(a, b):",
        new_string="def add(a, b:",
    )
    lints = content.split("\n\nLints (", 1)[1]
    assert lints.startswith(("1 new):", "2 new):", "3 new):"))
    assert "src/calc.py:1:" in lints
    assert "invalid-syntax" in lints or "syntax-error" in lints


async def test_edit_file_on_a_non_python_file_has_no_lints(repo, ctx):
    content = await ok(ctx, "edit_file", path="README.md", old_string="demo", new_string="calc")
    assert content == "Edited README.md (replaced 1 occurrence):\n@@ -1 +1 @@\n-# demo\n+# calc"


async def test_edit_file_line_numbers_with_form_feeds(repo, ctx):
    (repo / "ff.py").write_text("x = 1\n\x0c\ny = 2\ny = 2\n")
    content = await fails(ctx, "edit_file", path="ff.py", old_string="y = 2", new_string="y = 3")
    assert "(at lines 3, 4)" in content
    content = await fails(
        ctx, "edit_file", path="ff.py", old_string="y  =  2\ny = 2", new_string="z"
    )
    assert "lines 3-4 match it except for whitespace" in content


async def test_edits_apply_in_order(repo, ctx):
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def add", new_string="def plus")
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def plus", new_string="def total")
    assert (repo / "src" / "calc.py").read_text().startswith("def total(a, b):")
    assert ctx.workspace.checkpoints == {"src/calc.py": CALC.encode()}


# ----------------------------------------------------------------- read_lints
@pytest.fixture
def lint_repo(repo):
    (repo / "pkg").mkdir()
    (repo / "pkg" / "a.py").write_text("import os\nimport sys\n")
    (repo / "pkg" / "b.py").write_text("import json\n")
    (repo / "pkg" / "data.txt").write_text("not python\n")
    (repo / "build" / "gen.py").write_text("import re\n")  # git-ignored
    return repo


async def test_read_lints_with_paths(lint_repo, ctx):
    content = await ok(ctx, "read_lints", paths="pkg/b.py\npkg/a.py")
    assert content == (
        "3 problems in 2 files:\n"
        "pkg/a.py:1:8: F401 `os` imported but unused\n"
        "pkg/a.py:2:8: F401 `sys` imported but unused\n"
        "pkg/b.py:1:8: F401 `json` imported but unused"
    )


async def test_read_lints_directory(lint_repo, ctx):
    content = await ok(ctx, "read_lints", paths="pkg")
    assert content.splitlines()[0] == "3 problems in 2 files:"
    content = await ok(ctx, "read_lints", paths='["pkg/b.py"]')
    assert content == "1 problem in 1 file:\npkg/b.py:1:8: F401 `json` imported but unused"


async def test_read_lints_whole_workspace_skips_ignored_files(lint_repo, ctx):
    content = await ok(ctx, "read_lints")
    assert content.splitlines()[0] == "3 problems in 5 files:"
    assert "build/" not in content


async def test_read_lints_without_paths_lints_the_changed_files(lint_repo, ctx):
    await ok(ctx, "write_file", path="pkg/c.py", content="import abc\n")
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def add", new_string="def plus")
    content = await ok(ctx, "read_lints")
    assert content == "1 problem in 2 files:\npkg/c.py:1:8: F401 `abc` imported but unused"


async def test_read_lints_clean_file(lint_repo, ctx):
    assert await ok(ctx, "read_lints", paths="src/calc.py") == "No lint problems in 1 file."
    assert await ok(ctx, "read_lints", paths="src") == "No lint problems in 2 files."


async def test_read_lints_nothing_lintable(lint_repo, ctx):
    assert await ok(ctx, "read_lints", paths="pkg/data.txt") == "No lintable files there."


async def test_read_lints_errors(lint_repo, ctx):
    assert await fails(ctx, "read_lints", paths="nope.py") == "Error: nope.py does not exist"
    assert "excluded" in await fails(ctx, "read_lints", paths="build/gen.py")
    assert "outside the workspace" in await fails(ctx, "read_lints", paths="../x.py")


async def test_read_lints_is_stable(lint_repo, ctx):
    first = await ok(ctx, "read_lints", paths="pkg/a.py\npkg/b.py")
    second = await ok(ctx, "read_lints", paths="pkg/b.py\npkg/a.py\npkg")
    assert first == second


# ----------------------------------------------------------------- todo_write
async def test_todo_write_checklist_lines(ctx):
    content = await ok(
        ctx, "todo_write", todos="- [x] read the code\n- [~] fix add\n- [ ] run tests\n"
    )
    assert content == (
        "Todo list (1 of 3 done):\n[x] 1. read the code\n[~] 2. fix add\n[ ] 3. run tests"
    )
    assert [(t.content, t.status) for t in ctx.todos] == [
        ("read the code", "completed"),
        ("fix add", "in_progress"),
        ("run tests", "pending"),
    ]


async def test_todo_write_plain_lines_and_other_marks(ctx):
    content = await ok(ctx, "todo_write", todos="* [X] one\n[>] two\nthree\n- four")
    assert content == "Todo list (1 of 4 done):\n[x] 1. one\n[~] 2. two\n[ ] 3. three\n[ ] 4. four"


async def test_todo_write_json(ctx):
    content = await ok(
        ctx,
        "todo_write",
        todos='[{"content": "a", "status": "completed"}, {"content": "b", "status": "in_progress"}, {"content": "c"}]',
    )
    assert content == "Todo list (1 of 3 done):\n[x] 1. a\n[~] 2. b\n[ ] 3. c"


async def test_todo_write_replaces_the_list(ctx):
    await ok(ctx, "todo_write", todos="- [ ] a\n- [ ] b")
    await ok(ctx, "todo_write", todos="- [x] c")
    assert [t.content for t in ctx.todos] == ["c"]
    assert await ok(ctx, "todo_write", todos="") == "Todo list cleared."
    assert ctx.todos == []


@pytest.mark.parametrize(
    ("todos", "says"),
    [
        ('[{"content": "a", "status": "done"}]', "status"),
        ('[{"content": "a"', "JSON"),
        ('[{"text": "a"}]', "unknown field `text`"),
    ],
)
async def test_todo_write_bad_input(ctx, todos, says):
    content = await fails(ctx, "todo_write", todos=todos)
    assert says in content


async def test_todo_write_missing_parameter(ctx):
    assert "<todos>" in await fails(ctx, "todo_write")


# --------------------------------------------------------------------- render
def test_cap_middle_keeps_short_text():
    assert cap_middle("abc", 3) == "abc"


def test_cap_middle_keeps_start_and_end():
    text = "".join(chr(ord("a") + i % 26) for i in range(100))
    capped = cap_middle(text, 20)
    assert capped == f"{text[:10]}\n[... 80 characters omitted ...]\n{text[-10:]}"
    assert cap_middle("x" * 101, 10, unit="bytes") == "xxxxx\n[... 91 bytes omitted ...]\nxxxxx"


def test_clean_terminal_text_strips_ansi():
    data = b"\x1b[1;31mred\x1b[0m \x1b[2Kplain \x1b]0;title\x07text \x1b(B\x1b[?25lok\n"
    assert clean_terminal_text(data) == "red plain text ok\n"


def test_clean_terminal_text_collapses_carriage_return_progress():
    data = b"download  10%\rdownload  50%\rdownload 100%\ndone\r\nnext\rlast\rfinal\nend\r"
    assert clean_terminal_text(data) == "download 100%\ndone\nfinal\nend"


def test_clean_terminal_text_replaces_invalid_utf8():
    assert clean_terminal_text(b"caf\xe9 \xe2\x9c\x93") == "caf\ufffd \u2713"


def test_render_result():
    assert render_result("done\n\n", False) == "done"
    assert render_result("bad path", True) == "Error: bad path"
    assert render_result("", False) == "(no output)"
    assert render_result("  \n", True) == "Error: (no output)"
    long = "x" * (MAX_RESULT_CHARS * 2)
    capped = render_result(long, False)
    assert len(capped) < MAX_RESULT_CHARS + 100
    assert f"[... {MAX_RESULT_CHARS} characters omitted ...]" in capped


async def test_call_errors_are_rendered_with_the_prefix(ctx):
    is_error, content = await call_tool(ctx, "read_file", path="src/calc.py", bogus="1")
    assert is_error
    assert content.startswith("Error: unknown parameter <bogus> for read_file")


async def test_numbers_and_booleans_may_be_padded_but_text_is_verbatim(ctx):
    is_error, content = await call_tool(
        ctx, "read_file", path="src/calc.py", start_line=" 2 ", end_line="2\n"
    )
    assert not is_error, content
    assert "     2\t    return a - b" in content
    is_error, content = await call_tool(
        ctx,
        "edit_file",
        path="src/calc.py",
        old_string="    return a - b",
        new_string="    return a + b",
        replace_all=" true ",
    )
    assert not is_error, content
    assert (ctx.workspace.root / "src/calc.py").read_text().count("return a + b") == 2
