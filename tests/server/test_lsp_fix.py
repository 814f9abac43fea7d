"""From a diagnostic in the editor to an agent run: the "Ask tachy to fix" code
action, its command, and the diagnostics the editor forwards for read_lints. Driven
end to end through `tachy serve` with a replayed policy (no model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from server import protocol as p
from tests.conftest import make_repo
from tests.server.lsp_client import CLIENTS, EditorClient, lsp_session
from tests.server.test_lsp_server import write_replay

OPTIONS = {"index": {"dense": False}, "policy": "replay:turns.jsonl", "approval": "review"}


@pytest.fixture(autouse=True)
def no_policy_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TACHY_POLICY", raising=False)


def diagnostic(line: int, start: int, end: int, message: str, **extra: Any) -> types.Diagnostic:
    return types.Diagnostic(
        range=types.Range(
            start=types.Position(line=line, character=start),
            end=types.Position(line=line, character=end),
        ),
        message=message,
        **extra,
    )


async def code_actions(
    ed: EditorClient, uri: str, diagnostics: list[types.Diagnostic]
) -> list[types.CodeAction | types.Command]:
    rng = (
        diagnostics[0].range
        if diagnostics
        else types.Range(
            start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)
        )
    )
    result = await ed.client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=rng,
            context=types.CodeActionContext(diagnostics=diagnostics),
        )
    )
    return result or []


async def finished(ed: EditorClient, session_id: str) -> list[dict[str, Any]]:
    """The session's events once its `final` event has arrived."""
    await ed.wait_for(
        lambda: any(e["event"] == "final" for e in ed.session_events(session_id)), timeout=60
    )
    return ed.session_events(session_id)


@pytest.mark.parametrize("client", CLIENTS)
async def test_ask_to_fix_a_diagnostic(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    write_replay(repo / "turns.jsonl", "Done.")
    calc = repo / "src" / "calc.py"
    async with lsp_session([repo], capabilities=client, options=OPTIONS) as ed:
        uri = ed.open(calc)
        problem = diagnostic(
            1, 4, 16, "add() subtracts\nits arguments", source="mypy", code="wrong-op"
        )
        other = diagnostic(4, 0, 3, "E302 expected 2 blank lines", source="flake8")
        actions = await code_actions(ed, uri, [problem, other])

        assert len(actions) == 2
        action = actions[0]
        assert isinstance(action, types.CodeAction)
        assert action.title.startswith("Ask tachy to fix")
        assert "add() subtracts" in action.title and "\n" not in action.title
        assert action.kind == types.CodeActionKind.QuickFix
        assert list(action.diagnostics or []) == [problem]
        assert action.command is not None
        assert action.command.command == p.ASK_TO_FIX

        # Executing the command answers with the session at once; the run follows.
        result = await ed.client.workspace_execute_command_async(
            types.ExecuteCommandParams(
                command=action.command.command, arguments=action.command.arguments
            )
        )
        session_id = result["sessionId"]
        assert session_id
        events = await finished(ed, session_id)
        seqs = [e["seq"] for e in ed.events if e["sessionId"] == session_id]
        assert seqs == list(range(len(seqs)))
        start = events[0]
        assert start["event"] == "run_start"
        assert "src/calc.py:2:5" in start["prompt"]
        assert "add() subtracts\nits arguments" in start["prompt"]
        assert "mypy wrong-op" in start["prompt"]
        assert events[-1] == {**events[-1], "text": "Done.", "stop_reason": "end_turn"}


@pytest.mark.parametrize("client", CLIENTS)
async def test_code_actions_outside_the_workspace_or_without_diagnostics(
    tmp_path: Path, client: str
):
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "elsewhere.py"
    outside.write_text("x = 1\n")
    async with lsp_session([repo], capabilities=client, options=OPTIONS) as ed:
        problem = diagnostic(0, 0, 1, "something is wrong")
        # No diagnostic in the context: nothing to offer.
        assert await code_actions(ed, (repo / "src" / "calc.py").as_uri(), []) == []
        # A file outside every workspace folder: the agent could not work on it.
        assert await code_actions(ed, outside.as_uri(), [problem]) == []
        # A document the editor never opened is answered all the same (from disk).
        actions = await code_actions(ed, (repo / "README.md").as_uri(), [problem])
        assert [a.command.command for a in actions] == [p.ASK_TO_FIX]
        # Not a file at all.
        assert await code_actions(ed, "untitled:Untitled-1", [problem]) == []


@pytest.mark.parametrize("client", CLIENTS)
async def test_ask_to_fix_with_bad_arguments_is_an_error(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    async with lsp_session([repo], capabilities=client, options=OPTIONS) as ed:
        for arguments in ([], [{"uri": "file:///x.py"}], [{"nonsense": 1}, 2]):
            with pytest.raises(Exception) as err:
                await ed.client.workspace_execute_command_async(
                    types.ExecuteCommandParams(command=p.ASK_TO_FIX, arguments=arguments)
                )
            assert getattr(err.value, "code", None) == -32602, err.value
        outside = {
            "uri": (tmp_path / "elsewhere.py").as_uri(),
            "diagnostic": {
                "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
                "message": "x",
            },
        }
        with pytest.raises(Exception) as err:
            await ed.client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=p.ASK_TO_FIX, arguments=[outside])
            )
        assert "not in a workspace folder" in str(err.value)
        assert (await ed.request(p.INDEX_STATUS))["folders"]  # still answering


@pytest.mark.parametrize("client", CLIENTS)
async def test_forwarded_diagnostics_reach_read_lints(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    (repo / "notes.ts").write_text("const total: number = 'seven';\nexport { total };\n")
    write_replay(
        repo / "turns.jsonl",
        '<tool_call name="read_lints">\n<paths>\nnotes.ts\n</paths>\n</tool_call>',
        "Found the type error.",
    )
    notes = (repo / "notes.ts").as_uri()
    async with lsp_session([repo], capabilities=client, options=OPTIONS) as ed:
        ed.notify(
            p.DIAGNOSTICS,
            {
                "uri": notes,
                "diagnostics": [
                    {
                        "range": {
                            "start": {"line": 0, "character": 6},
                            "end": {"line": 0, "character": 11},
                        },
                        "message": "Type 'string' is not assignable\n  to type 'number'.",
                        "severity": 1,
                        "code": 2322,
                        "source": "ts",
                    }
                ],
            },
        )
        result = await ed.request(p.AGENT_RUN, {"prompt": "Check notes.ts for problems."})
        assert result["stopReason"] == "end_turn"
        events = ed.session_events(result["sessionId"])
        (lints,) = [e for e in events if e["event"] == "tool_result"]
        assert lints["tool"] == "read_lints" and not lints["is_error"]
        assert "notes.ts:1:7" in lints["content"]
        assert "Type 'string' is not assignable to type 'number'." in lints["content"]
        assert "2322" in lints["content"]

        # An empty list clears what was forwarded, as publishDiagnostics does.
        ed.notify(p.DIAGNOSTICS, {"uri": notes, "diagnostics": []})
        result = await ed.request(p.AGENT_RUN, {"prompt": "Check again."})
        (lints,) = [
            e for e in ed.session_events(result["sessionId"]) if e["event"] == "tool_result"
        ]
        assert "not assignable" not in lints["content"]


@pytest.mark.parametrize("client", CLIENTS)
async def test_malformed_forwarded_diagnostics_are_ignored(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    async with lsp_session([repo], capabilities=client, options=OPTIONS) as ed:
        ed.notify(p.DIAGNOSTICS, {"uri": (repo / "a.ts").as_uri(), "diagnostics": "many"})
        ed.notify(p.DIAGNOSTICS, {"uri": "untitled:1", "diagnostics": []})
        assert (await ed.request(p.INDEX_STATUS))["folders"]
        (warning,) = ed.messages
        assert warning.type == types.MessageType.Warning
        assert p.DIAGNOSTICS in warning.message and "$.diagnostics" in warning.message
