"""`tachy acp` end to end, driven by the protocol's reference TypeScript client
(@agentclientprotocol/sdk, tests/acp_client, installed by scripts/setup-e2e), with the
agent started as a real subprocess and the model replayed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.test_executor import _processes_with, unique_sleep
from tests.conftest import make_repo

PROJECT = Path(__file__).resolve().parents[2]
CLIENT = PROJECT / "tests" / "acp_client"
pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not (CLIENT / "node_modules" / "@agentclientprotocol" / "sdk").is_dir()
        or shutil.which("node") is None,
        reason="the ACP TypeScript SDK is not installed: run scripts/setup-e2e",
    ),
]

READS = (
    'Reading both.\n<tool_call name="read_file">\n<path>src/calc.py</path>\n</tool_call>\n'
    '<tool_call name="read_file">\n<path>README.md</path>\n</tool_call>'
)
EDIT = (
    '<tool_call name="edit_file">\n<path>src/calc.py</path>\n<old_string>\n'
    "def add(a, b):\n    return a - b\n</old_string>\n<new_string>\n"
    "def add(a, b):\n    return a + b\n</new_string>\n</tool_call>"
)
WRITE = (
    '<tool_call name="write_file">\n<path>NOTES.md</path>\n<content>notes</content>\n</tool_call>'
)
TURNS = [READS, EDIT, WRITE, "Fixed add."]


def replay(path: Path, turns: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    return path


def drive(
    tmp_path: Path,
    steps: list[dict],
    policy: str | None,
    buffers: dict | None = None,
    env: dict | None = None,
) -> dict:
    command = [sys.executable, "-m", "server.cli", "acp"]
    scenario = {
        "command": command + (["--policy", policy] if policy else []),
        "buffers": buffers or {},
        "steps": steps,
    }
    file = tmp_path / "scenario.json"
    file.write_text(json.dumps(scenario))
    done = subprocess.run(
        ["node", str(CLIENT / "client.mjs"), str(file)],
        cwd=PROJECT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "TACHY_POLICY": "", "TACHY_CONFIG": str(tmp_path / "none.json"), **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def of(log: list[dict], kind: str) -> list[dict]:
    return [entry for entry in log if entry["kind"] == kind]


def results(log: list[dict]) -> list[tuple[str, str]]:
    """(status, the result text the model saw) of each tool call, in order."""
    out = []
    for entry in of(log, "update"):
        update = entry["update"]
        if update["sessionUpdate"] == "tool_call_update":
            out.append((update["status"], update["content"][-1]["content"]["text"]))
    return out


def test_a_replayed_run_with_parallel_reads_an_allowed_and_a_rejected_edit(tmp_path):
    repo = make_repo(tmp_path / "repo")
    calc = str(repo / "src" / "calc.py")
    unsaved = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b  # unsaved\n"
    run = drive(
        tmp_path,
        [
            {"op": "initialize", "fs": True},
            {"op": "new", "cwd": str(repo)},
            {"op": "prompt", "text": "fix add", "permissions": ["allow", "reject"]},
        ],
        f"replay:{replay(tmp_path / 'r.jsonl', TURNS)}",
        buffers={calc: unsaved},
    )
    log = run["log"]
    (init,) = [e for e in of(log, "response") if e["method"] == "initialize"]
    assert init["result"]["agentInfo"]["name"] == "tachy"
    assert init["result"]["agentCapabilities"]["loadSession"] is True
    # the two reads start before either result arrives: parallel calls
    kinds = [e["update"]["sessionUpdate"] for e in of(log, "update")]
    assert kinds[:4] == ["agent_message_chunk", "tool_call", "tool_call", "tool_call_update"]
    # the unsaved buffer is what the model read, through fs/read_text_file
    status, calc_text = results(log)[0]
    assert status == "completed" and "# unsaved" in calc_text
    assert any(e["path"] == calc and e["buffer"] for e in of(log, "fs_read"))
    # the edit asked, was allowed, and reached the buffer and the disk; its update shows the diff
    allowed, rejected = of(log, "permission")
    assert allowed["toolCall"]["title"] == "Edit src/calc.py" and allowed["answer"] == "allow"
    assert allowed["toolCall"]["toolCallId"] == "call_2_0"  # the edit_file call it is about
    assert allowed["options"] == ["allow", "always", "reject"]
    assert allowed["toolCall"]["content"][0]["type"] == "diff"
    (write,) = of(log, "fs_write")
    assert write["path"] == calc and "return a + b" in write["content"]
    assert "return a + b" in (repo / "src" / "calc.py").read_text()
    edit_update = [
        e["update"] for e in of(log, "update") if e["update"].get("toolCallId") == "call_2_0"
    ]
    assert edit_update[-1]["content"][0]["type"] == "diff"
    # the write was rejected: nothing written, the model told so
    assert rejected["toolCall"]["title"] == "Edit NOTES.md" and rejected["answer"] == "reject"
    assert not (repo / "NOTES.md").exists()
    status, text = results(log)[-1]
    assert status == "failed" and "the user did not allow it" in text
    (stop,) = [e for e in of(log, "response") if e["method"] == "session/prompt"]
    assert stop["result"]["stopReason"] == "end_turn"


def test_the_model_sees_the_same_tool_results_as_through_the_cli(tmp_path):
    """The parity of the LSP and training, extended to ACP: one replay, byte-identical
    results (approval auto, no client file system: the disk, as the CLI reads it)."""
    turns = replay(tmp_path / "r.jsonl", TURNS)
    acp_repo, cli_repo = make_repo(tmp_path / "a" / "repo"), make_repo(tmp_path / "c" / "repo")
    run = drive(
        tmp_path,
        [
            {"op": "initialize", "fs": False},
            {"op": "new", "cwd": str(acp_repo)},
            {"op": "config", "id": "approval", "value": "auto"},
            {"op": "prompt", "text": "fix add"},
        ],
        f"replay:{turns}",
    )
    transcript = tmp_path / "cli.jsonl"
    subprocess.run(
        [sys.executable, "-m", "server.cli", "agent", "--workspace", str(cli_repo),
         "--policy", f"replay:{turns}", "--transcript", str(transcript), "--quiet", "fix add"],
        cwd=PROJECT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    cli = [json.loads(line) for line in transcript.read_text().splitlines()]
    cli_results = [(e["is_error"], e["content"]) for e in cli if e["event"] == "tool_result"]
    acp_results = [(status == "failed", text) for status, text in results(run["log"])]
    assert acp_results == cli_results and len(cli_results) == 4


def test_settings_come_from_the_users_config_file(tmp_path):
    repo = make_repo(tmp_path / "repo")
    config = tmp_path / "settings.json"
    turns = replay(tmp_path / "r.jsonl", TURNS)
    config.write_text(json.dumps({"policy": f"replay:{turns}", "approval": "auto", "maxTurns": 9}))
    run = drive(
        tmp_path,
        [{"op": "initialize"}, {"op": "new", "cwd": str(repo)}, {"op": "prompt", "text": "fix"}],
        None,
        env={"TACHY_CONFIG": str(config)},
    )
    (new,) = [e for e in of(run["log"], "response") if e["method"] == "session/new"]
    options = {o["id"]: o["currentValue"] for o in new["result"]["configOptions"]}
    assert options == {"approval": "auto", "sandbox": "auto"}
    assert not of(run["log"], "permission")  # auto: nothing asked
    assert (repo / "NOTES.md").read_text() == "notes\n"  # write_file ends the file with a newline


def test_a_command_is_asked_for_and_a_cancel_kills_it(tmp_path):
    repo = make_repo(tmp_path / "repo")
    marker = unique_sleep(31)
    command = f'<tool_call name="run_terminal_cmd">\n<command>{marker}</command>\n</tool_call>'
    run = drive(
        tmp_path,
        [
            {"op": "initialize", "fs": True},
            {"op": "new", "cwd": str(repo)},
            {"op": "prompt", "text": "wait", "permissions": ["always"], "cancelOn": "run_terminal_cmd",
             "secondPromptOn": "run_terminal_cmd"},
            {"op": "raw", "method": "session/prompt", "params": {"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]}},
        ],
        f"replay:{replay(tmp_path / 'r.jsonl', [command, 'never'])}",
    )  # fmt: skip
    log = run["log"]
    (asked,) = of(log, "permission")
    assert (
        asked["toolCall"]["title"] == f"Run `{marker}`" and asked["toolCall"]["kind"] == "execute"
    )
    stop = [e for e in of(log, "response") if e["method"] == "session/prompt"]
    assert [s["result"]["stopReason"] for s in stop] == ["cancelled"]
    errors = of(log, "error")
    assert any("already running" in json.dumps(e) for e in errors)  # the second prompt
    assert any("there is no session 'nope'" in json.dumps(e) for e in errors)
    assert not _processes_with(marker)


def test_a_session_is_loaded_again_by_a_new_agent_process(tmp_path):
    repo = make_repo(tmp_path / "repo")
    turns = replay(tmp_path / "r.jsonl", [READS, "Both read."])
    first = drive(
        tmp_path,
        [{"op": "initialize"}, {"op": "new", "cwd": str(repo)}, {"op": "prompt", "text": "read"}],
        f"replay:{turns}",
    )
    scenario = [{"op": "initialize"}, {"op": "raw", "method": "session/load",
                 "params": {"cwd": str(repo), "sessionId": first["sessionId"], "mcpServers": []}}]  # fmt: skip
    second = drive(tmp_path, scenario, f"replay:{turns}")
    replayed = [e["update"] for e in of(second["log"], "update")]
    originally = [e["update"] for e in of(first["log"], "update")]
    assert replayed[0] == {
        "sessionUpdate": "user_message_chunk",
        "content": {"type": "text", "text": "read"},
    }
    assert replayed[1:] == originally
    bad = [{"op": "initialize"}, {"op": "raw", "method": "session/load",
            "params": {"cwd": str(repo), "sessionId": "0123456789abcdef", "mcpServers": []}}]  # fmt: skip
    assert "there is no session" in json.dumps(
        of(drive(tmp_path, bad, f"replay:{turns}")["log"], "error")
    )


def test_a_client_that_vanishes_mid_command_leaves_no_process(tmp_path):
    repo = make_repo(tmp_path / "repo")
    marker = unique_sleep(32)
    turns = replay(
        tmp_path / "r.jsonl",
        [f'<tool_call name="run_terminal_cmd">\n<command>{marker}</command>\n</tool_call>'],
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "acp", "--policy", f"replay:{turns}"],
        cwd=PROJECT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip

    def send(id_: int, method: str, params: dict) -> None:
        agent.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}) + "\n"
        )
        agent.stdin.flush()

    def until(predicate) -> dict:
        while True:
            message = json.loads(agent.stdout.readline())
            if predicate(message):
                return message

    send(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    until(lambda m: m.get("id") == 1)
    send(2, "session/new", {"cwd": str(repo), "mcpServers": []})
    session = until(lambda m: m.get("id") == 2)["result"]["sessionId"]
    send(3, "session/config_option", {})  # an unknown method: an error, the agent goes on
    # an answer to a permission request never made: ignored
    agent.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 77, "result": {"outcome": {
        "outcome": "selected", "optionId": "allow"}}}) + "\n")  # fmt: skip
    send(
        4,
        "session/set_config_option",
        {"sessionId": session, "configId": "approval", "value": "auto"},
    )
    until(lambda m: m.get("id") == 4)
    send(5, "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]})
    until(
        lambda m: (
            m.get("method") == "session/update" and m["params"]["update"].get("kind") == "execute"
        )
    )
    assert _wait_until(lambda: _processes_with(marker))
    agent.stdin.close()  # the client is gone
    agent.stdout.close()
    assert agent.wait(30) == 0
    assert _wait_until(lambda: not _processes_with(marker))


def _wait_until(predicate, timeout: float = 15.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
