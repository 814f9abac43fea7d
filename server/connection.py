"""The connection to the editor, as the features see it: what they tell it
(notifications, messages, $/progress), what they ask it (a choice, an applied edit)
and what it can do (its capabilities). It is the `Editor` the review flow needs, and
it keeps background work (tasks no request waits for) alive until it ends."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from server import pygls_internals as internals

log = logging.getLogger(__name__)

Report = Callable[[str | None, bool], None]  # report(message, end) of one $/progress


class EditorConnection:
    def __init__(self, server: LanguageServer) -> None:
        self.server = server  # the pygls LanguageServer
        self._tokens = itertools.count(1)
        self._background: set[asyncio.Task] = set()

    # ------------------------------------------------------------ capabilities
    @property
    def capabilities(self) -> types.ClientCapabilities:
        return self.server.client_capabilities

    @property
    def position_encoding(self) -> str:
        encoding = self.server.workspace.position_encoding
        return getattr(encoding, "value", encoding) or "utf-16"

    @property
    def document_changes(self) -> bool:
        edit = self.capabilities.workspace and self.capabilities.workspace.workspace_edit
        return bool(edit and edit.document_changes)

    @property
    def review_ui(self) -> bool:
        experimental = self.capabilities.experimental
        tachy = experimental.get("tachy") if isinstance(experimental, dict) else None
        return isinstance(tachy, dict) and tachy.get("review") is True

    def text_document(self, uri: str) -> Any:
        """pygls' TextDocument for `uri` (didOpen/didChange already applied)."""
        return self.server.workspace.get_text_document(uri)

    # -------------------------------------------------------------- telling
    def notify(self, method: str, params: Any) -> None:
        self.server.protocol.notify(method, params)

    def show(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.server.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def spawn(self, work: Any) -> None:
        """Run a coroutine in the background, keeping it alive (the loop holds only weak
        references to tasks)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def begin_progress(
        self, token: str | int | None, title: str, message: str | None = None
    ) -> Report:
        """Start a $/progress report; returns report(message, end). Uses the client's
        work-done token when it gave one, else creates one if the client can show it."""
        if token is None:
            window = self.capabilities.window
            if not (window and window.work_done_progress):
                return lambda message, end: None
            token = f"tachy-{next(self._tokens)}"
            try:
                await self.server.work_done_progress.create_async(token)
            except Exception as exc:  # the client refused: work without progress
                log.info("no progress token: %s", exc)
                return lambda message, end: None
        progress = self.server.work_done_progress
        progress.begin(token, types.WorkDoneProgressBegin(title=title, message=message))
        ended = False

        def report(message: str | None, end: bool) -> None:
            nonlocal ended
            if ended:
                return
            if end:
                ended = True
                progress.end(token, types.WorkDoneProgressEnd(message=message))
            else:
                progress.report(token, types.WorkDoneProgressReport(message=message))

        return report

    # -------------------------------------------------------------- asking
    async def ask(self, message: str, actions: list[str]) -> str | None:
        answer = await self.server.window_show_message_request_async(
            types.ShowMessageRequestParams(
                type=types.MessageType.Info,
                message=message,
                actions=[types.MessageActionItem(title=a) for a in actions],
            )
        )
        return answer.title if answer is not None else None

    async def apply_edit(self, label: str, edit: dict[str, Any]) -> tuple[bool, str]:
        caps = self.capabilities.workspace
        if not (caps and caps.apply_edit):
            return False, "the editor does not support workspace/applyEdit"
        params = types.ApplyWorkspaceEditParams(
            edit=internals.structure(self.server, edit, types.WorkspaceEdit), label=label
        )
        result = await self.server.workspace_apply_edit_async(params)
        return bool(result.applied), result.failure_reason or ""

    async def configuration(self, section: str) -> list[Any]:
        return await self.server.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section=section)])
        )

    async def register(self, registration: types.Registration) -> None:
        await self.server.client_register_capability_async(
            types.RegistrationParams(registrations=[registration])
        )
