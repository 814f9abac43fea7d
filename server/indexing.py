"""One workspace folder's index, kept current on a background thread.

The event loop only records what changed (a didChange's unsaved text, a save, a file
the editor saw change on disk) and returns; a thread per folder opens the CodeIndex,
runs the first full scan, then applies changes in small debounced batches, and the
embedding thread of CodeIndex catches up behind it. Searches run on tool threads
against the index as it stands, so a search never waits for indexing.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from index.errors import CodeIndexError, IndexBusyError
from index.ignore import IGNORE_FILES
from index.scan import UNNAMABLE
from server import protocol as p
from server.config import IndexSettings
from server.documents import path_to_uri

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.02  # changes arriving this close together are indexed as one batch
BUSY_RETRY_S = 1.0  # another process (a `tachy index` in a terminal) holds the writer lock

Progress = Callable[[str, int, int], None]  # (message, done, total)


class FolderIndex:
    def __init__(
        self,
        root: Path,
        settings: IndexSettings,
        *,
        on_progress: Callable[[FolderIndex, str, int, int], None] | None = None,
        on_done: Callable[[FolderIndex], None] | None = None,
    ) -> None:
        self.root = root
        self.uri = path_to_uri(root)
        self.settings = settings
        self.state = "starting"
        self.error = ""
        self.index = None  # CodeIndex, once opened
        self._on_progress = on_progress
        self._on_done = on_done
        self._changes: dict[str, bytes | None] = {}  # path -> unsaved text, None: disk
        self._full_scan = True
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._opened = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"tachy-index:{root.name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def disable(self, reason: str) -> None:
        """No index for this folder: searches fail at once with `reason` (instead of
        waiting for an index that never opens)."""
        self.state, self.error = "disabled", reason
        self._opened.set()

    # ------------------------------------------------- called from the event loop
    def changed(self, rel: str, text: bytes | None) -> None:
        """`rel` changed: `text` is its unsaved content, None to read it from disk. A
        saved ignore file may hide or show any file below it: the whole folder is
        looked at again (which also purges what it now hides)."""
        with self._cond:
            self._changes[rel] = text
            if text is None and rel.rsplit("/", 1)[-1] in IGNORE_FILES:
                self._full_scan = True
            self._cond.notify()

    def rescan(self) -> None:
        """Look at the whole folder again (many files changed, a branch switch)."""
        with self._cond:
            self._full_scan = True
            self._cond.notify()

    # ---------------------------------------------------- called from threads
    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every recorded change is indexed (tests, benchmarks)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: (
                    self._closed or (not self._changes and not self._full_scan and not self._busy)
                ),
                timeout,
            )

    def opened(self, timeout: float = 30.0):
        """The CodeIndex, once open; raises CodeIndexError when it cannot be."""
        self._opened.wait(timeout)
        if self.index is None:
            raise CodeIndexError(self.error or "the index is still opening; try again")
        return self.index

    def search(self, query: str, *, limit: int, paths: Sequence[str] | None, mode: str) -> list:
        return self.opened().search(query, limit=limit, paths=paths, mode=mode)

    def status(self) -> p.FolderStatus:
        if self.index is None or self.state in ("starting", "failed"):
            return p.FolderStatus(self.uri, self.state, 0, 0, 0, self.error)
        status = self.index.status()
        state = "indexing" if self.state == "indexing" else status.state
        return p.FolderStatus(
            self.uri, state, status.files, status.chunks, status.embedded, self.error
        )

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self.index is not None:
            with contextlib.suppress(Exception):
                self.index.close()
            self.index = None

    # ------------------------------------------------------------ the thread
    def _run(self) -> None:
        from index.indexer import CodeIndex  # numpy, tree-sitter: off the startup path

        try:
            self.index = CodeIndex(
                self.root,
                cache_dir=self.settings.cache_dir,
                dense=self.settings.dense,
                embedder=self.settings.embedder if self.settings.dense else None,
                lock_timeout_s=5,
            )
        except CodeIndexError as exc:
            self.state, self.error = "failed", str(exc)
            log.error("cannot open the index of %s: %s", self.root, exc)
            return
        finally:
            self._opened.set()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._changes or self._full_scan)
                if self._closed:
                    return
                if not self._full_scan:
                    # Let a burst of keystrokes settle into one batch.
                    self._cond.wait(DEBOUNCE_S)
                full, self._full_scan = self._full_scan, False
                changes, self._changes = self._changes, {}
                self._busy = True
            try:
                self._index_once(full, changes)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _index_once(self, full: bool, changes: dict[str, bytes | None]) -> None:
        index = self.index
        assert index is not None
        try:
            if full:
                self.state = "indexing"
                for rel, text in changes.items():
                    index.set_overlay(rel, text)
                stats = index.update(progress=self._report)
                self.state = "ready"
                log.info(
                    "indexed %s: %d files, %d chunks in %.1f s",
                    self.root, stats.files, stats.chunks, stats.seconds,
                )  # fmt: skip
                if stats.skipped.get(UNNAMABLE):
                    log.warning(
                        "%s: %d files left out of the index: their %s",
                        self.root, stats.skipped[UNNAMABLE], UNNAMABLE,
                    )  # fmt: skip
                if self._on_done is not None:
                    self._on_done(self)
            elif changes:
                index.update_texts(changes)
        except IndexBusyError:
            with self._cond:  # try again shortly, keeping newer changes
                self._full_scan = self._full_scan or full
                self._changes = {**changes, **self._changes}
                self._cond.wait(BUSY_RETRY_S)
        except Exception as exc:  # the index must never take the server down
            log.exception("indexing %s failed", self.root)
            self.error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, sqlite3.DatabaseError):
                # The database broke in use: the next open (a restart, `tachy index`)
                # rebuilds it, as the CLI's commands arrange too.
                index.mark_damaged(exc)
                self.error += "; the index will be rebuilt when it is next opened"
            if full:
                self.state = "failed"

    def _report(self, phase: str, done: int, total: int) -> None:
        if self._on_progress is not None:
            self._on_progress(self, phase, done, total)


class AgentIndex:
    """codebase_search for an agent run in the editor: like `tachy agent`'s FreshIndex,
    the index is brought up to date (changed files only) before each search, since the
    agent's commands change files without telling the editor."""

    def __init__(self, folder: FolderIndex) -> None:
        self.folder = folder

    def search(self, query: str, *, paths: Sequence[str] | None = None, limit: int = 10):
        index = self.folder.opened()
        with contextlib.suppress(IndexBusyError):  # another writer: search what is there
            index.update()
        return index.search(query, paths=paths, limit=limit)
