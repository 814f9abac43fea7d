"""Diagnostics the editor forwards from its other language servers (`tachy/diagnostics`),
so the agent's read_lints sees what the user sees: type errors, compiler errors.

They are stored by real path, converted to the agent's Diagnostic shape (1-based
lines and columns, as ruff reports them), and replaced wholesale by each new
notification for a file, as publishDiagnostics does.

DiagnosticsFeature is the feature: the `tachy/diagnostics` notification (a
notification has no answer to carry an error, so bad params are shown instead).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types

from agent.lints import Diagnostic
from server import protocol as p
from server.documents import uri_to_path

log = logging.getLogger(__name__)

MAX_PER_FILE = 1000


class ForwardedDiagnostics:
    def __init__(self) -> None:
        self._by_path: dict[Path, list[p.LspDiagnostic]] = {}
        self._lock = threading.Lock()

    def replace(self, uri: str, diagnostics: list[p.LspDiagnostic]) -> bool:
        """Store the diagnostics of one file; False when the uri is not a file."""
        path = uri_to_path(uri)
        if path is None:
            return False
        with self._lock:
            if diagnostics:
                self._by_path[path] = diagnostics[:MAX_PER_FILE]
            else:
                self._by_path.pop(path, None)
        return True

    def lookup(self, root: Path) -> Callable[[str], list[Diagnostic]]:
        """LintRunner.external for a workspace rooted at `root`."""

        def external(rel: str) -> list[Diagnostic]:
            with self._lock:
                found = self._by_path.get(root / rel, [])
            return [to_agent(rel, d) for d in found]

        return external


class DiagnosticsFeature:
    def __init__(
        self, store: ForwardedDiagnostics, show: Callable[[str, types.MessageType], None]
    ) -> None:
        self.store = store
        self.show = show

    def on_diagnostics(self, args: p.DiagnosticsParams) -> None:
        if not self.store.replace(args.uri, args.diagnostics):
            log.info("diagnostics for %s ignored: not a file", args.uri)

    def on_invalid_params(self, exc: p.ParamsError) -> None:
        self.show(
            f"tachy: ignored a {p.DIAGNOSTICS} notification with {exc}",
            types.MessageType.Warning,
        )


def to_agent(rel: str, d: p.LspDiagnostic) -> Diagnostic:
    code = "" if d.code is None else str(d.code)
    source = d.source or "editor"
    message = " ".join(d.message.split())  # one line each, as read_lints prints them
    return Diagnostic(
        rel,
        d.range.start.line + 1,
        d.range.start.character + 1,
        code or source,
        message,
        source=source,
    )
