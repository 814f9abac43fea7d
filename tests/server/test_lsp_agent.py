"""Agent runs through `tachy serve`, end to end: a real server subprocess driven by
an editor-like pytest-lsp client (tests/server/lsp_client.py) and replayed turns.

Covers the streaming of transcript events, parity of every tool result with a run
of the same turns through the plain Executor (what `tachy agent` and the trainer
run), the review flow for agent edits (accept, reject, auto-apply and revert),
stale and unsaved editor text, cancellation, concurrent sessions, failing policies
and a client that vanishes mid-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from agent import events as ev
from agent.executor import Executor
from agent.lints import LintRunner
from agent.parser import format_call
from agent.policy import ReplayPolicy
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ToolContext
from agent.workspace import Workspace
from server import protocol as p
from tests.conftest import call_tool, make_context, make_repo
from tests.server.lsp_client import (
    CLIENTS,
    PROJECT,
    VSCODE,
    EditorClient,
    RawConnection,
    apply_text_edits,
    server_command,
)
from tests.server.lsp_client import lsp_session as _lsp_session

# A generous bound for things that should happen soon; it only turns a hang into a
# failure, nothing measures time.
PATIENCE_S = 60.0

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
FIX_ADD = {
    "path": "src/calc.py",
    "old_string": "def add(a, b):\n    return a - b",
    "new_string": "def add(a, b):\n    return a + b",
}
# A command that blocks until the test creates the file `go` in the workspace: it
# orders what the test does against what the agent does, without timing.
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"


def call(tool: str, /, **params: Any) -> str:
    return format_call(tool, {key: str(value) for key, value in params.items()})


def turn(*parts: str) -> str:
    """One assistant turn: prose and tool calls, a line apart (parallel calls)."""
    return "\n".join(parts)


def write_turns(path: Path, *turns: str) -> str:
    """A replay file of `turns` (one assistant turn each); returns its policy spec."""
    path.write_text("".join(json.dumps({"text": turn}) + "\n" for turn in turns))
    return f"replay:{path}"


def options(approval: str = "auto", **extra: Any) -> dict[str, Any]:
    return {"approval": approval, "index": {"dense": False}, **extra}


@contextlib.asynccontextmanager
async def serve(
    root: Path, client: str = VSCODE, approval: str = "auto", **extra: Any
) -> AsyncIterator[EditorClient]:
    """The server with `root` as its folder, once the folder is registered (and
    indexed), so that runs find it."""
    async with _lsp_session([root], capabilities=client, options=options(approval, **extra)) as ed:
        await ed.wait_indexed(PATIENCE_S)
        yield ed


async def run(ed: EditorClient, session_id: str, policy: str | None = None, **params: Any):
    body = {"prompt": "fix the add function", "sessionId": session_id, **params}
    if policy is not None:
        body["policy"] = policy
    return await asyncio.wait_for(ed.request(p.AGENT_RUN, body), PATIENCE_S)


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def result_of(ed: EditorClient, session_id: str, call_id: str) -> dict[str, Any] | None:
    for event in ed.session_events(session_id):
        if event["event"] == "tool_result" and event["call_id"] == call_id:
            return event
    return None


def proposals_in(ed: EditorClient, state: str) -> list[dict[str, Any]]:
    return [prop for prop in ed.proposals if prop["state"] == state]


def running(marker: str) -> list[str]:
    """Processes whose command line holds `marker` (pids)."""
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return found.stdout.split()


async def eventually(condition: Callable[[], Any]) -> bool:
    """True once `condition` holds (a process takes a moment to start or be reaped)."""
    for _ in range(int(PATIENCE_S / 0.05)):
        if condition():
            return True
        await asyncio.sleep(0.05)
    return False


async def gone(marker: str) -> bool:
    return await eventually(lambda: not running(marker))


async def round_trip(ed: EditorClient) -> None:
    """Messages are handled in order: once this answer arrives, every notification
    sent before it (didChange) has been handled by the server."""
    await ed.request(p.REVIEW_LIST, {})


def applied_to(text: str, edit: dict[str, Any], uri: str) -> str:
    """`text` with a WorkspaceEdit's text edits for `uri` applied."""
    if "documentChanges" in edit:
        edits = [
            e
            for change in edit["documentChanges"]
            if change.get("textDocument", {}).get("uri") == uri
            for e in change["edits"]
        ]
    else:
        edits = edit["changes"][uri]
    return apply_text_edits(text, edits)


def check_edit_shape(edit: dict[str, Any], client: str, uri: str, version: int) -> None:
    """VS Code takes versioned documentChanges; Neovim's capabilities do not say so,
    so it gets plain `changes`."""
    if client == VSCODE:
        (change,) = edit["documentChanges"]
        assert change["textDocument"] == {"uri": uri, "version": version}
    else:
        assert "documentChanges" not in edit
        assert list(edit["changes"]) == [uri]


# ------------------------------------------------------------------ streaming
@pytest.mark.parametrize("client", CLIENTS)
async def test_run_streams_every_event_before_its_answer(tmp_path: Path, client: str) -> None:
    root = make_repo(tmp_path / "repo")
    # A relative replay path resolves against the workspace folder.
    write_turns(
        root / "turns.jsonl",
        turn(
            "Let me look.", call("read_file", path="src/calc.py"), call("grep", pattern="def add")
        ),
        call("edit_file", **FIX_ADD),
        "I fixed add.",
    )
    async with serve(root, client, policy="replay:turns.jsonl") as ed:
        answer = await run(ed, "s1")
        received = list(ed.events)  # exactly what had arrived with the answer

    assert answer == {
        "sessionId": "s1",
        "stopReason": "end_turn",
        "finalText": "I fixed add.",
        "changedFiles": ["src/calc.py"],
    }
    assert [e["sessionId"] for e in received] == ["s1"] * len(received)
    assert [e["seq"] for e in received] == list(range(len(received)))
    events = [e["event"] for e in received]
    kinds = [e["event"] for e in events]
    assert kinds == [
        "run_start",
        "tool_call", "tool_call", "assistant", "tool_result", "tool_result",
        "tool_call", "assistant", "tool_result",
        "assistant",
        "final",
    ]  # fmt: skip
    # Each event is a transcript event exactly as a JSONL transcript holds it.
    for event in events:
        assert ev.to_dict(ev.decode_event(json.dumps(event))) == event
    assert events[1]["args"] == {"path": "src/calc.py"}
    assert [e["call_id"] for e in of(events, "tool_result")] == ["call_1_0", "call_1_1", "call_2_0"]
    assert not any(e["is_error"] for e in of(events, "tool_result"))
    assert events[-1]["text"] == "I fixed add."
    assert events[-1]["stop_reason"] == "end_turn"
    assert (root / "src" / "calc.py").read_text() == FIXED


# --------------------------------------------------------------------- parity
MUL = "import os\n\n\ndef mul(a, b):\n    return a * b\n"  # with a lint error
PARITY_TURNS = [
    turn(
        "I will look around first.",
        call("read_file", path="src/calc.py"),
        call("list_dir"),
        call("list_dir", path="src", depth=1),
        call("file_search", query="calc"),
        call("grep", pattern="return a", glob="*.py"),
        call("codebase_search", query="add two numbers"),
        call("todo_write", todos="- [~] fix add\n- [ ] add mul"),
        call("read_file", path=".env"),
        call("read_file", path="src/nope.py"),
    ),
    turn(
        call("edit_file", **FIX_ADD),
        call("write_file", path="src/mul.py", content=MUL),
        call("run_terminal_cmd", command='python3 -c "print(1+1)"'),
        call("edit_file", path="src/calc.py", old_string="no such text", new_string="x"),
    ),
    turn(
        call("delete_file", path="README.md"),
        call("read_lints", paths="src"),
        call("grep", pattern="def ", path="src"),
        call("codebase_search", query="mul function"),
        call("run_terminal_cmd", command="ls src && cat src/calc.py"),
        call("read_file", path="src/mul.py", start_line=4),
        call("todo_write", todos="- [x] fix add\n- [x] add mul"),
        '<tool_call name="no_such_tool">\n<path>x</path>\n</tool_call>',
    ),
    "Fixed add and added mul.",
]


async def run_in_training(root: Path, policy: str) -> list[ev.Event]:
    """The turns through the Executor as `tachy agent` builds it (server/cli.py)."""
    from index.indexer import FreshIndex

    workspace = Workspace(root)
    index = FreshIndex(workspace.root)
    ctx = ToolContext(
        workspace=workspace,
        sandbox=Sandbox(workspace, SandboxConfig()),
        linters=LintRunner(workspace),
        index=index,
    )
    replay = ReplayPolicy.from_file(policy.removeprefix("replay:"))
    executor = Executor(ctx, replay)
    try:
        result = await asyncio.wait_for(executor.run("fix the add function"), PATIENCE_S)
    finally:
        index.close()
    assert result.stop_reason == "end_turn"
    return executor.events


def calls_and_results(events: list[dict[str, Any]]) -> tuple[list, list]:
    calls = [(e["call_id"], e["tool"], e["args"]) for e in events if e["event"] == "tool_call"]
    results = [
        (e["call_id"], e["tool"], e["is_error"], e["content"])
        for e in events
        if e["event"] == "tool_result"
    ]
    return calls, results


def without_meta(event: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in event.items() if key != "meta"}


@pytest.mark.parametrize("client", CLIENTS)
async def test_tool_results_are_byte_identical_to_training(tmp_path: Path, client: str) -> None:
    editor_root = make_repo(tmp_path / "editor" / "repo")
    training_root = make_repo(tmp_path / "training" / "repo")
    policy = write_turns(tmp_path / "turns.jsonl", *PARITY_TURNS)

    # Dense search on both sides, as shipped: codebase_search fuses both retrievers.
    async with serve(editor_root, client, index={"dense": True}) as ed:
        uri = ed.open(editor_root / "src" / "calc.py")  # edited through the editor
        answer = await run(ed, "parity", policy)
    assert answer["stopReason"] == "end_turn"
    in_editor = ed.session_events("parity")
    in_training = [ev.to_dict(e) for e in await run_in_training(training_root, policy)]

    editor_calls, editor_results = calls_and_results(in_editor)
    training_calls, training_results = calls_and_results(in_training)
    assert editor_calls == training_calls
    assert len(editor_results) == sum(turn.count("</tool_call>") for turn in PARITY_TURNS)
    for mine, theirs in zip(editor_results, training_results, strict=True):
        assert mine == theirs
    # The whole transcripts agree, but for `meta` (durations, the machine's paths).
    assert [without_meta(e) for e in in_editor] == [without_meta(e) for e in in_training]
    # The run did use every tool, with errors where expected.
    tools = {tool for _, tool, _ in editor_calls}
    assert tools >= {
        "read_file", "list_dir", "file_search", "grep", "codebase_search", "edit_file",
        "write_file", "delete_file", "read_lints", "todo_write", "run_terminal_cmd",
    }  # fmt: skip
    errors = [tool for _, tool, is_error, _ in editor_results if is_error]
    assert errors == ["read_file", "read_file", "edit_file", "no_such_tool"]
    # Both workspaces end the same.
    assert ed.texts[uri] == FIXED
    for rel in ("src/calc.py", "src/mul.py"):
        assert (editor_root / rel).read_bytes() == (training_root / rel).read_bytes()
    assert not (editor_root / "README.md").exists()
    assert not (training_root / "README.md").exists()


# --------------------------------------------------------------------- review
@pytest.mark.parametrize("client", CLIENTS)
async def test_accepted_edit_is_applied_through_the_editor(tmp_path: Path, client: str) -> None:
    root = make_repo(tmp_path / "repo")
    policy = write_turns(tmp_path / "turns.jsonl", call("edit_file", **FIX_ADD), "Fixed.")
    expected = await call_tool(make_context(make_repo(tmp_path / "plain")), "edit_file", **FIX_ADD)

    async with serve(root, client, approval="review") as ed:
        uri = ed.open(root / "src" / "calc.py")
        running_run = asyncio.create_task(run(ed, "rev", policy))
        (proposal,) = await ed.wait_for(lambda: proposals_in(ed, "pending"), PATIENCE_S)

        assert proposal["sessionId"] == "rev"
        assert proposal["uri"] == uri
        assert (proposal["path"], proposal["kind"]) == ("src/calc.py", "edit")
        check_edit_shape(proposal["edit"], client, uri, version=1)
        assert applied_to(CALC, proposal["edit"], uri) == FIXED
        # Nothing changes before the user decides.
        assert (root / "src" / "calc.py").read_text() == CALC
        assert ed.texts[uri] == CALC
        assert ed.applied == []
        listed = await ed.request(p.REVIEW_LIST, {"sessionId": "rev"})
        assert [(x["proposalId"], x["state"]) for x in listed["proposals"]] == [
            (proposal["proposalId"], "pending")
        ]
        assert (await ed.request(p.REVIEW_LIST, {"sessionId": "other"}))["proposals"] == []

        decision = await ed.request(p.REVIEW_ACCEPT, {"proposalId": proposal["proposalId"]})
        assert decision["ok"] is True
        assert decision["state"] == "applied"
        answer = await running_run
        # A second accept is harmless.
        again = await ed.request(p.REVIEW_ACCEPT, {"proposalId": proposal["proposalId"]})
        pending = await ed.request(p.REVIEW_LIST, {})

    assert answer["stopReason"] == "end_turn"
    assert answer["changedFiles"] == ["src/calc.py"]
    assert ed.texts[uri] == FIXED  # the buffer, through workspace/applyEdit
    assert len(ed.applied) == 1
    assert (root / "src" / "calc.py").read_text() == FIXED
    result = result_of(ed, "rev", "call_1_0")
    assert result is not None
    assert (result["is_error"], result["content"]) == expected
    assert [x["state"] for x in ed.proposals] == ["pending", "applied"]
    assert again["ok"] is True
    assert [x["state"] for x in pending["proposals"]] == ["applied"]


@pytest.mark.parametrize("client", CLIENTS)
async def test_rejected_edit_changes_nothing(tmp_path: Path, client: str) -> None:
    root = make_repo(tmp_path / "repo")
    policy = write_turns(tmp_path / "turns.jsonl", call("edit_file", **FIX_ADD), "Gave up.")

    async with serve(root, client, approval="review") as ed:
        uri = ed.open(root / "src" / "calc.py")
        running_run = asyncio.create_task(run(ed, "rev", policy))
        (proposal,) = await ed.wait_for(lambda: proposals_in(ed, "pending"), PATIENCE_S)
        decision = await ed.request(p.REVIEW_REJECT, {"proposalId": proposal["proposalId"]})
        answer = await running_run
        late_accept = await ed.request(p.REVIEW_ACCEPT, {"proposalId": proposal["proposalId"]})
        with pytest.raises(JsonRpcException, match="no proposal"):
            await ed.request(p.REVIEW_ACCEPT, {"proposalId": "rev/999"})

    assert decision["ok"] is True
    assert decision["state"] == "rejected"
    assert answer["stopReason"] == "end_turn"
    assert answer.get("changedFiles", []) == []  # empty lists are left out
    result = result_of(ed, "rev", "call_1_0")
    assert result is not None
    assert result["is_error"] is True
    assert "rejected" in result["content"]
    assert (root / "src" / "calc.py").read_text() == CALC
    assert ed.texts[uri] == CALC
    assert ed.applied == []
    assert late_accept["ok"] is False
    assert late_accept["state"] == "rejected"


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_client_without_review_ui_is_asked(tmp_path: Path, client: str) -> None:
    """A plain LSP client (no tachy extension) gets each edit as a standard
    window/showMessageRequest showing the diff: Accept applies it, Reject refuses it,
    and dismissing the question rejects rather than leaving the run waiting."""
    root = make_repo(tmp_path / "repo")
    fix_sub = {**FIX_ADD, "old_string": "def sub(a, b):\n    return a - b"}
    fix_sub["new_string"] = "def sub(a, b):\n    return b - a"
    notes = {"path": "NOTES.md", "content": "notes\n"}
    policy = write_turns(
        tmp_path / "turns.jsonl",
        call("edit_file", **FIX_ADD),
        call("edit_file", **fix_sub),
        call("write_file", **notes),
        "Done.",
    )
    answers = ["Accept", "Reject", None]
    questions: list[str] = []
    async with _lsp_session(
        [root], capabilities=client, options=options("review"), review_ui=False
    ) as ed:

        @ed.client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        def ask(params: types.ShowMessageRequestParams) -> types.MessageActionItem | None:
            questions.append(params.message)
            assert [a.title for a in params.actions or []] == ["Accept", "Reject"]
            title = answers[len(questions) - 1]
            return types.MessageActionItem(title=title) if title else None

        await ed.wait_indexed(PATIENCE_S)
        answer = await run(ed, "ask", policy)

    assert answer["stopReason"] == "end_turn"
    assert questions[0].startswith("tachy wants to change src/calc.py:")
    assert "-    return a - b" in questions[0] and "+    return a + b" in questions[0]
    assert questions[2].startswith("tachy wants to create NOTES.md")
    results = [result_of(ed, "ask", f"call_{n}_0") for n in (1, 2, 3)]
    assert [r["is_error"] for r in results if r] == [False, True, True]
    assert "rejected" in results[1]["content"] and "rejected" in results[2]["content"]
    assert (root / "src" / "calc.py").read_text() == FIXED
    assert not (root / "NOTES.md").exists()


async def test_typing_while_an_edit_waits_for_review_refuses_it(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    policy = write_turns(tmp_path / "turns.jsonl", call("edit_file", **FIX_ADD), "Done.")
    users = CALC + "# typed while the edit waited\n"
    async with serve(root, approval="review") as ed:
        uri = ed.open(root / "src" / "calc.py")
        running_run = asyncio.create_task(run(ed, "typing", policy))
        (proposal,) = await ed.wait_for(lambda: proposals_in(ed, "pending"), PATIENCE_S)
        ed.change(uri, users)
        decision = await ed.request(p.REVIEW_ACCEPT, {"proposalId": proposal["proposalId"]})
        await running_run

    assert decision["ok"] is False
    assert decision["state"] == "failed"
    assert "changed in the editor while the edit waited for review" in decision["message"]
    result = result_of(ed, "typing", "call_1_0")
    assert result is not None
    assert result["is_error"] is True
    assert decision["message"] in result["content"]
    assert ed.texts[uri] == users
    assert ed.applied == []
    assert (root / "src" / "calc.py").read_text() == CALC


async def test_cancel_releases_an_edit_waiting_for_review(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    policy = write_turns(tmp_path / "turns.jsonl", call("edit_file", **FIX_ADD), "Done.")
    async with serve(root, approval="review") as ed:
        uri = ed.open(root / "src" / "calc.py")
        running_run = asyncio.create_task(run(ed, "waiting", policy))
        (proposal,) = await ed.wait_for(lambda: proposals_in(ed, "pending"), PATIENCE_S)
        cancelled = await ed.request(p.AGENT_CANCEL, {"sessionId": "waiting"})
        answer = await running_run
        await ed.wait_for(lambda: proposals_in(ed, "cancelled"), PATIENCE_S)
        late = await ed.request(p.REVIEW_ACCEPT, {"proposalId": proposal["proposalId"]})
        listed = await ed.request(p.REVIEW_LIST, {})

    assert cancelled["cancelled"] is True
    assert answer["stopReason"] == "cancelled"
    assert (late["ok"], late["state"]) == (False, "cancelled")
    assert listed["proposals"] == []
    assert ed.texts[uri] == CALC
    assert ed.applied == []
    assert (root / "src" / "calc.py").read_text() == CALC


@pytest.mark.parametrize("client", CLIENTS)
async def test_auto_applied_edits_can_be_reverted(tmp_path: Path, client: str) -> None:
    root = make_repo(tmp_path / "repo")
    fix_sub = {
        "path": "src/calc.py",
        "old_string": "def sub(a, b):\n    return a - b",
        "new_string": "def sub(a, b):\n    return a - b  # checked",
    }
    policy = write_turns(
        tmp_path / "turns.jsonl",
        call("edit_file", **FIX_ADD),
        call("edit_file", **fix_sub),  # a second edit to the same open document
        call("write_file", path="src/new.py", content="NEW = 1\n"),
        "Done.",
    )
    both = FIXED.replace("return a - b\n", "return a - b  # checked\n")

    async with serve(root, client, approval="auto") as ed:
        uri = ed.open(root / "src" / "calc.py")
        answer = await run(ed, "auto", policy)
        assert answer["changedFiles"] == ["src/calc.py", "src/new.py"]
        first, second, created = ed.proposals
        # Applied at once: no proposal ever waited.
        assert [x["state"] for x in ed.proposals] == ["applied"] * 3
        check_edit_shape(first["edit"], client, uri, version=1)
        check_edit_shape(second["edit"], client, uri, version=2)
        assert ed.texts[uri] == both
        assert (root / "src" / "calc.py").read_text() == both
        results = of(ed.session_events("auto"), "tool_result")
        assert [r["is_error"] for r in results] == [False, False, False]

        # Reverting, newest first, walks back through the checkpoints.
        reverted = [
            await ed.request(p.REVIEW_REJECT, {"proposalId": x["proposalId"]})
            for x in (created, second, first)
        ]
        assert [(r["ok"], r["state"]) for r in reverted] == [(True, "reverted")] * 3
        assert not (root / "src" / "new.py").exists()
        assert ed.texts[uri] == CALC
        assert (root / "src" / "calc.py").read_text() == CALC
        again = await ed.request(p.REVIEW_REJECT, {"proposalId": first["proposalId"]})
        assert (again["ok"], again["state"]) == (False, "reverted")
        assert (await ed.request(p.REVIEW_LIST, {}))["proposals"] == []


@pytest.mark.parametrize("client", CLIENTS)
async def test_revert_keeps_a_later_change_by_the_user(tmp_path: Path, client: str) -> None:
    root = make_repo(tmp_path / "repo")
    policy = write_turns(
        tmp_path / "turns.jsonl",
        turn(
            call("edit_file", **FIX_ADD), call("write_file", path="README.md", content="# calc\n")
        ),
        "Done.",
    )
    async with serve(root, client, approval="auto") as ed:
        uri = ed.open(root / "src" / "calc.py")
        await run(ed, "auto", policy)
        # The two calls ran in parallel: their proposals come in either order.
        on_disk, in_buffer = sorted(ed.proposals, key=lambda x: x["path"])
        assert (in_buffer["path"], on_disk["path"]) == ("src/calc.py", "README.md")

        users = FIXED + "\n# the user's note\n"
        ed.change(uri, users)  # typed after the agent's edit, not saved
        (root / "README.md").write_text("# the user's readme\n")
        refused = [
            await ed.request(p.REVIEW_REJECT, {"proposalId": x["proposalId"]})
            for x in (in_buffer, on_disk)
        ]
        listed = await ed.request(p.REVIEW_LIST, {})

    for answer in refused:
        assert answer["ok"] is False
        assert answer["state"] == "applied"
        assert "not reverted" in answer["message"]
    assert ed.texts[uri] == users
    assert (root / "src" / "calc.py").read_text() == FIXED
    assert (root / "README.md").read_text() == "# the user's readme\n"
    assert len(listed["proposals"]) == 2  # still applied, still revertible later


# ---------------------------------------------------- stale and unsaved text
@pytest.mark.parametrize("client", CLIENTS)
async def test_edit_of_a_document_changed_since_it_was_read_is_refused(
    tmp_path: Path, client: str
) -> None:
    root = make_repo(tmp_path / "repo")
    policy = write_turns(
        tmp_path / "turns.jsonl",
        call("read_file", path="src/calc.py"),
        # The edit waits for the command (it may touch anything), and the command
        # waits for the test, which changes the document in between.
        turn(call("run_terminal_cmd", command=WAIT_FOR_GO), call("edit_file", **FIX_ADD)),
        "Done.",
    )
    users = CALC + "\n\ndef mul(a, b):\n    return a * b\n"
    async with serve(root, client, approval="auto") as ed:
        uri = ed.open(root / "src" / "calc.py")
        running_run = asyncio.create_task(run(ed, "stale", policy))
        await ed.wait_for(lambda: result_of(ed, "stale", "call_1_0"), PATIENCE_S)
        ed.change(uri, users)
        await round_trip(ed)
        (root / "go").touch()
        answer = await running_run

    assert answer["stopReason"] == "end_turn"
    assert answer.get("changedFiles", []) == []  # empty lists are left out
    result = result_of(ed, "stale", "call_2_1")
    assert result is not None
    assert result["is_error"] is True
    assert "src/calc.py was changed in the editor since you last read it" in result["content"]
    assert ed.texts[uri] == users
    assert ed.applied == []
    assert (root / "src" / "calc.py").read_text() == CALC


async def test_the_agent_reads_unsaved_text(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    policy = write_turns(
        tmp_path / "turns.jsonl",
        turn(call("read_file", path="src/calc.py"), call("grep", pattern="unsaved|a - b")),
        "It is unsaved.",
    )
    unsaved = CALC.replace("return a - b\n", "return a + b  # unsaved\n", 1)
    async with serve(root) as ed:
        uri = ed.open(root / "src" / "calc.py")
        ed.change(uri, unsaved)
        await run(ed, "read", policy)

    read, grep = result_of(ed, "read", "call_1_0"), result_of(ed, "read", "call_1_1")
    assert read is not None and grep is not None
    assert not read["is_error"]
    assert "return a + b  # unsaved" in read["content"]
    # grep searches the buffer in place of the file: line 2 is the unsaved one.
    assert grep["content"].splitlines()[:2] == [
        "src/calc.py:2:    return a + b  # unsaved",
        "src/calc.py:6:    return a - b",
    ]
    assert (root / "src" / "calc.py").read_text() == CALC


# --------------------------------------------------------------------- cancel
def sleeper(tmp_path: Path) -> tuple[str, str]:
    """A unique `sleep` command line, to find its process; and a replay of it."""
    marker = f"sleep 30.{uuid.uuid4().int % 10**9}"
    policy = write_turns(
        tmp_path / f"{marker.replace(' ', '-')}.jsonl",
        call("run_terminal_cmd", command=marker, timeout_s=600),
        "Slept.",
    )
    return marker, policy


async def test_cancel_stops_the_run_and_kills_its_command(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    marker, policy = sleeper(tmp_path)
    async with serve(root) as ed:
        running_run = asyncio.create_task(run(ed, "long", policy))
        await ed.wait_for(lambda: running(marker), PATIENCE_S)
        cancelled = await ed.request(p.AGENT_CANCEL, {"sessionId": "long"})
        answer = await running_run
        twice = await ed.request(p.AGENT_CANCEL, {"sessionId": "long"})
        unknown = await ed.request(p.AGENT_CANCEL, {"sessionId": "never-started"})
        assert await gone(marker)
        # The server goes on serving runs.
        after = await run(ed, "after", write_turns(tmp_path / "after.jsonl", "Fine."))

    assert cancelled == {"cancelled": True, "state": "cancelling"}
    assert answer["sessionId"] == "long"
    assert answer["stopReason"] == "cancelled"
    events = ed.session_events("long")
    assert events[-1]["event"] == "final"
    assert events[-1]["stop_reason"] == "cancelled"
    assert twice["cancelled"] is False
    assert twice["state"] == "finished"
    assert "already finished" in twice["message"]
    assert unknown["cancelled"] is False
    assert unknown["state"] == "unknown"
    assert "never-started" in unknown["message"]
    assert after["stopReason"] == "end_turn"


async def test_cancel_right_after_the_run_request_still_stops_it(tmp_path: Path) -> None:
    """A cancel that arrives while the run is being set up (VS Code gives it a
    progress token first, a round trip) must not be lost."""
    root = make_repo(tmp_path / "repo")
    marker, policy = sleeper(tmp_path)
    async with serve(root, VSCODE) as ed:
        # The folder's index asked for its progress token first.
        await ed.wait_for(lambda: ed.client.progress_reports, PATIENCE_S)
        features = ed.client.protocol.fm.features
        create = features[types.WINDOW_WORK_DONE_PROGRESS_CREATE]
        cancels: list[dict[str, Any]] = []

        async def create_progress(params: types.WorkDoneProgressCreateParams) -> None:
            # The run waits for this answer: cancel it now, while it is starting.
            if not cancels:
                cancels.append(await ed.request(p.AGENT_CANCEL, {"sessionId": "early"}))
            return create(params)

        features[types.WINDOW_WORK_DONE_PROGRESS_CREATE] = create_progress
        answer = await run(ed, "early", policy)

    assert cancels == [{"cancelled": True, "state": "cancelling"}]
    assert answer["stopReason"] == "cancelled"
    assert ed.session_events("early")[-1]["stop_reason"] == "cancelled"
    assert await gone(marker)


async def test_cancel_request_of_the_run_stops_it(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    marker, policy = sleeper(tmp_path)
    async with serve(root) as ed:
        body = {"prompt": "sleep", "sessionId": "req", "policy": policy}
        answer = asyncio.ensure_future(
            ed.client.protocol.send_request_async(p.AGENT_RUN, body, msg_id="run-req")
        )
        await ed.wait_for(lambda: running(marker), PATIENCE_S)
        ed.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="run-req"))
        with pytest.raises(JsonRpcException) as refused:
            await asyncio.wait_for(answer, PATIENCE_S)
        assert refused.value.code == types.LSPErrorCodes.RequestCancelled
        await ed.wait_for(lambda: of(ed.session_events("req"), "final"), PATIENCE_S)
        assert await gone(marker)
        state = await ed.request(p.AGENT_CANCEL, {"sessionId": "req"})

    (final,) = of(ed.session_events("req"), "final")
    assert final["stop_reason"] == "cancelled"
    assert state["state"] == "finished"


# ------------------------------------------------------------------- sessions
async def test_sessions_run_side_by_side(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    policies = {
        name: write_turns(
            tmp_path / f"{name}.jsonl",
            call("run_terminal_cmd", command=f"{WAIT_FOR_GO}; echo I am {name}"),
            f"{name} is done.",
        )
        for name in ("alpha", "beta")
    }
    async with serve(root) as ed:
        runs = {name: asyncio.create_task(run(ed, name, spec)) for name, spec in policies.items()}
        # Both wait in their command at once.
        await ed.wait_for(
            lambda: all(of(ed.session_events(name), "tool_call") for name in policies), PATIENCE_S
        )
        with pytest.raises(JsonRpcException, match="still running"):
            await run(ed, "alpha", policies["alpha"])
        (root / "go").touch()
        answers = {name: await task for name, task in runs.items()}
        first_events = list(ed.events)
        # A finished session's id may be used again.
        again = await run(ed, "alpha", write_turns(tmp_path / "again.jsonl", "Again."))

    for name in ("alpha", "beta"):
        assert answers[name]["stopReason"] == "end_turn"
        assert answers[name]["finalText"] == f"{name} is done."
        events = [e for e in first_events if e["sessionId"] == name]
        assert [e["seq"] for e in events] == list(range(len(events)))
        (result,) = of([e["event"] for e in events], "tool_result")
        assert f"I am {name}" in result["content"]
        other = "beta" if name == "alpha" else "alpha"
        assert f"I am {other}" not in result["content"]
    assert again["finalText"] == "Again."
    # Its events are numbered afresh.
    assert [e["seq"] for e in ed.events[len(first_events) :]] == [0, 1, 2]


async def test_failing_policies_leave_the_server_serving(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    fine = write_turns(tmp_path / "fine.jsonl", call("list_dir", path="src"), "Listed.")
    async with serve(root) as ed:
        with pytest.raises(JsonRpcException, match="does not exist"):
            await run(ed, "missing", f"replay:{tmp_path / 'missing.jsonl'}")
        with pytest.raises(JsonRpcException, match="not a policy spec"):
            await run(ed, "garbled", "gpt")
        # Nothing listens on port 9: the run ends with an error after its retries,
        # while another run and other requests are answered meanwhile.
        unreachable = asyncio.create_task(run(ed, "down", "openai:http://127.0.0.1:9/v1#m"))
        answer = await run(ed, "fine", fine)
        status = await ed.request(p.INDEX_STATUS, {})
        down = await unreachable

    assert answer["stopReason"] == "end_turn"
    assert status["state"] in ("lexical", "ready")
    assert down["stopReason"] == "error"
    assert "127.0.0.1:9" in down["error"]
    final = ed.session_events("down")[-1]
    assert (final["event"], final["stop_reason"]) == ("final", "error")
    assert ed.session_events("missing") == []


# --------------------------------------------------------------- lost client
async def test_server_exits_cleanly_when_the_client_disconnects(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    marker, policy = sleeper(tmp_path)
    server = await asyncio.create_subprocess_exec(
        *server_command(),
        cwd=PROJECT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    editor = RawConnection(server.stdout, server.stdin)  # type: ignore[arg-type]
    try:
        await editor.initialize([root], options())
        while (await editor.request(p.INDEX_STATUS))["result"]["state"] not in ("lexical", "ready"):
            await asyncio.sleep(0.05)
        run_params = {"prompt": "sleep", "sessionId": "lost", "policy": policy}
        editor.send({"id": "run", "method": p.AGENT_RUN, "params": run_params})
        assert await eventually(lambda: running(marker))

        editor.close()  # the editor is gone, without shutdown or exit
        code = await asyncio.wait_for(server.wait(), PATIENCE_S)
        errors = (await server.stderr.read()).decode()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()

    assert code == 0
    assert "Traceback" not in errors, errors
    assert await eventually(lambda: not running(marker))
