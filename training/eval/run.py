"""Evaluate a policy on a task set: K attempts per task through the environment server
and the unchanged executor, each scored by the task's tests, kept in a results file.

    settings = EvalSettings(taskset="tasks/", policy="local:", attempts=1)
    attempts = asyncio.run(run_eval(settings, "results.jsonl"))
    report = summarize(load_results("results.jsonl")[1], k=1)

The results file is JSONL: a header line (the settings) and one `Attempt` per line,
written as each finishes, so an interrupted evaluation keeps what it did and `resume`
runs only the attempts still missing. An attempt whose policy failed (the model server
died, or answered an error) is *unscored*: kept, reported, not counted as a failure,
and run again on resume. Attempts that ran out of turns, time or context are failures:
those are the policy's own limits.
"""

from __future__ import annotations

import asyncio
import os
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from statistics import mean

import msgspec

from agent.events import TranscriptWriter
from agent.policy import CONTEXT_FULL, Policy, PolicyError, load_policy
from training.env.episode import Episode, run_episode
from training.env.pool import EnvError, EnvLimits, EnvPool
from training.eval.stats import bootstrap_ci, pass_at_k
from training.tasks.families import FAMILIES
from training.tasks.pypi import READY_MARK
from training.tasks.taskset import Task, TaskError, load_tasks, task_repo_dir

DEFAULT_MAX_TURNS = 10  # a task of no known family


class EvalSettings(msgspec.Struct, kw_only=True):
    taskset: str  # absolute path of the set
    policy: str  # the policy spec
    attempts: int = 1  # per task
    max_turns: int | None = None  # None: each task family's turn budget (families.FAMILIES)
    max_tokens: int | None = None  # per turn (None: the policy's default)
    temperature: float | None = None  # None: the policy's default (greedy for local:)
    timeout_s: float = 1800.0  # one attempt's wall clock
    seed: int = 0  # sampling seeds of the attempts (when sampling)
    limit: int | None = None  # only the first N tasks
    per_family: int | None = None  # only the first N tasks of each family (before `limit`)

    def comparable(self) -> tuple:
        """What a resumed evaluation must share with the one it continues (the number
        of attempts may grow, the task limit change)."""
        return (self.taskset, self.policy, self.max_turns, self.max_tokens, self.temperature,
                self.timeout_s, self.seed)  # fmt: skip

    def turns_for(self, task: Task) -> int:
        """The attempt's turn limit: the setting, else the task family's budget."""
        if self.max_turns is not None:
            return self.max_turns
        family = FAMILIES.get(task.metadata.family)
        return family.max_turns if family else DEFAULT_MAX_TURNS

    def select(self, tasks: list[Task]) -> list[Task]:
        return select_tasks(tasks, self.per_family, self.limit)


def select_tasks(tasks: list[Task], per_family: int | None, limit: int | None) -> list[Task]:
    """The tasks evaluated: the first `per_family` of each family, then the first `limit`."""
    if per_family is not None:
        seen: Counter[str] = Counter()
        chosen = []
        for task in tasks:
            seen[task.metadata.family] += 1
            if seen[task.metadata.family] <= per_family:
                chosen.append(task)
        tasks = chosen
    return tasks[:limit]


class Attempt(msgspec.Struct, kw_only=True):
    task_id: str
    project: str
    family: str = "mutation"  # the task's family (training.tasks.families)
    attempt: int  # 0-based
    status: str  # solved | failed | unscored
    stop_reason: str
    reward: float = 0.0
    error: str | None = None
    turns: int = 0
    tool_calls: int = 0
    malformed_calls: int = 0
    turns_with_calls: int = 0
    parallel_calls_per_turn: float = 0.0
    reads_before_edit: int = 0
    edits: int = 0
    codebase_searches: int = 0
    tokens: int | None = None  # generated, where the policy counts them
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    seconds: float = 0.0
    test_seconds: float = 0.0
    changed_files: list[str] = msgspec.field(default_factory=list)


class Header(msgspec.Struct, kw_only=True, tag="header"):
    settings: EvalSettings


_encoder = msgspec.json.Encoder()


def check_runnable(taskset: Path, tasks: list[Task]) -> None:
    """TaskError naming the first task whose repository or environment is missing or
    stale (made for another source, or its interpreter gone), before anything runs."""
    for task in tasks:
        repo = task_repo_dir(taskset, task)
        if not repo.is_dir():
            raise TaskError(f"task {task.id!r}: its repository {repo} is missing; rebuild the set")
        if not task.env:
            continue
        env = taskset / task.env
        python = env / "bin" / "python"
        if not python.exists():  # a dangling link too: the interpreter it was made with is gone
            raise TaskError(
                f"task {task.id!r}: its environment {env} is missing or broken (no working "
                f"bin/python); rebuild it with tachy tasks build"
            )
        mark = env / READY_MARK
        made_for = mark.read_text(encoding="utf-8").strip() if mark.is_file() else ""
        if made_for != task.metadata.source:
            raise TaskError(
                f"task {task.id!r}: its environment {env} is stale (made for "
                f"{made_for or 'an unfinished build'}, the task needs {task.metadata.source}); "
                "rebuild it with tachy tasks build"
            )


def load_results(path: str | Path) -> tuple[EvalSettings | None, list[Attempt]]:
    """The header's settings and the attempts of a results file (TaskError on a file
    that is not one; a last line cut by an interruption is dropped)."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return None, []
    except OSError as exc:
        raise TaskError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not lines:
        return None, []
    try:
        header = msgspec.json.decode(lines[0], type=Header)
    except msgspec.DecodeError:
        raise TaskError(f"{path} is not a tachy eval results file (no header line)") from None
    attempts = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            attempts.append(msgspec.json.decode(line, type=Attempt))
        except msgspec.DecodeError:
            if number == len(lines):  # written when the run was killed: that attempt reruns
                break
            raise TaskError(f"{path}:{number}: not an attempt record") from None
    return header.settings, attempts


def attempt_of(task: Task, index: int, episode: Episode, counts: dict) -> Attempt:
    shape = episode.shape
    if episode.stop_reason == "error" and not (episode.error or "").startswith(CONTEXT_FULL):
        status = "unscored"  # the policy failed, not the task
    else:
        status = "solved" if episode.score.reward == 1.0 and not episode.truncated else "failed"
    return Attempt(
        task_id=task.id, project=task.metadata.project, family=task.metadata.family,
        attempt=index, status=status, stop_reason=episode.stop_reason, reward=episode.score.reward, error=episode.error,
        turns=shape.turns, tool_calls=shape.tool_calls, malformed_calls=shape.malformed_calls,
        turns_with_calls=shape.turns_with_calls,
        parallel_calls_per_turn=shape.parallel_calls_per_turn,
        reads_before_edit=shape.reads_before_edit, edits=shape.edits,
        codebase_searches=shape.codebase_searches, tokens=counts.get("tokens_generated"),
        prompt_tokens=counts.get("prompt_tokens"), cached_tokens=counts.get("cached_tokens"),
        seconds=episode.seconds, test_seconds=episode.test_seconds,
        changed_files=episode.changed_files,
    )  # fmt: skip


class _Policies:
    """A policy per attempt. One in-process model is loaded once and each attempt gets
    a session on it (its engine decodes concurrent attempts together); other kinds
    (replay:, openai:) are made anew for each attempt, so a replay starts over."""

    def __init__(self, settings: EvalSettings) -> None:
        self.settings = settings
        self.shared: Policy | None = None  # the in-process model, when it is one
        self.probe: Policy | None = None  # the first one made, which proved the spec works

    def open(self, workers: int) -> None:
        """Make the first policy; `workers` attempts will run at once (a local model's batch)."""
        s = self.settings
        first = load_policy(s.policy, max_tokens=s.max_tokens, runs=workers)
        if hasattr(first, "session"):
            self.shared = first
        else:
            self.probe = first

    def for_attempt(self, task: Task, index: int) -> Policy:
        s = self.settings
        seed = zlib.crc32(f"{s.seed}/{task.id}/{index}".encode())
        if self.shared is not None:
            sampling = {"seed": seed}
            if s.temperature is not None:
                sampling["temperature"] = s.temperature
            return self.shared.session(**sampling)
        policy = load_policy(s.policy, max_tokens=s.max_tokens)
        if s.temperature is not None and hasattr(policy, "temperature"):
            policy.temperature = s.temperature
        return policy

    async def close(self) -> None:
        for policy in (self.shared, self.probe):
            if policy is not None:
                await policy.aclose()


async def run_eval(
    settings: EvalSettings,
    results: str | Path,
    *,
    workers: int = 1,
    resume: bool = False,
    on_attempt: Callable[[Attempt, int, int], None] | None = None,
    transcripts: str | Path | None = None,
) -> list[Attempt]:
    """Run the attempts the results file does not hold yet (all of them unless
    `resume`), `workers` at a time; returns every attempt of the evaluation, the
    file's included. `on_attempt(attempt, done, total)` hears of each as it ends.
    With `transcripts`, each attempt's events go to TRANSCRIPTS/TASK.ATTEMPT.jsonl
    as they happen (the transcript format of `tachy agent --transcript`)."""
    results = Path(results)
    taskset = Path(settings.taskset)
    tasks = settings.select(load_tasks(taskset))
    if not tasks:
        raise TaskError(f"{taskset} holds no task")
    check_runnable(taskset, tasks)
    saved, kept = load_results(results)
    if saved is not None and not resume:
        raise TaskError(f"{results} already holds an evaluation: --resume continues it")
    if saved is not None and saved.comparable() != settings.comparable():
        raise TaskError(
            f"{results} holds an evaluation with other settings ({saved.policy} on "
            f"{saved.taskset}); resume it with the same ones or write to another file"
        )
    done = {(a.task_id, a.attempt) for a in kept if a.status != "unscored"}
    kept = [a for a in kept if a.status != "unscored"]  # an unscored attempt runs again
    todo = [(t, i) for t in tasks for i in range(settings.attempts) if (t.id, i) not in done]
    results.parent.mkdir(parents=True, exist_ok=True)
    # Rewritten (header, the kept attempts) beside the file and moved over it, so an
    # interruption at any point leaves the old file or the new one, never less.
    scratch = results.with_name(results.name + ".partial")
    with open(scratch, "wb") as out:
        out.write(_encoder.encode(Header(settings=settings)) + b"\n")
        out.writelines(_encoder.encode(a) + b"\n" for a in kept)
    os.replace(scratch, results)
    with open(results, "ab") as sink:  # then each new attempt as it finishes
        new = await _run_attempts(
            settings, taskset, todo, workers, sink, on_attempt,
            Path(transcripts) if transcripts is not None else None,
        )  # fmt: skip
    return kept + new


async def _run_attempts(
    settings, taskset, todo, workers, sink, on_attempt, transcripts
) -> list[Attempt]:
    if not todo:
        return []
    policies = _Policies(settings)
    try:
        await asyncio.to_thread(policies.open, workers)
    except PolicyError as exc:
        raise TaskError(f"the policy cannot be used: {exc}") from None
    limits = EnvLimits(rollout_timeout_s=settings.timeout_s)
    gate = asyncio.Semaphore(workers)
    finished: list[Attempt] = []
    try:
        with EnvPool(taskset, size=workers, limits=limits) as pool:

            async def one(task: Task, index: int) -> None:
                async with gate:
                    attempt = await _attempt(pool, policies, task, index, transcripts)
                finished.append(attempt)
                sink.write(_encoder.encode(attempt) + b"\n")
                sink.flush()
                if on_attempt is not None:
                    on_attempt(attempt, len(finished), len(todo))

            await asyncio.gather(*(one(t, i) for t, i in todo))
    finally:
        await policies.close()
    return finished


async def _attempt(
    pool: EnvPool, policies: _Policies, task: Task, index: int, transcripts: Path | None
) -> Attempt:
    try:
        policy = await asyncio.to_thread(policies.for_attempt, task, index)
    except PolicyError as exc:
        return _unscored(task, index, f"the policy could not be made: {exc}")
    try:
        env = await asyncio.to_thread(pool.acquire, task)
    except EnvError as exc:
        await policy.aclose()
        return _unscored(task, index, f"no sandbox for the task: {exc}")
    writer = TranscriptWriter(transcripts / f"{task.id}.{index}.jsonl") if transcripts else None
    try:
        episode = await run_episode(
            env, policy, max_turns=policies.settings.turns_for(task), on_event=writer
        )
    except EnvError as exc:  # the sandbox failed (its tests could not run): not the policy's
        return _unscored(task, index, f"the sandbox failed: {exc}")
    finally:
        if writer is not None:
            writer.close()
        await asyncio.to_thread(pool.release, env)
        await policy.aclose()
    counts = {
        k: getattr(policy, k) for k in ("tokens_generated", "prompt_tokens", "cached_tokens")
        if isinstance(getattr(policy, k, None), int)
    }  # fmt: skip
    return attempt_of(task, index, episode, counts)


def _unscored(task: Task, index: int, why: str) -> Attempt:
    return Attempt(
        task_id=task.id, project=task.metadata.project, family=task.metadata.family,
        attempt=index, status="unscored", stop_reason="error", error=why,
    )  # fmt: skip


# ------------------------------------------------------------------ the report
def summarize(attempts: list[Attempt], *, k: int = 1, seed: int = 0) -> dict:
    """The evaluation's figures: pass@1 and pass@k over the tasks with a scored attempt
    (95 % bootstrap intervals over tasks), per project, the unscored attempts, and the
    shape of the runs (well-formed calls, turns, calls, parallel calls per turn,
    reads and searches before the first edit, tokens and seconds per attempt)."""
    by_task: dict[str, list[Attempt]] = {}
    for a in sorted(attempts, key=lambda a: (a.task_id, a.attempt)):
        by_task.setdefault(a.task_id, []).append(a)
    scored = {t: [a for a in runs if a.status != "unscored"] for t, runs in by_task.items()}
    scored = {t: runs for t, runs in scored.items() if runs}
    per_task_1 = {t: _solved(runs) / len(runs) for t, runs in scored.items()}
    report: dict = {
        "tasks": len(by_task),
        "scored_tasks": len(scored),
        "attempts": sum(len(r) for r in scored.values()),
        "unscored_attempts": [
            {"task_id": a.task_id, "attempt": a.attempt, "error": a.error}
            for a in attempts if a.status == "unscored"
        ],
    }  # fmt: skip
    report |= _pass_rates(scored, k, seed)
    families: dict[str, dict[str, list[Attempt]]] = {}
    for t, runs in scored.items():
        families.setdefault(runs[0].family, {})[t] = runs
    report["families"] = {
        f: _pass_rates(runs, k, seed) | {"tasks": len(runs)}
        for f, runs in sorted(families.items(), key=lambda item: _family_order(item[0]))
    }
    projects: dict[str, list[float]] = {}
    for t, runs in scored.items():
        projects.setdefault(runs[0].project, []).append(per_task_1[t])
    report["projects"] = {
        p: _estimate(v, seed) | {"tasks": len(v)} for p, v in sorted(projects.items())
    }
    runs = [a for r in scored.values() for a in r]
    report |= shape_summary(runs)
    report["per_task"] = [
        {"task_id": t, "project": r[0].project, "attempts": len(r), "solved": _solved(r),
         "outcomes": [a.status for a in r], "stop_reasons": [a.stop_reason for a in r]}
        for t, r in scored.items()
    ]  # fmt: skip
    return report


def compare_attempts(before: list[Attempt], after: list[Attempt], *, seed: int = 0) -> dict:
    """The change in pass@1 from `before` to `after` (two evaluations' attempts) over
    the tasks both scored, overall and per family, each with a paired 95 % interval
    (a task's two pass@1 values are resampled together), and which tasks were gained
    and lost."""
    from training.eval.stats import paired_gain

    def rates(attempts: list[Attempt]) -> dict[str, tuple[str, float]]:
        runs: dict[str, list[Attempt]] = {}
        for a in attempts:
            if a.status != "unscored":
                runs.setdefault(a.task_id, []).append(a)
        return {t: (r[0].family, _solved(r) / len(r)) for t, r in runs.items()}

    old, new = rates(before), rates(after)
    shared = sorted(set(old) & set(new))

    def change(tasks: list[str]) -> dict:
        a, b = [old[t][1] for t in tasks], [new[t][1] for t in tasks]
        gain, low, high = paired_gain(a, b, seed=seed)
        return {
            "tasks": len(tasks),
            "before": round(mean(a), 4) if a else 0.0,
            "after": round(mean(b), 4) if b else 0.0,
            "gain": round(gain, 4),
            "ci95": [round(low, 4), round(high, 4)],
        }

    families: dict[str, list[str]] = {}
    for t in shared:
        families.setdefault(new[t][0], []).append(t)
    return {
        **change(shared),
        "only_in_one": len(set(old) ^ set(new)),
        "gained": [t for t in shared if new[t][1] > old[t][1]],
        "lost": [t for t in shared if new[t][1] < old[t][1]],
        "families": {
            f: change(tasks)
            for f, tasks in sorted(families.items(), key=lambda item: _family_order(item[0]))
        },
    }


def _pass_rates(scored: dict[str, list[Attempt]], k: int, seed: int) -> dict:
    """pass@1 over the tasks (the mean of each task's solved share) and, for k > 1, the
    unbiased pass@k over tasks with at least k scored attempts; 95 % bootstrap
    intervals over tasks."""
    rates = {"pass_at_1": _estimate([_solved(r) / len(r) for r in scored.values()], seed)}
    if k > 1:
        eligible = [r for r in scored.values() if len(r) >= k]
        values = [pass_at_k(len(r), _solved(r), k) for r in eligible]
        rates[f"pass_at_{k}"] = _estimate(values, seed) | {"tasks": len(eligible)}
    return rates


def _family_order(family: str) -> tuple[int, str]:
    """Easiest family first (training.tasks.families' order), unknown ones last."""
    from training.tasks.families import FAMILIES

    names = list(FAMILIES)
    return (names.index(family) if family in names else len(names), family)


def shape_summary(runs: list[Attempt]) -> dict:
    """Means over scored attempts (and over the solved ones where it says so)."""
    calls = sum(a.tool_calls for a in runs)
    with_calls = [a for a in runs if a.turns_with_calls]
    solved = [a for a in runs if a.status == "solved"]
    counted = [a.tokens for a in runs if a.tokens is not None]

    def avg(values: list[float]) -> float | None:
        return round(mean(values), 3) if values else None

    return {
        "tool_calls": calls,
        "well_formed_share": round((calls - sum(a.malformed_calls for a in runs)) / calls, 3)
        if calls else None,
        "turns_per_attempt": avg([a.turns for a in runs]),
        "tool_calls_per_attempt": avg([a.tool_calls for a in runs]),
        "parallel_calls_per_turn": avg([a.parallel_calls_per_turn for a in with_calls]),
        "reads_before_edit": avg([a.reads_before_edit for a in runs]),
        "codebase_searches_per_attempt": avg([a.codebase_searches for a in runs]),
        "attempts_that_edit": sum(1 for a in runs if a.edits),
        "tokens_per_attempt": avg(counted),
        "seconds_per_attempt": avg([a.seconds for a in runs]),
        "solved_turns": avg([a.turns for a in solved]),
        "solved_tokens": avg([a.tokens for a in solved if a.tokens is not None]),
        "stop_reasons": dict(Counter(a.stop_reason for a in runs).most_common()),
    }  # fmt: skip


def _solved(runs: list[Attempt]) -> int:
    return sum(a.status == "solved" for a in runs)


def _estimate(values: list[float], seed: int) -> dict:
    low, high = bootstrap_ci(values, seed=seed)
    value = mean(values) if values else 0.0
    return {"value": round(value, 4), "ci95": [round(low, 4), round(high, 4)]}
