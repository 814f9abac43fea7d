"""The supervised trainer behind `tachy train pretrain` and `tachy train sft`: next-token
cross-entropy on the masked targets of `Examples` (training/sft/data.py), plus the router's
load-balancing loss times config.router_aux_loss_coef.

    trainer = Trainer(model, tokenizer, train, heldout, TrainConfig(steps=200), out="ckpt/")
    trainer.train()                      # metrics in ckpt/metrics.jsonl, checkpoint in ckpt/
    ...
    trainer = Trainer(load("ckpt/"), tokenizer, train, heldout, config, out="ckpt/")
    trainer.restore()                    # optimizer, schedule, RNG and data position
    trainer.train()                      # the next step is the one the first run would take

One optimizer step takes `batch_size` rows in micro-batches of `micro_batch_size` (rows
right-padded to the longest in the micro-batch; pads are never targets), and the loss of
each micro-batch is its summed token loss over the step's total target tokens, so the
accumulated gradient is the full batch's whatever the micro-batching (the router's
load-balancing loss is a statistic of each micro-batch, pads included, averaged over
them: the one term that micro-batching changes). AdamW (weight
decay on matrices and expert tensors only), a linear warm-up then a cosine decay to
`min_lr_ratio * lr` (a pure function of the step: the schedule's state is the step),
gradient clipping by global norm. Rows are drawn without replacement in a fresh
permutation per epoch, seeded by (seed, epoch); the data position is (epoch, index).

Output directory `out`: the checkpoint as `model.save` writes it (weights, config,
manifest, tokenizer: loadable by `model.load`, usable as `--policy local:DIR`),
`trainer_state.pt` beside it (step, optimizer, data position, RNG, the config, and the
weights' SHA-256 so a half-written checkpoint is refused on resume), and metrics.jsonl,
one line per step: step, loss (mean over the step's target tokens), aux_loss (unscaled),
lr, tokens (fed, pads excluded), target_tokens, tokens_per_s, grad_norm (before
clipping), step_s, and eval_loss on the steps it is measured (every eval_every and the
last, when there is held-out data). Progress lines go to `log` (the CLI: stderr).

A resumed run reproduces the uninterrupted one bit for bit on the same machine and
thread count: nothing in a step is random, and everything a step reads is restored.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.nn.functional as F
from torch import Tensor

from model.model import Model, PrefixKV, prefix_kv
from model.tokenizer import Tokenizer
from training.sft.common import (
    METRICS_FILE,
    STATE_FILE,
    TrainStateError,
    adamw,
    epoch_permutation,
    read_state,
    truncate_metrics,
    write_checkpoint,
)
from training.sft.data import Examples

MIN_SHARED_PREFIX = 16  # a shorter shared prefix is not worth its own forward


@dataclass
class TrainConfig:
    steps: int = 200
    batch_size: int = 8  # rows per optimizer step
    micro_batch_size: int = 8  # rows per forward/backward; must divide batch_size
    lr: float = 2e-3
    min_lr_ratio: float = 0.1  # the cosine ends at lr * min_lr_ratio
    warmup_steps: int = 10
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # max global grad norm; 0 = off
    eval_every: int = 50  # 0 = only at the end
    eval_rows: int = 64  # held-out rows per evaluation (the first ones, always the same)
    save_every: int = 0  # 0 = only at the end
    # The prefix every row of a step shares and holds no target (the system prompt)
    # forwarded once per step without gradient, the rows' forward and backward starting
    # after it: the loss is the same, the gradient leaves out what flows back through
    # that prefix's keys and values. ~40 % less work on agent demonstrations.
    shared_prefix: bool = False
    log_every: int = 10  # progress line on stderr every N steps
    seed: int = 0

    def check(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.batch_size < 1 or self.micro_batch_size < 1:
            raise ValueError("batch_size and micro_batch_size must be >= 1")
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"micro_batch_size ({self.micro_batch_size}) must divide batch_size "
                f"({self.batch_size})"
            )
        if not self.lr > 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(
                f"need lr > 0 and 0 <= min_lr_ratio <= 1, got {self.lr}, {self.min_lr_ratio}"
            )
        if min(self.warmup_steps, self.eval_every, self.eval_rows, self.save_every) < 0:
            raise ValueError("warmup_steps, eval_every, eval_rows and save_every must be >= 0")
        if self.grad_clip < 0:
            raise ValueError(f"grad_clip must be >= 0, got {self.grad_clip}")

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step `step` (0-based)."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        decay = max(1, self.steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / decay)
        floor = self.lr * self.min_lr_ratio
        return floor + (self.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def collate(data: Examples, indices: list[int], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Rows -> inputs [B, L-1], targets [B, L-1], target mask [B, L-1] (right-padded)."""
    L = max(len(data.rows[i]) for i in indices)
    ids = torch.full((len(indices), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(indices), L), dtype=torch.bool)
    for b, i in enumerate(indices):
        n = len(data.rows[i])
        ids[b, :n], mask[b, :n] = data.rows[i], data.masks[i]
    return ids[:, :-1], ids[:, 1:], mask[:, 1:]


class Trainer:
    def __init__(
        self,
        model: Model,
        tokenizer: Tokenizer,
        train: Examples,
        heldout: Examples | None,
        config: TrainConfig,
        out: str | Path,
        *,
        meta: dict[str, Any] | None = None,
        log: TextIO | None = None,
    ) -> None:
        config.check()
        if len(train) == 0:
            raise ValueError("no training rows")
        if not any(bool(m[1:].any()) for m in train.masks):
            raise ValueError("the training rows hold no target token")
        self.model, self.tokenizer, self.config = model.train(), tokenizer, config
        self.train_data, self.heldout = train, heldout if heldout and len(heldout) else None
        self.out, self.meta, self.log = Path(out), meta or {}, log
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
        self.aux_coef = model.config.router_aux_loss_coef
        self.step = 0
        self.epoch, self.cursor = 0, 0  # data position: next row = perm(epoch)[cursor]
        self._perm = self._permutation(0)
        self.optimizer = adamw(
            model, config.lr_at(0), config.weight_decay, betas=(config.beta1, config.beta2)
        )

    # ------------------------------------------------------------------- data
    def _permutation(self, epoch: int) -> list[int]:
        return epoch_permutation(len(self.train_data), self.config.seed, epoch)

    def _next_rows(self, n: int) -> list[int]:
        rows = []
        while len(rows) < n:
            if self.cursor == len(self._perm):
                self.epoch, self.cursor = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            rows.append(self._perm[self.cursor])
            self.cursor += 1
        return rows

    # ------------------------------------------------------------------- steps
    def _forward(
        self, inputs: Tensor, mask: Tensor, prefix: PrefixKV | None = None
    ) -> tuple[Tensor, Tensor]:
        """logits [N, V] at the N target positions of `mask`, and the router aux loss;
        with `prefix`, `inputs` are the tokens after it."""
        if prefix is None:
            out = self.model(inputs, return_aux_loss=True, logits_where=mask)
        else:
            P, L = prefix.length, inputs.shape[1]
            positions = torch.arange(P, P + L)
            out = self.model(
                inputs, positions, prefix, cache_len=P + L, return_aux_loss=True,
                logits_where=mask,
            )  # fmt: skip
        return out.logits, out.aux_loss

    def _shared_prefix(
        self, micro: list[tuple[Tensor, Tensor, Tensor]]
    ) -> tuple[PrefixKV | None, list[tuple[Tensor, Tensor, Tensor]]]:
        """With config.shared_prefix: the K/V of the prefix every row of the step shares
        and no target lies in (the system prompt, and what follows it alike), computed
        once without gradient, and the micro-batches cut after it."""
        if not self.config.shared_prefix:
            return None, micro
        first = micro[0][0][0]
        # the first target position of any row (a row without targets: its length)
        P = min(
            int(torch.where(m.any(1), m.float().argmax(1), m.shape[1]).min()) for _, _, m in micro
        )
        for inputs, _, _ in micro:
            for row in inputs:
                same = (row[: len(first)] == first[: len(row)]).long()
                P = min(P, int(same.cumprod(0).sum()))
        if P < MIN_SHARED_PREFIX:
            return None, micro
        prefix = prefix_kv(self.model, first[:P])
        return prefix, [(i[:, P:], t[:, P:], m[:, P:]) for i, t, m in micro]

    def train_step(self) -> dict[str, Any]:
        """One optimizer step; returns its metrics."""
        cfg = self.config
        started = time.perf_counter()
        picks = [
            self._next_rows(cfg.micro_batch_size)
            for _ in range(cfg.batch_size // cfg.micro_batch_size)
        ]
        micro = [collate(self.train_data, rows, self.pad_id) for rows in picks]
        targets_total = sum(int(m.sum()) for _, _, m in micro)
        tokens = sum(len(self.train_data.rows[i]) for rows in picks for i in rows)  # no pads
        lr = cfg.lr_at(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, aux_sum = 0.0, 0.0
        prefix, micro = self._shared_prefix(micro)
        for inputs, targets, mask in micro:
            logits, aux = self._forward(inputs, mask, prefix)  # [N, V], scalar
            nll = F.cross_entropy(logits.float(), targets[mask], reduction="sum")
            loss = nll / max(1, targets_total) + self.aux_coef * aux / len(micro)
            loss.backward()
            loss_sum += float(nll.detach())
            aux_sum += float(aux.detach()) / len(micro)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        )
        self.optimizer.step()
        self.step += 1
        seconds = time.perf_counter() - started
        return {
            "step": self.step,
            "loss": loss_sum / max(1, targets_total),
            "aux_loss": aux_sum,
            "lr": lr,
            "tokens": tokens,
            "target_tokens": targets_total,
            "tokens_per_s": round(tokens / seconds, 1),
            "grad_norm": float(grad_norm),
            "step_s": round(seconds, 4),
        }

    @torch.no_grad()
    def evaluate(self, data: Examples | None = None) -> float | None:
        """Mean token loss over the first eval_rows rows of `data` (default: held-out)."""
        data = data or self.heldout
        if data is None:
            return None
        was_training = self.model.training
        self.model.eval()
        rows = list(range(min(len(data), self.config.eval_rows or len(data))))
        nll, count = 0.0, 0
        for i in range(0, len(rows), self.config.micro_batch_size):
            inputs, targets, mask = collate(
                data, rows[i : i + self.config.micro_batch_size], self.pad_id
            )
            logits = self.model(inputs, logits_where=mask)  # [N, V]
            nll += float(F.cross_entropy(logits.float(), targets[mask], reduction="sum"))
            count += int(mask.sum())
        self.model.train(was_training)
        return nll / count if count else None

    def train(self, until: int | None = None) -> list[dict[str, Any]]:
        """Run steps up to `until` (default: config.steps), evaluating, logging and saving
        on the way; the checkpoint is saved at the last step run. Returns the metrics."""
        cfg = self.config
        until = cfg.steps if until is None else min(until, cfg.steps)
        self.out.mkdir(parents=True, exist_ok=True)
        history = []
        with (self.out / METRICS_FILE).open("a", encoding="utf-8") as sink:
            while self.step < until:
                m = self.train_step()
                last = self.step == until
                if (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.steps:
                    eval_loss = self.evaluate()
                    if eval_loss is not None:
                        m["eval_loss"] = eval_loss
                sink.write(json.dumps(m) + "\n")
                sink.flush()
                history.append(m)
                self._progress(m)
                if last or (cfg.save_every and self.step % cfg.save_every == 0):
                    self.save()
        return history

    def _progress(self, m: dict[str, Any]) -> None:
        if self.log is None:
            return
        if self.step % max(1, self.config.log_every) and self.step not in (1, self.config.steps):
            return
        line = (
            f"step {m['step']}/{self.config.steps}  loss {m['loss']:.4f}  "
            f"aux {m['aux_loss']:.3f}  lr {m['lr']:.2e}  grad {m['grad_norm']:.2f}  "
            f"{m['tokens_per_s']:,.0f} tok/s"
        )
        if m.get("eval_loss") is not None:
            line += f"  eval {m['eval_loss']:.4f}"
        print(line, file=self.log, flush=True)

    # -------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "cursor": self.cursor,
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "config": dataclasses.asdict(self.config),
            "meta": self.meta,
        }

    def save(self) -> Path:
        """Write the checkpoint and the trainer state into `out` (write_checkpoint)."""
        write_checkpoint(self.model, self.tokenizer, self.out, self.state_dict())
        self.model.train()
        return self.out

    def restore(self) -> int:
        """Load `out`'s trainer state into this trainer (whose model must be the one
        loaded from `out`); cut metrics.jsonl back to the restored step. Returns it."""
        state = read_state(self.out)
        saved = TrainConfig(**state["config"])
        if (saved.seed, saved.batch_size) != (self.config.seed, self.config.batch_size):
            raise TrainStateError(
                f"{self.out}: saved with seed {saved.seed} and batch {saved.batch_size}, "
                f"resumed with {self.config.seed} and {self.config.batch_size}"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.epoch, self.cursor = state["step"], state["epoch"], state["cursor"]
        self._perm = self._permutation(self.epoch)
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        self.model.train()
        truncate_metrics(self.out, self.step)
        return self.step


def read_state_config(out: str | Path) -> tuple[TrainConfig, dict[str, Any]]:
    """The TrainConfig and meta saved in `out`'s trainer state (for `--resume`)."""
    path = Path(out) / STATE_FILE
    if not path.is_file():
        raise TrainStateError(f"{path}: missing (nothing to resume in {out})")
    try:
        state = torch.load(path, weights_only=True)
        return TrainConfig(**state["config"]), dict(state.get("meta") or {})
    except Exception as exc:
        raise TrainStateError(f"{path}: unreadable ({exc})") from None
