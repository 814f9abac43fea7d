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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OPEN_TAG = "<tool_call"
CLOSE_TAG = "</tool_call>"
_OPEN_RE = re.compile(r"""<tool_call(?:\s+name\s*=\s*(?:"([^"]*)"|'([^']*)'))?\s*>""")
_NAME = r"[A-Za-z_][A-Za-z0-9_\-]*"
_SINGLE_RE = re.compile(rf"^\s*<({_NAME})>(.*)</\1>\s*$", re.DOTALL)
_OPEN_PARAM_RE = re.compile(rf"^\s*<({_NAME})>(.*)$", re.DOTALL)


@dataclass
class RawCall:
    """One `<tool_call>` block as written, before its arguments are validated."""

    index: int
    name: str | None
    params: dict[str, str] = field(default_factory=dict)
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
            call = self._start_call(name or None)
            if not name:
                call.fail('the opening tag has no tool name: write <tool_call name="TOOL_NAME">')
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
