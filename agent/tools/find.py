"""Finding things: file names (fuzzy), text (ripgrep) and meaning (the semantic index)."""

from __future__ import annotations

import subprocess
import threading
from typing import Annotated

import msgspec
from msgspec import Meta

from agent.lints import find_executable
from agent.tools.base import Tool, ToolContext, ToolError, run_blocking
from agent.tools.files import resolve
from index.errors import CodeIndexError

_BOUNDARY = "/_-. "


def glob_matches(glob: str, path: str) -> bool:
    """Whether ripgrep's --glob GLOB would search `path` (gitignore-style globs; a
    leading '!' excludes)."""
    import pathspec

    negated = glob.startswith("!")
    spec = pathspec.GitIgnoreSpec.from_lines([glob[1:] if negated else glob])
    return spec.match_file(path) != negated


def fuzzy_score(term: str, path: str) -> int | None:
    """How well `term` matches `path` as a subsequence (case-insensitive), or None.

    Rewards contiguous runs, matches at word boundaries and matches in the file name,
    in the manner of fzf. Aligned greedily from the end so the file name wins.
    """
    lower = path.lower()
    if term in lower:
        base = lower.rfind("/") + 1
        at = lower.rfind(term)
        score = 100 + 10 * len(term)
        if at >= base:
            score += 50 + (30 if at == base else 0)
        return score - len(path) // 10
    # Subsequence check, aligned from the right.
    positions = []
    j = len(lower) - 1
    for ch in reversed(term):
        while j >= 0 and lower[j] != ch:
            j -= 1
        if j < 0:
            return None
        positions.append(j)
        j -= 1
    positions.reverse()
    base = lower.rfind("/") + 1
    score = 0
    previous = -2
    for pos in positions:
        score += 1
        if pos == previous + 1:
            score += 5
        if (
            pos == 0
            or path[pos - 1] in _BOUNDARY
            or (path[pos].isupper() and path[pos - 1].islower())
        ):
            score += 8
        if pos >= base:
            score += 2
        previous = pos
    return score - (positions[-1] - positions[0]) // 4 - len(path) // 10


def fuzzy_rank(query: str, paths: list[str], limit: int) -> list[str]:
    terms = query.lower().split()
    if not terms:
        return []
    scored = []
    for path in paths:
        total = 0
        for term in terms:
            score = fuzzy_score(term, path)
            if score is None:
                break
            total += score
        else:
            scored.append((-total, path))
    scored.sort()
    return [path for _, path in scored[:limit]]


class FileSearch(Tool):
    """Find files by (part of) their path, fuzzily: "calc test" finds tests/test_calc.py.

    Best matches first. Use grep to search file contents.
    """

    name = "file_search"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        query: Annotated[str, Meta(description="words or fragments of the path to find")]
        limit: Annotated[
            Annotated[int, Meta(ge=1, le=200)] | None,
            Meta(description="how many paths to return (default 20)"),
        ] = None

    async def run(self, args: Args, ctx: ToolContext) -> str:
        return await run_blocking(self._search, args, ctx)

    def _search(self, args: Args, ctx: ToolContext) -> str:
        if not args.query.strip():
            raise ToolError("query is empty")
        files = [rel for rel, is_dir in ctx.workspace.walk() if not is_dir]
        best = fuzzy_rank(args.query, files, args.limit or 20)
        if not best:
            return f"No file paths match {args.query!r}."
        return "\n".join(best)


class Grep(Tool):
    """Search file contents with a regular expression (ripgrep syntax).

    Prints `path:line:text` for each matching line, files in path order. Files
    excluded by .gitignore/.tachyignore and secret files are not searched. Long lines
    are cut. Use codebase_search to search by meaning instead.
    """

    name = "grep"
    MAX_LINE = 300
    TIMEOUT_S = 60

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        pattern: Annotated[str, Meta(description="regular expression (Rust regex syntax)")]
        path: Annotated[
            str, Meta(description="file or directory to search (default: the whole workspace)")
        ] = "."
        glob: Annotated[
            str | None, Meta(description="only files matching this glob, e.g. '*.py'")
        ] = None
        ignore_case: Annotated[bool, Meta(description="match case-insensitively")] = False
        max_results: Annotated[
            Annotated[int, Meta(ge=1, le=1000)] | None,
            Meta(description="how many matching lines to show (default 100)"),
        ] = None

    async def run(self, args: Args, ctx: ToolContext) -> str:
        rel = resolve(ctx, args.path, "any")
        if not ctx.workspace.abspath(rel).exists():
            raise ToolError(f"{rel or '.'} does not exist")
        binary = find_executable("rg")
        if binary is None:
            raise ToolError("ripgrep (rg) is not installed in tachy's environment")
        # ripgrep's own ignore handling prunes the walk; every path it prints is
        # checked against the workspace's rules again below. Ignore sources the
        # workspace does not use (.ignore files, ignore files above the root, git's
        # global and info/exclude lists) are off, so grep sees what read_file sees.
        argv = [
            binary, "--line-number", "--no-heading", "--with-filename", "--null",
            "--color=never", "--sort=path", "--hidden", "--no-require-git", "--no-config",
            "--no-ignore-parent", "--no-ignore-global", "--no-ignore-exclude",
            "--no-ignore-dot", "--max-columns=2000", "--glob=!.git", "--glob=!.tachy",
            # Files the sandbox masks cannot be opened; that is no error of the search
            # (a bad pattern is still reported).
            "--no-messages",
        ]  # fmt: skip
        if (ctx.workspace.root / ".tachyignore").is_file():
            argv.append("--ignore-file=.tachyignore")
        if args.ignore_case:
            argv.append("--ignore-case")
        if args.glob:
            argv.append(f"--glob={args.glob}")
        pattern = ["--regexp", args.pattern]
        argv += [*pattern, "--", rel or "."]
        return await run_blocking(self._run_rg, argv, pattern, rel, args, ctx)

    def _unsaved_matches(
        self, binary: str, pattern: list[str], rel: str, args: Args, ctx: ToolContext
    ) -> dict[str, list[str]]:
        """`number:text` lines matching in the unsaved editor text of files in scope
        (an editor's open documents; nothing in training), searched by ripgrep too."""
        ws = ctx.workspace
        found: dict[str, list[str]] = {}
        flags = ["--line-number", "--no-filename", "--color=never", "--no-config"]
        flags += ["--max-columns=2000", *(["--ignore-case"] if args.ignore_case else [])]
        for path, data in sorted(ws.unsaved().items()):
            if rel and path != rel and not path.startswith(rel + "/"):
                continue
            if args.glob and not glob_matches(args.glob, path):
                continue
            if not ws.is_visible(path, False) or b"\x00" in data[:8192]:
                continue
            done = subprocess.run(
                [binary, *flags, *pattern, "-"],
                input=data,
                capture_output=True,
                timeout=self.TIMEOUT_S,
            )
            if done.returncode not in (0, 1):
                message = done.stderr.decode("utf-8", "replace").strip()
                raise ToolError(f"ripgrep rejected the search: {message[:1500]}")
            found[path] = done.stdout.decode("utf-8", "replace").splitlines()
        return found

    def _run_rg(
        self, argv: list[str], pattern: list[str], rel: str, args: Args, ctx: ToolContext
    ) -> str:
        limit = args.max_results or 100
        ws = ctx.workspace
        unsaved = self._unsaved_matches(argv[0], pattern, rel, args, ctx)
        # Matches in unsaved text replace the file's matches on disk, in path order.
        waiting = sorted(unsaved, key=lambda path: path.split("/"), reverse=True)
        try:
            # Confined like a command, so what ripgrep opens is what a command could:
            # a file swapped for a symlink to a secret mid-walk reads as /dev/null.
            process = subprocess.Popen(
                ctx.sandbox.confine(argv),
                cwd=ws.root,
                env=ctx.sandbox.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise ToolError(f"could not start ripgrep: {exc.strerror}") from None
        # A search over a huge tree must not hang the turn.
        watchdog = threading.Timer(self.TIMEOUT_S, process.kill)
        watchdog.start()
        shown: list[str] = []
        more = 0
        visible: dict[str, bool] = {}

        def add(path: str, rest: str) -> bool:
            """Show one match; False once there are enough to say "many"."""
            nonlocal more
            if len(shown) >= limit:
                more += 1
                return more <= 10_000
            number, _, text = rest.partition(":")
            if len(text) > self.MAX_LINE:
                text = text[: self.MAX_LINE] + " [...]"
            shown.append(f"{path}:{number}:{text}")
            return True

        def add_unsaved(before: str | None) -> bool:
            while waiting and (before is None or waiting[-1].split("/") < before.split("/")):
                path = waiting.pop()
                if not all(add(path, rest) for rest in unsaved[path]):
                    return False
            return True

        assert process.stdout is not None
        try:
            for raw in process.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                path, sep, rest = line.partition("\0")
                if not sep:
                    continue
                path = path.removeprefix("./")
                if path in unsaved:
                    continue
                if path not in visible:
                    visible[path] = ws.is_visible(path, False)
                if not visible[path]:
                    continue
                if not add_unsaved(path) or not add(path, rest):
                    break  # enough to say "many"; stop reading
            add_unsaved(None)
        finally:
            watchdog.cancel()
            process.kill()
            _, stderr = process.communicate(timeout=30)
        message = stderr.decode("utf-8", "replace").strip()
        if process.returncode not in (0, 1, -9) and not shown and message:
            raise ToolError(f"ripgrep rejected the search: {message[:1500]}")
        if not shown:
            return (
                f"No matches for {args.pattern!r}"
                + (f" in {args.path}" if args.path != "." else "")
                + "."
            )
        if more:
            shown.append(
                f"[... {'over 10000' if more > 10_000 else more} more matching lines not shown; "
                "narrow the pattern, path or glob, or raise max_results]"
            )
        return "\n".join(shown)


class CodebaseSearch(Tool):
    """Search the codebase by meaning: "where do we parse the config file?".

    Returns the most relevant code chunks with their paths and line ranges. Use grep
    for exact text.
    """

    name = "codebase_search"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        query: Annotated[str, Meta(description="what you are looking for, in plain words")]
        paths: Annotated[
            list[str] | None,
            Meta(description="only search under these paths or globs (one per line)"),
        ] = None
        limit: Annotated[
            Annotated[int, Meta(ge=1, le=50)] | None,
            Meta(description="how many results (default 10)"),
        ] = None

    async def run(self, args: Args, ctx: ToolContext) -> str:
        if ctx.index is None:
            raise ToolError(
                "the semantic index is not available in this session; use grep to "
                "search for exact text or file_search to find files by name"
            )
        index = ctx.index
        for path in args.paths or ():
            ctx.workspace.relpath(path)  # WorkspaceError for one outside the workspace
        try:
            hits = await run_blocking(
                lambda: index.search(args.query, paths=args.paths, limit=args.limit or 10)
            )
        except CodeIndexError as exc:
            raise ToolError(f"the semantic index failed: {exc}") from None
        # The index may be stale or built with other rules: what the workspace hides
        # (ignored and secret files) never reaches the model through it either.
        visible: dict[str, bool] = {}
        for hit in hits:
            if hit.path not in visible:
                visible[hit.path] = ctx.workspace.is_visible(hit.path, False)
        hits = [hit for hit in hits if visible[hit.path]]
        if not hits:
            return f"No code found for {args.query!r}."
        blocks = []
        for hit in hits:
            title = f"{hit.path}:{hit.start_line}-{hit.end_line}"
            if getattr(hit, "symbol", None):
                title += f" {hit.symbol}"
            blocks.append(f"{title}\n{hit.snippet.rstrip()}")
        return "\n\n".join(blocks)
