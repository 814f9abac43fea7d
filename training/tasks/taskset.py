"""The task format: what one RL task is, and how a task set lies on disk.

    DIR/
      tasks.jsonl        one Task per line (msgspec JSON), in build order
      repos/NAME/        clean repository snapshots, shared by the tasks made from them
      envs/NAME/         virtual environments the tests run with (PyPI projects)
      build.json         how the set was built (command, per-project counts and times)

A task's repository is its snapshot with `files` written over it (the injected bug);
`test_files` are put back to their version at the task's start (the snapshot's, or the
task's own where `files` changes a test, as a rename does) before scoring, so a
rollout cannot pass by editing the tests. Test commands are shell commands run in the
workspace (inside the sandbox); `{python}` in them is the task's interpreter:
DIR/envs/NAME/bin/python for PyPI projects, the interpreter running tachy for
synthetic ones (which need only pytest).

    tasks = load_tasks("tasks/")               # list[Task], checked
    repo = task_repo_dir("tasks/", tasks[0])   # Path of the clean snapshot
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from agent.jsonl import numbered_lines

TASKS_FILE = "tasks.jsonl"
BUILD_FILE = "build.json"


class TaskError(Exception):
    """A task or task set that cannot be used; the message says which and why."""


class Mutation(msgspec.Struct, frozen=True, kw_only=True):
    """One injected bug: `original` (source text at path:line) replaced by `mutated`."""

    operator: str  # see training.tasks.mutate.OPERATORS
    path: str  # repository-relative, "/"-separated
    line: int  # 1-based line where the change starts
    original: str
    mutated: str
    description: str = ""  # e.g. "`<` replaced by `<=`"


class TaskMeta(msgspec.Struct, kw_only=True):
    source: str  # "pypi:more-itertools==10.5.0" or "synthetic:seed=7"
    project: str
    family: str = "mutation"  # training.tasks.families.FAMILIES
    # Where the fix goes: one site, or several (a rename, the same slip in two files).
    # `original` is the fixed text, `mutated` the buggy one, lines in the buggy file.
    sites: list[Mutation] = msgspec.field(default_factory=list)
    extra: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def mutation(self) -> Mutation | None:
        """The first site (the only one for most families)."""
        return self.sites[0] if self.sites else None


class Task(msgspec.Struct, kw_only=True):
    id: str  # unique in its set, stable across rebuilds: "<project>-<n>"
    repo: str  # the snapshot, relative to the set: "repos/NAME"
    instruction: str  # what the user asks, written from the failing tests' output
    test_command: str  # runs the whole suite; {python} is the task's interpreter
    fail_to_pass: list[str]  # pytest node ids failing on the bug, passing once fixed
    pass_to_pass: list[str]  # node ids passing before and after
    files: dict[str, str] = msgspec.field(default_factory=dict)  # path -> buggy text
    test_files: list[str] = msgspec.field(default_factory=list)  # restored before scoring
    setup: list[str] = msgspec.field(default_factory=list)  # commands run before a rollout
    env: str = ""  # "envs/NAME" (relative to the set); "" = the interpreter running tachy
    timeout_s: float = 120.0  # for one run of the test command
    metadata: TaskMeta


class FamilyBuild(msgspec.Struct, kw_only=True):
    """How one family's tasks of a project were built."""

    tried: int = 0  # candidates whose tests were run
    caught: int = 0  # candidates that broke a passing test
    validated: int = 0  # candidates kept as tasks
    tasks: int = 0
    skipped: str = ""  # why the family gave no task here ("" when it did)


class ProjectBuild(msgspec.Struct, kw_only=True):
    """How one project's tasks were built (build.json, and bench/envs.py's figures)."""

    source: str  # "pypi:more-itertools==10.5.0" or "synthetic:seed=7"
    suite_tests: int = 0  # tests in the clean suite
    suite_passing: int = 0  # of them passing on the clean repository
    suite_seconds: float = 0.0  # one clean run of the suite
    mutations_tried: int = 0  # mutants whose tests were run
    mutations_validated: int = 0  # mutants that broke at least one passing test
    tasks: int = 0  # tasks written (validated, within --max-tasks)
    seconds: float = 0.0  # the project's whole build: fetch, install, runs
    skipped: str = ""  # why the project gave no tasks ("" when it did)
    families: dict[str, FamilyBuild] = msgspec.field(default_factory=dict)


class BuildRecord(msgspec.Struct, kw_only=True):
    command: str  # the command line that built the set
    started: str  # ISO time
    seconds: float = 0.0
    projects: dict[str, ProjectBuild] = msgspec.field(default_factory=dict)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Task)


def encode_task(task: Task) -> bytes:
    return _encoder.encode(task)


def check_task(task: Task) -> None:
    """Raise TaskError naming the first thing wrong with a task's fields."""
    where = f"task {task.id!r}"
    if not task.id or "/" in task.id:
        raise TaskError(f"{where}: the id must be non-empty and contain no '/'")
    if not task.fail_to_pass:
        raise TaskError(f"{where}: fail_to_pass is empty (a task must fail before its fix)")
    if set(task.fail_to_pass) & set(task.pass_to_pass):
        raise TaskError(f"{where}: a test is in both fail_to_pass and pass_to_pass")
    if "{python}" not in task.test_command and not task.test_command.strip():
        raise TaskError(f"{where}: test_command is empty")
    for path in [*task.files, *task.test_files, task.repo, task.env]:
        if path.startswith("/") or ".." in Path(path).parts:
            raise TaskError(f"{where}: {path!r} must be a relative path inside the set")
    if task.timeout_s <= 0:
        raise TaskError(f"{where}: timeout_s must be positive")


def load_tasks(directory: str | Path) -> list[Task]:
    """Every task of the set in DIR, checked; TaskError on a missing or corrupt file
    (naming the line)."""
    path = Path(directory) / TASKS_FILE
    lines = numbered_lines(
        path,
        error=TaskError,
        what="task set file",
        missing=f"{path} does not exist: not a task set (build one with tachy tasks build)",
    )
    tasks: list[Task] = []
    seen: set[str] = set()
    for number, line in lines:
        try:
            task = _decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise TaskError(f"{path}:{number}: not a valid task ({exc})") from None
        check_task(task)
        if task.id in seen:
            raise TaskError(f"{path}:{number}: duplicate task id {task.id!r}")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def append_tasks(directory: str | Path, tasks: list[Task]) -> None:
    """Append tasks to DIR/tasks.jsonl (each checked first), flushed line by line so an
    interrupted build keeps what it finished."""
    path = Path(directory) / TASKS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as out:
        for task in tasks:
            check_task(task)
            out.write(encode_task(task) + b"\n")
            out.flush()


def task_repo_dir(directory: str | Path, task: Task) -> Path:
    return Path(directory).resolve() / task.repo


def task_python(directory: str | Path, task: Task) -> str:
    """The interpreter that runs the task's tests (absolute)."""
    if not task.env:
        return sys.executable
    return str(Path(directory).resolve() / task.env / "bin" / "python")


def task_test_command(directory: str | Path, task: Task) -> str:
    return task.test_command.replace("{python}", task_python(directory, task))
