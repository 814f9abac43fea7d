"""todo_write: the agent's plan, visible to the user."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from agent.tools.base import Access, Tool, ToolContext

Status = Literal["pending", "in_progress", "completed"]
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
_LINE_RE = re.compile(r"^(?:[-*]\s*)?\[([ xX~>])\]\s*(.+)$")


class Todo(msgspec.Struct, forbid_unknown_fields=True):
    content: str
    status: Status = "pending"


class TodoWrite(Tool):
    """Write your plan as a todo list (it replaces the previous list).

    Use it for work with several steps; keep exactly one item in_progress while you
    work on it and mark items completed as soon as they are done. Write one item per
    line as `- [ ] step` (pending), `- [~] step` (in progress) or `- [x] step`
    (completed), or as a JSON list of {"content": ..., "status": ...}.
    """

    name = "todo_write"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        todos: Annotated[
            list[Todo],
            Meta(
                description="the whole list, one item per line: `- [ ] step`, `- [~] step` "
                "(in progress) or `- [x] step` (done)"
            ),
        ]

    def access(self, args: Args) -> tuple[Access, Access]:
        return frozenset(), frozenset()

    def parse_list_item(self, field_name: str, line: str) -> dict[str, str]:
        match = _LINE_RE.match(line)
        if not match:
            return {"content": line.lstrip("-* ").strip(), "status": "pending"}
        mark, content = match.groups()
        status = {"x": "completed", "X": "completed", "~": "in_progress", ">": "in_progress"}.get(
            mark, "pending"
        )
        return {"content": content.strip(), "status": status}

    async def run(self, args: Args, ctx: ToolContext) -> str:
        ctx.todos[:] = args.todos
        return render_todos(args.todos)


def render_todos(todos: list[Todo]) -> str:
    if not todos:
        return "Todo list cleared."
    done = sum(t.status == "completed" for t in todos)
    lines = [f"Todo list ({done} of {len(todos)} done):"]
    lines += [f"{_MARKS[t.status]} {i}. {t.content}" for i, t in enumerate(todos, 1)]
    return "\n".join(lines)
