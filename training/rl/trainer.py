"""The RL policy update (the trainer role, in the controller's process): group-relative
advantages over a batch of finished rollouts, the clipped token-level or GSPO loss
(training/rl/loss.py) with the sampler's experts replayed, AdamW, and the state a
checkpoint keeps of it.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from typing import Any

import torch

from model.model import Model
from model.tokenizer import Tokenizer
from training.rl import routing_replay
from training.rl.config import RLConfig
from training.rl.loss import (
    TokenBatch,
    TokenSequence,
    batch_advantages,
    policy_loss,
    sequence_logprobs,
    staleness,
)
from training.rl.rollout_worker import RolloutResult
from training.sft.common import adamw


class RLTrainer:
    """The policy update: advantages per group, the clipped token-level (or GSPO) loss with
    truncated importance weights against the sampler's log-probs, routing replay, AdamW.
    `version` (the step) is the policy version of the weights it holds."""

    def __init__(self, model: Model, tokenizer: Tokenizer, config: RLConfig) -> None:
        self.model, self.tokenizer, self.config = model.train(), tokenizer, config
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
        self.version = 0
        self.moe_layers = len(routing_replay.moe_modules(model))
        self.k = model.config.num_experts_per_tok
        self.optimizer = adamw(model, config.lr, config.weight_decay)

    def reward(self, r: RolloutResult) -> float:
        """The reward trained on (see RLConfig.format_reward)."""
        working = (r.tool_calls - r.tool_errors) / r.tool_calls if r.tool_calls else 0.0
        return r.reward + self.config.format_reward * working - self.config.turn_cost * r.turns

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
                # one optimiser step per batch: the trainer's log-probs before it are these
                own = logprobs.detach() if cfg.ratio_against == "trainer" else None
                loss, m = policy_loss(
                    logprobs, batch, mode=cfg.loss_mode, clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high, is_cap=cfg.is_cap, old_logprobs=own,
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
