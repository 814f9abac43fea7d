"""`tachy acp`: tachy as an Agent Client Protocol agent on stdio.

Zed, JetBrains IDEs, Neovim (CodeCompanion, avante) and Emacs drive agents over ACP.
This is the same agent the language server and `tachy agent` run (the executor, the
tools, their rendered results); only the plug-ins differ:

- a ClientWorkspace: reads come through the client's `fs/read_text_file` when it
  offers it (so the model sees unsaved buffers, as the LSP overlay gives them), and
  every write asks `session/request_permission` first (allow once, always, reject),
  then lands on disk (with a checkpoint, as everywhere) and in the client's buffer
  through `fs/write_text_file`;
- the sandbox's gate: each command the model runs asks permission the same way;
- events become `session/update`s: the model's prose as message chunks (its call
  syntax is not shown), each tool call as a tool call with its result (edits as diffs,
  commands with their output), todos as the plan.

A session keeps its conversation, so the next prompt continues it; its updates are
kept (in memory and in the workspace's `.tachy/acp/`) so `session/load` replays them,
also to a client that restarted the agent. `session/cancel` stops generation and
kills running commands. Settings: the policy from `--policy`, TACHY_POLICY or the
user's config file (server.config.user_settings: policy, approval, sandbox,
allowSecrets, maxTurns, as the language server takes them), and per session the
config options `approval` (ask | auto) and `sandbox` (auto | bubblewrap | none),
whose defaults come from that file.

Built on the protocol's Python SDK (`agent-client-protocol`), whose asyncio
connection fits the executor's own event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import acp
import msgspec
from acp import schema as s

from agent import events as ev
from agent.chat_tools import ToolCallOutput
from agent.executor import CURRENT_CALL, Executor
from agent.lints import LintRunner
from agent.policy import DEFAULT_POLICY, Message, Policy, PolicyError, load_policy
from agent.render import valid_text
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ToolContext
from agent.tools.base import ToolError
from agent.workspace import Workspace, WorkspaceError
from index import statedir
from server.config import Settings, user_settings

log = logging.getLogger("tachy.acp")

SESSIONS_DIR = "acp"  # under the workspace's .tachy/
KINDS = {
    "read_file": "read", "list_dir": "read", "read_lints": "read",
    "file_search": "search", "grep": "search", "codebase_search": "search",
    "edit_file": "edit", "write_file": "edit", "delete_file": "delete",
    "run_terminal_cmd": "execute", "todo_write": "think",
}  # fmt: skip
STOP_REASONS = {"end_turn": "end_turn", "max_turns": "max_turn_requests", "cancelled": "cancelled"}
ALLOW, ALWAYS, REJECT = "allow", "always", "reject"
PERMISSION_OPTIONS = [
    s.PermissionOption(option_id=ALLOW, name="Allow", kind="allow_once"),
    s.PermissionOption(option_id=ALWAYS, name="Always allow", kind="allow_always"),
    s.PermissionOption(option_id=REJECT, name="Reject", kind="reject_once"),
]
CONFIG = {
    "approval": ("Approval", "ask", {"ask": "Ask before each edit and command",
                                     "auto": "Apply edits and run commands without asking"}),
    "sandbox": ("Sandbox", "auto", {"auto": "bubblewrap where installed",
                                    "bubblewrap": "always bubblewrap", "none": "no sandbox"}),
}  # fmt: skip


class Refused(ToolError):
    """The user did not allow an edit or a command (the model is told so)."""


@dataclass
class AcpSession:
    id: str
    root: Path
    config: dict[str, str] = field(default_factory=lambda: {k: v[1] for k, v in CONFIG.items()})
    always: set[str] = field(default_factory=set)  # kinds allowed for the rest of the session
    history: list[Message] = field(default_factory=list)  # the conversation, no system prompt
    updates: list[dict] = field(default_factory=list)  # every update sent, for session/load
    task: asyncio.Task | None = None
    executor: Executor | None = None
    diffs: dict[str, list[Any]] = field(default_factory=dict)  # call id -> diff contents

    def record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cwd": str(self.root),
            "config": self.config,
            "history": msgspec.to_builtins(self.history),  # native calls' ids and all
            "updates": self.updates,
        }


class ClientWorkspace(Workspace):
    """The workspace of an ACP session: the client's view of files, and its consent."""

    def __init__(self, root: Path, agent: TachyAgent, session: AcpSession) -> None:
        super().__init__(root, allow_secrets=agent.settings.allow_secrets)
        self.agent, self.session = agent, session

    def read_bytes(self, rel: str) -> bytes:
        if not self.agent.fs_read:
            return super().read_bytes(rel)
        with self.open(rel):  # the rules first: hidden, ignored and secret files stay so
            pass
        try:
            response = self.agent.call_from_thread(
                self.agent.conn.read_text_file(
                    session_id=self.session.id, path=str(self.abspath(self.real_rel(rel)))
                )
            )
        except acp.RequestError as exc:  # the client could not: the file as saved
            log.info("fs/read_text_file %s failed (%s); reading the disk", rel, exc)
            return super().read_bytes(rel)
        return response.content.encode("utf-8")

    def file_size(self, rel: str) -> int:
        return len(self.read_bytes(rel)) if self.agent.fs_read else super().file_size(rel)

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._writable(rel)  # refused before the user is asked (e.g. .tachyignore)
        try:  # as the client shows it (an unsaved buffer), so the diff is only the edit
            old = self.read_bytes(rel)
        except (OSError, WorkspaceError):
            old = None
        call = CURRENT_CALL.get()  # this tool thread's call: the request is about it
        diff = s.FileEditToolCallContent(
            type="diff",
            path=str(self.abspath(rel)),
            old_text=None if old is None else old.decode("utf-8", "replace"),
            new_text=data.decode("utf-8", "replace"),
        )
        self.agent.call_from_thread(
            self.agent.permit(self.session, "edit", f"Edit {rel}", [diff], call)
        )
        super().write_bytes(rel, data)
        if self.agent.fs_write:
            self.agent.call_from_thread(
                self.agent.conn.write_text_file(
                    session_id=self.session.id,
                    path=str(self.abspath(rel)),
                    content=data.decode("utf-8", "replace"),
                )
            )
        if call is not None:
            self.session.diffs.setdefault(call, []).append(diff)

    def delete(self, rel: str) -> None:
        self._writable(rel)
        text = s.ContentToolCallContent(
            type="content", content=s.TextContentBlock(type="text", text=f"Delete {rel}")
        )
        self.agent.call_from_thread(
            self.agent.permit(self.session, "delete", f"Delete {rel}", [text], CURRENT_CALL.get())
        )
        super().delete(rel)


class TachyAgent:
    """The ACP agent (acp.Agent): one per connection, any number of sessions."""

    def __init__(
        self, policy: str | None, workspace: Path | None = None, settings: Settings | None = None
    ) -> None:
        self.settings = settings or Settings()
        self.policy_spec = policy or self.settings.policy or DEFAULT_POLICY
        self.default_root = workspace
        self.conn: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.fs_read = self.fs_write = False
        self.sessions: dict[str, AcpSession] = {}
        self.policy: Policy | None = None  # loaded once: a local model stays in memory

    # ------------------------------------------------------------- protocol
    def on_connect(self, conn: Any) -> None:
        self.conn = conn
        self.loop = asyncio.get_running_loop()

    async def initialize(
        self, protocol_version: int, client_capabilities=None, client_info=None, **_
    ):
        fs = client_capabilities.fs if client_capabilities is not None else None
        self.fs_read = bool(fs and fs.read_text_file)
        self.fs_write = bool(fs and fs.write_text_file)
        from server.cli import _version

        return s.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=s.AgentCapabilities(
                load_session=True,
                prompt_capabilities=s.PromptCapabilities(embedded_context=True),
            ),
            agent_info=s.Implementation(name="tachy", title="tachy", version=_version()),
        )

    async def new_session(self, cwd: str, mcp_servers=None, **_) -> s.NewSessionResponse:
        session = AcpSession(uuid.uuid4().hex[:16], self._root(cwd))
        session.config["approval"] = "auto" if self.settings.approval == "auto" else "ask"
        session.config["sandbox"] = self.settings.sandbox
        self.sessions[session.id] = session
        self._save(session)
        return s.NewSessionResponse(session_id=session.id, config_options=self._options(session))

    async def load_session(self, cwd: str, session_id: str, mcp_servers=None, **_):
        session = self.sessions.get(session_id) or self._load(self._root(cwd), session_id)
        if session is None:
            raise acp.RequestError.invalid_params(
                {"sessionId": f"there is no session {session_id!r}"}
            )
        self.sessions[session_id] = session
        for stored in session.updates:  # the conversation as the client saw it
            try:
                update = _update(stored)
            except ValueError:  # a damaged record (pydantic's ValidationError): left out
                log.warning("session %s: an update that is not valid was left out", session_id)
                continue
            await self.conn.session_update(session_id=session_id, update=update)
        return s.LoadSessionResponse(config_options=self._options(session))

    async def set_config_option(self, config_id: str, session_id: str, value, **_):
        session = self._session(session_id)
        choices = CONFIG.get(config_id)
        if choices is None or value not in choices[2]:
            known = ", ".join(f"{k} ({' | '.join(v[2])})" for k, v in CONFIG.items())
            raise acp.RequestError.invalid_params({config_id: f"the options are {known}"})
        session.config[config_id] = value
        self._save(session)
        return s.SetSessionConfigOptionResponse(config_options=self._options(session))

    async def prompt(self, session_id: str, prompt: list, **_) -> s.PromptResponse:
        session = self._session(session_id)
        if session.task is not None and not session.task.done():
            raise acp.RequestError.invalid_request(
                {"sessionId": "a prompt is already running in this session; cancel it first"}
            )
        text = _prompt_text(prompt)
        if not text.strip():
            raise acp.RequestError.invalid_params({"prompt": "the prompt is empty"})
        session.task = asyncio.current_task()
        try:
            return await self._run(session, text)
        finally:
            session.task = None
            session.executor = None
            self._save(session)

    async def cancel(self, session_id: str, **_) -> None:
        session = self.sessions.get(session_id)
        if session is not None and session.executor is not None:
            session.executor.cancel()  # generation stops; running commands are killed

    async def authenticate(self, method_id: str, **_) -> None:
        return None

    async def shutdown(self) -> None:
        """The client went away: stop every run (commands are killed) and the model."""
        running = [x for x in self.sessions.values() if x.executor is not None]
        for session in running:
            session.executor.cancel()
        tasks = [x.task for x in running if x.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        if self.policy is not None:
            await self.policy.aclose()

    # ------------------------------------------------------------- the run
    async def _run(self, session: AcpSession, text: str) -> s.PromptResponse:
        policy = self._policy()
        workspace = ClientWorkspace(session.root, self, session)
        use_bwrap = {"auto": None, "bubblewrap": True, "none": False}[session.config["sandbox"]]
        try:
            sandbox = Sandbox(workspace, SandboxConfig(use_bubblewrap=use_bwrap))
        except RuntimeError as exc:
            raise acp.RequestError.internal_error({"sandbox": str(exc)}) from None

        async def gate(command: str) -> None:
            content = [_text_content(f"$ {command}")]
            await self.permit(session, "execute", f"Run `{_short(command)}`", content)

        sandbox.gate = gate
        from index.indexer import FreshIndex  # numpy, tree-sitter: only when a run starts

        ctx = ToolContext(
            workspace=workspace,
            sandbox=sandbox,
            linters=LintRunner(workspace, sandbox=sandbox),
            index=FreshIndex(workspace.root, rules=workspace.rules),
        )
        updates = _Updates(self, session)
        updates.send(
            {"sessionUpdate": "user_message_chunk", "content": _text_block(text)}, live=False
        )
        executor = Executor(
            ctx,
            policy,
            max_turns=self.settings.max_turns,
            on_event=updates.event,
            on_text=updates.text,
        )
        session.executor = executor
        try:
            result = await executor.run(text, history=session.history)
        finally:
            await updates.drain()
            ctx.index.close()
        session.history = executor.messages[1:]
        if result.stop_reason == "error":
            raise acp.RequestError.internal_error({"error": result.error or "the run failed"})
        return s.PromptResponse(stop_reason=STOP_REASONS.get(result.stop_reason, "end_turn"))

    async def permit(
        self, session: AcpSession, kind: str, title: str, content: list, call: str | None = None
    ) -> None:
        """Ask the client whether the model may do this (unless approval is auto or the
        user said always for this kind) about tool call `call` (default: the current
        one); Refused when not."""
        if session.config["approval"] == "auto" or kind in session.always:
            return
        call_id = call or CURRENT_CALL.get() or f"{kind}-{uuid.uuid4().hex[:8]}"
        response = await self.conn.request_permission(
            session_id=session.id,
            tool_call=s.ToolCallUpdate(
                tool_call_id=call_id, title=title, kind=kind, status="pending", content=content
            ),
            options=PERMISSION_OPTIONS,
        )
        outcome = response.outcome
        chosen = getattr(outcome, "option_id", None)
        if chosen == ALWAYS:
            session.always.add(kind)
        elif chosen != ALLOW:
            what = "cancelled the request" if chosen is None else "did not allow it"
            raise Refused(f"the user {what}: {title}; nothing was done")

    def call_from_thread(self, coroutine) -> Any:
        """Run a protocol call on the connection's loop from a tool thread, and wait."""
        assert self.loop is not None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:  # waiting here would block the loop the call needs
            coroutine.close()
            raise RuntimeError("a client call from the event loop's thread: use a tool thread")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    # ------------------------------------------------------------- helpers
    def _policy(self) -> Policy:
        if self.policy is None:
            try:
                self.policy = load_policy(self.policy_spec)
            except PolicyError as exc:
                raise acp.RequestError.internal_error({"policy": str(exc)}) from None
        return self.policy

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise acp.RequestError.invalid_params(
                {"sessionId": f"there is no session {session_id!r}; start one with session/new"}
            )
        return session

    def _root(self, cwd: str) -> Path:
        root = Path(cwd) if cwd else self.default_root
        if root is None or not root.is_absolute() or not root.is_dir():
            raise acp.RequestError.invalid_params({"cwd": f"{cwd!r} is not an absolute directory"})
        return root

    def _options(self, session: AcpSession) -> list:
        return [
            s.SessionConfigOptionSelect(
                id=key,
                name=name,
                type="select",
                current_value=session.config[key],
                options=[
                    s.SessionConfigSelectOption(value=v, name=v, description=d)
                    for v, d in choices.items()
                ],
            )
            for key, (name, _, choices) in CONFIG.items()
        ]

    def _save(self, session: AcpSession) -> None:
        """Keep the session in the workspace's state directory, for session/load."""
        try:
            statedir.ensure(session.root, SESSIONS_DIR)
            fd = statedir.create_file(session.root, f"{SESSIONS_DIR}/{session.id}.json")
            with open(fd, "w", encoding="utf-8") as handle:
                json.dump(session.record(), handle)
        except OSError as exc:
            log.warning("could not save session %s: %s", session.id, exc)

    def _load(self, root: Path, session_id: str) -> AcpSession | None:
        if not session_id.isalnum():
            return None
        try:
            record = json.loads(statedir.read_file(root, f"{SESSIONS_DIR}/{session_id}.json"))
            history = msgspec.convert(record.get("history", []), list[Message])
            updates = [u for u in record.get("updates", []) if isinstance(u, dict)]
            config = record.get("config", {})
        except (OSError, ValueError, AttributeError, msgspec.ValidationError):
            return None  # unreadable or damaged: as if there were none
        session = AcpSession(session_id, root)
        for key, value in config.items() if isinstance(config, dict) else ():
            if key in CONFIG and value in CONFIG[key][2]:
                session.config[key] = value
        session.history, session.updates = history, updates
        return session


class _Updates:
    """Executor events -> session/update notifications, sent in order by one task."""

    def __init__(self, agent: TachyAgent, session: AcpSession) -> None:
        self.agent, self.session = agent, session
        self.queue: asyncio.Queue[dict | None] = asyncio.Queue()
        self.sender = asyncio.ensure_future(self._send_all())
        self.output: ToolCallOutput | None = None
        self.turn = 0

    def send(self, update: dict, live: bool = True) -> None:
        self.session.updates.append(update)
        if live:
            self.queue.put_nowait(update)

    def text(self, chunk: str) -> None:
        if self.output is None:
            self.turn += 1
            self.output = ToolCallOutput([], self.turn)
        self._prose(self.output.feed(chunk)[0])

    def event(self, event: ev.Event) -> None:
        if isinstance(event, ev.Assistant):
            if self.output is not None:
                self._prose(self.output.finish()[0])
            self.output = None
        elif isinstance(event, ev.ToolCall):
            update = {
                "sessionUpdate": "tool_call",
                "toolCallId": event.call_id,
                "title": _title(event.tool, event.args),
                "kind": KINDS.get(event.tool, "other"),
                "status": "in_progress",
                "rawInput": event.args,
            }
            path = event.args.get("path")
            if isinstance(path, str) and path:
                update["locations"] = [{"path": str(self.session.root / path)}]
            self.send(update)
        elif isinstance(event, ev.ToolResult):
            diffs = [
                d.model_dump(by_alias=True, exclude_none=True)
                for d in self.session.diffs.pop(event.call_id, [])
            ]
            self.send(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": event.call_id,
                    "status": "failed" if event.is_error else "completed",
                    "content": [*diffs, {"type": "content", "content": _text_block(event.content)}],
                    # when the tool finished (time.time()), for a client measuring latency
                    "_meta": {"tachy": {"finishedAt": event.meta.get("finished_at")}},
                }
            )
        elif isinstance(event, ev.Todos):
            status = {"pending": "pending", "in_progress": "in_progress", "completed": "completed"}
            entries = [
                {
                    "content": t.content,
                    "priority": "medium",
                    "status": status.get(t.status, "pending"),
                }
                for t in event.todos
            ]
            self.send({"sessionUpdate": "plan", "entries": entries})

    def _prose(self, text: str) -> None:
        if text:
            self.send({"sessionUpdate": "agent_message_chunk", "content": _text_block(text)})

    async def drain(self) -> None:
        self.queue.put_nowait(None)
        await self.sender

    async def _send_all(self) -> None:
        while (update := await self.queue.get()) is not None:
            try:
                await self.agent.conn.session_update(
                    session_id=self.session.id, update=_update(update)
                )
            except Exception as exc:  # a client that left: the run is being cancelled
                log.info("update not delivered: %s", exc)


def _update(raw: dict) -> Any:
    """A stored update (its JSON form) as the SDK's model."""
    return s.SessionNotification.model_validate({"sessionId": "x", "update": raw}).update


def _text_block(text: str) -> dict:
    return {"type": "text", "text": valid_text(text)}


def _text_content(text: str) -> s.ContentToolCallContent:
    return s.ContentToolCallContent(
        type="content", content=s.TextContentBlock(type="text", text=text)
    )


def _prompt_text(blocks: list) -> str:
    """The prompt's text: text blocks as written, embedded resources (files the user
    attached) as their path and text."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(f'<file uri="{block.resource.uri}">\n{block.resource.text}\n</file>')
        elif kind == "resource_link":
            parts.append(f"(see {block.uri})")
    return "\n\n".join(parts)


def _title(tool: str, args: dict) -> str:
    first = next((str(v) for v in args.values()), "")
    return f"{tool} {_short(first, 60)}".strip()


def _short(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


async def serve_stdio(policy: str | None, workspace: Path | None) -> None:
    settings, problems = user_settings()
    for problem in problems:
        log.warning("%s", problem)
    agent = TachyAgent(policy, workspace, settings)
    try:
        await acp.run_agent(agent)
    finally:
        await agent.shutdown()
