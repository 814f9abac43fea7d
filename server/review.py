"""The review flow for agent edits, and the workspace the agent sees in an editor.

Every change the agent makes (edit_file, write_file, delete_file) becomes a Proposal:
an LSP WorkspaceEdit from the editor's current text to the agent's, sent to the
editor with `tachy/review/propose` so it can show a diff.

- approval "review": the tool call waits until the user accepts or rejects. Accepted:
  the edit is applied (an open document through workspace/applyEdit, then the file on
  disk, where the agent's commands run). Rejected: nothing changes and the model is
  told so.
- approval "auto": the edit is applied at once; rejecting it later reverts the file
  (and the editor's buffer) from the proposal's checkpoint.

An edit to an open document whose text changed since the model last saw it (read it,
or wrote it) is refused, never merged: the model must read it again. The same holds
when the user types while an edit waits for review. A revert is refused when the file
changed after the agent's edit. `tachy/review/propose` is sent again whenever a
proposal's state changes, so an editor can keep its list current.

Review is the feature: `tachy/review/accept`, `reject` and `list`, on the one board,
made when it is first needed (on the event loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import difflib
import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pygls.exceptions import JsonRpcInvalidParams

from agent.tools.base import run_blocking
from agent.tools.edit import unified_diff
from agent.workspace import Workspace, WorkspaceError
from server import protocol as p
from server.documents import Documents, Snapshot, path_to_uri, text_hash

log = logging.getLogger(__name__)

ACCEPT, REJECT = "Accept", "Reject"
ASK_DIFF_LINES = 40
KEEP_SETTLED = 500  # rejected, failed, cancelled and reverted proposals remembered


class Editor(Protocol):
    """What the review flow needs from the connection to the editor."""

    position_encoding: str  # utf-16 | utf-8 | utf-32
    document_changes: bool  # the client takes versioned documentChanges
    # The client shows tachy/review/propose itself (a tachy extension declares the
    # experimental capability {"tachy": {"review": true}}); other clients are asked
    # with a standard window/showMessageRequest.
    review_ui: bool

    def notify(self, method: str, params: Any) -> None: ...

    async def apply_edit(self, label: str, edit: dict[str, Any]) -> tuple[bool, str]: ...

    async def ask(self, message: str, actions: list[str]) -> str | None: ...


# ------------------------------------------------------------ workspace edits
def _char_len(text: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8", "surrogatepass"))
    if encoding == "utf-32":
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _position(lines: list[str], index: int, encoding: str) -> dict[str, int]:
    """The start of line `index`, or the end of the text when the last line has no
    newline and `index` is past it."""
    if index >= len(lines) and lines and not lines[-1].endswith("\n"):
        last = lines[-1]
        return {"line": len(lines) - 1, "character": _char_len(last, encoding)}
    return {"line": index, "character": 0}


def text_edits(old: str, new: str, encoding: str = "utf-16") -> list[dict[str, Any]]:
    """Line-granular TextEdits turning `old` into `new` (a reviewable diff, not one
    whole-file replacement)."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    edits = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(
            {
                "range": {
                    "start": _position(a, i1, encoding),
                    "end": _position(a, i2, encoding),
                },
                "newText": "".join(b[j1:j2]),
            }
        )
    return edits


def workspace_edit(
    uri: str,
    kind: str,
    old: str | None,
    new: str | None,
    version: int | None,
    editor: Editor,
) -> dict[str, Any]:
    if not editor.document_changes:
        return {"changes": {uri: text_edits(old or "", new or "", editor.position_encoding)}}
    if kind == "delete":
        return {
            "documentChanges": [
                {"kind": "delete", "uri": uri, "options": {"ignoreIfNotExists": True}}
            ]
        }
    changes: list[dict[str, Any]] = []
    if kind == "create":
        changes.append({"kind": "create", "uri": uri, "options": {"ignoreIfExists": True}})
    changes.append(
        {
            "textDocument": {"uri": uri, "version": version},
            "edits": text_edits(old or "", new or "", editor.position_encoding),
        }
    )
    return {"documentChanges": changes}


# ------------------------------------------------------------------ proposals
@dataclass
class _Proposal:
    id: str
    session_id: str
    workspace: EditorWorkspace
    rel: str
    uri: str
    kind: str
    old: bytes | None  # the text the edit starts from (buffer or disk); None: no file
    new: bytes | None  # None: delete
    state: str = "pending"
    message: str = ""
    decision: asyncio.Future[bool] | None = None
    settled: asyncio.Future[None] | None = None
    # The checkpoint a revert restores: the disk bytes and buffer text before it.
    disk_before: bytes | None = None
    buffer_before: str | None = None
    edit: dict[str, Any] = field(default_factory=dict)

    def wire(self) -> p.Proposal:
        return p.Proposal(
            proposal_id=self.id,
            session_id=self.session_id,
            uri=self.uri,
            path=self.rel,
            kind=self.kind,  # type: ignore[arg-type]
            state=self.state,
            edit=self.edit,
            message=self.message,
        )


def _decode(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


class ReviewBoard:
    def __init__(
        self,
        editor: Editor,
        documents: Documents,
        approval: Callable[[], str],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.editor = editor
        self.documents = documents
        self.approval = approval
        self.loop = loop
        self.proposals: dict[str, _Proposal] = {}
        self._ids = itertools.count(1)

    # ------------------------------------------------ called by the agent's tools
    def write(self, ws: EditorWorkspace, rel: str, data: bytes | None) -> None:
        """Propose a change and wait for it to be applied or refused (tool thread)."""
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop()
            raise AssertionError("ReviewBoard.write blocks: call it from a tool thread")
        future = asyncio.run_coroutine_threadsafe(self._propose(ws, rel, data), self.loop)
        try:
            future.result()
        except concurrent.futures.CancelledError:
            raise WorkspaceError(
                f"the run was cancelled before the change to {rel} was applied"
            ) from None

    async def _propose(self, ws: EditorWorkspace, rel: str, data: bytes | None) -> None:
        path = ws.abspath(ws.real_rel(rel))
        snap = self.documents.get(path)
        if snap is not None:
            ws.check_not_stale(rel, snap)
            old = snap.data
        else:
            old = await run_blocking(ws.read_disk_or_none, rel)
        if data is None:
            kind = "delete"
        elif old is None:
            kind = "create"
        else:
            kind = "edit"
        uri = snap.uri if snap is not None else path_to_uri(path)
        proposal = _Proposal(
            id=f"{ws.session_id}/{next(self._ids)}",
            session_id=ws.session_id,
            workspace=ws,
            rel=rel,
            uri=uri,
            kind=kind,
            old=old,
            new=data,
        )
        proposal.edit = workspace_edit(
            uri, kind, _decode(old), _decode(data), snap.version if snap else None, self.editor
        )
        proposal.settled = self.loop.create_future()
        self._forget_settled()
        self.proposals[proposal.id] = proposal
        try:
            if self.approval() != "auto":
                proposal.decision = self.loop.create_future()
                self._publish(proposal)
                if not self.editor.review_ui:
                    asking = self.loop.create_task(self._ask(proposal))
                    proposal.decision.add_done_callback(lambda _: asking.cancel())
                if not await proposal.decision:
                    self._settle(proposal, "rejected", "the user rejected the change")
                    raise WorkspaceError(
                        f"the user rejected this change to {rel}; the file is unchanged"
                    )
            await self._apply(proposal)
            self._settle(proposal, "applied")
        except WorkspaceError as exc:
            if proposal.state == "pending":
                self._settle(proposal, "failed", str(exc))
            raise
        except asyncio.CancelledError:
            self._settle(proposal, "cancelled", "the run was cancelled")
            raise

    def _forget_settled(self) -> None:
        """Bound memory over a long editor session: proposals that can no longer change
        (all but pending and applied ones) are forgotten, oldest first, past a limit."""
        done = [k for k, prop in self.proposals.items() if prop.state not in ("pending", "applied")]
        for key in done[: max(0, len(done) - KEEP_SETTLED)]:
            del self.proposals[key]

    async def _ask(self, proposal: _Proposal) -> None:
        """Ask a client without a review UI to decide, showing the diff in the question.
        Dismissing the question rejects the change: the run must not wait forever."""
        before = _decode(proposal.old) or ""
        after = _decode(proposal.new) or ""
        what = {"edit": "change", "create": "create", "delete": "delete"}[proposal.kind]
        diff = unified_diff(proposal.rel, before, after, limit=ASK_DIFF_LINES)
        message = (
            f"tachy wants to {what} {proposal.rel}:\n{diff}"
            if diff
            else (f"tachy wants to {what} {proposal.rel}.")
        )
        try:
            answer = await self.editor.ask(message, [ACCEPT, REJECT])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client cannot ask: wait for tachy/review/*
            log.info("could not ask about %s: %s", proposal.id, exc)
            return
        decision = proposal.decision
        if decision is not None and not decision.done():
            decision.set_result(answer == ACCEPT)

    async def _apply(self, proposal: _Proposal) -> None:
        ws, rel = proposal.workspace, proposal.rel
        path = ws.abspath(ws.real_rel(rel))
        snap = self.documents.get(path)
        current = snap.data if snap is not None else await run_blocking(ws.read_disk_or_none, rel)
        if current != proposal.old:
            where = "in the editor" if snap is not None else "on disk"
            raise WorkspaceError(
                f"{rel} changed {where} while the edit waited for review; read it again "
                "and redo the change"
            )
        proposal.disk_before = await run_blocking(ws.read_disk_or_none, rel)
        if snap is not None and proposal.new is not None:
            proposal.buffer_before = snap.text
            edit = workspace_edit(
                snap.uri, "edit", snap.text, _decode(proposal.new), snap.version, self.editor
            )
            applied, reason = await self.editor.apply_edit(f"tachy: {rel}", edit)
            if not applied:
                raise WorkspaceError(
                    f"the editor refused the edit to {rel}"
                    + (f" ({reason})" if reason else "")
                    + "; read it again and redo the change"
                )
            self._edited_in_editor(snap, _decode(proposal.new) or "")
        await run_blocking(ws.commit, rel, proposal.new)
        if proposal.new is not None:
            ws.note_shown(rel, proposal.new)

    def _edited_in_editor(self, snap: Snapshot, text: str) -> None:
        """The editor applied our edit to `snap`; until its didChange arrives, reads see
        the new text. The didChange often arrives before the applyEdit answer: its newer
        version must stay, or the next versioned edit would be refused as stale."""
        current = self.documents.get(snap.path)
        if current is not None and current.version == snap.version:
            self.documents.put(snap.uri, snap.version, text)

    def _settle(self, proposal: _Proposal, state: str, message: str = "") -> None:
        proposal.state, proposal.message = state, message
        if proposal.settled is not None and not proposal.settled.done():
            proposal.settled.set_result(None)
        self._publish(proposal)

    def _publish(self, proposal: _Proposal) -> None:
        self.editor.notify(p.REVIEW_PROPOSE, p.encode(proposal.wire()))

    # --------------------------------------------------- called by the editor
    def _find(self, proposal_id: str) -> _Proposal:
        proposal = self.proposals.get(proposal_id)
        if proposal is None:
            raise KeyError(f"there is no proposal {proposal_id!r}")
        return proposal

    async def accept(self, proposal_id: str) -> p.ReviewDecisionResult:
        proposal = self._find(proposal_id)
        if proposal.state == "applied":
            return p.ReviewDecisionResult(ok=True, state="applied", message="already applied")
        if proposal.state != "pending" or proposal.decision is None:
            return p.ReviewDecisionResult(
                ok=False, state=proposal.state, message=f"the proposal is {proposal.state}"
            )
        if not proposal.decision.done():
            proposal.decision.set_result(True)
        assert proposal.settled is not None
        await asyncio.shield(proposal.settled)
        return p.ReviewDecisionResult(
            ok=proposal.state == "applied", state=proposal.state, message=proposal.message
        )

    async def reject(self, proposal_id: str) -> p.ReviewDecisionResult:
        proposal = self._find(proposal_id)
        if proposal.state == "pending" and proposal.decision is not None:
            if not proposal.decision.done():
                proposal.decision.set_result(False)
            assert proposal.settled is not None
            await asyncio.shield(proposal.settled)
            return p.ReviewDecisionResult(ok=True, state=proposal.state, message=proposal.message)
        if proposal.state != "applied":
            return p.ReviewDecisionResult(
                ok=False, state=proposal.state, message=f"the proposal is {proposal.state}"
            )
        try:
            await self._revert(proposal)
        except WorkspaceError as exc:
            return p.ReviewDecisionResult(ok=False, state=proposal.state, message=str(exc))
        self._settle(proposal, "reverted", "reverted from its checkpoint")
        return p.ReviewDecisionResult(ok=True, state="reverted")

    async def _revert(self, proposal: _Proposal) -> None:
        """Put back the file (and the editor's buffer) as they were before the edit,
        provided nothing changed them since."""
        ws, rel = proposal.workspace, proposal.rel
        # Through the workspace: a symlink planted at `rel` since the edit (to a host
        # file such as ~/.bashrc) is refused here, and the revert below replaces
        # rather than follows whatever is there.
        path = ws.abspath(ws.real_rel(rel))
        if await run_blocking(ws.read_disk_or_none, rel) != proposal.new:
            raise WorkspaceError(
                f"{rel} changed after the agent's edit; it was not reverted, to keep that change"
            )
        snap = self.documents.get(path)
        if snap is not None and proposal.new is not None:
            if snap.data != proposal.new:
                raise WorkspaceError(
                    f"{rel} was edited in the editor after the agent's edit; it was not reverted"
                )
            before = (
                proposal.buffer_before
                if proposal.buffer_before is not None
                else _decode(proposal.disk_before) or ""
            )
            edit = workspace_edit(snap.uri, "edit", snap.text, before, snap.version, self.editor)
            applied, reason = await self.editor.apply_edit(f"tachy: revert {rel}", edit)
            if not applied:
                raise WorkspaceError(
                    f"the editor refused to revert {rel} ({reason or 'no reason'})"
                )
            self._edited_in_editor(snap, before)
        await run_blocking(ws.put_back, rel, proposal.disk_before)

    def pending(self, session_id: str | None = None) -> list[p.Proposal]:
        return [
            prop.wire()
            for prop in self.proposals.values()
            if prop.state in ("pending", "applied")
            and (session_id is None or prop.session_id == session_id)
        ]

    def cancel_session(self, session_id: str) -> None:
        """Release the tool calls of a cancelled run that wait for the user."""
        for proposal in self.proposals.values():
            if proposal.session_id != session_id or proposal.state != "pending":
                continue
            if proposal.decision is not None and not proposal.decision.done():
                proposal.decision.cancel()


class Review:
    def __init__(self, editor: Editor, documents: Documents, approval: Callable[[], str]) -> None:
        self.editor = editor
        self.documents = documents
        self.approval = approval
        self._board: ReviewBoard | None = None

    def board(self) -> ReviewBoard:
        if self._board is None:
            self._board = ReviewBoard(
                self.editor, self.documents, self.approval, asyncio.get_running_loop()
            )
        return self._board

    async def on_accept(self, args: p.ReviewDecisionParams) -> p.ReviewDecisionResult:
        try:
            return await self.board().accept(args.proposal_id)
        except KeyError as exc:
            raise JsonRpcInvalidParams(exc.args[0]) from None

    async def on_reject(self, args: p.ReviewDecisionParams) -> p.ReviewDecisionResult:
        try:
            return await self.board().reject(args.proposal_id)
        except KeyError as exc:
            raise JsonRpcInvalidParams(exc.args[0]) from None

    def on_list(self, args: p.ReviewListParams) -> p.ReviewListResult:
        return p.ReviewListResult(proposals=self.board().pending(args.session_id))


class EditorWorkspace(Workspace):
    """A Workspace for one agent session in the editor: reads see unsaved editor text;
    writes go through the review flow."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        documents: Documents,
        board: ReviewBoard,
        session_id: str,
        allow_secrets: bool = False,
    ) -> None:
        super().__init__(root, allow_secrets=allow_secrets)
        self.documents = documents
        self.board = board
        self.session_id = session_id
        # rel -> hash of the text the model last saw: open documents count as seen as
        # they were when the run started.
        self.shown: dict[str, str] = {}
        for snap in documents.under(self.root):
            self.shown[snap.path.relative_to(self.root).as_posix()] = text_hash(snap.text)

    def _snapshot(self, rel: str) -> Snapshot | None:
        try:
            return self.documents.get(self.abspath(self.real_rel(rel)))
        except WorkspaceError:
            return None

    def read_bytes(self, rel: str) -> bytes:
        snap = self._snapshot(rel)
        return snap.data if snap is not None else super().read_bytes(rel)

    def file_size(self, rel: str) -> int:
        snap = self._snapshot(rel)
        return len(snap.data) if snap is not None else super().file_size(rel)

    def note_shown(self, rel: str, data: bytes) -> None:
        self.shown[rel] = text_hash(data)

    def unsaved(self) -> dict[str, bytes]:
        found = {}
        for snap in self.documents.under(self.root):
            data = snap.data
            try:
                on_disk = snap.path.read_bytes()
            except OSError:
                on_disk = None
            if data != on_disk:
                found[snap.path.relative_to(self.root).as_posix()] = data
        return found

    def check_not_stale(self, rel: str, snap: Snapshot) -> None:
        seen = self.shown.get(rel)
        if seen is not None and seen != text_hash(snap.text):
            raise WorkspaceError(
                f"{rel} was changed in the editor since you last read it (it is now at "
                f"version {snap.version}); read it again and redo the change"
            )

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._writable(rel)  # refused before the user is asked (e.g. .tachyignore)
        self.board.write(self, rel, data)

    def delete(self, rel: str) -> None:
        self._writable(rel)
        self.board.write(self, rel, None)

    # The review flow's own access to the disk, with checkpoints as in training.
    def commit(self, rel: str, data: bytes | None) -> None:
        if data is None:
            Workspace.delete(self, rel)
        else:
            Workspace.write_bytes(self, rel, data)
