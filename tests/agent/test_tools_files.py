"""read_file, list_dir, write_file and delete_file; paths, ignore rules and secrets in
every tool; determinism of results."""

from __future__ import annotations

import os
import shutil
import stat
import tracemalloc
from pathlib import Path

import pytest

from agent.tools.files import HARD_CAP_LINES, MAX_LINE_CHARS, ListDir
from agent.workspace import Workspace
from tests.agent.tool_helpers import context_with, fails, ok
from tests.conftest import HAS_BWRAP, call_tool, make_context, make_repo


def numbered(content: str) -> list[int]:
    """The line numbers shown in a read_file result."""
    numbers = []
    for line in content.splitlines()[1:]:
        head, tab, _ = line.partition("\t")
        if tab and head.strip().isdigit():
            numbers.append(int(head))
    return numbers


# ------------------------------------------------------------------ read_file
async def test_read_file_whole_small_file(ctx):
    content = await ok(ctx, "read_file", path="src/calc.py")
    assert content == (
        "src/calc.py (6 lines)\n"
        "     1\tdef add(a, b):\n"
        "     2\t    return a - b\n"
        "     3\t\n"
        "     4\t\n"
        "     5\tdef sub(a, b):\n"
        "     6\t    return a - b"
    )


async def test_read_file_default_window_and_notice(repo, ctx):
    (repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    content = await ok(ctx, "read_file", path="long.txt")
    assert content.splitlines()[0] == "long.txt (1000 lines)"
    assert numbered(content) == list(range(1, 401))
    assert content.endswith("[showing lines 1-400 of 1000; read more with start_line=401]")


async def test_read_file_start_only_reads_a_window_from_there(repo, ctx):
    (repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    content = await ok(ctx, "read_file", path="long.txt", start_line=401)
    assert numbered(content) == list(range(401, 801))
    assert "read more with start_line=801" in content
    content = await ok(ctx, "read_file", path="long.txt", start_line=900)
    assert numbered(content) == list(range(900, 1001))
    assert "read more" not in content


async def test_read_file_range(repo, ctx):
    (repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    content = await ok(ctx, "read_file", path="long.txt", start_line=10, end_line=12)
    assert content.splitlines() == [
        "long.txt (100 lines)",
        "    10\tline 10",
        "    11\tline 11",
        "    12\tline 12",
        "[showing lines 10-12 of 100; read more with start_line=13]",
    ]
    # An end past the last line shows up to the end, without a notice.
    content = await ok(ctx, "read_file", path="long.txt", start_line=99, end_line=500)
    assert numbered(content) == [99, 100]
    assert "read more" not in content


async def test_read_file_end_before_start(ctx):
    content = await fails(ctx, "read_file", path="src/calc.py", start_line=5, end_line=2)
    assert content == "Error: end_line (2) is before start_line (5)"


async def test_read_file_start_past_the_end(ctx):
    content = await fails(ctx, "read_file", path="src/calc.py", start_line=7)
    assert content == "Error: start_line 7 is past the end of src/calc.py (6 lines)"


@pytest.mark.parametrize("params", [{"start_line": "0"}, {"end_line": "-1"}, {"start_line": "x"}])
async def test_read_file_bad_line_numbers_are_rejected(ctx, params):
    content = await fails(ctx, "read_file", path="src/calc.py", **params)
    assert ("start_line" in content) or ("end_line" in content)


async def test_read_file_hard_cap(repo, ctx):
    (repo / "big.txt").write_text("".join(f"{i}\n" for i in range(1, 3001)))
    content = await ok(ctx, "read_file", path="big.txt", start_line=1, end_line=3000)
    assert numbered(content) == list(range(1, HARD_CAP_LINES + 1))
    assert content.endswith(
        f"[showing lines 1-{HARD_CAP_LINES} of 3000; read more with start_line={HARD_CAP_LINES + 1}]"
    )


async def test_read_file_character_cap_stops_early_with_notice(repo, ctx):
    (repo / "wide.txt").write_text("".join(f"{i:04d}" + "w" * 196 + "\n" for i in range(1, 401)))
    content = await ok(ctx, "read_file", path="wide.txt")
    shown = numbered(content)
    assert shown[0] == 1 and 100 < len(shown) < 400
    assert shown == list(range(1, len(shown) + 1))
    assert content.endswith(
        f"[showing lines 1-{len(shown)} of 400; read more with start_line={len(shown) + 1}]"
    )


async def test_read_file_cuts_long_lines(repo, ctx):
    (repo / "wide.txt").write_text("short\n" + "x" * (MAX_LINE_CHARS + 3000) + "\nend\n")
    content = await ok(ctx, "read_file", path="wide.txt")
    lines = content.splitlines()
    assert lines[2] == f"     2\t{'x' * MAX_LINE_CHARS} [... 3000 characters cut]"
    assert lines[3] == "     3\tend"


async def test_read_file_empty_file(repo, ctx):
    (repo / "empty.txt").write_bytes(b"")
    assert await ok(ctx, "read_file", path="empty.txt") == "empty.txt is empty (0 bytes)."


async def test_read_file_binary_refused(repo, ctx):
    (repo / "blob.bin").write_bytes(b"PK\x03\x04\x00\x00binary\x00data")
    content = await fails(ctx, "read_file", path="blob.bin")
    assert content == "Error: blob.bin is a binary file (17 bytes); it cannot be shown as text"


async def test_read_file_non_utf8_shown_with_notice(repo, ctx):
    (repo / "latin1.txt").write_bytes("café\nnaïve\n".encode("latin-1"))
    content = await ok(ctx, "read_file", path="latin1.txt")
    assert content.splitlines() == [
        "latin1.txt (2 lines)",
        "     1\tcaf\ufffd",
        "     2\tna\ufffdve",
        "[not valid UTF-8 (first bad byte at offset 3); undecodable bytes are shown as \ufffd]",
    ]


async def test_read_file_crlf_lines_have_no_carriage_returns(repo, ctx):
    (repo / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    content = await ok(ctx, "read_file", path="win.txt")
    assert "\r" not in content
    assert content.splitlines()[1:] == ["     1\tone", "     2\ttwo"]


async def test_read_file_line_numbers_agree_with_grep_despite_form_feeds(repo, ctx):
    # str.splitlines() would also split at the form feed and shift the numbers.
    (repo / "ff.py").write_text("a = 1\n\x0c\nb = 2\x1c\nc = 3\n")
    content = await ok(ctx, "read_file", path="ff.py")
    assert content.splitlines()[0] == "ff.py (4 lines)"
    assert "     4\tc = 3" in content.splitlines()
    assert await ok(ctx, "grep", pattern="c = 3") == "ff.py:4:c = 3"


async def test_read_file_no_final_newline(repo, ctx):
    (repo / "nonl.txt").write_text("a\nb")
    content = await ok(ctx, "read_file", path="nonl.txt")
    assert content.splitlines() == ["nonl.txt (2 lines)", "     1\ta", "     2\tb"]


def make_large_text(path: Path, lines: int = 200_000) -> int:
    """A text file over 16 MiB (quick to write): line i holds its own number."""
    body = b"".join(b"%08d " % i + b"." * 82 + b"\n" for i in range(1, lines + 1))
    path.write_bytes(body)
    assert len(body) > 16 * 1024 * 1024
    return lines


@pytest.fixture
def no_whole_reads(monkeypatch):
    """Fail the test if a tool loads a whole file through the workspace."""

    def refuse(self, rel):
        raise AssertionError(f"{rel} was loaded whole")

    monkeypatch.setattr(Workspace, "read_bytes", refuse)


async def test_read_file_large_file_is_streamed(repo, ctx, no_whole_reads):
    make_large_text(repo / "large.log.txt")
    tracemalloc.start()
    try:
        content = await ok(
            ctx, "read_file", path="large.log.txt", start_line=150_000, end_line=150_002
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024
    lines = content.splitlines()
    assert lines[0] == "large.log.txt"
    assert lines[1] == "150000\t00150000 " + "." * 82
    assert numbered(content) == [150_000, 150_001, 150_002]
    assert "its line count is not computed" in content
    assert content.endswith("[showing lines 150000-150002; continue with start_line=150003]")


async def test_read_file_large_file_default_window_and_end(repo, ctx, no_whole_reads):
    total = make_large_text(repo / "large.txt")
    content = await ok(ctx, "read_file", path="large.txt")
    assert numbered(content)[:3] == [1, 2, 3]
    assert "continue with start_line=" in content
    # The last lines: the end of the file is reached, so the count is known.
    content = await ok(ctx, "read_file", path="large.txt", start_line=total - 1)
    assert content.splitlines()[0] == f"large.txt ({total} lines)"
    assert numbered(content) == [total - 1, total]
    assert "continue with" not in content and "read more" not in content
    content = await fails(ctx, "read_file", path="large.txt", start_line=total + 5)
    assert content == f"Error: start_line {total + 5} is past the end of large.txt ({total} lines)"


async def test_read_file_sparse_huge_file_with_one_endless_line(repo, ctx, no_whole_reads):
    # Text at the start, then 64 MiB of a single line (a sparse file: instant to make).
    path = repo / "dump.txt"
    with open(path, "wb") as handle:
        handle.write(b"header\n" + b"y" * 9000)
        handle.truncate(64 * 1024 * 1024)
    tracemalloc.start()
    try:
        content = await ok(ctx, "read_file", path="dump.txt", start_line=1, end_line=5)
        past = await fails(ctx, "read_file", path="dump.txt", start_line=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024
    lines = content.splitlines()
    assert lines[0] == "dump.txt (2 lines)"
    assert lines[1] == "     1\theader"
    assert lines[2].startswith("     2\tyyyy") and lines[2].endswith("characters cut]")
    assert past == "Error: start_line 3 is past the end of dump.txt (2 lines)"


async def test_read_file_large_binary_refused(repo, ctx, no_whole_reads):
    with open(repo / "disk.img", "wb") as handle:
        handle.truncate(20 * 1024 * 1024)
    content = await fails(ctx, "read_file", path="disk.img")
    assert (
        content
        == f"Error: disk.img is a binary file ({20 * 1024 * 1024} bytes); it cannot be shown as text"
    )


async def test_read_file_missing_suggests_similar_paths(ctx):
    content = await fails(ctx, "read_file", path="src/clac.py")
    assert content.startswith("Error: src/clac.py does not exist. Did you mean: ")
    assert "src/calc.py" in content
    content = await fails(ctx, "read_file", path="calc.py")
    assert content.startswith("Error: calc.py does not exist. Did you mean: src/calc.py")


async def test_read_file_missing_without_anything_similar(ctx):
    content = await fails(ctx, "read_file", path="zzzz/qqqq.rs")
    assert content == "Error: zzzz/qqqq.rs does not exist."


async def test_read_file_suggestions_never_reveal_hidden_files(ctx):
    content = await fails(ctx, "read_file", path="out.txt")
    assert "build/out.txt" not in content
    content = await fails(ctx, "read_file", path="env")
    assert ".env" not in content


async def test_read_file_directory_given(ctx):
    content = await fails(ctx, "read_file", path="src")
    assert content == "Error: src is a directory, not a file; use list_dir"


# ---------------------------------------------------------------------- paths
OUTSIDE_CALLS = [
    ("read_file", {}),
    ("write_file", {"content": "x"}),
    ("edit_file", {"old_string": "a", "new_string": "b"}),
    ("delete_file", {}),
    ("list_dir", {}),
    ("grep", {"pattern": "root"}),
]


@pytest.mark.parametrize(("tool", "extra"), OUTSIDE_CALLS)
@pytest.mark.parametrize("path", ["../outside.txt", "src/../../outside.txt", "..", "/etc/passwd"])
async def test_paths_outside_the_workspace_are_refused(tmp_path, ctx, tool, extra, path):
    (tmp_path / "outside.txt").write_text("a secret outside\n")
    content = await fails(ctx, tool, path=path, **extra)
    assert "outside the workspace" in content
    assert (tmp_path / "outside.txt").read_text() == "a secret outside\n"


@pytest.mark.parametrize(("tool", "extra"), OUTSIDE_CALLS)
async def test_symlinks_pointing_outside_are_refused(tmp_path, repo, ctx, tool, extra):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("root secret\n")
    os.symlink(outside / "data.txt", repo / "link.txt")
    os.symlink(outside, repo / "linkdir")
    for path in ("link.txt", "linkdir", "linkdir/data.txt", "linkdir/new.txt"):
        content = await fails(ctx, tool, path=path, **extra)
        assert "outside the workspace" in content, (path, content)
    assert (outside / "data.txt").read_text() == "root secret\n"
    assert sorted(os.listdir(outside)) == ["data.txt"]
    assert (repo / "link.txt").is_symlink()


async def test_absolute_path_inside_the_root_is_accepted(repo, ctx):
    content = await ok(ctx, "read_file", path=str(repo / "src" / "calc.py"), end_line=1)
    assert content.splitlines()[:2] == ["src/calc.py (6 lines)", "     1\tdef add(a, b):"]
    assert str(repo) not in content


async def test_sandbox_mount_paths_are_accepted(repo, ctx):
    content = await ok(ctx, "read_file", path="/workspace/src/calc.py", end_line=1)
    assert content.splitlines()[0] == "src/calc.py (6 lines)"
    await ok(ctx, "write_file", path="/workspace/made/here.txt", content="hi")
    assert (repo / "made" / "here.txt").read_text() == "hi\n"
    listing = await ok(ctx, "list_dir", path="/workspace")
    assert listing.startswith("./\n")


@pytest.mark.parametrize(("tool", "extra"), OUTSIDE_CALLS)
async def test_nul_byte_in_path(ctx, tool, extra):
    content = await fails(ctx, tool, path="src/calc.py\x00.txt", **extra)
    assert "NUL" in content


async def test_symlink_inside_the_workspace_is_followed(repo, ctx):
    os.symlink("src/calc.py", repo / "alias.py")
    content = await ok(ctx, "read_file", path="alias.py", end_line=1)
    assert content.splitlines()[1] == "     1\tdef add(a, b):"


async def test_write_through_a_symlink_changes_the_target_and_keeps_the_link(repo, ctx):
    os.symlink("src/calc.py", repo / "alias.py")
    await ok(ctx, "edit_file", path="alias.py", old_string="def add", new_string="def plus")
    assert (repo / "alias.py").is_symlink()
    assert (repo / "src" / "calc.py").read_text().startswith("def plus(a, b):")
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def sub", new_string="def minus")
    # One file, one checkpoint: reverting restores the original whichever name was used.
    assert ctx.workspace.changed_files() == ["src/calc.py"]
    ctx.workspace.revert_all()
    assert (repo / "src" / "calc.py").read_text().startswith("def add(a, b):")
    assert "def sub" in (repo / "src" / "calc.py").read_text()


# --------------------------------------------------- ignore rules and secrets
@pytest.fixture
def ignore_repo(repo: Path) -> Path:
    """The repo plus nested .gitignore files, negations, .tachyignore, .git and keys."""
    (repo / ".gitignore").write_text("build/\n*.log\n*.tmp\n!keep.tmp\n")
    (repo / "keep.tmp").write_text("kept needle\n")
    (repo / "drop.tmp").write_text("dropped needle\n")
    (repo / "pkg").mkdir()
    (repo / "pkg" / ".gitignore").write_text("generated.py\n!important.log\n")
    (repo / "pkg" / "generated.py").write_text("needle = 'generated'\n")
    (repo / "pkg" / "important.log").write_text("important needle\n")
    (repo / "pkg" / "other.log").write_text("other needle\n")
    (repo / "pkg" / "module.py").write_text("needle = 'module'\n")
    (repo / "build" / ".gitignore").write_text("!out.txt\n")  # cannot re-include
    (repo / ".tachyignore").write_text("private/\nnotes.md\n")
    (repo / "private").mkdir()
    (repo / "private" / "plan.txt").write_text("private needle\n")
    (repo / "notes.md").write_text("notes needle\n")
    (repo / "docs").mkdir()
    (repo / "docs" / ".tachyignore").write_text("draft.md\n")
    (repo / "docs" / "draft.md").write_text("draft needle\n")
    (repo / "docs" / "guide.md").write_text("guide needle\n")
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core] needle\n")
    (repo / "keys").mkdir()
    (repo / "keys" / "id_rsa").write_text("-----BEGIN needle-----\n")
    (repo / "keys" / "server.pem").write_text("pem needle\n")
    (repo / ".env").write_text("API_KEY=needle\n")
    (repo / ".env.example").write_text("API_KEY=needle-example\n")
    return repo


VISIBLE = [
    "keep.tmp",
    "pkg/important.log",
    "pkg/module.py",
    "docs/guide.md",
    ".env.example",
    "src/calc.py",
]
IGNORED = [
    "debug.log",
    "drop.tmp",
    "build/out.txt",
    "pkg/generated.py",
    "pkg/other.log",
    "private/plan.txt",
    "notes.md",
    "docs/draft.md",
    ".git/config",
]
SECRETS = [".env", "keys/id_rsa", "keys/server.pem"]


async def test_visible_files_are_readable(ignore_repo):
    ctx = make_context(ignore_repo)
    for path in VISIBLE:
        await ok(ctx, "read_file", path=path)


@pytest.mark.parametrize("path", IGNORED)
async def test_ignored_files_are_refused_by_every_file_tool(ignore_repo, path):
    ctx = make_context(ignore_repo)
    before = (ignore_repo / path).read_bytes()
    for tool, extra in [
        ("read_file", {}),
        ("edit_file", {"old_string": "needle", "new_string": "pin"}),
        ("write_file", {"content": "x"}),
        ("delete_file", {}),
        ("grep", {"pattern": "needle"}),
    ]:
        content = await fails(ctx, tool, path=path, **extra)
        assert "excluded by .gitignore/.tachyignore" in content, (tool, content)
    assert (ignore_repo / path).read_bytes() == before


@pytest.mark.parametrize("path", SECRETS)
async def test_secret_files_are_refused_by_every_file_tool(ignore_repo, path):
    ctx = make_context(ignore_repo)
    before = (ignore_repo / path).read_bytes()
    for tool, extra in [
        ("read_file", {}),
        ("edit_file", {"old_string": "needle", "new_string": "pin"}),
        ("write_file", {"content": "x"}),
        ("delete_file", {}),
        ("grep", {"pattern": "needle"}),
    ]:
        content = await fails(ctx, tool, path=path, **extra)
        assert "looks like a secret file" in content, (tool, content)
        assert "needle" not in content
    assert (ignore_repo / path).read_bytes() == before


async def test_new_secret_files_cannot_be_written(repo, ctx):
    content = await fails(ctx, "write_file", path="config/.env.production", content="K=v")
    assert "secret" in content
    assert not (repo / "config").exists()


async def test_symlink_to_a_secret_is_refused_as_a_secret(repo, ctx):
    os.symlink(".env", repo / "settings.txt")
    content = await fails(ctx, "read_file", path="settings.txt")
    assert "looks like a secret file" in content
    assert "hunter2" not in content


async def test_list_dir_hides_ignored_and_secret_entries(ignore_repo):
    ctx = make_context(ignore_repo)
    listing = await ok(ctx, "list_dir", depth=3)
    assert listing == "\n".join(
        [
            "./",
            "  .env.example",
            "  .gitignore",
            "  .tachyignore",
            "  README.md",
            "  docs/",
            "    .tachyignore",
            "    guide.md",
            "  keep.tmp",
            "  keys/",
            "  pkg/",
            "    .gitignore",
            "    important.log",
            "    module.py",
            "  src/",
            "    __init__.py",
            "    calc.py",
            "  tests/",
            "    test_calc.py",
        ]
    )


async def test_file_search_hides_ignored_and_secret_files(ignore_repo):
    ctx = make_context(ignore_repo)
    for query in ["out", "generated", "plan", "notes", "draft", "config", "id_rsa", "pem", "drop"]:
        assert await ok(ctx, "file_search", query=query) == f"No file paths match {query!r}.", query
    assert await ok(ctx, "file_search", query=".env") == ".env.example"
    assert await ok(ctx, "file_search", query="important") == "pkg/important.log"


async def test_grep_skips_ignored_and_secret_files(ignore_repo):
    ctx = make_context(ignore_repo)
    content = await ok(ctx, "grep", pattern="needle")
    assert content.splitlines() == [
        ".env.example:1:API_KEY=needle-example",
        "docs/guide.md:1:guide needle",
        "keep.tmp:1:kept needle",
        "pkg/important.log:1:important needle",
        "pkg/module.py:1:needle = 'module'",
    ]


async def test_allow_secrets_makes_secret_files_visible(ignore_repo):
    ctx = context_with(ignore_repo, allow_secrets=True)
    assert (await ok(ctx, "read_file", path=".env")).splitlines()[1] == "     1\tAPI_KEY=needle"
    assert "id_rsa" in await ok(ctx, "list_dir", path="keys")
    assert "keys/id_rsa" in await ok(ctx, "file_search", query="id_rsa")
    assert ".env:1:API_KEY=needle" in await ok(ctx, "grep", pattern="needle")
    await ok(ctx, "edit_file", path="keys/server.pem", old_string="pem", new_string="PEM")
    assert (ignore_repo / "keys" / "server.pem").read_text() == "PEM needle\n"
    await ok(ctx, "delete_file", path=".env")
    # Ignore rules still apply.
    await fails(ctx, "read_file", path="private/plan.txt")


async def test_gitignore_change_by_write_file_takes_effect(repo, ctx):
    assert "README.md" in await ok(ctx, "list_dir")
    await ok(ctx, "write_file", path=".gitignore", content="build/\n*.log\n*.md\n")
    assert "README.md" not in await ok(ctx, "list_dir")
    await fails(ctx, "read_file", path="README.md")


# ------------------------------------------------------------------- list_dir
@pytest.fixture
def tree(repo: Path) -> Path:
    for rel in ["a/b/c/d/deep.txt", "a/b/mid.txt", "a/top.txt", "z.txt"]:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x\n")
    (repo / "emptydir").mkdir()
    return repo


async def test_list_dir_default_depth_is_two_and_a_tree(tree, ctx):
    listing = await ok(ctx, "list_dir")
    assert listing == "\n".join(
        [
            "./",
            "  .gitignore",
            "  README.md",
            "  a/",
            "    b/",
            "    top.txt",
            "  emptydir/",
            "  src/",
            "    __init__.py",
            "    calc.py",
            "  tests/",
            "    test_calc.py",
            "  z.txt",
        ]
    )


async def test_list_dir_depth(tree, ctx):
    assert await ok(ctx, "list_dir", path="a", depth=1) == "a/\n  b/\n  top.txt"
    assert await ok(ctx, "list_dir", path="a", depth=10) == "\n".join(
        ["a/", "  b/", "    c/", "      d/", "        deep.txt", "    mid.txt", "  top.txt"]
    )
    assert await ok(ctx, "list_dir", path="a/b/c", depth=1) == "a/b/c/\n  d/"


@pytest.mark.parametrize("depth", ["0", "11", "two"])
async def test_list_dir_bad_depth(ctx, depth):
    content = await fails(ctx, "list_dir", depth=depth)
    assert "<depth>" in content


async def test_list_dir_entry_cap(tree, ctx, monkeypatch):
    monkeypatch.setattr(ListDir, "MAX_ENTRIES", 4)
    listing = await ok(ctx, "list_dir", depth=10)
    assert listing.splitlines() == [
        "./",
        "  .gitignore",
        "  README.md",
        "  a/",
        "    b/",
        "  [... 12 more entries not shown; list a subdirectory or use a smaller depth]",
    ]


async def test_list_dir_entry_cap_default(repo, ctx):
    (repo / "many").mkdir()
    for i in range(ListDir.MAX_ENTRIES + 25):
        (repo / "many" / f"f{i:04d}.txt").write_bytes(b"")
    listing = await ok(ctx, "list_dir", path="many")
    assert len(listing.splitlines()) == 1 + ListDir.MAX_ENTRIES + 1
    assert listing.endswith(
        "[... 25 more entries not shown; list a subdirectory or use a smaller depth]"
    )


async def test_list_dir_empty_and_only_ignored(tree, ctx):
    assert (
        await ok(ctx, "list_dir", path="emptydir")
        == "emptydir/ is empty (or holds only ignored files)."
    )
    (tree / "logs").mkdir()
    (tree / "logs" / "x.log").write_text("x")
    assert await ok(ctx, "list_dir", path="logs") == "logs/ is empty (or holds only ignored files)."


async def test_list_dir_errors(ctx):
    assert (
        await fails(ctx, "list_dir", path="src/calc.py")
        == "Error: src/calc.py is a file, not a directory"
    )
    assert await fails(ctx, "list_dir", path="nope") == "Error: nope does not exist"
    assert "excluded" in await fails(ctx, "list_dir", path="build")


async def test_list_dir_hides_git(repo, ctx):
    (repo / ".git" / "objects").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    listing = await ok(ctx, "list_dir", depth=3)
    assert ".git/" not in listing and "HEAD" not in listing
    assert "excluded" in await fails(ctx, "list_dir", path=".git")
    assert "excluded" in await fails(ctx, "read_file", path=".git/HEAD")


# ----------------------------------------------------------------- write_file
async def test_write_file_creates_parents_and_adds_final_newline(repo, ctx):
    content = await ok(ctx, "write_file", path="docs/guide/intro.md", content="# Intro\nhello")
    assert content == "Created docs/guide/intro.md (2 lines)."
    assert (repo / "docs" / "guide" / "intro.md").read_bytes() == b"# Intro\nhello\n"


async def test_write_file_keeps_content_exactly(repo, ctx):
    text = "tabs\tand  spaces  \n\nunicode: π ✓\n"
    await ok(ctx, "write_file", path="exact.txt", content=text)
    assert (repo / "exact.txt").read_bytes() == text.encode()


async def test_write_file_reports_lints(repo, ctx):
    content = await ok(ctx, "write_file", path="pkg/mod.py", content="import os\n\nx = 1\n")
    assert content == (
        "Created pkg/mod.py (3 lines).\n\nLints (1):\npkg/mod.py:1:8: F401 `os` imported but unused"
    )
    content = await ok(ctx, "write_file", path="pkg/clean.py", content="x = 1\n")
    assert content == "Created pkg/clean.py (1 lines).\n\nLints: no problems."


async def test_write_file_overwrite(repo, ctx):
    (repo / "run.sh").write_text("#!/bin/sh\necho old\n")
    (repo / "run.sh").chmod(0o755)
    content = await ok(ctx, "write_file", path="run.sh", content="#!/bin/sh\necho new\necho two\n")
    assert content == "Overwrote run.sh (3 lines; it had 2)."
    assert (repo / "run.sh").read_text() == "#!/bin/sh\necho new\necho two\n"
    assert stat.S_IMODE((repo / "run.sh").stat().st_mode) == 0o755
    assert not list(repo.glob(".*.tachy-tmp"))


async def test_write_file_directory_refused(repo, ctx):
    assert await fails(ctx, "write_file", path="src", content="x") == "Error: src is a directory"
    assert (repo / "src").is_dir()


async def test_write_file_missing_content_parameter(ctx):
    content = await fails(ctx, "write_file", path="x.txt")
    assert "<content>" in content


# ---------------------------------------------------------------- delete_file
async def test_delete_file(repo, ctx):
    assert await ok(ctx, "delete_file", path="README.md") == "Deleted README.md."
    assert not (repo / "README.md").exists()
    assert ctx.workspace.checkpoints == {"README.md": b"# demo\n"}


async def test_delete_file_errors(repo, ctx):
    assert await fails(ctx, "delete_file", path="nope.txt") == "Error: nope.txt does not exist"
    content = await fails(ctx, "delete_file", path="src")
    assert content == "Error: src is a directory, not a file; use list_dir"
    assert (repo / "src" / "calc.py").exists()


# ---------------------------------------------------------------- determinism
async def sample_calls(ctx) -> list[tuple[bool, str]]:
    calls = [
        ("read_file", {"path": "src/calc.py"}),
        ("read_file", {"path": "src/missing.py"}),
        ("read_file", {"path": "../escape.txt"}),
        ("read_file", {"path": "/etc/hostname"}),
        ("read_file", {"path": "outlink/file.txt"}),
        ("read_file", {"path": ".env"}),
        ("read_file", {"path": "debug.log"}),
        ("list_dir", {"depth": "3"}),
        ("list_dir", {"path": "nope"}),
        ("file_search", {"query": "calc"}),
        ("grep", {"pattern": "return"}),
        ("grep", {"pattern": "(unclosed"}),
        ("grep", {"pattern": "x", "path": "nope"}),
        (
            "edit_file",
            {"path": "src/calc.py", "old_string": "a - b\n\n", "new_string": "a + b\n\n"},
        ),
        ("edit_file", {"path": "src/calc.py", "old_string": "missing text", "new_string": "x"}),
        ("edit_file", {"path": "src/calc.py", "old_string": "return", "new_string": "yield"}),
        ("write_file", {"path": "pkg/new.py", "content": "import sys\n"}),
        ("write_file", {"path": "pkg/broken.py", "content": "def f(:\n"}),
        ("read_lints", {}),
        ("read_lints", {"paths": "nope.py"}),
        ("delete_file", {"path": "README.md"}),
        ("codebase_search", {"query": "adding numbers"}),
        ("todo_write", {"todos": "- [x] look\n- [ ] fix"}),
    ]
    if HAS_BWRAP:
        calls += [
            (
                "run_terminal_cmd",
                {"command": "pwd; ls; cat .env; python3 -c 'import os; print(os.getcwd())'"},
            ),
            ("run_terminal_cmd", {"command": "sleep 5", "timeout_s": "0.5"}),
            ("run_terminal_cmd", {"command": "echo bg", "background": "true"}),
        ]
    results = [await call_tool(ctx, name, **params) for name, params in calls]
    await ctx.sandbox.close()
    return results


async def test_no_absolute_workspace_path_in_any_result(tmp_path, repo):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "file.txt").write_text("x\n")
    os.symlink(tmp_path / "outside", repo / "outlink")
    results = await sample_calls(make_context(repo))
    assert any(is_error for is_error, _ in results) and any(not e for e, _ in results)
    for _, content in results:
        assert str(tmp_path) not in content, content
        assert str(repo.resolve()) not in content, content


async def test_same_calls_in_two_copies_give_identical_results(tmp_path):
    first = make_repo(tmp_path / "first")
    second_parent = tmp_path / "elsewhere" / "deeper"
    second_parent.mkdir(parents=True)
    second = second_parent / "copy"
    shutil.copytree(first, second, symlinks=True)
    for root in (first, second):
        (root / "outlink").symlink_to("/etc")
    assert await sample_calls(make_context(first)) == await sample_calls(make_context(second))


# ------------------------------------------------------------- special files
@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("read_file", {}),
        ("edit_file", {"old_string": "a", "new_string": "b"}),
        ("write_file", {"content": "x"}),
        ("grep", {"pattern": "x"}),
    ],
)
async def test_fifos_are_refused_instead_of_blocking(repo, ctx, tool, extra):
    os.mkfifo(repo / "pipe")
    content = await fails(ctx, tool, path="pipe", **extra)
    assert content == "Error: pipe is not a regular file (a FIFO, socket or device)"


async def test_unreadable_files_give_a_clear_error(repo, ctx, monkeypatch):
    def denied(self, rel):
        raise PermissionError(13, "Permission denied", str(self.abspath(rel)))

    monkeypatch.setattr(Workspace, "read_bytes", denied)
    content = await fails(ctx, "read_file", path="src/calc.py")
    assert content == "Error: could not read src/calc.py: Permission denied"
    content = await fails(ctx, "edit_file", path="src/calc.py", old_string="add", new_string="plus")
    assert content == "Error: could not read src/calc.py: Permission denied"
    assert str(repo) not in content
