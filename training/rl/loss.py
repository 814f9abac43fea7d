"""The RL objective: group-relative advantages, the clipped policy loss with truncated
importance weights (token level, or GSPO's sequence level), and the training forward
that produces the log-probs it needs (with the sampler's routing replayed).

Notation: B sequences, L padded length, G rollouts of one task (a group), m[b, t] the
loss mask (1 on tokens the sampler generated, 0 on prompt, tool-output and padding
tokens), A_b the advantage of sequence b, broadcast to its tokens. Log-probs:

    logp      log pi_theta(y_t)    the trainer now, differentiable
    old       log pi_old(y_t)      the trainer's policy at the start of this step
                                   (no gradient); by default = samp
    samp      log pi_samp(y_t)     what the sampler reported when it drew y_t

Alignment: everything is [B, L] over input_ids, and column t holds the log-prob of
input_ids[:, t] given input_ids[:, :t]; column 0 has no prefix (0, never in the mask).

Advantages (group_advantages): the leave-one-out baseline, no std normalisation,

    A_i = r_i - mean_{j != i, j valid} r_j          (= n/(n-1) * (r_i - mean_valid r))

Rollouts cut by a limit (truncated) are invalid: advantage 0, kept out of the others'
baselines and out of the loss. A group with fewer than 2 valid rollouts or with equal
valid rewards has no signal and is dropped.

Token mode (policy_loss, DAPO's token-level clipped surrogate, decoupled from the
sampler as in TIS / decoupled PPO):

    r_t = exp(logp_t - old_t)                                  PPO ratio, trainer vs old
    w_t = sg(min(exp(old_t - samp_t), C))                      truncated IS weight (TIS)
    J_t = w_t * min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A)
    loss = - sum_{b,t} m J / sum_{b,t} m                       token-level mean over the batch

With old = samp (the default: one update per batch, so the sampler's policy is the old
policy) w = 1 and r is the ratio against the sampler, clipped asymmetrically: DAPO. When
the trainer recomputes old under no_grad (several optimiser steps per batch, or to
separate staleness from the trust region), r is the trust region and w corrects what the
sampler's distribution (stale weights, other numerics) differs by, capped at C. Passing
old = logp.detach() gives the on-policy TIS gradient w * A * grad(logp).

GSPO mode: the same with sequence-level quantities (|y_b| = sum_t m[b, t]),

    s_b = exp(sum_t m (logp - old) / |y_b|)                    sequence ratio (geometric mean)
    w_b = sg(min(exp(sum_t m (old - samp) / |y_b|), C))
    J_b = w_b * min(s_b A_b, clip(s_b, 1 - eps_low, 1 + eps_high) A_b)
    loss = - mean over sequences with |y_b| > 0 of J_b

with GSPO's small clip range (3e-4, 4e-4) by default.

Routing replay: the training forward routes each sampled token to the experts the
sampler recorded for it (Model.forward(..., replay_routing=...), model.model.route).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from model.model import Model, prefix_kv
from training.rl import routing_replay

MODES = ("token", "gspo")
CLIP_DEFAULTS = {"token": (0.2, 0.28), "gspo": (3e-4, 4e-4)}  # (eps_low, eps_high)


# ---------------------------------------------------------------------- advantages


def group_advantages(rewards: Tensor, valid: Tensor | None = None) -> Tensor | None:
    """rewards [G], valid [G] bool (False: truncated) -> advantages [G] fp32, or None when
    the group is dropped (fewer than 2 valid rollouts, or all valid rewards equal).

    A_i = r_i - mean_{j != i, valid} r_j for valid i; 0 for invalid i."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be [G], got {tuple(rewards.shape)}")
    r = rewards.double()
    v = torch.ones_like(r, dtype=torch.bool) if valid is None else valid.bool()
    if v.shape != r.shape:
        raise ValueError(f"valid {tuple(v.shape)} must match rewards {tuple(r.shape)}")
    n = int(v.sum())
    if n < 2:
        return None
    rv = r[v]
    if bool((rv == rv[0]).all()):
        return None
    baseline = (rv.sum() - r) / (n - 1)  # [G] mean of the other valid rewards
    return torch.where(v, r - baseline, 0.0).float()


@dataclass
class Advantages:
    values: Tensor  # [N] fp32: per rollout, 0 where not trained on
    keep: Tensor  # [N] bool: valid rollouts of kept groups (the ones that enter the loss)
    groups: int  # groups seen
    dropped: int  # groups dropped (no signal)


def batch_advantages(
    rewards: Tensor, groups: Sequence[Hashable] | Tensor, valid: Tensor | None = None
) -> Advantages:
    """rewards [N] of rollouts from many tasks, groups [N] (the task / group key of each),
    valid [N] -> group_advantages per group, in the rollouts' order."""
    N = rewards.shape[0]
    keys = groups.tolist() if isinstance(groups, Tensor) else list(groups)
    if len(keys) != N:
        raise ValueError(f"{len(keys)} group keys for {N} rewards")
    v = torch.ones(N, dtype=torch.bool) if valid is None else valid.bool().cpu()
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    values, keep, dropped = torch.zeros(N), torch.zeros(N, dtype=torch.bool), 0
    for idx in members.values():
        at = torch.tensor(idx)
        adv = group_advantages(rewards.cpu()[at], v[at])
        if adv is None:
            dropped += 1
            continue
        values[at] = adv
        keep[at] = v[at]
    return Advantages(values, keep, len(members), dropped)


# ---------------------------------------------------------------------- token batches


@dataclass
class TokenSequence:
    """One rollout, token in, token out: built by appending the context the policy was fed
    (prompt, tool output, chat markers: not trained on) and what the sampler generated."""

    advantage: float = 0.0
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[bool] = field(default_factory=list)
    sampler_logprobs: list[float] = field(default_factory=list)
    policy_version: list[int] = field(default_factory=list)  # -1 on context tokens
    experts: list[tuple[int, Tensor | None]] = field(default_factory=list)  # (n, [n, layers, k])

    def append_context(self, ids: Sequence[int], experts: Tensor | None = None) -> None:
        """Tokens the policy read but did not sample; experts [n, moe_layers, k] if the
        sampler recorded their routing, else they route freely in replay."""
        self._append(ids, [0.0] * len(ids), False, -1, experts)

    def append_sampled(
        self, ids: Sequence[int], logprobs: Sequence[float], version: int, experts: Tensor | None
    ) -> None:
        """A generation: its ids, the sampler's log-prob of each, the policy version that
        sampled it, and the experts each token was routed to when fed (Generation.experts,
        [n, moe_layers, k])."""
        if len(logprobs) != len(ids):
            raise ValueError(f"{len(logprobs)} log-probs for {len(ids)} tokens")
        if not self.token_ids:
            raise ValueError("a sequence cannot start with a sampled token (no prefix)")
        self._append(ids, list(logprobs), True, version, experts)

    def _append(self, ids, logprobs, sampled, version, experts) -> None:
        n = len(ids)
        if experts is not None and (experts.dim() != 3 or experts.shape[0] != n):
            raise ValueError(f"experts {tuple(experts.shape)} must be [n={n}, moe_layers, k]")
        self.token_ids += list(ids)
        self.loss_mask += [sampled] * n
        self.sampler_logprobs += logprobs
        self.policy_version += [version] * n
        self.experts.append((n, experts))

    def routed_experts(self, moe_layers: int, k: int) -> Tensor:
        """[moe_layers, len, k] int64, -1 where no routing was recorded."""
        if any(e is not None and e.shape[1:] != (moe_layers, k) for _, e in self.experts):
            raise ValueError(f"recorded experts are not [n, moe_layers={moe_layers}, k={k}]")
        pieces = [
            torch.full((n, moe_layers, k), -1, dtype=torch.long) if e is None else e.long()
            for n, e in self.experts
        ]
        if not pieces:
            return torch.full((moe_layers, 0, k), -1, dtype=torch.long)
        return torch.cat(pieces).permute(1, 0, 2)


@dataclass
class TokenBatch:
    input_ids: Tensor  # [B, L] int64, right-padded
    loss_mask: Tensor  # [B, L] bool: sampled tokens (not prompt, tool output, padding)
    sampler_logprobs: Tensor  # [B, L] fp32, log pi_samp(input_ids[:, t]); 0 off the mask
    advantages: Tensor  # [B] fp32, per sequence
    policy_version: Tensor | None = None  # [B, L] int64, -1 off the mask
    routed_experts: Tensor | None = None  # [moe_layers, B, L, k] int64, -1: route freely

    def __post_init__(self) -> None:
        B, L = self.input_ids.shape
        for name in ("loss_mask", "sampler_logprobs", "policy_version"):
            t = getattr(self, name)
            if t is not None and t.shape != (B, L):
                raise ValueError(f"{name} {tuple(t.shape)} must be [B={B}, L={L}]")
        if self.advantages.shape != (B,):
            raise ValueError(f"advantages {tuple(self.advantages.shape)} must be [B={B}]")
        e = self.routed_experts
        if e is not None and (e.dim() != 4 or e.shape[1:3] != (B, L)):
            raise ValueError(f"routed_experts {tuple(e.shape)} must be [moe_layers, {B}, {L}, k]")
        self.loss_mask = self.loss_mask.bool()
        if bool(self.loss_mask[:, 0].any()):
            raise ValueError("position 0 has no prefix: it cannot be in the loss mask")

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum())

    @classmethod
    def collate(
        cls,
        seqs: Sequence[TokenSequence],
        *,
        pad_id: int = 0,
        moe_layers: int | None = None,
        k: int | None = None,
    ) -> TokenBatch:
        """Right-pad sequences into a batch; routed_experts when moe_layers and k are given
        (padding and unrecorded tokens -1)."""
        if not seqs:
            raise ValueError("no sequences to collate")
        if (moe_layers is None) != (k is None):
            raise ValueError("routed_experts need both moe_layers and k")
        B, L = len(seqs), max(len(s.token_ids) for s in seqs)
        ids = torch.full((B, L), pad_id, dtype=torch.long)
        mask = torch.zeros(B, L, dtype=torch.bool)
        samp = torch.zeros(B, L)
        version = torch.full((B, L), -1, dtype=torch.long)
        experts = None
        if moe_layers is not None and k is not None:
            experts = torch.full((moe_layers, B, L, k), -1, dtype=torch.long)
        for b, s in enumerate(seqs):
            n = len(s.token_ids)
            ids[b, :n] = torch.tensor(s.token_ids, dtype=torch.long)
            mask[b, :n] = torch.tensor(s.loss_mask, dtype=torch.bool)
            samp[b, :n] = torch.tensor(s.sampler_logprobs, dtype=torch.float32)
            version[b, :n] = torch.tensor(s.policy_version, dtype=torch.long)
            if experts is not None:
                experts[:, b, :n] = s.routed_experts(moe_layers, k)
        adv = torch.tensor([s.advantage for s in seqs], dtype=torch.float32)
        return cls(ids, mask, samp, adv, version, experts)


def staleness(batch: TokenBatch, version: int) -> dict[str, float]:
    """How many policy versions behind `version` (the trainer's, before this step) the
    batch's sampled tokens were drawn: mean and max over the loss mask."""
    if batch.policy_version is None:
        raise ValueError("the batch has no policy_version")
    lag = (version - batch.policy_version)[batch.loss_mask].float()
    if lag.numel() == 0:
        return {"staleness_mean": 0.0, "staleness_max": 0.0}
    return {"staleness_mean": float(lag.mean()), "staleness_max": float(lag.max())}


# ---------------------------------------------------------------------- the training forward


def sequence_logprobs(
    model: Model,
    batch: TokenBatch,
    *,
    replay_routing: bool,
    temperature: float = 1.0,
    shared_prefix: bool = True,
) -> Tensor:
    """The training forward -> logprobs [B, L] fp32 (differentiable when grad is on):
    logprobs[:, t] = log softmax(logits[:, t-1] / temperature)[input_ids[:, t]], the
    log-prob of token t given tokens < t, at the loss mask's positions; 0 elsewhere.

    Two savings that leave those values as they are: the head runs only at the positions
    that predict a masked token (the vocabulary is most of a position's cost), and with
    `shared_prefix` the prefix every row shares before its first masked token (the system
    prompt and, within a group, the task) is forwarded once without gradient and the rows
    start after it (model.PrefixKV; its keys and values get no gradient, as in SFT).

    With replay_routing the sampler's experts (batch.routed_experts) are replayed
    (Model.forward's replay_routing). `temperature` must be the sampler's (its log-probs are of the
    tempered distribution); top-k / top-p truncation is not reproduced, so RL samples
    with top_k=0, top_p=1."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (the sampler's), got {temperature}")
    experts = batch.routed_experts if replay_routing else None
    if replay_routing and experts is None:
        raise ValueError("replay asked but the batch has no routed_experts")
    if experts is not None:
        routing_replay.check_experts(model, experts)
    ids, mask = batch.input_ids, batch.loss_mask
    B, L = ids.shape
    where = torch.zeros_like(mask)
    where[:, :-1] = mask[:, 1:]  # positions whose logits predict a masked token
    P = _shared_prefix(ids, where) if shared_prefix else 0
    options: dict = {}
    if P:
        options = dict(
            positions=torch.arange(P, L), cache=prefix_kv(model, ids[0, :P]), cache_len=L
        )
    logits = model(
        ids[:, P:], replay_routing=None if experts is None else experts[:, :, P:],
        logits_where=where[:, P:], **options,
    )  # fmt: skip
    logits = logits.float() / temperature  # [N, V], row-major over the positions of `where`
    target = ids[:, 1:][where[:, :-1]]  # [N] the token each predicts
    chosen = logits.gather(-1, target[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
    return torch.zeros(B, L, dtype=chosen.dtype).masked_scatter(mask, chosen)


MIN_SHARED_PREFIX = 16  # shorter is not worth a forward of its own


def _shared_prefix(ids: Tensor, where: Tensor) -> int:
    """The length of the prefix every row shares, ending before the first position
    whose logits are needed; 0 when shorter than MIN_SHARED_PREFIX."""
    if not bool(where.any()):
        return 0
    first = int(where.float().argmax(dim=1)[where.any(dim=1)].min())
    same = (ids == ids[:1]).all(dim=0).long().cumprod(0).sum()
    P = min(first, int(same))
    return P if P >= MIN_SHARED_PREFIX else 0


# ---------------------------------------------------------------------- the loss


def policy_loss(
    logprobs: Tensor,
    batch: TokenBatch,
    *,
    mode: str = "token",
    clip_low: float | None = None,
    clip_high: float | None = None,
    is_cap: float | None = 2.0,
    old_logprobs: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """logprobs [B, L] (sequence_logprobs, differentiable) -> (loss, metrics); the formulas
    are in the module docstring. clip_low / clip_high default to the mode's
    (token: 0.2 / 0.28, gspo: 3e-4 / 4e-4); is_cap = C (None: no truncation);
    old_logprobs [B, L] the trainer's pre-step log-probs (default: the sampler's).

    Metrics (means over the mask's tokens unless said; gspo's clip/cap over sequences):
    loss; tokens, sequences; ratio (mean r_t or s_b); clip_low / clip_high (fraction where
    that side of the clip binds and zeroes the gradient: A < 0 and r < 1 - eps_low, A > 0
    and r > 1 + eps_high); is_capped (fraction with exp(old - samp) > C); kl_k1 =
    mean(samp - logp) and kl_k3 = mean(rho - 1 - log rho), rho = exp(logp - samp), two
    estimates of KL(pi_samp || pi_theta) on the sampler's tokens; logprob_mismatch =
    mean |logp - samp| (sampler vs trainer, before this step's update)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    eps_low, eps_high = CLIP_DEFAULTS[mode]
    eps_low = eps_low if clip_low is None else clip_low
    eps_high = eps_high if clip_high is None else clip_high
    if logprobs.shape != batch.input_ids.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)} must be {tuple(batch.input_ids.shape)}")
    m = batch.loss_mask.to(logprobs.device)  # [B, L] bool
    mf = m.float()
    n_tok = mf.sum()
    if int(n_tok) == 0:
        raise ValueError("the batch has no token in its loss mask")
    zero = torch.zeros((), device=logprobs.device)
    logp = torch.where(m, logprobs.float(), zero)  # [B, L]; off-mask values never used
    samp = torch.where(m, batch.sampler_logprobs.to(logp.device).float(), zero)
    old = samp if old_logprobs is None else torch.where(m, old_logprobs.detach().float(), zero)
    A = batch.advantages.to(logp.device).float()  # [B]

    if mode == "token":
        ratio = torch.exp(logp - old)  # [B, L]
        is_w = torch.exp(old - samp)  # [B, L]
        adv, weight, count = A[:, None], mf, n_tok  # per token
    else:
        lens = mf.sum(1)  # [B]
        seq = lens > 0
        denom = lens.clamp(min=1)
        ratio = torch.exp(((logp - old) * mf).sum(1) / denom)  # [B] s_b
        is_w = torch.exp(((old - samp) * mf).sum(1) / denom)  # [B]
        adv, weight, count = A, seq.float(), seq.float().sum()  # per sequence
    w = is_w if is_cap is None else is_w.clamp(max=is_cap)
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    J = w.detach() * torch.minimum(ratio * adv, clipped * adv)
    loss = -(J * weight).sum() / count

    with torch.no_grad():

        def mean(x: Tensor, wt: Tensor = weight, n: Tensor = count) -> float:
            return float((x.float() * wt).sum() / n)

        adv_b = adv.expand_as(ratio)
        d = logp.detach() - samp  # [B, L] log rho
        metrics = {
            "loss": float(loss.detach()),
            "tokens": int(n_tok),
            "sequences": int((mf.sum(1) > 0).sum()),
            "ratio": mean(ratio),
            "clip_low": mean((adv_b < 0) & (ratio < 1.0 - eps_low)),
            "clip_high": mean((adv_b > 0) & (ratio > 1.0 + eps_high)),
            "is_capped": 0.0 if is_cap is None else mean(is_w > is_cap),
            "kl_k1": mean(-d, mf, n_tok),
            "kl_k3": mean(torch.exp(d) - 1.0 - d, mf, n_tok),
            "logprob_mismatch": mean(d.abs(), mf, n_tok),
        }
    return loss, metrics
