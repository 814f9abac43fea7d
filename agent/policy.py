"""Policies: where the agent's next turn comes from.

A policy streams the assistant's next message as text chunks. The spec strings are a
contract (DESIGN.md):

- `replay:FILE.jsonl`: each line `{"text": "..."}` is one assistant turn, in order;
- `openai:BASE_URL#MODEL`: any OpenAI-compatible chat-completions server (vLLM,
  llama.cpp, Ollama, `tachy model serve`); the key comes from TACHY_API_KEY or
  OPENAI_API_KEY when the server needs one. The model calls tools in tachy's text
  syntax, or with `?tools=native` after the model name (or TACHY_TOOL_CALLS=native)
  through the server's native function calling (`tools` in, streamed `tool_calls`
  out), for models trained on it;
- `local:CHECKPOINT_DIR`: our own model in-process; `local:` alone is the model shipped
  with tachy, the default when nothing else is configured (DEFAULT_POLICY), and
  `local:NAME` another bundled one (`local:tachy-tiny`, for tests).

The agent knows replay: and openai: itself. Other kinds come from the program that
runs the agent: its entry point registers a factory for each in POLICY_FACTORIES (the
one table of policy kinds; `tachy` registers local:, which loads the model package
only when such a policy is made). So the agent never names the model package.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import msgspec

from agent.jsonl import numbered_lines

# What `tachy agent` uses when no policy is given: the model bundled with tachy.
DEFAULT_POLICY = "local:"


class Message(msgspec.Struct, omit_defaults=True):
    role: str  # system | user | assistant | tool
    content: str
    # native function calling only: the assistant's calls, as the OpenAI API writes
    # them, and on a tool message the id of the call it answers
    tool_calls: list[dict] | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class FunctionCall:
    """A complete native function call, as a policy with native tool calling yields it
    among the text chunks of a turn: the server's call id, the tool's name and the
    arguments' JSON text exactly as the model wrote it."""

    id: str
    name: str
    arguments: str

    def message_form(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}  # fmt: skip


TOOL_CALL_MODES = ("text", "native")


class PolicyError(Exception):
    """The policy cannot produce a turn; the message says why, for the user."""


# How a policy's error begins when the conversation outgrew its model's context: the
# run's own limit, not a failure of the model server (tachy eval scores it as failed).
CONTEXT_FULL = "the conversation no longer fits the model's context"


class Policy(Protocol):
    def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        """Yield the next assistant message in chunks.

        A policy whose `native_tools` attribute is true is called with a third
        argument, `tools` (the OpenAI `tools` list), and may also yield FunctionCall
        items, each as soon as it is complete."""
        ...

    async def aclose(self) -> None: ...


class ReplayPolicy:
    """Replays recorded turns; for tests, golden runs and training parity checks."""

    def __init__(self, turns: list[str], source: str = "replay") -> None:
        self.turns = turns
        self.source = source
        self.position = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayPolicy:
        path = Path(path)
        lines = numbered_lines(
            path,
            error=PolicyError,
            what="replay file",
            missing=f"replay file {path} does not exist",
        )
        turns = []
        for number, line in lines:
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PolicyError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(item, dict) or not isinstance(item.get("text"), str):
                raise PolicyError(
                    f'{path}:{number}: each line must be an object like {{"text": "..."}}'
                )
            turns.append(item["text"])
        return cls(turns, source=str(path))

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        if self.position >= len(self.turns):
            raise PolicyError(
                f"the replay ({self.source}) has no turn {self.position + 1}: it holds {len(self.turns)}"
            )
        text = self.turns[self.position]
        self.position += 1
        # Deliver line by line, yielding to the loop, so tool calls start mid-turn as
        # they would with a real model.
        for line in text.splitlines(keepends=True):
            yield line
            await asyncio.sleep(0)

    async def aclose(self) -> None:
        pass


class _Retry(Exception):
    pass


class OpenAIPolicy:
    """Streams chat completions from an OpenAI-compatible server. With
    tool_calls="native" it sends the tools' schemas and yields the model's native
    calls (FunctionCall) as the stream completes each one."""

    RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        retries: int = 4,
        backoff_s: float = 0.5,
        timeout_s: float = 300.0,
        transport: httpx.AsyncBaseTransport | None = None,
        tool_calls: str = "text",
    ) -> None:
        if tool_calls not in TOOL_CALL_MODES:
            raise PolicyError(f"tool calls {tool_calls!r}: use one of {', '.join(TOOL_CALL_MODES)}")
        self.native_tools = tool_calls == "native"
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.retries = retries
        self.backoff_s = backoff_s
        key = api_key or os.environ.get("TACHY_API_KEY") or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0), transport=transport
        )

    async def stream(
        self, messages: list[Message], stop: list[str], tools: list[dict] | None = None
    ) -> AsyncIterator[str | FunctionCall]:
        payload: dict = {
            "model": self.model,
            "messages": msgspec.to_builtins(messages),
            "stream": True,
        }
        if stop:
            payload["stop"] = stop
        if tools:
            payload["tools"] = tools
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        for attempt in range(self.retries + 1):
            produced = False
            try:
                async with self.client.stream("POST", self.url, json=payload) as response:
                    if response.status_code in self.RETRY_STATUS:
                        raise _Retry(f"HTTP {response.status_code}")
                    if response.status_code >= 400:
                        body = (await response.aread()).decode("utf-8", "replace")
                        raise PolicyError(
                            f"{self.url} answered HTTP {response.status_code}: {body[:500]}"
                        )
                    async for chunk in self._chunks(response):
                        produced = True
                        yield chunk
                return
            except (_Retry, httpx.TransportError) as exc:
                if produced:
                    raise PolicyError(
                        f"the connection to {self.url} broke in the middle of an answer: {exc}"
                    ) from None
                if attempt == self.retries:
                    reason = str(exc) or type(exc).__name__
                    raise PolicyError(
                        f"cannot get an answer from {self.url} after {attempt + 1} attempts: {reason}. "
                        "Is the model server running?"
                    ) from None
                await asyncio.sleep(self.backoff_s * 2**attempt)

    async def _chunks(self, response: httpx.Response) -> AsyncIterator[str | FunctionCall]:
        calls = _CallAssembler(self.url)
        if response.headers.get("content-type", "").startswith("application/json"):
            # A server that ignored "stream": take the whole answer at once.
            body = await response.aread()
            obj = self._json(body.decode("utf-8", "replace"))
            text = self._content(obj, "message")
            if text:
                yield text
            for call in calls.add(self._tool_calls(obj, "message")) + calls.finish():
                yield call
            return
        events = 0
        async for line in response.aiter_lines():
            line = line.strip()
            if not line or line.startswith(":") or line.startswith(("event:", "id:", "retry:")):
                continue
            if not line.startswith("data:"):
                raise PolicyError(
                    f"{self.url} did not answer with an OpenAI-compatible event stream; it sent: {line[:200]!r}"
                )
            data = line[5:].strip()
            if data == "[DONE]":
                break
            events += 1
            obj = self._json(data)
            text = self._content(obj, "delta")
            if text:
                yield text
            for call in calls.add(self._tool_calls(obj, "delta")):
                yield call
            if _finish_reason(obj):
                for call in calls.finish():
                    yield call
        if events == 0:
            # Not even one chunk: an empty answer is not a turn (it would end the run
            # silently with an empty final answer).
            raise PolicyError(f"{self.url} answered with an empty event stream")
        for call in calls.finish():
            yield call

    def _tool_calls(self, obj: dict, key: str) -> list:
        choices = obj.get("choices") or [{}]
        value = (
            (choices[0].get(key) or {}).get("tool_calls") if isinstance(choices[0], dict) else None
        )
        if value is None:
            return []
        if not isinstance(value, list):
            raise PolicyError(
                f"{self.url} sent tool_calls that are not a list: {json.dumps(obj)[:200]}"
            )
        return value

    def _json(self, data: str) -> dict:
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            raise PolicyError(
                f"{self.url} sent something that is not JSON: {data[:200]!r}"
            ) from None
        if not isinstance(obj, dict):
            raise PolicyError(f"{self.url} sent an unexpected JSON value: {data[:200]!r}")
        if obj.get("error"):
            raise PolicyError(f"the model server reported an error: {str(obj['error'])[:500]}")
        return obj

    def _content(self, obj: dict, key: str) -> str:
        choices = obj.get("choices")
        if choices == []:
            return ""  # e.g. a usage-only chunk
        try:
            content = choices[0][key].get("content") or ""
        except (TypeError, KeyError, IndexError, AttributeError):
            raise PolicyError(
                f"{self.url} sent a chunk without choices[0].{key}: {json.dumps(obj)[:200]}"
            ) from None
        if not isinstance(content, str):
            raise PolicyError(f"{self.url} sent non-text content: {json.dumps(obj)[:200]}")
        return content

    async def aclose(self) -> None:
        await self.client.aclose()


def _finish_reason(obj: dict) -> str | None:
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0].get("finish_reason")
    return None


class _CallAssembler:
    """Native calls put together from streamed `tool_calls` deltas. Servers differ:
    vLLM and OpenAI send the id and name first and the arguments in pieces, each
    piece tagged with the call's `index`; Ollama sends each call whole; some omit the
    index (then a fragment with a new id starts a new call). A call is complete when
    a later call begins or the choice finishes, and is handed back then, so the
    executor can start it while the model writes the next."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.calls: dict[int, dict] = {}  # index -> {"id", "name", "arguments"}
        self.done: set[int] = set()

    def add(self, fragments: list) -> list[FunctionCall]:
        ready = []
        for fragment in fragments:
            if not isinstance(fragment, dict):
                raise PolicyError(
                    f"{self.url} sent a tool call that is not an object: {fragment!r:.200}"
                )
            index = self._index(fragment)
            for earlier in sorted(i for i in self.calls if i < index and i not in self.done):
                ready.append(self._complete(earlier))
            call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            function = fragment.get("function") or {}
            call["id"] = call["id"] or str(fragment.get("id") or "")
            call["name"] += str(function.get("name") or "")
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # sent as an object rather than its text
                arguments = json.dumps(arguments)
            call["arguments"] += str(arguments or "")
        return ready

    def finish(self) -> list[FunctionCall]:
        return [self._complete(i) for i in sorted(self.calls) if i not in self.done]

    def _index(self, fragment: dict) -> int:
        index = fragment.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        last = max(self.calls, default=-1)
        if last < 0 or (fragment.get("id") and fragment.get("id") != self.calls[last]["id"]):
            return last + 1
        return last

    def _complete(self, index: int) -> FunctionCall:
        self.done.add(index)
        call = self.calls[index]
        return FunctionCall(call["id"] or f"call_{index}", call["name"], call["arguments"])


def _replay_policy(rest: str, max_tokens: int | None = None, runs: int = 1) -> Policy:
    return ReplayPolicy.from_file(rest)  # replayed turns are as long as they were


def _openai_policy(rest: str, max_tokens: int | None = None, runs: int = 1) -> Policy:
    base, _, model = rest.partition("#")
    model, _, options = model.partition("?")
    if not base.startswith(("http://", "https://")) or not model:
        raise PolicyError(
            f"openai policy {'openai:' + rest!r} must look like "
            "openai:http://HOST:PORT/v1#MODEL_NAME (optionally ?tools=native)"
        )
    tool_calls = os.environ.get("TACHY_TOOL_CALLS") or "text"
    for option in filter(None, options.split("&")):
        key, _, value = option.partition("=")
        if key != "tools" or value not in TOOL_CALL_MODES:
            raise PolicyError(
                f"openai policy option {option!r}: the one option is tools=native or tools=text"
            )
        tool_calls = value
    if tool_calls not in TOOL_CALL_MODES:
        raise PolicyError(f"TACHY_TOOL_CALLS={tool_calls!r}: use native or text")
    return OpenAIPolicy(base, model, max_tokens=max_tokens, tool_calls=tool_calls)


# kind -> factory(the spec after "kind:", max_tokens=N or None, runs=N) -> Policy.
PolicyFactory = Callable[..., Policy]
POLICY_FACTORIES: dict[str, PolicyFactory] = {"replay": _replay_policy, "openai": _openai_policy}


def register_policy(kind: str, factory: PolicyFactory) -> None:
    """Add a policy kind (called by an entry point, before any policy is made)."""
    POLICY_FACTORIES[kind] = factory


def load_policy(spec: str, *, max_tokens: int | None = None, runs: int = 1) -> Policy:
    """Build a policy from its spec string (see the module docstring). `max_tokens`
    bounds each turn the model writes (None: the policy's own default); `runs`: how
    many runs will use it at once (an in-process model decodes that many together)."""
    if runs < 1:
        raise PolicyError(f"runs must be at least 1, got {runs}")
    kind, sep, rest = spec.partition(":")
    if not sep or (not rest and kind != "local"):
        raise PolicyError(
            f"policy {spec!r} is not a policy spec; use replay:FILE.jsonl, openai:BASE_URL#MODEL "
            "or local:CHECKPOINT_DIR"
        )
    factory = POLICY_FACTORIES.get(kind)
    if factory is None:
        known = ", ".join(f"{k}:" for k in POLICY_FACTORIES)
        raise PolicyError(f"unknown policy kind {kind!r}; use {known}")
    return factory(rest, max_tokens=max_tokens, runs=runs)
