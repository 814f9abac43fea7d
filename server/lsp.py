"""The tachy language server: what editors (and IDE plugin authors) talk to.

One thin handler per LSP method; the work lives in small parts it delegates to:
Documents (the unsaved-text overlay), FolderIndex (one index per workspace folder,
kept current on a thread), Sessions (agent runs), ReviewBoard (agent edits as
reviewable WorkspaceEdits) and ForwardedDiagnostics. The custom tachy/* methods are
declared in server/protocol.py.

The event loop only ever waits on the network: indexing runs on folder threads,
searches and tools on the tool thread pool, and each agent run is its own task.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
    lsp_method,
)
from pygls.protocol.json_rpc import RPCRequest

from agent.tools.base import run_blocking
from index.errors import CodeIndexError
from server import config
from server import protocol as p
from server.diagnostics import ForwardedDiagnostics
from server.documents import Documents, path_to_uri, uri_to_path
from server.indexing import FolderIndex
from server.review import ReviewBoard
from server.sessions import SessionError, Sessions

log = logging.getLogger(__name__)

REQUEST_FAILED = -32803  # LSP's RequestFailed: a valid request that could not be done
CLIENT_REPLY_S = 10.0  # how long setup waits for the client to answer a request of ours
SYMBOL_LIMIT = 200
SYMBOL_KINDS = {
    "class": types.SymbolKind.Class,
    "function": types.SymbolKind.Function,
    "method": types.SymbolKind.Method,
    "module": types.SymbolKind.Module,
    "interface": types.SymbolKind.Interface,
    "struct": types.SymbolKind.Struct,
    "enum": types.SymbolKind.Enum,
    "type": types.SymbolKind.TypeParameter,
    "trait": types.SymbolKind.Interface,
    "impl": types.SymbolKind.Class,
    "namespace": types.SymbolKind.Namespace,
    "constant": types.SymbolKind.Constant,
    "variable": types.SymbolKind.Variable,
}


def _version() -> str:
    try:
        return version("tachy")
    except PackageNotFoundError:
        return "unknown"


def failed(message: str) -> JsonRpcException:
    return JsonRpcException(message, code=REQUEST_FAILED)


def decode(params: Any, kind: type[p.Wire]) -> Any:
    try:
        return p.decode(params, kind)
    except p.ParamsError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


DROPPED = object()  # a message answered (or reported) while being read; not handled


class TachyProtocol(LanguageServerProtocol):
    """pygls' protocol, stricter about malformed input: a request whose params do not
    fit its LSP type is answered with an error naming the bad field (pygls would drop
    it, and the editor would wait for an answer forever), and a change to a document
    the editor never opened is reported clearly instead of failing deep inside pygls."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            method = data.get("method")
            if not isinstance(method, str):
                raise  # a response we cannot read: pygls reports it
            cause = exc.__cause__
            if isinstance(cause, ClassValidationError):
                detail = "; ".join(transform_error(cause)[:5])
            else:
                detail = str(cause or exc)
            if "id" in data:
                message = f"invalid params for {method}: {detail}"
                error = types.ResponseError(code=exc.code, message=message)
                self._send_response(data["id"], error=error)
            else:
                log.warning("%s notification ignored: invalid params: %s", method, detail)
                self._server.show(
                    f"tachy: ignored a {method} notification with invalid params: {detail}",
                    types.MessageType.Warning,
                )
            return DROPPED

    def handle_message(self, message: Any) -> None:
        if message is DROPPED:
            return
        if not hasattr(message, "jsonrpc"):  # valid JSON, but not a JSON-RPC message
            log.warning("ignored a message that is not JSON-RPC: %.200r", message)
            self._server.show(
                f"tachy: ignored a message that is not JSON-RPC 2.0: {_clip(repr(message), 80)}",
                types.MessageType.Warning,
            )
            return
        if self._shutdown and isinstance(message, RPCRequest):
            # LSP: requests after shutdown are errors (pygls would leave them unanswered).
            error = types.ResponseError(
                code=types.ErrorCodes.InvalidRequest, message="the server is shutting down"
            )
            self._send_response(message.id, error=error)
            return
        super().handle_message(message)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        if unquote(uri) not in self.workspace.text_documents:
            log.warning("didChange for %s, which was never opened; ignored", uri)
            self._server.show(
                f"tachy: ignored a change to {uri}, which was never opened (didOpen)",
                types.MessageType.Warning,
            )
            return
        yield from super().lsp_text_document__did_change(params)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args):
        # LSP: exit code 0 after a shutdown request, 1 without one.
        self._server.exit_code = 0 if self._shutdown else 1
        if isinstance(self._server._server, asyncio.Server):
            # --tcp: stop serving. pygls' sys.exit would surface in asyncio's log as an
            # unhandled error of the connection; serve() returns the exit code instead.
            self.writer.close()
            self._server.shutdown()
            return
        yield from super().lsp_exit(*args)


class TachyServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("tachy", _version(), protocol_cls=TachyProtocol)
        keep_json_objects(self.protocol._converter)
        self.settings = config.defaults()
        self.documents = Documents()
        self.diagnostics = ForwardedDiagnostics()
        self.folders: dict[Path, FolderIndex] = {}
        self.board: ReviewBoard | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tokens = itertools.count(1)
        self._initial_folders: list[str] = []
        # The client named no folder: the first file opened gives one (its directory).
        self._folder_from_document = False
        self._background: set[asyncio.Task] = set()
        # Set once `initialized` has pulled the configuration and added the folders:
        # requests that need either wait for it (an editor sends them right away).
        self.ready = asyncio.Event()
        self.exit_code = 0  # a lost client ends the server cleanly too
        self._index_progress: dict[Path, Callable[[str | None, bool], None]] = {}
        self.sessions = Sessions(
            notify=self.notify,
            documents=self.documents,
            diagnostics=self.diagnostics,
            board=self.review_board,
            folder_index=self.folders.get,
            progress=self.begin_progress,
        )
        self._register()

    # --------------------------------------------------------- registration
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
            self.feature(method, options)(_plain(handler))
        self.command(p.ASK_TO_FIX)(_plain(self.on_ask_to_fix))

    def report_server_error(self, error: Exception, source: Any) -> None:
        if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
            # The client sent bytes that are not JSON: its fault, not a server error.
            self.show(
                f"tachy: ignored a message that is not valid JSON ({error})",
                types.MessageType.Warning,
            )
            return
        super().report_server_error(error, source)

    def _spawn(self, work: Any) -> None:
        """Run a coroutine in the background, keeping it alive (the loop holds only weak
        references to tasks)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------- editor helpers
    def notify(self, method: str, params: Any) -> None:
        self.protocol.notify(method, params)

    def show(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    @property
    def position_encoding(self) -> str:
        encoding = self.workspace.position_encoding
        return getattr(encoding, "value", encoding) or "utf-16"

    @property
    def document_changes(self) -> bool:
        edit = (
            self.client_capabilities.workspace and self.client_capabilities.workspace.workspace_edit
        )
        return bool(edit and edit.document_changes)

    @property
    def review_ui(self) -> bool:
        experimental = self.client_capabilities.experimental
        tachy = experimental.get("tachy") if isinstance(experimental, dict) else None
        return isinstance(tachy, dict) and tachy.get("review") is True

    async def ask(self, message: str, actions: list[str]) -> str | None:
        answer = await self.window_show_message_request_async(
            types.ShowMessageRequestParams(
                type=types.MessageType.Info,
                message=message,
                actions=[types.MessageActionItem(title=a) for a in actions],
            )
        )
        return answer.title if answer is not None else None

    async def apply_edit(self, label: str, edit: dict[str, Any]) -> tuple[bool, str]:
        caps = self.client_capabilities.workspace
        if not (caps and caps.apply_edit):
            return False, "the editor does not support workspace/applyEdit"
        params = types.ApplyWorkspaceEditParams(
            edit=self.protocol._converter.structure(edit, types.WorkspaceEdit), label=label
        )
        result = await self.workspace_apply_edit_async(params)
        return bool(result.applied), result.failure_reason or ""

    def review_board(self) -> ReviewBoard:
        if self.board is None:
            self.board = ReviewBoard(
                self, self.documents, lambda: self.settings.approval, asyncio.get_running_loop()
            )
        return self.board

    def _supports_progress(self) -> bool:
        window = self.client_capabilities.window
        return bool(window and window.work_done_progress)

    async def begin_progress(
        self, token: str | int | None, title: str, message: str | None = None
    ) -> Callable[[str | None, bool], None]:
        """Start a $/progress report; returns report(message, end). Uses the client's
        work-done token when it gave one, else creates one if the client can show it."""
        if token is None:
            if not self._supports_progress():
                return lambda message, end: None
            token = f"tachy-{next(self._tokens)}"
            try:
                await self.work_done_progress.create_async(token)
            except Exception as exc:  # the client refused: work without progress
                log.info("no progress token: %s", exc)
                return lambda message, end: None
        progress = self.work_done_progress
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

    # ------------------------------------------------------------- folders
    def folder_for(self, path: Path) -> FolderIndex | None:
        best = None
        for root, folder in self.folders.items():
            if (path == root or root in path.parents) and (
                best is None or len(root.parts) > len(best.root.parts)
            ):
                best = folder
        return best

    def _relative(self, path: Path) -> tuple[FolderIndex, str] | None:
        folder = self.folder_for(path)
        if folder is None or path == folder.root:
            return None
        return folder, path.relative_to(folder.root).as_posix()

    def add_folder(self, uri: str) -> None:
        path = uri_to_path(uri)
        if path is None or not path.is_dir():
            self.show(f"tachy: workspace folder {uri} is not a local directory; it is not indexed")
            return
        if path in self.folders:
            return
        folder = FolderIndex(
            path,
            self.settings.index,
            on_progress=self._index_progress_from_thread,
            on_done=self._index_done_from_thread,
        )
        self.folders[path] = folder
        for snap in self.documents.under(path):  # opened before the folder was added
            folder.changed(snap.path.relative_to(path).as_posix(), snap.data)
        if self.settings.index.enabled:
            folder.start()
            if self.loop is not None:
                self._spawn(self._start_index_progress(folder))
        else:
            folder.disable("indexing is turned off (tachy.index.enabled)")

    def remove_folder(self, uri: str) -> None:
        path = uri_to_path(uri)
        folder = self.folders.pop(path, None) if path else None
        if folder is not None:
            self._end_index_progress(folder.root)
            asyncio.get_running_loop().run_in_executor(None, folder.close)

    async def _start_index_progress(self, folder: FolderIndex) -> None:
        report = await self.begin_progress(None, "tachy: indexing", folder.root.name)
        if folder.state in ("ready", "failed"):
            report(None, True)
        else:
            self._index_progress[folder.root] = report

    def _end_index_progress(self, root: Path) -> None:
        report = self._index_progress.pop(root, None)
        if report is not None:
            report(None, True)

    def _index_progress_from_thread(
        self, folder: FolderIndex, phase: str, done: int, total: int
    ) -> None:
        def send() -> None:
            report = self._index_progress.get(folder.root)
            if report is not None:
                report(f"{folder.root.name}: {phase} {done}/{total}", False)

        if self.loop is not None:
            self.loop.call_soon_threadsafe(send)

    def _index_done_from_thread(self, folder: FolderIndex) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._end_index_progress, folder.root)

    # ------------------------------------------------------------ lifecycle
    def on_initialize(self, params: types.InitializeParams) -> None:
        self.loop = asyncio.get_running_loop()
        self._apply_settings(params.initialization_options)
        folders = params.workspace_folders or []
        uris = [f.uri for f in folders]
        if not uris and params.root_uri:
            uris = [params.root_uri]
        elif not uris and params.root_path:
            uris = [path_to_uri(params.root_path)]
        self._initial_folders = uris
        self._folder_from_document = not uris

    async def on_initialized(self, params: types.InitializedParams) -> None:
        try:
            await self._pull_configuration()
            await self._watch_files()
            for uri in self._initial_folders:
                self.add_folder(uri)
        finally:
            self.ready.set()

    def _apply_settings(self, raw: Any) -> None:
        if isinstance(raw, dict) and isinstance(raw.get(config.SECTION), dict):
            raw = raw[config.SECTION]  # {"tachy": {...}} as well as {...}
        self.settings, problems = config.merge(self.settings, raw)
        for problem in problems:
            self.show(f"tachy: {problem}", types.MessageType.Warning)

    async def _pull_configuration(self) -> None:
        workspace = self.client_capabilities.workspace
        if not (workspace and workspace.configuration):
            return
        try:
            values = await asyncio.wait_for(
                self.workspace_configuration_async(
                    types.ConfigurationParams(
                        items=[types.ConfigurationItem(section=config.SECTION)]
                    )
                ),
                CLIENT_REPLY_S,
            )
        except Exception as exc:
            log.warning("workspace/configuration failed: %s", exc)
            return
        if values and values[0] is not None:
            self._apply_settings(values[0])

    async def _watch_files(self) -> None:
        workspace = self.client_capabilities.workspace
        watched = workspace and workspace.did_change_watched_files
        if not (watched and watched.dynamic_registration):
            return
        options = types.DidChangeWatchedFilesRegistrationOptions(
            watchers=[types.FileSystemWatcher(glob_pattern="**/*")]
        )
        registration = types.Registration(
            id="tachy-watch",
            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=options,
        )
        try:
            await asyncio.wait_for(
                self.client_register_capability_async(
                    types.RegistrationParams(registrations=[registration])
                ),
                CLIENT_REPLY_S,
            )
        except Exception as exc:
            log.warning("could not register file watching: %s", exc)

    async def on_shutdown(self, params: None) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop every run and close the indexes (shutdown, or the client vanished)."""
        await self.sessions.cancel_all()
        folders, self.folders = list(self.folders.values()), {}
        for folder in folders:
            await run_blocking(folder.close)

    async def on_configuration_changed(self, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and config.SECTION in settings:
            self._apply_settings(settings[config.SECTION])
        else:
            await self._pull_configuration()

    def on_folders_changed(self, params: types.DidChangeWorkspaceFoldersParams) -> None:
        for folder in params.event.removed:
            self.remove_folder(folder.uri)
        for folder in params.event.added:
            self.add_folder(folder.uri)

    # ------------------------------------------------------- document sync
    def _sync(self, uri: str, closed: bool = False) -> None:
        """Mirror pygls' document into the overlay and tell the folder's index."""
        if closed:
            snap = self.documents.remove(uri)
            path = snap.path if snap else uri_to_path(uri)
            text = None
        else:
            doc = self.workspace.get_text_document(uri)
            snap = self.documents.put(uri, doc.version or 0, doc.source)
            path = snap.path if snap else None
            text = snap.data if snap else None
        if path is None:
            return
        where = self._relative(path)
        if where is not None:
            folder, rel = where
            folder.changed(rel, text)

    def on_document_opened(self, params: types.DidOpenTextDocumentParams) -> None:
        if self._folder_from_document:
            self._add_document_folder(params.text_document.uri)
        self._sync(params.text_document.uri)

    def _add_document_folder(self, uri: str) -> None:
        """No rootUri and no workspaceFolders (a file opened outside any project): the
        directory of the first file opened is the workspace folder, LSP's single-file
        convention. Never the home directory or /, which would index everything."""
        path = uri_to_path(uri)
        if path is None:
            return  # untitled: and the like; the next file decides
        self._folder_from_document = False
        directory = path.parent
        if directory in (Path(os.path.expanduser("~")).resolve(), Path("/")):
            self.show(
                f"tachy: {path.name} is not in a workspace folder and tachy does not index "
                f"{directory}; open a folder to search it"
            )
            return
        if self.ready.is_set():
            self.add_folder(path_to_uri(directory))
        else:  # `initialized` adds it with the others, after reading the settings
            self._initial_folders.append(path_to_uri(directory))

    def on_document_changed(self, params: types.DidChangeTextDocumentParams) -> None:
        self._sync(params.text_document.uri)

    def on_document_saved(self, params: types.DidSaveTextDocumentParams) -> None:
        self._sync(params.text_document.uri)

    def on_document_closed(self, params: types.DidCloseTextDocumentParams) -> None:
        self._sync(params.text_document.uri, closed=True)

    def on_watched_files_changed(self, params: types.DidChangeWatchedFilesParams) -> None:
        for change in params.changes:
            path = uri_to_path(change.uri)
            if path is None or self.documents.get(path) is not None:
                continue  # an open document's unsaved text wins over the disk
            where = self._relative(path)
            if where is None:
                continue
            folder, rel = where
            if change.type == types.FileChangeType.Created and path.is_dir():
                folder.rescan()
            else:
                folder.changed(rel, None)

    def on_diagnostics(self, params: Any) -> None:
        try:
            args = p.decode(params, p.DiagnosticsParams)
        except p.ParamsError as exc:  # a notification has no answer to carry the error
            self.show(
                f"tachy: ignored a {p.DIAGNOSTICS} notification with {exc}",
                types.MessageType.Warning,
            )
            return
        if not self.diagnostics.replace(args.uri, args.diagnostics):
            log.info("diagnostics for %s ignored: not a file", args.uri)

    # ------------------------------------------------------------- search
    async def on_search(self, params: Any) -> dict:
        args = decode(params, p.SearchParams)
        await self.ready.wait()
        if not 1 <= args.limit <= 200:
            raise JsonRpcInvalidParams("limit must be between 1 and 200")
        folders = list(self.folders.values())
        if not folders:
            raise failed("there is no workspace folder to search")

        def search_all() -> list[p.SearchItem]:
            items = []
            for folder in folders:
                try:
                    hits = folder.search(
                        args.query, limit=args.limit, paths=args.paths, mode=args.mode
                    )
                except CodeIndexError as exc:
                    if len(folders) == 1:
                        raise
                    log.warning("search in %s failed: %s", folder.root, exc)
                    continue
                items += [_search_item(folder.root, hit) for hit in hits]
            items.sort(key=lambda item: -item.score)
            return items[: args.limit]

        try:
            results = await run_blocking(search_all)
        except CodeIndexError as exc:
            raise failed(str(exc)) from None
        return p.encode(p.SearchResult(results=results))

    async def on_index_status(self, params: Any) -> dict:
        decode(params, p.IndexStatusParams)
        await self.ready.wait()
        folders = list(self.folders.values())
        statuses = await run_blocking(lambda: [f.status() for f in folders])
        order = ["failed", "starting", "indexing", "empty", "lexical", "ready", "disabled"]
        state = min((s.state for s in statuses), key=order.index, default="empty")
        return p.encode(
            p.IndexStatusResult(
                state=state,
                files=sum(s.files for s in statuses),
                chunks=sum(s.chunks for s in statuses),
                embedded=sum(s.embedded for s in statuses),
                folders=statuses,
            )
        )

    async def on_workspace_symbol(
        self, params: types.WorkspaceSymbolParams
    ) -> list[types.WorkspaceSymbol]:
        await self.ready.wait()
        folders = list(self.folders.values())

        def lookup() -> list[types.WorkspaceSymbol]:
            found = []
            for folder in folders:
                try:
                    index = folder.opened()  # an index still opening is waited for
                except CodeIndexError:
                    continue  # disabled or failed: tachy/index/status says why
                for hit in index.symbols(params.query, limit=SYMBOL_LIMIT):
                    found.append(_workspace_symbol(folder.root, hit))
            return found[:SYMBOL_LIMIT]

        return await run_blocking(lookup)

    # --------------------------------------------------------------- agent
    def _run_folder(self, uri: str | None, near: str | None = None) -> Path:
        if uri is not None:
            path = uri_to_path(uri)
            if path is None or path not in self.folders:
                raise JsonRpcInvalidParams(f"{uri} is not a workspace folder")
            return path
        if near is not None:
            path = uri_to_path(near)
            folder = self.folder_for(path) if path else None
            if folder is not None:
                return folder.root
        if not self.folders:
            raise failed("there is no workspace folder to work in")
        return next(iter(self.folders))

    async def on_agent_run(self, params: Any) -> dict:
        args = decode(params, p.AgentRunParams)
        await self.ready.wait()
        folder = self._run_folder(args.workspace_folder)
        try:
            result = await self.sessions.run(args, self.settings, folder)
        except SessionError as exc:
            raise failed(str(exc)) from None
        return p.encode(result)

    async def on_agent_cancel(self, params: Any) -> dict:
        args = decode(params, p.AgentCancelParams)
        await self.ready.wait()  # stays ordered after a run sent just before it
        return p.encode(self.sessions.cancel(args.session_id))

    async def on_review_accept(self, params: Any) -> dict:
        args = decode(params, p.ReviewDecisionParams)
        try:
            return p.encode(await self.review_board().accept(args.proposal_id))
        except KeyError as exc:
            raise JsonRpcInvalidParams(exc.args[0]) from None

    async def on_review_reject(self, params: Any) -> dict:
        args = decode(params, p.ReviewDecisionParams)
        try:
            return p.encode(await self.review_board().reject(args.proposal_id))
        except KeyError as exc:
            raise JsonRpcInvalidParams(exc.args[0]) from None

    def on_review_list(self, params: Any) -> dict:
        args = decode(params, p.ReviewListParams)
        return p.encode(p.ReviewListResult(proposals=self.review_board().pending(args.session_id)))

    # -------------------------------------------------------- ask to fix
    async def on_code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        await self.ready.wait()
        path = uri_to_path(params.text_document.uri)
        if path is None or self.folder_for(path) is None:
            return []
        actions = []
        for diagnostic in params.context.diagnostics:
            first_line = diagnostic.message.splitlines()[0] if diagnostic.message else "problem"
            args = p.AskToFixArgs(
                uri=params.text_document.uri, diagnostic=_wire_diagnostic(diagnostic)
            )
            actions.append(
                types.CodeAction(
                    title=f"Ask tachy to fix: {_clip(first_line, 60)}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    command=types.Command(
                        title="Ask tachy to fix", command=p.ASK_TO_FIX, arguments=[p.encode(args)]
                    ),
                )
            )
        return actions

    async def on_ask_to_fix(self, *arguments: Any) -> dict:
        """Start a run on a diagnostic; answers with its session id at once (the run
        streams tachy/agent/event notifications as usual)."""
        if len(arguments) != 1:
            raise JsonRpcInvalidParams(f"{p.ASK_TO_FIX} takes one argument")
        args = decode(arguments[0], p.AskToFixArgs)
        await self.ready.wait()
        path = uri_to_path(args.uri)
        folder = self._run_folder(None, near=args.uri)
        if path is None or not (path == folder or folder in path.parents):
            raise JsonRpcInvalidParams(f"{args.uri} is not in a workspace folder")
        rel = path.relative_to(folder).as_posix()
        d = args.diagnostic
        where = f"{rel}:{d.range.start.line + 1}:{d.range.start.character + 1}"
        source = (
            f" ({d.source}{' ' + str(d.code) if d.code is not None else ''})" if d.source else ""
        )
        prompt = (
            f"Fix this problem reported at {where}{source}:\n{d.message}\n\n"
            "Read the code around it first, make the smallest correct change, and check "
            "the result with read_lints."
        )
        try:
            session_id = self.sessions.new_id(args.session_id)
        except SessionError as exc:
            raise failed(str(exc)) from None
        run = p.AgentRunParams(prompt=prompt, session_id=session_id)

        async def background() -> None:
            try:
                await self.sessions.run(run, self.settings, folder)
            except SessionError as exc:
                self.show(f"tachy: {exc}", types.MessageType.Error)

        self._spawn(background())
        return p.encode(p.AskToFixResult(session_id=session_id))


def keep_json_objects(converter: Any) -> None:
    """pygls turns the params and results of methods lsprotocol does not know (all of
    tachy/*) into namedtuples, which renames keys that are not identifiers (a
    WorkspaceEdit's `changes`, keyed by URI). Keep them the JSON objects they are."""
    for kind in (JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage):
        converter.register_structure_hook(kind, lambda obj, cls: cls(**obj))


def _plain(method: Callable) -> Callable:
    """A bound method as the plain function pygls registers (it tags handlers with
    attributes, which bound methods cannot carry); parameters pass through as is."""
    if asyncio.iscoroutinefunction(method):

        async def handler(*args: Any) -> Any:
            return await method(*args)
    else:

        def handler(*args: Any) -> Any:
            return method(*args)

    handler.__name__ = method.__name__
    return handler


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _wire_diagnostic(d: types.Diagnostic) -> p.LspDiagnostic:
    code = d.code if isinstance(d.code, (str, int)) else None
    return p.LspDiagnostic(
        range=p.Range(
            start=p.Position(d.range.start.line, d.range.start.character),
            end=p.Position(d.range.end.line, d.range.end.character),
        ),
        message=d.message,
        severity=int(d.severity) if d.severity is not None else None,
        code=code,
        source=d.source,
    )


def _lines_range(start_line: int, end_line: int) -> p.Range:
    """Whole lines start..end (1-based, inclusive) as an LSP range."""
    return p.Range(start=p.Position(start_line - 1, 0), end=p.Position(end_line, 0))


def _search_item(root: Path, hit: Any) -> p.SearchItem:
    return p.SearchItem(
        uri=path_to_uri(root / hit.path),
        range=_lines_range(hit.start_line, hit.end_line),
        score=hit.score,
        snippet=hit.snippet,
        symbol=hit.symbol,
    )


def _workspace_symbol(root: Path, hit: Any) -> types.WorkspaceSymbol:
    r = _lines_range(hit.start_line, hit.end_line)
    return types.WorkspaceSymbol(
        name=hit.name,
        kind=SYMBOL_KINDS.get(hit.kind, types.SymbolKind.Object),
        container_name=hit.container or None,
        location=types.Location(
            uri=path_to_uri(root / hit.path),
            range=types.Range(
                start=types.Position(r.start.line, 0), end=types.Position(r.end.line, 0)
            ),
        ),
    )


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
        for folder in list(server.folders.values()):
            folder.close()
    return server.exit_code
