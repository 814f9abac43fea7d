"""Searching the workspace's indexes: `tachy/search` (hybrid, lexical or dense search
across every folder), `tachy/index/status` (how far each folder's index has got) and
the standard `workspace/symbol`. The lookups run on the tool thread pool, against each
index as it stands, so a search never waits for indexing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from agent.tools.base import run_blocking
from index.errors import CodeIndexError
from server import protocol as p
from server.configuration import Configuration
from server.documents import path_to_uri
from server.errors import failed
from server.folders import Folders

log = logging.getLogger(__name__)

SYMBOL_LIMIT = 200
SYMBOL_KINDS = {
    "class": types.SymbolKind.Class,
    "function": types.SymbolKind.Function,
    "method": types.SymbolKind.Method,
    "module": types.SymbolKind.Module,
    "interface": types.SymbolKind.Interface,
    "struct": types.SymbolKind.Struct,
    "enum": types.SymbolKind.Enum,
    "type": types.SymbolKind.TypeParameter,
    "trait": types.SymbolKind.Interface,
    "impl": types.SymbolKind.Class,
    "namespace": types.SymbolKind.Namespace,
    "constant": types.SymbolKind.Constant,
    "variable": types.SymbolKind.Variable,
}
# The least ready state first: a workspace is as ready as its least ready folder.
STATE_ORDER = ["failed", "starting", "indexing", "empty", "lexical", "ready", "disabled"]


class Search:
    def __init__(self, configuration: Configuration, folders: Folders) -> None:
        self.configuration = configuration
        self.folders = folders

    async def on_search(self, args: p.SearchParams) -> p.SearchResult:
        await self.configuration.ready.wait()
        if not 1 <= args.limit <= 200:
            raise JsonRpcInvalidParams("limit must be between 1 and 200")
        folders = list(self.folders)
        if not folders:
            raise failed("there is no workspace folder to search")

        def search_all() -> list[p.SearchItem]:
            items = []
            for folder in folders:
                try:
                    hits = folder.search(
                        args.query, limit=args.limit, paths=args.paths, mode=args.mode
                    )
                except CodeIndexError as exc:
                    if len(folders) == 1:
                        raise
                    log.warning("search in %s failed: %s", folder.root, exc)
                    continue
                items += [_search_item(folder.root, hit) for hit in hits]
            items.sort(key=lambda item: -item.score)
            return items[: args.limit]

        try:
            results = await run_blocking(search_all)
        except CodeIndexError as exc:
            raise failed(str(exc)) from None
        return p.SearchResult(results=results)

    async def on_index_status(self) -> p.IndexStatusResult:
        await self.configuration.ready.wait()
        folders = list(self.folders)
        statuses = await run_blocking(lambda: [f.status() for f in folders])
        state = min((s.state for s in statuses), key=STATE_ORDER.index, default="empty")
        return p.IndexStatusResult(
            state=state,
            files=sum(s.files for s in statuses),
            chunks=sum(s.chunks for s in statuses),
            embedded=sum(s.embedded for s in statuses),
            folders=statuses,
        )

    async def on_workspace_symbol(
        self, params: types.WorkspaceSymbolParams
    ) -> list[types.WorkspaceSymbol]:
        await self.configuration.ready.wait()
        folders = list(self.folders)

        def lookup() -> list[types.WorkspaceSymbol]:
            found = []
            for folder in folders:
                try:
                    index = folder.opened()  # an index still opening is waited for
                except CodeIndexError:
                    continue  # disabled or failed: tachy/index/status says why
                for hit in index.symbols(params.query, limit=SYMBOL_LIMIT):
                    found.append(_workspace_symbol(folder.root, hit))
            return found[:SYMBOL_LIMIT]

        return await run_blocking(lookup)


def _lines_range(start_line: int, end_line: int) -> p.Range:
    """Whole lines start..end (1-based, inclusive) as an LSP range."""
    return p.Range(start=p.Position(start_line - 1, 0), end=p.Position(end_line, 0))


def _search_item(root: Path, hit: Any) -> p.SearchItem:
    return p.SearchItem(
        uri=path_to_uri(root / hit.path),
        range=_lines_range(hit.start_line, hit.end_line),
        score=hit.score,
        snippet=hit.snippet,
        symbol=hit.symbol,
    )


def _workspace_symbol(root: Path, hit: Any) -> types.WorkspaceSymbol:
    r = _lines_range(hit.start_line, hit.end_line)
    return types.WorkspaceSymbol(
        name=hit.name,
        kind=SYMBOL_KINDS.get(hit.kind, types.SymbolKind.Object),
        container_name=hit.container or None,
        location=types.Location(
            uri=path_to_uri(root / hit.path),
            range=types.Range(
                start=types.Position(r.start.line, 0), end=types.Position(r.end.line, 0)
            ),
        ),
    )
