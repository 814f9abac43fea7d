"""The language server end to end, as an editor drives it: `tachy serve` in a
subprocess, spoken to over stdio by a pytest-lsp client that declares the
capabilities of a real VS Code or Neovim. Where the server's behaviour depends on
what the client can do (progress, file watching, position encodings), a test runs
once per client.

Indexing happens on the server's threads, so tests that wait for it poll the server
(`eventually`) until what they expect is there, under a timeout: they check
behaviour, never how long it took.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.uris import to_fs_path

from server import protocol as p
from tests.conftest import make_repo
from tests.server.lsp_client import CLIENTS, NEOVIM, VSCODE, EditorClient, lsp_session

LEXICAL = {"index": {"dense": False}}
_barriers = itertools.count()


@pytest.fixture(autouse=True)
def no_policy_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's default policy comes from $TACHY_POLICY; tests configure their own."""
    monkeypatch.delenv("TACHY_POLICY", raising=False)


# ------------------------------------------------------------------ helpers
def uri_path(uri: str) -> Path:
    return Path(to_fs_path(uri) or "").resolve()


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    """Poll `check` until it returns something truthy; that value."""

    async def poll() -> Any:
        while not (value := await check()):
            await asyncio.sleep(0.05)
        return value

    return await asyncio.wait_for(poll(), timeout)


async def search(ed: EditorClient, query: str, **params: Any) -> list[dict[str, Any]]:
    result = await ed.request(p.SEARCH, {"query": query, "limit": 50, **params})
    return result["results"]


async def hits_in(ed: EditorClient, query: str, path: Path) -> list[dict[str, Any]]:
    """Search results for `query` that lie in `path`."""
    return [r for r in await search(ed, query) if uri_path(r["uri"]) == path.resolve()]


async def settle(ed: EditorClient, folder: Path) -> None:
    """Wait until every change sent so far is indexed in `folder`: the server indexes
    changes in the order they arrive, so once a fresh marker is searchable, so is
    everything sent before it."""
    n = next(_barriers)
    path = folder / f"barrier_{n}.py"
    uri = ed.open(path, f"BARRIER_MARKER_{n} = {n}\n")
    await eventually(lambda: hits_in(ed, f"BARRIER_MARKER_{n}", path))
    ed.close(uri)
    await eventually(lambda: _absent(ed, f"BARRIER_MARKER_{n}"))


async def _absent(ed: EditorClient, query: str) -> bool:
    return not any(query in r["snippet"] for r in await search(ed, query))


def write_replay(path: Path, *turns: str) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns), encoding="utf-8")
    return path


LIST_DIR = '<tool_call name="list_dir">\n<path>.</path>\n</tool_call>'


_PADDING = "".join(
    f"        Line {i} of a docstring that makes the class too long to be one chunk.\n"
    for i in range(12)
)
SHAPES = f'''class Shape:
    def area(self):
        return 0


class Polygon(Shape):
    """A closed figure of straight sides."""

    def __init__(self, sides):
        self.sides = sides

    def area(self):
        """
{_PADDING}        """
        return sum(self.sides) * 0.5

    def perimeter(self):
        """
{_PADDING}        """
        return sum(self.sides)


def make_unit_triangle():
    return Polygon([1, 1, 1])
'''


def make_library(root: Path) -> Path:
    """A second small project: classes, and methods big enough to be indexed one by
    one (workspace/symbol lists what the index chunked)."""
    (root / "geo").mkdir(parents=True)
    (root / "geo" / "shapes.py").write_text(SHAPES)
    (root / "geo" / "__init__.py").write_text("")
    return root


def line_of(text: str, line: str, nth: int = 0) -> int:
    """The 0-based number of the `nth` line of `text` equal to `line`."""
    return [i for i, x in enumerate(text.splitlines()) if x == line][nth]


def folder_states(status: dict[str, Any]) -> dict[Path, str]:
    return {uri_path(f["uri"]): f["state"] for f in status["folders"]}


async def run_agent(ed: EditorClient, prompt: str = "Say hello.", **params: Any) -> dict:
    return await ed.request(p.AGENT_RUN, {"prompt": prompt, **params})


# ---------------------------------------------------------------- lifecycle
@pytest.mark.parametrize("client", CLIENTS)
async def test_initialize_declares_what_the_server_does(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        result = ed.initialize_result
        assert result is not None and result.server_info is not None
        assert result.server_info.name == "tachy"
        caps = result.capabilities
        assert caps.workspace_symbol_provider
        assert types.CodeActionKind.QuickFix in caps.code_action_provider.code_action_kinds
        assert list(caps.execute_command_provider.commands) == [p.ASK_TO_FIX]
        sync = caps.text_document_sync
        assert sync.open_close
        assert sync.change == types.TextDocumentSyncKind.Incremental
        assert sync.save is not None and sync.save is not False
        assert caps.workspace.workspace_folders.supported
        assert caps.workspace.workspace_folders.change_notifications
        # The server takes the client's first offer: Neovim offers utf-8 first.
        assert ed.encoding == ("utf-8" if client == NEOVIM else "utf-16")
        # And it works: the server answers its own methods straight away.
        status = await ed.request(p.INDEX_STATUS)
        assert [uri_path(f["uri"]) for f in status["folders"]] == [repo.resolve()]


# ------------------------------------------------------------------ folders
async def test_every_workspace_folder_is_indexed_and_searched(tmp_path: Path):
    calc = make_repo(tmp_path / "calc")
    lib = make_library(tmp_path / "lib")
    async with lsp_session([calc, lib], options=LEXICAL) as ed:
        status = await ed.wait_indexed()
        assert folder_states(status) == {calc.resolve(): "lexical", lib.resolve(): "lexical"}
        assert status["files"] == sum(f["files"] for f in status["folders"])
        assert all(f["files"] > 0 and f["chunks"] > 0 for f in status["folders"])

        assert await hits_in(ed, "sub", calc / "src" / "calc.py")
        assert await hits_in(ed, "make_unit_triangle", lib / "geo" / "shapes.py")
        # One query finds results in both folders.
        found = {uri_path(r["uri"]) for r in await search(ed, "return")}
        assert any(calc.resolve() in f.parents for f in found)
        assert any(lib.resolve() in f.parents for f in found)


async def test_workspace_folders_can_be_added_and_removed(tmp_path: Path):
    calc = make_repo(tmp_path / "calc")
    lib = make_library(tmp_path / "lib")
    async with lsp_session([calc], options=LEXICAL) as ed:
        await ed.wait_indexed()
        assert not await search(ed, "make_unit_triangle")

        ed.client.workspace_did_change_workspace_folders(
            types.DidChangeWorkspaceFoldersParams(
                event=types.WorkspaceFoldersChangeEvent(
                    added=[types.WorkspaceFolder(uri=lib.as_uri(), name="lib")], removed=[]
                )
            )
        )
        status = await ed.wait_indexed()
        assert set(folder_states(status)) == {calc.resolve(), lib.resolve()}
        assert await hits_in(ed, "make_unit_triangle", lib / "geo" / "shapes.py")

        ed.client.workspace_did_change_workspace_folders(
            types.DidChangeWorkspaceFoldersParams(
                event=types.WorkspaceFoldersChangeEvent(
                    added=[], removed=[types.WorkspaceFolder(uri=calc.as_uri(), name="calc")]
                )
            )
        )
        status = await ed.request(p.INDEX_STATUS)
        assert set(folder_states(status)) == {lib.resolve()}
        assert not await search(ed, "sub")
        assert await hits_in(ed, "Polygon", lib / "geo" / "shapes.py")


async def test_a_folder_that_is_not_a_directory_is_reported_not_indexed(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    missing = tmp_path / "gone"
    async with lsp_session([repo, missing], options=LEXICAL) as ed:
        await ed.wait_indexed()
        status = await ed.request(p.INDEX_STATUS)
        assert set(folder_states(status)) == {repo.resolve()}
        await ed.wait_for(lambda: any("gone" in m.message for m in ed.messages))


# ------------------------------------------------------------ configuration
@pytest.mark.parametrize("client", CLIENTS)
async def test_initialization_options_apply(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    write_replay(repo / "turns.jsonl", "From the options.")
    options = {
        "tachy": {  # the section may wrap them, as it does in workspace/configuration
            "index": {"enabled": False},
            "approval": "review",
            "policy": "replay:turns.jsonl",
        }
    }
    async with lsp_session([repo], capabilities=client, options=options) as ed:
        status = await ed.request(p.INDEX_STATUS)
        assert status["state"] == "disabled"
        assert status["folders"][0]["error"]
        # A search says at once that there is no index (it does not wait for one).
        with pytest.raises(JsonRpcException) as err:
            await asyncio.wait_for(search(ed, "add"), 15)
        assert "turned off" in err.value.message
        result = await run_agent(ed)
        assert (result["stopReason"], result["finalText"]) == ("end_turn", "From the options.")
        assert not ed.messages


@pytest.mark.parametrize("client", CLIENTS)
async def test_workspace_configuration_is_pulled_and_wins_key_by_key(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    write_replay(repo / "a.jsonl", "From A.")
    write_replay(repo / "b.jsonl", LIST_DIR, "From B.")
    options = {"index": {"dense": False}, "policy": "replay:a.jsonl", "maxTurns": 1}
    configuration = {"policy": "replay:b.jsonl"}
    async with lsp_session(
        [repo], capabilities=client, options=options, configuration=configuration
    ) as ed:
        result = await run_agent(ed)
        # The policy came from the configuration; maxTurns from the options still holds.
        assert result["stopReason"] == "max_turns"
        events = ed.session_events(result["sessionId"])
        assert [e["tool"] for e in events if e["event"] == "tool_call"] == ["list_dir"]
        assert (await ed.wait_indexed())["state"] == "lexical"  # index.dense from the options


@pytest.mark.parametrize("client", CLIENTS)
async def test_did_change_configuration_pushed_or_pulled(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    write_replay(repo / "a.jsonl", "From A.")
    write_replay(repo / "b.jsonl", "From B.")
    async with lsp_session([repo], capabilities=client, options=LEXICAL, configuration={}) as ed:
        with pytest.raises(JsonRpcException) as err:
            await run_agent(ed)
        assert "no model configured" in err.value.message

        # Pushed: the settings arrive in the notification (Neovim sends them so).
        ed.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"tachy": {"policy": "replay:a.jsonl"}})
        )
        assert (await run_agent(ed))["finalText"] == "From A."

        # Pulled: the notification only says something changed (VS Code's way).
        ed.client.set_configuration({"policy": "replay:b.jsonl"}, section="tachy")
        ed.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings=None)
        )

        async def from_b() -> bool:
            return (await run_agent(ed))["finalText"] == "From B."

        await eventually(from_b)


@pytest.mark.parametrize("client", CLIENTS)
async def test_invalid_settings_are_named_and_the_rest_applies(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    write_replay(repo / "a.jsonl", LIST_DIR, "From A.")
    options = {"index": {"dense": False}, "approval": 42, "maxTurns": 0}
    configuration = {
        "policy": "replay:a.jsonl",
        "bogusKey": True,
        "index": {"dense": "yes"},
        "maxTurns": 1,
    }
    async with lsp_session(
        [repo], capabilities=client, options=options, configuration=configuration
    ) as ed:
        result = await run_agent(ed)
        assert result["stopReason"] == "max_turns"  # policy and maxTurns applied
        warnings = [m.message for m in ed.messages if m.type == types.MessageType.Warning]
        for name in ("tachy.approval", "tachy.maxTurns", "tachy.bogusKey", "tachy.index"):
            assert any(name in w for w in warnings), (name, warnings)
        assert any("unknown setting" in w for w in warnings if "bogusKey" in w)
        # The index kept the options' (valid) dense=false, and the server works.
        assert (await ed.wait_indexed())["state"] == "lexical"
        assert await hits_in(ed, "add", repo / "src" / "calc.py")

        ed.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"tachy": "not an object"})
        )
        await ed.wait_for(lambda: any("must be an object" in m.message for m in ed.messages))
        assert (await run_agent(ed))["stopReason"] == "max_turns"


# ------------------------------------------------------------ document sync
@pytest.mark.parametrize("client", CLIENTS)
async def test_unsaved_changes_are_searchable_and_closing_restores_the_disk(
    tmp_path: Path, client: str
):
    repo = make_repo(tmp_path / "repo")
    calc = repo / "src" / "calc.py"
    on_disk = calc.read_text()
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        await ed.wait_indexed()
        uri = ed.open(calc)

        # A full-text change.
        ed.change(uri, on_disk + "\n\ndef frobnicate_widget(x):\n    return x * 42\n")
        await eventually(lambda: hits_in(ed, "frobnicate_widget", calc))

        # An incremental change: rename the new function in place.
        line = ed.texts[uri].splitlines().index("def frobnicate_widget(x):")
        start = ed.position(uri, line, 4)
        end = ed.position(uri, line, 4 + len("frobnicate_widget"))
        ed.edit(
            uri, [types.TextEdit(range=types.Range(start=start, end=end), new_text="defrag_gizmo")]
        )
        hits = await eventually(lambda: hits_in(ed, "defrag_gizmo", calc))
        assert "def defrag_gizmo(x):\n    return x * 42" in hits[0]["snippet"]
        await eventually(lambda: _absent(ed, "frobnicate_widget"))
        assert calc.read_text() == on_disk  # the unsaved text never reaches the disk

        # Closed without saving: the disk's text is what is indexed again.
        ed.close(uri)
        await eventually(lambda: _absent(ed, "defrag_gizmo"))
        assert await hits_in(ed, "sub", calc)


@pytest.mark.parametrize("client", CLIENTS)
async def test_documents_opened_before_their_folder_is_indexed_keep_their_text(
    tmp_path: Path, client: str
):
    """An editor restores its open tabs right after `initialized`, before the server
    has added the folders; and a folder can be added while files in it are open."""
    repo = make_repo(tmp_path / "repo")
    lib = make_library(tmp_path / "lib")
    calc, shapes = repo / "src" / "calc.py", lib / "geo" / "shapes.py"
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        ed.open(calc, "EARLY_TAB_MARKER = 1\n")
        await eventually(lambda: hits_in(ed, "EARLY_TAB_MARKER", calc))

        uri = ed.open(shapes)
        ed.change(uri, "OPEN_BEFORE_ADDED_MARKER = 2\n")
        ed.client.workspace_did_change_workspace_folders(
            types.DidChangeWorkspaceFoldersParams(
                event=types.WorkspaceFoldersChangeEvent(
                    added=[types.WorkspaceFolder(uri=lib.as_uri(), name="lib")], removed=[]
                )
            )
        )
        await eventually(lambda: hits_in(ed, "OPEN_BEFORE_ADDED_MARKER", shapes))
        assert not await hits_in(ed, "Polygon", shapes)


@pytest.mark.parametrize("client", CLIENTS)
async def test_saved_changes_stay_indexed_after_close(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    calc = repo / "src" / "calc.py"
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        await ed.wait_indexed()
        uri = ed.open(calc)
        ed.change(uri, "def multiply_matrices(a, b):\n    return a @ b\n")
        ed.save(uri)
        ed.close(uri)
        await settle(ed, repo)
        assert await hits_in(ed, "multiply_matrices", calc)
        assert not await hits_in(ed, "sub", calc)


@pytest.mark.parametrize("client", CLIENTS)
async def test_non_ascii_incremental_edits_keep_positions(tmp_path: Path, client: str):
    """Emoji are two UTF-16 code units and four UTF-8 bytes; CJK one and three. The
    client counts positions in the encoding the server chose; the server must too."""
    repo = make_repo(tmp_path / "repo")
    path = repo / "src" / "greet.py"
    path.write_text('GREETING = "🎉你好 world"\nFAREWELL = "再见 👋"\n')
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        await ed.wait_indexed()
        uri = ed.open(path)
        first = ed.texts[uri].splitlines()[0]
        at = first.index("world")
        rng = types.Range(start=ed.position(uri, 0, at), end=ed.position(uri, 0, at + len("world")))
        ed.edit(uri, [types.TextEdit(range=rng, new_text="planet_zorgon")])
        # A second edit on the next line, after two wide characters.
        second = ed.texts[uri].splitlines()[1]
        end = ed.position(uri, 1, len(second))
        ed.edit(
            uri,
            [
                types.TextEdit(
                    range=types.Range(start=end, end=end), new_text="  # 終わり qux_marker"
                )
            ],
        )
        assert ed.texts[uri] == (
            'GREETING = "🎉你好 planet_zorgon"\nFAREWELL = "再见 👋"  # 終わり qux_marker\n'
        )
        hits = await eventually(lambda: hits_in(ed, "qux_marker", path))
        assert hits[0]["snippet"] == ed.texts[uri].rstrip("\n")


@pytest.mark.parametrize("client", CLIENTS)
async def test_files_changed_on_disk_are_indexed_when_the_editor_says_so(
    tmp_path: Path, client: str
):
    repo = make_repo(tmp_path / "repo")
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        await ed.wait_indexed()
        # The server asks for file events where the client can register for them.
        watch = [
            r for r in ed.registrations if r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
        ]
        assert len(watch) == (1 if client == VSCODE else 0)

        def changed(path: Path, kind: types.FileChangeType) -> None:
            ed.client.workspace_did_change_watched_files(
                types.DidChangeWatchedFilesParams(
                    changes=[types.FileEvent(uri=path.as_uri(), type=kind)]
                )
            )

        new = repo / "src" / "geometry.py"
        new.write_text("def hypotenuse_length(a, b):\n    return (a * a + b * b) ** 0.5\n")
        changed(new, types.FileChangeType.Created)
        await eventually(lambda: hits_in(ed, "hypotenuse_length", new))

        new.write_text("def cathetus_length(c, a):\n    return (c * c - a * a) ** 0.5\n")
        changed(new, types.FileChangeType.Changed)
        await eventually(lambda: hits_in(ed, "cathetus_length", new))
        await eventually(lambda: _absent(ed, "hypotenuse_length"))

        new.unlink()
        changed(new, types.FileChangeType.Deleted)
        await eventually(lambda: _absent(ed, "cathetus_length"))

        # A whole new directory (a branch switch, an unpacked archive).
        (repo / "vendor" / "pkg").mkdir(parents=True)
        (repo / "vendor" / "pkg" / "mod.py").write_text("def vendored_helper():\n    pass\n")
        changed(repo / "vendor", types.FileChangeType.Created)
        await eventually(lambda: hits_in(ed, "vendored_helper", repo / "vendor" / "pkg" / "mod.py"))


@pytest.mark.parametrize("client", CLIENTS)
async def test_an_open_documents_unsaved_text_wins_over_disk_events(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    calc = repo / "src" / "calc.py"
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        await ed.wait_indexed()
        uri = ed.open(calc)
        ed.change(uri, "UNSAVED_BUFFER_MARKER = 1\n")
        calc.write_text("DISK_ONLY_MARKER = 2\n")  # e.g. a `git checkout` behind its back
        ed.client.workspace_did_change_watched_files(
            types.DidChangeWatchedFilesParams(
                changes=[types.FileEvent(uri=uri, type=types.FileChangeType.Changed)]
            )
        )
        await settle(ed, repo)
        assert await hits_in(ed, "UNSAVED_BUFFER_MARKER", calc)
        assert await _absent(ed, "DISK_ONLY_MARKER")


# -------------------------------------------------------- status and symbols
async def test_index_status_reports_each_folder(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    async with lsp_session([repo], options=LEXICAL) as ed:
        status = await ed.wait_indexed()
        assert set(status) >= {"state", "files", "chunks", "embedded", "folders"}
        (folder,) = status["folders"]
        assert set(folder) >= {"uri", "state", "files", "chunks", "embedded"}
        assert uri_path(folder["uri"]) == repo.resolve()
        # src/calc.py, src/__init__.py, tests/test_calc.py, README.md, .gitignore at
        # most: the ignored build/ and debug.log and the secret .env are not indexed.
        assert 3 <= folder["files"] <= 5
        assert folder["chunks"] >= 3
        assert folder["embedded"] == 0  # dense search is off
        assert (status["files"], status["chunks"]) == (folder["files"], folder["chunks"])
        assert await _absent(ed, "hunter2")  # .env
        assert await _absent(ed, "generated")  # build/, ignored by .gitignore


@pytest.mark.parametrize("client", CLIENTS)
async def test_workspace_symbol_answers_from_the_index(tmp_path: Path, client: str):
    lib = make_library(tmp_path / "lib")
    shapes = lib / "geo" / "shapes.py"
    async with lsp_session([lib], capabilities=client, options=LEXICAL) as ed:
        await ed.wait_indexed()

        async def symbols(query: str) -> list[Any]:
            return await ed.client.workspace_symbol_async(types.WorkspaceSymbolParams(query=query))

        (polygon,) = [s for s in await symbols("Polygon") if s.name == "Polygon"]
        assert polygon.kind == types.SymbolKind.Class
        assert not polygon.container_name
        assert uri_path(polygon.location.uri) == shapes.resolve()
        assert polygon.location.range.start == types.Position(
            line=line_of(SHAPES, "class Polygon(Shape):"), character=0
        )
        # Whole lines: the range ends at the start of the line after the class.
        last = line_of(SHAPES, "        return sum(self.sides)")
        assert polygon.location.range.end == types.Position(line=last + 1, character=0)

        (area,) = await symbols("area")
        assert (area.name, area.container_name, area.kind) == (
            "area",
            "Polygon",
            types.SymbolKind.Method,
        )
        assert area.location.range.start.line == line_of(SHAPES, "    def area(self):", 1)
        (perimeter,) = await symbols("Polygon.perim")  # a qualified query
        assert perimeter.name == "perimeter" and perimeter.container_name == "Polygon"

        # Matched the way symbol pickers match: a subsequence, any case.
        (make,) = [s for s in await symbols("mkUnitTri") if s.name == "make_unit_triangle"]
        assert make.kind == types.SymbolKind.Function
        assert not make.container_name
        assert make.location.range.start.line == line_of(SHAPES, "def make_unit_triangle():")

        assert await symbols("zzzz_nothing_like_it") == []
        assert {s.name for s in await symbols("")} >= {"Shape", "Polygon", "make_unit_triangle"}


# ------------------------------------------------------------------ progress
@pytest.mark.parametrize("client", CLIENTS)
async def test_indexing_reports_progress_to_clients_that_show_it(tmp_path: Path, client: str):
    repo = make_repo(tmp_path / "repo")
    async with lsp_session([repo], capabilities=client, options=LEXICAL) as ed:
        await ed.wait_indexed()

        def indexing_ended() -> list[list[Any]]:
            return [
                reports
                for reports in ed.client.progress_reports.values()
                if reports
                and getattr(reports[0], "title", "") == "tachy: indexing"
                and reports[-1].kind == "end"
            ]

        (reports,) = await ed.wait_for(indexing_ended)
        assert reports[0].kind == "begin"
        assert reports[-1].kind == "end"
        assert all(r.kind == "report" for r in reports[1:-1])


async def test_no_progress_for_a_client_that_cannot_show_it(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    async with lsp_session([repo], capabilities=types.ClientCapabilities(), options=LEXICAL) as ed:
        await ed.wait_indexed()
        await settle(ed, repo)
        assert ed.client.progress_reports == {}
