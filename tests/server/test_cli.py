"""`tachy agent` end to end, as a subprocess on a real copy of a repository."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cliargs import path_arg
from agent.events import Final, ToolCall, ToolResult, decode_event, read_transcript
from agent.parser import format_call
from server.cli import build_parser
from tests.conftest import make_repo

PROJECT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


def cli_env(**extra: str) -> dict[str, str]:
    # As a user runs it: no policy preset, and no Triton interpreter (tests/conftest.py
    # sets TRITON_INTERPRET for in-process kernel tests; it would run a real model's
    # experts through the interpreter).
    drop = ("TACHY_POLICY", "PYTHONPATH", "TRITON_INTERPRET")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(PROJECT)
    env.update(extra)
    return env


def tachy(
    *args: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=PROJECT,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_replay(path: Path, *turns: str) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns), encoding="utf-8")
    return path


def read_events(path: Path) -> list:
    return [decode_event(line) for line in path.read_bytes().splitlines() if line.strip()]


def call(tool: str, /, **params: str) -> str:
    return format_call(tool, params)


FIX_TURNS = (
    "I'll read the code first.\n" + call("read_file", path="src/calc.py"),
    call(
        "edit_file",
        path="src/calc.py",
        old_string="def add(a, b):\n    return a - b",
        new_string="def add(a, b):\n    return a + b",
    ),
    call("run_terminal_cmd", command="python3 -c 'from src.calc import add; print(add(2, 3))'"),
    "Fixed add(): it subtracted instead of adding.",
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "work")


def test_replay_run_fixes_the_bug(tmp_path, workspace):
    replay = write_replay(tmp_path / "fix.jsonl", *FIX_TURNS)
    transcript = tmp_path / "out" / "run.jsonl"
    proc = tachy(
        "agent",
        "--workspace",
        str(workspace),
        "--policy",
        f"replay:{replay}",
        "--transcript",
        str(transcript),
        "fix add in src/calc.py",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Fixed add(): it subtracted instead of adding.\n"
    assert (
        (workspace / "src" / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    )
    # Progress on stderr: the prose, each call as it starts and ends, the edit's diff.
    err = proc.stderr
    assert "I'll read the code first." in err
    assert "→ read_file(path='src/calc.py')" in err
    assert "✓ read_file" in err
    assert "→ edit_file(" in err
    assert "+    return a + b" in err
    assert "✓ run_terminal_cmd" in err
    assert "changed: src/calc.py" in err
    assert "<tool_call" not in err

    events = read_events(transcript)
    assert [e.__class__.__name__ for e in events] == [
        "RunStart",
        "ToolCall",
        "Assistant",
        "ToolResult",
        "ToolCall",
        "Assistant",
        "ToolResult",
        "ToolCall",
        "Assistant",
        "ToolResult",
        "Assistant",
        "Final",
    ]
    assert events[0].prompt == "fix add in src/calc.py"
    results = [e for e in events if isinstance(e, ToolResult)]
    assert not any(r.is_error for r in results)
    assert results[2].content.endswith("Exit code: 0\n5")
    final = events[-1]
    assert isinstance(final, Final)
    assert (final.stop_reason, final.text) == ("end_turn", FIX_TURNS[-1])
    # Every line is one JSON object with an "event" field.
    for line in transcript.read_text().splitlines():
        assert "event" in json.loads(line)


def test_policy_from_environment_and_quiet(tmp_path, workspace):
    replay = write_replay(tmp_path / "r.jsonl", call("list_dir"), "Nothing to do.")
    proc = tachy(
        "agent",
        "--workspace",
        str(workspace),
        "--quiet",
        "look",
        env=cli_env(TACHY_POLICY=f"replay:{replay}"),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Nothing to do.\n"
    assert proc.stderr == ""


@pytest.mark.timeout(300)
def test_no_policy_runs_the_bundled_model(tmp_path, workspace):
    """Right after setup, with nothing configured, `tachy agent` runs the model shipped
    with tachy (local:, assembled from the installed base and our part) and says so.
    --max-tokens keeps the untrained model's turns short. ~25 s alone; the margin is for
    a busy 2-core machine (it once took over 60 s beside another model's decoding)."""
    transcript = tmp_path / "run.jsonl"
    proc = tachy(
        "agent", "--workspace", str(workspace), "--max-turns", "2", "--max-tokens", "12",
        "--transcript", str(transcript), "add() subtracts; fix it", timeout=240,
    )  # fmt: skip
    assert proc.returncode in (0, 3), proc.stderr[-2000:]  # done, or the turn limit
    assert "bundled" in proc.stderr and "--policy" in proc.stderr
    assert "Traceback" not in proc.stderr
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert events[-1]["event"] == "final"
    assert any(e["event"] == "assistant" and e["text"] for e in events)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("gpt-4", "is not a policy spec"),
        ("bogus:x", "unknown policy kind 'bogus'"),
        ("openai:localhost#m", "must look like openai:http://HOST:PORT/v1#MODEL_NAME"),
    ],
)
def test_bad_policy_spec(workspace, spec, expected):
    proc = tachy("agent", "--workspace", str(workspace), "--policy", spec, "task")
    assert proc.returncode == 2
    assert proc.stderr.startswith("tachy: ")
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_replay_file(tmp_path, workspace):
    missing = tmp_path / "missing.jsonl"
    proc = tachy("agent", "--workspace", str(workspace), "--policy", f"replay:{missing}", "task")
    assert proc.returncode == 2
    assert f"replay file {missing} does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_replay_line(tmp_path, workspace):
    replay = tmp_path / "bad.jsonl"
    replay.write_text('{"text": "ok"}\n{"txt": "oops"}\n')
    proc = tachy("agent", "--workspace", str(workspace), "--policy", f"replay:{replay}", "task")
    assert proc.returncode == 2
    assert f"{replay}:2:" in proc.stderr


def test_workspace_that_does_not_exist(tmp_path):
    replay = write_replay(tmp_path / "r.jsonl", "hi")
    missing = tmp_path / "no-such-dir"
    proc = tachy("agent", "--workspace", str(missing), "--policy", f"replay:{replay}", "task")
    assert proc.returncode == 2
    assert f"workspace {missing} is not a directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_max_turns_and_unwritable_transcript(tmp_path, workspace):
    replay = write_replay(tmp_path / "r.jsonl", "hi")
    policy = f"replay:{replay}"
    proc = tachy(
        "agent", "--workspace", str(workspace), "--policy", policy, "--max-turns", "0", "t"
    )
    assert proc.returncode == 2
    assert "--max-turns and --max-tokens must be at least 1" in proc.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = tachy(
        "agent",
        "--workspace",
        str(workspace),
        "--policy",
        policy,
        "--transcript",
        str(blocker / "t.jsonl"),
        "t",
    )
    assert proc.returncode == 2
    assert "cannot write the transcript" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_max_turns_exits_3(tmp_path, workspace):
    replay = write_replay(tmp_path / "r.jsonl", *([call("list_dir", path="src")] * 4))
    transcript = tmp_path / "t.jsonl"
    proc = tachy(
        "agent",
        "--workspace",
        str(workspace),
        "--policy",
        f"replay:{replay}",
        "--max-turns",
        "2",
        "--transcript",
        str(transcript),
        "loop",
    )
    assert proc.returncode == 3, proc.stderr
    assert "run ended: max_turns" in proc.stderr
    assert proc.stdout == ""
    events = read_events(transcript)
    assert sum(isinstance(e, ToolCall) for e in events) == 2
    assert isinstance(events[-1], Final) and events[-1].stop_reason == "max_turns"


def test_replay_running_out_exits_1(tmp_path, workspace):
    replay = write_replay(tmp_path / "r.jsonl", call("read_file", path="README.md"))
    transcript = tmp_path / "t.jsonl"
    proc = tachy(
        "agent",
        "--workspace",
        str(workspace),
        "--policy",
        f"replay:{replay}",
        "--transcript",
        str(transcript),
        "read",
    )
    assert proc.returncode == 1, proc.stderr
    assert "run ended: error" in proc.stderr
    assert "has no turn 2" in proc.stderr
    assert "Traceback" not in proc.stderr
    final = read_events(transcript)[-1]
    assert isinstance(final, Final) and final.stop_reason == "error"
    assert "has no turn 2" in final.meta["error"]


def _processes_running(command: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and cmdline.replace(b"\0", b" ").strip() == command.encode():
            found.append(int(entry))
    return found


def _wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_ctrl_c_cancels_the_run(tmp_path, workspace, sandbox):
    command = f"sleep 60.{random.randrange(10**8):08d}"
    replay = write_replay(
        tmp_path / "r.jsonl", "Waiting.\n" + call("run_terminal_cmd", command=command), "never"
    )
    transcript = tmp_path / "t.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.cli",
            "agent",
            "--workspace",
            str(workspace),
            "--policy",
            f"replay:{replay}",
            "--transcript",
            str(transcript),
            "--sandbox",
            sandbox,
            "wait",
        ],
        cwd=PROJECT,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def started() -> bool:
            if not transcript.exists():
                return False
            has_call = any(isinstance(e, ToolCall) for e in read_events(transcript))
            return has_call and bool(_processes_running(command))

        assert _wait_for(started), "the command never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert out == ""
    assert "run ended: cancelled" in err
    assert "Traceback" not in err
    events = read_events(transcript)
    assert isinstance(events[-1], Final)
    assert events[-1].stop_reason == "cancelled"
    assert not any(isinstance(e, ToolResult) for e in events)
    assert _wait_for(lambda: not _processes_running(command), 5), _processes_running(command)


def test_version_and_help():
    proc = tachy("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("tachy ")
    proc = tachy("agent", "--help")
    assert proc.returncode == 0
    for option in ("--workspace", "--policy", "--transcript", "--max-turns"):
        assert option in proc.stdout
    proc = tachy("agent")
    assert proc.returncode == 2
    assert "PROMPT" in proc.stderr


def test_ctrl_c_before_the_run_starts_exits_130(monkeypatch, capsys):
    from server import cli

    async def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_agent", interrupted)
    assert cli.main(["agent", "task"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_codebase_search_uses_the_workspace_index(tmp_path, workspace):
    (workspace / "src" / "settings.py").write_text(
        "def load_settings_file(path):\n    with open(path) as handle:\n        return handle.read()\n"
    )
    replay = write_replay(
        tmp_path / "search.jsonl", call("codebase_search", query="load settings file"), "Found it."
    )
    transcript = tmp_path / "t.jsonl"
    proc = tachy(
        "agent", "--workspace", str(workspace), "--policy", f"replay:{replay}",
        "--transcript", str(transcript), "find the settings loader",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = next(e for e in read_transcript(transcript) if isinstance(e, ToolResult))
    assert not result.is_error, result.content
    assert result.content.startswith("src/settings.py:1-3 load_settings_file\n")


def _path_actions(parser: argparse.ArgumentParser):
    """(command, action) for every option and argument naming a file or directory."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _path_actions(sub)
        elif action.metavar in ("DIR", "FILE", "PATH", "CHECKPOINT_DIR"):
            yield parser.prog, action


def test_every_path_argument_is_made_absolute_where_it_is_parsed(tmp_path, monkeypatch):
    """One helper at the edge: a relative path means the same wherever the work runs
    (a relative --out once named no interpreter for the PyPI test runs)."""
    parser = build_parser()
    found = list(_path_actions(parser))
    assert len(found) >= 20
    assert [f"{prog} {a.dest}" for prog, a in found if a.type is not path_arg] == []
    monkeypatch.chdir(tmp_path)
    args = parser.parse_args(["tasks", "build", "--local", "a", "../b", "--out", "runs/tasks"])
    assert args.out == tmp_path / "runs" / "tasks"
    assert args.local == [tmp_path / "a", tmp_path.parent / "b"]
    args = parser.parse_args(["agent", "hi"])
    assert args.workspace == tmp_path and args.transcript is None
    args = parser.parse_args(["train", "plot", "runs/rl", "../s1", "--out", "~/m.csv"])
    assert args.dirs == [tmp_path / "runs" / "rl", tmp_path.parent / "s1"]
    assert args.out == Path.home() / "m.csv"
