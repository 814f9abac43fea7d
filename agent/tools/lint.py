"""read_lints: linter findings for files."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from agent.lints import LintError, format_diagnostics
from agent.tools.base import Tool, ToolContext, ToolError, run_blocking
from agent.tools.files import resolve


class ReadLints(Tool):
    """Show linter problems (ruff for Python, plus what the editor reports).

    With no paths, lints the files you changed in this run, or the whole workspace
    if you changed none. One problem per line: path:line:column: CODE message.
    """

    name = "read_lints"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        paths: Annotated[
            list[str] | None, Meta(description="files or directories to lint (one per line)")
        ] = None

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await run_blocking(self._lint, args, ctx)

    def _lint(self, args: Args, ctx: ToolContext) -> str:
        ws = ctx.workspace
        if args.paths:
            roots = [resolve(ctx, path, "any") for path in args.paths]
        else:
            roots = [p for p in sorted(ws.checkpoints) if ws.abspath(p).is_file()] or [""]
        files: list[str] = []
        for root in roots:
            target = ws.abspath(root)
            if not target.exists():
                raise ToolError(f"{root} does not exist")
            if target.is_dir():
                files += [
                    rel for rel, is_dir in ws.walk(root) if not is_dir and ctx.linters.can_lint(rel)
                ]
            elif ctx.linters.can_lint(root):
                files.append(root)
        files = sorted(set(files))
        if not files:
            return "No lintable files there."
        try:
            found = ctx.linters.lint(files)
        except LintError as exc:
            raise ToolError(str(exc)) from None
        checked = f"{len(files)} file{'s' if len(files) != 1 else ''}"
        if not found:
            return f"No lint problems in {checked}."
        problems = f"{len(found)} problem{'s' if len(found) != 1 else ''}"
        return f"{problems} in {checked}:\n{format_diagnostics(found)}"
