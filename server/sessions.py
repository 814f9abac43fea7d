"""Agent sessions in the editor: each run is an asyncio task around the shared
Executor, with the same tools and renderer as `tachy agent` and the trainer. Only the
plug-ins differ: an EditorWorkspace (unsaved text, reviewed edits), the editor's
forwarded diagnostics, and the folder's live index.

Every transcript event is sent as a `tachy/agent/event` notification the moment the
executor emits it. A run that fails in any way ends with a `final` event and an
answer; it never takes the server (or the other sessions) down.

AgentRuns is the feature: `tachy/agent/run` and `tachy/agent/cancel`, in the workspace
folder a run names (or the first), with the current settings.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams

from agent import events as ev
from agent.executor import Executor
from agent.lints import LintRunner
from agent.policy import Policy, PolicyError, load_policy
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ToolContext
from server import protocol as p
from server.config import Settings
from server.configuration import Configuration
from server.diagnostics import ForwardedDiagnostics
from server.documents import Documents, uri_to_path
from server.errors import failed
from server.folders import Folders
from server.indexing import AgentIndex, FolderIndex
from server.review import EditorWorkspace, ReviewBoard

log = logging.getLogger(__name__)


class SessionError(Exception):
    """A run that cannot start (bad policy, unknown folder, a duplicate session id)."""


@dataclass
class Session:
    id: str
    folder: Path
    state: str = "starting"  # running | cancelling | finished
    executor: Executor | None = None
    task: asyncio.Task | None = None
    seq: itertools.count = field(default_factory=itertools.count)


class Sessions:
    def __init__(
        self,
        *,
        notify: Callable[[str, Any], None],
        documents: Documents,
        diagnostics: ForwardedDiagnostics,
        board: Callable[[], ReviewBoard],
        folder_index: Callable[[Path], FolderIndex | None],
        progress: Callable[..., Awaitable[Callable[[str | None, bool], None]]],
    ) -> None:
        self.notify = notify
        self.documents = documents
        self.diagnostics = diagnostics
        self.board = board
        self.folder_index = folder_index
        self.progress = progress
        self.sessions: dict[str, Session] = {}
        # In-process models (local:) by spec, shared by every run: loading one takes
        # seconds, and its engine keeps each conversation's prefix cached between turns
        # and decodes concurrent runs together. Closed at shutdown.
        self.shared_policies: dict[str, Policy] = {}

    def _policy(self, spec: str | None, folder: Path) -> Policy:
        if not spec:
            raise SessionError(
                "no model configured: set tachy.policy (openai:BASE_URL#MODEL for any "
                "OpenAI-compatible server, or replay:FILE.jsonl) in the editor's settings "
                "or initializationOptions"
            )
        kind, _, rest = spec.partition(":")
        if kind == "replay" and rest and not os.path.isabs(rest):
            spec = f"replay:{folder / rest}"  # relative to the workspace folder
        if spec in self.shared_policies:
            return self.shared_policies[spec]
        try:
            policy = load_policy(spec)
        except PolicyError as exc:
            raise SessionError(str(exc)) from None
        if kind == "local":
            self.shared_policies[spec] = policy
        return policy

    def new_id(self, wanted: str | None) -> str:
        """A session id: the client's choice, which must not name a live run."""
        session_id = wanted or uuid.uuid4().hex[:12]
        existing = self.sessions.get(session_id)
        if existing is not None and existing.state != "finished":
            raise SessionError(f"session {session_id!r} is still running")
        return session_id

    async def run(
        self, params: p.AgentRunParams, settings: Settings, folder: Path
    ) -> p.AgentRunResult:
        session_id = self.new_id(params.session_id)
        if not params.prompt.strip():
            raise SessionError("the prompt is empty")
        max_turns = params.max_turns if params.max_turns is not None else settings.max_turns
        if max_turns < 1:
            raise SessionError("maxTurns must be at least 1")
        policy = self._policy(params.policy or settings.policy, folder)
        session = Session(session_id, folder)
        self.sessions[session_id] = session
        try:
            return await self._run(session, params, settings, policy, max_turns)
        finally:
            session.state = "finished"
            # A finished session keeps its id and state only: its events went to the
            # editor, and its proposals hold the workspace a later revert needs.
            session.executor = None
            if policy not in self.shared_policies.values():
                await policy.aclose()

    async def _run(
        self,
        session: Session,
        params: p.AgentRunParams,
        settings: Settings,
        policy: Policy,
        max_turns: int,
    ) -> p.AgentRunResult:
        workspace = EditorWorkspace(
            session.folder,
            documents=self.documents,
            board=self.board(),
            session_id=session.id,
            allow_secrets=settings.allow_secrets,
        )
        use_bwrap = {"auto": None, "bubblewrap": True, "none": False}[settings.sandbox]
        try:
            sandbox = Sandbox(workspace, SandboxConfig(use_bubblewrap=use_bwrap))
        except RuntimeError as exc:
            raise SessionError(str(exc)) from None
        linters = LintRunner(workspace, sandbox=sandbox)
        linters.external = self.diagnostics.lookup(workspace.root)
        folder_index = self.folder_index(session.folder)
        ctx = ToolContext(
            workspace=workspace,
            sandbox=sandbox,
            linters=linters,
            index=AgentIndex(folder_index) if folder_index is not None else None,
        )
        report = await self.progress(params.work_done_token, "tachy agent", _short(params.prompt))

        def on_event(event: ev.Event) -> None:
            self.notify(
                p.AGENT_EVENT,
                p.encode(
                    p.AgentEventParams(
                        session_id=session.id, seq=next(session.seq), event=ev.to_dict(event)
                    )
                ),
            )
            if isinstance(event, ev.ToolCall):
                report(f"{event.tool} {_short(_first_arg(event.args), 50)}", False)

        executor = Executor(ctx, policy, max_turns=max_turns, on_event=on_event)
        session.executor = executor
        session.task = asyncio.current_task()
        if session.state == "cancelling":
            # tachy/agent/cancel arrived while the run was being set up (the progress
            # token is a round trip to the editor): it must still stop the run.
            executor.cancel()
        else:
            session.state = "running"
        try:
            result = await executor.run(params.prompt)
        except asyncio.CancelledError:
            # The request itself was cancelled ($/cancelRequest) or the server is
            # shutting down: the executor has already killed its commands.
            self.board().cancel_session(session.id)
            raise
        except Exception as exc:
            log.exception("session %s failed", session.id)
            return p.AgentRunResult(
                session_id=session.id,
                stop_reason="error",
                error=f"internal error: {type(exc).__name__}: {exc}",
            )
        finally:
            report(None, True)
        return p.AgentRunResult(
            session_id=session.id,
            stop_reason=result.stop_reason,
            final_text=result.final_text,
            error=result.error or "",
            changed_files=workspace.changed_files(),
        )

    def cancel(self, session_id: str) -> p.AgentCancelResult:
        session = self.sessions.get(session_id)
        if session is None:
            return p.AgentCancelResult(
                cancelled=False, state="unknown", message=f"there is no session {session_id!r}"
            )
        if session.state in ("cancelling", "finished"):
            return p.AgentCancelResult(
                cancelled=False,
                state=session.state,
                message=f"session {session_id!r} is already {session.state}",
            )
        session.state = "cancelling"
        if session.executor is not None:
            session.executor.cancel()
        self.board().cancel_session(session_id)
        return p.AgentCancelResult(cancelled=True, state="cancelling")

    async def cancel_all(self) -> None:
        """Stop every run (shutdown, lost client): generation stops, commands die."""
        tasks = []
        for session in self.sessions.values():
            if session.state in ("running", "cancelling", "starting"):
                self.cancel(session.id)
                if session.task is not None:
                    tasks.append(session.task)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        shared, self.shared_policies = list(self.shared_policies.values()), {}
        for policy in shared:
            await policy.aclose()


class AgentRuns:
    def __init__(self, configuration: Configuration, folders: Folders, sessions: Sessions) -> None:
        self.configuration = configuration
        self.folders = folders
        self.sessions = sessions

    async def on_agent_run(self, args: p.AgentRunParams) -> p.AgentRunResult:
        await self.configuration.ready.wait()
        folder = self.run_folder(args.workspace_folder)
        try:
            return await self.sessions.run(args, self.configuration.settings, folder)
        except SessionError as exc:
            raise failed(str(exc)) from None

    async def on_agent_cancel(self, args: p.AgentCancelParams) -> p.AgentCancelResult:
        await self.configuration.ready.wait()  # stays ordered after a run sent just before it
        return self.sessions.cancel(args.session_id)

    async def on_shutdown(self) -> None:
        await self.sessions.cancel_all()

    def run_folder(self, uri: str | None, near: str | None = None) -> Path:
        """The folder a run works in: the one named, else the one holding `near`, else
        the first."""
        if uri is not None:
            path = uri_to_path(uri)
            if path is None or self.folders.get(path) is None:
                raise JsonRpcInvalidParams(f"{uri} is not a workspace folder")
            return path
        if near is not None:
            path = uri_to_path(near)
            folder = self.folders.folder_for(path) if path else None
            if folder is not None:
                return folder.root
        first = self.folders.first()
        if first is None:
            raise failed("there is no workspace folder to work in")
        return first


def _first_arg(args: dict[str, Any]) -> str:
    for value in args.values():
        return str(value)
    return ""


def _short(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
