"""The RL trainer on Ray: one controller driving inference actors, rollout workers and a
trainer, behind `tachy train rl --config FILE [--steps N] --out DIR`.

    config = RLConfig.from_file("rl.toml")
    with RLRun(config, out="runs/rl") as run:
        run.train()               # metrics in runs/rl/metrics.jsonl, checkpoint in runs/rl

Roles (slime / verl's split): the controller (this process) hands tasks out and
collects results; inference actors (training.inference) sample, token in, token out;
rollout workers (training.rollout_worker) run the agent executor, imported unchanged,
in sandboxed environments and score the runs with the task's tests; the trainer
(RLTrainer, in this process) computes the loss (training.rl_loss) and updates the
model, whose weights go to the inference actors through the object store after each
step.

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
`local:DIR`), the optimizer, the step (= the policy version), RNG states and the task
sampler's position, written like the SFT trainer's. `resume` restores all of it: from
the same batch the next update is bit-identical to the uninterrupted run's, and the
task order continues where it stopped (the rollouts themselves are sampled anew).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import statistics
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import msgspec
import ray
import torch

from agent.policy import PolicyError
from model.checkpoint import load
from model.model import Model
from model.policy import find_tokenizer
from model.tokenizer import Tokenizer
from training import replay
from training.data import is_heldout
from training.envs import EnvLimits
from training.inference import InferenceActor, sampler_weights
from training.rl_loss import (
    MODES,
    TokenBatch,
    TokenSequence,
    batch_advantages,
    policy_loss,
    sequence_logprobs,
    staleness,
)
from training.rollout_worker import RolloutResult, RolloutSettings, RolloutWorker
from training.sft import (
    METRICS_FILE,
    TrainStateError,
    adamw,
    epoch_permutation,
    read_state,
    truncate_metrics,
    write_checkpoint,
)
from training.tasks import load_tasks

PATH_KEYS = ("tasks", "heldout_tasks", "init", "workdir")


@dataclass
class RLConfig:
    tasks: str  # task set directory (tachy tasks build)
    init: str  # the checkpoint to start from (the SFT warm-up)
    heldout_tasks: str | None = None  # task set for the held-out solve rate
    # >0: hold out this fraction of `tasks` (by task id, training.data.is_heldout) for the
    # solve rate instead, and never train on them
    heldout_fraction: float = 0.0
    # rollouts
    group_size: int = 4  # G
    groups_per_step: int = 2
    overprovision: int = 1  # groups in flight beyond groups_per_step (async)
    max_staleness: int = 1  # eta
    async_rollouts: bool = True
    max_turns: int = 6
    max_tokens: int = 4096  # per rollout, prompt included
    max_new_tokens: int = 256  # per turn
    rollout_timeout_s: float = 120.0
    command_timeout_s: float = 30.0
    temperature: float = 1.0
    # The reward trained on: the tests' (1 solved, else 0) plus format_reward times the
    # share of the run's tool calls that ran without an error (0 without calls). A small
    # model that never solves a task gets no signal from the tests alone; this shaping
    # rewards calls that work. Metrics' "reward" stays the tests' own.
    format_reward: float = 0.0
    # actors
    inference_actors: int = 1
    inference_batch: int = 8
    inference_threads: int = 1
    compile: bool = False  # torch.compile the samplers' decode step
    rollout_workers: int = 1
    envs_per_worker: int = 4
    workdir: str | None = None  # where sandboxes live (default: the pool's)
    # loss and optimizer
    loss_mode: str = "token"  # token | gspo
    clip_low: float | None = None  # default: the mode's
    clip_high: float | None = None
    is_cap: float | None = 2.0
    replay_routing: bool = True
    lr: float = 2e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    micro_batch: int = 2  # sequences per forward
    trainer_threads: int | None = None
    # bookkeeping
    steps: int = 10
    eval_every: int = 0  # held-out solve rate every N steps (0: at the start and the end)
    eval_tasks: int = 16  # held-out tasks per evaluation (greedy, one run each)
    save_every: int = 1
    seed: int = 0

    def check(self) -> None:
        positive = [
            "group_size", "groups_per_step", "max_turns", "max_tokens", "max_new_tokens",
            "rollout_timeout_s", "command_timeout_s", "inference_actors", "inference_batch",
            "rollout_workers", "envs_per_worker", "micro_batch", "steps", "eval_tasks",
        ]  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("overprovision", "max_staleness", "eval_every", "save_every", "format_reward"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError("group_size must be at least 2 (advantages compare runs of a task)")
        if self.loss_mode not in MODES:
            raise ValueError(f"loss_mode must be one of {MODES}, got {self.loss_mode!r}")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 (the loss needs the sampler's log-probs)")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not 0 <= self.heldout_fraction < 1:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        if self.heldout_fraction and self.heldout_tasks:
            raise ValueError("give heldout_tasks or heldout_fraction, not both")

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> RLConfig:
        """Read a TOML file of RLConfig fields; relative paths are taken from the file's
        directory. Unknown or mistyped fields are a ValueError naming them."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"config file {path} does not exist") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"config file {path}: {exc}") from None
        data |= {k: v for k, v in overrides.items() if v is not None}
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"config file {path}: unknown fields {unknown}")
        missing = [n for n in ("tasks", "init") if n not in data]
        if missing:
            raise ValueError(f"config file {path}: missing {missing}")
        for key in PATH_KEYS:
            if isinstance(data.get(key), str):
                data[key] = str((path.parent / Path(data[key]).expanduser()).resolve())
        try:
            config = msgspec.convert(data, cls, strict=True)
        except msgspec.ValidationError as exc:
            raise ValueError(f"config file {path}: {exc}") from None
        config.check()
        return config


# ---------------------------------------------------------------------- the trainer


class RLTrainer:
    """The policy update: advantages per group, the clipped token-level (or GSPO) loss with
    truncated importance weights against the sampler's log-probs, routing replay, AdamW.
    `version` (the step) is the policy version of the weights it holds."""

    def __init__(self, model: Model, tokenizer: Tokenizer, config: RLConfig) -> None:
        self.model, self.tokenizer, self.config = model.train(), tokenizer, config
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
        self.version = 0
        self.moe_layers = len(replay.moe_modules(model))
        self.k = model.config.num_experts_per_tok
        self.optimizer = adamw(model, config.lr, config.weight_decay)

    def reward(self, r: RolloutResult) -> float:
        """The reward trained on (see RLConfig.format_reward)."""
        working = (r.tool_calls - r.tool_errors) / r.tool_calls if r.tool_calls else 0.0
        return r.reward + self.config.format_reward * working

    def batch(self, results: list[RolloutResult]) -> tuple[list[TokenSequence], dict[str, Any]]:
        """The sequences that enter the loss, each with its advantage, and what was kept."""
        rewards = torch.tensor([self.reward(r) for r in results], dtype=torch.float64)
        valid = torch.tensor([not r.masked and bool(r.sequence.token_ids) for r in results])
        groups = [r.rollout_id.rsplit(".", 1)[0] for r in results]  # "g3.1" -> group g3
        adv = batch_advantages(rewards, groups, valid)
        seqs = []
        for r, a, keep in zip(results, adv.values.tolist(), adv.keep.tolist(), strict=True):
            if keep and any(r.sequence.loss_mask):
                seqs.append(dataclasses.replace(r.sequence, advantage=a))
        info = {
            "train_reward": round(float(rewards.mean()), 4),
            "groups": adv.groups,
            "groups_dropped": adv.dropped,
            "sequences": len(seqs),
        }
        return seqs, info

    def train_step(self, results: list[RolloutResult]) -> dict[str, Any]:
        """One update from a batch of finished rollouts (whole groups). With no group
        carrying signal the weights stay as they are; the version advances either way."""
        cfg = self.config
        started = time.perf_counter()
        seqs, info = self.batch(results)
        metrics: dict[str, Any] = dict(info)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if seqs:
            total_tokens = sum(sum(s.loss_mask) for s in seqs)
            per_seq = cfg.loss_mode == "gspo"
            sums: dict[str, float] = {}
            stale = {"staleness_mean": 0.0, "staleness_max": 0.0}
            for i in range(0, len(seqs), cfg.micro_batch):
                micro = seqs[i : i + cfg.micro_batch]
                batch = TokenBatch.collate(
                    micro, pad_id=self.pad_id, moe_layers=self.moe_layers, k=self.k
                )
                n_tok = batch.num_tokens
                for key, value in staleness(batch, self.version).items():
                    if key.endswith("max"):
                        stale[key] = max(stale[key], value)
                    else:
                        stale[key] += value * n_tok / total_tokens
                logprobs = sequence_logprobs(
                    self.model, batch, replay_routing=cfg.replay_routing,
                    temperature=cfg.temperature,
                )  # fmt: skip
                loss, m = policy_loss(
                    logprobs, batch, mode=cfg.loss_mode, clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high, is_cap=cfg.is_cap,
                )  # fmt: skip
                share = len(micro) / len(seqs) if per_seq else n_tok / total_tokens
                (loss * share).backward()
                for key, value in m.items():
                    if key in ("tokens", "sequences"):
                        continue
                    sums[key] = sums.get(key, 0.0) + value * share
            grad_norm = torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else math.inf
            )
            self.optimizer.step()
            metrics |= {k: round(v, 6) for k, v in sums.items()} | stale
            metrics |= {"tokens_trained": total_tokens, "grad_norm": float(grad_norm)}
        metrics["updated"] = bool(seqs)
        self.version += 1
        metrics["train_s"] = round(time.perf_counter() - started, 4)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.version,
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["step"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        self.model.train()


# ---------------------------------------------------------------------- the controller


class TaskSampler:
    """Tasks in a fresh permutation per epoch, seeded by (seed, epoch); its position is
    (epoch, cursor), saved with the checkpoint."""

    def __init__(self, task_ids: list[str], seed: int) -> None:
        if not task_ids:
            raise ValueError("no training tasks")
        self.task_ids, self.seed = sorted(task_ids), seed
        self.epoch, self.cursor = 0, 0

    def next(self) -> str:
        if self.cursor == len(self.task_ids):
            self.epoch, self.cursor = self.epoch + 1, 0
        perm = epoch_permutation(len(self.task_ids), self.seed, self.epoch)
        task = self.task_ids[perm[self.cursor]]
        self.cursor += 1
        return task


@dataclass
class _Group:
    gid: str
    task_id: str
    results: list[RolloutResult] = field(default_factory=list)


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
        source = self.out if resume else Path(config.init)
        state = read_state(self.out) if resume else None
        try:
            model = load(source)
        except Exception as exc:
            raise ValueError(f"cannot load the model from {source}: {exc}") from None
        try:
            self.tokenizer = find_tokenizer(source)
        except PolicyError as exc:
            raise ValueError(str(exc)) from None
        context = model.config.max_position_embeddings
        if config.max_tokens > context:
            raise ValueError(
                f"max_tokens {config.max_tokens} exceeds the model's context of {context} tokens"
            )
        self.trainer = RLTrainer(model, self.tokenizer, config)
        task_ids = [t.id for t in load_tasks(config.tasks)]
        fraction = config.heldout_fraction
        held = [t for t in task_ids if fraction and is_heldout(t, fraction)]
        self.sampler = TaskSampler(sorted(set(task_ids) - set(held)), config.seed)
        self.eval_taskset = config.heldout_tasks or (config.tasks if held else None)
        if config.heldout_tasks:
            held = [t.id for t in load_tasks(config.heldout_tasks)]
        self.heldout_ids = sorted(held)[: config.eval_tasks]
        self.out.mkdir(parents=True, exist_ok=True)  # once the inputs are known good
        if state is not None:
            self.trainer.load_state_dict(state)
            self.sampler.epoch, self.sampler.cursor = state["sampler"]
            truncate_metrics(self.out, self.trainer.version)
        self._groups = 0
        self._actors_up = False

    # ------------------------------------------------------------------ actors
    def _start_actors(self) -> None:
        cfg = self.config
        if not ray.is_initialized():
            ray.init(
                num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False,
                log_to_driver=False, logging_level="ERROR",
            )  # fmt: skip
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
        self._actors_up = True
        self.sync_weights()

    def sync_weights(self) -> float:
        """Put the trainer's weights in the object store once; every inference actor loads
        them as the trainer's version. Returns the seconds until all have."""
        started = time.perf_counter()
        ref = ray.put(sampler_weights(self.trainer.model))
        ray.get([a.set_weights.remote(self.trainer.version, ref) for a in self.inference])
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
    def _settings(self, *, greedy: bool = False) -> RolloutSettings:
        cfg = self.config
        return RolloutSettings(
            max_turns=cfg.max_turns, max_tokens=cfg.max_tokens,
            max_new_tokens=cfg.max_new_tokens, timeout_s=cfg.rollout_timeout_s,
            max_staleness=None if greedy or not cfg.async_rollouts else cfg.max_staleness,
            temperature=0.0 if greedy else None,
        )  # fmt: skip

    def _launch_group(self, inflight: dict, groups: dict) -> None:
        cfg = self.config
        self._groups += 1
        group = _Group(f"s{self.trainer.version}g{self._groups}", self.sampler.next())
        groups[group.gid] = group
        settings = self._settings()
        for i in range(cfg.group_size):
            n = self._groups * cfg.group_size + i
            worker = self.workers[n % len(self.workers)]
            sampler = self.inference[n % len(self.inference)]
            rid = f"{group.gid}.{i}"
            ref = worker.rl_rollout.remote(rid, group.task_id, sampler, settings)
            inflight[ref] = (group.gid, rid, worker)

    def _collect(self, inflight: dict, groups: dict, ready: list) -> None:
        """Wait for the next rollout to finish; a group whose runs are all in is ready."""
        done, _ = ray.wait(list(inflight), num_returns=1)
        for ref in done:
            gid, rid, _worker = inflight.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as exc:  # a worker failed: the run is masked, not fatal
                result = RolloutResult(rid, groups[gid].task_id, "error", 0.0, "error", 0.0)
                result.error = f"{type(exc).__name__}: {exc}"
            group = groups[gid]
            group.results.append(result)
            if len(group.results) == self.config.group_size:
                ready.append(groups.pop(gid))

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
        history: list[dict[str, Any]] = []
        inflight: dict = {}
        groups: dict[str, _Group] = {}
        ready: list[_Group] = []
        if self.heldout_ids and self.trainer.version == 0:
            self._write({"step": 0} | self.evaluate())
        mark = time.perf_counter()
        try:
            while self.trainer.version < until:
                want = cfg.groups_per_step
                target = want + cfg.overprovision  # groups in flight or ready (async)
                if not cfg.async_rollouts:
                    while len(groups) < want:
                        self._launch_group(inflight, groups)
                waited = time.perf_counter()
                while len(ready) < want:
                    if cfg.async_rollouts:
                        while len(groups) + len(ready) < target:
                            self._launch_group(inflight, groups)
                    self._collect(inflight, groups, ready)
                idle = time.perf_counter() - waited
                batch, ready = ready[:want], ready[want:]
                results = [r for g in batch for r in g.results]
                stale = self._mask_stale(results)
                m = self.trainer.train_step(results)
                sync_s = self.sync_weights()
                now = time.perf_counter()
                step_s = now - mark
                mark = now
                m = {"step": self.trainer.version} | self._rollout_metrics(results) | m
                m |= {
                    "stale_masked": stale,
                    "carried_over": len(ready) + len(groups),
                    "weight_sync_s": round(sync_s, 4),
                    "step_s": round(step_s, 3),
                    "trainer_idle_s": round(idle, 3),
                    "trainer_idle_frac": round(idle / step_s, 4) if step_s > 0 else 0.0,
                }
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
            self._abort(inflight)
        return history

    def _abort(self, inflight: dict) -> None:
        """Stop every rollout still running (the run is over) and wait for them."""
        for _gid, rid, worker in inflight.values():
            worker.abort.remote(rid)
        if inflight:
            ray.wait(list(inflight), num_returns=len(inflight), timeout=120)

    def evaluate(self) -> dict[str, Any]:
        """Held-out solve rate: each held-out task once, greedy, with the current weights."""
        started = time.perf_counter()
        settings = self._settings(greedy=True)
        worker, n = self.eval_workers[0], len(self.inference)
        refs = [
            worker.rl_rollout.remote(
                f"eval{self.trainer.version}.{i}", task_id, self.inference[i % n], settings
            )
            for i, task_id in enumerate(self.heldout_ids)
        ]
        results = ray.get(refs)
        m = self._rollout_metrics(results)
        # Solved: the agent ended its run itself and the tests pass; a run cut by a limit
        # counts as unsolved here, whatever its tests say.
        solved = sum(r.reward > 0 and not r.masked for r in results)
        return {
            "heldout_solve_rate": round(solved / len(results), 4),
            "heldout_tasks": len(results),
            "heldout_masked": sum(r.masked for r in results),
            "heldout_parallel_calls_per_turn": m["parallel_calls_per_turn"],
            "heldout_tool_calls": m["tool_calls"],
            "heldout_tool_error_frac": m["tool_error_frac"],
            "eval_s": round(time.perf_counter() - started, 3),
        }

    @staticmethod
    def _rollout_metrics(results: list[RolloutResult]) -> dict[str, Any]:
        scored = [r for r in results if not r.masked]
        calls_turns = sum(r.turns_with_calls for r in results)
        calls = sum(r.tool_calls for r in results)

        def mean(values: list[float]) -> float:
            return round(statistics.fmean(values), 4) if values else 0.0

        seconds = [r.seconds for r in results]
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
            "tokens": mean([r.tokens for r in results]),
            "rollout_s_mean": mean(seconds),
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
            "sampler": [self.sampler.epoch, self.sampler.cursor],
            "config": dataclasses.asdict(self.config),
            "kind": "rl",
        }
        write_checkpoint(self.trainer.model, self.tokenizer, self.out, state)
        self.trainer.model.train()
        return self.out


def check_resumable(out: str | Path) -> dict[str, Any]:
    """The config saved by an RL run in `out` (TrainStateError if there is none)."""
    state = read_state(out)
    if state.get("kind") != "rl":
        raise TrainStateError(f"{out}: not an RL run's checkpoint")
    return state["config"]
