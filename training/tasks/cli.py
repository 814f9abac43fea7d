"""`tachy tasks`: build, check and list RL task sets.

    tachy tasks build --pypi toolz==1.2.0 jmespath==1.1.0 --max-tasks 50 --out tasks/
    tachy tasks build --synthetic 20 --seed 1 --max-tasks 5 --out tasks/
    tachy tasks build --synthetic 20 --families all --max-tasks 2 --out tasks/
    tachy tasks check tasks/ [--json] [--limit N]
    tachy tasks list tasks/
    tachy tasks split runs/tasks-train runs/tasks-heldout --out split.json

Progress and summaries go to stderr; `check --json` prints one JSON document on stdout.
Exit codes: 0 done, 1 a task failed its check (or a build gave no task), 2 bad usage
or an unusable set directory, 130 interrupted.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agent.cliargs import command_group, path_arg
from training.tasks.families import FamilyError, family_help, parse_families
from training.tasks.pypi import DEFAULT_PROJECTS  # stdlib only: building the parser stays cheap


def add_parsers(commands: argparse._SubParsersAction) -> None:
    sub = command_group(
        commands,
        "tasks",
        help="build, check and list RL task sets",
        description=(
            "Build RL tasks by injecting bugs into real projects (only bugs their own tests "
            "catch are kept), re-check a set, or list it."
        ),
    )
    build = sub.add_parser(
        "build",
        help="build tasks from PyPI projects, synthetic repositories or local directories",
        description=(
            "Build tasks into DIR: each project's clean test suite is run, mutants of its "
            "source are tested, and every mutant that breaks a passing test becomes a task "
            "(appended to DIR/tasks.jsonl as soon as it is validated; DIR/build.json keeps "
            "the figures). Re-running into the same DIR resumes: tasks already there are "
            "kept and not duplicated. PyPI projects are downloaded as source distributions "
            "and installed into DIR/envs/."
        ),
    )
    what = build.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--pypi",
        nargs="+",
        metavar="SPEC",
        help="PyPI projects, e.g. toolz==1.2.0 (pin versions for a reproducible set); "
        f"'default' means {' '.join(DEFAULT_PROJECTS)}",
    )
    what.add_argument(
        "--synthetic", type=int, metavar="N", help="N generated repositories (seeds S, S+1, ...)"
    )
    what.add_argument(
        "--local",
        nargs="+",
        type=path_arg,
        metavar="PATH",
        help="local project directories (pytest tests)",
    )
    build.add_argument(
        "--out",
        required=True,
        type=path_arg,
        metavar="DIR",
        help="the task set directory (anywhere, /tmp included: the test sandbox sees it "
        "read-only at its own path)",
    )
    build.add_argument(
        "--families",
        default="mutation",
        metavar="F,...|all",
        help="which kinds of bug to build, comma-separated, or 'all' (default mutation). "
        f"Easiest first: {family_help()}",
    )
    build.add_argument(
        "--max-tasks",
        type=int,
        default=20,
        metavar="N",
        help="tasks per project and family (default 20)",
    )
    build.add_argument(
        "--seed", type=int, default=0, metavar="S", help="picks the mutations (and synthetic repos)"
    )
    build.add_argument(
        "--templates",
        choices=("all", "train", "heldout"),
        default="all",
        help="synthetic repositories from this part of the template bank: 'train' and "
        "'heldout' share no template, so sets built from them share no code (default all)",
    )
    build.add_argument(
        "--mutants-per-project",
        type=int,
        metavar="M",
        help="candidate bugs to try at most per project and family (default: 5 x --max-tasks)",
    )
    build.add_argument(
        "--workers", type=int, default=2, metavar="N", help="test runs at once (default 2)"
    )
    build.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds one run of a clean suite may take; slower projects are skipped (default 300)",
    )
    build.add_argument("--quiet", action="store_true", help="no progress on stderr")

    check = sub.add_parser(
        "check",
        help="re-validate every task of a set",
        description=(
            "Re-run each task's tests: with its bug fixed (the clean repository, or a finished "
            "rename) its FAIL_TO_PASS and PASS_TO_PASS tests must pass; with its bug, exactly "
            "its FAIL_TO_PASS tests (of those passing fixed) must fail. Exit 1 when any task "
            "fails the check."
        ),
    )
    check.add_argument("dir", type=path_arg, metavar="DIR")
    check.add_argument("--json", action="store_true", help="print the verdicts as JSON on stdout")
    check.add_argument("--limit", type=int, metavar="N", help="check only the first N tasks")
    check.add_argument("--workers", type=int, default=2, metavar="N", help="tasks checked at once")

    listing = sub.add_parser("list", help="one line per task", description="List a task set.")
    listing.add_argument("dir", type=path_arg, metavar="DIR")

    split = sub.add_parser(
        "split",
        help="check and record that a held-out set shares no project with a training set",
        description=(
            "Compare a training and a held-out task set: the projects and sources of each, "
            "the ones they share (there must be none: a held-out task from a training "
            "project measures memory, not skill) and the share of held-out source lines "
            "found verbatim in training repositories. Prints the record as JSON (and writes "
            "it to --out); exit 1 when a project is in both."
        ),
    )
    split.add_argument("train", type=path_arg, metavar="TRAIN_DIR")
    split.add_argument("heldout", type=path_arg, metavar="HELDOUT_DIR")
    split.add_argument("--out", type=path_arg, metavar="FILE", help="write the record here too")

    demos = sub.add_parser(
        "demos",
        help="run the scripted expert on every task: end-to-end validation + demonstrations",
        description=(
            "Work each task with the scripted expert through the agent executor and the "
            "real tools, in sandboxes from the environment server, and score it with the "
            "task's tests. Solved runs are written to --out (JSONL: the conversation the "
            "policy saw, and the transcript events) for the supervised warm-up; unsolved "
            "tasks are listed with the reason. Exit 1 when any task is not solved."
        ),
    )
    demos.add_argument("dir", type=path_arg, metavar="DIR")
    demos.add_argument(
        "--out", required=True, type=path_arg, metavar="FILE", help="demonstrations (JSONL)"
    )
    demos.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    demos.add_argument("--workers", type=int, default=2, metavar="N", help="rollouts at once")


def run(args: argparse.Namespace) -> int:
    try:
        if args.tasks_command == "build":
            return run_build(args)
        if args.tasks_command == "check":
            return run_check(args)
        if args.tasks_command == "demos":
            return run_demos(args)
        if args.tasks_command == "split":
            return run_split(args)
        return run_list(args)
    except KeyboardInterrupt:
        print("tachy: interrupted (tasks already written stay valid)", file=sys.stderr)
        return 130


def _err(message: str) -> int:
    print(f"tachy: {message}", file=sys.stderr)
    return 2


# ------------------------------------------------------------------ build
def run_build(args: argparse.Namespace) -> int:
    from training.tasks.build import (
        BuildError,
        BuildOptions,
        LocalSource,
        PypiSource,
        SyntheticSource,
        build_tasks,
    )

    if args.max_tasks < 1 or args.workers < 1 or args.timeout <= 0:
        return _err("--max-tasks and --workers must be at least 1, --timeout positive")
    if args.mutants_per_project is not None and args.mutants_per_project < 1:
        return _err("--mutants-per-project must be at least 1")
    if args.synthetic is not None and args.synthetic < 1:
        return _err("--synthetic must be at least 1")
    if args.templates != "all" and args.synthetic is None:
        return _err("--templates chooses synthetic repositories: give it with --synthetic")
    try:
        chosen = parse_families(args.families)
    except FamilyError as exc:
        return _err(f"--families: {exc}")
    if args.pypi:
        specs = [
            s for spec in args.pypi for s in (DEFAULT_PROJECTS if spec == "default" else [spec])
        ]
        sources = [PypiSource(spec) for spec in specs]
    elif args.local:
        sources = [LocalSource(p) for p in args.local]
    else:
        sources = [SyntheticSource(args.seed + i, args.templates) for i in range(args.synthetic)]
    options = BuildOptions(
        max_tasks=args.max_tasks,
        mutants_per_project=args.mutants_per_project,
        timeout_s=args.timeout,
        workers=args.workers,
        seed=args.seed,
        families=chosen,
    )
    started = time.monotonic()

    def log(message: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:6.0f}s] {message}", file=sys.stderr, flush=True)

    command = shlex.join(["tachy", *sys.argv[1:]]) if sys.argv else "tachy tasks build"
    out = args.out
    try:
        record = build_tasks(sources, out, options, command=command, log=log)
    except BuildError as exc:
        return _err(str(exc))
    minutes = (time.monotonic() - started) / 60
    total = 0
    print(f"\nbuilt into {out} in {minutes:.1f} min:", file=sys.stderr)
    for name, figures in record.projects.items():
        total += figures.tasks
        if figures.skipped and not figures.tasks:
            print(f"  {name}: skipped: {figures.skipped}", file=sys.stderr)
            continue
        tried = figures.mutations_tried
        rate = figures.mutations_validated / tried if tried else 0.0
        print(
            f"  {name}: {figures.tasks} tasks, {figures.mutations_validated}/{tried} candidates "
            f"validated ({rate:.0%}), suite {figures.suite_passing}/{figures.suite_tests} "
            f"passing in {figures.suite_seconds:.1f} s, {figures.seconds / 60:.1f} min",
            file=sys.stderr,
        )
        for family, part in figures.families.items():
            said = f"skipped: {part.skipped}" if part.skipped else f"{part.tasks} tasks"
            print(f"    {family}: {said} ({part.validated}/{part.tried} kept)", file=sys.stderr)
    print(f"  {total} tasks in {out / 'tasks.jsonl'}", file=sys.stderr)
    return 0 if total else 1


# ------------------------------------------------------------------ check
@dataclass
class Verdict:
    id: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def check_task_runs(directory: Path, task) -> Verdict:
    """Run a task's suite with its bug fixed and with its bug (a
    training.tasks.taskset.Task)."""
    from agent.sandbox import SandboxConfig
    from training.env.testrun import run_tests_in
    from training.tasks.families import fixed_files
    from training.tasks.mutate import MutationError
    from training.tasks.taskset import task_repo_dir, task_test_command

    started = time.monotonic()
    verdict = Verdict(task.id, ok=True)
    repo = task_repo_dir(directory, task)
    problems = verdict.problems
    if not repo.is_dir():
        problems.append(f"its repository {task.repo} is missing")
    if task.env and not (directory / task.env / "bin" / "python").exists():
        problems.append(f"its environment {task.env} is missing")
    for rel in [*task.files, *task.test_files]:
        if repo.is_dir() and not (repo / rel).is_file():
            problems.append(f"{rel} is not in {task.repo}")
    if problems:
        verdict.ok = False
        return verdict
    command = task_test_command(directory, task)
    # The set (its environments) read-only at its own path: visible under /tmp too.
    config = SandboxConfig(read_only_paths=[str(directory)])
    listed = set(task.fail_to_pass) | set(task.pass_to_pass)
    with tempfile.TemporaryDirectory(prefix=f"tachy-check-{task.id}-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(repo, work)
        # Fixed: the snapshot with every site undone (a finished rename, for one).
        try:
            fixed = fixed_files(task.files, task.metadata.sites)
        except MutationError as exc:
            problems.append(f"its fix sites do not match its files ({exc})")
            fixed = {}  # judged against the snapshot, so the test runs still say more
        for rel, text in fixed.items():
            (work / rel).write_text(text, encoding="utf-8")
        clean = run_tests_in(work, command, timeout_s=task.timeout_s, config=config)
        if clean.timed_out:
            problems.append(f"the fixed suite did not finish in {task.timeout_s:.0f} s")
        not_passing = sorted(t for t in listed if not clean.passed(t))
        if not_passing:
            problems.append(f"fixed repository: {_few(not_passing)} do not pass")
        for rel, text in task.files.items():
            (work / rel).write_text(text, encoding="utf-8")
        buggy = run_tests_in(work, command, timeout_s=task.timeout_s, config=config)
        if buggy.timed_out:
            problems.append(f"the buggy suite did not finish in {task.timeout_s:.0f} s")
        still = sorted(t for t in task.fail_to_pass if buggy.passed(t))
        if still:
            problems.append(f"with the bug: FAIL_TO_PASS {_few(still)} pass")
        broken = sorted(t for t in task.pass_to_pass if not buggy.passed(t))
        if broken:
            problems.append(f"with the bug: PASS_TO_PASS {_few(broken)} fail")
        extra = sorted(
            t for t in clean.passing if not buggy.passed(t) and t not in task.fail_to_pass
        )
        if extra:
            problems.append(f"with the bug: {_few(extra)} fail too but are not FAIL_TO_PASS")
    verdict.ok = not problems
    verdict.seconds = round(time.monotonic() - started, 1)
    return verdict


def _few(tests: list[str], shown: int = 3) -> str:
    head = ", ".join(tests[:shown])
    return head + (f" and {len(tests) - shown} more" if len(tests) > shown else "")


def run_check(args: argparse.Namespace) -> int:
    import json

    from training.tasks.taskset import TaskError, load_tasks

    directory = args.dir.resolve()
    try:
        tasks = load_tasks(directory)
    except TaskError as exc:
        return _err(str(exc))
    if args.limit is not None:
        if args.limit < 1:
            return _err("--limit must be at least 1")
        tasks = tasks[: args.limit]
    if args.workers < 1:
        return _err("--workers must be at least 1")
    verdicts: list[Verdict] = []
    with ThreadPoolExecutor(args.workers) as pool:
        for verdict in pool.map(lambda t: check_task_runs(directory, t), tasks):
            verdicts.append(verdict)
            mark = "ok  " if verdict.ok else "FAIL"
            detail = "" if verdict.ok else ": " + "; ".join(verdict.problems)
            print(f"{mark} {verdict.id} [{verdict.seconds:.1f} s]{detail}", file=sys.stderr)
    failed = [v for v in verdicts if not v.ok]
    print(
        f"{len(verdicts) - len(failed)}/{len(verdicts)} tasks valid"
        + (f"; failing: {', '.join(v.id for v in failed)}" if failed else ""),
        file=sys.stderr,
    )
    if args.json:
        document = {
            "tasks": [asdict(v) for v in verdicts],
            "summary": {"checked": len(verdicts), "valid": len(verdicts) - len(failed)},
        }
        print(json.dumps(document, indent=2))
    return 1 if failed else 0


# ------------------------------------------------------------------- list
def run_list(args: argparse.Namespace) -> int:
    from training.tasks.taskset import TaskError, load_tasks

    try:
        tasks = load_tasks(args.dir)
    except TaskError as exc:
        return _err(str(exc))
    for task in tasks:
        mutation = task.metadata.mutation
        where = f"{mutation.path}:{mutation.line}" if mutation else "-"
        print(f"{task.id}\t{task.metadata.source}\t{where}\t{len(task.fail_to_pass)} failing")
    return 0


# ------------------------------------------------------------------ demos
def run_demos(args: argparse.Namespace) -> int:
    import asyncio

    from training.env.pool import EnvError
    from training.tasks.demos import write_demos
    from training.tasks.taskset import TaskError

    if args.limit is not None and args.limit < 1:
        return _err("--limit must be at least 1")
    if args.workers < 1:
        return _err("--workers must be at least 1")

    def show(task, episode) -> None:
        mark = "ok  " if episode.score.reward == 1.0 else "FAIL"
        shape = episode.shape
        print(
            f"{mark} {task.id} [{episode.seconds:.1f} s, {shape.turns} turns, "
            f"{shape.tool_calls} calls]",
            file=sys.stderr,
        )

    try:
        summary = asyncio.run(
            write_demos(
                args.dir, args.out, limit=args.limit, concurrency=args.workers, on_episode=show
            )
        )
    except (TaskError, EnvError) as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"cannot write {args.out}: {exc.strerror or exc}")
    for task_id, why in sorted(summary.broken.items()):
        print(f"not solved: {task_id}: {why}", file=sys.stderr)
    print(
        f"{summary.solved}/{summary.tasks} tasks solved by the expert in {summary.seconds:.0f} s; "
        f"demonstrations in {args.out}",
        file=sys.stderr,
    )
    return 1 if summary.broken else 0


# ------------------------------------------------------------------ split
def run_split(args: argparse.Namespace) -> int:
    import json

    from training.tasks.split import split_record
    from training.tasks.taskset import TaskError

    try:
        record = split_record(args.train, args.heldout)
    except TaskError as exc:
        return _err(str(exc))
    text = json.dumps(record, indent=2)
    if args.out:
        try:
            args.out.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            return _err(f"cannot write {args.out}: {exc.strerror or exc}")
    print(text)
    if record["shared_projects"]:
        print(
            f"tachy: the sets share projects {', '.join(record['shared_projects'])}: "
            "not a held-out split",
            file=sys.stderr,
        )
        return 1
    print(
        f"{record['heldout']['tasks']} held-out tasks from {len(record['heldout']['projects'])} "
        f"projects, none in training ({record['train']['tasks']} tasks, "
        f"{len(record['train']['projects'])} projects); "
        f"{record['shared_line_share']:.1%} of held-out source lines also occur in training",
        file=sys.stderr,
    )
    return 0
