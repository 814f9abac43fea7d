"""The server's JSON-RPC surface, byte for byte: process exit codes, malformed and
unknown messages, bad params, huge messages, and --tcp. These speak raw
Content-Length framing (RawConnection) where a client library would refuse to send
what is tested; every test ends by checking the server still answers."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from server import protocol as p
from tests.conftest import make_repo
from tests.server.lsp_client import (
    PROJECT,
    RawConnection,
    lsp_session,
    raw_server,
    server_command,
)
from tests.server.test_lsp_server import LEXICAL, eventually, hits_in

INVALID_PARAMS, METHOD_NOT_FOUND, INVALID_REQUEST, REQUEST_FAILED = -32602, -32601, -32600, -32803


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


async def still_answers(c: RawConnection) -> None:
    response = await c.request(p.INDEX_STATUS)
    assert "result" in response, response


async def message_shown(c: RawConnection, *words: str) -> dict[str, Any]:
    """The first window/showMessage whose text holds every word (reading on if needed)."""

    def found() -> dict[str, Any] | None:
        for n in c.notifications:
            text = n["method"] == "window/showMessage" and n["params"]["message"]
            if text and all(w in text for w in words):
                return n["params"]
        return None

    while (shown := found()) is None:
        await c.request(p.INDEX_STATUS)  # reads whatever arrived before its answer
    return shown


# ---------------------------------------------------------------- lifecycle
async def test_shutdown_then_exit_ends_the_process_with_0(repo: Path):
    async with raw_server() as (proc, c):
        assert "result" in await c.initialize([repo])
        assert "result" in await c.request(p.INDEX_STATUS)
        shutdown = await c.request("shutdown")
        assert "error" not in shutdown and shutdown["result"] is None
        # Requests after shutdown are errors, not silence.
        late = await c.request(p.SEARCH, {"query": "add"})
        assert late["error"]["code"] == INVALID_REQUEST
        c.notify("exit")
        assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_exit_without_shutdown_ends_the_process_with_1(repo: Path):
    async with raw_server() as (proc, c):
        await c.initialize([repo])
        await still_answers(c)
        c.notify("exit")
        assert await asyncio.wait_for(proc.wait(), 30) == 1


async def test_a_vanished_client_ends_the_server(repo: Path):
    async with raw_server() as (proc, c):
        await c.initialize([repo])
        await still_answers(c)
        c.close()  # the editor crashed: stdin closes
        await asyncio.wait_for(proc.wait(), 30)


# ---------------------------------------------------------------- bad input
async def test_malformed_json_is_reported_and_the_server_keeps_going(repo: Path):
    async with raw_server() as (_, c):
        await c.initialize([repo])
        c.send_body(b'{"jsonrpc": "2.0", "id": 99, "method": ')
        shown = await message_shown(c, "not valid JSON")
        assert shown["type"] == types.MessageType.Warning
        c.send_body(b"\xff\xfe not utf-8")
        c.send_body(b"[1, 2, 3]")  # JSON, but no JSON-RPC message
        await message_shown(c, "not JSON-RPC")
        await still_answers(c)


async def test_a_request_whose_params_do_not_fit_is_invalid_params(repo: Path):
    async with raw_server() as (_, c):
        await c.initialize([repo])
        response = await c.request(
            "textDocument/codeAction", {"textDocument": {"uri": (repo / "a.py").as_uri()}}
        )
        assert response["error"]["code"] == INVALID_PARAMS
        assert "range" in response["error"]["message"]
        assert "context" in response["error"]["message"]
        # A notification that does not fit is ignored, with a warning naming it.
        c.notify("textDocument/didOpen", {"textDocument": {"uri": 5}})
        await message_shown(c, "textDocument/didOpen", "invalid params")
        await still_answers(c)


async def test_unknown_methods(repo: Path):
    async with raw_server() as (_, c):
        await c.initialize([repo])
        response = await c.request("tachy/doesNotExist", {"x": 1})
        assert response["error"]["code"] == METHOD_NOT_FOUND
        assert "tachy/doesNotExist" in response["error"]["message"]
        c.notify("tachy/noSuchNotification", {"x": 1})
        c.notify("$/someExtension", {})  # $/ notifications may always be ignored
        await still_answers(c)
        assert not [n for n in c.notifications if n["method"] == "window/showMessage"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"query": 5}, "$.query"),
        ({}, "query"),
        ({"query": "add", "limit": "ten"}, "$.limit"),
        ({"query": "add", "limit": 0}, "limit"),
        ({"query": "add", "mode": "fuzzy"}, "$.mode"),
        ({"query": "add", "paths": "src"}, "$.paths"),
        ([1, 2], "object"),
    ],
)
async def test_search_with_bad_params_names_the_field(repo: Path, params: Any, field: str):
    async with raw_server() as (_, c):
        await c.initialize([repo])
        response = await c.request(p.SEARCH, params)
        assert response["error"]["code"] == INVALID_PARAMS, response
        assert field in response["error"]["message"]
        await still_answers(c)


async def test_a_change_to_a_document_never_opened_is_reported(repo: Path):
    async with raw_server() as (_, c):
        await c.initialize([repo])
        uri = (repo / "src" / "calc.py").as_uri()
        c.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": 2},
                "contentChanges": [{"text": "changed_without_open = 1\n"}],
            },
        )
        shown = await message_shown(c, "never opened", "calc.py")
        assert shown["type"] == types.MessageType.Warning
        # Nothing was indexed from it; the disk's text stands.
        for _ in range(3):
            result = (await c.request(p.SEARCH, {"query": "changed_without_open"}))["result"]
            assert result["results"] == []
        c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        c.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
        await still_answers(c)


async def test_a_huge_change_is_taken_and_the_server_keeps_answering(repo: Path):
    calc = repo / "src" / "calc.py"
    huge = "HUGE_FILE_MARKER = 0\n" + "value = 12345678901234567890\n" * 700_000  # ~20 MB
    async with lsp_session([repo], options=LEXICAL) as ed:
        await ed.wait_indexed()
        uri = ed.open(calc)
        ed.change(uri, huge)
        assert await hits_in(ed, "test_add", repo / "tests" / "test_calc.py")
        status = await ed.request(p.INDEX_STATUS)
        assert status["files"] >= 3
        ed.close(uri)
        await eventually(lambda: hits_in(ed, "sub", calc))


async def test_search_without_a_folder_and_with_an_empty_query(tmp_path: Path, repo: Path):
    async with raw_server() as (_, c):
        await c.initialize([])
        status = (await c.request(p.INDEX_STATUS))["result"]
        assert (status["state"], status["folders"]) == ("empty", [])
        response = await c.request(p.SEARCH, {"query": "add"})
        assert response["error"]["code"] == REQUEST_FAILED
        assert "no workspace folder" in response["error"]["message"]
        response = await c.request(p.AGENT_RUN, {"prompt": "hello"})
        assert "no workspace folder" in response["error"]["message"]

        c.notify(
            "workspace/didChangeWorkspaceFolders",
            {"event": {"added": [{"uri": repo.as_uri(), "name": "repo"}], "removed": []}},
        )
        assert (await c.request(p.SEARCH, {"query": ""}))["result"] == {"results": []}
        assert (await c.request(p.SEARCH, {"query": "   "}))["result"] == {"results": []}

        async def found() -> list:
            return (await c.request(p.SEARCH, {"query": "add"}))["result"]["results"]

        await eventually(found)


# ---------------------------------------------------------------------- tcp
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("shutdown", [True, False])
async def test_tcp(repo: Path, shutdown: bool):
    # The free port may be taken by another process before the server binds it: then
    # the server must say so and exit, and the test takes another port.
    for _attempt in range(3):
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            *server_command(),
            "--tcp",
            f"127.0.0.1:{port}",
            cwd=PROJECT,
            stderr=asyncio.subprocess.PIPE,
        )
        deadline = asyncio.get_running_loop().time() + 30
        while proc.returncode is None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                assert asyncio.get_running_loop().time() < deadline, "the server never listened"
                await asyncio.sleep(0.05)
        if proc.returncode is None:
            break
        stderr = (await proc.stderr.read()).decode()
        assert proc.returncode == 2 and "in use" in stderr, f"the server exited: {stderr}"
    try:
        c = RawConnection(reader, writer)
        initialized = await c.initialize([repo])
        assert initialized["result"]["serverInfo"]["name"] == "tachy"

        async def found() -> list:
            return (await c.request(p.SEARCH, {"query": "sub"}))["result"]["results"]

        results = await eventually(found)
        assert any(r["uri"].endswith("/src/calc.py") for r in results)
        if shutdown:
            assert (await c.request("shutdown"))["result"] is None
        c.notify("exit")
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == (0 if shutdown else 1)
        assert b"Traceback" not in stderr, stderr.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_tcp_on_a_taken_port_says_so():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            *server_command(), "--tcp", f"127.0.0.1:{port}", cwd=PROJECT,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in stderr.decode() and b"in use" in stderr
    assert b"Traceback" not in stderr


async def test_tcp_rejects_a_bad_address():
    proc = await asyncio.create_subprocess_exec(
        *server_command(), "--tcp", "localhost", cwd=PROJECT, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert b"HOST:PORT" in stderr
