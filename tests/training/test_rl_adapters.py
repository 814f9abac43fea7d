"""RL on tachy's real model: the trainer updates adapters on the frozen part, the
weight sync ships only what they change and makes the sampler compute what the trainer
does, and a run's checkpoint is a part that resumes exactly."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
import torch

from model.checkpoint import open_tokenizer
from model.part import is_part
from model.policy import BASE_PART, bundled_checkpoint
from tests.training.test_envs import task
from tests.training.test_rl import drive, messages, results_from
from training.rl.config import RLConfig
from training.rl.controller import RLRun
from training.rl.inference import InferenceService
from training.rl.loss import TokenBatch, sequence_logprobs
from training.rl.routing_replay import moe_modules
from training.rl.token_policy import TokenPolicy
from training.rl.trainer import RLTrainer
from training.sft.adapters import AdaptedModel
from training.sft.common import read_state
from training.tasks.taskset import append_tasks

pytestmark = [pytest.mark.usefixtures("torch_path"), pytest.mark.timeout(900)]

PROMPTS = ["def add(a, b):", "def sub(a, b):"]  # one group of two, rewards 1 and 0


def _gap(service: InferenceService, adapted: AdaptedModel, tok) -> float:
    """Mean absolute difference between the sampler's log-probs of a fresh sample and
    the trainer's on the same ids (its experts replayed). Not zero even for the same
    weights: ~0.14 nats per token for the bundled part (a cached decode against a
    whole-sequence forward, MXFP8 activations; bench/RESULTS.md, issue 18)."""
    policy = TokenPolicy(service.generate, tok, max_tokens=512, max_new_tokens=12)
    asyncio.run(drive(policy, messages(("user", "def mul(a, b):"))))
    batch = TokenBatch.collate(
        [policy.sequence],
        moe_layers=len(moe_modules(adapted)),
        k=adapted.config.num_experts_per_tok,
    )
    with torch.no_grad():
        lp = sequence_logprobs(adapted, batch, replay_routing=True)
    m = batch.loss_mask
    return float((lp[m] - batch.sampler_logprobs[m]).abs().mean())


def test_the_trainer_moves_only_adapters_and_the_partial_sync_matches_the_sampler():
    part = bundled_checkpoint(BASE_PART)
    service = InferenceService(str(part), max_batch=1, max_seq=512, temperature=1.0, seed=7)
    tok = service.engine.tokenizer
    results = results_from(service, tok, PROMPTS, group=2)
    adapted, _ = AdaptedModel.from_part(part, rank=2)
    same = _gap(service, adapted, tok)  # both hold the part's weights
    frozen = {n: t.clone() for n, t in adapted.model.state_dict().items() if ".mlp.w_" in n}
    trainer = RLTrainer(adapted, tok, RLConfig(tasks="-", init=str(part), lr=1e-2))
    m = trainer.train_step(results)
    assert m["updated"] and m["groups"] == 1 and m["sequences"] == 2
    assert any(bool(b.abs().sum()) for b in adapted.lora_b.values())  # the adapters moved
    after = adapted.model.state_dict()
    assert frozen and all(torch.equal(t, after[n]) for n, t in frozen.items())

    state = adapted.sampling_state()
    names = {n.rsplit(".", 2)[-2] for n in state}
    assert names <= {"q_proj", "k_proj", "v_proj", "o_proj", "gate", "input_layernorm",
                     "post_attention_layernorm", "norm"}, names  # fmt: skip
    full = sum(t.numel() * t.element_size() for t in service.engine.model.state_dict().values())
    shipped = sum(t.numel() * t.element_size() for t in state.values())
    assert shipped < full / 4  # the frozen experts and embeddings never move

    stale = _gap(service, adapted, tok)  # the sampler still holds the init's weights
    asyncio.run(service.set_weights(1, state, partial=True))
    held = service.engine.model.state_dict()
    assert all(torch.equal(held[n], t.to(held[n].dtype)) for n, t in state.items())
    synced = _gap(service, adapted, tok)
    # synced: back to the level of identical weights (MXFP8 rounding noise, which varies
    # from sample to sample by 2x and more); stale: several times that (2.9x on the
    # 2-core VM with nothing else running, 0.296 against 0.102, where 3x failed)
    assert stale > 2 * synced and synced < 3 * same + 1e-3, (same, stale, synced)
    with pytest.raises(ValueError, match="does not have"):
        service.engine.load_weights({"nonsense.weight": torch.zeros(1)}, partial=True)


def test_an_rl_run_on_a_part_saves_a_part_and_resumes_its_adapters(tmp_path: Path):
    part = bundled_checkpoint(BASE_PART)
    append_tasks(tmp_path / "tasks", [task("t-1")])
    config = RLConfig(tasks=str(tmp_path / "tasks"), init=str(part), lora_rank=2, lr=1e-2)
    out = tmp_path / "run"
    run = RLRun(config, out)
    assert isinstance(run.trainer.model, AdaptedModel)
    service = InferenceService(str(part), max_batch=1, max_seq=512, temperature=1.0, seed=3)
    tok = open_tokenizer(part)
    assert tok.vocab_size == service.engine.tokenizer.vocab_size
    assert run.trainer.train_step(results_from(service, tok, PROMPTS, group=2))["updated"]
    del service
    run.save()
    assert is_part(out) and read_state(out)["step"] == 1
    trained = {n: p.detach().clone() for n, p in run.trainer.model.named_parameters()
               if p.requires_grad}  # fmt: skip
    del run
    gc.collect()

    resumed = RLRun(config, out, resume=True)
    assert resumed.trainer.version == 1
    params = dict(resumed.trainer.model.named_parameters())
    assert all(torch.equal(t, params[n]) for n, t in trained.items())
