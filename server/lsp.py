"""The tachy language server: what editors (and IDE plugin authors) talk to.

This module only registers handlers: one thin handler per LSP method, which decodes
the params, calls the feature that does the work and encodes its answer. The
features, each a small class with methods named after the events it handles:

- Configuration (server/configuration.py): initialize options, workspace/configuration
  and didChangeConfiguration; `ready` once `initialized` is done;
- Folders (server/folders.py): workspace folders, their indexes and watched files;
- DocumentSync (server/documents.py): didOpen/didChange/didSave/didClose into the
  unsaved-text overlay and the folder's index;
- Search (server/search.py): tachy/search, tachy/index/status, workspace/symbol;
- AgentRuns (server/sessions.py): tachy/agent/run and tachy/agent/cancel;
- Review (server/review.py): tachy/review/accept, reject and list;
- DiagnosticsFeature (server/diagnostics.py): tachy/diagnostics;
- AskToFix (server/code_actions.py): textDocument/codeAction and tachy.askToFix.

They reach the editor through an EditorConnection (server/connection.py); every use
of a pygls internal is in server/pygls_internals.py. The custom tachy/* methods are
declared in server/protocol.py.

The event loop only ever waits on the network: indexing runs on folder threads,
searches and tools on the tool thread pool, and each agent run is its own task.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from server import protocol as p
from server.code_actions import AskToFix
from server.configuration import Configuration
from server.connection import EditorConnection
from server.diagnostics import DiagnosticsFeature, ForwardedDiagnostics
from server.documents import Documents, DocumentSync
from server.errors import decode
from server.folders import Folders
from server.pygls_internals import TachyProtocol, converter_of, keep_json_objects, plain_handler
from server.review import Review
from server.search import Search
from server.sessions import AgentRuns, Sessions


def _version() -> str:
    try:
        return version("tachy")
    except PackageNotFoundError:
        return "unknown"


class TachyServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("tachy", _version(), protocol_cls=TachyProtocol)
        keep_json_objects(converter_of(self.protocol))
        self.exit_code = 0  # a lost client ends the server cleanly too
        self.editor = EditorConnection(self)
        self.configuration = Configuration(self.editor)
        self.documents = Documents()
        self.folders = Folders(self.editor, self.configuration, self.documents)
        self.sync = DocumentSync(self.documents, self.folders, self.editor.text_document)
        self.search = Search(self.configuration, self.folders)
        self.review = Review(
            self.editor, self.documents, lambda: self.configuration.settings.approval
        )
        forwarded = ForwardedDiagnostics()
        self.diagnostics = DiagnosticsFeature(forwarded, self.editor.show)
        sessions = Sessions(
            notify=self.editor.notify,
            documents=self.documents,
            diagnostics=forwarded,
            board=self.review.board,
            folder_index=self.folders.get,
            progress=self.editor.begin_progress,
        )
        self.agent = AgentRuns(self.configuration, self.folders, sessions)
        self.fixes = AskToFix(self.editor, self.configuration, self.folders, self.agent)
        self._register()

    def _register(self) -> None:
        features: list[tuple[str, Callable, Any]] = [
            (types.INITIALIZE, self.on_initialize, None),
            (types.INITIALIZED, self.on_initialized, None),
            (types.SHUTDOWN, self.on_shutdown, None),
            (types.WORKSPACE_DID_CHANGE_CONFIGURATION, self.on_configuration_changed, None),
            (types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, self.on_folders_changed, None),
            (types.TEXT_DOCUMENT_DID_OPEN, self.on_document_opened, None),
            (types.TEXT_DOCUMENT_DID_CHANGE, self.on_document_changed, None),
            (
                types.TEXT_DOCUMENT_DID_SAVE,
                self.on_document_saved,
                types.SaveOptions(include_text=False),
            ),
            (types.TEXT_DOCUMENT_DID_CLOSE, self.on_document_closed, None),
            (types.WORKSPACE_DID_CHANGE_WATCHED_FILES, self.on_watched_files_changed, None),
            (types.WORKSPACE_SYMBOL, self.on_workspace_symbol, None),
            (
                types.TEXT_DOCUMENT_CODE_ACTION,
                self.on_code_action,
                types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
            ),
            (p.SEARCH, self.on_search, None),
            (p.INDEX_STATUS, self.on_index_status, None),
            (p.AGENT_RUN, self.on_agent_run, None),
            (p.AGENT_CANCEL, self.on_agent_cancel, None),
            (p.REVIEW_ACCEPT, self.on_review_accept, None),
            (p.REVIEW_REJECT, self.on_review_reject, None),
            (p.REVIEW_LIST, self.on_review_list, None),
            (p.DIAGNOSTICS, self.on_diagnostics, None),
        ]
        for method, handler, options in features:
            self.feature(method, options)(plain_handler(handler))
        self.command(p.ASK_TO_FIX)(plain_handler(self.on_ask_to_fix))

    def report_server_error(self, error: Exception, source: Any) -> None:
        if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
            # The client sent bytes that are not JSON: its fault, not a server error.
            self.editor.show(
                f"tachy: ignored a message that is not valid JSON ({error})",
                types.MessageType.Warning,
            )
            return
        super().report_server_error(error, source)

    # ------------------------------------------------------------ lifecycle
    def on_initialize(self, params: types.InitializeParams) -> None:
        self.configuration.on_initialize(params)
        self.folders.on_initialize(params)

    async def on_initialized(self, params: types.InitializedParams) -> None:
        try:
            await self.configuration.on_initialized()
            await self.folders.on_initialized()
        finally:
            self.configuration.ready.set()

    async def on_shutdown(self, params: None) -> None:
        """Stop every run, then close the indexes."""
        await self.agent.on_shutdown()
        await self.folders.on_shutdown()

    async def on_configuration_changed(self, params: types.DidChangeConfigurationParams) -> None:
        await self.configuration.on_configuration_changed(params)

    # -------------------------------------------------------------- folders
    def on_folders_changed(self, params: types.DidChangeWorkspaceFoldersParams) -> None:
        self.folders.on_folders_changed(params)

    def on_watched_files_changed(self, params: types.DidChangeWatchedFilesParams) -> None:
        self.folders.on_watched_files_changed(params)

    # ------------------------------------------------------- document sync
    def on_document_opened(self, params: types.DidOpenTextDocumentParams) -> None:
        self.sync.on_opened(params)

    def on_document_changed(self, params: types.DidChangeTextDocumentParams) -> None:
        self.sync.on_changed(params)

    def on_document_saved(self, params: types.DidSaveTextDocumentParams) -> None:
        self.sync.on_saved(params)

    def on_document_closed(self, params: types.DidCloseTextDocumentParams) -> None:
        self.sync.on_closed(params)

    # --------------------------------------------------------------- search
    async def on_search(self, params: Any) -> dict:
        return p.encode(await self.search.on_search(decode(params, p.SearchParams)))

    async def on_index_status(self, params: Any) -> dict:
        decode(params, p.IndexStatusParams)
        return p.encode(await self.search.on_index_status())

    async def on_workspace_symbol(
        self, params: types.WorkspaceSymbolParams
    ) -> list[types.WorkspaceSymbol]:
        return await self.search.on_workspace_symbol(params)

    # ---------------------------------------------------------------- agent
    async def on_agent_run(self, params: Any) -> dict:
        return p.encode(await self.agent.on_agent_run(decode(params, p.AgentRunParams)))

    async def on_agent_cancel(self, params: Any) -> dict:
        return p.encode(await self.agent.on_agent_cancel(decode(params, p.AgentCancelParams)))

    # --------------------------------------------------------------- review
    async def on_review_accept(self, params: Any) -> dict:
        return p.encode(await self.review.on_accept(decode(params, p.ReviewDecisionParams)))

    async def on_review_reject(self, params: Any) -> dict:
        return p.encode(await self.review.on_reject(decode(params, p.ReviewDecisionParams)))

    def on_review_list(self, params: Any) -> dict:
        return p.encode(self.review.on_list(decode(params, p.ReviewListParams)))

    # ------------------------------------------------ diagnostics, fixes
    def on_diagnostics(self, params: Any) -> None:
        try:
            args = p.decode(params, p.DiagnosticsParams)
        except p.ParamsError as exc:  # a notification has no answer to carry the error
            self.diagnostics.on_invalid_params(exc)
            return
        self.diagnostics.on_diagnostics(args)

    async def on_code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        return await self.fixes.on_code_action(params)

    async def on_ask_to_fix(self, *arguments: Any) -> dict:
        if len(arguments) != 1:
            raise JsonRpcInvalidParams(f"{p.ASK_TO_FIX} takes one argument")
        return p.encode(await self.fixes.on_ask_to_fix(decode(arguments[0], p.AskToFixArgs)))


def serve(tcp: str | None = None) -> int:
    """Run the server on stdio, or on HOST:PORT; returns the exit code."""
    from server import framing  # our frame reader in place of pygls' (see there)

    server = TachyServer()
    try:
        if tcp is not None:
            host, _, port = tcp.rpartition(":")
            framing.start_tcp(server, host or "127.0.0.1", int(port))
        else:
            framing.start_io(server)  # pygls' start_io, with a reader that caps messages
    finally:
        # The loop is gone (exit, or the client vanished): runs were cancelled with
        # it, which killed their commands; the indexes are closed cleanly here.
        server.folders.close_all()
    return server.exit_code
