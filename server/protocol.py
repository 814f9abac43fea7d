"""The tachy/* LSP extensions: every custom method declared once, with its types.

Editor extensions mirror this file (one declaration per method, like rust-analyzer's
`lsp_ext.ts`). Field names are camelCase on the wire, as everywhere in LSP. Params a
handler receives are decoded with `decode`, so a malformed request is answered with
an InvalidParams error that names the bad field.

Direction: C→S is a request or notification from the editor, S→C from the server.
METHODS and COMMANDS at the end list each method with its params and result types.

This file is the protocol's one source: `python -m server.protocol --write` writes
extensions/protocol/tachy.json from it (`--check` says whether that file is current);
tests/extensions/test_protocol.py checks the editor extensions against that file.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, NamedTuple

import msgspec


class Wire(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=False):
    """Base of every tachy/* params and result type."""


class ParamsError(ValueError):
    """Params that do not fit a method's type; the message names the bad field."""


def decode(params: Any, kind: type[Wire]) -> Any:
    """Typed params from the JSON pygls hands over (absent or empty params count as {})."""
    if params is None or params == []:
        params = {}
    try:
        return msgspec.convert(params, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise ParamsError(f"invalid params: {exc}") from None


def encode(value: Wire | list | None) -> Any:
    return msgspec.to_builtins(value)


# -------------------------------------------------------------------- search
SEARCH = "tachy/search"  # C→S request


class Position(Wire):
    line: int  # 0-based
    character: int


class Range(Wire):
    start: Position
    end: Position


class SearchParams(Wire):
    query: str
    limit: int = 10
    # Workspace-relative globs (`src/**/*.py`) the results must match.
    paths: list[str] | None = None
    mode: Literal["hybrid", "lexical", "dense"] = "hybrid"


class SearchItem(Wire):
    uri: str
    range: Range  # whole lines of the chunk
    score: float
    snippet: str
    symbol: str = ""


class SearchResult(Wire):
    results: list[SearchItem]


# --------------------------------------------------------------- index status
INDEX_STATUS = "tachy/index/status"  # C→S request


class IndexStatusParams(Wire):
    pass


# lexical: searchable, embeddings pending; disabled: indexing is turned off.
IndexState = Literal["starting", "indexing", "empty", "lexical", "ready", "failed", "disabled"]


class FolderStatus(Wire):
    uri: str
    state: IndexState
    files: int
    chunks: int
    embedded: int
    error: str = ""


class IndexStatusResult(Wire):
    state: IndexState  # the least ready folder's state
    files: int
    chunks: int
    embedded: int
    folders: list[FolderStatus]


# ---------------------------------------------------------------------- agent
AGENT_RUN = "tachy/agent/run"  # C→S request; answered when the run ends
AGENT_EVENT = "tachy/agent/event"  # S→C notification, one per transcript event
AGENT_CANCEL = "tachy/agent/cancel"  # C→S request


class AgentRunParams(Wire):
    prompt: str
    # Chosen by the client so it can cancel before the response arrives; the server
    # makes one up when absent. Must not name a session that is still running.
    session_id: str | None = None
    # The workspace folder to work in (a URI); the first folder when absent.
    workspace_folder: str | None = None
    # Overrides of the configured policy and turn limit, for this run only.
    policy: str | None = None
    max_turns: int | None = None
    # Standard LSP work-done token: when given, progress is reported under it.
    work_done_token: str | int | None = None


StopReason = Literal["end_turn", "max_turns", "cancelled", "error"]
SessionState = Literal["running", "cancelling", "finished", "unknown"]


class AgentRunResult(Wire):
    session_id: str
    stop_reason: StopReason
    final_text: str = ""
    error: str = ""
    changed_files: list[str] = msgspec.field(default_factory=list)


class AgentEventParams(Wire):
    session_id: str
    seq: int  # 0, 1, 2, ... within the session
    event: dict[str, Any]  # a transcript event, exactly as in the JSONL transcript


class AgentCancelParams(Wire):
    session_id: str


class AgentCancelResult(Wire):
    # False when the session had already ended or was already being cancelled.
    cancelled: bool
    state: SessionState
    message: str = ""


# --------------------------------------------------------------------- review
# An agent edit is proposed to the editor; the user accepts or rejects it. With
# auto-apply on, proposals arrive already applied and "reject" reverts them. The
# notification is sent again whenever a proposal's state changes.
#
# A client that shows proposals itself declares the experimental client capability
# {"tachy": {"review": true}}; any other client is asked with a standard
# window/showMessageRequest (Accept / Reject, the diff in the message).
#
# An accepted edit to an open document is applied to the buffer with
# workspace/applyEdit and written to the file on disk too (the agent's commands run
# there), so buffer and file hold the same text: an extension should save the buffer
# after applying it, or the editor will report the file as changed on disk.
REVIEW_PROPOSE = "tachy/review/propose"  # S→C notification
REVIEW_ACCEPT = "tachy/review/accept"  # C→S request
REVIEW_REJECT = "tachy/review/reject"  # C→S request
REVIEW_LIST = "tachy/review/list"  # C→S request: proposals not yet settled


# pending: waiting for the user | applied | rejected | reverted | failed | cancelled
ProposalState = Literal["pending", "applied", "rejected", "reverted", "failed", "cancelled"]


class Proposal(Wire):
    proposal_id: str
    session_id: str
    uri: str
    path: str  # workspace-relative
    kind: Literal["edit", "create", "delete"]
    state: ProposalState
    # An LSP WorkspaceEdit turning the editor's current text into the agent's; the
    # editor can show it as a diff. For an open document it carries its version.
    edit: dict[str, Any]
    message: str = ""


class ReviewDecisionParams(Wire):
    proposal_id: str


class ReviewDecisionResult(Wire):
    ok: bool
    state: ProposalState  # the proposal's state after the decision
    message: str = ""


class ReviewListParams(Wire):
    session_id: str | None = None


class ReviewListResult(Wire):
    proposals: list[Proposal]


# ---------------------------------------------------------------- diagnostics
# The editor forwards the diagnostics of its other language servers (type checkers,
# compilers) so the agent's read_lints sees them. Replaces what was sent for the uri.
DIAGNOSTICS = "tachy/diagnostics"  # C→S notification


class LspDiagnostic(Wire):
    range: Range
    message: str
    severity: int | None = None
    code: str | int | None = None
    source: str | None = None


class DiagnosticsParams(Wire):
    uri: str
    diagnostics: list[LspDiagnostic]


# ------------------------------------------------------------------- commands
ASK_TO_FIX = "tachy.askToFix"  # workspace/executeCommand, offered by the code action


class AskToFixArgs(Wire):
    uri: str
    diagnostic: LspDiagnostic
    session_id: str | None = None


class AskToFixResult(Wire):
    session_id: str


# ---------------------------------------------------------------- the table
class Method(NamedTuple):
    name: str
    kind: Literal["request", "notification"]
    direction: Literal["clientToServer", "serverToClient"]
    params: type[Wire]
    result: type[Wire] | None = None  # requests only


class Command(NamedTuple):
    name: str
    arguments: list[type[Wire]]  # positional
    result: type[Wire]


C2S, S2C = "clientToServer", "serverToClient"
METHODS = [
    Method(SEARCH, "request", C2S, SearchParams, SearchResult),
    Method(INDEX_STATUS, "request", C2S, IndexStatusParams, IndexStatusResult),
    Method(AGENT_RUN, "request", C2S, AgentRunParams, AgentRunResult),
    Method(AGENT_EVENT, "notification", S2C, AgentEventParams),
    Method(AGENT_CANCEL, "request", C2S, AgentCancelParams, AgentCancelResult),
    Method(REVIEW_PROPOSE, "notification", S2C, Proposal),
    Method(REVIEW_ACCEPT, "request", C2S, ReviewDecisionParams, ReviewDecisionResult),
    Method(REVIEW_REJECT, "request", C2S, ReviewDecisionParams, ReviewDecisionResult),
    Method(REVIEW_LIST, "request", C2S, ReviewListParams, ReviewListResult),
    Method(DIAGNOSTICS, "notification", C2S, DiagnosticsParams),
]
COMMANDS = [Command(ASK_TO_FIX, [AskToFixArgs], AskToFixResult)]


# ------------------------------------------------------------ tachy.json
SPEC_FILE = Path(__file__).resolve().parents[1] / "extensions" / "protocol" / "tachy.json"
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", Any: "any"}


def spec_type(tp: Any) -> str:
    """A field's type as a tachy.json type string (see extensions/protocol/README.md);
    a Literal is its values' type."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        [kind] = {_SCALARS[type(a)] for a in args}
        return kind
    if origin is list:
        return spec_type(args[0]) + "[]"
    if origin is dict and args[0] is str:
        return "object"
    if origin in (typing.Union, types.UnionType):
        return "|".join(spec_type(a) for a in args if a is not type(None))
    if isinstance(tp, type) and issubclass(tp, Wire):
        return tp.__name__
    raise TypeError(f"no tachy.json type for {tp!r}")


def wire_types() -> list[type[Wire]]:
    """Every Wire struct of this module, in the order they are declared."""
    found = [v for v in globals().values() if isinstance(v, type) and issubclass(v, Wire)]
    return [cls for cls in found if cls is not Wire]


def spec() -> dict[str, Any]:
    """The protocol as tachy.json holds it."""
    methods = []
    for m in METHODS:
        entry = {"name": m.name, "kind": m.kind, "direction": m.direction}
        entry["params"] = m.params.__name__
        if m.result is not None:
            entry["result"] = m.result.__name__
        methods.append(entry)
    commands = [
        {
            "name": c.name,
            "arguments": [a.__name__ for a in c.arguments],
            "result": c.result.__name__,
        }
        for c in COMMANDS
    ]
    kinds = {
        cls.__name__: {
            f.encode_name: spec_type(f.type) + ("" if f.required else "?")
            for f in msgspec.structs.fields(cls)
        }
        for cls in wire_types()
    }
    return {"methods": methods, "commands": commands, "types": kinds}


def render(value: dict[str, Any]) -> str:
    """tachy.json's text: one line per method, command and type."""

    def block(key: str, rows: list[str], close: str) -> str:
        return f'  "{key}": {close[0]}\n' + ",\n".join(f"    {r}" for r in rows) + f"\n  {close[1]}"

    dump = json.dumps
    parts = [
        block("methods", [dump(m, ensure_ascii=False) for m in value["methods"]], "[]"),
        block("commands", [dump(c, ensure_ascii=False) for c in value["commands"]], "[]"),
        block("types", [f"{dump(k)}: {dump(v)}" for k, v in value["types"].items()], "{}"),
    ]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(argv: list[str]) -> int:
    """`python -m server.protocol [--write | --check]`: print tachy.json, write it, or
    check that the committed file is current (exit 1 when it is not)."""
    text = render(spec())
    if argv == ["--write"]:
        SPEC_FILE.write_text(text)
        print(f"wrote {SPEC_FILE}", file=sys.stderr)
    elif argv == ["--check"]:
        if SPEC_FILE.read_text() != text:
            print(f"{SPEC_FILE} is out of date: run python -m server.protocol --write")
            return 1
    elif argv:
        print("usage: python -m server.protocol [--write | --check]", file=sys.stderr)
        return 2
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
