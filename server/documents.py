"""Open documents: the overlay of unsaved editor text over the files on disk.

pygls applies didOpen/didChange/didClose to its own TextDocuments on the event loop;
after each, the server stores an immutable Snapshot here, keyed by the file's real
path. The agent's tools read snapshots from worker threads, so a reader always sees
one whole version of a document, never half of a change.

DocumentSync is the feature: didOpen/didChange/didSave/didClose mirror pygls'
document into the overlay and tell the folder's index what changed.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

if TYPE_CHECKING:
    from server.folders import Folders


@dataclass(frozen=True)
class Snapshot:
    uri: str
    path: Path
    version: int
    text: str

    @property
    def data(self) -> bytes:
        return self.text.encode("utf-8", "surrogatepass")


def text_hash(text: str | bytes) -> str:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def uri_to_path(uri: str) -> Path | None:
    """The real path of a file: URI; None for other schemes (untitled:, git:, ...)."""
    if not uri.startswith("file:"):
        return None
    fs = to_fs_path(uri)
    if not fs:
        return None
    return Path(os.path.realpath(fs))


def path_to_uri(path: Path | str) -> str:
    return from_fs_path(str(path)) or Path(path).as_uri()


class Documents:
    def __init__(self) -> None:
        self._by_path: dict[Path, Snapshot] = {}
        self._lock = threading.Lock()

    def put(self, uri: str, version: int, text: str) -> Snapshot | None:
        path = uri_to_path(uri)
        if path is None:
            return None
        snap = Snapshot(uri, path, version, text)
        with self._lock:
            self._by_path[path] = snap
        return snap

    def remove(self, uri: str) -> Snapshot | None:
        path = uri_to_path(uri)
        if path is None:
            return None
        with self._lock:
            return self._by_path.pop(path, None)

    def get(self, path: Path) -> Snapshot | None:
        """The open document at `path` (a real path), if any."""
        with self._lock:
            return self._by_path.get(path)

    def get_uri(self, uri: str) -> Snapshot | None:
        path = uri_to_path(uri)
        return self.get(path) if path is not None else None

    def under(self, root: Path) -> list[Snapshot]:
        """Open documents inside `root`."""
        with self._lock:
            return [s for p, s in self._by_path.items() if root in p.parents]


class DocumentSync:
    def __init__(
        self, documents: Documents, folders: Folders, text_document: Callable[[str], Any]
    ) -> None:
        self.documents = documents
        self.folders = folders
        self.text_document = text_document  # pygls' TextDocument of a uri

    def on_opened(self, params: types.DidOpenTextDocumentParams) -> None:
        self.folders.on_document_opened(params.text_document.uri)
        self._sync(params.text_document.uri)

    def on_changed(self, params: types.DidChangeTextDocumentParams) -> None:
        self._sync(params.text_document.uri)

    def on_saved(self, params: types.DidSaveTextDocumentParams) -> None:
        self._sync(params.text_document.uri)

    def on_closed(self, params: types.DidCloseTextDocumentParams) -> None:
        self._sync(params.text_document.uri, closed=True)

    def _sync(self, uri: str, closed: bool = False) -> None:
        """Mirror pygls' document into the overlay and tell the folder's index."""
        if closed:
            snap = self.documents.remove(uri)
            path = snap.path if snap else uri_to_path(uri)
            text = None
        else:
            doc = self.text_document(uri)
            snap = self.documents.put(uri, doc.version or 0, doc.source)
            path = snap.path if snap else None
            text = snap.data if snap else None
        if path is None:
            return
        where = self.folders.relative(path)
        if where is not None:
            folder, rel = where
            folder.changed(rel, text)
