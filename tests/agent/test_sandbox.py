"""run_terminal_cmd and the sandbox: limits, isolation, background jobs, the fallback."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
from pathlib import Path

import pytest

from agent.cgroup import ProcessCgroup
from agent.sandbox import CommandResult, Sandbox, SandboxConfig, nproc_limit
from agent.tools.terminal import MAX_OUTPUT_CHARS, describe_output, format_bytes
from agent.workspace import Workspace
from tests.agent.tool_helpers import context_with, eventually, fails, marker, ok, processes_with
from tests.conftest import HAS_BWRAP, make_context

needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap (bwrap) is not installed")
NOT_SANDBOXED_LINE = (
    "[not sandboxed: bubblewrap is not installed, so the command ran as a plain "
    "subprocess with resource limits]\n"
)


def cgroups_work() -> bool:
    group = ProcessCgroup.create(max_processes=16, memory_bytes=None)
    if group is None:
        return False
    group.remove()
    return True


# A fork bomb is only safe to try where something caps it: a cgroup, or RLIMIT_NPROC
# (which does not bind root).
CAN_CONTAIN_FORK_BOMB = cgroups_work() or os.getuid() != 0

# Both modes where bubblewrap exists; the fallback alone elsewhere.
MODES = [
    pytest.param(True, id="bwrap", marks=needs_bwrap),
    pytest.param(False, id="fallback"),
]


def ctx_for(repo: Path, bwrap: bool, **options):
    return make_context(repo, use_bubblewrap=bwrap, **options)


def own_cgroups() -> list[str]:
    return glob.glob(f"/sys/fs/cgroup/**/tachy-{os.getpid()}-*", recursive=True)


@pytest.fixture(autouse=True)
def no_cgroup_left_behind():
    before = set(own_cgroups())
    yield
    assert sorted(set(own_cgroups()) - before) == []


# ------------------------------------------------------------------- basics
@pytest.mark.parametrize("bwrap", MODES)
async def test_exit_code_and_output(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(ctx, "run_terminal_cmd", command="echo out; echo err >&2; exit 3")
    assert content == ("" if bwrap else NOT_SANDBOXED_LINE) + "Exit code: 3\nout\nerr"


@pytest.mark.parametrize("bwrap", MODES)
async def test_no_output_is_said_explicitly(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(ctx, "run_terminal_cmd", command="true")
    assert content.endswith("Exit code: 0\n(the command produced no output)")


@needs_bwrap
async def test_bwrap_result_has_no_fallback_notice(repo, ctx):
    content = await ok(ctx, "run_terminal_cmd", command="echo hi")
    assert content == "Exit code: 0\nhi"
    assert ctx.sandbox.mode == "bubblewrap"


async def test_fallback_says_not_sandboxed(repo):
    ctx = ctx_for(repo, False)
    assert ctx.sandbox.mode == "subprocess"
    content = await ok(ctx, "run_terminal_cmd", command="echo hi")
    assert content == NOT_SANDBOXED_LINE + "Exit code: 0\nhi"
    content = await ok(ctx, "run_terminal_cmd", command="sleep 1", background="true")
    assert content.startswith(NOT_SANDBOXED_LINE)
    await ctx.sandbox.close()


@pytest.mark.parametrize("bwrap", MODES)
async def test_output_is_cleaned(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(
        ctx, "run_terminal_cmd", command=r"printf '\033[32mgreen\033[0m\n 10%%\r 99%%\r100%%\n'"
    )
    assert content.endswith("Exit code: 0\ngreen\n100%")


@pytest.mark.parametrize("bwrap", MODES)
async def test_commands_start_in_the_workspace(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(ctx, "run_terminal_cmd", command="cat src/calc.py | head -1")
    assert content.endswith("Exit code: 0\ndef add(a, b):")


@pytest.mark.parametrize("bwrap", MODES)
async def test_killed_by_a_signal(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(ctx, "run_terminal_cmd", command="kill -KILL $$")
    assert "Exit code: 0" not in content
    if not bwrap:  # the shell is our direct child: its signal is visible
        assert "The command was killed by signal SIGKILL" in content


# ------------------------------------------------------------------ timeouts
async def run_and_watch(ctx, command: str, needle: str, **params) -> str:
    """Run a command; wait until a process with `needle` shows up while it runs."""
    task = asyncio.create_task(ok(ctx, "run_terminal_cmd", command=command, **params))
    assert await eventually(lambda: bool(processes_with(needle)) or task.done())
    assert processes_with(needle) or task.done(), "the command never started"
    return await task


@pytest.mark.parametrize("bwrap", MODES)
async def test_timeout_kills_the_whole_process_group(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    tag = marker()
    command = f"sleep {tag} & (sleep {tag}.5 &) ; echo started; sleep {tag}.9"
    task = asyncio.create_task(ok(ctx, "run_terminal_cmd", command=command, timeout_s="1.5"))
    assert await eventually(lambda: len(processes_with(tag)) >= 3)
    content = await task
    assert (
        "The command did not finish within 1.5 s and was killed, with every process it started."
        in content
    )
    assert content.endswith("Output before it was killed:\nstarted")
    assert await eventually(lambda: processes_with(tag) == [])


@pytest.mark.parametrize("bwrap", MODES)
async def test_timeout_is_capped_by_the_configured_maximum(repo, bwrap):
    ctx = ctx_for(repo, bwrap, max_timeout_s=1)
    content = await ok(ctx, "run_terminal_cmd", command="sleep 30", timeout_s="500")
    assert "did not finish within 1 s" in content


@pytest.mark.parametrize("bwrap", MODES)
async def test_processes_left_behind_are_stopped_when_the_command_ends(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    tag = marker()
    # The shell exits at once; its background child holds the output pipe open.
    content = await ok(ctx, "run_terminal_cmd", command=f"echo hi; sleep {tag} &", timeout_s="20")
    assert content.endswith("Exit code: 0\nhi")
    assert await eventually(lambda: processes_with(tag) == [])


@pytest.mark.parametrize("bwrap", MODES)
@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
async def test_bad_timeouts_are_rejected(repo, bwrap, bad):
    ctx = ctx_for(repo, bwrap)
    assert "<timeout_s>" in await fails(ctx, "run_terminal_cmd", command="true", timeout_s=bad)


@pytest.mark.parametrize("bwrap", MODES)
async def test_cancelling_kills_the_command(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    tag = marker()
    task = asyncio.create_task(ctx.sandbox.run(f"sleep {tag} & sleep {tag}.5"))
    assert await eventually(lambda: len(processes_with(tag)) >= 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await eventually(lambda: processes_with(tag) == [])


# -------------------------------------------------------------- huge output
@pytest.mark.parametrize("bwrap", MODES)
async def test_large_output_is_capped_with_a_notice(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(ctx, "run_terminal_cmd", command="seq 1 400000; echo the-end")
    assert "Exit code: 0" in content
    body = content.split("Exit code: 0\n", 1)[1]
    assert body.startswith("1\n2\n3\n")
    assert body.endswith("399999\n400000\nthe-end")
    total = len(subprocess.run(["seq", "1", "400000"], capture_output=True).stdout) + len(
        "the-end\n"
    )
    notice = [line for line in body.splitlines() if "bytes of output omitted" in line]
    assert len(notice) == 1
    omitted = int(notice[0].split()[1])
    shown = len(body.replace(notice[0], "").encode())
    assert abs(total - (omitted + shown)) < 10
    assert len(body) < MAX_OUTPUT_CHARS + 100


@pytest.mark.parametrize("bwrap", MODES)
async def test_endless_output_is_killed_above_the_limit(repo, bwrap):
    ctx = ctx_for(repo, bwrap, max_output_bytes=1024 * 1024)
    tag = marker()
    content = await ok(ctx, "run_terminal_cmd", command=f"yes {tag}", timeout_s="30")
    assert (
        "The command printed more than 1 MiB and was killed. The start and end of its output:"
        in content
    )
    assert "did not finish" not in content
    assert "bytes of output omitted" in content
    assert content.splitlines()[-1] == tag
    assert await eventually(lambda: processes_with(tag) == [])


@pytest.mark.parametrize("bwrap", MODES)
async def test_output_just_under_the_limit_completes(repo, bwrap):
    ctx = ctx_for(repo, bwrap, max_output_bytes=1024 * 1024)
    content = await ok(ctx, "run_terminal_cmd", command="head -c 1000000 /dev/zero | tr '\\0' x")
    assert content.startswith(("" if bwrap else NOT_SANDBOXED_LINE) + "Exit code: 0\nxxx")


def test_describe_output_counts_everything_left_out():
    result = CommandResult(exit_code=0, head=b"a" * 100, tail=b"z" * 100, total_bytes=1000)
    assert (
        describe_output(result)
        == "a" * 100 + "\n[... 800 bytes of output omitted ...]\n" + "z" * 100
    )
    big = b"".join(b"%06d\n" % i for i in range(20000))
    result = CommandResult(exit_code=0, head=big, tail=b"", total_bytes=len(big))
    text = describe_output(result)
    assert text.startswith("000000\n") and text.endswith("\n019999")
    assert f"\n[... {len(big) - MAX_OUTPUT_CHARS} bytes of output omitted ...]\n" in text
    assert describe_output(CommandResult(0, b"", b"", 0)) == "(the command produced no output)"
    assert describe_output(CommandResult(0, b"\n\n", b"", 2)) == "(the command produced no output)"


def test_format_bytes():
    assert format_bytes(64 * 1024 * 1024) == "64 MiB"
    assert format_bytes(1024 * 1024) == "1 MiB"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(1000) == "1000 bytes"
    assert format_bytes(3 * 1024**3) == "3 GiB"


# --------------------------------------------------------------- fork bomb
@pytest.mark.skipif(not CAN_CONTAIN_FORK_BOMB, reason="no cgroup to contain a fork bomb as root")
@pytest.mark.parametrize("bwrap", MODES)
async def test_fork_bomb_is_contained(repo, bwrap):
    ctx = ctx_for(repo, bwrap, max_processes=32, max_output_bytes=256 * 1024)
    tag = f"bomb{marker()}"
    content = await ok(
        ctx, "run_terminal_cmd", command=f"{tag}(){{ {tag}|{tag}& }}; {tag}; sleep 3", timeout_s="2"
    )
    assert "did not finish within 2 s" in content or "printed more than" in content
    assert await eventually(lambda: processes_with(tag) == [])
    # The machine is fine: we can still start processes.
    assert subprocess.run(["true"], check=False).returncode == 0
    assert (await ok(ctx, "run_terminal_cmd", command="echo alive")).endswith("alive")


def test_nproc_limit_counts_the_users_running_tasks(monkeypatch):
    monkeypatch.setattr(os, "getuid", lambda: 0)
    assert nproc_limit(64) == 64  # root is exempt from RLIMIT_NPROC
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    user = 65534  # nobody
    sleeper = subprocess.Popen(["sleep", "30"], user=user, group=user)
    try:
        monkeypatch.setattr(os, "getuid", lambda: user)
        assert nproc_limit(64) >= 65
    finally:
        sleeper.kill()
        sleeper.wait()


# ------------------------------------------------------------------ isolation
@needs_bwrap
async def test_network_is_refused(repo, ctx):
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3); print('CONNECTED')\"",
    )
    assert "CONNECTED" not in content
    assert "Exit code: 1" in content
    assert "Network is unreachable" in content or "OSError" in content


@needs_bwrap
async def test_writes_outside_the_workspace_fail(repo, ctx):
    tag = marker()
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command=f"touch /usr/tachy-{tag}; touch /etc/tachy-{tag}; echo $HOME; touch $HOME/home-{tag}; ls $HOME",
    )
    assert content.count("Read-only file system") == 2
    # HOME is the private /tmp (which may also hold the directories leading to the
    # workspace or to tachy's own environment, where those live under /tmp)
    lines = content.splitlines()
    assert "/tmp" in lines and f"home-{tag}" in lines[lines.index("/tmp") :]
    assert not Path(f"/usr/tachy-{tag}").exists() and not Path(f"/etc/tachy-{tag}").exists()
    assert not Path(f"/tmp/home-{tag}").exists()
    assert not Path(os.path.expanduser(f"~/home-{tag}")).exists()


@needs_bwrap
async def test_tmp_is_private(repo, ctx):
    tag = marker()
    Path(f"/tmp/host-{tag}").write_text("host file\n")
    try:
        content = await ok(ctx, "run_terminal_cmd", command=f"echo x > /tmp/sbx-{tag}; ls /tmp")
        # Only what the command wrote (and, where the workspace itself lives under
        # /tmp, the directories leading to it).
        assert f"sbx-{tag}" in content.splitlines()
        assert f"host-{tag}" not in content
        assert not Path(f"/tmp/sbx-{tag}").exists()
        # Each command gets a fresh one.
        content = await ok(ctx, "run_terminal_cmd", command=f"cat /tmp/sbx-{tag}")
        assert "No such file" in content
    finally:
        Path(f"/tmp/host-{tag}").unlink()


@pytest.mark.parametrize("bwrap", MODES)
async def test_workspace_is_writable(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="mkdir -p out2 && echo made > out2/f.txt && sed -i 's/a - b/a + b/' src/calc.py",
    )
    assert content.endswith("Exit code: 0\n(the command produced no output)")
    assert (repo / "out2" / "f.txt").read_text() == "made\n"
    assert "return a + b" in (repo / "src" / "calc.py").read_text()


@needs_bwrap
async def test_workspace_is_also_at_slash_workspace(repo, ctx):
    content = await ok(ctx, "run_terminal_cmd", command="pwd; echo hi > /workspace/via-mount.txt")
    assert content == "Exit code: 0\n/workspace"
    assert (repo / "via-mount.txt").read_text() == "hi\n"


@needs_bwrap
async def test_secrets_and_tachyignored_paths_are_hidden_from_commands(repo, ctx):
    (repo / ".tachyignore").write_text("private/\nnotes.md\n")
    (repo / "private").mkdir()
    (repo / "private" / "plan.txt").write_text("top secret plan\n")
    (repo / "notes.md").write_text("secret notes\n")
    (repo / "keys").mkdir()
    (repo / "keys" / "id_rsa").write_text("PRIVATE KEY\n")
    (repo / "build" / "kept.txt").write_text("git-ignored, so hidden\n")
    (repo / "build" / ".env").write_text("TOKEN=ignored-dir-secret\n")
    # A git-ignored environment stays usable.
    (repo / ".gitignore").write_text("build/\n*.log\n.venv/\n")
    (repo / ".venv" / "lib").mkdir(parents=True)
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (repo / ".venv" / "lib" / "mod.py").write_text("VALUE = 'environment visible'\n")

    content = await ok(
        ctx,
        "run_terminal_cmd",
        command="cat .env; cat keys/id_rsa; cat notes.md; ls -A private | wc -l; "
        "grep -rs 'hunter2\\|PRIVATE\\|secret\\|top' . ; ls -A build | wc -l; "
        "cat debug.log; cat .venv/lib/mod.py",
    )
    for leaked in [
        "hunter2",
        "PRIVATE KEY",
        "secret notes",
        "top secret plan",
        "git-ignored, so hidden",
        "ignored-dir-secret",
        "log line",
    ]:
        assert leaked not in content
    assert content.count("Permission denied") == 4
    assert "\n0\n0\n" in content
    assert "environment visible" in content
    # Nothing was changed on the host.
    assert (repo / ".env").read_text() == "API_KEY=hunter2\n"
    assert (repo / "private" / "plan.txt").read_text() == "top secret plan\n"


@needs_bwrap
async def test_allow_secrets_still_hides_nested_tachyignored_paths(repo):
    (repo / "docs").mkdir()
    (repo / "docs" / ".tachyignore").write_text("draft.md\n")
    (repo / "docs" / "draft.md").write_text("draft text\n")
    ctx = context_with(repo, allow_secrets=True)
    content = await ok(ctx, "run_terminal_cmd", command="cat .env; cat docs/draft.md")
    assert "hunter2" in content
    assert "draft text" not in content


@needs_bwrap
async def test_hidden_paths(repo):
    (repo / ".tachyignore").write_text("private/\n")
    (repo / "private").mkdir()
    (repo / "sub").mkdir()
    (repo / "sub" / "credentials.json").write_text("{}")
    (repo / "build" / ".env").write_text("X=1\n")  # inside a git-ignored dir: hidden with it
    sandbox = Sandbox(Workspace(repo))
    assert hidden(sandbox) == [
        (".env", False),
        ("build", True),
        ("debug.log", False),
        ("private", True),
        ("sub/credentials.json", False),
    ]
    (repo / ".tachyignore").write_text("sub/\n")
    # Rules only tighten while a workspace lives (one run): private/ stays hidden.
    assert hidden(sandbox) == [
        (".env", False),
        ("build", True),
        ("debug.log", False),
        ("private", True),
        ("sub", True),
    ]
    assert hidden(Sandbox(Workspace(repo))) == [
        (".env", False),
        ("build", True),
        ("debug.log", False),
        ("sub", True),
    ]


def hidden(sandbox: Sandbox) -> list[tuple[str, bool]]:
    """What the sandbox hides from commands (beside tachy's own .tachy/), by path."""
    return sorted(
        (m.rel, m.is_dir)
        for m in sandbox.hidden_paths()
        if m.action == "hide" and m.rel != ".tachy"
    )


@pytest.mark.parametrize("trust_cache", [False, True])
def test_hidden_paths_follow_changes_between_commands(repo, monkeypatch, trust_cache):
    stamp = iter(range(1_000_000_000, 10**12, 1_000_000_000))

    def settle():
        # With trust_cache, directories look long quiet (distinct old mtimes), so the
        # scanner reuses its cached verdicts and must notice changes by mtime/stamps.
        if trust_cache:
            for directory in (repo, repo / "src"):
                value = next(stamp)
                os.utime(directory, ns=(value, value))

    if trust_cache:
        monkeypatch.setattr("agent.sandbox._RACY_NS", 0)
    settle()
    sandbox = Sandbox(Workspace(repo))
    BASE = [(".env", False), ("build", True), ("debug.log", False)]
    assert hidden(sandbox) == BASE
    (repo / "src" / "id_rsa").write_text("key\n")  # a new secret in a known directory
    settle()
    assert hidden(sandbox) == [*BASE, ("src/id_rsa", False)]
    (repo / "src" / ".tachyignore").write_text("calc.py\n")  # a new ignore file
    settle()
    assert hidden(sandbox) == [*BASE, ("src/calc.py", False), ("src/id_rsa", False)]
    with open(repo / "src" / ".tachyignore", "a") as handle:  # edited in place
        handle.write("__init__.py\n")
    assert ("src/__init__.py", False) in hidden(sandbox)
    (repo / "src" / ".tachyignore").unlink()
    (repo / "src" / "id_rsa").unlink()
    settle()
    # What was hidden during a run stays hidden for the rest of it (known by inode,
    # wherever it is moved); the next run goes by the rules alone.
    assert hidden(sandbox) == [*BASE, ("src/__init__.py", False), ("src/calc.py", False)]
    assert hidden(Sandbox(Workspace(repo))) == BASE


@pytest.mark.parametrize("bwrap", MODES)
async def test_environment_does_not_leak(repo, bwrap, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak-check")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-leak-check")
    ctx = ctx_for(repo, bwrap)
    content = await ok(ctx, "run_terminal_cmd", command="env")
    assert "leak-check" not in content
    assert "OPENAI_API_KEY" not in content
    assert "NO_COLOR=1" in content


async def test_ignore_rules_changed_without_a_sandbox_take_effect(repo):
    ctx = ctx_for(repo, False)
    assert "README.md" in await ok(ctx, "list_dir")
    await ok(ctx, "run_terminal_cmd", command="echo '*.md' >> .gitignore")
    assert "README.md" not in await ok(ctx, "list_dir")


@needs_bwrap
async def test_ignore_rules_added_by_the_agent_apply_to_the_next_command(repo, ctx):
    assert "demo" in await ok(ctx, "run_terminal_cmd", command="cat README.md")
    await ok(ctx, "edit_file", path=".gitignore", old_string="*.log", new_string="*.log\n*.md")
    content = await ok(ctx, "run_terminal_cmd", command="cat README.md")
    assert "demo" not in content and "Permission denied" in content


@needs_bwrap
async def test_new_tachyignore_applies_to_the_next_command(repo, ctx):
    assert "demo" in await ok(ctx, "run_terminal_cmd", command="cat README.md")
    (repo / ".tachyignore").write_text("README.md\n")  # the user adds a rule
    content = await ok(ctx, "run_terminal_cmd", command="cat README.md")
    assert "demo" not in content and "Permission denied" in content


# ------------------------------------------------------------- background jobs
@pytest.mark.parametrize("bwrap", MODES)
async def test_background_job_writes_a_log_readable_with_read_file(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    content = await ok(
        ctx, "run_terminal_cmd", command="echo first; echo second >&2", background="true"
    )
    assert content.endswith(
        "Started background job 1. Its output is written to .tachy/jobs/1.log; read it with "
        "read_file. It is stopped when this agent run ends."
    )
    job = ctx.sandbox.jobs[1]
    await asyncio.wait_for(job.finished.wait(), 20)
    log = await ok(ctx, "read_file", path=".tachy/jobs/1.log")
    assert log.splitlines() == [
        ".tachy/jobs/1.log (4 lines)",
        "     1\tfirst",
        "     2\tsecond",
        "     3\t",
        "     4\t[tachy: job 1 exited with code 0]",
    ]
    second = await ok(ctx, "run_terminal_cmd", command="exit 4", background="true")
    assert "Started background job 2" in second
    await asyncio.wait_for(ctx.sandbox.jobs[2].finished.wait(), 20)
    assert "[tachy: job 2 exited with code 4]" in await ok(
        ctx, "read_file", path=".tachy/jobs/2.log"
    )
    await ctx.sandbox.close()
    # The job logs stay out of listings and searches.
    assert ".tachy" not in await ok(ctx, "list_dir", depth=3)
    assert await ok(ctx, "grep", pattern="tachy: job") == "No matches for 'tachy: job'."


@pytest.mark.parametrize("bwrap", MODES)
async def test_close_kills_background_jobs(repo, bwrap):
    ctx = ctx_for(repo, bwrap)
    tag = marker()
    await ok(
        ctx, "run_terminal_cmd", command=f"echo up; sleep {tag} & sleep {tag}.5", background="true"
    )
    assert await eventually(lambda: len(processes_with(tag)) >= 2)
    await ctx.sandbox.close()
    assert await eventually(lambda: processes_with(tag) == [])
    assert ctx.sandbox.jobs == {}


async def test_job_log_is_capped(repo):
    ctx = ctx_for(repo, HAS_BWRAP, job_log_bytes=1000)
    await ok(ctx, "run_terminal_cmd", command="seq 1 100000", background="true")
    await asyncio.wait_for(ctx.sandbox.jobs[1].finished.wait(), 20)
    data = (repo / ".tachy" / "jobs" / "1.log").read_bytes()
    assert data.startswith(b"1\n2\n3\n")
    assert b"[tachy: log limit reached; further output discarded]" in data
    assert data.endswith(b"[tachy: job 1 exited with code 0]\n")
    assert len(data) < 1200
    await ctx.sandbox.close()


# -------------------------------------------------------------------- config
def test_requesting_bubblewrap_where_missing_fails_clearly(repo, monkeypatch):
    import agent.sandbox

    monkeypatch.setattr(agent.sandbox, "host_which", lambda name, workspace=None: None)
    with pytest.raises(RuntimeError, match="bubblewrap"):
        Sandbox(Workspace(repo), SandboxConfig(use_bubblewrap=True))
    assert Sandbox(Workspace(repo)).mode == "subprocess"


@pytest.mark.parametrize("bwrap", MODES)
async def test_file_size_and_core_limits_apply(repo, bwrap):
    ctx = make_context(repo, use_bubblewrap=bwrap, max_file_bytes=1024 * 1024)
    content = await ok(
        ctx, "run_terminal_cmd", command="ulimit -c; head -c 3000000 /dev/zero > big.bin; echo done"
    )
    assert "Exit code: 0\n0\n" in content  # no core dumps
    assert (repo / "big.bin").stat().st_size == 1024 * 1024


def test_tachys_own_install_stays_visible_under_a_private_tmp(monkeypatch):
    """A checkout or CI clone under /tmp: the sandbox's private /tmp would hide tachy's
    interpreter environment, so it is bound back read-only; elsewhere nothing is."""
    import sys

    from agent import sandbox

    monkeypatch.setattr(sys, "prefix", "/tmp/clone/.venv")
    assert "/tmp/clone/.venv" in sandbox.own_install_paths()
    monkeypatch.setattr(sys, "prefix", "/opt/venv")
    assert "/opt/venv" not in sandbox.own_install_paths()
