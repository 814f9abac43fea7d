"""Policies (agent/policy.py): replay files, spec strings, and the OpenAI-compatible
client against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent import policy as policy_module
from agent.executor import Executor
from agent.policy import Message, OpenAIPolicy, PolicyError, ReplayPolicy, load_policy
from tests.conftest import make_context

MESSAGES = [Message("system", "be brief"), Message("user", "say hi")]


async def collect(policy, messages=MESSAGES, stop=("<tool_result",)) -> str:
    return "".join([chunk async for chunk in policy.stream(list(messages), list(stop))])


# ------------------------------------------------------------------ replay files
def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def test_replay_file_streams_turns_in_order(tmp_path):
    path = write_lines(
        tmp_path / "r.jsonl",
        json.dumps({"text": "first\nturn\n"}),
        "",
        "   ",
        json.dumps({"text": "second", "extra": 1}),
    )
    policy = ReplayPolicy.from_file(path)
    assert policy.turns == ["first\nturn\n", "second"]
    assert await collect(policy) == "first\nturn\n"
    chunks = [c async for c in ReplayPolicy(["a\nb\nc"]).stream(MESSAGES, [])]
    assert chunks == ["a\n", "b\n", "c"]
    assert await collect(policy) == "second"
    with pytest.raises(PolicyError, match=r"has no turn 3: it holds 2"):
        await collect(policy)
    await policy.aclose()


def test_replay_missing_file(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(PolicyError) as info:
        ReplayPolicy.from_file(path)
    assert str(path) in str(info.value)
    assert "does not exist" in str(info.value)


def test_replay_bad_json_line_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "r.jsonl", '{"text": "ok"}', "", '{"text": "unterminated')
    with pytest.raises(PolicyError) as info:
        ReplayPolicy.from_file(path)
    assert str(info.value).startswith(f"{path}:3: not valid JSON")


@pytest.mark.parametrize(
    "line", ['{"txt": "typo"}', '{"text": 3}', '"just a string"', "[1, 2]", "null"]
)
def test_replay_line_without_text_names_file_and_line(tmp_path, line):
    path = write_lines(tmp_path / "r.jsonl", '{"text": "ok"}', line)
    with pytest.raises(PolicyError) as info:
        ReplayPolicy.from_file(path)
    assert str(info.value).startswith(f"{path}:2: ")
    assert '{"text": "..."}' in str(info.value)


def test_replay_unreadable_file(tmp_path):
    binary = tmp_path / "r.jsonl"
    binary.write_bytes(b'{"text": "\xff\xfe"}\n')
    with pytest.raises(PolicyError, match="cannot read replay file"):
        ReplayPolicy.from_file(binary)
    with pytest.raises(PolicyError, match="cannot read replay file"):
        ReplayPolicy.from_file(tmp_path)  # a directory


# ------------------------------------------------------------------ policy specs
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", "is not a policy spec"),
        ("gpt-4", "is not a policy spec"),
        ("replay:", "is not a policy spec"),
        ("bogus:thing", "unknown policy kind 'bogus'"),
        ("openai:localhost:8000#m", "must look like openai:http://HOST:PORT/v1#MODEL_NAME"),
        ("openai:http://localhost:8000/v1", "must look like"),
        ("openai:http://localhost:8000/v1#", "must look like"),
    ],
)
def test_load_policy_spec_errors(spec, expected):
    with pytest.raises(PolicyError, match=expected.replace("(", r"\(").replace(".", r"\.")):
        load_policy(spec)


def test_load_policy_replay(tmp_path):
    path = write_lines(tmp_path / "r.jsonl", '{"text": "hi"}')
    policy = load_policy(f"replay:{path}")
    assert isinstance(policy, ReplayPolicy)
    assert policy.turns == ["hi"]
    with pytest.raises(PolicyError, match="does not exist"):
        load_policy(f"replay:{tmp_path / 'missing.jsonl'}")


async def test_load_policy_openai():
    policy = load_policy("openai:http://127.0.0.1:9/v1/#qwen3:8b")
    try:
        assert isinstance(policy, OpenAIPolicy)
        assert policy.url == "http://127.0.0.1:9/v1/chat/completions"
        assert policy.model == "qwen3:8b"
    finally:
        await policy.aclose()


# ------------------------------------------------------------ a real HTTP server
Responder = Callable[[BaseHTTPRequestHandler], None]


class FakeServer:
    """An OpenAI-compatible endpoint on 127.0.0.1; each request gets the next responder
    (the last one repeats) and is recorded as (path, headers, JSON body)."""

    def __init__(self, *responders: Responder) -> None:
        self.responders = list(responders)
        self.requests: list[tuple[str, dict[str, str], dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                server.requests.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(body))
                )
                index = min(len(server.requests), len(server.responders)) - 1
                server.responders[index](self)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def sse(*events: str | dict, done: bool = True) -> Responder:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        for event in events:
            line = event if isinstance(event, str) else f"data: {json.dumps(event)}"
            handler.wfile.write(line.encode() + b"\n\n")
            handler.wfile.flush()
        if done:
            handler.wfile.write(b"data: [DONE]\n\n")

    return respond


def reply(status: int, body: str | bytes, content_type: str = "text/plain") -> Responder:
    data = body.encode() if isinstance(body, str) else body

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return respond


def delta(text: str | None, role: str | None = None) -> dict:
    piece: dict = {"content": text}
    if role:
        piece["role"] = role
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": piece}],
    }


def policy_for(server: FakeServer, **options) -> OpenAIPolicy:
    options.setdefault("backoff_s", 0.01)
    return OpenAIPolicy(server.base_url, "test-model", **options)


async def test_openai_streams_sse_chunks():
    with FakeServer(
        sse(
            ": keep-alive comment",
            "event: message",
            delta(None, role="assistant"),
            delta("Hel"),
            delta("lo, "),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": None}]},
            delta("world"),
            {"choices": [], "usage": {"total_tokens": 5}},
        )
    ) as server:
        policy = policy_for(server, api_key="sk-test", max_tokens=64)
        try:
            chunks = [c async for c in policy.stream(MESSAGES, ["<tool_result"])]
        finally:
            await policy.aclose()
    assert chunks == ["Hel", "lo, ", "world"]
    ((path, headers, body),) = server.requests
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == "Bearer sk-test"
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["stop"] == ["<tool_result"]
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 64
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "say hi"},
    ]


async def test_openai_key_from_environment_and_no_stop(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("TACHY_API_KEY", "from-env")
    with FakeServer(sse(delta("ok"))) as server:
        policy = policy_for(server, temperature=None)
        try:
            assert await collect(policy, stop=()) == "ok"
        finally:
            await policy.aclose()
    ((_, headers, body),) = server.requests
    assert headers["authorization"] == "Bearer from-env"
    assert "stop" not in body
    assert "temperature" not in body
    assert "max_tokens" not in body


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The non-zero delays the policy sleeps for (it still sleeps them)."""
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay, *args, **kwargs):
        if delay:
            delays.append(delay)
        return await real_sleep(delay, *args, **kwargs)

    monkeypatch.setattr(policy_module.asyncio, "sleep", recording_sleep)
    return delays


async def test_openai_retries_with_backoff_then_succeeds(sleeps):
    with FakeServer(
        reply(503, "overloaded"), reply(502, "bad gateway"), sse(delta("finally"))
    ) as server:
        policy = policy_for(server, backoff_s=0.02, retries=4)
        try:
            assert await collect(policy) == "finally"
        finally:
            await policy.aclose()
    assert len(server.requests) == 3
    assert all(body == server.requests[0][2] for _, _, body in server.requests)
    assert sleeps == [0.02, 0.04]  # exponential backoff between the attempts


async def test_openai_gives_up_after_its_retries(sleeps):
    with FakeServer(reply(429, "slow down")) as server:
        policy = policy_for(server, retries=2)
        try:
            with pytest.raises(PolicyError) as info:
                await collect(policy)
        finally:
            await policy.aclose()
    assert len(server.requests) == 3
    assert sleeps == [0.01, 0.02]
    message = str(info.value)
    assert "after 3 attempts" in message
    assert "HTTP 429" in message
    assert server.base_url in message


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_openai_endpoint_down():
    url = f"http://127.0.0.1:{free_port()}/v1"
    policy = OpenAIPolicy(url, "m", retries=2, backoff_s=0.01)
    try:
        with pytest.raises(PolicyError) as info:
            await collect(policy)
    finally:
        await policy.aclose()
    message = str(info.value)
    assert f"{url}/chat/completions" in message
    assert "3 attempts" in message
    assert "Is the model server running?" in message


async def test_openai_endpoint_that_never_answers_times_out():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # accepts connections, never answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        policy = OpenAIPolicy(url, "m", retries=1, backoff_s=0.01, timeout_s=0.3)
        try:
            with pytest.raises(PolicyError, match="after 2 attempts"):
                await collect(policy)
        finally:
            await policy.aclose()


@pytest.mark.parametrize(
    ("responder", "expected"),
    [
        (
            reply(200, "<html><body>It works!</body></html>", "text/html"),
            "did not answer with an OpenAI-compatible event stream",
        ),
        (sse("data: not json at all"), "sent something that is not JSON"),
        (sse({"id": "x", "object": "chunk"}), "without choices[0].delta"),
        (sse({"choices": [{"index": 0}]}), "without choices[0].delta"),
        (sse({"choices": "nope"}), "without choices[0].delta"),
        (sse("data: [1, 2, 3]"), "unexpected JSON value"),
        (sse({"error": {"message": "model not loaded"}}), "model not loaded"),
        (sse({"choices": [{"delta": {"content": ["a"]}}]}), "non-text content"),
        (reply(200, "{not json", "application/json"), "sent something that is not JSON"),
        (reply(200, "", "text/event-stream"), "answered with an empty event stream"),
        (sse(": only a comment", done=False), "answered with an empty event stream"),
        (reply(200, '{"object": "list"}', "application/json"), "without choices[0].message"),
    ],
)
async def test_openai_garbage_answers(responder, expected):
    with FakeServer(responder) as server:
        policy = policy_for(server)
        try:
            with pytest.raises(PolicyError) as info:
                await collect(policy)
        finally:
            await policy.aclose()
    assert expected in str(info.value)
    assert len(server.requests) == 1  # garbage is not retried


async def test_openai_tolerates_null_error_field_and_missing_done():
    chunk = {**delta("fine"), "error": None}
    with FakeServer(sse(chunk, done=False)) as server:
        policy = policy_for(server)
        try:
            assert await collect(policy) == "fine"
        finally:
            await policy.aclose()


async def test_openai_garbage_after_good_chunks():
    with FakeServer(sse(delta("partial "), "<html>")) as server:
        policy = policy_for(server)
        got: list[str] = []
        try:
            with pytest.raises(PolicyError, match="OpenAI-compatible event stream"):
                async for chunk in policy.stream(MESSAGES, []):
                    got.append(chunk)
        finally:
            await policy.aclose()
    assert got == ["partial "]


async def test_openai_non_streamed_json_completion():
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole answer"}}],
    }
    with FakeServer(
        reply(200, json.dumps(completion), "application/json; charset=utf-8")
    ) as server:
        policy = policy_for(server)
        try:
            assert await collect(policy) == "whole answer"
        finally:
            await policy.aclose()


async def test_openai_client_error_is_reported_with_status_and_body():
    body = '{"error": {"message": "unknown model test-model"}}'
    with FakeServer(reply(400, body, "application/json")) as server:
        policy = policy_for(server)
        try:
            with pytest.raises(PolicyError) as info:
                await collect(policy)
        finally:
            await policy.aclose()
    message = str(info.value)
    assert "HTTP 400" in message
    assert "unknown model test-model" in message
    assert server.base_url in message
    assert len(server.requests) == 1  # a 400 is not retried


async def test_openai_connection_broken_mid_answer():
    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Length", "100000")  # promises more than it sends
        handler.end_headers()
        handler.wfile.write(f"data: {json.dumps(delta('half'))}\n\n".encode())
        handler.wfile.flush()

    with FakeServer(respond) as server:
        policy = policy_for(server)
        got: list[str] = []
        try:
            with pytest.raises(PolicyError, match="broke in the middle of an answer"):
                async for chunk in policy.stream(MESSAGES, []):
                    got.append(chunk)
        finally:
            await policy.aclose()
    assert got == ["half"]
    assert len(server.requests) == 1  # a half-delivered answer is not replayed


async def test_executor_with_openai_policy(repo):
    turns = [
        sse(delta('<tool_call name="read_file">\n<path>README.md</path>\n'), delta("</tool_call>")),
        sse(delta("The README says demo.")),
    ]
    with FakeServer(*turns) as server:
        policy = policy_for(server)
        executor = Executor(make_context(repo), policy)
        try:
            result = await executor.run("what is this?")
        finally:
            await policy.aclose()
    assert (result.stop_reason, result.final_text) == ("end_turn", "The README says demo.")
    second = server.requests[1][2]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "# demo" in second[3]["content"]


async def test_executor_with_openai_policy_down(repo):
    policy = OpenAIPolicy(f"http://127.0.0.1:{free_port()}/v1", "m", retries=0)
    executor = Executor(make_context(repo), policy)
    try:
        result = await executor.run("hello")
    finally:
        await policy.aclose()
    assert result.stop_reason == "error"
    assert "attempt" in result.error
    assert executor.events[-1].stop_reason == "error"
