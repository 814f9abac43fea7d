"""The tachy/* LSP extensions: every custom method declared once, with its types.

Editor extensions mirror this file (one declaration per method, like rust-analyzer's
`lsp_ext.ts`). Field names are camelCase on the wire, as everywhere in LSP. Params a
handler receives are decoded with `decode`, so a malformed request is answered with
an InvalidParams error that names the bad field.

Direction: C→S is a request or notification from the editor, S→C from the server.
"""

from __future__ import annotations

from typing import Any, Literal

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


class FolderStatus(Wire):
    uri: str
    state: str  # indexing | empty | lexical (embeddings pending) | ready | failed
    files: int
    chunks: int
    embedded: int
    error: str = ""


class IndexStatusResult(Wire):
    state: str  # the least ready folder's state
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


class AgentRunResult(Wire):
    session_id: str
    stop_reason: str  # end_turn | max_turns | cancelled | error
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
    state: str  # running | cancelling | finished | unknown
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


class Proposal(Wire):
    proposal_id: str
    session_id: str
    uri: str
    path: str  # workspace-relative
    kind: Literal["edit", "create", "delete"]
    # pending: waiting for the user | applied | rejected | reverted | failed | cancelled
    state: str
    # An LSP WorkspaceEdit turning the editor's current text into the agent's; the
    # editor can show it as a diff. For an open document it carries its version.
    edit: dict[str, Any]
    message: str = ""


class ReviewDecisionParams(Wire):
    proposal_id: str


class ReviewDecisionResult(Wire):
    ok: bool
    state: str
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
