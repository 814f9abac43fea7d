"""A streaming parser for the tool-call syntax (see DESIGN.md).

    <tool_call name="edit_file">
    <path>src/calc.py</path>
    <old_string>
        return a - b
    </old_string>
    </tool_call>

A parameter is `<name>value</name>` on one line, or `<name>` alone on a line, the value's
lines, and `</name>` alone on its own line. Inside a multi-line value nothing is
special except that closing line, so code containing `</tool_call>` or other tags is
carried verbatim. The parser is fed the model's text as it streams and hands back each
call as soon as its `</tool_call>` arrives, so the executor can start it while the
model is still writing. It never raises on any input: problems become `RawCall.error`.

It also reads the form open models trained on Hermes-style function calling (Qwen,
Hermes, many served as plain completions) write by habit, one JSON object per block:

    <tool_call>
    {"name": "read_file", "arguments": {"path": "src/calc.py"}}
    </tool_call>

mapped onto the same calls; its arguments keep their JSON types (`json_call` builds
the same from a native function call's name and argument text).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN_TAG = "<tool_call"
CLOSE_TAG = "</tool_call>"
_OPEN_RE = re.compile(r"""<tool_call(?:\s+name\s*=\s*(?:"([^"]*)"|'([^']*)'))?\s*>""")
_NAME = r"[A-Za-z_][A-Za-z0-9_\-]*"
_SINGLE_RE = re.compile(rf"^\s*<({_NAME})>(.*)</\1>\s*$", re.DOTALL)
_OPEN_PARAM_RE = re.compile(rf"^\s*<({_NAME})>(.*)$", re.DOTALL)


@dataclass
class RawCall:
    """One `<tool_call>` block as written, before its arguments are validated. A
    parameter is text as written in the tag syntax, or a JSON value from a JSON call."""

    index: int
    name: str | None
    params: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def fail(self, message: str) -> None:
        # Keep the first problem: later ones are usually consequences of it.
        if self.error is None:
            self.error = message


class ToolCallParser:
    """Feed text chunks with `feed`, then call `finish` once; both return the calls
    completed by that input, in order."""

    def __init__(self) -> None:
        self._buf = ""
        self._call: RawCall | None = None
        self._param: str | None = None
        self._value: list[str] = []
        self._json = False  # inside a `<tool_call>` whose body may be one JSON object
        self._count = 0
        self._done: list[RawCall] = []

    # ------------------------------------------------------------ public API
    def feed(self, chunk: str) -> list[RawCall]:
        self._buf += chunk
        self._run(final=False)
        return self._take()

    def finish(self) -> list[RawCall]:
        self._run(final=True)
        if self._call is not None:
            if self._param is not None:
                self._call.fail(
                    f"parameter <{self._param}> was never closed: put </{self._param}> alone on "
                    "its own line after the value, then </tool_call>"
                )
            else:
                self._call.fail("the tool call was never closed: end it with </tool_call>")
            self._close()
        return self._take()

    @property
    def in_call(self) -> bool:
        return self._call is not None

    # -------------------------------------------------------------- internals
    def _take(self) -> list[RawCall]:
        done, self._done = self._done, []
        return done

    def _run(self, final: bool) -> None:
        while True:
            if self._call is None:
                if not self._scan_prose(final):
                    return
            elif self._json:
                if not self._scan_json(final):
                    return
            elif self._param is None:
                if not self._scan_call(final):
                    return
            elif not self._scan_param(final):
                return

    def _next_line(self, final: bool) -> str | None:
        newline = self._buf.find("\n")
        if newline >= 0:
            line, self._buf = self._buf[:newline], self._buf[newline + 1 :]
        elif final and self._buf:
            line, self._buf = self._buf, ""
        else:
            return None
        return line[:-1] if line.endswith("\r") else line

    def _scan_prose(self, final: bool) -> bool:
        start = self._buf.find(OPEN_TAG)
        if start < 0:
            # Keep a possible partial "<tool_c" at the end for the next chunk.
            keep = 0 if final else len(OPEN_TAG) - 1
            self._buf = self._buf[-keep:] if keep else ""
            return False
        end = self._buf.find(">", start)
        if end < 0:
            if final:
                self._start_call(None).fail("the <tool_call ...> opening tag was never finished")
                self._buf = ""
                return True
            self._buf = self._buf[start:]
            return False
        match = _OPEN_RE.fullmatch(self._buf, start, end + 1)
        self._buf = self._buf[end + 1 :]
        if match is None:
            self._start_call(None).fail(
                'malformed opening tag: write it as <tool_call name="TOOL_NAME">'
            )
        else:
            name = match.group(1) if match.group(1) is not None else match.group(2)
            self._start_call(name or None)
            # A bare <tool_call>: a JSON call may follow (else the name is missing).
            self._json = not name
        return True

    def _scan_json(self, final: bool) -> bool:
        """After a bare `<tool_call>`: a JSON object up to `</tool_call>`, or, when the
        body does not begin with `{`, the tag syntax missing its name."""
        call = self._call
        assert call is not None
        body = self._buf.lstrip()
        if not body:
            if final:
                self._json = False
                call.fail('the opening tag has no tool name: write <tool_call name="TOOL_NAME">')
                self._close()
            return False
        if not body.startswith("{"):
            self._json = False
            call.fail('the opening tag has no tool name: write <tool_call name="TOOL_NAME">')
            return True  # the block is read on as a tag-syntax call, then reported
        # The object ends at a </tool_call> after which it parses: a string inside it
        # may itself hold "</tool_call>" (code that writes tool calls).
        start = 0
        while True:
            close = body.find(CLOSE_TAG, start)
            following = body.find("\n" + OPEN_TAG, start, close if close >= 0 else len(body))
            if following >= 0 and _json_problem(body[:following]) is not None:
                # A new block begins on a line of its own before this one parsed: this
                # one was never closed (a JSON string cannot hold a raw newline).
                problem = "the tool call was not closed with </tool_call> before the next one began"
                text = body[:following]
                self._buf = body[following + 1 :]
                break
            if close < 0:
                if not final:
                    return False
                problem = "the tool call was never closed: end it with </tool_call>"
                text = body
                self._buf = ""
                break
            text = body[:close]
            problem = _json_problem(text)
            if problem == _UNFINISHED and not final:
                start = close + len(CLOSE_TAG)  # the close was inside a string
                continue
            self._buf = body[close + len(CLOSE_TAG) :]
            break
        if problem is None:
            self._call = json_call(call.index, None, text)
        else:
            call.fail(problem if problem != _UNFINISHED else _UNFINISHED_MESSAGE)
        self._close()
        return True

    def _scan_call(self, final: bool) -> bool:
        stripped = self._buf.lstrip()
        if stripped.startswith(CLOSE_TAG):
            # Close at once, without waiting for the end of the line.
            self._buf = stripped[len(CLOSE_TAG) :]
            self._close()
            return True
        if not final and len(stripped) < len(CLOSE_TAG) and CLOSE_TAG.startswith(stripped):
            return False
        line = self._next_line(final)
        if line is None:
            return False
        call = self._call
        assert call is not None
        if not line.strip():
            return True
        if line.lstrip().startswith(OPEN_TAG):
            call.fail("the tool call was not closed with </tool_call> before the next one began")
            self._close()
            self._buf = line.lstrip() + "\n" + self._buf
            return True
        single = _SINGLE_RE.match(line)
        if single:
            self._set_param(single.group(1), single.group(2))
            return True
        close = line.find(CLOSE_TAG)
        if close > 0:
            # `<path>a.py</path></tool_call>`: the parameter, then the close.
            self._buf = f"{line[:close]}\n{line[close:]}\n{self._buf}"
            return True
        opening = _OPEN_PARAM_RE.match(line)
        if opening:
            self._param = opening.group(1)
            rest = opening.group(2)
            self._value = [rest] if rest.strip() else []
            return True
        snippet = line.strip()
        if len(snippet) > 80:
            snippet = snippet[:77] + "..."
        call.fail(
            f"unexpected text inside the tool call: {snippet!r}; each parameter must be "
            "<name>value</name> on one line, or <name> and </name> on lines of their own"
        )
        return True

    def _scan_param(self, final: bool) -> bool:
        line = self._next_line(final)
        if line is None:
            return False
        if line.strip() == f"</{self._param}>":
            assert self._param is not None
            self._set_param(self._param, "\n".join(self._value))
            self._param = None
            self._value = []
        else:
            self._value.append(line)
        return True

    def _set_param(self, name: str, value: str) -> None:
        call = self._call
        assert call is not None
        if name in call.params:
            call.fail(f"parameter <{name}> is given twice")
            return
        call.params[name] = value

    def _start_call(self, name: str | None) -> RawCall:
        self._call = RawCall(index=self._count, name=name)
        self._count += 1
        return self._call

    def _close(self) -> None:
        assert self._call is not None
        self._done.append(self._call)
        self._call = None
        self._param = None
        self._value = []
        self._json = False


_UNFINISHED = "unfinished"
_UNFINISHED_MESSAGE = "the JSON object of the tool call is not finished before </tool_call>"


def _json_problem(text: str) -> str | None:
    """None when `text` is one JSON object; _UNFINISHED when it may be the start of
    one; else what is wrong."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip()):
            return _UNFINISHED
        return f"the tool call's JSON does not parse: {exc.msg} (character {exc.pos})"
    return None if isinstance(value, dict) else "the tool call's JSON must be an object"


def json_call(index: int, name: str | None, text: str) -> RawCall:
    """A call written as JSON: `text` is `{"name": ..., "arguments": {...}}` (Hermes
    style, `name` None) or, from a native function call, the arguments object alone
    (`name` given). Arguments that are a JSON string holding an object (as some
    servers send them) are decoded too. Problems become the call's error, worded like
    the tag syntax's so the model can correct itself."""
    call = RawCall(index=index, name=name)
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        call.fail(
            f"the arguments are not valid JSON: {exc.msg} (character {exc.pos}); "
            "send one JSON object of the tool's parameters"
        )
        return call
    if name is None:
        if not isinstance(value, dict):
            call.fail('a JSON tool call must be an object: {"name": TOOL, "arguments": {...}}')
            return call
        call.name = value.get("name") if isinstance(value.get("name"), str) else None
        if not call.name:
            call.fail('the JSON tool call names no tool: write {"name": TOOL, "arguments": {...}}')
            return call
        value = value.get("arguments", value.get("parameters", {}))
    if isinstance(value, str):
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value) if value.strip() else {}
    if not isinstance(value, dict):
        call.fail("the arguments must be a JSON object of the tool's parameters")
        return call
    call.params = value
    return call


def parse_all(text: str) -> list[RawCall]:
    """Parse a complete assistant turn."""
    parser = ToolCallParser()
    return parser.feed(text) + parser.finish()


def format_call(name: str, params: dict[str, str]) -> str:
    """Write a call in the canonical syntax; `parse_all` reads it back unchanged."""
    lines = [f'<tool_call name="{name}">']
    for key, value in params.items():
        if "\n" in value or "\r" in value:
            lines += [f"<{key}>", value, f"</{key}>"]
        else:
            lines.append(f"<{key}>{value}</{key}>")
    lines.append(CLOSE_TAG)
    return "\n".join(lines)
