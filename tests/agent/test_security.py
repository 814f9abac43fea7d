"""What an adversarial model tried, and must not get (issue 15): one test per class of
attack, run as root where root is the threat, with races driven by real threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.events import ToolResult
from agent.executor import Executor
from agent.render import valid_text
from agent.rules import load_project_rules
from agent.workspace import Workspace, WorkspaceError
from index import beneath
from index.ignore import is_secret_name
from tests.agent.tool_helpers import fails, ok
from tests.conftest import HAS_BWRAP, call_tool, make_context

needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed")
as_root = pytest.mark.skipif(os.getuid() != 0, reason="the threat is root's capabilities")


def git(repo: Path, *args: str) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo.parent),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


# ------------------------------------------------------------- capabilities
@needs_bwrap
@as_root
async def test_root_has_no_capabilities_in_the_sandbox(repo):
    ctx = make_context(repo)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; "
        "umount /workspace/.env; umount .env; cat .env; mount -o remount,rw /usr; "
        "touch /usr/tachy-probe",
    )
    assert "CapEff:\t0000000000000000" in content
    assert "CapBnd:\t0000000000000000" in content
    assert "hunter2" not in content
    assert not Path("/usr/tachy-probe").exists()


# ------------------------------------------------- secrets by other roads
@needs_bwrap
async def test_secrets_in_git_history_stay_hidden(repo):
    git(repo, "init", "-q")
    (repo / ".tachyignore").write_text("private.txt\n")
    (repo / "private.txt").write_text("tachyignored text\n")
    git(repo, "add", "-f", ".env", "private.txt", "src")
    git(repo, "commit", "-qm", "oops")
    git(repo, "rm", "-q", "--cached", ".env", "private.txt")
    git(repo, "commit", "-qm", "remove them")
    ctx = make_context(repo)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="git show HEAD~1:.env; git show HEAD~1:private.txt; "
        "git grep hunter2 $(git rev-list --all); git log --all -p | cat",
    )
    assert "hunter2" not in content and "tachyignored text" not in content
    assert ctx.sandbox._hidden.history_hidden == [".env", "private.txt"]


@needs_bwrap
async def test_a_clean_history_leaves_git_usable(repo):
    git(repo, "init", "-q")
    git(repo, "add", "src", "tests")
    git(repo, "commit", "-qm", "first")
    ctx = make_context(repo)
    content = await ok(ctx, "run_terminal_cmd", command="git log --format=%s; git status --short")
    assert "first" in content
    # The history check is remembered where commands cannot reach it.
    assert (repo / ".tachy" / "git-history.json").is_file()
    assert "No such file" in await ok(
        ctx, "run_terminal_cmd", command="cat .tachy/git-history.json"
    )


async def test_rules_files_that_link_to_secrets_or_the_host_stay_out(repo, tmp_path):
    host = tmp_path / "host-secret.txt"
    host.write_text("host file text\n")
    (repo / "AGENTS.md").symlink_to(repo / ".env")
    (repo / ".cursor" / "rules").mkdir(parents=True)
    (repo / ".cursor" / "rules" / "host.mdc").symlink_to(host)
    (repo / ".cursor" / "rules" / "real.mdc").write_text("---\nalwaysApply: true\n---\nUse tabs.\n")
    (repo / ".clinerules").symlink_to("/etc/hostname")
    rules = load_project_rules(Workspace(repo))
    assert "Use tabs." in rules
    for leaked in ("hunter2", "host file text", Path("/etc/hostname").read_text().strip()):
        assert leaked not in rules


async def test_the_agent_cannot_change_tachyignore(repo):
    (repo / ".tachyignore").write_text("notes.md\n")
    (repo / "notes.md").write_text("hidden notes\n")
    ctx = make_context(repo)
    for call in (
        {"name": "write_file", "path": ".tachyignore", "content": ""},
        {"name": "edit_file", "path": ".tachyignore", "old_string": "notes", "new_string": "x"},
        {"name": "delete_file", "path": ".tachyignore"},
        {"name": "write_file", "path": "src/.tachyignore", "content": "!x\n"},
    ):
        name = call.pop("name")
        assert "cannot change it" in await fails(ctx, name, **call)
    assert (repo / ".tachyignore").read_text() == "notes.md\n"


@needs_bwrap
async def test_commands_cannot_change_ignore_files_or_repository_config(repo):
    git(repo, "init", "-q")
    (repo / ".tachyignore").write_text("notes.md\n")
    config_before = (repo / ".git" / "config").read_text()
    ctx = make_context(repo)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="echo '!notes.md' > .tachyignore; echo > .gitignore; "
        "git config core.fsmonitor 'touch /tmp/pwned'; "
        "echo 'touch pwned' > .git/hooks/post-checkout; mv .git/config .git/c; "
        "echo x > .tachy/planted; ls .tachy",
    )
    assert content.count("Read-only file system") >= 3
    assert (repo / ".tachyignore").read_text() == "notes.md\n"
    assert (repo / ".gitignore").read_text() == "build/\n*.log\n"
    assert (repo / ".git" / "config").read_text() == config_before
    assert list((repo / ".git" / "hooks").glob("post-checkout")) == []
    assert not (repo / ".tachy" / "planted").exists()


# --------------------------------------------------------------- linting
@needs_bwrap
async def test_lint_config_cannot_quote_secrets_or_tachys_environment(repo, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-tachys-environment")
    (repo / "ruff.toml").write_text('extend = "${OPENAI_API_KEY}/.env"\n')
    ctx = make_context(repo)
    content = await ctx_lints(ctx)
    assert "sk-from-tachys-environment" not in content
    (repo / "ruff.toml").write_text('extend = ".env"\n')
    content = await ctx_lints(ctx)
    assert "hunter2" not in content


async def ctx_lints(ctx) -> str:
    _, content = await call_tool(ctx, "read_lints", paths="src/calc.py")
    return content


# ---------------------------------------------------- check-then-use races
class Swapper:
    """Swaps `path` between a regular file and a symlink to `target`, as fast as it can,
    on a thread, the way a background command would."""

    def __init__(self, path: Path, target: Path, content: str = "visible\n") -> None:
        self.path, self.target, self.content = path, target, content
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        spare = self.path.with_name(self.path.name + ".swap")
        while not self.stop.is_set():
            spare.unlink(missing_ok=True)
            spare.symlink_to(self.target)
            os.replace(spare, self.path)
            spare.write_text(self.content)
            os.replace(spare, self.path)

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.parametrize("target", ["inside", "outside"])
async def test_read_file_never_follows_a_swapped_in_symlink(repo, tmp_path, target):
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret\n")
    secret = repo / ".env" if target == "inside" else outside
    ctx = make_context(repo)
    with Swapper(repo / "src" / "swap.py", secret):
        for _ in range(300):
            _, content = await call_tool(ctx, "read_file", path="src/swap.py")
            assert "hunter2" not in content and "host secret" not in content


async def test_write_file_never_writes_through_a_swapped_in_symlink(repo, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("host file\n")
    ctx = make_context(repo)
    with Swapper(repo / "src" / "swap.py", outside):
        for i in range(200):
            await call_tool(ctx, "write_file", path="src/swap.py", content=f"agent {i}")
    assert outside.read_text() == "host file\n"


def test_a_directory_swapped_for_a_symlink_is_not_followed(repo, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "calc.py").write_text("host code\n")
    os.rename(repo / "src", repo / "src.real")
    (repo / "src").symlink_to(outside)
    with pytest.raises(beneath.EscapeError):
        beneath.read_file(repo, "src/calc.py")
    with pytest.raises(OSError):
        beneath.write_file(repo, "src/calc.py", b"agent\n")
    assert (outside / "calc.py").read_text() == "host code\n"


# ------------------------------------------------ host-side effects of work
def test_revert_replaces_a_planted_symlink_instead_of_writing_through_it(repo, tmp_path):
    bashrc = tmp_path / "bashrc"
    bashrc.write_text("# the user's shell\n")
    ws = Workspace(repo)
    ws.write_bytes("run.sh", b"echo agent\n")  # created by the agent: checkpoint None
    ws.write_bytes("src/calc.py", b"changed\n")  # checkpoint: the original text
    (repo / "src" / "calc.py").unlink()
    (repo / "src" / "calc.py").symlink_to(bashrc)  # planted by a command
    (repo / "run.sh").unlink()
    (repo / "run.sh").symlink_to(bashrc)
    ws.revert_all()
    assert bashrc.read_text() == "# the user's shell\n"
    assert not (repo / "src" / "calc.py").is_symlink()
    assert (repo / "src" / "calc.py").read_text().startswith("def add")
    assert not os.path.lexists(repo / "run.sh")


# ------------------------------------------------------- crashes, bad text
def test_paths_that_cannot_be_examined_are_errors_not_crashes(repo):
    (repo / "proc").symlink_to("/proc/1/root/etc")
    (repo / "loop").symlink_to("loop")
    ws = Workspace(repo)
    for path in ("proc/passwd", "loop", "loop/x"):
        with pytest.raises(WorkspaceError):
            ws.resolve(path, kind="file")


def test_a_replayed_model_with_hostile_paths_and_text_finishes_its_run(tmp_path):
    """Each of these once ended a `tachy agent` run as "the model server failed"."""
    from tests.server.test_cli import call, read_events, tachy, write_replay

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    (ws / "proc").symlink_to("/proc/1/root/etc")
    with open(os.fsencode(ws) + b"/bad\xff.py", "wb") as handle:
        handle.write(b"y = 2\n")
    turn = "".join(
        call(tool, **params)
        for tool, params in [
            ("list_dir", {}),
            ("read_file", {"path": "proc/passwd"}),
            ("edit_file", {"path": "proc/passwd", "old_string": "a", "new_string": "b"}),
            ("file_search", {"query": "bad"}),
            ("grep", {"pattern": "y = 2"}),
        ]
    )
    replay = write_replay(tmp_path / "turns.jsonl", turn, "Done \ud800 here")
    transcript = tmp_path / "run.jsonl"
    proc = tachy(
        "agent", "--workspace", str(ws), "--policy", f"replay:{replay}",
        "--transcript", str(transcript), "go",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = read_events(transcript)
    results = {e.tool: e for e in events if isinstance(e, ToolResult)}
    assert "bad\\xff.py" in results["list_dir"].content
    assert "outside the workspace" in results["read_file"].content
    assert results["edit_file"].is_error
    assert events[-1].stop_reason == "end_turn"
    assert events[-1].text == "Done \ufffd here"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_valid_text_always_encodes(text):
    cleaned = valid_text(text)
    cleaned.encode("utf-8")
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        assert cleaned == text


def test_undecodable_name_bytes_are_shown_as_escapes():
    assert valid_text(os.fsdecode(b"bad\xff.py")) == "bad\\xff.py"


async def test_a_surrogate_pair_split_between_chunks_is_joined(repo):
    class Split:
        async def stream(self, messages, stop):
            for chunk in ("Done \ud83d", "\ude00 and a lone \udc80", ""):
                yield chunk

    ctx = make_context(repo)
    result = await Executor(ctx, Split()).run("hi")
    assert result.final_text == "Done \U0001f600 and a lone \\x80"


# ------------------------------------------------------------ disk quota
@pytest.mark.parametrize(
    "bwrap", [pytest.param(True, marks=needs_bwrap, id="bwrap"), pytest.param(False, id="fallback")]
)
async def test_a_command_that_fills_the_disk_is_stopped(repo, bwrap):
    ctx = make_context(repo, use_bubblewrap=bwrap, disk_quota_bytes=64 * 1024**2)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="for i in $(seq 100); do head -c 8000000 /dev/zero > big$i; sync; done; echo end",
        timeout_s="60",
    )
    assert "quota" in content and "end" not in content.splitlines()[-1]
    written = sum(f.stat().st_size for f in repo.glob("big*"))
    assert written < 400 * 1024**2
    assert ctx.sandbox.disk_written > 64 * 1024**2


# ------------------------------------------------------------ secret names
@pytest.mark.parametrize(
    "name",
    [".envrc", "prod.env", "terraform.tfstate", "terraform.tfstate.backup", "prod.tfvars",
     ".git-credentials", "credentials.csv", "credentials.json", "server.key", "id_ed25519", "secrets.yaml"],
)  # fmt: skip
def test_common_secret_names_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["credentials.py", "credentials.ts", "keys.py", "env.py"])
def test_source_files_about_secrets_are_not_secrets(name):
    assert not is_secret_name(name)


def test_users_extend_the_secret_names():
    code = (
        "from index.ignore import is_secret_name; "
        "print(is_secret_name('vault.json'), is_secret_name('plain.json'))"
    )
    env = {**os.environ, "TACHY_SECRET_PATTERNS": "vault.*,*.sealed"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert done.stdout.split() == ["True", "False"], done.stderr


@needs_bwrap
async def test_a_repository_a_command_creates_cannot_make_the_host_run_anything(repo, tmp_path):
    flag = tmp_path / "ran-on-the-host"
    ctx = make_context(repo)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command=f"git init -q sub && git -C sub config core.fsmonitor 'touch {flag}' && "
        "printf '#!/bin/sh\\ntouch pwned\\n' > sub/.git/hooks/pre-commit && "
        "chmod +x sub/.git/hooks/pre-commit && echo made",
    )
    assert "made" in content and "sub/.git" in content and "set aside" in content
    # What an editor does on its own: git status in the repository it found.
    subprocess.run(["git", "-C", str(repo / "sub"), "status"], capture_output=True, check=True)
    assert not flag.exists()
    assert "fsmonitor" in (repo / "sub" / ".git" / "config.tachy-disabled").read_text()
    assert list((repo / "sub" / ".git" / "hooks").iterdir()) == []
    # The agent's git keeps working in it.
    assert "On branch" in await ok(ctx, "run_terminal_cmd", command="git -C sub status")


_PARTS = st.sampled_from(
    ["..", ".", "", "src", "calc.py", "in", "out", "abs_out", "abs_in", "loop", "x\udcff", "/"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PARTS, min_size=1, max_size=6))
def test_no_path_the_model_writes_leads_out_of_the_workspace(tmp_path_factory, parts):
    """Whatever mix of `..`, links in and out, loops and undecodable bytes a path
    holds, the workspace either refuses it or names a place inside the root."""
    root = tmp_path_factory.getbasetemp() / "prop-ws"
    if not root.exists():
        (root / "src").mkdir(parents=True)
        (root / "src" / "calc.py").write_text("x = 1\n")
        (root / "in").symlink_to("src")
        (root / "out").symlink_to("../..")
        (root / "abs_out").symlink_to("/etc")
        (root / "abs_in").symlink_to(root / "src")
        (root / "loop").symlink_to("loop")
    ws = Workspace(root)
    path = "/".join(parts)
    try:
        rel = ws.resolve(path, kind="any")
    except WorkspaceError:
        return
    real = Path(os.path.realpath(root / rel))
    assert real == root or root in real.parents, (path, rel, real)
    if real.is_file():
        ws.read_disk(rel)  # and it can be read through the handles
