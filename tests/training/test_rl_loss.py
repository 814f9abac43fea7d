"""The RL objective: advantages and the policy loss against hand-computed values, the
training forward's log-prob alignment, and routing replay (tiny random models)."""

from __future__ import annotations

import math

import pytest
import torch

from model import Model
from model.generate import Engine, SamplingParams
from model.tokenizer import train_bpe
from tests.model import test_model as model_tests
from training.rl.loss import (
    TokenBatch,
    TokenSequence,
    batch_advantages,
    group_advantages,
    policy_loss,
    sequence_logprobs,
    staleness,
)
from training.rl.routing_replay import check_experts, moe_modules

pytestmark = pytest.mark.usefixtures("torch_path")  # kernels' torch path (no interpreter)


# ---------------------------------------------------------------------- advantages


def test_leave_one_out_advantages():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.0]))
    # A_i = r_i - mean of the other three
    expected = [1 - 0.5 / 3, 0 - 1.5 / 3, 0.5 - 1.0 / 3, 0 - 1.5 / 3]
    torch.testing.assert_close(adv, torch.tensor(expected), rtol=0, atol=1e-7)
    # no std normalisation: scaling the rewards scales the advantages
    torch.testing.assert_close(group_advantages(torch.tensor([2.0, 0.0, 1.0, 0.0])), 2 * adv)


def test_group_of_two():
    torch.testing.assert_close(
        group_advantages(torch.tensor([1.0, 0.25])), torch.tensor([0.75, -0.75])
    )


def test_truncated_rollout_is_masked_not_scored():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.5])
    valid = torch.tensor([True, True, False, True])  # rollout 2 was cut by a limit
    adv = group_advantages(rewards, valid)
    # baselines over the valid others only: {0, 0.5}, {1, 0.5}, -, {1, 0}
    expected = [1 - 0.25, 0 - 0.75, 0.0, 0.5 - 0.5]
    torch.testing.assert_close(adv, torch.tensor(expected), rtol=0, atol=1e-7)
    # its reward does not matter
    torch.testing.assert_close(group_advantages(torch.tensor([1.0, 0.0, 9.0, 0.5]), valid), adv)


def test_groups_without_signal_are_dropped():
    assert group_advantages(torch.tensor([0.5, 0.5, 0.5])) is None  # all equal
    assert (
        group_advantages(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([True, True, False])) is None
    )
    assert (
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([True, False])) is None
    )  # 1 valid
    assert group_advantages(torch.tensor([1.0])) is None


def test_batch_advantages():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.3])
    groups = ["a", "a", "b", "b", "c", "c", "c"]
    valid = torch.tensor([True, True, True, True, True, True, False])
    out = batch_advantages(rewards, groups, valid)
    assert (out.groups, out.dropped) == (3, 1)  # "b" all equal
    torch.testing.assert_close(out.values, torch.tensor([1.0, -1.0, 0, 0, -1.0, 1.0, 0]))
    assert out.keep.tolist() == [True, True, False, False, True, True, False]


# ---------------------------------------------------------------------- policy loss by hand


def hand_batch(deltas, mask, adv, samp=-1.0, garbage=100.0):
    """logprobs = samp + deltas on the mask, garbage off it (must be ignored)."""
    mask = torch.tensor(mask, dtype=torch.bool)
    deltas = torch.tensor(deltas, dtype=torch.float32)
    sampler = torch.where(mask, torch.full_like(deltas, samp), torch.full_like(deltas, -garbage))
    logp = torch.where(mask, sampler + deltas, torch.full_like(deltas, garbage))
    batch = TokenBatch(
        input_ids=torch.zeros(mask.shape, dtype=torch.long),
        loss_mask=mask,
        sampler_logprobs=sampler,
        advantages=torch.tensor(adv),
    )
    return logp.requires_grad_(), batch


def test_token_loss_by_hand():
    ln = math.log
    # row 0 (A=+1): ratios 1.5 (clipped at 1.28), 1.1, 0.5 (below 0.8 but A>0: not clipped)
    # row 1 (A=-1): ratios 0.5 (clipped at 0.8), 2.0 (A<0: unclipped), then a masked pad
    logp, batch = hand_batch(
        [[0, ln(1.5), ln(1.1), ln(0.5)], [0, ln(0.5), ln(2.0), 0]],
        [[0, 1, 1, 1], [0, 1, 1, 0]],
        [1.0, -1.0],
    )
    loss, m = policy_loss(logp, batch)
    J = 1.28 + 1.1 + 0.5 + (-0.8) + (-2.0)
    assert loss.item() == pytest.approx(-J / 5, abs=1e-6)  # token mean over both rows
    loss.backward()
    grad = torch.tensor([[0, 0, -1.1, -0.5], [0, 0, 2.0, 0]]) / 5  # -A * r / N unclipped
    torch.testing.assert_close(logp.grad, grad, rtol=0, atol=1e-6)
    assert m["tokens"] == 5 and m["sequences"] == 2
    assert m["clip_high"] == pytest.approx(1 / 5) and m["clip_low"] == pytest.approx(1 / 5)
    assert m["ratio"] == pytest.approx((1.5 + 1.1 + 0.5 + 0.5 + 2.0) / 5, abs=1e-6)
    deltas = torch.tensor([ln(1.5), ln(1.1), ln(0.5), ln(0.5), ln(2.0)])
    assert m["kl_k1"] == pytest.approx(float(-deltas.mean()), abs=1e-6)
    assert m["kl_k3"] == pytest.approx(float((deltas.exp() - 1 - deltas).mean()), abs=1e-6)
    assert m["logprob_mismatch"] == pytest.approx(float(deltas.abs().mean()), abs=1e-6)
    assert m["is_capped"] == 0.0  # old = sampler: every weight is 1


def test_token_normalisation_is_over_all_tokens():
    # one long sequence (A=+1, 6 tokens) and one short (A=-1, 2 tokens), all ratios 1:
    # token-level mean gives (6 - 2) / 8, not the mean of the per-sequence means (0)
    logp, batch = hand_batch(
        [[0.0] * 7, [0.0] * 7], [[0] + [1] * 6, [0, 1, 1, 0, 0, 0, 0]], [1.0, -1.0]
    )
    loss, m = policy_loss(logp, batch)
    assert loss.item() == pytest.approx(-(6 - 2) / 8)
    assert m["tokens"] == 8


def test_truncated_importance_weights_by_hand():
    ln = math.log
    # old (trainer, pre-step) vs sampler: weights exp(old - samp) = 3 (capped at 2), 1.5, 0.5
    # current vs old: ratios 1.0, 1.5 (clipped at 1.28 for A>0), 0.9
    logp, batch = hand_batch([[0, 0, 0, 0]], [[0, 1, 1, 1]], [2.0])
    samp = batch.sampler_logprobs
    old = samp + torch.tensor([[0, ln(3.0), ln(1.5), ln(0.5)]])
    with torch.no_grad():
        logp.copy_(old + torch.tensor([[0, 0, ln(1.5), ln(0.9)]]))
    loss, m = policy_loss(logp, batch, old_logprobs=old)
    J = 2.0 * 1.0 * 2 + 1.5 * 1.28 * 2 + 0.5 * 0.9 * 2
    assert loss.item() == pytest.approx(-J / 3, abs=1e-6)
    loss.backward()
    # d/dlogp of -w*r*A/N where unclipped; the clipped token gets none
    torch.testing.assert_close(
        logp.grad, torch.tensor([[0, -2.0 * 2, 0, -0.5 * 0.9 * 2]]) / 3, rtol=0, atol=1e-6
    )
    assert m["is_capped"] == pytest.approx(1 / 3)
    assert m["clip_high"] == pytest.approx(1 / 3)
    # no cap: the weight 3 counts in full
    loss_nocap, _ = policy_loss(logp, batch, old_logprobs=old, is_cap=None)
    assert loss_nocap.item() == pytest.approx(-(J + 2.0) / 3, abs=1e-6)
    # old = logp.detach(): the on-policy TIS gradient w * A * grad logp
    logp.grad = None
    policy_loss(logp, batch, old_logprobs=logp.detach())[0].backward()
    w = (logp.detach() - samp).exp().clamp(max=2.0) * batch.loss_mask
    torch.testing.assert_close(logp.grad, -w * 2.0 / 3, rtol=0, atol=1e-6)


def test_gspo_by_hand():
    # sequence ratios: row 0 exp(3e-3 / 3) = exp(1e-3) > 1 + 4e-4 (A>0: clipped high),
    # row 1 exp(-2e-3 / 2) = exp(-1e-3) < 1 - 3e-4 (A<0: clipped low)
    logp, batch = hand_batch(
        [[0, 3e-3, 0, 0], [0, -2e-3, 0, 0]], [[0, 1, 1, 1], [0, 1, 1, 0]], [1.0, -1.0]
    )
    loss, m = policy_loss(logp, batch, mode="gspo")
    assert loss.item() == pytest.approx(-((1 + 4e-4) - (1 - 3e-4)) / 2, abs=1e-7)
    loss.backward()
    assert not logp.grad.any()  # both clipped
    assert m["clip_high"] == 0.5 and m["clip_low"] == 0.5 and m["tokens"] == 5

    # inside the clip range: J_b = s_b A_b, dJ_b/dlogp_t = s_b A_b / |y_b|, mean over sequences
    logp, batch = hand_batch(
        [[0, 1e-4, 0, 0], [0, 1e-4, -3e-4, 0]], [[0, 1, 1, 1], [0, 1, 1, 0]], [1.0, -0.5]
    )
    s0, s1 = math.exp(1e-4 / 3), math.exp(-2e-4 / 2)
    loss, m = policy_loss(logp, batch, mode="gspo")
    assert loss.item() == pytest.approx(-(s0 * 1.0 + s1 * -0.5) / 2, abs=1e-7)
    loss.backward()
    g = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]]) * torch.tensor(
        [[-s0 / 3 / 2], [0.5 * s1 / 2 / 2]]
    )
    torch.testing.assert_close(logp.grad, g.float(), rtol=1e-5, atol=1e-7)
    assert m["ratio"] == pytest.approx((s0 + s1) / 2, abs=1e-7)

    # sequence-level truncated IS weight: exp(mean(old - samp)) = exp(ln 4) capped at 2
    logp, batch = hand_batch([[0, 0, 0, 0]], [[0, 1, 1, 1]], [1.0])
    old = batch.sampler_logprobs + torch.tensor([[0, math.log(4.0), 0, 0]]) * 3
    with torch.no_grad():
        logp.copy_(old)
    loss, m = policy_loss(logp, batch, mode="gspo", old_logprobs=old)
    assert loss.item() == pytest.approx(-2.0) and m["is_capped"] == 1.0


def test_policy_loss_errors():
    logp, batch = hand_batch([[0, 0]], [[0, 1]], [1.0])
    with pytest.raises(ValueError, match="mode"):
        policy_loss(logp, batch, mode="ppo")
    with pytest.raises(ValueError, match="must be"):
        policy_loss(logp[:, :1], batch)
    empty = TokenBatch(
        batch.input_ids,
        torch.zeros(1, 2, dtype=torch.bool),
        batch.sampler_logprobs,
        batch.advantages,
    )
    with pytest.raises(ValueError, match="no token"):
        policy_loss(logp, empty)
    with pytest.raises(ValueError, match="position 0"):
        TokenBatch(batch.input_ids, torch.ones(1, 2), batch.sampler_logprobs, batch.advantages)
    with pytest.raises(ValueError, match="advantages"):
        TokenBatch(batch.input_ids, batch.loss_mask, batch.sampler_logprobs, torch.zeros(2))


# ---------------------------------------------------------------------- tiny models


def make_model(precision="fp32", **overrides) -> Model:
    """The model tests' tiny MoE (3 layers, one of them dense), fp32 by default."""
    return model_tests.make_model(precision, **overrides)


def rand_ids(shape=(2, 12), seed=1, vocab=256):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def model_batch(ids, mask, adv, experts=None) -> TokenBatch:
    B, L = ids.shape
    return TokenBatch(ids, mask, torch.zeros(B, L), torch.tensor(adv), routed_experts=experts)


def test_sequence_logprobs_alignment():
    model = make_model()
    ids = rand_ids()
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, 0] = False
    lp = sequence_logprobs(model, model_batch(ids, mask, [1.0, 1.0]), replay_routing=False)
    assert lp.shape == ids.shape and not lp[:, 0].any()
    with torch.no_grad():
        ref = torch.log_softmax(model(ids).float(), dim=-1)  # [B, L, V]
    for b in range(2):
        for t in range(1, ids.shape[1]):
            assert lp[b, t].item() == pytest.approx(ref[b, t - 1, ids[b, t]].item(), abs=1e-5)
    # the sampler's temperature
    lp2 = sequence_logprobs(
        model, model_batch(ids, mask, [1.0, 1.0]), replay_routing=False, temperature=0.5
    )
    with torch.no_grad():
        ref2 = torch.log_softmax(model(ids).float() / 0.5, dim=-1)
    assert lp2[1, 5].item() == pytest.approx(ref2[1, 4, ids[1, 5]].item(), abs=1e-5)
    with pytest.raises(ValueError, match="no routed_experts"):
        sequence_logprobs(model, model_batch(ids, mask, [1.0, 1.0]), replay_routing=True)


def test_a_shared_prefix_forwarded_once_gives_the_same_logprobs():
    model = make_model()
    ids = rand_ids((3, 40), seed=4)
    ids[:, :24] = ids[0, :24]  # the rows share a system prompt and a task
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, 26:] = True
    batch = model_batch(ids, mask, [1.0, 0.0, -1.0])
    full = sequence_logprobs(model, batch, replay_routing=False, shared_prefix=False)
    shared = sequence_logprobs(model, batch, replay_routing=False, shared_prefix=True)
    assert torch.allclose(shared, full, atol=1e-5) and bool(shared[mask].ne(0).all())
    assert not shared[~mask].any()  # only the sampled tokens' log-probs are computed
    shared[mask].sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_gradient_step_moves_logprobs_with_the_advantage(sign):
    model = make_model()
    ids = rand_ids((1, 10))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, :4] = False  # a prompt
    batch = model_batch(ids, mask, [sign])
    with torch.no_grad():
        before = sequence_logprobs(model, batch, replay_routing=False)
    batch.sampler_logprobs = before.clone()  # on-policy: the sampler is this model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss, _ = policy_loss(sequence_logprobs(model, batch, replay_routing=False), batch)
    loss.backward()
    opt.step()
    with torch.no_grad():
        after = sequence_logprobs(model, batch, replay_routing=False)
    change = float(((after - before) * mask).sum())
    assert change * sign > 0


# ---------------------------------------------------------------------- routing replay


@pytest.mark.parametrize("precision", ["fp32", "mxfp8"])
def test_replay_of_own_experts_is_the_plain_forward(precision):
    model = make_model(precision)
    ids = rand_ids()
    with torch.no_grad():
        plain = model(ids, return_routing=True)
        replayed = model(ids, replay_routing=plain.routing, return_routing=True)
    assert torch.equal(replayed.routing, plain.routing)
    assert torch.equal(replayed.logits, plain.logits)


def forced_experts(model, ids, seed=3) -> torch.Tensor:
    """Random distinct experts per token and layer: [moe_layers, B, L, k]."""
    c = model.config
    g = torch.Generator().manual_seed(seed)
    n = len(moe_modules(model))
    scores = torch.rand(n, *ids.shape, c.num_experts, generator=g)
    return scores.topk(c.num_experts_per_tok, dim=-1).indices


@pytest.mark.parametrize("precision", ["fp32", "mxfp8"])
def test_replay_forces_the_given_experts(precision):
    model = make_model(precision)
    ids = rand_ids()
    forced = forced_experts(model, ids)
    with torch.no_grad():
        plain = model(ids, return_routing=True)
        out = model(ids, replay_routing=forced, return_routing=True)
    assert not torch.equal(forced, plain.routing)
    assert torch.equal(out.routing, forced)
    assert not torch.allclose(out.logits, plain.logits)

    # tokens without a recorded routing (-1) route themselves, the others are forced
    partial = forced.clone()
    partial[:, :, :5] = -1
    with torch.no_grad():
        mixed = model(ids, replay_routing=partial, return_routing=True)
    assert torch.equal(mixed.routing[:, :, 5:], forced[:, :, 5:])
    # the first 5 positions see only themselves (causal): the plain forward's routing
    assert torch.equal(mixed.routing[:, :, :5], plain.routing[:, :, :5])
    # (equal up to summation order: the expert loop batches other tokens together)
    torch.testing.assert_close(mixed.logits[:, :5], plain.logits[:, :5], rtol=0, atol=1e-5)


def test_replay_weights_are_the_routers_softmax_at_the_given_ids():
    model = make_model("fp32")
    moe = moe_modules(model)[0]
    h = torch.randn(1, 6, 64, generator=torch.Generator().manual_seed(0))
    forced = forced_experts(model, torch.zeros(1, 6))  # [2, 1, 6, 2]
    with torch.no_grad():
        y, _, used = moe(h, forced[0])
    e = forced[0, 0]  # [6, 2] layer 0's experts
    assert torch.equal(used, e)
    with torch.no_grad():
        p = torch.softmax(h[0] @ moe.gate.weight.T, dim=-1).gather(1, e)  # [6, 2]
        w = p / p.sum(-1, keepdim=True)  # norm_topk_prob
        ref = torch.zeros(6, 64)
        for t in range(6):
            for j in range(2):
                g, u = (moe.w_gate_up[e[t, j]] @ h[0, t]).chunk(2)
                ref[t] += w[t, j] * (moe.w_down[e[t, j]] @ (torch.nn.functional.silu(g) * u))
    torch.testing.assert_close(y[0], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", ["fp32", "mxfp8"])
@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_replay_gradients_reach_router_and_replayed_experts(precision, norm_topk_prob):
    model = make_model(precision, norm_topk_prob=norm_topk_prob).train()
    ids = rand_ids()
    forced = torch.zeros(2, *ids.shape, 2, dtype=torch.long)
    forced[..., 1] = 1  # every token of both MoE layers to experts {0, 1}
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, 0] = False
    batch = model_batch(ids, mask, [1.0, -1.0], experts=forced)
    lp = sequence_logprobs(model, batch, replay_routing=True)
    batch.sampler_logprobs = lp.detach().clone()
    policy_loss(lp, batch)[0].backward()
    for moe in moe_modules(model):
        g_experts = moe.w_gate_up.grad.flatten(1).abs().sum(1)  # [E]
        assert (g_experts[:2] > 0).all() and not g_experts[2:].any()
        assert moe.w_down.grad[:2].abs().sum() > 0 and not moe.w_down.grad[2:].any()
        g_router = moe.gate.weight.grad.abs().sum(1)  # [E]
        assert (g_router[:2] > 0).all()
        # renormalised weights w_0 = p_0 / (p_0 + p_1) depend on logits 0 and 1 only
        # (exactly, up to fp32 rounding); without renormalisation w_j = p_j sees all logits
        other = float(g_router[2:].max() / g_router[:2].min())
        assert other < 1e-4 if norm_topk_prob else other > 1e-2


def test_replay_errors():
    model = make_model()
    ids = rand_ids()
    good = forced_experts(model, ids)
    with pytest.raises(ValueError, match="moe_layers"):
        check_experts(model, good[:1])
    bad = good.clone()
    bad[0, 0, 0, 0] = 8
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        check_experts(model, bad)
    bad = good.clone()
    bad[0, 0, 0] = torch.tensor([3, 3])
    with pytest.raises(ValueError, match="twice"):
        check_experts(model, bad)
    bad = good.clone()
    bad[0, 0, 0, 0] = -1
    with pytest.raises(ValueError, match="all -1"):
        check_experts(model, bad)
    with pytest.raises(ValueError, match="integer ids"):
        check_experts(model, good.float())
    with pytest.raises(ValueError, match="moe layers, B, L, k"):
        model(ids[:, :5], replay_routing=good)  # the model checks the shape itself


CORPUS = [
    "def add(a, b):\n    return a + b\n\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
    "for i in range(10):\n    print(i, i * i)\n",
] * 4


def test_replay_reproduces_the_samplers_experts_end_to_end():
    """Generate with the engine (KV-cache decode), rebuild the rollout token in, token out
    (prompt as context, a tool-output-like context segment, a second generation), and the
    replayed training forward routes every generated token exactly as the sampler did and
    reproduces its log-probs."""
    tok = train_bpe(CORPUS, vocab_size=400)
    model = make_model("fp32", vocab_size=tok.vocab_size).eval()
    engine = Engine(model, tok, max_batch=2, max_seq=96)
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=0)
    prompt = tok.encode("def add(a, b):\n")
    first = engine.generate([prompt], params)[0]
    seq = TokenSequence(advantage=0.5)
    seq.append_context(prompt)
    seq.append_sampled(first.token_ids, first.logprobs, version=3, experts=first.experts)
    tool_output = tok.encode("for i in range(10):\n")
    seq.append_context(tool_output)
    second = engine.generate([seq.token_ids], params)[0]
    seq.append_sampled(second.token_ids, second.logprobs, version=4, experts=second.experts)

    short = TokenSequence()
    short.append_context(prompt[:3])
    batch = TokenBatch.collate([seq, short], pad_id=0, moe_layers=2, k=2)
    n1, n2 = len(first.token_ids), len(second.token_ids)
    L = len(prompt) + n1 + len(tool_output) + n2
    assert batch.input_ids.shape == (2, L) and batch.num_tokens == n1 + n2
    gen_at = [*range(len(prompt), len(prompt) + n1), *range(L - n2, L)]
    assert batch.loss_mask[0].nonzero()[:, 0].tolist() == gen_at
    assert batch.policy_version[0, gen_at].tolist() == [3] * n1 + [4] * n2
    assert (batch.routed_experts[:, 1] == -1).all()  # nothing recorded: routes freely
    with pytest.raises(ValueError, match="moe_layers=3"):
        TokenBatch.collate([seq], moe_layers=3, k=2)
    lag = staleness(batch, version=5)
    assert lag["staleness_max"] == 2.0
    assert lag["staleness_mean"] == pytest.approx((2 * n1 + 1 * n2) / (n1 + n2))

    with torch.no_grad():
        out = model(batch.input_ids, replay_routing=batch.routed_experts, return_routing=True)
    recorded = torch.cat([first.experts, second.experts]).long().permute(1, 0, 2)
    assert torch.equal(out.routing[:, 0, gen_at], recorded)
    with torch.no_grad():
        lp = sequence_logprobs(model, batch, replay_routing=True)
    sampler = torch.tensor([*first.logprobs, *second.logprobs])
    torch.testing.assert_close(lp[0, gen_at], sampler, rtol=0, atol=1e-4)
    loss, m = policy_loss(lp, batch)
    assert m["logprob_mismatch"] < 1e-4 and m["ratio"] == pytest.approx(1.0, abs=1e-4)
    assert loss.item() == pytest.approx(-0.5, abs=1e-4)  # r = 1, only row 0 has tokens
