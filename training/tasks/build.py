"""Building a task set: real repositories, bugs injected at the text level, kept only
when the project's own tests catch them.

For each source (a PyPI project, a synthetic repository, a local directory):

1. prepare it: a clean snapshot in DIR/repos/NAME and, for PyPI, an environment in
   DIR/envs/NAME (training.tasks.pypi, training.tasks.synthetic);
2. run its suite twice on a scratch copy; the tests passing both times are the
   candidates (a suite that hangs or passes fewer than MIN_PASSING_TESTS skips the
   project, with the reason; tests slower than SLOW_TEST_S are deselected);
3. for each chosen family (training.tasks.families: misspelled names, removed imports,
   ... up to the mutation operators of training.tasks.mutate), sample candidate bugs
   and run the suite on each: it becomes a task when at least one candidate test now
   fails. Those are FAIL_TO_PASS; candidates passing on the bug are PASS_TO_PASS (at
   most P2P_LIMIT of them: the failing tests' own files first, then a deterministic
   sample; metadata.extra["pass_to_pass_total"] says how many there were). A family
   with no site in a project, or none its tests catch, is recorded and skipped;
4. write the instruction from the failing tests' output (training.tasks.instruction) and
   append the task to DIR/tasks.jsonl at once, so an interrupted build keeps it.

`max_tasks` counts per project and family. Candidates run on `workers` threads, each
with its own scratch copy; tasks are numbered per family in sampling order whatever
finishes first, so ids ("<project>-<n>" for mutations, "<project>-<family>-<n>"
otherwise) are stable across rebuilds. Re-running into the same DIR resumes: a bug that
already has a task is not tried again, numbering continues, and a family already at
max_tasks is left alone. DIR/build.json (BuildRecord) is rewritten as each project
progresses.

    options = BuildOptions(max_tasks=20, families=["misspelled_name", "mutation"])
    record = build_tasks([PypiSource("toolz==1.2.0")], Path("tasks"), options)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import random
import re
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from agent.sandbox import SandboxConfig
from training.env.testrun import TestReport, run_tests_in
from training.tasks import families, mutate
from training.tasks.instruction import write_instruction
from training.tasks.pypi import Project, ProjectSkip, find_layout, prepare_local, prepare_pypi
from training.tasks.taskset import (
    BUILD_FILE,
    TASKS_FILE,
    BuildRecord,
    FamilyBuild,
    Mutation,
    ProjectBuild,
    Task,
    TaskError,
    TaskMeta,
    append_tasks,
    load_tasks,
)

P2P_LIMIT = 300
LOCK_FILE = ".build.lock"
FOCUS_TESTS = 2  # failing tests rerun alone for the instruction's traceback
MIN_PASSING_TESTS = 5  # a project passing fewer gives too narrow tasks
SLOW_TEST_S = 2.0  # clean tests slower than this are left out of a task's command


class BuildError(Exception):
    """A build that cannot start or go on (the set directory is unusable or busy)."""


@dataclass
class BuildOptions:
    max_tasks: int = 20  # per project
    mutants_per_project: int | None = None  # None: 5 * max_tasks
    timeout_s: float = 300.0  # one run of a clean suite
    workers: int = 2
    seed: int = 0  # which mutations are sampled
    p2p_limit: int = P2P_LIMIT
    families: list[str] = field(default_factory=lambda: ["mutation"])  # families.FAMILIES

    @property
    def mutants(self) -> int:
        return self.mutants_per_project or 5 * self.max_tasks


@dataclass(frozen=True)
class PypiSource:
    spec: str  # "toolz==1.2.0"

    def prepare(self, out: Path, log: Callable[[str], None]) -> Project:
        return prepare_pypi(self.spec, out, log)

    def __str__(self) -> str:
        return f"pypi:{self.spec}"


@dataclass(frozen=True)
class SyntheticSource:
    seed: int
    templates: str = "all"  # which part of the template bank (synthetic.TEMPLATE_BANKS)

    @property
    def name(self) -> str:
        part = "" if self.templates == "all" else f"{self.templates}-"
        return f"synthetic-{part}{self.seed}"

    def prepare(self, out: Path, log: Callable[[str], None]) -> Project:
        from training.tasks import synthetic  # only synthetic builds need it

        name = self.name
        repo = out / "repos" / name
        if not repo.is_dir():
            # Generated beside its place and moved in whole: an interrupted build never
            # leaves half a repository that a resumed one would take as done.
            partial = out / "repos" / f".{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            try:
                synthetic.generate_repo(self.seed, partial, self.templates)
            except synthetic.SyntheticError as exc:
                shutil.rmtree(partial, ignore_errors=True)
                raise ProjectSkip(str(exc)) from None
            os.replace(partial, repo)
        layout = find_layout(repo)
        command = synthetic.TEST_COMMAND
        # The same command without -q and its test directory, for focused reruns.
        paths = " " + " ".join(layout.test_paths)
        base = command.removesuffix(paths).replace(" -q", "", 1) if command.endswith(paths) else ""
        return Project(
            name=name,
            source=str(self),
            repo=repo,
            test_command=command,
            pytest_base=base,
            source_files=layout.source_files,
            test_files=layout.test_files,
        )

    def __str__(self) -> str:
        part = "" if self.templates == "all" else f",templates={self.templates}"
        return f"synthetic:seed={self.seed}{part}"


@dataclass(frozen=True)
class LocalSource:
    path: Path
    name: str | None = None

    def prepare(self, out: Path, log: Callable[[str], None]) -> Project:
        return prepare_local(self.path, out, self.name)

    def __str__(self) -> str:
        return f"local:{self.path}"


Source = PypiSource | SyntheticSource | LocalSource


# ------------------------------------------------------------------ the set on disk
class TaskSet:
    """DIR while a build writes it: the tasks already there, build.json, the lock."""

    def __init__(self, out: Path, command: str) -> None:
        out = self.out = Path(out).absolute()  # test runs use it from other directories
        out.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(out / LOCK_FILE, "w")  # noqa: SIM115 (held until close())
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise BuildError(
                f"another build is writing to {out}; wait for it or use another --out"
            ) from None
        self._repair_tail()
        try:
            self.tasks = load_tasks(out) if (out / TASKS_FILE).exists() else []
        except TaskError as exc:
            self.close()
            raise BuildError(f"{exc}; fix or remove it before building into {out}") from None
        self.record = self._load_record(command)
        self._write_lock = threading.Lock()

    def _repair_tail(self) -> None:
        """Drop a last line cut short by a killed build (append_tasks writes whole lines)."""
        path = self.out / TASKS_FILE
        if not path.exists():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(path, "r+b") as handle:
                handle.truncate(keep)

    def _load_record(self, command: str) -> BuildRecord:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        path = self.out / BUILD_FILE
        if path.exists():
            try:
                record = msgspec.json.decode(path.read_bytes(), type=BuildRecord)
                record.command = command
                return record
            except msgspec.DecodeError:
                pass  # rewritten from scratch; the tasks themselves are intact
        return BuildRecord(command=command, started=now)

    def project_tasks(self, name: str) -> list[Task]:
        return [t for t in self.tasks if t.metadata.project == name]

    def add(self, task: Task) -> None:
        with self._write_lock:
            append_tasks(self.out, [task])
            self.tasks.append(task)

    def save_record(self) -> None:
        path = self.out / BUILD_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_bytes(msgspec.json.format(msgspec.json.encode(self.record)))
        os.replace(tmp, path)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()


# --------------------------------------------------------------------- pipeline
def _sites_key(sites: list[Mutation]) -> tuple:
    return tuple((m.path, m.line, m.original, m.mutated, m.operator) for m in sites)


@dataclass
class _Validated:
    """A variant the tests catch: the run on the bug, the tests it fails, and the
    failing tests the instruction shows (one per site for two-site bugs)."""

    variant: families.Variant
    report: TestReport
    failing: list[str]
    focus: list[str]


def _task_number(task_id: str) -> int:
    tail = task_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _sandbox_config(timeout_s: float, inputs: Path) -> SandboxConfig:
    """The test runs' sandbox: the task set (`inputs`, holding the projects'
    environments) bound read-only at its own path, so a set under /tmp works too."""
    return SandboxConfig(
        max_timeout_s=max(600.0, timeout_s), read_only_paths=[str(inputs.resolve())]
    )


def _failure_summary(report: TestReport) -> str:
    lines = [line for line in report.output.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:])[:300] or f"exit code {report.exit_code}, no output"


class ProjectBuilder:
    """Builds one project's tasks into a TaskSet."""

    def __init__(
        self,
        project: Project,
        tasks: TaskSet,
        options: BuildOptions,
        figures: ProjectBuild,
        log: Callable[[str], None],
    ) -> None:
        self.project = project
        self.set = tasks
        self.options = options
        self.figures = figures
        self.log = log
        self.scratch_root = Path(tempfile.mkdtemp(prefix=f"tachy-build-{project.name}-"))
        self.scratch: queue.Queue[Path] = queue.Queue()
        self.candidate_tests: set[str] = set()

    def close(self) -> None:
        shutil.rmtree(self.scratch_root, ignore_errors=True)

    @contextlib.contextmanager
    def _copy(self) -> Iterator[Path]:
        """A scratch copy of the clean repository (reused between runs)."""
        try:
            path = self.scratch.get_nowait()
        except queue.Empty:
            path = Path(tempfile.mkdtemp(prefix="w", dir=self.scratch_root))
            shutil.copytree(self.project.repo, path, dirs_exist_ok=True)
        try:
            yield path
        finally:
            self.scratch.put(path)

    def _run(
        self, command: str, timeout_s: float, files: dict[str, str] | None = None
    ) -> TestReport:
        python = (
            str(self.set.out.resolve() / self.project.env / "bin" / "python")
            if self.project.env
            else sys.executable
        )
        command = command.replace("{python}", python)
        with self._copy() as path:
            originals = {rel: (path / rel).read_text(encoding="utf-8") for rel in files or {}}
            try:
                for rel, text in (files or {}).items():
                    (path / rel).write_text(text, encoding="utf-8")
                return run_tests_in(
                    path,
                    command,
                    timeout_s=timeout_s,
                    config=_sandbox_config(timeout_s, self.set.out),
                )
            finally:
                for rel, text in originals.items():
                    (path / rel).write_text(text, encoding="utf-8")

    # ---------------------------------------------------------------- clean
    def clean_suite(self) -> tuple[list[str], float]:
        """(tests passing in two clean runs, seconds of one run); ProjectSkip when the
        suite hangs or passes nothing. Tries the project's alternative commands (its
        addopts dropped) when the first one passes nothing. Tests slower than
        SLOW_TEST_S are deselected from the task's command: every mutant runs the
        whole suite, and a few slow tests can dominate it."""
        project, timeout = self.project, self.options.timeout_s
        commands = [(project.test_command, project.pytest_base), *project.alternatives]
        reason = ""
        for command, base in commands:
            timed = _insert_options(command, base, f" --durations=0 --durations-min={SLOW_TEST_S}")
            first = self._run(timed, timeout)
            if first.timed_out:
                raise ProjectSkip(f"its test suite did not finish within {timeout:.0f} s")
            if not first.passing:
                reason = f"no test passed on the clean repository ({_failure_summary(first)})"
                continue
            slow = slow_tests(first.output) & set(first.passing)
            if slow and base and command.startswith(base) and len(slow) * 10 <= len(first.passing):
                options = "".join(f" --deselect {shlex.quote(t)}" for t in sorted(slow))
                command, base = _insert_options(command, base, options), base + options
                self.log(f"{project.name}: {len(slow)} tests over {SLOW_TEST_S} s left out")
            else:
                slow = set()
            second = self._run(command, timeout)
            passing = sorted((set(first.passing) - slow) & set(second.passing))
            flaky = len((set(first.passing) - slow) ^ set(second.passing))
            if flaky:
                self.log(f"{project.name}: {flaky} tests flip between clean runs; left out")
            project.test_command, project.pytest_base = command, base
            self.figures.suite_tests = len(second.outcomes)
            self.figures.suite_passing = len(passing)
            self.figures.suite_seconds = round(second.duration_s, 2)
            if len(passing) < MIN_PASSING_TESTS:
                raise ProjectSkip(
                    f"only {len(passing)} tests pass on the clean repository in two runs "
                    f"(at least {MIN_PASSING_TESTS} needed)"
                )
            return passing, second.duration_s
        raise ProjectSkip(reason)

    # ---------------------------------------------------------------- families
    def project_files(self) -> dict[str, str]:
        """path -> text of the project's source and test files that read as UTF-8."""
        files = {}
        for rel in [*self.project.source_files, *self.project.test_files]:
            try:
                files[rel] = (self.project.repo / rel).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        return files

    def build(self) -> None:
        project, options, figures = self.project, self.options, self.figures
        existing = self.set.project_tasks(project.name)
        for task in existing:
            if task.metadata.source != project.source:
                raise ProjectSkip(
                    f"{self.set.out} already holds tasks of {project.name} from "
                    f"{task.metadata.source}, not {project.source}; build into another directory"
                )
        figures.tasks = len(existing)
        wanted = [
            f for f in options.families
            if sum(t.metadata.family == f for t in existing) < options.max_tasks
        ]  # fmt: skip
        if not wanted:
            self.log(f"{project.name}: already has {len(existing)} tasks; nothing to add")
            return
        passing, seconds = self.clean_suite()
        self.set.save_record()
        self.log(
            f"{project.name}: {figures.suite_passing}/{figures.suite_tests} tests pass "
            f"({seconds:.1f} s per run)"
        )
        self.candidate_tests = set(passing)
        files = self.project_files()
        timeout = min(options.timeout_s, max(20.0, 4 * seconds + 10))
        for family in wanted:
            self.build_family(family, files, timeout)
        if figures.tasks == len(existing):
            reasons = {f: r.skipped for f, r in figures.families.items() if r.skipped}
            figures.skipped = "; ".join(f"{f}: {r}" for f, r in reasons.items()) or "no task"

    def build_family(self, family: str, files: dict[str, str], timeout_s: float) -> None:
        project, options = self.project, self.options
        figures = self.figures.families.setdefault(family, FamilyBuild())
        existing = [t for t in self.set.project_tasks(project.name) if t.metadata.family == family]
        figures.tasks = len(existing)
        done = {_sites_key(t.metadata.sites) for t in existing}
        number = max((_task_number(t.id) for t in existing), default=0)
        sample = families.variants(
            family, files, project.source_files, project.test_files, options.mutants, options.seed
        )
        sample = [v for v in sample if v.key not in done]
        if not sample:
            figures.skipped = f"no {family} site in its source files"
            self.log(f"{project.name}: {family}: {figures.skipped}; going on")
            return
        self.log(f"{project.name}: {family}: trying up to {len(sample)} candidates")

        with ThreadPoolExecutor(max(1, options.workers)) as pool:
            futures: list[Future] = []
            pending = iter(sample)
            # Keep the pool just full, so stopping at max_tasks wastes little work.
            for v in pending:
                futures.append(pool.submit(self.try_variant, v, timeout_s))
                if len(futures) >= 2 * max(1, options.workers):
                    break
            index = 0
            while index < len(futures):
                try:
                    result = futures[index].result()
                except BaseException:  # interrupted: leave the queued candidates unrun
                    for future in futures:
                        future.cancel()
                    raise
                index += 1
                for v in pending:
                    futures.append(pool.submit(self.try_variant, v, timeout_s))
                    break
                figures.tried += 1
                self.figures.mutations_tried += 1
                if result is None:
                    continue
                figures.caught += 1
                task = self.make_task(number + 1, result)
                if task is None:
                    continue
                number += 1
                figures.validated += 1
                self.figures.mutations_validated += 1
                self.set.add(task)
                figures.tasks += 1
                self.figures.tasks += 1
                self.set.save_record()
                self.log(
                    f"{task.id}: {len(task.fail_to_pass)} failing test(s) "
                    f"[{family} {figures.tasks}/{options.max_tasks}, {figures.tried} tried]"
                )
                if figures.tasks >= options.max_tasks:
                    for future in futures[index:]:
                        future.cancel()
                    break
        if figures.tasks == len(existing):
            figures.skipped = (
                f"none of {figures.tried} candidates gave a task ({figures.caught} broke a "
                "passing test; kept only when the failure shows what the family needs: "
                "the literal's value, the failing tests when run alone)"
                if figures.caught
                else f"none of {figures.tried} candidates broke a passing test"
            )
            self.log(f"{project.name}: {family}: {figures.skipped}; going on")

    def try_variant(self, v: families.Variant, timeout_s: float) -> _Validated | None:
        """The variant with its failing tests when the tests catch it: its fixed state
        passes every test the clean repository passes, the bug fails at least one, and
        (two sites) each site alone fails one. None otherwise (or when a run hangs)."""
        command = self.project.test_command
        candidates = self.candidate_tests
        if v.fixed:
            fixed = self._run(command, timeout_s, v.fixed)
            if fixed.timed_out or not candidates <= set(fixed.passing):
                return None  # the "fixed" state is not as good as the clean one
        report = self._run(command, timeout_s, {**v.fixed, **v.buggy})
        if report.timed_out or not report.outcomes:
            return None
        failing = sorted(t for t in candidates if not report.passed(t))
        if not failing:
            return None
        focus = failing[:FOCUS_TESTS]
        if v.family == "two_files":
            focus = []
            for site in v.sites:
                alone = self._run(command, timeout_s, {site.path: v.buggy[site.path]})
                broken = sorted(t for t in candidates if not alone.passed(t))
                if alone.timed_out or not broken:
                    return None  # that site alone goes unnoticed: not a two-file bug
                focus.append(next((t for t in broken if t not in focus), broken[0]))
        return _Validated(v, report, failing, focus)

    def make_task(self, number: int, found: _Validated) -> Task | None:
        project, options = self.project, self.options
        v, report, f2p = found.variant, found.report, found.failing
        name = project.name if v.family == "mutation" else f"{project.name}-{v.family}"
        task_id = f"{name}-{number}"
        files = {**v.fixed, **v.buggy}
        focus = self._focused_output(found.focus, files)
        if focus is None:
            return None  # the failing tests pass when run alone: order-dependent
        output = focus or report.output
        literals = [m for m in v.sites if m.operator == "wrong_literal"]
        if not all(families.literal_shown(m, output) for m in literals):
            return None  # an assertion does not show the literal: not a tier-1 bug
        p2p = sorted(t for t in self.candidate_tests if report.passed(t) and t not in f2p)
        extra: dict[str, str] = {}
        if len(p2p) > options.p2p_limit:
            extra["pass_to_pass_total"] = str(len(p2p))
            p2p = limit_pass_to_pass(p2p, f2p, options.p2p_limit, task_id)
        hide: list[str] = []
        if v.family == "mutation":  # the hard tier: the instruction never shows the line
            m = v.sites[0]
            lines = v.buggy[m.path].splitlines()
            hide = [*lines[m.line - 1 : m.line + m.mutated.count("\n")], m.mutated]
        instruction = write_instruction(
            task_id, found.focus + [t for t in f2p if t not in found.focus], output,
            test_files=project.test_files, hide=hide,
            show_source=v.family != "mutation", intro=v.intro,
        )  # fmt: skip
        seconds = self.figures.suite_seconds
        return Task(
            id=task_id,
            repo=f"repos/{project.name}",
            instruction=instruction,
            test_command=project.test_command,
            fail_to_pass=f2p,
            pass_to_pass=p2p,
            files=files,
            test_files=list(project.test_files),
            env=project.env,
            timeout_s=float(max(120, round(4 * seconds + 60))),
            metadata=TaskMeta(
                source=project.source,
                project=project.name,
                family=v.family,
                sites=v.sites,
                extra=v.extra | extra,
            ),
        )

    def _focused_output(self, tests: list[str], files: dict[str, str]) -> str | None:
        """The output of the failing tests run alone with short tracebacks; None when
        they all pass that way."""
        base = self.project.pytest_base
        if not base:
            return ""
        command = f"{base} -q --tb=short " + " ".join(shlex.quote(t) for t in tests)
        report = self._run(command, min(self.options.timeout_s, 120.0), files)
        if report.timed_out:
            return ""
        if report.outcomes and all(report.passed(t) for t in tests):
            return None
        return report.output


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s (?:call|setup|teardown)\s+(\S.*?)\s*$")


def slow_tests(output: str) -> set[str]:
    """Node ids pytest's --durations report lists at SLOW_TEST_S or more."""
    found = set()
    for line in output.splitlines():
        match = _DURATION.match(line)
        if match and float(match.group(1)) >= SLOW_TEST_S:
            found.add(match.group(2))
    return found


def _insert_options(command: str, base: str, options: str) -> str:
    """command with pytest options added after its base (unchanged if it has none)."""
    if not base or not command.startswith(base):
        return command
    return base + options + command[len(base) :]


def limit_pass_to_pass(p2p: list[str], f2p: list[str], limit: int, seed: str) -> list[str]:
    """At most `limit` PASS_TO_PASS tests: those in the failing tests' files first (a
    sample of them when they alone are too many), the rest sampled deterministically."""
    files = {t.split("::", 1)[0] for t in f2p}
    near = [t for t in p2p if t.split("::", 1)[0] in files]
    far = [t for t in p2p if t.split("::", 1)[0] not in files]
    rng = random.Random(seed)
    if len(near) > limit // 2:
        near = rng.sample(near, limit // 2)
    far = rng.sample(far, min(len(far), limit - len(near)))
    return sorted(near + far)


# ------------------------------------------------------------------- the build
def build_tasks(
    sources: list[Source],
    out: Path,
    options: BuildOptions,
    *,
    command: str = "",
    log: Callable[[str], None] = lambda _: None,
) -> BuildRecord:
    """Build tasks from each source into `out`; the BuildRecord also written to
    out/build.json. A project that fails is recorded with its reason; the others go on."""
    if options.max_tasks < 1 or options.workers < 1 or options.timeout_s <= 0:
        raise BuildError("max_tasks and workers must be at least 1, timeout positive")
    started = time.monotonic()
    task_set = TaskSet(out, command)
    try:
        for source in sources:
            build_one(source, task_set, options, log)
        task_set.record.seconds = round(task_set.record.seconds + time.monotonic() - started, 1)
        task_set.save_record()
        return task_set.record
    finally:
        task_set.close()


def build_one(source: Source, task_set: TaskSet, options: BuildOptions, log) -> ProjectBuild:
    started = time.monotonic()
    figures = ProjectBuild(source=str(source))
    key = str(source)
    task_set.record.projects[key] = figures
    builder = None
    try:
        project = source.prepare(task_set.out, log)
        figures.source = project.source
        del task_set.record.projects[key]
        previous = task_set.record.projects.get(project.name)
        if previous is not None and previous.source == project.source:
            # A resumed build: the figures add up over its runs.
            figures.mutations_tried = previous.mutations_tried
            figures.mutations_validated = previous.mutations_validated
            figures.seconds = previous.seconds
        task_set.record.projects[project.name] = figures
        task_set.save_record()
        builder = ProjectBuilder(project, task_set, options, figures, log)
        builder.build()
    except ProjectSkip as exc:
        figures.skipped = str(exc)
        log(f"{key}: skipped: {exc}")
    except (OSError, UnicodeError, mutate.MutationError) as exc:
        # One broken project must not stop the others; its tasks so far stay valid.
        figures.skipped = f"the build failed: {type(exc).__name__}: {exc}"
        log(f"{key}: {figures.skipped}")
    finally:
        if builder is not None:
            builder.close()
        figures.seconds = round(figures.seconds + time.monotonic() - started, 1)
        task_set.save_record()
    return figures
