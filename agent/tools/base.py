"""What every tool shares: the Tool base class, its context, and argument binding.

A tool is a small class: its docstring is the model's documentation, its `Args`
msgspec Struct is its parameter schema (each field's `Meta(description=...)` documents
the parameter), `access` tells the scheduler what it reads and writes, and `run`
does the work and returns the text the model sees. Failures are raised as ToolError
with a message written for the model.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from agent.parser import RawCall, format_call

if typing.TYPE_CHECKING:
    from agent.lints import LintRunner
    from agent.sandbox import Sandbox
    from agent.workspace import Workspace

# Access sets: the paths a call reads or writes, or EVERYTHING.
EVERYTHING = None
Access = frozenset[str] | None


class ToolError(Exception):
    """A failure reported to the model as an error result (never crashes a run)."""


class SearchIndex(typing.Protocol):
    """What codebase_search needs from the semantic index (the index issue provides it)."""

    def search(self, query: str, *, paths: list[str] | None, limit: int) -> list[Any]: ...


@dataclass
class ToolContext:
    """Everything a tool may touch. Production and training differ only in what is
    plugged in here, never in the tools themselves."""

    workspace: Workspace
    sandbox: Sandbox
    linters: LintRunner
    index: SearchIndex | None = None
    todos: list[Any] = field(default_factory=list)


class Tool:
    name: ClassVar[str]
    Args: ClassVar[type[msgspec.Struct]]
    # Read-only tools never change the workspace and may run concurrently.
    read_only: ClassVar[bool] = True

    def access(self, args: Any) -> tuple[Access, Access]:
        """(reads, writes) of a call, for ordering calls within a turn."""
        return EVERYTHING, frozenset()

    async def run(self, args: Any, ctx: ToolContext) -> str:
        raise NotImplementedError

    def parse_list_item(self, field_name: str, line: str) -> Any:
        """Turn one line of a list parameter written one item per line into an item."""
        return line

    # ------------------------------------------------------- documentation
    @classmethod
    def description(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def parameters(cls) -> list[tuple[str, str, bool, str]]:
        """(name, type name, required, description) for each parameter."""
        hints = typing.get_type_hints(cls.Args, include_extras=True)
        result = []
        for info in msgspec.structs.fields(cls.Args):
            hint = hints[info.name]
            description = ""
            if typing.get_origin(hint) is typing.Annotated:
                for meta in hint.__metadata__:
                    if isinstance(meta, msgspec.Meta) and meta.description:
                        description = meta.description
            required = (
                info.default is msgspec.NODEFAULT and info.default_factory is msgspec.NODEFAULT
            )
            result.append((info.name, _type_name(hint), required, description))
        return result

    @classmethod
    def usage(cls) -> str:
        """The valid form of a call, shown in the docs and in error results."""
        params = {}
        for name, type_name, required, _ in cls.parameters():
            params[name] = f"{type_name}{'' if required else ', optional'}"
        return format_call(cls.name, params)


def _type_name(hint: Any) -> str:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(arg) for arg in typing.get_args(hint) if arg is not type(None)]
        return " | ".join(names)
    if origin is list:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(hint))
    return {str: "string", int: "integer", bool: "boolean", float: "number"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _is_list_field(hint: Any) -> bool:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_is_list_field(a) for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) is list


class BindError(Exception):
    """Arguments that do not fit the tool's schema."""


def bind_args(tool: Tool, call: RawCall) -> msgspec.Struct:
    """Validate and convert a parsed call's string parameters into `tool.Args`."""
    params = tool.parameters()
    known = {name for name, *_ in params}
    unknown = sorted(set(call.params) - known)
    if unknown:
        raise BindError(
            f"unknown parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(f'<{u}>' for u in unknown)} for {tool.name}; "
            f"its parameters are {', '.join(f'<{k}>' for k in sorted(known))}"
        )
    missing = [name for name, _, required, _ in params if required and name not in call.params]
    if missing:
        raise BindError(f"missing required parameter {', '.join(f'<{m}>' for m in missing)}")
    hints = typing.get_type_hints(tool.Args, include_extras=True)
    values: dict[str, Any] = {}
    for name, raw in call.params.items():
        if _is_list_field(hints[name]):
            values[name] = _split_list(tool, name, raw)
        else:
            values[name] = raw
    try:
        return msgspec.convert(values, tool.Args, strict=False)
    except msgspec.ValidationError as exc:
        raise BindError(_explain(str(exc), call.params)) from None


def _split_list(tool: Tool, name: str, raw: str) -> Any:
    text = raw.strip()
    if text.startswith("["):
        try:
            return msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise BindError(
                f"parameter <{name}> looks like JSON but does not parse: {exc}"
            ) from None
    return [tool.parse_list_item(name, line.strip()) for line in text.splitlines() if line.strip()]


def _explain(message: str, params: dict[str, str]) -> str:
    # msgspec says e.g. "Expected `int`, got `str` - at `$.start_line`".
    where = ""
    if " - at `$." in message:
        message, path = message.split(" - at `$.", 1)
        path = path.rstrip("`")
        field_name = path.split("[")[0].split(".")[0]
        where = f"parameter <{field_name}>"
        if field_name in params and "[" not in path:
            shown = params[field_name]
            if len(shown) > 60:
                shown = shown[:57] + "..."
            where += f" (given {shown!r})"
        if "[" in path or "." in path:
            where += f" at {path}"
    message = (
        message.replace("`int`", "an integer")
        .replace("`bool`", "true or false")
        .replace("`str`", "text")
        .replace("`array`", "a list")
        .replace("`object`", "an object")
    )
    return f"{where}: {message}" if where else message
