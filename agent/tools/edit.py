"""edit_file: exact-match replacement that refuses to guess."""

from __future__ import annotations

import difflib
from typing import Annotated

import msgspec
from msgspec import Meta

from agent.tools.base import Access, Tool, ToolContext, ToolError, run_blocking
from agent.tools.files import decode, is_binary, lint_summary, lints_before, resolve, split_lines

MAX_EDIT_BYTES = 8 * 1024 * 1024
MAX_DIFF_LINES = 150
# Above this many lines the fuzzy "most similar text" search is skipped (it is quadratic).
FUZZY_MAX_LINES = 5000


def unified_diff(rel: str, before: str, after: str, limit: int = MAX_DIFF_LINES) -> str:
    """A unified diff of two texts without the file header lines, capped."""
    lines = list(
        difflib.unified_diff(
            split_lines(before), split_lines(after), f"a/{rel}", f"b/{rel}", n=3, lineterm=""
        )
    )[2:]
    if len(lines) > limit:
        lines = [*lines[:limit], f"[... {len(lines) - limit} more diff lines not shown]"]
    return "\n".join(lines)


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{first + i:6}\t{line}" for i, line in enumerate(lines))


def _squash(line: str) -> str:
    return " ".join(line.split())


def explain_missing(rel: str, text: str, old: str) -> str:
    """Why old_string is not in the file, with the nearest candidate when there is one."""
    lines = split_lines(text)
    wanted = split_lines(old.strip("\n")) or [old]
    target = [_squash(line) for line in wanted]
    n = len(target)
    squashed = [_squash(line) for line in lines]
    for i in range(len(lines) - n + 1):
        if squashed[i : i + n] == target:
            return (
                f"old_string was not found in {rel} exactly, but lines {i + 1}-{i + n} match it "
                "except for whitespace (indentation, tabs or trailing spaces). The file has:\n"
                f"{_numbered(lines[i : i + n], i + 1)}\n"
                "Copy the text exactly as it is in the file (without the line numbers)."
            )
    if len(lines) <= FUZZY_MAX_LINES and n <= 200:
        joined = "\n".join(target)
        best, best_at = 0.0, -1
        matcher = difflib.SequenceMatcher(autojunk=False)
        matcher.set_seq2(joined)
        for i in range(max(1, len(lines) - n + 1)):
            matcher.set_seq1("\n".join(squashed[i : i + n]))
            if matcher.real_quick_ratio() <= best or matcher.quick_ratio() <= best:
                continue
            ratio = matcher.ratio()
            if ratio > best:
                best, best_at = ratio, i
        if best >= 0.6:
            return (
                f"old_string was not found in {rel}. The most similar text "
                f"({int(best * 100)}% alike) is at lines {best_at + 1}-{best_at + n}:\n"
                f"{_numbered(lines[best_at : best_at + n], best_at + 1)}\n"
                "Read the file again and copy the text exactly."
            )
    return f"old_string was not found in {rel}. Read the file again; it may differ from what you expect."


class EditFile(Tool):
    """Replace exact text in a file.

    old_string must appear in the file exactly as given (whitespace included) and only
    once, unless replace_all is true; include enough surrounding lines to make it
    unique. On a mismatch the result shows the nearest text in the file. On success it
    shows the change as a diff, followed by the lint problems the edit introduced.
    """

    name = "edit_file"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        path: Annotated[str, Meta(description="file to edit, relative to the workspace root")]
        old_string: Annotated[
            str,
            Meta(description="the exact text to replace; it must occur once unless replace_all"),
        ]
        new_string: Annotated[str, Meta(description="the text to put in its place")]
        replace_all: Annotated[
            bool, Meta(description="replace every occurrence instead of exactly one")
        ] = False

    def access(self, args: Args) -> tuple[Access, Access]:
        return frozenset(), frozenset({args.path})

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await run_blocking(self._edit, args, ctx)

    def _edit(self, args: Args, ctx: ToolContext) -> str:
        ws = ctx.workspace
        rel = resolve(ctx, args.path, "file")
        if args.old_string == "":
            raise ToolError(
                "old_string is empty; use write_file to create a file or replace all of it"
            )
        if args.old_string == args.new_string:
            raise ToolError("old_string and new_string are the same; there is nothing to change")
        try:
            if ws.file_size(rel) > MAX_EDIT_BYTES:
                raise ToolError(
                    f"{rel} is larger than {MAX_EDIT_BYTES // 1024 // 1024} MiB; edit_file does not edit it"
                )
            data = ws.read_bytes(rel)
        except OSError as exc:
            raise ToolError(f"could not read {rel}: {exc.strerror or exc}") from None
        if is_binary(data):
            raise ToolError(f"{rel} is a binary file; edit_file only edits text")
        text, notice = decode(data)
        if notice:
            raise ToolError(f"{rel} is not valid UTF-8; edit_file only edits UTF-8 text")
        old, new = args.old_string, args.new_string
        if "\r\n" in text and "\r\n" not in old:
            # Keep the file's Windows line endings.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
        if count == 0:
            raise ToolError(explain_missing(rel, text, args.old_string))
        if count > 1 and not args.replace_all:
            where, at = [], text.find(old)
            while at >= 0 and len(where) < 20:
                where.append(str(text.count("\n", 0, at) + 1))
                at = text.find(old, at + len(old))
            raise ToolError(
                f"old_string occurs {count} times in {rel} (at lines {', '.join(where)}); include more "
                "surrounding lines to pick one, or set replace_all to true to change every occurrence"
            )
        after = text.replace(old, new) if args.replace_all else text.replace(old, new, 1)
        before = lints_before(ctx, rel)
        try:
            ws.write_bytes(rel, after.encode("utf-8"))
        except OSError as exc:
            raise ToolError(f"could not write {rel}: {exc.strerror}") from None
        times = f"{count} occurrences" if count > 1 else "1 occurrence"
        diff = unified_diff(rel, text, after)
        return f"Edited {rel} (replaced {times}):\n{diff}" + lint_summary(ctx, rel, before)
