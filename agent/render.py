"""Everything the model reads is written here: the system prompt, each tool result and
the message that carries a turn's results back.

`render_result` is the single place a tool outcome becomes text, in the editor and in
training alike. Its output depends only on the outcome, never on wall-clock time,
absolute paths or dict order, so one run gives byte-identical results anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.tools.base import Tool

# No single result may flood the context window.
MAX_RESULT_CHARS = 40_000

# CSI sequences (colours, cursor moves), OSC sequences (window titles, hyperlinks; ended
# by BEL or ESC \\), character-set selections such as tput's ESC ( B, and the remaining
# two-character escapes.
_ANSI_RE = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -/]+[0-~]"
    r"|\x1b[@-Z\\-_]"
)


def cap_middle(text: str, limit: int, unit: str = "characters") -> str:
    """Keep the start and the end of `text` within `limit` characters, saying what was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted} {unit} omitted ...]\n{text[-half:]}"


def clean_terminal_text(data: bytes) -> str:
    """Decode command output for the model: invalid UTF-8 replaced, colour codes removed,
    carriage-return progress lines collapsed to their final state."""
    text = _ANSI_RE.sub("", data.decode("utf-8", "replace")).replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(
            line.rstrip("\r").rsplit("\r", 1)[-1] if "\r" in line else line
            for line in text.split("\n")
        )
    return text


# Lone surrogates: file names that are not UTF-8 (Python keeps their bytes as
# U+DC80..U+DCFF, "surrogateescape") and halves of a pair a stream split. No encoder
# takes them, so they would fail the transcript, the editor's JSON and the model's
# tokenizer.
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _show_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    # An undecodable byte of a name is shown as \xNN; anything else as U+FFFD.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def valid_text(text: str) -> str:
    """`text` with every lone surrogate replaced, so that it encodes as UTF-8."""
    return _SURROGATE_RE.sub(_show_surrogate, text) if _SURROGATE_RE.search(text) else text


def render_result(content: str, is_error: bool) -> str:
    """The text the model sees for one tool call."""
    content = valid_text(content)
    text = content.rstrip("\n") if content.strip() else "(no output)"
    if is_error:
        text = f"Error: {text}"
    return cap_middle(text, MAX_RESULT_CHARS)


def render_results_message(results: Sequence[tuple[str, str, bool, str]]) -> str:
    """One user message carrying a turn's results, in call order.

    Each item is (call_id, tool, is_error, content).
    """
    blocks = []
    for call_id, tool, is_error, content in results:
        status = ' status="error"' if is_error else ""
        blocks.append(
            f'<tool_result name="{tool}" call_id="{call_id}"{status}>\n{content}\n</tool_result>'
        )
    return "\n\n".join(blocks)


# Every rollout and every editor turn pays for these tokens, so they say only what a
# model needs to call the tools right; each tool's details come back in its results
# and errors. (973 SmolLM2 tokens with the tool list, from 1,640; bench/RESULTS.md.)
SYSTEM_PROMPT_INTRO = """\
You are tachy, a coding agent in the user's repository. Act by calling tools. Look
before you change anything, keep edits small, and run the tests before you finish.
"""
# How to call tools in the text syntax: also what `tachy model serve` tells its model
# when a client sends tools (agent.chat_tools).
CALL_SYNTAX = """\
Call a tool with a block like this (values are taken verbatim, no JSON):

<tool_call name="edit_file">
<path>src/calc.py</path>
<old_string>
    return a - b
</old_string>
<new_string>
    return a + b
</new_string>
</tool_call>

A value goes on the tag's line, or on its own lines between <name> and </name>.
Several blocks in one message run in parallel; their results come back as
<tool_result> blocks (never write those yourself). A message with no tool call is
your final answer. Paths are relative to the workspace root.
"""
SYSTEM_PROMPT_HEAD = SYSTEM_PROMPT_INTRO + "\n" + CALL_SYNTAX


# With native function calling the tools, their documentation and the call syntax
# come with the request (`tools`); the prompt keeps only the way of working.
SYSTEM_PROMPT_HEAD_NATIVE = """\
You are tachy, a coding agent in the user's repository. Act by calling the tools you
are given. Look before you change anything, keep edits small, and run the tests before
you finish.

Several calls in one message run in parallel. A message with no tool call is your
final answer. Paths are relative to the workspace root.
"""


def render_tool_docs(tools: Sequence[type[Tool]]) -> str:
    """One entry per tool, from its schema: the call's shape (`?` marks an optional
    parameter), the docstring's first paragraph, and the parameters' descriptions
    (with the type when it is not plain text)."""
    return render_docs(
        (
            tool.name,
            tool.summary(),
            [(p.name, p.required, p.type_name, p.description) for p in tool.parameters()],
        )
        for tool in tools
    )


def render_docs(entries: Iterable[tuple[str, str, list[tuple[str, bool, str, str]]]]) -> str:
    """The tools section of the system prompt from (name, summary, [(parameter,
    required, type name, description)]) entries: tachy's tools, or the tools a client
    of `tachy model serve` sends as JSON schemas (agent.chat_tools)."""
    sections = []
    for name, summary, params in entries:
        shape = ", ".join(p + ("" if required else "?") for p, required, _, _ in params)
        lines = [f"## {name}({shape})", summary]
        for p, _, type_name, description in params:
            kind = "" if type_name == "string" else f" ({type_name})"
            lines.append(f"- {p}{kind}: {description}")
        sections.append("\n".join(lines))
    return "# Tools\n\n" + "\n\n".join(sections)


def render_system_prompt(
    tools: Sequence[type[Tool]], project_rules: str = "", *, native: bool = False
) -> str:
    """The system prompt; `native`: for a model that calls the tools through native
    function calling (their schemas go with each request instead)."""
    prompt = (
        SYSTEM_PROMPT_HEAD_NATIVE if native else SYSTEM_PROMPT_HEAD + "\n" + render_tool_docs(tools)
    )
    if project_rules:
        prompt += (
            "\n\n# Project rules\n\nThe project's own instructions for agents:\n\n" + project_rules
        )
    return prompt


def stop_sequences() -> list[str]:
    """Stops for a policy: the model must never write tool results itself."""
    return ["<tool_result"]
