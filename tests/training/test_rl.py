"""The RL trainer (training/rl/controller.py and its roles): token-in/token-out rollouts from a real
engine in real sandboxes, the update, exact resume, and `tachy train rl` end to end on
Ray with the tiny config.

The task set's "coin" tasks have a test that passes half the time whatever the agent
does: a random tiny model's groups then carry reward variance, so the whole update path
runs (advantages, loss, optimizer, weight sync) without a model that can code."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.policy import Message, PolicyError
from agent.render import render_system_prompt
from agent.tools import ALL_TOOLS
from model.checkpoint import load, save
from model.tokenizer import IM_END, train_bpe
from tests.training.test_envs import BUGGY_OPS, TEST_OPS, task, write
from tests.training.test_sft import CODE, DEMOS, tiny_model
from training.rl.config import RLConfig
from training.rl.controller import RLRun
from training.rl.inference import InferenceService
from training.rl.loss import TokenBatch, sequence_logprobs
from training.rl.rollout_worker import RolloutResult, RolloutService, RolloutSettings
from training.rl.token_policy import Sample, TokenPolicy
from training.rl.trainer import RLTrainer
from training.sft.common import read_state, write_checkpoint
from training.tasks.taskset import TaskError, append_tasks

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
TACHY = str(Path(sys.executable).parent / "tachy")
COIN_TEST = "import random\n\n\ndef test_coin():\n    assert random.random() < 0.5\n"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tok():
    system = render_system_prompt(ALL_TOOLS)
    texts = [CODE] * 3 + [m["content"] for d in DEMOS for m in d["messages"]] * 3 + [system] * 3
    return train_bpe(texts, 2000)


@pytest.fixture(scope="module")
def init_dir(tok, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("init")
    save(tiny_model(tok.vocab_size, max_position_embeddings=2048), path, tokenizer=tok)
    return path


@pytest.fixture(scope="module")
def taskset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rl-tasks")
    repo = root / "repos" / "calc"
    write(repo, "calc/__init__.py", "")
    write(repo, "calc/ops.py", BUGGY_OPS)
    write(repo, "tests/test_ops.py", TEST_OPS)
    write(repo, "tests/test_coin.py", COIN_TEST)
    coin = dict(fail_to_pass=["tests/test_coin.py::test_coin"], pass_to_pass=[], files={})
    append_tasks(root, [task(f"coin-{i}", test_files=["tests"], **coin) for i in range(3)])
    return root


def messages(*pairs: tuple[str, str]) -> list[Message]:
    return [Message(role, content) for role, content in pairs]


async def drive(policy: TokenPolicy, convo: list[Message]) -> str:
    return "".join([chunk async for chunk in policy.stream(convo, ["<tool_result"])])


def test_token_policy_feeds_back_the_sampled_ids_and_encodes_only_new_context(init_dir, tok):
    service = InferenceService(str(init_dir), max_batch=2, max_seq=1024, seed=3)
    stops_seen = []

    async def sample(ids, n, stop):
        stops_seen.append(stop)
        return await service.generate(ids, n, stop)

    policy = TokenPolicy(sample, tok, max_tokens=1024, max_new_tokens=12)
    first = messages(("system", "be brief"), ("user", "fix add()"))

    async def run() -> tuple[list[int], int]:
        text1 = await drive(policy, first)
        sampled1 = list(policy._last.token_ids)
        n1 = len(policy.sequence.token_ids)
        second = [*first, Message("assistant", text1), Message("user", "ok <|im_end|> done")]
        await drive(policy, second)
        return sampled1, n1

    sampled1, n1 = asyncio.run(run())
    seq = policy.sequence
    prompt1 = tok.encode_chat([(m.role, m.content) for m in first], generation_prompt=True)[0]
    assert seq.token_ids[: len(prompt1)] == prompt1
    assert seq.token_ids[len(prompt1) : n1] == sampled1  # as drawn, never re-encoded
    end = [] if sampled1[-1:] == [tok.token_to_id(IM_END)] else [tok.token_to_id(IM_END)]
    context2 = end + tok.encode("\n", allow_special=False)
    context2 += tok.encode_chat([("user", "ok <|im_end|> done")], generation_prompt=True)[0]
    sampled2 = list(policy._last.token_ids)
    assert seq.token_ids[n1:] == context2 + sampled2
    mask = [False] * len(prompt1) + [True] * len(sampled1)
    mask += [False] * len(context2) + [True] * len(sampled2)
    assert seq.loss_mask == mask  # tool output and chat markers are never trained on
    assert seq.policy_version == [0 if m else -1 for m in mask]
    assert policy.tokens_generated == len(sampled1) + len(sampled2) and policy.turns == 2
    assert stops_seen == [["<tool_result"], ["<tool_result"]]  # the executor's, passed on
    experts = [e for n, e in seq.experts if e is not None]
    assert [e.shape[0] for e in experts] == [len(sampled1), len(sampled2)]


def test_a_hint_reaches_the_sampler_but_never_the_trainers_sequence(tok):
    seen: list[list[int]] = []
    answer = tok.encode("ok", allow_special=False)

    async def sample(ids, n, stop):
        seen.append(list(ids))
        return Sample(answer, [-0.5] * len(answer), None, 0, "ok", "stop")

    plain = "fix add()"
    hinted = plain + "\n\nReviewer's note: look at line 2 of `calc/ops.py`."
    policy = TokenPolicy(sample, tok, max_tokens=1024, max_new_tokens=8, hint=(plain, hinted))
    first = messages(("system", "be brief"), ("user", hinted))
    asyncio.run(drive(policy, first))
    asyncio.run(drive(policy, [*first, Message("assistant", "ok"), Message("user", "result")]))
    head_plain = tok.encode_chat([("system", "be brief"), ("user", plain)], generation_prompt=True)[
        0
    ]
    head_hint = tok.encode_chat([("system", "be brief"), ("user", hinted)], generation_prompt=True)[
        0
    ]
    seq = policy.sequence.token_ids
    assert seen[0] == head_hint and seq[: len(head_plain)] == head_plain
    assert seen[1] == head_hint + seq[len(head_plain) : len(seq) - len(answer)]
    assert sum(policy.sequence.loss_mask) == 2 * len(answer)  # only what was sampled
    with pytest.raises(PolicyError, match="hinted instruction"):
        other = TokenPolicy(sample, tok, max_tokens=1024, max_new_tokens=8, hint=(plain, "x"))
        asyncio.run(drive(other, first))


def test_the_sampler_ends_at_a_stop_string(init_dir, tok):
    service = InferenceService(str(init_dir), max_batch=2, max_seq=512, temperature=0.0)
    prompt = tok.encode_chat([("user", "def add(a, b):")], generation_prompt=True)[0]
    free = asyncio.run(service.generate(prompt, 40))
    assert len(free.text) > 6, free.text
    stop = free.text[3:6]
    cut = asyncio.run(service.generate(prompt, 40, [stop]))
    assert cut.finish_reason == "stop" and stop not in cut.text
    assert free.text.startswith(cut.text) and len(cut.text) < len(free.text)


def test_trainer_logprobs_match_the_samplers_with_routing_replay(init_dir, tok):
    """The sampler's log-probs are what the trainer computes on the same ids with the
    sampler's experts replayed (the training forward vs the KV-cache decode)."""
    service = InferenceService(str(init_dir), max_batch=1, max_seq=1024, seed=5)
    policy = TokenPolicy(service.generate, tok, max_tokens=1024, max_new_tokens=24)
    asyncio.run(drive(policy, messages(("user", "def add(a, b):"))))
    model = load(init_dir)
    moe, k = 2, model.config.num_experts_per_tok
    batch = TokenBatch.collate([policy.sequence], moe_layers=moe, k=k)
    with torch.no_grad():
        lp = sequence_logprobs(model, batch, replay_routing=True)
        out = model(batch.input_ids, replay_routing=batch.routed_experts, return_routing=True)
    m = batch.loss_mask
    assert torch.allclose(lp[m], batch.sampler_logprobs[m], atol=1e-4)
    recorded = batch.routed_experts >= 0
    assert bool(recorded.any())
    assert torch.equal(out.routing[recorded], batch.routed_experts[recorded])


def test_rollout_worker_scores_masks_and_aborts(init_dir, taskset, tmp_path):
    service = InferenceService(str(init_dir), max_batch=2, max_seq=2048, seed=1)
    worker = RolloutService(str(taskset), str(init_dir), size=1, workdir=str(tmp_path / "envs"))
    settings = RolloutSettings(max_turns=2, max_tokens=2048, max_new_tokens=16)

    async def run():
        scored = await worker.rl_rollout("g1.0", "coin-0", service, settings)
        tiny = RolloutSettings(max_turns=2, max_tokens=64, max_new_tokens=16)
        limited = await worker.rl_rollout("g1.1", "coin-0", service, tiny)
        long = RolloutSettings(max_turns=50, max_tokens=2048, max_new_tokens=400)
        running = asyncio.ensure_future(worker.rl_rollout("g2.0", "coin-1", service, long))
        while "g2.0" not in worker.running:
            await asyncio.sleep(0.01)
        assert await worker.abort("g2.0")
        aborted = await running
        assert not await worker.abort("g2.0")  # over: nothing to abort
        await worker.close()
        return scored, limited, aborted

    scored, limited, aborted = asyncio.run(run())
    assert scored.status == "scored" and not scored.masked, scored.error
    assert scored.reward in (0.0, 1.0) and scored.turns >= 1
    assert sum(scored.sequence.loss_mask) == scored.tokens > 0
    assert scored.versions == (0, 0)
    assert limited.status == "max_tokens" and limited.masked  # the prompt alone is longer
    assert aborted.status == "aborted" and aborted.masked and aborted.stop_reason == "aborted"


def results_from(service: InferenceService, tok, prompts: list[str], group: int) -> list:
    """Finished rollouts (no environment): sampled sequences with rewards 1, 0, 1, 0..."""
    results = []
    for i, prompt in enumerate(prompts):
        policy = TokenPolicy(service.generate, tok, max_tokens=512, max_new_tokens=16)
        asyncio.run(drive(policy, messages(("user", prompt))))
        rid = f"g{i // group}.{i % group}"
        result = RolloutResult(rid, "t", "scored", float(i % 2 == 0), "end_turn", 0.1)
        result.tokens, result.versions = policy.tokens_generated, policy.versions
        result.sequence = policy.sequence
        results.append(result)
    return results


def config(**kw) -> RLConfig:
    return RLConfig(tasks="unused", init="unused", micro_batch=2, lr=1e-3, **kw)


@pytest.mark.parametrize("mode", ["token", "gspo"])
def test_resume_reproduces_the_next_update_exactly(init_dir, tok, tmp_path, mode):
    service = InferenceService(str(init_dir), max_batch=1, max_seq=512, temperature=1.0, seed=7)
    batch1 = results_from(service, tok, ["add", "sub", "mul", "div"], group=2)
    batch2 = results_from(service, tok, ["one", "two", "three", "four"], group=2)
    cfg = config(loss_mode=mode)
    first = RLTrainer(load(init_dir), tok, cfg)
    m1 = first.train_step(batch1)
    assert m1["updated"] and m1["groups"] == 2 and m1["groups_dropped"] == 0
    write_checkpoint(first.model, tok, tmp_path, first.state_dict())
    m2 = first.train_step(batch2)

    resumed = RLTrainer(load(tmp_path), tok, cfg)
    resumed.load_state_dict(read_state(tmp_path))
    assert resumed.version == 1
    r2 = resumed.train_step(batch2)
    assert r2 == {**m2, "train_s": r2["train_s"]}
    for (name, a), (_, b) in zip(
        first.model.state_dict().items(), resumed.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    # and the update moved the weights the inference actors then load
    before = load(init_dir).state_dict()
    moved = [n for n, w in first.model.sampling_state().items() if not torch.equal(w, before[n])]
    assert moved


def test_a_ratio_against_the_trainer_leaves_the_samplers_noise_to_the_capped_weight(init_dir, tok):
    service = InferenceService(str(init_dir), max_batch=1, max_seq=512, temperature=1.0, seed=5)
    results = results_from(service, tok, ["add", "sub", "mul", "div"], group=2)
    for r in results:  # a sampler whose log-probs are off by +-0.3, as MXFP8 rounding makes them
        seq = r.sequence
        seq.sampler_logprobs = [
            lp + (0.3 if t % 2 else -0.3) * keep
            for t, (lp, keep) in enumerate(zip(seq.sampler_logprobs, seq.loss_mask, strict=True))
        ]
    against_sampler = RLTrainer(load(init_dir), tok, config()).train_step(results)
    assert against_sampler["clip_low"] + against_sampler["clip_high"] > 0
    trainer = RLTrainer(load(init_dir), tok, config(ratio_against="trainer", is_cap=1.0))
    before = {n: w.clone() for n, w in trainer.model.state_dict().items()}
    m = trainer.train_step(results)
    # the ratio is the trainer's own (exactly 1 before the step), so the clip never binds ...
    assert m["ratio"] == 1.0 and m["clip_low"] == 0.0 and m["clip_high"] == 0.0
    # ... and the sampler's difference shows as capped weights instead
    assert m["logprob_mismatch"] == pytest.approx(against_sampler["logprob_mismatch"])
    assert m["logprob_mismatch"] == pytest.approx(0.3, abs=1e-3)
    assert m["is_capped"] == pytest.approx(0.5, abs=0.1)  # where the sampler said less
    assert m["updated"] and any(
        not torch.equal(w, before[n]) for n, w in trainer.model.state_dict().items()
    )


def test_groups_without_signal_leave_the_weights_alone(init_dir, tok):
    service = InferenceService(str(init_dir), max_batch=1, max_seq=512, seed=2)
    results = results_from(service, tok, ["a", "b"], group=2)
    for r in results:
        r.reward = 1.0
    trainer = RLTrainer(load(init_dir), tok, config())
    before = {n: w.clone() for n, w in trainer.model.state_dict().items()}
    m = trainer.train_step(results)
    assert m["groups_dropped"] == 1 and not m["updated"] and trainer.version == 1
    assert all(torch.equal(w, before[n]) for n, w in trainer.model.state_dict().items())


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="ratio_against must be one of"):
        config(ratio_against="old").check()
    path = tmp_path / "rl.toml"
    path.write_text('tasks = "t"\ninit = "i"\ngroup_sise = 4\n')
    with pytest.raises(ValueError, match="unknown fields \\['group_sise'\\]"):
        RLConfig.from_file(path)
    path.write_text('tasks = "t"\ninit = "i"\ngroup_size = "4"\n')
    with pytest.raises(ValueError, match=r"Expected `int`, got `str` - at `\$.group_size`"):
        RLConfig.from_file(path)
    path.write_text('tasks = "t"\ninit = "i"\ngroup_size = 1\n')
    with pytest.raises(ValueError, match="group_size must be at least 2"):
        RLConfig.from_file(path)
    path.write_text('tasks = "t"\ninit = "i"\nheldout_tasks = "h"\nheldout_fraction = 0.1\n')
    with pytest.raises(ValueError, match="not both"):
        RLConfig.from_file(path)
    path.write_text('init = "i"\n')
    with pytest.raises(ValueError, match="missing \\['tasks'\\]"):
        RLConfig.from_file(path)
    path.write_text('tasks = "t"\ninit = "i"\n')
    cfg = RLConfig.from_file(path, steps=3)
    assert cfg.steps == 3 and cfg.tasks == str(tmp_path / "t")


def tachy(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TACHY, *args], cwd=cwd, capture_output=True, text=True, timeout=500,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def test_tachy_train_rl_two_steps_then_resume(init_dir, taskset, tmp_path):
    """The CI smoke run: two asynchronous RL steps on Ray with the tiny config, then one
    more resumed from the checkpoint."""
    (tmp_path / "rl.toml").write_text(
        f'tasks = "{taskset}"\ninit = "{init_dir}"\nheldout_tasks = "{taskset}"\n'
        "group_size = 2\ngroups_per_step = 2\noverprovision = 1\nmax_turns = 2\n"
        "max_tokens = 2048\nmax_new_tokens = 24\neval_tasks = 2\nenvs_per_worker = 2\n"
        'max_launches_per_step = 40\nhints = "line,file@0.5"\n'
        f'workdir = "{tmp_path / "envs"}"\nlr = 1e-3\n'
    )
    done = tachy("train", "rl", "--config", "rl.toml", "--steps", "2", "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "out/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2]
    assert "heldout_solve_rate" in lines[0] and "heldout_solve_rate" in lines[2]
    for m in lines[1:]:
        # coin-flip tasks: groups whose two runs agree are dropped and replaced
        assert m["rollouts"] == 4 and m["groups"] == 2 and m["sampling_kept"] == 2
        assert 0 <= m["dropped_share"] < 1 and "family_pass_rate" in m
        for key in ("reward", "turns", "tool_calls", "parallel_calls_per_turn", "tokens",
                    "rollout_s_mean", "step_s", "trainer_idle_frac", "weight_sync_s"):  # fmt: skip
            assert key in m, key
    assert load(tmp_path / "out").config.vocab_size == load(init_dir).config.vocab_size

    again = tachy("train", "rl", "--config", "rl.toml", "--out", "out", cwd=tmp_path)
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = tachy(
        "train", "rl", "--config", "rl.toml", "--steps", "3", "--out", "out", "--resume",
        cwd=tmp_path,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "out/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2, 3]
    assert read_state(tmp_path / "out")["step"] == 3


def test_format_reward_and_turn_cost_shape_only_the_training_reward(init_dir, tok):
    trainer = RLTrainer(load(init_dir), tok, config(format_reward=0.5))
    worked = RolloutResult("g1.0", "t", "scored", 1.0, "end_turn", 0.1, tool_calls=4, tool_errors=1)
    silent = RolloutResult("g1.1", "t", "scored", 0.0, "end_turn", 0.1)
    assert trainer.reward(worked) == 1.0 + 0.5 * 0.75
    assert trainer.reward(silent) == 0.0
    assert RLTrainer(load(init_dir), tok, config()).reward(worked) == 1.0
    # a cost per turn: the same solve in fewer turns scores higher
    quick = RolloutResult("g2.0", "t", "scored", 1.0, "end_turn", 0.1, turns=2)
    slow = RolloutResult("g2.1", "t", "scored", 1.0, "end_turn", 0.1, turns=6)
    costly = RLTrainer(load(init_dir), tok, config(turn_cost=0.02))
    assert costly.reward(quick) == pytest.approx(0.96) and costly.reward(slow) == pytest.approx(
        0.88
    )


def test_bad_inputs_are_refused_before_anything_is_written(init_dir, taskset, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="exceeds the model's context of 2048"):
        RLRun(RLConfig(tasks=str(taskset), init=str(init_dir), max_tokens=4096), out)
    with pytest.raises(TaskError, match="not a task set"):
        RLRun(RLConfig(tasks=str(tmp_path / "none"), init=str(init_dir), max_tokens=2048), out)
    with pytest.raises(ValueError, match="cannot load the model"):
        RLRun(RLConfig(tasks=str(taskset), init=str(tmp_path)), out)
    assert not out.exists()
