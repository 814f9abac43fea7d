"""Policies: where the agent's next turn comes from.

A policy streams the assistant's next message as text chunks. The spec strings are a
contract (DESIGN.md):

- `replay:FILE.jsonl`: each line `{"text": "..."}` is one assistant turn, in order;
- `openai:BASE_URL#MODEL`: any OpenAI-compatible chat-completions server (vLLM,
  llama.cpp, Ollama, `tachy model serve`); the key comes from TACHY_API_KEY or
  OPENAI_API_KEY when the server needs one;
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
from pathlib import Path
from typing import Protocol

import httpx
import msgspec

from agent.jsonl import numbered_lines

# What `tachy agent` uses when no policy is given: the model bundled with tachy.
DEFAULT_POLICY = "local:"


class Message(msgspec.Struct):
    role: str  # system | user | assistant
    content: str


class PolicyError(Exception):
    """The policy cannot produce a turn; the message says why, for the user."""


# How a policy's error begins when the conversation outgrew its model's context: the
# run's own limit, not a failure of the model server (tachy eval scores it as failed).
CONTEXT_FULL = "the conversation no longer fits the model's context"


class Policy(Protocol):
    def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        """Yield the next assistant message in chunks."""
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
    """Streams chat completions from an OpenAI-compatible server."""

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
    ) -> None:
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

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        payload: dict = {
            "model": self.model,
            "messages": msgspec.to_builtins(messages),
            "stream": True,
        }
        if stop:
            payload["stop"] = stop
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

    async def _chunks(self, response: httpx.Response) -> AsyncIterator[str]:
        if response.headers.get("content-type", "").startswith("application/json"):
            # A server that ignored "stream": take the whole answer at once.
            body = await response.aread()
            yield self._content(self._json(body.decode("utf-8", "replace")), "message")
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
                return
            events += 1
            text = self._content(self._json(data), "delta")
            if text:
                yield text
        if events == 0:
            # Not even one chunk: an empty answer is not a turn (it would end the run
            # silently with an empty final answer).
            raise PolicyError(f"{self.url} answered with an empty event stream")

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


def _replay_policy(rest: str, max_tokens: int | None = None, runs: int = 1) -> Policy:
    return ReplayPolicy.from_file(rest)  # replayed turns are as long as they were


def _openai_policy(rest: str, max_tokens: int | None = None, runs: int = 1) -> Policy:
    base, _, model = rest.partition("#")
    if not base.startswith(("http://", "https://")) or not model:
        raise PolicyError(
            f"openai policy {'openai:' + rest!r} must look like "
            "openai:http://HOST:PORT/v1#MODEL_NAME"
        )
    return OpenAIPolicy(base, model, max_tokens=max_tokens)


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
