"""`tachy eval TASKS --policy SPEC`: a policy's pass@1 (and pass@K) on a task set.

    tachy eval runs/tasks-heldout --policy local: --json > eval.json
    tachy eval runs/tasks-heldout --policy local:runs/sft --attempts 4 --temperature 0.7
    tachy eval runs/tasks-heldout --policy local: --resume        # after a Ctrl-C
    tachy eval runs/tasks-heldout --policy local: --teacher-forced --turns edit \
        --attempts 8 --temperature 1                                # can it make the fix?

Progress on stderr (a line per attempt, then the summary); `--json` prints one JSON
document on stdout (tachy.eval.run.summarize). Results go to --results as they finish.
Exit codes: 0 every attempt scored, 1 some could not be scored (the policy failed:
they are listed, not counted as failures), 2 bad usage or an unusable task set,
130 interrupted (the results so far are kept; --resume continues).

This module imports only the standard library at import time (the parser must stay
cheap for `tachy --help`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agent.cliargs import path_arg


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "eval",
        help="a policy's solve rate (pass@k with intervals) on a task set",
        description=(
            "Run a policy on every task of TASKS (a `tachy tasks build` set) through the "
            "environment server and the agent executor, as in training, score each attempt "
            "with the task's tests, and report pass@1 (and pass@K) with 95% bootstrap "
            "intervals over tasks, per project, and the shape of the runs: well-formed "
            "calls, turns, tool calls, parallel calls per turn, reads and searches before "
            "the first edit, tokens and seconds. Attempts whose policy failed (a model "
            "server that died) are kept apart, not counted as failures."
        ),
    )
    p.add_argument("tasks", type=path_arg, metavar="TASKS", help="the task set directory")
    p.add_argument(
        "--policy",
        required=True,
        metavar="SPEC",
        help="local:[DIR] (our model), openai:BASE_URL#MODEL, or replay:FILE.jsonl",
    )
    p.add_argument(
        "--attempts", type=int, default=1, metavar="K", help="attempts per task (default 1)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="attempts at once (default 1; a local model decodes them together)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    p.add_argument(
        "--per-family",
        type=int,
        metavar="N",
        help="only the first N tasks of each family (then --limit, if given)",
    )
    p.add_argument(
        "--max-turns",
        type=int,
        metavar="N",
        help="turns per attempt (default: the task family's budget, 6 for the easiest "
        "families and 8 for two_files and mutation; 10 for a task of no known family)",
    )
    p.add_argument("--max-tokens", type=int, metavar="N", help="tokens per turn (policy's default)")
    p.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        help="sampling temperature (default: the policy's; local: is greedy, so use T > 0 "
        "with --attempts above 1)",
    )
    p.add_argument(
        "--timeout", type=float, default=1800.0, metavar="S", help="seconds per attempt (1800)"
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="sampling seeds (default 0)")
    p.add_argument(
        "--results",
        type=path_arg,
        metavar="FILE",
        help="where attempts are kept (JSONL; default: eval-TASKSNAME.jsonl here)",
    )
    p.add_argument(
        "--transcripts",
        type=path_arg,
        metavar="DIR",
        help="write each attempt's events to DIR/TASK.ATTEMPT.jsonl (to read why runs fail)",
    )
    p.add_argument("--resume", action="store_true", help="continue the evaluation in --results")
    p.add_argument(
        "--teacher-forced",
        action="store_true",
        help="instead of free runs: let the scripted expert solve each task and score the "
        "policy's next turn at each of the expert's turns (well formed, same tools, same "
        "calls, the edit that fixes); minutes instead of an hour, no solve rate. "
        "--attempts K samples each turn K times (needs --temperature above 0) and adds the "
        "share of tasks where any of the K edits fixes",
    )
    p.add_argument(
        "--turns",
        metavar="WHICH",
        help="with --teacher-forced: which of the expert's turns to ask: 'edit' or indices "
        "like 0,2 (default: all)",
    )
    p.add_argument(
        "--against",
        type=path_arg,
        metavar="FILE",
        help="another evaluation's results (a --results file, e.g. of the model before "
        "training): report the change in pass@1 over the tasks both scored, overall and "
        "per family, with paired 95%% intervals",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def _err(message: str) -> int:
    print(f"tachy: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    for name in ("attempts", "workers"):
        if getattr(args, name) < 1:
            return _err(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("limit", "max_tokens", "max_turns", "per_family"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            return _err(f"--{name.replace('_', '-')} must be at least 1")
    if args.timeout <= 0 or (args.temperature is not None and args.temperature < 0):
        return _err("--timeout must be positive and --temperature 0 or more")
    if args.teacher_forced:
        return run_teacher_forced(args)
    if args.turns:
        return _err("--turns goes with --teacher-forced only")
    import asyncio

    from training.eval.run import EvalSettings, compare_attempts, load_results, run_eval, summarize
    from training.tasks.taskset import TaskError

    results: Path = args.results or Path.cwd() / f"eval-{args.tasks.name}.jsonl"
    baseline = None
    if args.against is not None:  # read before anything runs: a bad file costs nothing
        try:
            baseline_settings, baseline = load_results(args.against)
        except TaskError as exc:
            return _err(str(exc))
        if baseline_settings is None:
            return _err(f"--against {args.against}: no such results file, or it is empty")
        if args.against.resolve() == results.resolve():
            return _err("--against names this evaluation's own --results file")
    settings = EvalSettings(
        taskset=str(args.tasks.resolve()), policy=args.policy, attempts=args.attempts,
        max_turns=args.max_turns, max_tokens=args.max_tokens, temperature=args.temperature,
        timeout_s=args.timeout, seed=args.seed, limit=args.limit, per_family=args.per_family,
    )  # fmt: skip
    started = time.monotonic()

    def show(attempt, done: int, total: int) -> None:
        mark = {"solved": "ok  ", "failed": "FAIL", "unscored": "----"}[attempt.status]
        tokens = f", {attempt.tokens} tokens" if attempt.tokens is not None else ""
        why = f": {attempt.error}" if attempt.status == "unscored" else ""
        print(
            f"[{done}/{total} {time.monotonic() - started:5.0f}s] {mark} {attempt.task_id} "
            f"#{attempt.attempt} ({attempt.stop_reason}, {attempt.turns} turns, "
            f"{attempt.tool_calls} calls{tokens}, {attempt.seconds:.0f} s){why}",
            file=sys.stderr,
            flush=True,
        )

    print(f"tachy eval: {args.policy} on {args.tasks}; results in {results}", file=sys.stderr)
    try:
        attempts = asyncio.run(
            run_eval(
                settings,
                results,
                workers=args.workers,
                resume=args.resume,
                on_attempt=show,
                transcripts=args.transcripts,
            )
        )
    except TaskError as exc:
        return _err(str(exc))
    except KeyboardInterrupt:
        print(
            f"tachy: interrupted; the attempts that finished are kept in {results} "
            "(--resume continues)",
            file=sys.stderr,
        )
        return 130
    report = {"settings": {**_builtins(settings), "results": str(results)}}
    report |= summarize(attempts, k=args.attempts)
    if baseline is not None:
        report["against"] = {"results": str(args.against)} | compare_attempts(baseline, attempts)
    print(human(report, args.attempts), file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    return 1 if report["unscored_attempts"] else 0


def run_teacher_forced(args: argparse.Namespace) -> int:
    """`tachy eval --teacher-forced`: training/eval/turns.py."""
    unused = [
        flag for flag, value in (
            ("--resume", args.resume), ("--results", args.results),
            ("--transcripts", args.transcripts),
        ) if value
    ]  # fmt: skip
    if unused:
        verb = "does" if len(unused) == 1 else "do"
        return _err(f"{', '.join(unused)} {verb} not go with --teacher-forced (no free runs)")
    if args.attempts > 1 and not args.temperature:
        return _err("--attempts above 1 needs --temperature above 0 (greedy samples are all alike)")
    import asyncio

    import msgspec

    from training.eval.turns import parse_turns, probe_turns, summarize_turns
    from training.tasks.taskset import TaskError

    try:
        parse_turns(args.turns)
    except ValueError as exc:
        return _err(f"--turns: {exc}")

    started = time.monotonic()

    def show(task_id: str, scores, done: int, total: int) -> None:
        by_turn: dict[int, list] = {}
        for s in scores:
            by_turn.setdefault(s.turn, []).append(s)
        marks = " ".join(
            "".join(
                "=" if s.exact else "~" if s.same_tools else "x" if not s.well_formed else "-"
                for s in samples
            )
            + ("F" * min(1, fixes) if len(samples) == 1 else f"F{fixes}" if fixes else "")
            for samples in by_turn.values()
            for fixes in [sum(bool(s.fixes) for s in samples)]
        )
        print(f"[{done}/{total} {time.monotonic() - started:5.0f}s] {task_id}: {marks}",
              file=sys.stderr, flush=True)  # fmt: skip

    print(
        f"tachy eval --teacher-forced: {args.policy} on {args.tasks} (per expert turn: "
        "= same calls, ~ same tools, - other tools, x malformed, F the edit fixes)",
        file=sys.stderr,
    )
    try:
        scores = asyncio.run(
            probe_turns(
                args.tasks, args.policy, workers=args.workers, limit=args.limit,
                per_family=args.per_family, max_tokens=args.max_tokens,
                temperature=args.temperature, seed=args.seed,
                attempts=args.attempts, turns=args.turns, on_task=show,
            )
        )  # fmt: skip
    except TaskError as exc:
        return _err(str(exc))
    except KeyboardInterrupt:
        print("tachy: interrupted", file=sys.stderr)
        return 130
    report = {"settings": {"taskset": str(args.tasks.resolve()), "policy": args.policy,
                           "max_tokens": args.max_tokens, "temperature": args.temperature,
                           "turns": args.turns or "all"}}  # fmt: skip
    report |= summarize_turns(scores, seed=args.seed)
    print(human_turns(report), file=sys.stderr)
    if args.json:
        report["scores"] = msgspec.to_builtins(scores)
        print(json.dumps(report, indent=2))
    return 0


def human_turns(report: dict) -> str:
    def rate(r: dict) -> str:
        if r["value"] is None:
            return "-"
        return f"{r['value']:.0%} [{r['ci95'][0]:.0%}, {r['ci95'][1]:.0%}]"

    a = report["all"]
    lines = [
        f"{report['turns']} turns of {report['tasks']} tasks: well formed {rate(a['well_formed'])}, "
        f"same tools {rate(a['same_tools'])}, same calls {rate(a['exact'])}; "
        f"the edit fixes {rate(report['fixes'])}"
        + (
            f", any of {report['attempts']} edits fixes {rate(report['fixes_any'])} of tasks"
            if report["attempts"] > 1
            else ""
        )
    ]
    for turn, r in report["per_turn"].items():
        lines.append(
            f"  turn {turn} ({r['expert_tools']}): well formed {rate(r['well_formed'])}, "
            f"same tools {rate(r['same_tools'])}, same calls {rate(r['exact'])}"
        )
    return "\n".join(lines)


def _builtins(settings) -> dict:
    import msgspec

    return msgspec.to_builtins(settings)


def _rate(r: dict) -> str:
    return f"{r['value']:.1%} [{r['ci95'][0]:.1%}, {r['ci95'][1]:.1%}]"


def human(report: dict, k: int) -> str:
    """The summary a person reads on stderr."""

    def rate(name: str) -> str:
        return _rate(report[name])

    lines = [
        f"pass@1 {rate('pass_at_1')} over {report['scored_tasks']} tasks "
        f"({report['attempts']} attempts)"
    ]
    if k > 1:
        lines.append(f"pass@{k} {rate(f'pass_at_{k}')}")
    for family, r in report["families"].items():
        at_k = f", pass@{k} {_rate(r[f'pass_at_{k}'])}" if k > 1 else ""
        lines.append(f"  {family}: pass@1 {_rate(r['pass_at_1'])}{at_k} over {r['tasks']} tasks")
    for project, r in report["projects"].items():
        lines.append(f"  {project}: {r['value']:.1%} of {r['tasks']} tasks")
    share = report["well_formed_share"]
    lines.append(
        f"calls: {report['tool_calls']} ({'-' if share is None else f'{share:.0%}'} well "
        f"formed), {report['tool_calls_per_attempt']} per attempt, "
        f"{report['parallel_calls_per_turn']} per turn that made any; "
        f"{report['reads_before_edit']} reads/searches before the first edit; "
        f"{report['turns_per_attempt']} turns, {report['tokens_per_attempt']} tokens, "
        f"{report['seconds_per_attempt']} s per attempt"
    )
    if "against" in report:
        lines += against_lines(report["against"])
    if report["unscored_attempts"]:
        lines.append(
            f"{len(report['unscored_attempts'])} attempts not scored (the policy failed; "
            "not counted as failures, --resume runs them again):"
        )
        lines += [
            f"  {u['task_id']} #{u['attempt']}: {u['error']}" for u in report["unscored_attempts"]
        ]
    return "\n".join(lines)


def against_lines(change: dict) -> list[str]:
    """The change against another evaluation, as a person reads it."""

    def line(c: dict) -> str:
        low, high = c["ci95"]
        return (
            f"{c['before']:.1%} -> {c['after']:.1%}: {c['gain']:+.1%} "
            f"[{low:+.1%}, {high:+.1%}] over {c['tasks']} tasks"
        )

    lines = [f"against {change['results']}: pass@1 {line(change)} (paired 95 % interval)"]
    lines += [f"  {family}: {line(c)}" for family, c in change["families"].items()]
    lines.append(
        f"  gained {len(change['gained'])} tasks, lost {len(change['lost'])}"
        + (
            f"; {change['only_in_one']} tasks scored in one evaluation only"
            if change["only_in_one"]
            else ""
        )
    )
    return lines
