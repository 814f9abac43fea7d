"""`tachy model serve`: an OpenAI-compatible chat-completions server on our engine.

A small HTTP/1.1 server on asyncio streams (no web framework):

    GET  /v1/models             -> {"object": "list", "data": [{"id": MODEL, ...}]}
    POST /v1/chat/completions   -> a chat.completion, or with "stream": true an event
                                   stream of chat.completion.chunk objects and [DONE]

With `tools` (native function calling) the model is told the tools in tachy's call
syntax and its calls come back as `tool_calls` (agent.chat_tools, which the entry
point hands in), each streamed as soon as the model closes it.

Request bodies carry a Content-Length (at most MAX_BODY bytes, else 413); every
response closes its connection (no keep-alive), so an event stream is
close-delimited. Concurrent requests decode together (model.batcher), each session's
prompt prefix kept in the engine's cache between turns (usage reports the reused
tokens as prompt_tokens_details.cached_tokens); a client that disconnects cancels its
generation (queued or running). Errors are OpenAI-shaped:
{"error": {"message", "type", "param", "code"}} with 400 (bad body), 404 (unknown
route), 405, 413, 500 (the message says what failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("tachy.model.serve")

MAX_HEADER = 64 * 1024
MAX_BODY = 8 * 1024 * 1024
MAX_STOP = 16
DEFAULT_MAX_TOKENS = 1024
ROLES = ("system", "user", "assistant", "tool")
REASONS = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
           413: "Payload Too Large", 500: "Internal Server Error", 200: "OK"}  # fmt: skip


class HTTPError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        kind = "server_error" if self.status >= 500 else "invalid_request_error"
        return {
            "error": {
                "message": self.message,
                "type": kind,
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass
class ChatRequest:
    messages: list[tuple[str, str]]
    raw_messages: list[dict]  # as sent: tool_calls and tool_call_id kept
    tools: list | None  # native function calling: the client's tools, unless tool_choice "none"
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    stop: list[str]
    seed: int | None
    stream: bool
    include_usage: bool


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise HTTPError(400, f"'{name}' must be a number in [{low}, {high}], got {value!r}", name)
    return float(value)


def _integer(body: dict, name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise HTTPError(400, f"'{name}' must be an integer >= {low}, got {value!r}", name)
    return value


def _content(value: Any, i: int) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in value:
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
            ):
                raise HTTPError(
                    400, f"messages[{i}].content: only text parts are supported", "messages"
                )
            parts.append(part["text"])
        return "".join(parts)
    raise HTTPError(
        400, f"messages[{i}].content must be a string or a list of text parts", "messages"
    )


def parse_chat_request(raw: bytes) -> ChatRequest:
    """Validate a /v1/chat/completions body; HTTPError(400) says what is wrong."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HTTPError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HTTPError(400, "'messages' must be a non-empty list of {role, content}", "messages")
    parsed = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise HTTPError(
                400, f"messages[{i}] must be an object whose role is one of {ROLES}", "messages"
            )
        parsed.append((m["role"], _content(m.get("content"), i)))
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise HTTPError(400, "'stop' must be a non-empty string or a list of them", "stop")
    if len(stop) > MAX_STOP:
        raise HTTPError(400, f"at most {MAX_STOP} stop strings, got {len(stop)}", "stop")
    n = _integer(body, "n", 1)
    if n not in (None, 1):
        raise HTTPError(400, "only n=1 is supported", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise HTTPError(400, "'stream' must be true or false", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise HTTPError(400, "'stream_options' must be an object", "stream_options")
    max_tokens = _integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise HTTPError(400, f"'seed' must be an integer, got {seed!r}", "seed")
    tools = body.get("tools") or None
    choice = body.get("tool_choice", "auto")
    if choice not in ("auto", "none"):
        raise HTTPError(
            400,
            "only tool_choice 'auto' and 'none' are supported (the model chooses)",
            "tool_choice",
        )
    if tools is not None and not isinstance(tools, list):
        raise HTTPError(400, "'tools' must be a list of function tools", "tools")
    return ChatRequest(
        messages=parsed,
        raw_messages=messages,
        tools=tools if choice == "auto" else None,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0) or 1.0,
        top_k=_integer(body, "top_k", 0) or 0,
        stop=stop,
        seed=seed,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
    )


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class StopFilter:
    """What of a growing text may be streamed: never a stop string nor text after it,
    and never a tail that might still become one."""

    def __init__(self, stops: list[str]) -> None:
        self.stops, self.text, self.sent, self.stopped = stops, "", 0, False

    def push(self, chunk: str) -> str:
        if self.stopped:
            return ""
        from model.generate import stop_hold  # torch: loaded with the engine, not before

        self.text += chunk
        text, self.stopped = _cut_at_stop(self.text, self.stops)
        end = len(text) if self.stopped else len(text) - stop_hold(text, self.stops)
        out = text[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out

    def finish(self, final: str) -> str:
        """The rest of the answer once the engine returned `final` (its whole text)."""
        final, _ = _cut_at_stop(final, self.stops)
        streamed = self.text[: self.sent]
        return final[len(streamed) :] if final.startswith(streamed) else ""


class ModelServer:
    """The HTTP front of an `Engine` (model.generate)."""

    def __init__(
        self,
        engine: Any,
        model_name: str,
        *,
        max_seq: int,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        batcher: Any = None,
        chat_tools: Any = None,
    ) -> None:
        self.engine, self.model_name, self.max_seq = engine, model_name, max_seq
        # agent.chat_tools, given by the entry point: how requests with `tools` are
        # written for the model and its calls read back (None: such requests fail)
        self.chat_tools = chat_tools
        self.default_max_tokens = default_max_tokens
        self.created = int(time.time())
        from model.batcher import Batcher

        # concurrent requests decode together, on the thread that loaded the engine
        self.batcher = batcher or Batcher(engine)
        self.server: asyncio.AbstractServer | None = None
        self._sent: weakref.WeakSet = weakref.WeakSet()  # writers whose response began

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str = "127.0.0.1", port: int = 8000) -> int:
        """Listen; returns the bound port (pass port=0 for a free one)."""
        self.server = await asyncio.start_server(self._connection, host, port, limit=MAX_HEADER)
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        await asyncio.to_thread(self.batcher.close)  # joins its thread

    # ---------------------------------------------------------------- HTTP
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception as exc:  # a bug: answer 500 if nothing was sent yet
            log.exception("request failed")
            if writer not in self._sent:
                error = HTTPError(500, f"internal error: {type(exc).__name__}: {exc}")
                with contextlib.suppress(ConnectionError):
                    await self._send_json(writer, 500, error.body())
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            method, path, body = await self._read_request(reader, writer)
            route = path.split("?", 1)[0].rstrip("/")
            if route == "/v1/models":
                if method != "GET":
                    raise HTTPError(405, f"{method} {route}: use GET")
                await self._send_json(writer, 200, self._models())
            elif route == "/v1/chat/completions":
                if method != "POST":
                    raise HTTPError(405, f"{method} {route}: use POST")
                await self._chat(reader, writer, parse_chat_request(body))
            else:
                raise HTTPError(
                    404,
                    f"no route {method} {path}; this server has GET /v1/models and "
                    "POST /v1/chat/completions",
                )
        except HTTPError as exc:
            if writer not in self._sent:
                await self._send_json(writer, exc.status, exc.body())

    async def _read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, str, bytes]:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise HTTPError(413, f"request headers larger than {MAX_HEADER} bytes") from None
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise ConnectionResetError from None
            raise HTTPError(400, "incomplete HTTP request") from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HTTPError(400, f"malformed request line {lines[0][:100]!r}")
        method, path = parts[0].upper(), parts[1]
        headers = {}
        for line in lines[1:]:
            if line:
                name, sep, value = line.partition(":")
                if not sep:
                    raise HTTPError(400, f"malformed header line {line[:100]!r}")
                headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise HTTPError(400, "chunked request bodies are not supported; send Content-Length")
        length = headers.get("content-length", "0")
        if not length.isdigit():
            raise HTTPError(400, f"bad Content-Length {length!r}")
        if int(length) > MAX_BODY:
            raise HTTPError(413, f"request body of {length} bytes; the limit is {MAX_BODY}")
        if int(length) and headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits for it
            await writer.drain()
        try:
            body = await reader.readexactly(int(length))
        except asyncio.IncompleteReadError:
            raise HTTPError(400, "the request body is shorter than its Content-Length") from None
        return method, path, body

    async def _send_head(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        content_type: str,
        length: int | None = None,
    ) -> None:
        head = [
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
            f"Content-Type: {content_type}",
            "Connection: close",
        ]
        if length is not None:
            head.append(f"Content-Length: {length}")
        else:
            head.append("Cache-Control: no-cache")
        self._sent.add(writer)
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()

    async def _send_json(self, writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        await self._send_head(writer, status, "application/json", len(data))
        writer.write(data)
        await writer.drain()

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "tachy",
                }
            ],
        }

    # ---------------------------------------------------------- completions
    def _params(self, request: ChatRequest, prompt_len: int) -> Any:
        from model.generate import SamplingParams

        room = self.max_seq - prompt_len
        if room < 1:
            raise HTTPError(
                400,
                f"the prompt is {prompt_len} tokens; this model's context is {self.max_seq}",
                "messages",
            )
        max_tokens = request.max_tokens or min(self.default_max_tokens, room)
        if max_tokens > room:
            raise HTTPError(
                400,
                f"max_tokens {max_tokens} + the prompt's {prompt_len} tokens "
                f"exceed the context of {self.max_seq}",
                "max_tokens",
            )
        return SamplingParams(
            max_new_tokens=max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            stop=list(request.stop),
            seed=request.seed,
        )

    async def _chat(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: ChatRequest
    ) -> None:
        loop = asyncio.get_running_loop()
        output = None
        messages = request.messages
        if request.tools:
            if self.chat_tools is None:
                raise HTTPError(400, "this server was started without tool calling", "tools")
            try:
                tools = self.chat_tools.check_tools(request.tools)
                messages = self.chat_tools.render_chat(request.raw_messages, tools)
            except self.chat_tools.ChatToolsError as exc:
                raise HTTPError(400, str(exc), "tools") from None
            turn = 1 + sum(m.get("role") == "assistant" for m in request.raw_messages)
            output = self.chat_tools.ToolCallOutput(tools, turn)
        try:
            prompt = self.engine.chat_prompt(messages)
        except Exception as exc:
            raise HTTPError(400, f"cannot build the prompt: {exc}", "messages") from None
        params = self._params(request, len(prompt))
        cancel = threading.Event()
        chunks: asyncio.Queue[str] = asyncio.Queue()

        def on_token(index: int, token_id: int, text: str) -> None:
            if text:
                loop.call_soon_threadsafe(chunks.put_nowait, text)

        job = asyncio.wrap_future(
            self.batcher.submit(
                prompt, params, on_token=on_token if request.stream else None, cancel=cancel
            )
        )
        # The client sends nothing more: EOF (or a reset) on its side means it left.
        watcher = asyncio.ensure_future(reader.read(1))
        watcher.add_done_callback(lambda _: cancel.set())
        try:
            if request.stream:
                await self._stream(writer, request, job, chunks, len(prompt), cancel, output)
            else:
                await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if cancel.is_set() and not job.done():
                    return  # the client went away; the engine stops at its next token
                gen = await self._result(job)
                text, stopped = _cut_at_stop(gen.text, request.stop)
                reason = "stop" if stopped else gen.finish_reason
                message: dict[str, Any] = {"role": "assistant", "content": text}
                if output is not None:
                    output.feed(text)
                    output.finish()
                    message["content"] = output.content or None
                    if output.calls:
                        message["tool_calls"] = [
                            {k: v for k, v in c.items() if k != "index"} for c in output.calls
                        ]
                        reason = "tool_calls"
                await self._send_json(
                    writer,
                    200,
                    {
                        "id": self._id(),
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": self.model_name,
                        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                        "usage": self._usage(len(prompt), gen),
                    },
                )
        finally:
            cancel.set()
            watcher.cancel()

    async def _result(self, job: asyncio.Future) -> Any:
        try:
            gen = await job
        except Exception as exc:
            log.exception("generation failed")
            raise HTTPError(500, f"generation failed: {type(exc).__name__}: {exc}") from None
        if gen is None:
            raise ConnectionResetError  # cancelled before it started
        return gen

    async def _stream(
        self,
        writer,
        request: ChatRequest,
        job: asyncio.Future,
        chunks: asyncio.Queue,
        prompt_len: int,
        cancel: threading.Event,
        output: Any = None,
    ) -> None:
        """Stream the answer; with `output` (a request with tools) the text before the
        first call as content and each call as a tool_calls delta once complete."""
        cid, created = self._id(), int(time.time())

        def chunk(delta: dict, reason: str | None = None) -> bytes:
            obj = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        await self._send_head(writer, 200, "text/event-stream")
        writer.write(chunk({"role": "assistant", "content": ""}))
        await writer.drain()
        stops = StopFilter(request.stop)
        while not job.done() or not chunks.empty():
            getter = asyncio.ensure_future(chunks.get())
            await asyncio.wait({getter, job}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            text = stops.push(getter.result())
            if stops.stopped:
                cancel.set()  # the engine stops too; no need to wait for it
            if text:
                self._write_text(writer, chunk, output, text)
                await writer.drain()  # raises once the client is gone: cancel follows
        try:
            gen = await self._result(job)
        except HTTPError as exc:
            writer.write(b"data: " + json.dumps(exc.body()).encode() + b"\n\n")
            await writer.drain()
            return
        rest = stops.finish(gen.text)
        if rest:
            self._write_text(writer, chunk, output, rest)
        if output is not None:
            self._write_text(writer, chunk, output, None)
        reason = "stop" if stops.stopped else gen.finish_reason
        if output is not None and output.calls:
            reason = "tool_calls"
        writer.write(chunk({}, reason))
        if request.include_usage:
            obj = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model_name,
                "choices": [],
                "usage": self._usage(prompt_len, gen),
            }
            writer.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()

    @staticmethod
    def _write_text(writer, chunk, output: Any, text: str | None) -> None:
        """Text as a content delta; through `output` (tools) as content and calls.
        `text` None: the answer ended (the last content and calls)."""
        if output is None:
            writer.write(chunk({"content": text}))
            return
        content, calls = output.feed(text) if text is not None else output.finish()
        if content:
            writer.write(chunk({"content": content}))
        for call in calls:
            writer.write(chunk({"tool_calls": [call]}))

    @staticmethod
    def _id() -> str:
        return "chatcmpl-" + uuid.uuid4().hex[:24]

    @staticmethod
    def _usage(prompt: int, gen: Any) -> dict[str, Any]:
        completion = len(gen.token_ids)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": gen.cached_tokens},
        }


# ------------------------------------------------------------------ loading
def build_server(
    checkpoint: str | Path,
    *,
    tokenizer: str | Path | None = None,
    max_batch: int = 8,
    max_seq: int = 4096,
    name: str | None = None,
    compile: bool = False,
    chat_tools: Any = None,
) -> ModelServer:
    from model.batcher import Batcher
    from model.checkpoint import open_model
    from model.generate import Engine

    checkpoint = Path(checkpoint)

    def make_engine() -> Engine:  # on the batcher's thread, where it will decode
        m, tok = open_model(checkpoint, tokenizer=tokenizer)
        return Engine(m, tok, max_batch=max_batch, max_seq=max_seq, compile=compile)

    batcher = Batcher(make_engine)
    engine = batcher.ready()
    name = name or checkpoint.resolve().name
    return ModelServer(engine, name, max_seq=engine.max_seq, batcher=batcher, chat_tools=chat_tools)


async def serve(server: ModelServer, host: str, port: int, ready=None) -> None:
    bound = await server.start(host, port)
    if ready is not None:
        ready(bound)
    try:
        await server.server.serve_forever()
    finally:
        await server.close()


# --------------------------------------------------------------------- info
def checkpoint_info(path: str | Path) -> dict[str, Any]:
    """What a checkpoint directory holds, read from its metadata (weights not loaded)."""
    from model.config import ModelConfig
    from model.hf import CheckpointError

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    info: dict[str, Any] = {"path": str(path)}
    from model.part import is_part, part_config

    if is_part(path):
        config, record = part_config(path)
        info |= {
            "format": "tachy part",
            "precision": record.get("precision"),
            "base": record.get("base"),
            "file_bytes": record.get("size"),
            "stored_tensors": len(record.get("tensors", {})),
        }
        return info | _config_info(config, tokenizer=True)
    manifest = path / "manifest.json"
    try:
        meta = json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no config.json (not a checkpoint directory?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path / 'config.json'}: unreadable ({exc})") from None
    try:
        if manifest.is_file():
            config = ModelConfig.from_dict(meta["config"])
            man = json.loads(manifest.read_text())
            tensors = man.get("tensors", {})
            info |= {
                "format": "tachy",
                "precision": meta.get("precision"),
                "quantized": bool(meta.get("quantized")),
                "file_bytes": man.get("size"),
                "stored_tensors": len(tensors),
            }
            by_dtype: dict[str, int] = {}
            for dtype, shape in tensors.values():
                count = 1
                for d in shape:
                    count *= d
                by_dtype[dtype] = by_dtype.get(dtype, 0) + count
            info["stored_elements_by_dtype"] = by_dtype
        else:
            config = ModelConfig.from_hf_config(meta)
            files = sorted(path.glob("*.safetensors"))
            info |= {
                "format": "huggingface",
                "precision": "mxfp8 experts at load (default)",
                "torch_dtype": meta.get("dtype", meta.get("torch_dtype")),
                "file_bytes": sum(f.stat().st_size for f in files),
            }
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: invalid metadata ({exc})") from None
    return info | _config_info(config, tokenizer=(path / "tokenizer.json").is_file())


def _config_info(config: Any, tokenizer: bool) -> dict[str, Any]:
    moe = sum(config.is_moe_layer(i) for i in range(config.num_hidden_layers))
    return {
        "parameters": config.num_params,
        "active_parameters": config.num_active_params,
        "moe_layers": moe,
        "dense_layers": config.num_hidden_layers - moe,
        "tokenizer": tokenizer,
        "config": config.to_dict(),
    }


def format_info(info: dict[str, Any]) -> str:
    c = info["config"]
    lines = [
        f"{info['path']}: {info['format']} checkpoint, precision {info['precision']}",
        f"  parameters {info['parameters'] / 1e6:,.2f}M total, "
        f"{info['active_parameters'] / 1e6:,.2f}M active per token",
        f"  layers {c['num_hidden_layers']} ({info['moe_layers']} MoE, "
        f"{info['dense_layers']} dense), hidden {c['hidden_size']}, heads "
        f"{c['num_attention_heads']}/{c['num_key_value_heads']} x {c['head_dim']}",
        f"  experts {c['num_experts']} (top-{c['num_experts_per_tok']}, d_ff "
        f"{c['moe_intermediate_size']}), vocab {c['vocab_size']}, context "
        f"{c['max_position_embeddings']}",
        f"  weights {info.get('file_bytes') or 0:,} bytes on disk; tokenizer "
        f"{'present' if info['tokenizer'] else 'absent'}",
    ]
    if info.get("base"):
        base = info["base"]
        lines.append(f"  assembled on the base {base['distribution']} {base['version']} "
                     f"({base['file']}, sha256 {base['sha256'][:12]}…)")  # fmt: skip
    return "\n".join(lines)
