"""The RL run's settings: `RLConfig`, read from a TOML file of its fields
(training/configs/rl-tiny.toml) by `tachy train rl --config FILE`, checked before
anything starts.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from training.rl.curriculum import HintSchedule
from training.rl.loss import MODES

RATIO_AGAINST = ("sampler", "trainer")
PATH_KEYS = ("tasks", "heldout_tasks", "init", "workdir")


@dataclass
class RLConfig:
    tasks: str  # task set directory (tachy tasks build)
    # the checkpoint to start from (the SFT warm-up): a full checkpoint trains every
    # weight; a part of tachy's model (part.json) keeps the base frozen and trains
    # attention adapters of rank lora_rank plus the norms and routers (training.sft.adapters)
    init: str
    lora_rank: int = 16
    heldout_tasks: str | None = None  # task set for the held-out solve rate
    # >0: hold out this fraction of `tasks` (by task id, training.sft.data.is_heldout) for the
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
    # minus turn_cost per turn the run took: of two runs that solve a task the shorter
    # scores higher (speed is part of quality); 0 trains on the tests' reward alone
    turn_cost: float = 0.0
    # which tasks (training.rl.curriculum): tasks whose recent un-hinted pass rate is
    # strictly between 0 and 1 (or unknown); a group whose runs all pass or all fail is
    # dropped and another launched instead (dynamic sampling), at most
    # max_launches_per_step groups a step (0: 4 x groups_per_step)
    dynamic_sampling: bool = True
    max_launches_per_step: int = 0
    difficulty_window: int = 16  # outcomes kept per task for its pass-rate estimate
    difficulty_horizon: int = 20  # steps an outcome counts for
    # a task whose un-hinted group solved nothing is rolled out again with a reviewer's
    # hint: "prefix,line,file@0.6" = those levels in equal parts of the first 60 % of the
    # steps, none after (training.rl.curriculum.HintSchedule); "none": never
    hints: str = "none"
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
    # what the PPO ratio is taken against: "sampler" (DAPO: the sampler's log-probs, so
    # the clip is also the trust region against stale weights) or "trainer" (the trainer's
    # own log-probs before the step: the ratio starts at 1, and what the sampler differs
    # by, stale weights or MXFP8 rounding noise, goes only into the weight capped at is_cap)
    ratio_against: str = "sampler"
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
            "lora_rank", "difficulty_window", "difficulty_horizon",
        ]  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in (
            "overprovision", "max_staleness", "eval_every", "save_every", "format_reward",
            "turn_cost", "max_launches_per_step",
        ):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError("group_size must be at least 2 (advantages compare runs of a task)")
        if self.loss_mode not in MODES:
            raise ValueError(f"loss_mode must be one of {MODES}, got {self.loss_mode!r}")
        if self.ratio_against not in RATIO_AGAINST:
            raise ValueError(
                f"ratio_against must be one of {RATIO_AGAINST}, got {self.ratio_against!r}"
            )
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 (the loss needs the sampler's log-probs)")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not 0 <= self.heldout_fraction < 1:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        if self.heldout_fraction and self.heldout_tasks:
            raise ValueError("give heldout_tasks or heldout_fraction, not both")
        HintSchedule.parse(self.hints)  # a CurriculumError (a ValueError) naming what is wrong

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
