"""The OpenAI `tools` form for a model that writes tachy's text syntax.

`tachy model serve` runs tachy's own model, which calls tools by writing
`<tool_call name="...">` blocks. A client that uses native function calling sends
`tools` (JSON schemas), assistant messages with `tool_calls` and `tool` messages, and
expects `tool_calls` back. This module maps between the two, so any such client can
drive the model, and tachy's own native mode gives the model the very conversation
text mode would:

- the request: the tools become the system prompt's call syntax and tool docs, in
  tachy's format (for tachy's own tools, byte for byte the docs the model was trained
  on); an assistant's `tool_calls` become `<tool_call>` blocks; a run of `tool`
  messages becomes one user message of `<tool_result>` blocks, as the executor writes;
- the answer: the model's text is parsed as the executor parses it (agent.parser);
  the prose before the first call is the content, each call a `tool_calls` entry with
  JSON arguments typed by the tool's schema, handed out as soon as it is complete.

Call ids are `call_{turn}_{index}`, the executor's own ids in text mode, so the
results message the model reads is the same in both modes.

The model server gets this module from the entry point (the model package does not
import the agent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.parser import OPEN_TAG, RawCall, ToolCallParser, format_call
from agent.render import CALL_SYNTAX, render_docs, render_results_message

_JSON_TYPES = {"string": "string", "integer": "integer", "boolean": "boolean", "number": "number"}


class ChatToolsError(ValueError):
    """A request whose tools or tool messages cannot be used; the message says why."""


def check_tools(tools: Any) -> list[dict]:
    """The request's `tools`, checked: a list of {"type": "function", "function":
    {"name", "description"?, "parameters"?}}."""
    if not isinstance(tools, list):
        raise ChatToolsError("'tools' must be a list of function tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type", "function") != "function" or not isinstance(function, dict):
            raise ChatToolsError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ChatToolsError(f"tools[{i}].function.name must be a non-empty string")
        parameters = function.get("parameters", {})
        if not isinstance(parameters, dict):
            raise ChatToolsError(f"tools[{i}].function.parameters must be a JSON schema object")
    return tools


# ----------------------------------------------------------------- the request
def render_chat(messages: list[dict], tools: list[dict]) -> list[tuple[str, str]]:
    """OpenAI-form messages with tools -> the (role, content) turns of the model's chat
    template. `messages` were checked by the server (roles, text content)."""
    docs = CALL_SYNTAX + "\n" + render_docs(_doc_entry(t["function"]) for t in tools)
    turns: list[tuple[str, str]] = []
    names: dict[str, str] = {}  # call id -> tool name, for the results message
    results: list[tuple[str, str, bool, str]] = []
    if not messages or messages[0].get("role") != "system":
        turns.append(("system", docs))
    for i, message in enumerate(messages):
        role, content = message["role"], _text(message.get("content"))
        if role != "tool" and results:
            turns.append(("user", render_results_message(results)))
            results = []
        if role == "system" and i == 0:
            turns.append(("system", content.rstrip("\n") + "\n\n" + docs))
        elif role == "assistant" and message.get("tool_calls"):
            blocks = [content.rstrip("\n")] if content.strip() else []
            for call in message["tool_calls"]:
                call_id, name, params = _call_of(call, i)
                names[call_id] = name
                blocks.append(format_call(name, params))
            turns.append(("assistant", "\n".join(blocks)))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in names:
                raise ChatToolsError(
                    f"messages[{i}] is a tool message whose tool_call_id {call_id!r} answers "
                    "no earlier tool call"
                )
            # The executor renders an error result as "Error: ..." and marks its block.
            results.append((call_id, names[call_id], content.startswith("Error: "), content))
        else:
            turns.append((role, content))
    if results:
        turns.append(("user", render_results_message(results)))
    return turns


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _call_of(call: Any, i: int) -> tuple[str, str, dict[str, str]]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ChatToolsError(f"messages[{i}].tool_calls: each needs function.name and arguments")
    raw = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise ChatToolsError(
            f"messages[{i}].tool_calls: the arguments of {function['name']} are not a JSON object"
        )
    params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in arguments.items()}
    return str(call.get("id") or ""), function["name"], params


def _doc_entry(function: dict) -> tuple[str, str, list[tuple[str, bool, str, str]]]:
    description = function.get("description") or ""
    summary = " ".join(description.split("\n\n", 1)[0].split())
    schema = function.get("parameters") or {}
    required = set(schema.get("required") or ())
    params = [
        (name, name in required, _type_name(prop), (prop or {}).get("description", ""))
        for name, prop in (schema.get("properties") or {}).items()
    ]
    return function["name"], summary, params


def _type_name(prop: Any) -> str:
    """A JSON schema's type in the words of tachy's tool docs (agent.tools.base)."""
    if not isinstance(prop, dict):
        return "string"
    if "enum" in prop:
        return " | ".join(repr(v) for v in prop["enum"])
    if "anyOf" in prop:
        names = [_type_name(p) for p in prop["anyOf"] if p != {"type": "null"}]
        return " | ".join(names)
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type_name(prop.get('items', {}))}"
    if kind == "object":
        return prop.get("title", "object")
    if isinstance(kind, list):
        return " | ".join(_JSON_TYPES.get(k, k) for k in kind if k != "null")
    return _JSON_TYPES.get(kind, "string")


# ------------------------------------------------------------------ the answer
@dataclass
class ToolCallOutput:
    """The model's answer, fed as it streams: `feed` returns (content to stream now,
    tool calls completed now). Content is the text before the first call; a possible
    beginning of `<tool_call` is held back until it is decided."""

    tools: list[dict]
    turn: int  # 1 + the assistant messages in the request: the executor's turn number
    content: str = ""
    calls: list[dict] = field(default_factory=list)
    _parser: ToolCallParser = field(default_factory=ToolCallParser)
    _text: str = ""
    _sent: int = 0
    _in_calls: bool = False

    def feed(self, chunk: str) -> tuple[str, list[dict]]:
        self._text += chunk
        return self._content(final=False), self._calls(self._parser.feed(chunk))

    def finish(self) -> tuple[str, list[dict]]:
        return self._content(final=True), self._calls(self._parser.finish())

    def _content(self, final: bool) -> str:
        if self._in_calls:
            return ""
        start = self._text.find(OPEN_TAG)
        if start >= 0:  # the content ends here, without the space before the call
            self._in_calls, end = True, len(self._text[:start].rstrip())
        elif final:
            end = len(self._text)
        else:  # hold back what may begin a call, and the space that would precede it
            end = len(self._text[: len(self._text) - _partial_tag(self._text)].rstrip())
        out = self._text[self._sent : end] if end > self._sent else ""
        self._sent = max(self._sent, end)
        self.content += out
        return out

    def _calls(self, raws: list[RawCall]) -> list[dict]:
        out = []
        for raw in raws:
            index = len(self.calls)
            arguments = _typed(raw.params, self._schema(raw.name))
            call = {
                "index": index,
                "id": f"call_{self.turn}_{index}",
                "type": "function",
                "function": {"name": raw.name or "", "arguments": json.dumps(arguments)},
            }
            self.calls.append(call)
            out.append(call)
        return out

    def _schema(self, name: str | None) -> dict:
        for tool in self.tools:
            if tool["function"]["name"] == name:
                return tool["function"].get("parameters") or {}
        return {}


def _partial_tag(text: str) -> int:
    """How many characters at the end of `text` could begin `<tool_call`."""
    for size in range(min(len(OPEN_TAG) - 1, len(text)), 0, -1):
        if OPEN_TAG.startswith(text[-size:]):
            return size
    return 0


def _typed(params: dict[str, Any], schema: dict) -> dict[str, Any]:
    """The text syntax's string values typed as the tool's schema says: "3" for an
    integer is 3, "true" for a boolean is true, a list one item per line (or JSON) is
    a list. A value that does not convert is sent as written, for the client to judge."""
    properties = schema.get("properties") or {}
    out = {}
    for name, value in params.items():
        prop = properties.get(name) or {}
        out[name] = _convert(value, _kinds(prop), prop) if isinstance(value, str) else value
    return out


def _kinds(prop: dict) -> set[str]:
    kinds = prop.get("type")
    if isinstance(kinds, str):
        return {kinds}
    if isinstance(kinds, list):
        return set(kinds)
    return {k for p in prop.get("anyOf", []) if isinstance(p, dict) for k in _kinds(p)}


def _convert(value: str, kinds: set[str], prop: dict) -> Any:
    text = value.strip()
    if "string" in kinds or not kinds:
        return value
    if "integer" in kinds and text.lstrip("-").isdigit():
        return int(text)
    if "number" in kinds:
        try:
            return float(text)
        except ValueError:
            pass
    if "boolean" in kinds and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if "array" in kinds:
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return value
        items = prop.get("items") or next(
            (p.get("items") for p in prop.get("anyOf", []) if isinstance(p, dict) and "items" in p),
            {},
        )
        if "string" in _kinds(items):
            return [line.strip() for line in text.splitlines() if line.strip()]
    return value
