"""The scripted expert: a Policy that solves a task through the normal tools.

It reproduces the failure and looks up the function involved (two parallel calls),
reads the code, fixes it with edit_file, re-runs the failing tests beside a lint
check (parallel again), and explains what it changed. It knows where the bug is (the
task's mutation): that is what makes it an expert. Everything it does goes through
the executor and the tools, so its transcripts are valid demonstrations for the
supervised warm-up, and a task it does not solve is a broken task.

    policy = ExpertPolicy(task, buggy_source=env.workspace.read_bytes(path).decode())
    episode = await run_episode(env, policy)
"""

from __future__ import annotations

import ast
import posixpath
import shlex
from collections.abc import AsyncIterator

from agent.policy import Message, PolicyError
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


class ExpertPolicy:
    def __init__(self, task: Task, buggy_source: str) -> None:
        mutation = task.metadata.mutation
        if mutation is None:
            raise TaskError(f"task {task.id!r} has no mutation for the expert to fix")
        self.task = task
        self.mutation = mutation
        self.old, self.new = fix_edit(buggy_source, mutation)
        self.turns = self._script(buggy_source)
        self.position = 0

    def _script(self, source: str) -> list[str]:
        m, task = self.mutation, self.task
        tests = " ".join(shlex.quote(t) for t in task.fail_to_pass[:MAX_SHOWN_TESTS])
        reproduce = f"{runner_command(task)} -x {tests}"
        found = enclosing_function(source, m.line)
        if found is not None:
            name, first, last = found
            where = f"`{name}`"
            look = tool_call("grep", pattern=rf"def {name}\b", glob="*.py")
        else:
            first, last = m.line, m.line
            where = f"`{m.path}` around line {m.line}"
            words = m.original.strip().splitlines()[0][:60]
            look = tool_call("grep", pattern=words, path=posixpath.dirname(m.path) or ".")
        start, end = max(1, first, m.line - 40), min(last, m.line + 40)
        return [
            "I'll reproduce the failure first and look up the code it exercises.\n\n"
            + tool_call("run_terminal_cmd", command=reproduce)
            + "\n"
            + look,
            f"The failing tests go through {where}. Let me read it.\n\n"
            + tool_call("read_file", path=m.path, start_line=start, end_line=end),
            f"Line {m.line} of `{m.path}` is wrong: it has `{m.mutated.strip()}` where the "
            f"code needs `{m.original.strip()}`. Fixing it.\n\n"
            + tool_call("edit_file", path=m.path, old_string=self.old, new_string=self.new),
            "Now the failing tests again, and a lint check of the file.\n\n"
            + tool_call("run_terminal_cmd", command=reproduce)
            + "\n"
            + tool_call("read_lints", paths=m.path),
            f"Fixed. In `{m.path}` line {m.line}, {where} used `{m.mutated.strip()}` instead "
            f"of `{m.original.strip()}`; with that restored the failing tests "
            f"({', '.join(task.fail_to_pass[:MAX_SHOWN_TESTS])}) pass.",
        ]

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        if self.position >= len(self.turns):
            raise PolicyError("the expert's script is over")
        text = self.turns[self.position]
        self.position += 1
        yield text

    async def aclose(self) -> None:
        return None
