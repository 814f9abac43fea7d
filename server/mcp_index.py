"""`tachy mcp`: a workspace's index as an MCP server on stdio, for other agents.

Claude Code, Codex, Cursor and any other MCP client get two tools over the
repository the server was started in:

- `codebase_search(query, paths?, limit?)`: tachy's agent tool itself (same schema,
  same checks, same rendered result, byte for byte what tachy's own model reads);
- `find_symbol(name, limit?)`: definitions by name, as an editor's symbol picker
  finds them ("prsCfg" finds parse_config; "Vector.len" a method).

Both read the workspace through tachy's Workspace, so its ignore and secret rules
hold (`.gitignore`, `.tachyignore`, secret files; TACHY_SECRET_PATTERNS), and a
path outside the workspace is an error result. The index is built in the workspace's
state directory on the first call and brought up to date (changed files only)
before every call, as for `tachy agent`.

Calls go through the agent's check_call/run_call, so a bad argument gets the agent's
error text. Built on the MCP SDK's low-level server (`mcp`), which lets the tools
keep tachy's own JSON schemas and results instead of ones derived from a signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from agent.executor import check_call, run_call
from agent.parser import RawCall
from agent.render import render_result
from agent.tools import ToolContext
from agent.tools.base import Tool, ToolError, run_blocking
from agent.tools.find import CodebaseSearch
from agent.workspace import Workspace

SERVER_NAME = "tachy"


class FindSymbol(Tool):
    """Find definitions (functions, classes, methods) by name.

    Matches the way an editor's symbol picker does: case-insensitive, as a
    subsequence, exact names first; a dotted name matches qualified names.
    """

    name = "find_symbol"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        name: Annotated[str, Meta(description="the name, or part of it ('Vector.len', 'prsCfg')")]
        limit: Annotated[
            Annotated[int, Meta(ge=1, le=200)] | None,
            Meta(description="how many definitions (default 20)"),
        ] = None

    async def run(self, args: Args, ctx: ToolContext) -> str:
        index = ctx.index
        if index is None:
            raise ToolError("the index is not available")
        hits = await run_blocking(lambda: index.symbols(args.name, limit=args.limit or 20))
        hits = [hit for hit in hits if ctx.workspace.is_visible(hit.path, False)]
        if not hits:
            return f"No definition matches {args.name!r}."
        lines = []
        for hit in hits:
            qualified = f"{hit.container}.{hit.name}" if hit.container else hit.name
            lines.append(f"{hit.path}:{hit.start_line}-{hit.end_line} {hit.kind} {qualified}")
        return "\n".join(lines)


MCP_TOOLS: tuple[type[Tool], ...] = (CodebaseSearch, FindSymbol)


class IndexTools:
    """The two tools over one workspace: what the MCP handlers call."""

    def __init__(self, root: Path) -> None:
        from agent.lints import LintRunner
        from agent.sandbox import Sandbox, SandboxConfig
        from index.indexer import FreshIndex

        workspace = Workspace(root)
        sandbox = Sandbox(workspace, SandboxConfig(use_bubblewrap=False))  # never runs anything
        self.index = FreshIndex(workspace.root, rules=workspace.rules)
        self.ctx = ToolContext(
            workspace=workspace,
            sandbox=sandbox,
            linters=LintRunner(workspace, sandbox=sandbox),
            index=self.index,
        )
        self.tools = {tool.name: tool() for tool in MCP_TOOLS}

    def listing(self) -> list[dict[str, Any]]:
        """name, description and input schema of each tool (the agent's own schema)."""
        return [tool.function_schema()["function"] for tool in MCP_TOOLS]

    async def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[str, bool]:
        """(the rendered result, is_error) of one call."""
        raw = RawCall(index=0, name=name, params=dict(arguments or {}))
        tool, args, problem = check_call(self.tools, raw, native=True)
        content, is_error = await run_call(tool, args, problem, self.ctx)
        return render_result(content, is_error), is_error

    def close(self) -> None:
        self.index.close()


async def serve_stdio(root: Path) -> None:
    """Serve the MCP protocol on stdin/stdout until the client closes it."""
    from mcp import types
    from mcp.server import Server
    from mcp.server.stdio import stdio_server

    tools = IndexTools(root)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"], description=t["description"], input_schema=t["parameters"]
                )
                for t in tools.listing()
            ]
        )

    async def call_tool(ctx, params) -> types.CallToolResult:
        text, is_error = await tools.call(params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=is_error
        )

    server = Server(
        SERVER_NAME,
        instructions=(
            f"Search the code of {tools.ctx.workspace.root} by meaning (codebase_search) "
            "and find definitions by name (find_symbol)."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        tools.close()
