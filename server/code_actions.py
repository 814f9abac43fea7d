"""Ask to fix: every diagnostic in a workspace file gets a quick fix
(`textDocument/codeAction`) whose command, `tachy.askToFix`, starts an agent run on
it. The command answers with the run's session id at once; the run streams
`tachy/agent/event` notifications as usual."""

from __future__ import annotations

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from server import protocol as p
from server.configuration import Configuration
from server.connection import EditorConnection
from server.documents import uri_to_path
from server.errors import clip, failed
from server.folders import Folders
from server.sessions import AgentRuns, SessionError


class AskToFix:
    def __init__(
        self,
        editor: EditorConnection,
        configuration: Configuration,
        folders: Folders,
        agent: AgentRuns,
    ) -> None:
        self.editor = editor
        self.configuration = configuration
        self.folders = folders
        self.agent = agent

    async def on_code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        await self.configuration.ready.wait()
        path = uri_to_path(params.text_document.uri)
        if path is None or self.folders.folder_for(path) is None:
            return []
        actions = []
        for diagnostic in params.context.diagnostics:
            first_line = diagnostic.message.splitlines()[0] if diagnostic.message else "problem"
            args = p.AskToFixArgs(
                uri=params.text_document.uri, diagnostic=_wire_diagnostic(diagnostic)
            )
            actions.append(
                types.CodeAction(
                    title=f"Ask tachy to fix: {clip(first_line, 60)}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    command=types.Command(
                        title="Ask tachy to fix", command=p.ASK_TO_FIX, arguments=[p.encode(args)]
                    ),
                )
            )
        return actions

    async def on_ask_to_fix(self, args: p.AskToFixArgs) -> p.AskToFixResult:
        await self.configuration.ready.wait()
        path = uri_to_path(args.uri)
        folder = self.agent.run_folder(None, near=args.uri)
        if path is None or not (path == folder or folder in path.parents):
            raise JsonRpcInvalidParams(f"{args.uri} is not in a workspace folder")
        sessions = self.agent.sessions
        try:
            session_id = sessions.new_id(args.session_id)
        except SessionError as exc:
            raise failed(str(exc)) from None
        prompt = fix_prompt(path.relative_to(folder).as_posix(), args.diagnostic)
        run = p.AgentRunParams(prompt=prompt, session_id=session_id)

        async def background() -> None:
            try:
                await sessions.run(run, self.configuration.settings, folder)
            except SessionError as exc:
                self.editor.show(f"tachy: {exc}", types.MessageType.Error)

        self.editor.spawn(background())
        return p.AskToFixResult(session_id=session_id)


def fix_prompt(rel: str, d: p.LspDiagnostic) -> str:
    """What the agent is asked for one diagnostic in the file `rel`."""
    where = f"{rel}:{d.range.start.line + 1}:{d.range.start.character + 1}"
    source = f" ({d.source}{' ' + str(d.code) if d.code is not None else ''})" if d.source else ""
    return (
        f"Fix this problem reported at {where}{source}:\n{d.message}\n\n"
        "Read the code around it first, make the smallest correct change, and check "
        "the result with read_lints."
    )


def _wire_diagnostic(d: types.Diagnostic) -> p.LspDiagnostic:
    code = d.code if isinstance(d.code, (str, int)) else None
    return p.LspDiagnostic(
        range=p.Range(
            start=p.Position(d.range.start.line, d.range.start.character),
            end=p.Position(d.range.end.line, d.range.end.character),
        ),
        message=d.message,
        severity=int(d.severity) if d.severity is not None else None,
        code=code,
        source=d.source,
    )
