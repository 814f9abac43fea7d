"""The scripted expert: a Policy that solves a task through the normal tools.

It reproduces the failure and looks up the functions involved (parallel calls),
reads the code (one read per file, in parallel), fixes every site with edit_file (in
one turn), re-runs the failing tests beside a lint check (parallel again), and
explains what it changed. For a rename, grep's lines are the reading. It knows where
the bug is (the task's sites): that is what makes it an expert. Everything it does goes through
the executor and the tools, so its transcripts are valid demonstrations for the
supervised warm-up, and a task it does not solve is a broken task.

    policy = ExpertPolicy(task, {path: env.workspace.read_bytes(path).decode()})
    episode = await run_episode(env, policy)
"""

from __future__ import annotations

import ast
import re
import shlex
import textwrap
from collections.abc import AsyncIterator

from agent.policy import Message, PolicyError
from training.tasks.families import fixed_files
from training.tasks.mutate import fix_edit
from training.tasks.taskset import Task, TaskError

MAX_SHOWN_TESTS = 3
# pytest options whose value is the next word (so that word is not a test path)
_VALUE_OPTIONS = frozenset(
    [
        "-p",
        "-o",
        "-k",
        "-m",
        "-c",
        "-W",
        "--rootdir",
        "--ignore",
        "--deselect",
        "--confcutdir",
        "--basetemp",
        "--override-ini",
        "--tb",
        "--junitxml",
        "--import-mode",
        "--log-level",
    ]
)


def tool_call(name: str, **params: object) -> str:
    """One call in the tool-call syntax (DESIGN.md); multi-line values on their own lines."""
    lines = [f'<tool_call name="{name}">']
    for key, value in params.items():
        text = str(value)
        if "\n" in text:
            lines += [f"<{key}>", text, f"</{key}>"]
        else:
            lines.append(f"<{key}>{text}</{key}>")
    lines.append("</tool_call>")
    return "\n".join(lines)


def runner_command(task: Task) -> str:
    """The command that runs chosen tests: the task's test command without its trailing
    test paths, `{python}` spelled `python` (the env puts the task's interpreter first
    on PATH)."""
    words = shlex.split(task.test_command)
    while (
        len(words) > 1
        and not words[-1].startswith("-")
        and words[-1] not in ("pytest", "{python}")
        and words[-2] not in _VALUE_OPTIONS
    ):
        words.pop()
    return shlex.join(words).replace("'{python}'", "python").replace("{python}", "python")


def enclosing_function(source: str, line: int) -> tuple[str, int, int] | None:
    """(name, first line, last line) of the innermost def containing `line`."""
    best = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno >= best[1]):
                best = (node.name, node.lineno, end)
    return best


def _window(source: str, lines: list[int]) -> tuple[int, int]:
    """The lines to read around sites: their enclosing function(s), at most 40 lines
    either side of them; 10 lines either side of a site outside any function."""
    first, last = min(lines) - 10, max(lines) + 10
    for line in (min(lines), max(lines)):
        found = enclosing_function(source, line)
        if found is not None:
            first, last = min(first + 10, found[1]), max(last - 10, found[2])
    return max(1, first, min(lines) - 40), min(last, max(lines) + 40)


def _pattern_for(m) -> str:
    """What to grep for a site outside any function: the names an import brings (where
    they are defined and used), else the words of its line."""
    try:
        tree = ast.parse(textwrap.dedent(m.original or m.mutated))
    except SyntaxError:
        tree = None
    if tree and tree.body and isinstance(tree.body[0], ast.Import | ast.ImportFrom):
        names = [(a.asname or a.name).split(".")[0] for a in tree.body[0].names]
        return r"\b(" + "|".join(names) + r")\b" if len(names) > 1 else rf"\b{names[0]}\b"
    words = (m.original.strip().splitlines() or [m.mutated.strip()])[0][:60]
    return re.escape(words)


class ExpertPolicy:
    """The scripted expert for a task: `sources` holds the buggy text of every file its
    sites are in (the workspace's, at the task's start)."""

    def __init__(self, task: Task, sources: dict[str, str]) -> None:
        sites = task.metadata.sites
        if not sites:
            raise TaskError(f"task {task.id!r} has no fix sites for the expert")
        missing = sorted({m.path for m in sites} - set(sources))
        if missing:
            raise TaskError(f"task {task.id!r}: the expert needs the text of {missing}")
        self.task = task
        self.sites = sites
        self.edits, self.fixes = self._plan(sources)
        self.turns = self._script(sources)
        self.position = 0

    def _plan(self, sources: dict[str, str]):
        """The edit_file calls that undo every site (one per file where a rename's
        replace_all does it exactly, else one per site, each computed on the text the
        previous ones leave), and {path: (buggy, fixed)}."""
        edits: list[dict[str, str]] = []
        fixes: dict[str, tuple[str, str]] = {}
        old_name = self.task.metadata.extra.get("old_name")
        new_name = self.task.metadata.extra.get("new_name")
        for path in dict.fromkeys(m.path for m in self.sites):
            buggy = text = sources[path]
            here = [m for m in self.sites if m.path == path]
            fixed = fixed_files({path: buggy}, here)[path]
            if old_name and new_name and buggy.replace(old_name, new_name) == fixed:
                edits.append({"path": path, "old_string": old_name, "new_string": new_name,
                              "replace_all": "true"})  # fmt: skip
            else:
                for m in here:
                    old, new = fix_edit(text, m)
                    edits.append({"path": path, "old_string": old, "new_string": new})
                    text = text.replace(old, new, 1)
                if text != fixed:
                    raise TaskError(
                        f"task {self.task.id!r}: the expert's edits of {path} do not fix it"
                    )
            fixes[path] = (buggy, fixed)
        return edits, fixes

    def _script(self, sources: dict[str, str]) -> list[str]:
        task, sites = self.task, self.sites
        tests = " ".join(shlex.quote(t) for t in task.fail_to_pass[:MAX_SHOWN_TESTS])
        # Short tracebacks: what the fix needs, in a third of the tokens of the default.
        reproduce = f"{runner_command(task)} -x --tb=short {tests}"
        paths = list(dict.fromkeys(m.path for m in sites))
        old_name = task.metadata.extra.get("old_name")
        looks, places = [], []
        if old_name:
            looks.append(tool_call("grep", pattern=rf"\b{old_name}\b", glob="*.py"))
            places.append(f"the places that still say `{old_name}`")
        else:
            for m in sites:
                found = enclosing_function(sources[m.path], m.line)
                if found is not None:
                    look = tool_call("grep", pattern=rf"def {found[0]}\b", glob="*.py")
                    place = f"`{found[0]}`"
                else:
                    look = tool_call("grep", pattern=_pattern_for(m), glob="*.py")
                    place = f"`{m.path}` around line {m.line}"
                if look not in looks:
                    looks.append(look)
                    places.append(place)
        where = " and ".join(places)
        turns = [
            "I'll reproduce the failure first and look up the code it exercises.\n\n"
            + "\n".join([tool_call("run_terminal_cmd", command=reproduce), *looks])
        ]
        if not old_name:  # grep's lines show every site of a rename: nothing more to read
            reads = []
            for path in paths:
                start, end = _window(sources[path], [m.line for m in sites if m.path == path])
                reads.append(tool_call("read_file", path=path, start_line=start, end_line=end))
            turns.append(f"The failing tests go through {where}. Let me read "
                         f"{'it' if len(reads) == 1 else 'them'}.\n\n" + "\n".join(reads))  # fmt: skip
        turns += [
            self._diagnosis() + "\n\n" + "\n".join(tool_call("edit_file", **e) for e in self.edits),
            "Now the failing tests again, and a lint check of "
            f"{'the file' if len(paths) == 1 else 'the files'}.\n\n"
            + tool_call("run_terminal_cmd", command=reproduce)
            + "\n"
            + tool_call("read_lints", paths="\n".join(paths)),
            "Fixed. " + self._summary(),
        ]
        return turns

    def _diagnosis(self) -> str:
        extra = self.task.metadata.extra
        if extra.get("old_name"):
            files = sorted({m.path for m in self.sites})
            return (f"`{extra['old_name']}` is still used under its old name in "
                    f"{', '.join(f'`{f}`' for f in files)}. Renaming it there.")  # fmt: skip
        parts = []
        for m in self.sites:
            if m.mutated.strip():
                parts.append(f"line {m.line} of `{m.path}` has `{m.mutated.strip()}` where the "
                             f"code needs `{m.original.strip()}`")  # fmt: skip
            else:
                parts.append(f"`{m.path}` lacks `{m.original.strip()}` (line {m.line})")
        text = "; ".join(parts) + ". Fixing " + ("it." if len(parts) == 1 else "both.")
        return text[:1].upper() + text[1:]

    def _summary(self) -> str:
        tests = ", ".join(self.task.fail_to_pass[:MAX_SHOWN_TESTS])
        extra = self.task.metadata.extra
        if extra.get("old_name"):
            done = f"`{extra['old_name']}` is now `{extra['new_name']}` at every call site"
        else:
            done = "; ".join(
                f"in `{m.path}` line {m.line}, `{m.mutated.strip()}` is `{m.original.strip()}` again"
                if m.mutated.strip() else f"`{m.path}` has `{m.original.strip()}` back"
                for m in self.sites
            )  # fmt: skip
        return f"{done[:1].upper()}{done[1:]}; the failing tests ({tests}) pass."

    @property
    def edit_turn(self) -> int:
        """The index of the turn that edits (the turns before it only look)."""
        return next(i for i, t in enumerate(self.turns) if '<tool_call name="edit_file">' in t)

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        if self.position >= len(self.turns):
            raise PolicyError("the expert's script is over")
        text = self.turns[self.position]
        self.position += 1
        yield text

    async def aclose(self) -> None:
        return None
