"""The RL trainer on Ray: one controller driving inference actors, rollout workers and a
trainer, behind `tachy train rl --config FILE [--steps N] --out DIR`.

    config = RLConfig.from_file("rl.toml")
    with RLRun(config, out="runs/rl") as run:
        run.train()               # metrics in runs/rl/metrics.jsonl, checkpoint in runs/rl

Roles (slime / verl's split): the controller (RLRun, this process) decides when to
launch rollouts and when to train; the rollout buffer (training.rl.buffer) hands tasks
out as groups of rollouts and collects their results; inference actors
(training.rl.inference) sample, token in, token out; rollout workers
(training.rl.rollout_worker) run the agent executor, imported unchanged, in sandboxed
environments and score the runs with the task's tests; the trainer
(training.rl.trainer.RLTrainer, in this process) computes the loss (training.rl.loss)
and updates the model, whose weights go to the inference actors through the object
store after each step. The settings: training.rl.config.RLConfig.

A step takes `groups_per_step` groups of `group_size` rollouts, each group G runs of one
task from the same start. Asynchronous mode (the default) keeps `groups_per_step +
overprovision` groups in flight while the trainer works, and a step takes the first
groups to finish (a group finishes when all its runs have): stragglers never stall a
step, they carry over to the next. Rollouts keep sampling across weight updates (each
token records the version that drew it); one that would use weights more than
`max_staleness` versions newer than its first is stopped, and one that finishes with
tokens more than `max_staleness` versions older than the trainer's is masked. With
`async_rollouts = false` a step launches exactly its groups, waits for all of them,
trains, and syncs (the synchronous baseline bench/rl.py measures against).

Trainer idle fraction: the share of a step's wall time (since the previous step's
update and sync ended) the trainer spent waiting for rollouts.

Checkpoints (every `save_every` steps and the last): the model (loadable as
`local:DIR`; a part of tachy's model when `init` is one, its adapters trained), the
optimizer, the step (= the policy version), RNG states and the task sampler's
position, written like the SFT trainer's. `resume` restores all of it: from
the same batch the next update is bit-identical to the uninterrupted run's, and the
task order continues where it stopped (the rollouts themselves are sampled anew).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, TextIO

import ray
import torch

from model.checkpoint import load
from model.hf import CheckpointError
from model.model import Model
from model.part import is_part
from model.tokenizer import Tokenizer, TokenizerError, find_tokenizer
from training.env.pool import EnvLimits
from training.eval.stats import bootstrap_ci
from training.rl.buffer import Group, RolloutBuffer
from training.rl.config import RLConfig
from training.rl.curriculum import Curriculum, HintSchedule
from training.rl.inference import InferenceActor, pack_weights
from training.rl.rollout_worker import RolloutResult, RolloutSettings, RolloutWorker
from training.rl.trainer import RLTrainer
from training.sft.adapters import AdaptedModel
from training.sft.common import (
    METRICS_FILE,
    TrainStateError,
    read_state,
    truncate_metrics,
    write_checkpoint,
)
from training.sft.data import is_heldout
from training.tasks.families import FAMILIES
from training.tasks.taskset import load_tasks


class RLRun:
    def __init__(
        self,
        config: RLConfig,
        out: str | Path,
        *,
        resume: bool = False,
        log: TextIO | None = None,
    ) -> None:
        config.check()
        self.config, self.out, self.log = config, Path(out), log
        if config.trainer_threads:
            torch.set_num_threads(config.trainer_threads)
        state = read_state(self.out) if resume else None
        model, self.tokenizer = self._open_model(resume)
        context = model.config.max_position_embeddings
        if config.max_tokens > context:
            raise ValueError(
                f"max_tokens {config.max_tokens} exceeds the model's context of {context} tokens"
            )
        self.trainer = RLTrainer(model, self.tokenizer, config)
        families = {t.id: t.metadata.family for t in load_tasks(config.tasks)}
        fraction = config.heldout_fraction
        held = [t for t in families if fraction and is_heldout(t, fraction)]
        self.curriculum = Curriculum(
            {t: f for t, f in families.items() if t not in held}, config.seed,
            window=config.difficulty_window, horizon=config.difficulty_horizon,
        )  # fmt: skip
        self.families = families
        self.hints = HintSchedule.parse(config.hints)
        self.eval_taskset = config.heldout_tasks or (config.tasks if held else None)
        if config.heldout_tasks:
            heldout = load_tasks(config.heldout_tasks)
            held = [t.id for t in heldout]
            self.families |= {t.id: t.metadata.family for t in heldout}
        self.heldout_ids = _spread(sorted(held), self.families)[: config.eval_tasks]
        self.out.mkdir(parents=True, exist_ok=True)  # once the inputs are known good
        if state is not None:
            if "curriculum" not in state:
                raise TrainStateError(
                    f"{self.out}: saved by an older tachy (no curriculum state); start a new run"
                )
            self.trainer.load_state_dict(state)
            self.curriculum.load_state_dict(state["curriculum"])
            truncate_metrics(self.out, self.trainer.version)
        self.buffer: RolloutBuffer | None = None  # made with the actors
        self._actors_up = False

    def _open_model(self, resume: bool) -> tuple[Model | AdaptedModel, Tokenizer]:
        """The model to train: adapters on a part of tachy's model (the base frozen), or
        every weight of a full checkpoint; on resume, as the run in `out` left it."""
        cfg, init = self.config, Path(self.config.init)
        try:
            if is_part(init):
                model, tokenizer = AdaptedModel.from_part(init, rank=cfg.lora_rank, seed=cfg.seed)
                if resume:
                    model.load_adapters(self.out)
                return model, tokenizer
            source = self.out if resume else init
            return load(source), find_tokenizer(source)
        except (CheckpointError, TokenizerError, OSError, KeyError) as exc:
            raise ValueError(f"cannot load the model to train from {init}: {exc}") from None

    # ------------------------------------------------------------------ actors
    def _start_actors(self) -> None:
        cfg = self.config
        if not ray.is_initialized():
            ray.init(
                num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False,
                log_to_driver=False, logging_level="ERROR",
            )  # fmt: skip
        # The actors start from the init (an adapter run's part, or the run's own checkpoint
        # on resume) and get the trainer's weights at once.
        ckpt = str(self.out if (self.out / "manifest.json").is_file() else cfg.init)
        options = dict(
            max_batch=cfg.inference_batch, max_seq=cfg.max_tokens, temperature=cfg.temperature,
            threads=cfg.inference_threads, compile=cfg.compile,
        )  # fmt: skip
        self.inference = [
            InferenceActor.options(num_cpus=0).remote(ckpt, seed=cfg.seed * 101 + i, **options)
            for i in range(cfg.inference_actors)
        ]
        limits = EnvLimits(
            command_timeout_s=cfg.command_timeout_s, rollout_timeout_s=cfg.rollout_timeout_s
        )
        self.workers = [
            RolloutWorker.options(num_cpus=0).remote(
                cfg.tasks, ckpt, size=cfg.envs_per_worker, workdir=cfg.workdir, limits=limits
            )
            for _ in range(cfg.rollout_workers)
        ]
        self.eval_workers = []
        if self.heldout_ids:
            self.eval_workers = [
                RolloutWorker.options(num_cpus=0).remote(
                    self.eval_taskset, ckpt, size=0, workdir=cfg.workdir, limits=limits
                )
            ]
        launched = self.buffer.launched if self.buffer is not None else 0
        self.buffer = RolloutBuffer(self.workers, self.inference, cfg.group_size, launched=launched)
        self._actors_up = True
        self._sampler_seen = (0.0, 0)  # (busy seconds, tokens) the actors had reported
        self.sync_weights()

    def sync_weights(self) -> float:
        """Put the trainer's weights in the object store once; every inference actor loads
        them as the trainer's version. Returns the seconds until all have."""
        started = time.perf_counter()
        partial = isinstance(self.trainer.model, AdaptedModel)  # only what adapters change
        state = self.trainer.model.sampling_state()
        self.sync_bytes = sum(t.numel() * t.element_size() for t in state.values())
        ref = ray.put(pack_weights(state))
        ray.get([a.set_weights.remote(self.trainer.version, ref, partial) for a in self.inference])
        return time.perf_counter() - started

    def close(self) -> None:
        if not self._actors_up:
            return
        for w in self.workers + self.eval_workers:
            with contextlib.suppress(Exception):  # a dead worker: its sandboxes get swept
                ray.get(w.close.remote(), timeout=60)
            ray.kill(w)
        for a in self.inference:
            ray.kill(a)
        self._actors_up = False

    def __enter__(self) -> RLRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ rollouts
    def _settings(self, task_id: str, *, greedy: bool = False) -> RolloutSettings:
        """A rollout's limits: the config's, with the turns capped by the task family's
        budget (training.tasks.families: an easy bug needs fewer turns)."""
        cfg = self.config
        family = FAMILIES.get(self.families.get(task_id, ""))
        turns = min(cfg.max_turns, family.max_turns) if family else cfg.max_turns
        return RolloutSettings(
            max_turns=turns, max_tokens=cfg.max_tokens,
            max_new_tokens=cfg.max_new_tokens, timeout_s=cfg.rollout_timeout_s,
            max_staleness=None if greedy or not cfg.async_rollouts else cfg.max_staleness,
            temperature=0.0 if greedy else None,
        )  # fmt: skip

    def _mask_stale(self, results: list[RolloutResult]) -> int:
        """Mask finished rollouts with tokens older than the staleness bound allows."""
        bound = self.trainer.version - self.config.max_staleness
        n = 0
        for r in results:
            if r.status == "scored" and r.versions is not None and r.versions[0] < bound:
                r.status = "stale"
                n += 1
        return n

    # ------------------------------------------------------------------ the loop
    def train(self, steps: int | None = None) -> list[dict[str, Any]]:
        """Run RL steps up to `steps` (default: config.steps); returns their metrics."""
        cfg = self.config
        until = cfg.steps if steps is None else steps
        if not self._actors_up:
            self._start_actors()
        buffer = self.buffer
        assert buffer is not None
        history: list[dict[str, Any]] = []
        if self.heldout_ids and self.trainer.version == 0:
            self._write({"step": 0} | self.evaluate())
        mark = time.perf_counter()
        try:
            while self.trainer.version < until:
                waited = time.perf_counter()
                kept, dropped, launches = self._gather(buffer)
                idle = time.perf_counter() - waited
                groups = kept or dropped  # nothing with signal: an update that changes little
                results = [r for g in groups for r in g.results]
                stale = self._mask_stale(results)
                m = self.trainer.train_step(results)
                sync_s = self.sync_weights()
                now = time.perf_counter()
                step_s = now - mark
                mark = now
                m = {"step": self.trainer.version} | self._rollout_metrics(results) | m
                m |= self._curriculum_metrics(kept, dropped, launches)
                m |= {
                    "stale_masked": stale,
                    "carried_over": buffer.ready + buffer.running,
                    "weight_sync_s": round(sync_s, 4),
                    "weight_sync_mb": round(self.sync_bytes / 2**20, 2),
                    "step_s": round(step_s, 3),
                    "trainer_idle_s": round(idle, 3),
                    "trainer_idle_frac": round(idle / step_s, 4) if step_s > 0 else 0.0,
                } | self._sampler_metrics()
                done = self.trainer.version == until
                if self.heldout_ids and (
                    done or (cfg.eval_every and self.trainer.version % cfg.eval_every == 0)
                ):
                    m |= self.evaluate()
                    mark = time.perf_counter()  # evaluation is not step time
                if done or (cfg.save_every and self.trainer.version % cfg.save_every == 0):
                    self.save()
                self._write(m)
                history.append(m)
        finally:
            buffer.abort()  # the run is over: stop what still runs
        return history

    def _gather(self, buffer: RolloutBuffer) -> tuple[list[Group], list[Group], int]:
        """The step's groups: launched from the curriculum (a hint where the schedule
        gives one), collected as they finish, each recorded; one whose runs all score
        the same is dropped and another launched in its place (dynamic sampling), up to
        max_launches_per_step. Returns (kept, dropped, groups launched)."""
        cfg = self.config
        step = self.trainer.version
        level = self.hints.level(step, cfg.steps)
        want = cfg.groups_per_step
        spare = cfg.overprovision if cfg.async_rollouts else 0
        cap = cfg.max_launches_per_step or 4 * want
        kept: list[Group] = []
        dropped: list[Group] = []
        launches = 0
        while len(kept) < want:
            while buffer.running + buffer.ready < want - len(kept) + spare and launches < cap:
                task_id, hint = self.curriculum.next(step, level)
                buffer.launch(step, self._settings(task_id), task_id, hint)
                launches += 1
            if not buffer.ready:
                if not buffer.running:
                    break  # the launch cap is spent: train on what there is
                buffer.collect()
                continue
            [group] = buffer.take(1)
            solved = [r.reward > 0 for r in group.results if not r.masked]
            signal = self.curriculum.record(group.task_id, solved, step, group.hint)
            (kept if signal or not cfg.dynamic_sampling else dropped).append(group)
        return kept, dropped, launches

    def _curriculum_metrics(self, kept: list[Group], dropped: list[Group], launches: int):
        step = self.trainer.version  # after the update: estimates as the next step sees them
        done = len(kept) + len(dropped)
        return {
            "sampling_kept": len(kept),
            "sampling_dropped": len(dropped),
            # every rollout this step ran to the end, dropped groups' too (rollouts per hour)
            "rollouts_run": sum(len(g.results) for g in kept + dropped),
            "dropped_share": round(len(dropped) / done, 4) if done else 0.0,
            "groups_launched": launches,
            "hint_level": self.hints.level(step - 1, self.config.steps),
            "hinted_groups": sum(g.hint > 0 for g in kept),
            "hinted_share": round(sum(g.hint > 0 for g in kept) / len(kept), 4) if kept else 0.0,
            "no_signal": not kept,
            "kept_families": sorted(self.families.get(g.task_id, "?") for g in kept),
            "family_pass_rate": {
                f: e["pass_rate"] for f, e in self.curriculum.family_estimates(step).items()
            },
        }

    def evaluate(self) -> dict[str, Any]:
        """Held-out solve rate: each held-out task once, greedy, with the current weights."""
        started = time.perf_counter()
        worker, n = self.eval_workers[0], len(self.inference)
        refs = [  # never a hint: a held-out evaluation measures the model alone
            worker.rl_rollout.remote(
                f"eval{self.trainer.version}.{i}",
                task_id,
                self.inference[i % n],
                self._settings(task_id, greedy=True),
                0,
            )
            for i, task_id in enumerate(self.heldout_ids)
        ]
        results = ray.get(refs)
        self._sampler_metrics()  # the evaluation's decoding is no step's
        m = self._rollout_metrics(results)
        # Solved: the agent ended its run itself and the tests pass; a run cut by a limit
        # counts as unsolved here, whatever its tests say (as tachy eval counts it).
        solved = [float(r.reward > 0 and not r.masked) for r in results]
        low, high = bootstrap_ci(solved, seed=self.config.seed)
        shape = ("parallel_calls_per_turn", "tool_calls", "tool_error_frac", "well_formed_frac",
                 "reads_before_edit", "codebase_searches", "turns", "tokens", "turns_solved",
                 "tokens_solved")  # fmt: skip
        by_family: dict[str, list[float]] = {}
        for r, ok in zip(results, solved, strict=True):
            by_family.setdefault(self.families.get(r.task_id, "?"), []).append(ok)
        return (
            {
                "heldout_solve_rate": round(statistics.fmean(solved), 4),
                "heldout_families": {
                    f: round(statistics.fmean(v), 4) for f, v in sorted(by_family.items())
                },
                "heldout_solve_ci95": [round(low, 4), round(high, 4)],
                "heldout_tasks": len(results),
                "heldout_masked": sum(r.masked for r in results),
                "heldout_solved": sorted(
                    r.task_id for r, s in zip(results, solved, strict=True) if s
                ),
            }
            | {f"heldout_{k}": m[k] for k in shape}
            | {"eval_s": round(time.perf_counter() - started, 3)}
        )

    def _sampler_metrics(self) -> dict[str, float]:
        """The inference actors' work since the last call: seconds decoding (summed over
        actors) and generated tokens per second of it."""
        stats = ray.get([a.stats.remote() for a in self.inference])
        busy, tokens = sum(s["busy_s"] for s in stats), sum(s["tokens"] for s in stats)
        last_busy, last_tokens = self._sampler_seen
        self._sampler_seen = (busy, tokens)
        busy, tokens = busy - last_busy, tokens - last_tokens
        return {
            "sampler_busy_s": round(busy, 3),
            "sampler_tokens_per_s": round(tokens / busy, 2) if busy > 0 else 0.0,
        }

    @staticmethod
    def _rollout_metrics(results: list[RolloutResult]) -> dict[str, Any]:
        scored = [r for r in results if not r.masked]
        calls_turns = sum(r.turns_with_calls for r in results)
        calls = sum(r.tool_calls for r in results)

        def mean(values: list[float]) -> float:
            return round(statistics.fmean(values), 4) if values else 0.0

        seconds = [r.seconds for r in results]
        solved = [r for r in scored if r.reward > 0]
        statuses: dict[str, int] = {}
        for r in results:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        return {
            "rollouts": len(results),
            "reward": mean([r.reward for r in scored]),
            "solve_rate": mean([float(r.reward > 0) for r in scored]),
            "masked": len(results) - len(scored),
            "statuses": statuses,
            "turns": mean([r.turns for r in results]),
            "tool_calls": mean([r.tool_calls for r in results]),
            "tool_error_frac": (
                round(sum(r.tool_errors for r in results) / calls, 4) if calls else 0.0
            ),
            "parallel_calls_per_turn": (
                round(sum(r.tool_calls for r in results) / calls_turns, 4) if calls_turns else 0.0
            ),
            "well_formed_frac": (
                round(1 - sum(r.malformed_calls for r in results) / calls, 4) if calls else 0.0
            ),
            "reads_before_edit": mean([r.reads_before_edit for r in results]),
            "edits": mean([r.edits for r in results]),
            "codebase_searches": mean([r.codebase_searches for r in results]),
            "tokens": mean([r.tokens for r in results]),
            "turns_solved": mean([r.turns for r in solved]),  # 0.0 when none solved
            "tokens_solved": mean([r.tokens for r in solved]),
            "rollout_s_mean": mean(seconds),
            # where a rollout's time went: waiting for the sampler, running tools, tests
            "rollout_sample_s": mean([r.sample_s for r in results]),
            "rollout_tools_s": mean([max(0.0, r.seconds - r.sample_s) for r in results]),
            "rollout_test_s": mean([r.test_s for r in results]),
            "rollout_s_max": round(max(seconds), 3) if seconds else 0.0,
        }

    # ------------------------------------------------------------------ state
    def _write(self, m: dict[str, Any]) -> None:
        with (self.out / METRICS_FILE).open("a", encoding="utf-8") as sink:
            sink.write(json.dumps(m) + "\n")
        if self.log is not None:
            line = f"step {m['step']}/{self.config.steps}"
            for key in ("reward", "heldout_solve_rate", "masked", "step_s", "trainer_idle_frac"):
                if key in m:
                    line += f"  {key} {m[key]}"
            print(line, file=self.log, flush=True)

    def save(self) -> Path:
        state = self.trainer.state_dict() | {
            "curriculum": self.curriculum.state_dict(),
            "config": dataclasses.asdict(self.config),
            "kind": "rl",
        }
        write_checkpoint(self.trainer.model, self.tokenizer, self.out, state)
        self.trainer.model.train()
        return self.out


def _spread(task_ids: list[str], families: dict[str, str]) -> list[str]:
    """The tasks in turn by family (the first of each family, then the second, ...), so
    a held-out evaluation of its first N covers every family."""
    by_family: dict[str, list[str]] = {}
    for t in task_ids:
        by_family.setdefault(families.get(t, ""), []).append(t)
    queues = [by_family[f] for f in sorted(by_family)]
    out = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def check_resumable(out: str | Path) -> dict[str, Any]:
    """The config saved by an RL run in `out` (TrainStateError if there is none)."""
    state = read_state(out)
    if state.get("kind") != "rl":
        raise TrainStateError(f"{out}: not an RL run's checkpoint")
    return state["config"]
