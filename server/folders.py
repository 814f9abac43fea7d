"""The workspace folders and their indexes: folders added and removed as the editor
says (initialize, didChangeWorkspaceFolders, or a lone file's directory), files the
editor saw change on disk (didChangeWatchedFiles, registered at `initialized`), and
each folder's indexing shown as $/progress. One FolderIndex per folder does the work
on its own thread (server/indexing.py)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from lsprotocol import types

from agent.tools.base import run_blocking
from server.configuration import CLIENT_REPLY_S, Configuration
from server.connection import EditorConnection, Report
from server.documents import Documents, path_to_uri, uri_to_path
from server.indexing import FolderIndex

log = logging.getLogger(__name__)


class Folders:
    def __init__(
        self, editor: EditorConnection, configuration: Configuration, documents: Documents
    ) -> None:
        self.editor = editor
        self.configuration = configuration
        self.documents = documents
        self.by_root: dict[Path, FolderIndex] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._initial: list[str] = []
        # The client named no folder: the first file opened gives one (its directory).
        self._from_document = False
        self._progress: dict[Path, Report] = {}

    # ------------------------------------------------------------- lookups
    def __iter__(self) -> Iterator[FolderIndex]:
        return iter(list(self.by_root.values()))

    def __bool__(self) -> bool:
        return bool(self.by_root)

    def get(self, root: Path) -> FolderIndex | None:
        return self.by_root.get(root)

    def first(self) -> Path | None:
        return next(iter(self.by_root), None)

    def folder_for(self, path: Path) -> FolderIndex | None:
        """The innermost folder holding `path`."""
        best = None
        for root, folder in self.by_root.items():
            if (path == root or root in path.parents) and (
                best is None or len(root.parts) > len(best.root.parts)
            ):
                best = folder
        return best

    def relative(self, path: Path) -> tuple[FolderIndex, str] | None:
        folder = self.folder_for(path)
        if folder is None or path == folder.root:
            return None
        return folder, path.relative_to(folder.root).as_posix()

    # -------------------------------------------------------------- events
    def on_initialize(self, params: types.InitializeParams) -> None:
        self.loop = asyncio.get_running_loop()
        folders = params.workspace_folders or []
        uris = [f.uri for f in folders]
        if not uris and params.root_uri:
            uris = [params.root_uri]
        elif not uris and params.root_path:
            uris = [path_to_uri(params.root_path)]
        self._initial = uris
        self._from_document = not uris

    async def on_initialized(self) -> None:
        await self._watch_files()
        for uri in self._initial:
            self.add(uri)

    def on_folders_changed(self, params: types.DidChangeWorkspaceFoldersParams) -> None:
        for folder in params.event.removed:
            self.remove(folder.uri)
        for folder in params.event.added:
            self.add(folder.uri)

    def on_document_opened(self, uri: str) -> None:
        """No rootUri and no workspaceFolders (a file opened outside any project): the
        directory of the first file opened is the workspace folder, LSP's single-file
        convention. Never the home directory or /, which would index everything."""
        if not self._from_document:
            return
        path = uri_to_path(uri)
        if path is None:
            return  # untitled: and the like; the next file decides
        self._from_document = False
        directory = path.parent
        if directory in (Path(os.path.expanduser("~")).resolve(), Path("/")):
            self.editor.show(
                f"tachy: {path.name} is not in a workspace folder and tachy does not index "
                f"{directory}; open a folder to search it"
            )
            return
        if self.configuration.ready.is_set():
            self.add(path_to_uri(directory))
        else:  # `initialized` adds it with the others, after reading the settings
            self._initial.append(path_to_uri(directory))

    def on_watched_files_changed(self, params: types.DidChangeWatchedFilesParams) -> None:
        for change in params.changes:
            path = uri_to_path(change.uri)
            if path is None or self.documents.get(path) is not None:
                continue  # an open document's unsaved text wins over the disk
            where = self.relative(path)
            if where is None:
                continue
            folder, rel = where
            if change.type == types.FileChangeType.Created and path.is_dir():
                folder.rescan()
            else:
                folder.changed(rel, None)

    async def on_shutdown(self) -> None:
        folders, self.by_root = list(self.by_root.values()), {}
        for folder in folders:
            await run_blocking(folder.close)

    def close_all(self) -> None:
        """Close the indexes cleanly once the loop is gone."""
        for folder in list(self.by_root.values()):
            folder.close()

    # ---------------------------------------------------------- add, remove
    def add(self, uri: str) -> None:
        path = uri_to_path(uri)
        if path is None or not path.is_dir():
            self.editor.show(
                f"tachy: workspace folder {uri} is not a local directory; it is not indexed"
            )
            return
        if path in self.by_root:
            return
        settings = self.configuration.settings.index
        folder = FolderIndex(
            path,
            settings,
            on_progress=self._progress_from_thread,
            on_done=self._done_from_thread,
        )
        self.by_root[path] = folder
        for snap in self.documents.under(path):  # opened before the folder was added
            folder.changed(snap.path.relative_to(path).as_posix(), snap.data)
        if settings.enabled:
            folder.start()
            if self.loop is not None:
                self.editor.spawn(self._start_progress(folder))
        else:
            folder.disable("indexing is turned off (tachy.index.enabled)")

    def remove(self, uri: str) -> None:
        path = uri_to_path(uri)
        folder = self.by_root.pop(path, None) if path else None
        if folder is not None:
            self._end_progress(folder.root)
            asyncio.get_running_loop().run_in_executor(None, folder.close)

    async def _watch_files(self) -> None:
        workspace = self.editor.capabilities.workspace
        watched = workspace and workspace.did_change_watched_files
        if not (watched and watched.dynamic_registration):
            return
        options = types.DidChangeWatchedFilesRegistrationOptions(
            watchers=[types.FileSystemWatcher(glob_pattern="**/*")]
        )
        registration = types.Registration(
            id="tachy-watch",
            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=options,
        )
        try:
            await asyncio.wait_for(self.editor.register(registration), CLIENT_REPLY_S)
        except Exception as exc:
            log.warning("could not register file watching: %s", exc)

    # ----------------------------------------------------------- progress
    async def _start_progress(self, folder: FolderIndex) -> None:
        report = await self.editor.begin_progress(None, "tachy: indexing", folder.root.name)
        if folder.state in ("ready", "failed"):
            report(None, True)
        else:
            self._progress[folder.root] = report

    def _end_progress(self, root: Path) -> None:
        report = self._progress.pop(root, None)
        if report is not None:
            report(None, True)

    def _progress_from_thread(self, folder: FolderIndex, phase: str, done: int, total: int) -> None:
        def send() -> None:
            report = self._progress.get(folder.root)
            if report is not None:
                report(f"{folder.root.name}: {phase} {done}/{total}", False)

        if self.loop is not None:
            self.loop.call_soon_threadsafe(send)

    def _done_from_thread(self, folder: FolderIndex) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._end_progress, folder.root)
