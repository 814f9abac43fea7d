"""The supervised warm-up: corpus and demonstration data, the trainer (loss goes down,
exact resume), SFT to valid tool calls, and `tachy train` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.parser import ToolCallParser
from model import Model, load, preset
from model.generate import Engine, SamplingParams
from model.tokenizer import IM_END, train_bpe
from training.sft.data import (
    DataError,
    corpus_files,
    encode_files,
    pack_blocks,
    read_demos,
    render_chat,
    sft_examples,
    split_files,
)
from training.sft.trainer import TrainConfig, Trainer, collate

SYSTEM = "You are tachy. Call tools with <tool_call> blocks."
CODE = '''
def add(a, b):
    """Return the sum."""
    return a + b


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()
'''


def conversation(path: str, word: str) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Fix the bug in {path}: {word} is wrong."},
        {
            "role": "assistant",
            "content": f'Reading it.\n<tool_call name="read_file">\n<path>{path}</path>\n</tool_call>',
        },
        {
            "role": "user",
            "content": f'<tool_result name="read_file" call_id="c1">\n1\t{word} = 1\n</tool_result>',
        },
        {
            "role": "assistant",
            "content": (
                f'<tool_call name="edit_file">\n<path>{path}</path>\n<old_string>\n{word} = 1\n'
                f"</old_string>\n<new_string>\n{word} = 2\n</new_string>\n</tool_call>"
            ),
        },
        {
            "role": "user",
            "content": '<tool_result name="edit_file" call_id="c2">\nok\n</tool_result>',
        },
        {"role": "assistant", "content": f"Fixed {word} in {path}."},
    ]


DEMOS = [
    {"task_id": f"t{i}", "reward": 1.0, "messages": conversation(p, w), "events": []}
    for i, (p, w) in enumerate([("calc.py", "total"), ("util/io.py", "count"), ("app.py", "limit")])
]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: deterministic sums, and far faster on a busy 2-core machine."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tok():
    texts = [CODE] * 3 + [m["content"] for d in DEMOS for m in d["messages"]] * 3
    return train_bpe(texts, 400)


def tiny_model(vocab: int, seed: int = 0, **overrides) -> Model:
    torch.manual_seed(seed)
    cfg = dict(
        vocab_size=vocab, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_experts=4,
        num_experts_per_tok=2, max_position_embeddings=512,
    )  # fmt: skip
    return Model(preset("tiny", **{**cfg, **overrides}), precision="fp32")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for name in ["a.py", "pkg/b.py", "pkg/c.py", "pkg/sub/d.py", "e.py", "f.py", "g.py", "h.py"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(CODE.replace("add", name.replace("/", "_")[:-3]))
    for skipped in ["tests/test_a.py", "test/x.py", "pkg/test_b.py", "big.py", ".hidden/y.py"]:
        (root / skipped).parent.mkdir(parents=True, exist_ok=True)
        (root / skipped).write_text(CODE)
    (root / "big.py").write_text("x = 1\n" * 100_000)
    (root / "notes.txt").write_text("not python")
    return root


# ------------------------------------------------------------------------ data
def test_corpus_files_are_sorted_and_filtered(corpus: Path):
    files = corpus_files(corpus, max_bytes=64 * 1024)
    names = [f.relative_to(corpus).as_posix() for f in files]
    assert names == ["a.py", "e.py", "f.py", "g.py", "h.py", "pkg/b.py", "pkg/c.py", "pkg/sub/d.py"]
    assert corpus_files(corpus, max_bytes=64 * 1024) == files


def test_heldout_split_is_disjoint_and_stable(corpus: Path):
    files = corpus_files(corpus)
    train, heldout = split_files(files, 0.4, corpus)
    assert train and heldout
    assert set(train).isdisjoint(heldout) and set(train) | set(heldout) == set(files)
    # The split of a file does not depend on which other files are there, nor their order.
    train2, heldout2 = split_files(list(reversed(files[2:])), 0.4, corpus)
    assert set(heldout2) == set(heldout) - set(files[:2])
    assert set(train2) == set(train) - set(files[:2])


def test_empty_corpus_is_an_error(tmp_path: Path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(DataError, match="no Python files"):
        corpus_files(tmp_path)
    with pytest.raises(DataError, match="no such file"):
        corpus_files(tmp_path / "missing")


def test_blocks_cover_the_stream_once(corpus: Path, tok):
    stream = encode_files(tok, corpus_files(corpus))
    assert stream.count(tok.token_to_id("<|endoftext|>")) == 8
    blocks = pack_blocks(stream, 16)
    assert len(blocks) == (len(stream) - 1) // 16
    assert all(len(r) == 17 for r in blocks.rows)
    targets = torch.cat([r[1:] for r in blocks.rows]).tolist()
    assert targets == stream[1 : 1 + 16 * len(blocks)]
    assert blocks.rows[1][0] == blocks.rows[0][-1]


def test_sft_mask_is_exactly_the_assistant_tokens(tok):
    messages = [(m["role"], m["content"]) for m in DEMOS[0]["messages"]]
    ids, mask = render_chat(tok, messages)
    learnt = [i for i, m in zip(ids, mask, strict=True) if m]
    expected = []
    for role, content in messages:
        if role == "assistant":
            expected += [*tok.encode(content, allow_special=False), tok.token_to_id(IM_END)]
    assert learnt == expected
    # Nothing of the system, user or tool-result text is learnt.
    assert "tool_result" not in tok.decode(learnt)
    assert SYSTEM not in tok.decode(learnt)


def test_sft_prompt_part_matches_the_engine(tok):
    engine = Engine(tiny_model(tok.vocab_size), tok, max_batch=1, max_seq=512)
    messages = [(m["role"], m["content"]) for m in DEMOS[1]["messages"]]
    ids, mask = render_chat(tok, messages)
    for k, (role, _) in enumerate(messages):
        if role != "assistant":
            continue
        prompt = engine.chat_prompt(messages[:k])
        assert ids[: len(prompt)] == prompt
        if k == 2:  # the first assistant turn: nothing before it is learnt
            assert not any(mask[: len(prompt)])
        assert mask[len(prompt)] == 1  # the turn's first token is learnt


def test_overlong_demos_are_truncated_or_skipped(tok):
    examples, stats = sft_examples(tok, DEMOS, max_len=10_000)
    assert len(examples) == 3 and stats.truncated == 0 and not stats.skipped
    full = len(examples.rows[0])
    cut, stats = sft_examples(tok, DEMOS, max_len=full - 5)
    assert stats.truncated >= 1 and len(cut) == 3
    # cut after the last whole assistant turn that fits: the head up to its <|im_end|>
    messages = [(m["role"], m["content"]) for m in DEMOS[0]["messages"]]
    ends = [i + 1 for i, (role, _) in enumerate(messages) if role == "assistant"]
    heads = [render_chat(tok, messages[:e])[0] for e in ends]
    want = max((h for h in heads if len(h) <= full - 5), key=len)
    assert cut.rows[0].tolist() == want and len(want) < full - 5
    assert cut.rows[0].tolist() == examples.rows[0][: len(want)].tolist()
    assert bool(cut.masks[0][len(want) - 2]) and tok.decode(want[-2:]).startswith("<|im_end|>")
    _, stats = sft_examples(tok, DEMOS, max_len=20)  # inside the system prompt
    assert stats.skipped == ["t0", "t1", "t2"]


def test_read_demos_errors(tmp_path: Path):
    with pytest.raises(DataError, match="not found"):
        read_demos(tmp_path / "none.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user"}]}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:1"):
        read_demos(bad)


# --------------------------------------------------------------------- trainer
def pretrain_data(tok, corpus: Path, seq_len: int = 32):
    return pack_blocks(encode_files(tok, corpus_files(corpus)), seq_len)


def test_pretraining_reduces_the_loss(tok, corpus: Path, tmp_path: Path):
    data = pretrain_data(tok, corpus)
    config = TrainConfig(
        steps=30, batch_size=8, micro_batch_size=4, lr=1e-2, warmup_steps=3, eval_every=0
    )
    trainer = Trainer(
        tiny_model(tok.vocab_size), tok, data, data, config, tmp_path / "out", log=None
    )
    before = trainer.evaluate()
    history = trainer.train()
    assert history[-1]["eval_loss"] < before - 1.0
    assert history[-1]["loss"] < history[0]["loss"]
    lines = [json.loads(x) for x in (tmp_path / "out/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == list(range(1, 31))
    keys = {"step", "loss", "aux_loss", "lr", "tokens", "tokens_per_s", "grad_norm"}
    assert keys <= set(lines[0])
    assert lines[0]["aux_loss"] > 0
    reloaded = load(tmp_path / "out")
    assert torch.equal(reloaded.embed_tokens.weight, trainer.model.embed_tokens.weight)


def test_micro_batching_accumulates_the_full_batch_gradient(tok, corpus: Path, tmp_path: Path):
    # Without the aux loss (a per-micro-batch statistic), the accumulated gradient is the
    # full batch's.
    data = pretrain_data(tok, corpus)
    runs = []
    for micro in (4, 1):
        config = TrainConfig(steps=1, batch_size=4, micro_batch_size=micro, eval_every=0)
        model = tiny_model(tok.vocab_size, router_aux_loss_coef=0.0)
        trainer = Trainer(model, tok, data, None, config, tmp_path / f"m{micro}", log=None)
        metrics = trainer.train()[0]
        runs.append((metrics, [p.grad.clone() for p in model.parameters()]))
    (a, grads_a), (b, grads_b) = runs
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-7)


def test_a_shared_prefix_gives_the_same_loss_and_nearly_the_same_gradient(tok, tmp_path: Path):
    # The demonstrations share their system prompt: forwarded once without gradient, the
    # loss is the full forward's; the gradient lacks only what flows back through the
    # prefix's keys and values.
    examples, _ = sft_examples(tok, DEMOS, max_len=512)
    runs = []
    for shared in (False, True):
        config = TrainConfig(steps=1, batch_size=3, micro_batch_size=1, eval_every=0,
                             shared_prefix=shared)  # fmt: skip
        model = tiny_model(tok.vocab_size, router_aux_loss_coef=0.0)
        trainer = Trainer(model, tok, examples, None, config, tmp_path / f"s{shared}", log=None)
        if shared:
            micro = [collate(examples, [i], trainer.pad_id) for i in range(3)]
            prefix, cut = trainer._shared_prefix(micro)
            assert prefix is not None and prefix.length >= 16
            assert all(m.shape[1] == micro[0][2].shape[1] - prefix.length for _, _, m in cut[:1])
        metrics = trainer.train()[0]
        runs.append((metrics, torch.cat([p.grad.flatten() for p in model.parameters()])))
    (full, g_full), (shared, g_shared) = runs
    assert shared["loss"] == pytest.approx(full["loss"], rel=1e-5)
    cosine = torch.nn.functional.cosine_similarity(g_full, g_shared, dim=0)
    assert 0.5 < cosine < 1.0  # the same direction, without the prefix's share


def test_mxfp8_experts_train_like_fp32(tok, corpus: Path, tmp_path: Path):
    data = pretrain_data(tok, corpus)
    config = TrainConfig(steps=3, batch_size=4, micro_batch_size=4, eval_every=0)
    losses = {}
    for precision in ("fp32", "mxfp8"):
        model = tiny_model(tok.vocab_size)
        if precision == "mxfp8":
            model = Model(model.config, precision="mxfp8")
            model.load_state_dict(tiny_model(tok.vocab_size).state_dict())
        trainer = Trainer(model, tok, data, None, config, tmp_path / precision, log=None)
        losses[precision] = [m["loss"] for m in trainer.train()]
    assert losses["mxfp8"] == pytest.approx(losses["fp32"], abs=0.02)
    assert load(tmp_path / "mxfp8").precision == "mxfp8"


def test_resume_reproduces_the_run_exactly(tok, corpus: Path, tmp_path: Path):
    data = pretrain_data(tok, corpus)
    config = TrainConfig(
        steps=4, batch_size=4, micro_batch_size=2, lr=5e-3, warmup_steps=1, eval_every=2
    )

    straight = Trainer(
        tiny_model(tok.vocab_size), tok, data, data, config, tmp_path / "a", log=None
    )
    expected = straight.train()

    first = Trainer(tiny_model(tok.vocab_size), tok, data, data, config, tmp_path / "b", log=None)
    first.train(until=2)
    resumed = Trainer(load(tmp_path / "b"), tok, data, data, config, tmp_path / "b", log=None)
    assert resumed.restore() == 2
    got = resumed.train()

    drop = ("tokens_per_s", "step_s")
    strip = [{k: v for k, v in m.items() if k not in drop} for m in expected]
    assert [{k: v for k, v in m.items() if k not in drop} for m in got] == strip[2:]
    for (name, p), q in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(p, q), name
    logged = [json.loads(x) for x in (tmp_path / "b/metrics.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in m.items() if k not in drop} for m in logged] == strip


def test_resume_refuses_weights_from_another_save(tok, corpus: Path, tmp_path: Path):
    from training.sft.common import TrainStateError

    data = pretrain_data(tok, corpus)
    config = TrainConfig(steps=2, batch_size=2, micro_batch_size=2, eval_every=0)
    Trainer(tiny_model(tok.vocab_size), tok, data, None, config, tmp_path / "x", log=None).train()
    other = tiny_model(tok.vocab_size, seed=1)
    from model import save

    save(other, tmp_path / "x", tokenizer=tok)
    with pytest.raises(TrainStateError, match="do not belong"):
        Trainer(load(tmp_path / "x"), tok, data, None, config, tmp_path / "x", log=None).restore()


def test_sft_learns_to_emit_a_valid_tool_call(tok, tmp_path: Path):
    examples, _ = sft_examples(tok, DEMOS, max_len=512)
    config = TrainConfig(
        steps=60, batch_size=3, micro_batch_size=3, lr=1e-2, warmup_steps=5, eval_every=0
    )
    trainer = Trainer(
        tiny_model(tok.vocab_size), tok, examples, examples, config, tmp_path / "sft", log=None
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after < 0.2 * before

    model = load(tmp_path / "sft")
    engine = Engine(model, tok, max_batch=1, max_seq=512)
    messages = [(m["role"], m["content"]) for m in DEMOS[0]["messages"]]
    gen = engine.generate([engine.chat_prompt(messages[:2])], SamplingParams(max_new_tokens=60))[0]
    assert gen.finish_reason == "stop"
    parser = ToolCallParser()
    calls = parser.feed(gen.text) + parser.finish()
    assert len(calls) == 1, gen.text
    assert calls[0].error is None and calls[0].name == "read_file"
    assert calls[0].params == {"path": "calc.py"}


# ------------------------------------------------------------------------- CLI
def tachy(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def test_cli_pretrain_then_sft(corpus: Path, tmp_path: Path, repo_root: Path):
    pre = tmp_path / "pre"
    common = ["--batch", "2", "--eval-every", "2", "--threads", "1"]
    r = tachy(
        "train", "pretrain", "--out", str(pre), "--corpus", str(corpus), "--vocab-size", "400",
        "--steps", "3", "--seq-len", "32", "--heldout", "0.3", *common, cwd=repo_root,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert len((pre / "metrics.jsonl").read_text().splitlines()) == 3
    model = load(pre)
    assert model.config.hidden_size == 128  # the tiny preset
    assert "held-out loss" in r.stderr

    # --resume with more steps continues; without it, a used --out is refused.
    r = tachy("train", "pretrain", "--out", str(pre), "--resume", "--steps", "4", cwd=repo_root)
    assert r.returncode == 0, r.stderr
    assert "resuming" in r.stderr
    assert len((pre / "metrics.jsonl").read_text().splitlines()) == 4
    r = tachy("train", "pretrain", "--out", str(pre), "--corpus", str(corpus), cwd=repo_root)
    assert r.returncode == 2 and "--resume" in r.stderr
    r = tachy(
        "train",
        "sft",
        "--init",
        str(pre),
        "--demos",
        str(corpus / "a.py"),
        "--out",
        str(pre),
        cwd=repo_root,
    )
    assert r.returncode == 2 and "already holds" in r.stderr  # would overwrite its init

    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(d) + "\n" for d in DEMOS))
    sft = tmp_path / "sft"
    r = tachy(
        "train", "sft", "--init", str(pre), "--demos", str(demos), "--out", str(sft),
        "--steps", "2", "--max-len", "2100", *common, cwd=repo_root,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "raising the model's context from 2048" in r.stderr
    assert len((sft / "metrics.jsonl").read_text().splitlines()) == 2
    assert (sft / "tokenizer.json").is_file()
    tuned = load(sft)
    assert tuned.config.vocab_size == model.config.vocab_size
    assert tuned.config.max_position_embeddings == 2100  # extended to --max-len
    r = tachy(
        "train", "sft", "--demos", str(demos), "--out", str(sft), "--resume", "--steps", "3",
        cwd=repo_root,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert len((sft / "metrics.jsonl").read_text().splitlines()) == 3

    from model.policy import LocalPolicy

    LocalPolicy(sft, max_seq=256)  # usable as --policy local:DIR

    r = tachy("train", "plot", str(sft), str(pre), "--out", str(sft / "both.png"), cwd=repo_root)
    assert r.returncode == 0, r.stderr
    assert (sft / "both.png").read_bytes().startswith(b"\x89PNG") and "of 2 runs" in r.stderr
    r = tachy("train", "plot", str(sft), "--metrics", "loss,lr", "--out", str(sft / "two.png"),
              cwd=repo_root)  # fmt: skip
    assert r.returncode == 0 and "2 curves of 1 runs" in r.stderr, r.stderr
    r = tachy("train", "plot", str(sft), "--metrics", "loss,reward", cwd=repo_root)
    assert r.returncode == 2 and "--metrics: no run has reward" in r.stderr, r.stderr
    r = tachy("train", "plot", str(sft), "--out", str(sft / "m.csv"), cwd=repo_root)
    assert r.returncode == 0, r.stderr
    assert (sft / "m.csv").read_text().startswith("step,loss,") and "first" in r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            [
                "train",
                "sft",
                "--init",
                "{pre}",
                "--demos",
                "{tmp}/missing.jsonl",
                "--out",
                "{tmp}/o",
            ],
            "not found",
        ),
        (["train", "pretrain", "--out", "{tmp}/o", "--corpus", "{tmp}/empty"], "no Python files"),
        (["train", "pretrain", "--out", "{tmp}/o", "--steps", "0"], "--steps must be at least 1"),
        (["train", "sft", "--demos", "{tmp}/d.jsonl", "--out", "{tmp}/o"], "needs --init"),
        (["train", "pretrain", "--out", "{tmp}/o", "--batch", "4", "--micro-batch", "3"], "divide"),
        (["train", "plot", "{tmp}"], "metrics.jsonl: not found"),
    ],
)
def test_cli_bad_input_exits_2(args, message, tmp_path: Path, repo_root: Path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    filled = [a.format(tmp=tmp_path, pre=tmp_path) for a in args]
    r = tachy(*filled, cwd=repo_root)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
