"""Reading, finding, writing and deleting files."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

import msgspec
from msgspec import Meta

from agent.lints import Diagnostic, LintError, format_diagnostics
from agent.tools.base import Access, Tool, ToolContext, ToolError, run_blocking
from agent.workspace import Workspace, WorkspaceError

DEFAULT_WINDOW = 400  # lines read_file shows when no range is given
HARD_CAP_LINES = 2000
MAX_LINE_CHARS = 2000
MAX_LINE_BYTES = MAX_LINE_CHARS * 4  # of one line of a large file, before decoding
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


def lint_summary(ctx: ToolContext, rel: str, before: list[Diagnostic] | None = None) -> str:
    """The lint report appended to a successful write: every problem of the file, or,
    given the problems it had `before` an edit, only those the edit introduced (as
    SWE-agent's lint-gated edit does: the model is told what it just broke, not what
    was broken already)."""
    if not ctx.linters.can_lint(rel):
        return ""
    try:
        found = ctx.linters.lint([rel])
    except LintError as exc:
        return f"\n\nLints: not available ({exc})"
    if before is None:
        if not found:
            return "\n\nLints: no problems."
        return f"\n\nLints ({len(found)}):\n{format_diagnostics(found, limit=50)}"
    new = introduced(before, found)
    if not new:
        older = f" ({len(found)} from before remain; read_lints shows them)" if found else ""
        return f"\n\nLints: the edit introduced no problems{older}."
    return f"\n\nLints ({len(new)} new):\n{format_diagnostics(new, limit=50)}"


def lints_before(ctx: ToolContext, rel: str) -> list[Diagnostic] | None:
    """The file's problems before a change (None when it cannot be linted)."""
    if not ctx.linters.can_lint(rel):
        return None
    try:
        return ctx.linters.lint([rel])
    except LintError:
        return []


def introduced(before: list[Diagnostic], after: list[Diagnostic]) -> list[Diagnostic]:
    """The problems of `after` that `before` did not have. An edit moves lines, so a
    problem is matched by its code and message, not its place: each one before cancels
    one alike after."""
    left = Counter((d.code, d.message) for d in before)
    new = []
    for diagnostic in after:
        key = (diagnostic.code, diagnostic.message)
        if left[key] > 0:
            left[key] -= 1
        else:
            new.append(diagnostic)
    return new


def suggest_paths(workspace: Workspace, path: str, limit: int = 3) -> str:
    """' Did you mean: a, b?' for a path that does not exist ('' when nothing is close):
    paths that contain the name fuzzily, else files whose names are spelled alike
    (a typo such as 'clac.py')."""
    import difflib

    from agent.tools.find import fuzzy_rank

    name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    files = [rel for rel, is_dir in workspace.walk() if not is_dir]
    best = fuzzy_rank(name, files, limit) if name else []
    if not best and name:
        by_name: dict[str, list[str]] = {}
        for rel in files:
            by_name.setdefault(rel.rsplit("/", 1)[-1], []).append(rel)
        close = difflib.get_close_matches(name, sorted(by_name), n=limit, cutoff=0.6)
        best = [rel for match in close for rel in by_name[match]][:limit]
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
        return await run_blocking(self._read, args, ctx)

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
        try:
            size = ws.file_size(rel)
            if size > STREAM_ABOVE_BYTES:
                return self._read_large(ws, rel, size, start, end)
            data = ws.read_bytes(rel)
        except OSError as exc:
            raise ToolError(f"could not read {rel}: {exc.strerror or exc}") from None
        if is_binary(data):
            raise ToolError(
                f"{rel} is a binary file ({len(data)} bytes); it cannot be shown as text"
            )
        ws.note_shown(rel, data)
        if not data:
            return f"{rel} is empty (0 bytes)."
        text, notice = decode(data)
        lines = split_lines(text)
        if start > len(lines):
            raise ToolError(f"start_line {start} is past the end of {rel} ({len(lines)} lines)")
        return self._window(rel, lines[start - 1 : end], start, len(lines), notice)

    def _read_large(self, ws: Workspace, rel: str, size: int, start: int, end: int) -> str:
        """Lines start..end of a file too large to load: read line by line, keeping only
        the window (and at most MAX_LINE_BYTES of each line)."""
        window: list[bytes] = []
        number = 0
        with ws.open(rel) as handle:
            if is_binary(handle.read(SNIFF_BYTES)):
                raise ToolError(
                    f"{rel} is a binary file ({size} bytes); it cannot be shown as text"
                )
            handle.seek(0)
            while number < end:
                raw = handle.readline(MAX_LINE_BYTES)
                if not raw:
                    break
                number += 1
                if not raw.endswith(b"\n"):  # a longer line: skip the rest of it
                    rest = raw
                    while rest and not rest.endswith(b"\n"):
                        rest = handle.readline(1 << 20)
                if number >= start:
                    window.append(raw.rstrip(b"\r\n"))
            at_end = not handle.read(1)
        total = number if at_end else None
        if start > number:
            raise ToolError(f"start_line {start} is past the end of {rel} ({number} lines)")
        lines = []
        bad = False
        for raw in window:
            text, line_notice = decode(raw)
            bad = bad or bool(line_notice)
            lines.append(text)
        notices = []
        if bad:
            notices.append("[not valid UTF-8; undecodable bytes are shown as \ufffd]")
        if total is None:
            notices.append(f"[{rel} is large ({size} bytes); its line count is not computed]")
        return self._window(rel, lines, start, total, " ".join(notices))

    @staticmethod
    def _window(rel: str, lines: list[str], start: int, total: int | None, notice: str) -> str:
        """Render `lines` (line `start` onwards) with line numbers, within the caps."""
        out = []
        used = 0
        last = start - 1
        for number, line in enumerate(lines, start):
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [... {len(line) - MAX_LINE_CHARS} characters cut]"
            entry = f"{number:6}\t{line}"
            if used + len(entry) > MAX_READ_CHARS and out:
                break
            out.append(entry)
            used += len(entry) + 1
            last = number
        notes = [notice] if notice else []
        if total is not None and last < total:
            notes.append(
                f"[showing lines {start}-{last} of {total}; read more with start_line={last + 1}]"
            )
        elif total is None:
            notes.append(f"[showing lines {start}-{last}; continue with start_line={last + 1}]")
        header = f"{rel}" + (f" ({total} lines)" if total is not None else "")
        return "\n".join([header, *out, *notes])


def split_lines(text: str) -> list[str]:
    """The lines of a text as editors, grep and linters number them: split at '\n' only
    (str.splitlines also splits at form feeds and other separators, which would shift
    every line number after them), a final newline ends the last line, and the '\r' of
    a Windows line ending is dropped."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


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
        return await run_blocking(self._list, args, ctx)

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

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        path: Annotated[str, Meta(description="file to write, relative to the workspace root")]
        content: Annotated[str, Meta(description="the complete new content of the file")]

    def access(self, args: Args) -> tuple[Access, Access]:
        return frozenset(), frozenset({args.path})

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await run_blocking(self._write, args, ctx)

    def _write(self, args: Args, ctx: ToolContext) -> str:
        rel = resolve(ctx, args.path, "new")
        ws = ctx.workspace
        content = args.content
        if content and not content.endswith("\n"):
            content += "\n"
        existed = ws.abspath(rel).is_file()
        try:
            before = ws.read_bytes(rel).count(b"\n") if existed else 0
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

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        path: Annotated[str, Meta(description="file to delete, relative to the workspace root")]

    def access(self, args: Args) -> tuple[Access, Access]:
        return frozenset(), frozenset({args.path})

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await run_blocking(self._delete, args, ctx)

    def _delete(self, args: Args, ctx: ToolContext) -> str:
        rel = resolve(ctx, args.path, "file")
        try:
            ctx.workspace.delete(rel)
        except OSError as exc:
            raise ToolError(f"could not delete {rel}: {exc.strerror}") from None
        return f"Deleted {rel}."
