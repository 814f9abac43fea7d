"""A real LSP client for end-to-end tests: starts `tachy serve` as a subprocess and
talks to it with pytest-lsp, the way VS Code or Neovim would.

`EditorClient` plays the editor's part: it keeps the text of the documents it opened,
applies workspace/applyEdit to them (and sends didChange, as an editor does), answers
workspace/configuration and client/registerCapability, and records tachy/agent/event,
tachy/review/propose and window/showMessage notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Union

from lsprotocol import types
from pygls.exceptions import JsonRpcMethodNotFound
from pytest_lsp import LanguageClient, client_capabilities, make_test_lsp_client

from server import protocol as p
from server.pygls_internals import keep_json_objects

VSCODE = "visual-studio-code"
NEOVIM = "neovim"
CLIENTS = (VSCODE, NEOVIM)


class EditorClient:
    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.texts: dict[str, str] = {}  # uri -> current text of open documents
        self.versions: dict[str, int] = {}
        self.events: list[dict[str, Any]] = []  # tachy/agent/event params, in arrival order
        self.proposals: list[dict[str, Any]] = []  # tachy/review/propose params
        self.applied: list[dict[str, Any]] = []  # workspace/applyEdit params.edit
        self.apply_answer: Callable[[dict], bool] = lambda edit: True
        self.messages = client.messages  # window/showMessage
        self.registrations: list[types.Registration] = []  # client/registerCapability
        # Exceptions raised in this client's handlers (an LspSpecificationWarning made
        # an error, say): pygls only logs them, so lsp_session fails the test with them.
        self.errors: list[Exception] = []
        self.on_proposal: Callable[[dict[str, Any]], None] | None = None
        self.initialize_result: types.InitializeResult | None = None

    # ------------------------------------------------------------- requests
    async def request(self, method: str, params: Any | None = None) -> Any:
        result = await self.client.protocol.send_request_async(method, params or {})
        return result

    def notify(self, method: str, params: Any) -> None:
        self.client.protocol.notify(method, params)

    @property
    def encoding(self) -> str:
        """The position encoding the server chose (utf-16 unless the client offered
        others: Neovim offers utf-8 first)."""
        caps = self.initialize_result and self.initialize_result.capabilities
        encoding = (caps and caps.position_encoding) or "utf-16"
        return getattr(encoding, "value", encoding)

    def position(self, uri: str, line: int, index: int) -> types.Position:
        """The LSP position of `index` (a Python str index) in line `line` of `uri`."""
        prefix = self.texts[uri].splitlines()[line][:index]
        return types.Position(line=line, character=_units(prefix, self.encoding))

    # ------------------------------------------------------------ documents
    def open(self, path: Path, text: str | None = None, language: str = "python") -> str:
        uri = path.as_uri()
        text = path.read_text() if text is None else text
        self.texts[uri], self.versions[uri] = text, 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id=language, version=1, text=text
                )
            )
        )
        return uri

    def change(self, uri: str, text: str) -> None:
        """Replace the whole text (a full-sync change)."""
        self._changed(uri, text, [types.TextDocumentContentChangeWholeDocument(text=text)])

    def _changed(self, uri: str, text: str, changes: list[Any]) -> None:
        """Record the new text locally and tell the server, as an editor does."""
        self.versions[uri] += 1
        self.texts[uri] = text
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(
                    uri=uri, version=self.versions[uri]
                ),
                content_changes=changes,
            )
        )

    def edit(self, uri: str, edits: list[types.TextEdit]) -> None:
        """Incremental changes, applied locally too (as an editor does)."""
        text = self.texts[uri]
        for e in edits:
            text = apply_text_edits(text, [e], self.encoding)
        partial = [
            types.TextDocumentContentChangePartial(range=e.range, text=e.new_text) for e in edits
        ]
        self._changed(uri, text, partial)

    def save(self, uri: str) -> None:
        Path(types_uri_path(uri)).write_text(self.texts[uri])
        self.client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    def close(self, uri: str) -> None:
        self.texts.pop(uri, None)
        self.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    # ------------------------------------------------------------- helpers
    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 20.0) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("condition not met in time")
            await asyncio.sleep(0.02)

    async def wait_indexed(self, timeout: float = 60.0) -> dict[str, Any]:
        async def ready() -> dict[str, Any]:
            while True:
                status = await self.request(p.INDEX_STATUS)
                if status["state"] in ("lexical", "ready"):
                    return status
                await asyncio.sleep(0.05)

        return await asyncio.wait_for(ready(), timeout)

    def session_events(self, session_id: str) -> list[dict[str, Any]]:
        return [e["event"] for e in self.events if e["sessionId"] == session_id]


def types_uri_path(uri: str) -> str:
    from pygls.uris import to_fs_path

    return to_fs_path(uri) or ""


def _units(text: str, encoding: str) -> int:
    """The length of `text` in the code units of an LSP position encoding."""
    if encoding == "utf-8":
        return len(text.encode("utf-8", "surrogatepass"))
    if encoding == "utf-32":
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def apply_text_edits(text: str, edits: list[Any], encoding: str = "utf-16") -> str:
    """Apply LSP TextEdits (lsprotocol objects or dicts) to `text`; their positions
    count code units of `encoding`, the position encoding the server chose."""

    def offset(position: Any) -> int:
        line = position["line"] if isinstance(position, dict) else position.line
        char = position["character"] if isinstance(position, dict) else position.character
        lines = text.splitlines(keepends=True)
        if line >= len(lines):
            return len(text)
        start = sum(len(x) for x in lines[:line])
        units = 0
        for i, ch in enumerate(lines[line]):
            if units >= char:
                return start + i
            units += _units(ch, encoding)
        return start + len(lines[line].rstrip("\r\n")) if char > units else start + len(lines[line])

    spans = []
    for e in edits:
        rng = e["range"] if isinstance(e, dict) else e.range
        new = e["newText"] if isinstance(e, dict) else e.new_text
        start = rng["start"] if isinstance(rng, dict) else rng.start
        end = rng["end"] if isinstance(rng, dict) else rng.end
        spans.append((offset(start), offset(end), new))
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _register_editor(client: LanguageClient, editor: EditorClient, configuration: Any) -> None:
    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        converter = client.protocol._converter
        edit = converter.unstructure(params.edit)
        editor.applied.append(edit)
        if not editor.apply_answer(edit):
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason="user said no")
        changes = edit.get("documentChanges") or [
            {"textDocument": {"uri": uri, "version": None}, "edits": edits}
            for uri, edits in (edit.get("changes") or {}).items()
        ]
        for change in changes:
            if "kind" in change:
                continue
            uri = change["textDocument"]["uri"]
            version = change["textDocument"].get("version")
            if uri not in editor.texts:
                continue
            if version is not None and version != editor.versions[uri]:
                return types.ApplyWorkspaceEditResult(
                    applied=False, failure_reason="document version changed"
                )
            new_text = apply_text_edits(editor.texts[uri], change["edits"], editor.encoding)
            editor.change(uri, new_text)
        return types.ApplyWorkspaceEditResult(applied=True)

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: types.RegistrationParams) -> None:
        editor.registrations.extend(params.registrations)

    @client.feature(p.AGENT_EVENT)
    def agent_event(params: Any) -> None:
        editor.events.append(params)

    @client.feature(p.REVIEW_PROPOSE)
    def proposal(params: Any) -> None:
        data = params
        editor.proposals.append(data)
        if editor.on_proposal is not None:
            editor.on_proposal(data)

    if configuration is not None:
        client.set_configuration(configuration, section="tachy")

    report = client.report_server_error

    def report_error(error: Exception, source: Any) -> None:
        if source is not JsonRpcMethodNotFound:
            editor.errors.append(error)
        report(error, source)

    client.report_server_error = report_error  # type: ignore[method-assign]


def _read_code_actions_right(client: LanguageClient) -> None:
    """lsprotocol reads any object with a "command" key as a Command, so a CodeAction
    that carries its command (as ours do) would arrive as a broken Command: decide by
    the type of "command" instead (a string only in a Command)."""
    converter = client.protocol._converter

    def structure(data: Any, _: type) -> types.Command | types.CodeAction:
        kind = types.Command if isinstance(data.get("command"), str) else types.CodeAction
        return converter.structure(data, kind)

    converter.register_structure_hook(
        Union[types.Command, types.CodeAction],  # noqa: UP007 (the key lsprotocol uses)
        structure,
    )


def server_command() -> list[str]:
    return [sys.executable, "-m", "server.cli", "serve"]


PROJECT = Path(__file__).resolve().parents[2]


class RawConnection:
    """Content-Length framed JSON-RPC over asyncio streams, byte for byte: for what a
    well-behaved client library cannot send (malformed bodies, exit without shutdown)
    and for --tcp. It declares no client capabilities, so the server asks nothing of it;
    notifications that arrive while waiting for a response are kept in `notifications`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.notifications: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []  # answers to no request of ours (id null)
        self._ids = iter(range(1, 1 << 30))

    def send_body(self, body: bytes) -> None:
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send(self, message: dict[str, Any]) -> None:
        self.send_body(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"method": method, **({} if params is None else {"params": params})})

    async def read(self) -> dict[str, Any] | None:
        """The next message, or None at the end of the stream."""
        length = None
        while True:
            line = await self.reader.readline()
            if not line:
                return None
            if not line.strip():
                break
            name, _, value = line.decode("ascii").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        assert length is not None, "a message without Content-Length"
        return json.loads(await self.reader.readexactly(length))

    async def request(self, method: str, params: Any = None, timeout: float = 30.0) -> dict:
        """The whole response message (with "result" or "error")."""
        msg_id = next(self._ids)
        self.send({"id": msg_id, "method": method, "params": {} if params is None else params})
        return await asyncio.wait_for(self.response_to(msg_id), timeout)

    async def response_to(self, msg_id: int | None) -> dict[str, Any]:
        while True:
            message = await self.read()
            if message is None:
                raise ConnectionError("the server closed the connection")
            if "method" in message and "id" not in message:
                self.notifications.append(message)
            elif "method" not in message and message.get("id") == msg_id:
                return message
            elif "method" not in message:
                self.responses.append(message)

    async def initialize(self, folders: list[Path], options: Any = None) -> dict[str, Any]:
        response = await self.request(
            "initialize",
            {
                "processId": None,
                "capabilities": {},
                "workspaceFolders": [{"uri": f.as_uri(), "name": f.name} for f in folders],
                "initializationOptions": options or {"index": {"dense": False}},
            },
        )
        self.notify("initialized", {})
        return response

    def close(self) -> None:
        self.writer.close()


@contextlib.asynccontextmanager
async def raw_server(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, RawConnection]]:
    """`tachy serve ARGS` on stdio, spoken to raw; killed afterwards if still running."""
    proc = await asyncio.create_subprocess_exec(
        *server_command(),
        *args,
        cwd=PROJECT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    writer = proc.stdin
    # A subprocess pipe is a StreamWriter in all but name: what RawConnection uses.
    connection = RawConnection(proc.stdout, writer)  # type: ignore[arg-type]
    try:
        yield proc, connection
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def lsp_session(
    folders: list[Path],
    *,
    capabilities: str | types.ClientCapabilities = VSCODE,
    options: dict[str, Any] | None = None,
    configuration: dict[str, Any] | None = None,
    review_ui: bool = True,
) -> AsyncIterator[EditorClient]:
    """A started, initialized server with `folders` open; shut down afterwards.
    `review_ui`: the client declares it shows tachy/review/propose itself, as the
    tachy extensions do (otherwise the server asks with window/showMessageRequest)."""
    client = make_test_lsp_client()
    keep_json_objects(client.protocol._converter)
    _read_code_actions_right(client)
    editor = EditorClient(client)
    _register_editor(client, editor, configuration)
    await client.start_io(*server_command(), cwd=str(PROJECT))
    if isinstance(capabilities, str):
        capabilities = client_capabilities(capabilities)
    if review_ui:
        capabilities.experimental = {**(capabilities.experimental or {}), "tachy": {"review": True}}
    editor.initialize_result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            workspace_folders=[types.WorkspaceFolder(uri=f.as_uri(), name=f.name) for f in folders],
            initialization_options=options
            if options is not None
            else {"index": {"dense": False}, "approval": "auto"},
        )
    )
    try:
        yield editor
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), 30)
        with contextlib.suppress(Exception):
            await client.stop()
    assert not editor.errors, f"the client's handlers failed: {editor.errors}"
