"""The server's settings as the editor gives them: `initializationOptions` at
initialize, `workspace/configuration` pulled once the client is initialized, and
`workspace/didChangeConfiguration` after. Also `ready`: set once `initialized` has
pulled the configuration and added the folders, so requests that need either wait for
it (an editor sends them right away)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types

from server import config
from server.connection import EditorConnection

log = logging.getLogger(__name__)

CLIENT_REPLY_S = 10.0  # how long setup waits for the client to answer a request of ours


class Configuration:
    def __init__(self, editor: EditorConnection) -> None:
        self.editor = editor
        self.settings = config.defaults()
        self.ready = asyncio.Event()

    def on_initialize(self, params: types.InitializeParams) -> None:
        self.apply(params.initialization_options)

    async def on_initialized(self) -> None:
        await self.pull()

    async def on_configuration_changed(self, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and config.SECTION in settings:
            self.apply(settings[config.SECTION])
        else:
            await self.pull()

    def apply(self, raw: Any) -> None:
        if isinstance(raw, dict) and isinstance(raw.get(config.SECTION), dict):
            raw = raw[config.SECTION]  # {"tachy": {...}} as well as {...}
        self.settings, problems = config.merge(self.settings, raw)
        for problem in problems:
            self.editor.show(f"tachy: {problem}", types.MessageType.Warning)

    async def pull(self) -> None:
        """Ask the client for the tachy section (when it can answer)."""
        workspace = self.editor.capabilities.workspace
        if not (workspace and workspace.configuration):
            return
        try:
            values = await asyncio.wait_for(
                self.editor.configuration(config.SECTION), CLIENT_REPLY_S
            )
        except Exception as exc:
            log.warning("workspace/configuration failed: %s", exc)
            return
        if values and values[0] is not None:
            self.apply(values[0])
