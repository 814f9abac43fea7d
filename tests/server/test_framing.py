"""Message framing: FrameReader over edge cases, and a real `tachy serve` (stdio and
--tcp) that survives frames it must not believe (a huge, negative or missing
Content-Length) and answers the requests after them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from server import protocol as p
from server.framing import MAX_HEADER_BYTES, MAX_MESSAGE_BYTES, FrameReader
from tests.conftest import make_repo
from tests.server.lsp_client import PROJECT, RawConnection, raw_server, server_command
from tests.server.test_lsp_protocol import free_port


def frame(body: bytes, length: int | None = None) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


class Stream:
    """A byte source for FrameReader that hands out at most `chunk` bytes per read and
    counts the most it was ever asked for at once."""

    def __init__(self, data: bytes, chunk: int = 7) -> None:
        self.data, self.chunk, self.pos = data, chunk, 0
        self.largest_request = 0

    async def read(self, n: int) -> bytes:
        self.largest_request = max(self.largest_request, n)
        piece = self.data[self.pos : self.pos + min(n, self.chunk)]
        self.pos += len(piece)
        return piece


async def bodies(data: bytes, chunk: int = 7) -> tuple[list[bytes], list[str], Stream]:
    stream, reports = Stream(data, chunk), []
    reader = FrameReader(stream.read, reports.append)
    found = []
    while (body := await reader.next_body()) is not None:
        found.append(body)
    return found, reports, stream


GOOD = b'{"jsonrpc": "2.0", "id": 1, "method": "x"}'


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
async def test_well_formed_frames_come_out_whole_whatever_the_chunking(chunk: int):
    data = (
        frame(GOOD)
        + b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
        + frame(b"{}")
        + b"\r\n"  # a blank line between frames is tolerated
        + b"content-length:3\r\n\r\n[1]"  # header names ignore case; no space needed
    )
    found, reports, _ = await bodies(data, chunk)
    assert found == [GOOD, b"{}", b"[1]"]
    assert reports == []


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (b"Content-Length: 99999999999999\r\n\r\n", "over the"),
        (b"Content-Length: %d\r\n\r\n" % (MAX_MESSAGE_BYTES + 1), "over the"),
        (b"Content-Length: -5\r\n\r\n{}", "not a byte count"),
        (b"Content-Length: abc\r\n\r\n{}", "not a byte count"),
        (b"Content-Length: 1e3\r\n\r\n{}", "not a byte count"),
        (b"Content-Type: text/plain\r\n\r\n{}", "no Content-Length"),
        (b"garbage\r\n\r\n", "without a colon"),
        (b"x" * (MAX_HEADER_BYTES + 100), "longer than"),
    ],
)
async def test_a_bad_frame_is_reported_and_skipped(bad: bytes, why: str):
    found, reports, stream = await bodies(bad + frame(GOOD) + frame(b"{}"), chunk=4096)
    assert found == [GOOD, b"{}"]
    assert len(reports) == 1 and why in reports[0], reports
    assert stream.largest_request <= 1 << 20  # never asked for the declared length


async def test_the_body_of_an_oversized_frame_is_scanned_not_held():
    # A real 70 MB body behind its (true) oversized length: skipped chunk by chunk,
    # even though it holds the words "Content-Length:" inside a JSON string.
    body = b'{"text": "Content-Length: 12\\r\\n' + b"x" * (MAX_MESSAGE_BYTES + 1000) + b'"}'
    stream, reports = Stream(frame(body) + frame(GOOD), chunk=1 << 20), []
    reader = FrameReader(stream.read, reports.append)
    assert await reader.next_body() == GOOD
    assert len(reports) == 1
    assert len(reader._buf) < 2 << 20  # what the reader held at most, give or take a chunk


async def test_the_end_of_the_stream_inside_a_frame_is_the_end():
    assert (await bodies(frame(GOOD)[:-3]))[0] == []
    assert (await bodies(b"Content-Length: 5\r\n"))[0] == []
    assert (await bodies(b"Content-Length: 99999999999999\r\n\r\n{"))[0] == []
    assert (await bodies(b""))[0] == []


# ------------------------------------------------------------ a real server
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"processId": None, "capabilities": {}, "initializationOptions": {}},
}


def logged(c: RawConnection, words: str) -> bool:
    return any(
        n["method"] == "window/logMessage" and words in n["params"]["message"]
        for n in c.notifications
    )


async def test_a_huge_content_length_does_not_kill_the_server():
    async with raw_server() as (proc, c):
        c.writer.write(b"Content-Length: 99999999999999\r\n\r\n")
        c.send_body(json.dumps(INITIALIZE).encode())
        response = await asyncio.wait_for(c.response_to(1), 30)
        assert response["result"]["serverInfo"]["name"] == "tachy"
        assert logged(c, "over the")
        # Malformed lengths, then the server still answers.
        c.writer.write(b"Content-Length: -1\r\n\r\n{}")
        c.writer.write(b"Content-Length: twelve\r\n\r\n{}")
        c.notify("initialized", {})
        assert "result" in await c.request(p.INDEX_STATUS)
        assert proc.returncode is None
        c.notify("exit")
        assert await asyncio.wait_for(proc.wait(), 30) == 1


async def test_tcp_reads_frames_the_same_way(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *server_command(), "--tcp", f"127.0.0.1:{port}", cwd=PROJECT,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                assert proc.returncode is None and asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
        c = RawConnection(reader, writer)
        writer.write(b"Content-Length: 99999999999999\r\n\r\n")
        assert "result" in await c.initialize([repo])
        assert "result" in await c.request(p.INDEX_STATUS)
        c.notify("exit")
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        assert b"over the" in stderr and b"Traceback" not in stderr, stderr.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
