"""Which task RL rolls out next, and with what hint: online difficulty and hints that fade.

Online difficulty. The curriculum keeps, per task, the outcomes of its recent un-hinted
rollouts (the last `window`, from the last `horizon` steps) and so a pass-rate estimate
per task and per family. It rolls out tasks whose estimate lies strictly between 0 and
1, or that have none (never tried, or tried too long ago: the model has changed since).
A group whose rollouts all score the same teaches nothing (every advantage is zero):
the controller drops it and launches another in its place (DAPO's dynamic sampling),
and counts what it dropped.

Hints that fade. A task whose un-hinted group solved nothing is rolled out again with a
hint, written as a reviewer's feedback, at the level the schedule gives for the step:

    3 prefix   the file and line, and the expert's turns before its edit already taken
               (the model starts at the edit: a reverse curriculum from the solution)
    2 line     "the bug is at line N of `path`"
    1 file     "the bug is in `path`"
    0 none

The schedule ("prefix,line,file@0.6": those levels in equal parts of the first 60 % of
the steps, then none) reaches zero before the run ends, and a held-out evaluation never
has a hint. The update takes its ratio against the *un-hinted* context (as Guide does):
the hint is in the sampler's prompt only; the trainer's sequence is the conversation
without it, and the sampler's log-probs (under the hint) enter only the truncated
importance weight. So the model is trained as the policy that is evaluated, with no
hint, rather than as a policy that expects one; the expert's prefix turns are context
in both, never trained on.

    curriculum = Curriculum({"t-1": "misspelled_name", ...}, seed=0)
    task, hint = curriculum.next(step, schedule.level(step, steps))
    kept = curriculum.record(task, [True, False, False, True], step, hint)

Deterministic for a seed; its state (estimates, hint queue, RNG) is saved with the
checkpoint, so a resumed run chooses what the uninterrupted one would have.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

HINT_LEVELS = {"none": 0, "file": 1, "line": 2, "prefix": 3}


class CurriculumError(ValueError):
    """A hint schedule or task list that cannot be used; the message says why."""


@dataclass(frozen=True)
class HintSchedule:
    levels: tuple[int, ...] = ()  # strongest first
    end: float = 0.0  # fraction of the run's steps after which there is no hint

    @classmethod
    def parse(cls, spec: str) -> HintSchedule:
        """'prefix,line,file@0.6' (levels by name or number, strongest first, '@' the
        fraction of the steps they cover, below 1) or 'none'."""
        text = spec.strip()
        if text in ("", "none", "0"):
            return cls()
        names, _, end = text.partition("@")
        if not end:
            raise CurriculumError(
                f"hint schedule {spec!r}: give the fraction of the run the hints cover, "
                "e.g. 'prefix,line,file@0.6'"
            )
        try:
            fraction = float(end)
        except ValueError:
            raise CurriculumError(f"hint schedule {spec!r}: {end!r} is not a number") from None
        if not 0 < fraction < 1:
            raise CurriculumError(
                f"hint schedule {spec!r}: hints must end before the run does (0 < {fraction} < 1)"
            )
        levels = []
        for name in names.split(","):
            name = name.strip()
            level = HINT_LEVELS.get(name, int(name) if name.isdigit() else -1)
            if level not in (1, 2, 3):
                raise CurriculumError(
                    f"hint schedule {spec!r}: unknown hint level {name!r}; the levels are "
                    "prefix (3), line (2), file (1)"
                )
            levels.append(level)
        return cls(tuple(levels), fraction)

    def level(self, step: int, steps: int) -> int:
        """The hint level for rollouts launched at `step` (0-based) of `steps`."""
        cut = self.end * steps
        if not self.levels or step >= cut:
            return 0
        return self.levels[min(len(self.levels) - 1, int(step / cut * len(self.levels)))]


@dataclass
class Curriculum:
    families: dict[str, str]  # task id -> family
    seed: int = 0
    window: int = 16  # outcomes kept per task
    horizon: int = 20  # steps after which an outcome no longer counts
    history: dict[str, list[tuple[int, bool]]] = field(default_factory=dict)
    needs_hint: list[str] = field(default_factory=list)  # no success un-hinted, oldest first
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if not self.families:
            raise CurriculumError("no training tasks")
        self.task_ids = sorted(self.families)
        self.rng = random.Random(self.seed)

    # ------------------------------------------------------------------ estimates
    def outcomes(self, task_id: str, step: int) -> list[bool]:
        return [ok for at, ok in self.history.get(task_id, []) if step - at < self.horizon]

    def estimate(self, task_id: str, step: int) -> float | None:
        """The task's pass rate over its recent un-hinted rollouts (None: none recent)."""
        seen = self.outcomes(task_id, step)
        return sum(seen) / len(seen) if seen else None

    def family_estimates(self, step: int) -> dict[str, dict[str, float | int | None]]:
        """Per family: the pass rate over its tasks' recent un-hinted rollouts, how many
        of its tasks have an estimate, and how many of those are at the frontier."""
        out: dict[str, dict[str, float | int | None]] = {}
        for family in sorted(set(self.families.values())):
            tasks = [t for t in self.task_ids if self.families[t] == family]
            runs = [ok for t in tasks for ok in self.outcomes(t, step)]
            known = [e for t in tasks if (e := self.estimate(t, step)) is not None]
            out[family] = {
                "pass_rate": round(sum(runs) / len(runs), 4) if runs else None,
                "tasks_known": len(known),
                "tasks_frontier": sum(0 < e < 1 for e in known),
                "tasks": len(tasks),
            }
        return out

    # ------------------------------------------------------------------ choosing
    def next(self, step: int, hint_level: int) -> tuple[str, int]:
        """(task id, hint level) of the next group: a task waiting for a hint while the
        schedule gives one, else a task whose estimate is strictly between 0 and 1 or
        unknown, else (none left) any task."""
        if hint_level and self.needs_hint:
            return self.needs_hint.pop(0), hint_level
        frontier = [t for t in self.task_ids if (e := self.estimate(t, step)) is None or 0 < e < 1]
        return self.rng.choice(frontier or self.task_ids), 0

    def record(self, task_id: str, solved: list[bool], step: int, hint: int) -> bool:
        """Note a finished group's outcomes (scored rollouts only); True when they differ,
        so the group carries a learning signal. Un-hinted groups update the estimate; one
        with no success queues the task for a hint."""
        if task_id not in self.families:
            raise CurriculumError(f"task {task_id!r} is not one of the curriculum's")
        if not hint and solved:
            kept = self.history.setdefault(task_id, [])
            kept.extend((step, ok) for ok in solved)
            del kept[: -self.window]
            if not any(solved) and task_id not in self.needs_hint:
                self.needs_hint.append(task_id)
        return len(set(solved)) > 1

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {
            "history": {t: [[s, ok] for s, ok in h] for t, h in self.history.items()},
            "needs_hint": list(self.needs_hint),
            "rng": [version, list(internal), gauss],
        }

    def load_state_dict(self, state: dict) -> None:
        self.history = {t: [(int(s), bool(ok)) for s, ok in h] for t, h in state["history"].items()}
        self.needs_hint = list(state["needs_hint"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


def hint_note(sites: list, level: int) -> str:
    """The reviewer's note a hint of `level` adds to the instruction (sites: the task's
    fix sites, training.tasks.taskset.Mutation); "" for level 0."""
    if level <= 0 or not sites:
        return ""
    if level == 1:
        files = list(dict.fromkeys(m.path for m in sites))
        where = " and ".join(f"`{f}`" for f in files)
        return f"Reviewer's note: the bug is in {where}."
    lines: dict[str, list[int]] = {}
    for m in sites:
        lines.setdefault(m.path, []).append(m.line)
    where = "; ".join(
        f"line{'s' if len(n) > 1 else ''} {', '.join(map(str, sorted(n)))} of `{p}`"
        for p, n in lines.items()
    )
    return f"Reviewer's note: look at {where}."
