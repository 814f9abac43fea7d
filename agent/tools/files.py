"""Reading, finding, writing and deleting files."""

from __future__ import annotations

import asyncio
from typing import Annotated

import msgspec
from msgspec import Meta

from agent.lints import LintError, format_diagnostics
from agent.tools.base import Access, Tool, ToolContext, ToolError
from agent.workspace import Workspace, WorkspaceError

DEFAULT_WINDOW = 400  # lines read_file shows when no range is given
HARD_CAP_LINES = 2000
MAX_LINE_CHARS = 2000
MAX_READ_CHARS = 36_000
SNIFF_BYTES = 8192
STREAM_ABOVE_BYTES = 16 * 1024 * 1024  # larger files are read line by line, never whole

PositiveInt = Annotated[int, Meta(ge=1)]


def is_binary(sample: bytes) -> bool:
    return b"\x00" in sample[:SNIFF_BYTES]


def resolve(ctx: ToolContext, path: str, kind: str) -> str:
    try:
        return ctx.workspace.resolve(path, kind=kind)
    except WorkspaceError as exc:
        raise ToolError(str(exc)) from None


def lint_summary(ctx: ToolContext, rel: str) -> str:
    """The lint report appended to a successful edit."""
    if not ctx.linters.can_lint(rel):
        return ""
    try:
        found = ctx.linters.lint([rel])
    except LintError as exc:
        return f"\n\nLints: not available ({exc})"
    if not found:
        return "\n\nLints: no problems."
    return f"\n\nLints ({len(found)}):\n{format_diagnostics(found, limit=50)}"


def suggest_paths(workspace: Workspace, path: str, limit: int = 3) -> str:
    from agent.tools.find import fuzzy_rank

    name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    files = [rel for rel, is_dir in workspace.walk() if not is_dir]
    best = fuzzy_rank(name, files, limit)
    return f" Did you mean: {', '.join(best)}?" if best else ""


class ReadFile(Tool):
    """Read a text file, with line numbers.

    Shows up to 400 lines when no range is given (at most 2000 per call); give
    start_line and end_line to read a particular part. Very long lines are cut.
    Binary files are not shown. Files that are not valid UTF-8 are shown with
    replacement characters, and the result says so.
    """

    name = "read_file"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        path: Annotated[str, Meta(description="file to read, relative to the workspace root")]
        start_line: Annotated[
            PositiveInt | None, Meta(description="first line to show (1-based)")
        ] = None
        end_line: Annotated[
            PositiveInt | None, Meta(description="last line to show, inclusive")
        ] = None

    def access(self, args: Args) -> tuple[Access, Access]:
        return frozenset({args.path}), frozenset()

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await asyncio.to_thread(self._read, args, ctx)

    def _read(self, args: Args, ctx: ToolContext) -> str:
        ws = ctx.workspace
        try:
            rel = ws.resolve(args.path, kind="file")
        except WorkspaceError as exc:
            message = str(exc)
            if message.endswith("does not exist"):
                message += "." + suggest_paths(ws, args.path)
            raise ToolError(message) from None
        start = args.start_line or 1
        if args.end_line is not None and args.end_line < start:
            raise ToolError(f"end_line ({args.end_line}) is before start_line ({start})")
        end = args.end_line if args.end_line is not None else start + DEFAULT_WINDOW - 1
        end = min(end, start + HARD_CAP_LINES - 1)
        size = ws.file_size(rel)
        if size > STREAM_ABOVE_BYTES:
            return self._read_large(ws, rel, size, start, end)
        data = ws.read_bytes(rel)
        if is_binary(data):
            raise ToolError(
                f"{rel} is a binary file ({len(data)} bytes); it cannot be shown as text"
            )
        if not data:
            return f"{rel} is empty (0 bytes)."
        text, notice = decode(data)
        lines = text.splitlines()
        return self._window(rel, lines, len(lines), start, end, args.end_line is not None, notice)

    def _read_large(self, ws: Workspace, rel: str, size: int, start: int, end: int) -> str:
        with open(ws.abspath(rel), "rb") as handle:
            if is_binary(handle.read(SNIFF_BYTES)):
                raise ToolError(
                    f"{rel} is a binary file ({size} bytes); it cannot be shown as text"
                )
            handle.seek(0)
            lines = []
            for number, raw in enumerate(handle, 1):
                if number >= start:
                    lines.append(raw[: MAX_LINE_CHARS * 4])
                if number >= end:
                    break
        text, notice = decode(b"\n".join(line.rstrip(b"\r\n") for line in lines))
        window = [""] * (start - 1) + text.split("\n")
        notice = (notice + " " if notice else "") + (
            f"[{rel} is large ({size} bytes); its line count is not computed]"
        )
        return self._window(rel, window, None, start, end, True, notice)

    @staticmethod
    def _window(rel, lines, total, start, end, explicit_end, notice) -> str:
        count = len(lines) if total is None else total
        if start > count:
            raise ToolError(f"start_line {start} is past the end of {rel} ({count} lines)")
        out = []
        used = 0
        last = start - 1
        for number in range(start, min(end, count) + 1):
            line = lines[number - 1]
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [... {len(line) - MAX_LINE_CHARS} characters cut]"
            entry = f"{number:6}\t{line}"
            if used + len(entry) > MAX_READ_CHARS and out:
                break
            out.append(entry)
            used += len(entry) + 1
            last = number
        notes = [notice] if notice else []
        if total is not None and last < count:
            notes.append(
                f"[showing lines {start}-{last} of {count}; read more with start_line={last + 1}]"
            )
        elif total is None and last < end:
            notes.append(f"[showing lines {start}-{last}; continue with start_line={last + 1}]")
        header = f"{rel}" + (f" ({count} lines)" if total is not None else "")
        return "\n".join([header, *out, *notes])


def decode(data: bytes) -> tuple[str, str]:
    """UTF-8 text and a notice ('' when the bytes were valid UTF-8)."""
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        return (
            data.decode("utf-8", "replace"),
            f"[not valid UTF-8 (first bad byte at offset {exc.start}); undecodable bytes are shown as \ufffd]",
        )


class ListDir(Tool):
    """List a directory as an indented tree (directories end with '/').

    Entries excluded by .gitignore or .tachyignore, and secret files, are not shown.
    """

    name = "list_dir"
    MAX_ENTRIES = 500

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        path: Annotated[
            str, Meta(description="directory to list; the workspace root if omitted")
        ] = "."
        depth: Annotated[
            Annotated[int, Meta(ge=1, le=10)] | None,
            Meta(description="how many levels to show (default 2, at most 10)"),
        ] = None

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await asyncio.to_thread(self._list, args, ctx)

    def _list(self, args: Args, ctx: ToolContext) -> str:
        rel = resolve(ctx, args.path, "dir")
        depth = args.depth or 2
        lines = []
        base = rel.count("/") + 1 if rel else 0
        hidden_more = 0
        for entry, is_dir in ctx.workspace.walk(rel, max_depth=depth):
            if len(lines) >= self.MAX_ENTRIES:
                hidden_more += 1
                continue
            level = entry.count("/") - base
            name = entry.rsplit("/", 1)[-1]
            lines.append("  " * level + name + ("/" if is_dir else ""))
        title = (rel or ".") + "/"
        if not lines:
            return f"{title} is empty (or holds only ignored files)."
        if hidden_more:
            lines.append(
                f"[... {hidden_more} more entries not shown; list a subdirectory or use a smaller depth]"
            )
        return title + "\n" + "\n".join("  " + line for line in lines)


class WriteFile(Tool):
    """Create a file or replace its whole content.

    Parent directories are created. A final newline is added when the content lacks
    one. Prefer edit_file for changes to an existing file. The result includes the
    file's lints.
    """

    name = "write_file"
    read_only = False

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        path: Annotated[str, Meta(description="file to write, relative to the workspace root")]
        content: Annotated[str, Meta(description="the complete new content of the file")]

    def access(self, args: Args) -> tuple[Access, Access]:
        return frozenset(), frozenset({args.path})

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await asyncio.to_thread(self._write, args, ctx)

    def _write(self, args: Args, ctx: ToolContext) -> str:
        rel = resolve(ctx, args.path, "new")
        ws = ctx.workspace
        content = args.content
        if content and not content.endswith("\n"):
            content += "\n"
        existed = ws.abspath(rel).is_file()
        before = ws.read_bytes(rel).count(b"\n") if existed else 0
        try:
            ws.write_bytes(rel, content.encode("utf-8"))
        except OSError as exc:
            raise ToolError(f"could not write {rel}: {exc.strerror}") from None
        lines = content.count("\n")
        what = (
            f"Overwrote {rel} ({lines} lines; it had {before})"
            if existed
            else f"Created {rel} ({lines} lines)"
        )
        return what + "." + lint_summary(ctx, rel)


class DeleteFile(Tool):
    """Delete a file. The change is checkpointed and can be reverted by the user."""

    name = "delete_file"
    read_only = False

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        path: Annotated[str, Meta(description="file to delete, relative to the workspace root")]

    def access(self, args: Args) -> tuple[Access, Access]:
        return frozenset(), frozenset({args.path})

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await asyncio.to_thread(self._delete, args, ctx)

    def _delete(self, args: Args, ctx: ToolContext) -> str:
        rel = resolve(ctx, args.path, "file")
        try:
            ctx.workspace.delete(rel)
        except OSError as exc:
            raise ToolError(f"could not delete {rel}: {exc.strerror}") from None
        return f"Deleted {rel}."
