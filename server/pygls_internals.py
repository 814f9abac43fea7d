"""Every use of a pygls internal, named and explained in one place.

pygls 2.1.1 is pinned; each name below reaches past its public API, says what it
touches and why, and is the only place that does. The rest of server/ calls these
helpers (or, for the protocol, subclasses TachyProtocol) instead.

- `TachyProtocol` overrides `JsonRPCProtocol.structure_message` / `handle_message`
  and pygls' own `textDocument/didChange` and `exit` handlers, and reads
  `_send_response`, `_shutdown` and `_server` (see each method);
- `keep_json_objects` registers structure hooks on `protocol._converter` for pygls'
  message classes; `structure` reads `protocol._converter` to build lsprotocol types;
- `plain_handler` works around `LanguageServer.feature` tagging the function it
  registers with attributes;
- server/framing.py replaces pygls' stdio/TCP read loop (`pygls.io_.run_async`,
  `JsonRPCServer._start_io_async`, `JsonRPCServer.start_tcp`) with a reader that caps
  message sizes; the parts of pygls it needs for that are the helpers under
  "serving" below: `stdout_writer`, `set_stop_event`, `tcp_server`/`set_tcp_server`,
  `read_message` and `handle`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, BinaryIO
from urllib.parse import unquote

from cattrs import transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
    lsp_method,
)
from pygls.protocol.json_rpc import RPCRequest

from server.errors import clip

log = logging.getLogger(__name__)

DROPPED = object()  # a message answered (or reported) while being read; not handled


class TachyProtocol(LanguageServerProtocol):
    """pygls' protocol, stricter about malformed input: a request whose params do not
    fit its LSP type is answered with an error naming the bad field (pygls would drop
    it, and the editor would wait for an answer forever), and a change to a document
    the editor never opened is reported clearly instead of failing deep inside pygls.

    `self._server` is pygls' back-reference to the TachyServer (its `editor` shows
    messages, its `exit_code` is what `serve` returns)."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        # Internal: pygls calls this as the json.loads object_hook for every message
        # and raises JsonRpcException on params that do not fit, then drops the message.
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
                # Internal: _send_response is how pygls answers a request by id.
                self._send_response(data["id"], error=error)
            else:
                log.warning("%s notification ignored: invalid params: %s", method, detail)
                self._server.editor.show(
                    f"tachy: ignored a {method} notification with invalid params: {detail}",
                    types.MessageType.Warning,
                )
            return DROPPED

    def handle_message(self, message: Any) -> None:
        # Internal: pygls' dispatch of one structured message.
        if message is DROPPED:
            return
        if not hasattr(message, "jsonrpc"):  # valid JSON, but not a JSON-RPC message
            log.warning("ignored a message that is not JSON-RPC: %.200r", message)
            self._server.editor.show(
                f"tachy: ignored a message that is not JSON-RPC 2.0: {clip(repr(message), 80)}",
                types.MessageType.Warning,
            )
            return
        # Internal: _shutdown is pygls' flag set by the shutdown request; RPCRequest is
        # the base of the request classes structure_message builds.
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
        # Internal: pygls' own didChange handler (it updates its TextDocument, then
        # calls ours) fails deep inside for a document that was never opened.
        uri = params.text_document.uri
        if unquote(uri) not in self.workspace.text_documents:
            log.warning("didChange for %s, which was never opened; ignored", uri)
            self._server.editor.show(
                f"tachy: ignored a change to {uri}, which was never opened (didOpen)",
                types.MessageType.Warning,
            )
            return
        yield from super().lsp_text_document__did_change(params)

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args):
        # Internal: pygls' own exit handler, which calls sys.exit.
        # LSP: exit code 0 after a shutdown request, 1 without one.
        self._server.exit_code = 0 if self._shutdown else 1
        if isinstance(tcp_server(self._server), asyncio.Server):
            # --tcp: stop serving. pygls' sys.exit would surface in asyncio's log as an
            # unhandled error of the connection; serve() returns the exit code instead.
            self.writer.close()
            self._server.shutdown()
            return
        yield from super().lsp_exit(*args)


def keep_json_objects(converter: Any) -> None:
    """pygls turns the params and results of methods lsprotocol does not know (all of
    tachy/*) into namedtuples, which renames keys that are not identifiers (a
    WorkspaceEdit's `changes`, keyed by URI). Keep them the JSON objects they are.

    Internal: `converter` is a protocol's `_converter` (the cattrs converter pygls
    structures every message with); the classes are pygls' message types."""
    for kind in (JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage):
        converter.register_structure_hook(kind, lambda obj, cls: cls(**obj))


def converter_of(protocol: Any) -> Any:
    """Internal: pygls' cattrs converter of a protocol (server's or a test client's)."""
    return protocol._converter


def structure(server: Any, data: Any, kind: type) -> Any:
    """An lsprotocol object from its JSON, with the converter pygls uses for the wire
    (it knows lsprotocol's unions and renamed fields)."""
    return converter_of(server.protocol).structure(data, kind)


def plain_handler(method: Callable) -> Callable:
    """A bound method as the plain function pygls registers: `LanguageServer.feature`
    and `.command` tag the function with attributes (internal bookkeeping), which a
    bound method cannot carry. Parameters pass through as is."""
    if asyncio.iscoroutinefunction(method):

        async def handler(*args: Any) -> Any:
            return await method(*args)
    else:

        def handler(*args: Any) -> Any:
            return method(*args)

    handler.__name__ = method.__name__
    return handler


# ------------------------------------------------------------------ serving
# Used by server/framing.py, which runs pygls' read loop itself.
def stdout_writer(buffer: BinaryIO) -> Any:
    """pygls.io_.StdoutWriter (internal module): the writer its stdio loop uses."""
    return StdoutWriter(buffer)


def set_stop_event(server: Any, event: threading.Event) -> None:
    """Internal: `_stop_event` is what pygls' `shutdown()` sets to end the read loop."""
    server._stop_event = event


def tcp_server(server: Any) -> Any:
    """Internal: `_server` holds the asyncio.Server under --tcp (None on stdio);
    pygls' `shutdown()` closes it."""
    return getattr(server, "_server", None)


def set_tcp_server(server: Any, listener: asyncio.Server) -> None:
    server._server = listener


def read_message(server: Any, body: bytes) -> Any:
    """One body as pygls' loop decodes it: JSON with the protocol's (internal)
    structure_message as the object hook."""
    return json.loads(body, object_hook=server.protocol.structure_message)


def handle(server: Any, message: Any) -> None:
    """Internal: hand a structured message to the protocol's dispatch."""
    server.protocol.handle_message(message)
