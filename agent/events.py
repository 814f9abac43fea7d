"""Transcript events: the same objects in a JSONL file, in `tachy/agent/event`
notifications and in training rollouts (DESIGN.md).

`meta` holds volatile facts (durations, the machine's paths, the sandbox mode); all
other fields are deterministic for a given run, which the trainer and the
determinism tests rely on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from agent.tools.todo import Todo


class Event(msgspec.Struct, tag_field="event", kw_only=True):
    meta: dict[str, Any] = msgspec.field(default_factory=dict)


class RunStart(Event, tag="run_start"):
    prompt: str
    tools: list[str]


class Assistant(Event, tag="assistant"):
    turn: int
    text: str


class ToolCall(Event, tag="tool_call"):
    call_id: str
    tool: str
    args: dict[str, Any]


class ToolResult(Event, tag="tool_result"):
    call_id: str
    tool: str
    is_error: bool
    content: str


class Todos(Event, tag="todos"):
    todos: list[Todo]


class Final(Event, tag="final"):
    text: str
    stop_reason: str  # end_turn | max_turns | cancelled | error


AnyEvent = RunStart | Assistant | ToolCall | ToolResult | Todos | Final

_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder(AnyEvent)


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(line: bytes | str) -> AnyEvent:
    return _decoder.decode(line)


def to_dict(event: Event) -> dict[str, Any]:
    return msgspec.to_builtins(event, order="sorted")


class TranscriptWriter:
    """Appends events to a JSONL file, one line each, flushed as it goes so that an
    interrupted run still leaves a complete file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()

    def __call__(self, event: Event) -> None:
        self._file.write(encode_event(event) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_transcript(path: str | Path) -> list[AnyEvent]:
    return [decode_event(line) for line in Path(path).read_bytes().splitlines() if line.strip()]
