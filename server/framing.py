"""Reading LSP messages off a byte stream (stdio or TCP) without trusting the client.

LSP frames each JSON-RPC message with HTTP-like headers: `Content-Length: N\\r\\n`,
maybe other headers, an empty line, then N bytes of body. pygls 2.1's reader,
`pygls.io_.run_async` (used by `JsonRPCServer._start_io_async` and `start_tcp`),
believes N: it asks the stream for N bytes in one call, so one header that says
`Content-Length: 99999999999999` makes it allocate that much (a MemoryError ends the
server) and a large-but-possible N makes it wait for bytes that never come (the server
hangs). Its header lines are unbounded too, and a header it cannot parse makes it read
the next body as headers, losing that message as well.

This module replaces that loop (and the two pygls entry points that call it, which
cannot be handed another reader) with `FrameReader`, which reads the stream in bounded
chunks and holds at most MAX_MESSAGE_BYTES plus a chunk in memory:

- a body may be at most MAX_MESSAGE_BYTES; a header block at most MAX_HEADER_BYTES;
- a frame whose length is missing, not a number (negative, `abc`), or over the cap is
  reported (log on stderr, and window/logMessage to the client) and skipped without
  reading its body into memory: the reader *resynchronises*, scanning forward for the
  next `Content-Length: <digits>\\r\\n`. A JSON body cannot contain that (a JSON string
  holds no raw CR or LF, and the words are not JSON outside a string), so the scan
  cannot stop inside a well-formed message, and the requests after the bad frame are
  served as usual.

What this takes from pygls beyond its public API is named in server/pygls_internals.py
(the "serving" helpers there).
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from pygls.exceptions import JsonRpcException

from server import pygls_internals as internals

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # the largest body taken (a 64 MiB didOpen is absurd already)
MAX_HEADER_BYTES = 8 * 1024  # a header block is two short lines in practice
READ_CHUNK = 64 * 1024  # what one read asks the stream for (a body: up to BODY_CHUNK)
BODY_CHUNK = 1024 * 1024
HEADER_END = b"\r\n\r\n"
# Where a frame can start, for resynchronising. At most 20 digits (more is over the cap
# anyway), so a candidate cut by a chunk boundary fits in the tail kept between reads.
_FRAME_START = re.compile(rb"content-length:[ \t]*[0-9]{1,20}\r\n", re.IGNORECASE)
_KEEP_FOR_RESYNC = 64

Read = Callable[[int], Awaitable[bytes]]  # up to n bytes, as soon as any arrive; b"" at EOF


class FrameReader:
    """Splits a stream into message bodies. `read(n)` returns up to n bytes (b"" at the
    end); `report(text)` is told about every frame that was skipped, and why."""

    def __init__(self, read: Read, report: Callable[[str], None] = log.warning) -> None:
        self._read = read
        self._report = report
        self._buf = bytearray()
        self._eof = False
        self._resyncing = False  # after a bad frame: looking for the next frame start

    async def _more(self, n: int = READ_CHUNK) -> bool:
        """Append what the stream has (up to n bytes); False at its end."""
        if self._eof:
            return False
        data = await self._read(n)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    async def next_body(self) -> bytes | None:
        """The next well-framed message body, or None at the end of the stream."""
        while True:
            if self._resyncing:
                found = _FRAME_START.search(self._buf)
                if found is None:
                    # Keep only a tail that may hold the beginning of a frame start.
                    del self._buf[: max(0, len(self._buf) - _KEEP_FOR_RESYNC)]
                    if not await self._more():
                        return None
                    continue
                del self._buf[: found.start()]
                self._resyncing = False
            while self._buf[:1] in (b"\r", b"\n"):
                del self._buf[:1]  # blank lines between frames: harmless, as in pygls
            end = self._buf.find(HEADER_END, 0, MAX_HEADER_BYTES + len(HEADER_END))
            if end < 0:
                if len(self._buf) >= MAX_HEADER_BYTES + len(HEADER_END):
                    self._skip(f"a header block longer than {MAX_HEADER_BYTES} bytes")
                elif not await self._more():
                    return None
                continue
            length, problem = _content_length(bytes(self._buf[:end]))
            if problem is not None:
                self._skip(problem)
                continue
            del self._buf[: end + len(HEADER_END)]
            while len(self._buf) < length:
                if not await self._more(min(length - len(self._buf), BODY_CHUNK)):
                    return None  # the stream ended inside the body
            body = bytes(self._buf[:length])
            del self._buf[:length]
            return body

    def _skip(self, problem: str) -> None:
        """Report a bad frame and look for the next frame start from its second byte
        (so the same bad header is not taken again); its body, if one follows, is
        scanned chunk by chunk and never held whole."""
        self._report(f"skipped a malformed message frame: {problem}")
        del self._buf[:1]
        self._resyncing = True


def _content_length(block: bytes) -> tuple[int, str | None]:
    """The body length a header block declares, or (0, why the frame is unusable)."""
    length = None
    for line in block.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            return 0, f"a header line without a colon: {_show(line)}"
        if name.strip().lower() != b"content-length":
            continue  # Content-Type, or an extension: nothing we need
        value = value.strip()
        if not (value.isdigit() and value.isascii()):
            return 0, f"Content-Length is not a byte count: {_show(value)}"
        length = int(value)
    if length is None:
        return 0, "no Content-Length header"
    if length > MAX_MESSAGE_BYTES:
        return 0, f"Content-Length {length} is over the {MAX_MESSAGE_BYTES}-byte limit"
    return length, None


def _show(data: bytes) -> str:
    text = repr(data[:60])[2:-1]
    return text + ("..." if len(data) > 60 else "")


# ------------------------------------------------------------------ serving
async def serve_frames(server: Any, reader: FrameReader, stop_event: threading.Event) -> None:
    """pygls.io_.run_async's loop over our reader: each body is decoded and handed to
    the protocol; a body that fails goes to the server's error report, as in pygls."""
    while not stop_event.is_set():
        body = await reader.next_body()
        if body is None:
            break
        try:
            internals.handle(server, internals.read_message(server, body))
        except Exception as exc:
            log.debug("unable to handle a message", exc_info=True)
            server.report_server_error(exc, JsonRpcException)


def reporter(server: Any) -> Callable[[str], None]:
    """Tell stderr and, where the protocol can, the client (window/logMessage) that a
    frame was skipped: the client sees why its message got no answer."""

    def report(text: str) -> None:
        log.warning("%s", text)
        try:
            from lsprotocol import types

            server.window_log_message(
                types.LogMessageParams(type=types.MessageType.Warning, message=f"tachy: {text}")
            )
        except Exception:  # no writer yet, or not a language server: stderr has it
            log.debug("could not send window/logMessage", exc_info=True)

    return report


def start_io(server: Any) -> None:
    """pygls' JsonRPCServer._start_io_async, reading stdin with FrameReader. The reads
    run on the server's thread pool, as pygls' do (stdin cannot be read without
    blocking)."""
    stop_event = threading.Event()
    internals.set_stop_event(server, stop_event)
    stdin = sys.stdin.buffer
    server.protocol.set_writer(internals.stdout_writer(sys.stdout.buffer))

    def read(n: int) -> Awaitable[bytes]:
        # read1: whatever one read of the pipe gives, so a message is handled as soon as
        # it is in, not once n bytes are.
        return asyncio.get_running_loop().run_in_executor(server.thread_pool, stdin.read1, n)

    try:
        asyncio.run(serve_frames(server, FrameReader(read, reporter(server)), stop_event))
    except BrokenPipeError:
        log.error("Connection to the client is lost! Shutting down the server.")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


def start_tcp(server: Any, host: str, port: int) -> None:
    """pygls' JsonRPCServer.start_tcp (one client at a time), reading each connection
    with FrameReader."""
    stop_event = threading.Event()
    internals.set_stop_event(server, stop_event)

    async def connection(stream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.protocol.set_writer(writer)
        await serve_frames(server, FrameReader(stream.read, reporter(server)), stop_event)
        server.shutdown()

    async def listen() -> None:
        listener = await asyncio.start_server(connection, host, port)
        internals.set_tcp_server(server, listener)
        async with listener:
            await listener.serve_forever()

    try:
        asyncio.run(listen())
    except asyncio.CancelledError:
        log.debug("the server was cancelled")
