"""What every tool shares: the Tool base class, its context, and argument binding.

A tool is a small class: its docstring is the model's documentation, its `Args`
msgspec Struct is its parameter schema (each field's `Meta(description=...)` documents
the parameter), `access` tells the scheduler what it reads and writes, and `run`
does the work and returns the text the model sees. Failures are raised as ToolError
with a message written for the model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import msgspec

from agent.parser import RawCall, format_call

if typing.TYPE_CHECKING:
    from agent.lints import LintRunner
    from agent.sandbox import Sandbox
    from agent.workspace import Workspace

T = TypeVar("T")


class _Everything:
    """The access set of a call that may read or write any path (a shell command)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EVERYTHING"


# Access sets: the paths a call reads or writes, or EVERYTHING.
EVERYTHING = _Everything()
Access = frozenset[str] | _Everything


# Tools do blocking file and process work on threads. asyncio's default pool has only
# cpu_count + 4 workers, which would serialise a turn's parallel calls on a small
# machine; calls mostly wait on I/O and child processes, so a wider pool is cheap.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="tachy-tool")


async def run_blocking(function: Callable[..., T], *args: Any) -> T:
    """Run blocking tool work on the tool thread pool, in the caller's context (so an
    editor's workspace knows which call a write belongs to: agent.executor.CURRENT_CALL)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_POOL, context.run, function, *args)


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
    def summary(cls) -> str:
        """The docstring's first paragraph, on one line: what the system prompt shows."""
        return " ".join(cls.description().split("\n\n", 1)[0].split())

    @classmethod
    def parameters(cls) -> list[Parameter]:
        """The parameters, in declaration order (computed once per tool class)."""
        return _parameters(cls.Args)

    @classmethod
    def function_schema(cls) -> dict[str, Any]:
        """The tool in the OpenAI `tools` form (native function calling): the same
        name, docstring and parameters (from `Args`) as the text syntax's."""
        return {
            "type": "function",
            "function": {
                "name": cls.name,
                "description": cls.description(),
                "parameters": _json_schema(cls.Args),
            },
        }

    @classmethod
    def usage(cls, native: bool = False) -> str:
        """The valid form of a call, shown in the docs and in error results: in the
        text syntax, or (`native`) as the JSON arguments of a function call."""
        params = {}
        for p in cls.parameters():
            params[p.name] = f"{p.type_name}{'' if p.required else ', optional'}"
        if native:
            return f"{cls.name} with the arguments {msgspec.json.encode(params).decode()}"
        return format_call(cls.name, params)


@functools.cache
def _json_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """msgspec's JSON schema of `args_type` with its references inlined, and an
    optional parameter given as its type alone (not "X or null"): what
    function-calling models are trained on."""
    schema = msgspec.json.schema(args_type)
    defs = schema.get("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return inline(defs[node["$ref"].rsplit("/", 1)[-1]])
        out = {key: inline(value) for key, value in node.items()}
        if out.get("title") == "Args":
            del out["title"]  # the struct's class name, not the tool's (items keep theirs)
        options = out.get("anyOf")
        if options and {"type": "null"} in options and len(options) == 2:
            (kept,) = [o for o in options if o != {"type": "null"}]
            del out["anyOf"]
            out |= kept
            if out.get("default", 0) is None:
                del out["default"]
        return out

    return inline(schema)


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


def _base_type(hint: Any) -> Any:
    """The type under Annotated and Optional: `Annotated[int, ...] | None` -> int."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return _base_type(args[0])
    return hint


@dataclass(frozen=True)
class Parameter:
    name: str
    type_name: str
    required: bool
    description: str
    kind: str  # "text" (taken verbatim), "list" (JSON or one item per line), "scalar"


@functools.cache
def _parameters(args_type: type[msgspec.Struct]) -> list[Parameter]:
    hints = typing.get_type_hints(args_type, include_extras=True)
    result = []
    for info in msgspec.structs.fields(args_type):
        hint = hints[info.name]
        description = ""
        if typing.get_origin(hint) is typing.Annotated:
            for meta in hint.__metadata__:
                if isinstance(meta, msgspec.Meta) and meta.description:
                    description = meta.description
        required = info.default is msgspec.NODEFAULT and info.default_factory is msgspec.NODEFAULT
        base = _base_type(hint)
        kind = "text" if base is str else "list" if typing.get_origin(base) is list else "scalar"
        result.append(Parameter(info.name, _type_name(hint), required, description, kind))
    return result


class BindError(Exception):
    """Arguments that do not fit the tool's schema."""


def bind_args(tool: Tool, call: RawCall) -> msgspec.Struct:
    """Validate and convert a parsed call's parameters into `tool.Args`.

    Text parameters are taken verbatim (code keeps its whitespace); numbers and
    booleans may be padded with spaces; lists are JSON or one item per line. A JSON
    call's values (numbers, booleans, lists) are taken as they are.
    """
    params = {p.name: p for p in tool.parameters()}
    unknown = sorted(set(call.params) - set(params))
    if unknown:
        raise BindError(
            f"unknown parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(f'<{u}>' for u in unknown)} for {tool.name}; "
            f"its parameters are {', '.join(f'<{k}>' for k in sorted(params))}"
        )
    missing = [p.name for p in params.values() if p.required and p.name not in call.params]
    if missing:
        raise BindError(f"missing required parameter {', '.join(f'<{m}>' for m in missing)}")
    values: dict[str, Any] = {}
    for name, raw in call.params.items():
        kind = params[name].kind
        if not isinstance(raw, str):
            values[name] = raw
        elif kind == "list":
            values[name] = _split_list(tool, name, raw)
        else:
            values[name] = raw.strip() if kind == "scalar" else raw
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


def _explain(message: str, params: dict[str, Any]) -> str:
    # msgspec says e.g. "Expected `int`, got `str` - at `$.start_line`".
    where = ""
    if " - at `$." in message:
        message, path = message.split(" - at `$.", 1)
        path = path.rstrip("`")
        field_name = path.split("[")[0].split(".")[0]
        where = f"parameter <{field_name}>"
        if field_name in params and "[" not in path:
            given = params[field_name]
            shown = given if isinstance(given, str) else msgspec.json.encode(given).decode()
            if len(shown) > 60:
                shown = shown[:57] + "..."
            where += f" (given {shown!r})" if isinstance(given, str) else f" (given {shown})"
        if "[" in path or "." in path:
            where += f" at {path}"
    message = re.sub(r"`([^`]*)`", _plain_type, message)
    return f"{where}: {message}" if where else message


_PLAIN_TYPES = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "text",
    "array": "a list",
    "object": "an object",
}


def _plain_type(match: re.Match[str]) -> str:
    names = [n.strip() for n in match.group(1).split("|") if n.strip() != "null"]
    return " or ".join(_PLAIN_TYPES.get(n, f"`{n}`") for n in names)
