"""The generation engine: KV-cache parity, sampler log-probs, batching, sampling, stops,
cancellation, streaming, routing, chat prompts and errors (tiny random model)."""

from __future__ import annotations

import threading

import pytest
import torch

from model import Model, ModelConfig
from model.generate import Engine, Generation, SamplingParams, filter_logits
from model.tokenizer import IM_END, IM_START, train_bpe

pytestmark = pytest.mark.usefixtures("torch_path")  # kernels' torch path (no interpreter)

CORPUS = [
    "def add(a, b):\n    return a + b\n\n",
    "def sub(a, b):\n    return a - b\n\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "for i in range(10):\n    print(i, i * i)\n",
    "the quick brown fox jumps over the lazy dog. hello world!\n",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
] * 4


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(CORPUS, vocab_size=400)


def make_model(vocab_size: int, seed: int = 0) -> Model:
    config = ModelConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
        rope_theta=10000.0, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(seed)
    m = Model(config, precision="mxfp8").eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, 0.1)
    return m.quantize_experts()


@pytest.fixture(scope="module")
def model(tokenizer):
    return make_model(tokenizer.vocab_size)


@pytest.fixture(scope="module")
def engine(model, tokenizer):
    return Engine(model, tokenizer, max_batch=4, max_seq=128)


def prompts(tokenizer) -> list[list[int]]:
    return [
        tokenizer.encode("def add(a, b):\n"),
        tokenizer.encode("for i"),
        tokenizer.encode("class Point:\n    def __init__(self, x, y):\n"),
    ]


@torch.inference_mode()
def greedy_without_cache(model, tokenizer, prompt, n) -> list[int]:
    ids = list(prompt)
    out = []
    for _ in range(n):
        logits = model(torch.tensor([ids]))[0, -1]
        t = int(logits.argmax())
        out.append(t)
        ids.append(t)
        if t in tokenizer.stop_ids:
            break
    return out


@torch.inference_mode()
def reference_logits(model, prompt, gen: Generation) -> torch.Tensor:
    """Logits [n, V] that predicted each generated token, from one full forward."""
    ids = torch.tensor([prompt + gen.token_ids])
    logits = model(ids)[0]
    n = len(gen.token_ids)
    return logits[len(prompt) - 1 : len(prompt) - 1 + n]


# ------------------------------------------------------------------ greedy and parity


def test_greedy_with_cache_equals_without(engine, model, tokenizer):
    for p in prompts(tokenizer):
        gen = engine.generate([p], SamplingParams(max_new_tokens=12))[0]
        assert gen.token_ids == greedy_without_cache(model, tokenizer, p, 12)
        assert len(gen.token_ids) == 12 or gen.finish_reason == "stop"


def test_logprobs_match_separate_forward_greedy(engine, model, tokenizer):
    p = prompts(tokenizer)[0]
    gen = engine.generate([p], SamplingParams(max_new_tokens=10))[0]
    logp = torch.log_softmax(reference_logits(model, p, gen).float(), -1)
    ids = torch.tensor(gen.token_ids)
    assert torch.equal(logp.argmax(-1), ids)
    want = logp.gather(-1, ids[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(gen.logprobs), want, atol=1e-4, rtol=1e-4)


def test_logprobs_match_separate_forward_sampled(engine, model, tokenizer):
    p = prompts(tokenizer)[1]
    params = SamplingParams(max_new_tokens=10, temperature=0.8, top_k=20, top_p=0.9, seed=3)
    gen = engine.generate([p], params)[0]
    filtered = filter_logits(reference_logits(model, p, gen), 0.8, 20, 0.9)
    logp = torch.log_softmax(filtered, -1)
    want = logp.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
    assert torch.isfinite(want).all()  # every sampled token was inside the filtered set
    torch.testing.assert_close(torch.tensor(gen.logprobs), want, atol=1e-4, rtol=1e-4)


def test_batch_equals_one_by_one(engine, tokenizer):
    ps = prompts(tokenizer)
    assert len({len(p) for p in ps}) == len(ps)  # different lengths: padding matters
    params = SamplingParams(max_new_tokens=8)
    batch = engine.generate(ps, params)
    for p, b in zip(ps, batch, strict=True):
        one = engine.generate([p], params)[0]
        assert b.token_ids == one.token_ids
        assert b.text == one.text and b.finish_reason == one.finish_reason
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(one.logprobs), atol=1e-4, rtol=1e-4
        )
        assert torch.equal(b.experts.sort(-1).values, one.experts.sort(-1).values)


def test_compiled_decode_step_matches_eager(engine, model, tokenizer):
    """Engine(compile=True) (torch.compile'd decode step; MXFP8 experts dequantized
    inside the graph) generates what the eager engine does: batch of different prompt
    lengths, then a single row (new batch size and cache lengths: recompiled)."""
    compiled = Engine(model, tokenizer, max_batch=4, max_seq=128, compile=True)
    params = SamplingParams(max_new_tokens=8)
    for ps in (prompts(tokenizer), prompts(tokenizer)[:1]):
        want = engine.generate(ps, params)
        got = compiled.generate(ps, params)
        for g, w in zip(got, want, strict=True):
            assert g.token_ids == w.token_ids and g.text == w.text
            assert torch.equal(g.experts, w.experts)
            torch.testing.assert_close(
                torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-4, rtol=1e-4
            )


def test_top_k_1_equals_greedy(engine, tokenizer):
    p = prompts(tokenizer)[2]
    greedy = engine.generate([p], SamplingParams(max_new_tokens=8))[0]
    top1 = engine.generate([p], SamplingParams(max_new_tokens=8, temperature=1.3, top_k=1))[0]
    assert top1.token_ids == greedy.token_ids
    assert all(lp == 0.0 for lp in top1.logprobs)  # a one-token distribution


def test_seeded_sampling_reproducible(engine, tokenizer):
    ps = prompts(tokenizer)[:2]
    params = SamplingParams(max_new_tokens=12, temperature=1.5, seed=1234)
    a = engine.generate(ps, params)
    b = engine.generate(ps, params)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]
    others = [
        engine.generate(ps, SamplingParams(max_new_tokens=12, temperature=1.5, seed=s))
        for s in (1, 2, 3)
    ]
    assert any([g.token_ids for g in o] != [g.token_ids for g in a] for o in others)


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda x: torch.isfinite(x)[0].tolist()  # noqa: E731
    assert kept(filter_logits(logits, 1.0, 2, 1.0)) == [True, True, False, False]
    assert kept(filter_logits(logits, 1.0, 0, 0.7)) == [True, True, False, False]
    assert kept(filter_logits(logits, 1.0, 0, 0.8)) == [True, True, False, False]
    assert kept(filter_logits(logits, 1.0, 0, 0.81)) == [True, True, True, False]
    assert kept(filter_logits(logits, 1.0, 0, 0.1)) == [True, False, False, False]
    assert kept(filter_logits(logits, 1.0, 3, 0.99)) == [True, True, True, False]


# ---------------------------------------------------------------- stops and finishing


def test_max_new_tokens_gives_length(engine, tokenizer, model):
    p = prompts(tokenizer)[0]
    gen = engine.generate([p], SamplingParams(max_new_tokens=5))[0]
    assert gen.finish_reason == "length" and len(gen.token_ids) == 5
    empty = engine.generate([p], SamplingParams(max_new_tokens=0))[0]
    assert empty.token_ids == [] and empty.finish_reason == "length" and empty.text == ""
    assert empty.experts.shape == (0, 2, 2)


def test_length_at_end_of_cache(model, tokenizer):
    engine = Engine(model, tokenizer, max_batch=1, max_seq=24)
    p = prompts(tokenizer)[2]
    gen = engine.generate([p], SamplingParams(max_new_tokens=100, stop=[]))[0]
    assert gen.finish_reason == "length"
    assert len(p) + len(gen.token_ids) == 24 == len(p) + gen.experts.shape[0]


def test_stop_string_cuts_text(engine, tokenizer):
    p = prompts(tokenizer)[0]
    free = engine.generate([p], SamplingParams(max_new_tokens=20))[0]
    text = free.text
    assert len(text) >= 4, "the random model should say something"
    stop = text[2:4]
    cut = text.find(stop)
    gen = engine.generate([p], SamplingParams(max_new_tokens=20, stop=["zzzz-none", stop]))[0]
    assert gen.finish_reason == "stop"
    assert gen.text == text[:cut]
    # the tokens are listed up to where generation stopped: they decode to text + stop
    assert tokenizer.decode(gen.token_ids).startswith(text[:cut] + stop)
    assert gen.token_ids == free.token_ids[: len(gen.token_ids)]
    assert len(gen.logprobs) == len(gen.token_ids) == gen.experts.shape[0]


def test_stop_id_finishes_row(model, tokenizer):
    """Force the eos id: the row stops with "stop", eos listed but not in the text."""
    m = make_model(tokenizer.vocab_size)
    with torch.no_grad():
        m.lm_head.weight = torch.nn.Parameter(m.lm_head.weight.clone())
        m.lm_head.weight[tokenizer.eos_id] = m.norm.weight.detach() * 50  # huge logit
    engine = Engine(m, tokenizer, max_batch=2, max_seq=64)
    gens = engine.generate(prompts(tokenizer)[:2], SamplingParams(max_new_tokens=10))
    for g in gens:
        assert g.finish_reason == "stop"
        assert g.token_ids[-1] == tokenizer.eos_id
        assert IM_END not in g.text


def test_cancel_event(engine, tokenizer):
    ps = prompts(tokenizer)[:2]
    cancel = threading.Event()
    seen = []

    def on_token(i, token, text):
        seen.append(i)
        if len(seen) >= 4:
            cancel.set()

    gens = engine.generate(ps, SamplingParams(max_new_tokens=50), on_token=on_token, cancel=cancel)
    for g in gens:
        assert g.finish_reason in ("cancelled", "stop")
        assert len(g.token_ids) <= 3
    assert any(g.finish_reason == "cancelled" for g in gens)
    # already set before starting: nothing is generated
    pre = engine.generate(ps, SamplingParams(max_new_tokens=5), cancel=cancel)
    assert all(g.finish_reason == "cancelled" and g.token_ids == [] for g in pre)


def test_on_token_texts_concatenate_to_text(engine, tokenizer):
    ps = prompts(tokenizer)
    chunks: dict[int, list[str]] = {i: [] for i in range(len(ps))}
    tokens: dict[int, list[int]] = {i: [] for i in range(len(ps))}

    def on_token(i, token, text):
        chunks[i].append(text)
        tokens[i].append(token)

    free = engine.generate(ps, SamplingParams(max_new_tokens=16))
    stop = free[0].text[3:5] or "x"
    gens = engine.generate(ps, SamplingParams(max_new_tokens=16, stop=[stop]), on_token=on_token)
    for i, g in enumerate(gens):
        assert "".join(chunks[i]) == g.text
        assert tokens[i] == g.token_ids


def test_experts_shape_and_range(engine, model, tokenizer):
    p = prompts(tokenizer)[0]
    gen = engine.generate([p], SamplingParams(max_new_tokens=6))[0]
    n = len(gen.token_ids)
    assert gen.experts.dtype == torch.int16
    assert gen.experts.shape == (n, 2, 2)  # 2 MoE layers (layer 1 is dense), k = 2
    assert int(gen.experts.min()) >= 0 and int(gen.experts.max()) < 8
    # what a training forward over prompt + generation routes each generated token to
    with torch.inference_mode():
        out = model(torch.tensor([p + gen.token_ids]), return_routing=True)
    want = out.routing[:, 0, len(p) :].permute(1, 0, 2)  # [n, moe layers, k]
    assert torch.equal(gen.experts.long().sort(-1).values, want.sort(-1).values)


# ----------------------------------------------------------------------- prompts, API


def test_chat_prompt_structure(engine, tokenizer):
    ids = engine.chat_prompt([("system", "be brief"), ("user", "hi <|im_end|> there")])
    start, end = tokenizer.token_to_id(IM_START), tokenizer.token_to_id(IM_END)
    assert ids.count(start) == 3 and ids.count(end) == 2  # the user's fake marker is text
    assert tokenizer.decode(ids) == (
        "<|im_start|>system\nbe brief<|im_end|>\n"
        "<|im_start|>user\nhi <|im_end|> there<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    tail = [start, *tokenizer.encode("assistant\n", allow_special=False)]
    assert ids[0] == start and ids[-len(tail) :] == tail


def test_complete_text_in(engine, tokenizer):
    a = engine.complete("def add(a, b):\n", SamplingParams(max_new_tokens=4))
    b = engine.generate([tokenizer.encode("def add(a, b):\n")], SamplingParams(max_new_tokens=4))
    assert (a.token_ids, a.logprobs, a.text) == (b[0].token_ids, b[0].logprobs, b[0].text)


def test_errors(engine, tokenizer):
    p = tokenizer.encode("def")
    with pytest.raises(ValueError, match="exceeds max_batch 4"):
        engine.generate([p] * 5, SamplingParams())
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([p, []], SamplingParams())
    with pytest.raises(ValueError, match="no prompts"):
        engine.generate([], SamplingParams())
    with pytest.raises(ValueError, match="prompt 0 has 128 tokens; max_seq 128"):
        engine.generate([[5] * 128], SamplingParams())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.generate([[10**6]], SamplingParams())
    with pytest.raises(ValueError, match="top_p"):
        engine.generate([p], SamplingParams(top_p=0.0))
    with pytest.raises(ValueError, match="temperature"):
        engine.generate([p], SamplingParams(temperature=-1))
    with pytest.raises(ValueError, match="stop strings"):
        engine.generate([p], SamplingParams(stop=[""]))
    # the engine still works after refusing
    assert engine.generate([p], SamplingParams(max_new_tokens=2))[0].token_ids
