"""`tachy model serve` end to end: a tiny random model and a tiny trained tokenizer
saved as a checkpoint, served on a free port, and driven by agent/policy.py's
OpenAIPolicy (the client the agent uses) and by raw HTTP for the edge cases."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import torch

import model as tachy_model
from agent.policy import Message, OpenAIPolicy, PolicyError
from model import serve
from model.generate import SamplingParams
from model.tokenizer import train_bpe

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("torch_path")]

CORPUS = [
    "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x: int = 0\n    y: int = 0\n",
    "import os\nimport sys\n\nprint(os.getcwd(), sys.argv)\nfor i in range(10):\n    print(i)\n",
] * 20


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ckpt")
    tok = train_bpe(CORPUS, 400, min_frequency=1)
    config = tachy_model.preset(
        "tiny",
        vocab_size=tok.vocab_size,
        hidden_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_experts=4,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    m = tachy_model.Model(config, precision="fp32")
    with torch.no_grad():  # larger weights than the init: a livelier, still fixed, output
        for p in m.parameters():
            p.normal_(0.0, 0.5)
    tachy_model.save(m, path, tokenizer=tok)  # the directory alone serves
    return path


class Recorder:
    """Wraps the engine to record every Generation it returns."""

    def __init__(self, engine) -> None:
        self.engine, self.results = engine, []
        self.done = threading.Event()
        self.started = threading.Event()

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def run(self, jobs, more=None):
        """The batcher's entry (Engine.run): record each job's Generation as it ends."""
        self.started.set()

        def recorded(job):
            def done(generation):
                self.results.append(generation)
                job.done(generation)

            return dataclasses.replace(job, done=done)

        def joining(n):
            return [recorded(j) for j in more(n)] if more else []

        self.engine.run([recorded(j) for j in jobs], joining)
        self.done.set()


@pytest.fixture(scope="module")
def model_server(checkpoint):
    """A server on a free port, running on its own event loop in a thread."""
    server = serve.build_server(checkpoint, max_batch=2, max_seq=256, name="tiny")
    server.engine.stop_ids = frozenset()  # a random model: end only at length or a stop string
    server.engine = server.batcher.engine = Recorder(server.engine)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port = []

    def on_ready(p: int) -> None:
        port.append(p)
        ready.set()

    def main() -> None:
        asyncio.set_event_loop(loop)
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(serve.serve(server, "127.0.0.1", 0, on_ready))

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(60)
    server.port = port[0]
    server.url = f"http://127.0.0.1:{port[0]}/v1"
    yield server
    loop.call_soon_threadsafe(server.server.close)
    thread.join(10)


def collect(url: str, messages, stop=(), **kw) -> list[str]:
    async def go() -> list[str]:
        policy = OpenAIPolicy(url, "tiny", retries=0, **kw)
        try:
            return [c async for c in policy.stream(messages, list(stop))]
        finally:
            await policy.aclose()

    return asyncio.run(go())


MESSAGES = [Message("system", "You write code."), Message("user", "def add(a, b):")]


def post(server, body, raw: bytes | None = None) -> httpx.Response:
    data = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(f"{server.url}/chat/completions", content=data, timeout=60)


def test_models(model_server) -> None:
    r = httpx.get(f"{model_server.url}/models")
    assert r.status_code == 200
    assert r.json()["data"][0]["id"] == "tiny"


def test_streamed_answer_through_the_policy_matches_the_engine(model_server) -> None:
    chunks = collect(model_server.url, MESSAGES, max_tokens=24)
    assert len(chunks) > 1  # streamed, token by token
    gen = model_server.engine.results[-1]
    assert "".join(chunks) == gen.text
    assert len(gen.token_ids) <= 24
    # the same prompt, greedy, straight through the engine
    prompt = model_server.engine.chat_prompt([(m.role, m.content) for m in MESSAGES])

    direct = model_server.engine.generate([prompt], SamplingParams(max_new_tokens=24))[0]
    assert direct.text == gen.text and direct.token_ids == gen.token_ids


def test_non_streamed(model_server) -> None:
    r = post(
        model_server,
        {
            "messages": [{"role": "user", "content": "import os"}],
            "max_tokens": 12,
            "temperature": 0,
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    gen = model_server.engine.results[-1]
    assert choice["message"] == {"role": "assistant", "content": gen.text}
    assert choice["finish_reason"] == gen.finish_reason
    assert body["usage"]["completion_tokens"] == len(gen.token_ids) <= 12
    # the streamed answer to the same request is the same text
    assert (
        "".join(collect(model_server.url, [Message("user", "import os")], max_tokens=12))
        == (choice["message"]["content"])
    )


def test_stop_strings(model_server) -> None:
    full = "".join(collect(model_server.url, MESSAGES, max_tokens=40))
    assert len(full) >= 8, full
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    expected = full[: full.find(stop)]
    assert "".join(collect(model_server.url, MESSAGES, stop=[stop], max_tokens=40)) == expected
    assert model_server.engine.results[-1].finish_reason == "stop"
    body = {
        "messages": [{"role": m.role, "content": m.content} for m in MESSAGES],
        "max_tokens": 40,
        "stop": stop,
        "temperature": 0,
    }
    r = post(model_server, body)
    assert r.json()["choices"][0]["message"]["content"] == expected
    assert r.json()["choices"][0]["finish_reason"] == "stop"


def test_sampling_options_and_seed(model_server) -> None:
    body = {
        "messages": [{"role": "user", "content": "print("}],
        "max_tokens": 16,
        "temperature": 1.5,
        "top_p": 0.9,
        "seed": 7,
    }
    a = post(model_server, body).json()["choices"][0]["message"]["content"]
    b = post(model_server, body).json()["choices"][0]["message"]["content"]
    assert a == b  # same seed, same sample


def test_sse_shape_and_usage(model_server) -> None:
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = post(model_server, body)
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] <= 5


def _start_and_drop(server, stream: bool) -> None:
    body = json.dumps(
        {"messages": [{"role": "user", "content": "def"}], "max_tokens": 200, "stream": stream}
    ).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    if stream:
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    else:
        # Leave once the generation runs: a fixed wait raced a fast machine, where the
        # tiny model finished all its tokens first.
        assert server.engine.started.wait(30)
    s.close()


def test_usage_counts_the_prompt_tokens_the_cache_held(model_server) -> None:
    body = {"messages": [{"role": "user", "content": "def sub(a, b):"}], "max_tokens": 3}
    first, second = post(model_server, body).json(), post(model_server, body).json()
    prompt = first["usage"]["prompt_tokens"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt - 1


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_cancels_the_generation(model_server, stream) -> None:
    recorder = model_server.engine
    recorder.done.clear()
    recorder.started.clear()
    before = len(recorder.results)
    _start_and_drop(model_server, stream)
    # Once a no-op submitted after the request has been served (joining the request's
    # engine run, or in a later one) and that run has ended, the request's generation is
    # over. A client that left while its request was still queued (a busy machine) is
    # never generated for, which is right too.
    model_server.batcher.submit([1], SamplingParams(max_new_tokens=0)).result(timeout=60)
    assert recorder.done.wait(60)
    noop = ("length", [])
    mine = [g for g in recorder.results[before:] if (g.finish_reason, g.token_ids) != noop]
    for gen in mine:
        assert gen.finish_reason == "cancelled"
        assert len(gen.token_ids) < 200


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b"{}", 400, "messages"),
        (b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, "role"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400, "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}', 400,
         "context"),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', 400,
         "temperature"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stop": [1]}', 400, "stop"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 3}', 400, "n=1"),
    ],
)  # fmt: skip
def test_bad_requests(model_server, body, status, needle) -> None:
    r = post(model_server, None, raw=body)
    assert r.status_code == status
    assert needle in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_bad_requests_through_the_policy(model_server) -> None:
    with pytest.raises(PolicyError, match="max_tokens"):
        collect(model_server.url, MESSAGES, max_tokens=10**6)


def test_routes_and_sizes(model_server) -> None:
    r = httpx.get(f"{model_server.url}/nowhere")
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"]
    assert httpx.get(f"{model_server.url}/chat/completions").status_code == 405
    r = httpx.post(f"{model_server.url}/chat/completions", content=b"x" * (serve.MAX_BODY + 1))
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_engine_failure_is_a_500_with_its_message(model_server, monkeypatch) -> None:
    def broken(*args, **kw):
        raise RuntimeError("the accelerator caught fire")

    monkeypatch.setattr(model_server.engine, "run", broken)
    r = post(model_server, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3})
    assert r.status_code == 500 and "caught fire" in r.json()["error"]["message"]
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True}
    r = post(model_server, body)  # headers were sent: the error arrives as an event
    assert "caught fire" in r.text
    with pytest.raises(PolicyError, match="caught fire"):
        collect(model_server.url, MESSAGES, max_tokens=3)


def test_stop_filter_holds_back_partial_stops() -> None:
    f = serve.StopFilter(["END"])
    assert f.push("abcE") == "abc"
    assert f.push("N") == ""
    assert f.push("X more") == "ENX more"
    g = serve.StopFilter(["END"])
    assert g.push("xyEN") == "xy"
    assert g.push("D tail") == "" and g.stopped
    assert g.finish("xyEND tail") == ""


# ------------------------------------------------------------------- the CLI
def tachy(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        **kw,
    )


def test_cli_info(checkpoint, tmp_path) -> None:
    out = tachy("model", "info", str(checkpoint), "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["format"] == "tachy" and info["precision"] == "fp32"
    assert info["parameters"] > 0 and info["active_parameters"] < info["parameters"]
    human = tachy("model", "info", str(checkpoint))
    assert "parameters" in human.stdout and "precision fp32" in human.stdout
    bad = tachy("model", "info", str(tmp_path))
    assert bad.returncode == 2 and "config.json" in bad.stderr


def test_cli_serve(checkpoint, tmp_path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.cli",
            "model",
            "serve",
            str(checkpoint),
            "--port",
            "0",
            "--max-batch",
            "1",
            "--max-seq",
            "128",
            "--name",
            "cli-tiny",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stderr.readline()
        match = re.search(r"on (http://\S+/v1)", line)
        assert match, line
        url = match.group(1)
        assert httpx.get(f"{url}/models").json()["data"][0]["id"] == "cli-tiny"
        collect(url, MESSAGES, max_tokens=8)  # a well-formed stream (or PolicyError)
    finally:
        proc.terminate()
        proc.wait(30)
    missing = tachy("model", "serve", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot load" in missing.stderr


def test_a_server_bug_is_a_500_with_its_message(model_server, monkeypatch) -> None:
    def broken(*args, **kw):
        raise KeyError("oops")

    monkeypatch.setattr(model_server, "_params", broken)
    r = post(model_server, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3})
    assert r.status_code == 500 and "KeyError" in r.json()["error"]["message"]


def test_expect_continue_and_huge_headers(model_server) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}).encode()
    with socket.create_connection(("127.0.0.1", model_server.port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") and b"chat.completion" in data
    r = httpx.get(f"{model_server.url}/models", headers={"X-Big": "y" * (serve.MAX_HEADER + 10)})
    assert r.status_code == 413
