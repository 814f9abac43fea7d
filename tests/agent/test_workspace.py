"""Workspace: path resolution, ignore rules, secrets, walking and checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.workspace import Workspace, WorkspaceError
from index.ignore import IgnoreRules, is_secret_name
from tests.agent.tool_helpers import fails, ok
from tests.conftest import make_context


@pytest.fixture
def ws(repo: Path) -> Workspace:
    return Workspace(repo)


# ---------------------------------------------------------------------- paths
@pytest.mark.parametrize(
    ("given", "rel"),
    [
        ("", ""),
        (".", ""),
        ("./", ""),
        ("src/calc.py", "src/calc.py"),
        ("./src//calc.py", "src/calc.py"),
        ("src/../src/calc.py", "src/calc.py"),
        ("src\\calc.py", "src/calc.py"),
        ("  src/calc.py\n", "src/calc.py"),
        ("/workspace", ""),
        ("/workspace/src/calc.py", "src/calc.py"),
        ("src/new/file.py", "src/new/file.py"),
    ],
)
def test_relpath_normalises(ws, given, rel):
    assert ws.relpath(given) == rel


def test_relpath_accepts_absolute_paths_inside_the_root(ws, repo):
    assert ws.relpath(str(repo)) == ""
    assert ws.relpath(str(repo / "src" / "calc.py")) == "src/calc.py"


@pytest.mark.parametrize(
    "given", ["..", "../x", "src/../../x", "/etc/passwd", "/workspacex/a", "/", "a/b/../../../x"]
)
def test_relpath_refuses_paths_outside(ws, given):
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        ws.relpath(given)


def test_relpath_refuses_a_sibling_with_the_root_as_prefix(ws, repo):
    sibling = Path(str(repo) + "-other")
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        ws.relpath(str(sibling / "x"))


def test_relpath_refuses_symlinks_out(ws, repo, tmp_path):
    os.symlink(tmp_path, repo / "up")
    os.symlink("/etc/passwd", repo / "pw")
    os.symlink("../..", repo / "src" / "loop")
    for given in ["up", "up/x", "pw", "src/loop/etc", "src/loop"]:
        with pytest.raises(WorkspaceError, match="through a symlink"):
            ws.relpath(given)


def test_relpath_refuses_nul_bytes(ws):
    with pytest.raises(WorkspaceError, match="NUL"):
        ws.relpath("src/calc.py\x00")


def test_error_messages_name_relative_paths_only(ws, repo, tmp_path):
    os.symlink(tmp_path, repo / "up")
    for given, kind in [
        ("up/x", "any"),
        ("nope.py", "file"),
        ("src", "file"),
        ("src/calc.py", "dir"),
    ]:
        with pytest.raises(WorkspaceError) as info:
            ws.resolve(given, kind=kind)
        assert str(tmp_path) not in str(info.value)


def test_resolve_kinds(ws):
    assert ws.resolve("src/calc.py", kind="file") == "src/calc.py"
    assert ws.resolve("src", kind="dir") == "src"
    assert ws.resolve("src/new.py", kind="new") == "src/new.py"
    assert ws.resolve("src/calc.py", kind="new") == "src/calc.py"
    with pytest.raises(WorkspaceError, match="does not exist"):
        ws.resolve("missing.py", kind="file")
    with pytest.raises(WorkspaceError, match="is a directory"):
        ws.resolve("src", kind="new")
    with pytest.raises(WorkspaceError, match="is a file, not a directory"):
        ws.resolve("README.md", kind="dir")


def test_workspace_root_must_be_a_directory(tmp_path):
    with pytest.raises(WorkspaceError, match="not a directory"):
        Workspace(tmp_path / "missing")


# ---------------------------------------------------------------- ignore rules
def rules_for(root: Path, files: dict[str, str]) -> IgnoreRules:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return IgnoreRules(root)


def test_ignore_rules_git_semantics(tmp_path):
    rules = rules_for(
        tmp_path,
        {
            ".gitignore": "*.log\n/top-only.txt\nbuild/\n!keep.log\nnode_modules\n",
            "sub/.gitignore": "*.tmp\n!important.tmp\n/anchored.txt\n",
            "sub/deeper/.gitignore": "!again.log\n",
        },
    )
    cases = {
        ("a.log", False): True,
        ("keep.log", False): False,
        ("sub/keep.log", False): False,
        ("sub/deeper/again.log", False): False,
        ("sub/deeper/other.log", False): True,
        ("top-only.txt", False): True,
        ("sub/top-only.txt", False): False,
        ("build", True): True,
        ("build", False): False,  # a file named build is not a build/ directory
        ("build/x.py", False): True,
        ("src/build/x.py", False): True,
        ("node_modules/pkg/index.js", False): True,
        ("x.tmp", False): False,
        ("sub/x.tmp", False): True,
        ("sub/important.tmp", False): False,
        ("sub/anchored.txt", False): True,
        ("sub/deeper/anchored.txt", False): False,
        ("src/main.py", False): False,
        (".git", True): True,
        (".git/config", False): True,
        (".tachy/jobs/1.log", False): True,
    }
    for (rel, is_dir), expected in cases.items():
        assert rules.is_ignored(rel, is_dir) is expected, rel


def test_negation_cannot_reinclude_inside_an_ignored_directory(tmp_path):
    rules = rules_for(
        tmp_path, {".gitignore": "out/\n!out/keep.txt\n", "out/.gitignore": "!keep.txt\n"}
    )
    assert rules.is_ignored("out/keep.txt")


def test_tachyignore_adds_to_gitignore(tmp_path):
    rules = rules_for(
        tmp_path,
        {
            ".gitignore": "*.log\n",
            ".tachyignore": "data/\n*.csv\n",
            "sub/.tachyignore": "secret.md\n",
        },
    )
    assert rules.is_ignored("data", True)
    assert rules.is_ignored("data/a.txt")
    assert rules.is_ignored("x/y.csv")
    assert rules.is_ignored("sub/secret.md")
    assert not rules.is_ignored("secret.md")
    assert rules.is_ignored("a.log")


def test_ignore_rules_invalidate(tmp_path):
    rules = rules_for(tmp_path, {".gitignore": "*.log\n"})
    assert not rules.is_ignored("a.txt")
    (tmp_path / ".gitignore").write_text("*.txt\n")
    assert not rules.is_ignored("a.txt")  # cached until invalidated
    rules.invalidate()
    assert rules.is_ignored("a.txt")


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        (".env", True),
        (".env.local", True),
        (".env.production", True),
        (".env.example", False),
        (".env.sample", False),
        ("id_rsa", True),
        ("id_ed25519", True),
        ("id_rsa.pub", False),
        ("server.pem", True),
        ("tls.key", True),
        ("credentials", True),
        ("credentials.json", True),
        (".netrc", True),
        (".npmrc", True),
        ("vault.kdbx", True),
        ("environment.py", False),
        ("keys.py", False),
        ("README.md", False),
    ],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_is_visible(ws, repo):
    assert ws.is_visible("src/calc.py")
    assert ws.is_visible("")
    assert not ws.is_visible("debug.log")
    assert not ws.is_visible("build", True)
    assert not ws.is_visible(".env")
    assert ws.is_visible(".tachy/jobs/1.log")
    assert not ws.is_visible(".tachy/other.txt")
    os.symlink(".env", repo / "alias")
    assert not ws.is_visible("alias")
    os.symlink("build/out.txt", repo / "out-link")
    assert not ws.is_visible("out-link")
    os.symlink("/etc/hostname", repo / "outside-link")
    assert not ws.is_visible("outside-link")
    assert Workspace(repo, allow_secrets=True).is_visible(".env")


# ----------------------------------------------------------------------- walk
def test_walk_is_a_sorted_depth_first_tree(ws, repo):
    (repo / "src" / "sub").mkdir()
    (repo / "src" / "sub" / "deep.py").write_text("")
    (repo / "a_dir").mkdir()
    assert list(ws.walk()) == [
        (".gitignore", False),
        ("README.md", False),
        ("a_dir", True),
        ("src", True),
        ("src/__init__.py", False),
        ("src/calc.py", False),
        ("src/sub", True),
        ("src/sub/deep.py", False),
        ("tests", True),
        ("tests/test_calc.py", False),
    ]


def test_walk_depth_and_start(ws, repo):
    (repo / "src" / "sub").mkdir()
    (repo / "src" / "sub" / "deep.py").write_text("")
    assert [rel for rel, _ in ws.walk(max_depth=1)] == [".gitignore", "README.md", "src", "tests"]
    assert [rel for rel, _ in ws.walk("src", max_depth=1)] == [
        "src/__init__.py",
        "src/calc.py",
        "src/sub",
    ]
    assert [rel for rel, _ in ws.walk("src")] == [
        "src/__init__.py",
        "src/calc.py",
        "src/sub",
        "src/sub/deep.py",
    ]


def test_walk_does_not_follow_symlinked_directories(ws, repo):
    os.symlink("src", repo / "src-link", target_is_directory=True)
    entries = dict(ws.walk())
    assert entries["src-link"] is False
    assert not any(rel.startswith("src-link/") for rel in entries)


def test_walk_handles_deep_trees(ws, repo):
    deep = repo.joinpath(*[f"d{i}" for i in range(60)])
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("")
    rels = [rel for rel, _ in ws.walk()]
    leaf = "/".join(f"d{i}" for i in range(60)) + "/leaf.txt"
    assert rels.index(leaf) == rels.index(leaf.rsplit("/", 1)[0]) + 1


# ---------------------------------------------------------------- checkpoints
async def test_checkpoints_revert_all_restores_bytes(repo):
    ctx = make_context(repo)
    ws = ctx.workspace
    originals = {
        "src/calc.py": (repo / "src" / "calc.py").read_bytes(),
        "README.md": (repo / "README.md").read_bytes(),
    }
    (repo / "win.txt").write_bytes(b"a\r\nb\r\n\xff trailing")
    originals["win.txt"] = (repo / "win.txt").read_bytes()
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def add", new_string="def plus")
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def sub", new_string="def minus")
    await ok(ctx, "write_file", path="README.md", content="rewritten")
    await ok(ctx, "write_file", path="new/dir/created.py", content="x = 1")
    await ok(ctx, "delete_file", path="tests/test_calc.py")
    ws.write_bytes("win.txt", b"changed")
    test_calc = ORIGINAL_TEST_CALC
    assert ws.checkpoints == {
        "src/calc.py": originals["src/calc.py"],
        "README.md": originals["README.md"],
        "new/dir/created.py": None,
        "tests/test_calc.py": test_calc,
        "win.txt": originals["win.txt"],
    }
    assert ws.changed_files() == sorted(ws.checkpoints)
    assert ws.revert_all() == [
        "README.md",
        "new/dir/created.py",
        "src/calc.py",
        "tests/test_calc.py",
        "win.txt",
    ]
    for rel, data in originals.items():
        assert (repo / rel).read_bytes() == data
    assert not (repo / "new" / "dir" / "created.py").exists()
    assert (repo / "tests" / "test_calc.py").read_bytes() == test_calc
    assert ws.checkpoints == {}
    assert ws.changed_files() == []


ORIGINAL_TEST_CALC = (
    b"from src.calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    b"def test_sub():\n    assert sub(5, 3) == 2\n"
)


async def test_revert_all_returns_the_reverted_paths(repo):
    ctx = make_context(repo)
    await ok(ctx, "write_file", path="b.txt", content="b")
    await ok(ctx, "write_file", path="a.txt", content="a")
    assert ctx.workspace.revert_all() == ["a.txt", "b.txt"]
    assert not (repo / "a.txt").exists() and not (repo / "b.txt").exists()


async def test_revert_one_file(repo):
    ctx = make_context(repo)
    ws = ctx.workspace
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def add", new_string="def plus")
    await ok(ctx, "write_file", path="README.md", content="new")
    ws.revert("src/calc.py")
    assert (repo / "src" / "calc.py").read_text().startswith("def add")
    assert (repo / "README.md").read_text() == "new\n"
    assert ws.changed_files() == ["README.md"]
    with pytest.raises(WorkspaceError, match="no checkpoint"):
        ws.revert("src/calc.py")
    with pytest.raises(WorkspaceError, match="no checkpoint"):
        ws.revert("tests/test_calc.py")


async def test_revert_recreates_a_deleted_file_in_a_deleted_directory(repo):
    ctx = make_context(repo)
    original = (repo / "tests" / "test_calc.py").read_bytes()
    await ok(ctx, "delete_file", path="tests/test_calc.py")
    (repo / "tests").rmdir()
    ctx.workspace.revert("tests/test_calc.py")
    assert (repo / "tests" / "test_calc.py").read_bytes() == original


async def test_changed_files_leaves_out_files_changed_back(repo):
    ctx = make_context(repo)
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def add", new_string="def plus")
    await ok(ctx, "edit_file", path="src/calc.py", old_string="def plus", new_string="def add")
    assert ctx.workspace.changed_files() == []
    assert "src/calc.py" in ctx.workspace.checkpoints


async def test_checkpoint_keeps_the_first_original(repo):
    ctx = make_context(repo)
    original = (repo / "README.md").read_bytes()
    for text in ["one", "two", "three"]:
        await ok(ctx, "write_file", path="README.md", content=text)
    assert ctx.workspace.checkpoints == {"README.md": original}


async def test_failed_edits_record_no_checkpoint(repo):
    ctx = make_context(repo)
    await fails(ctx, "edit_file", path="src/calc.py", old_string="nope", new_string="x")
    await fails(ctx, "write_file", path=".env", content="x")
    await fails(ctx, "delete_file", path="missing.txt")
    assert ctx.workspace.checkpoints == {}


async def test_revert_of_an_ignore_file_refreshes_the_rules(repo):
    ctx = make_context(repo)
    await ok(ctx, "write_file", path=".gitignore", content="build/\n*.log\n*.md\n")
    assert not ctx.workspace.is_visible("README.md")
    ctx.workspace.revert(".gitignore")
    assert ctx.workspace.is_visible("README.md")


def test_symlinks_in_the_jobs_directory_are_judged_by_their_target(ws, repo):
    (repo / ".tachyignore").write_text("private/\n")
    (repo / "private").mkdir()
    (repo / "private" / "plan.txt").write_text("plan\n")
    jobs = repo / ".tachy" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "1.log").write_text("log\n")
    os.symlink("../../.env", jobs / "2.log")
    os.symlink("../../private/plan.txt", jobs / "3.log")
    os.symlink("1.log", jobs / "4.log")
    assert ws.is_visible(".tachy/jobs/1.log")
    assert ws.is_visible(".tachy/jobs/4.log")
    assert not ws.is_visible(".tachy/jobs/2.log")
    assert not ws.is_visible(".tachy/jobs/3.log")
    with pytest.raises(WorkspaceError, match="secret"):
        ws.resolve(".tachy/jobs/2.log", kind="file")
    with pytest.raises(WorkspaceError, match="excluded"):
        ws.resolve(".tachy/jobs/3.log", kind="file")
