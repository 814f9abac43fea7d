"""The local:CHECKPOINT_DIR policy: load, stream through the async API, cancel, errors."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import model as M
from agent.policy import Message, PolicyError, load_policy, register_policy
from agent.render import stop_sequences
from model.generate import SamplingParams
from model.policy import LocalPolicy, local_policy
from model.tokenizer import train_bpe
from tests.model.test_generate import CORPUS, make_model

pytestmark = pytest.mark.usefixtures("torch_path")  # kernels' torch path (no interpreter)
# As tachy's entry point does (server.cli): the agent itself knows no local: policy.
register_policy("local", local_policy)

MESSAGES = [Message("system", "You are terse."), Message("user", "add two numbers")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny model saved with its tokenizer (model.save(..., tokenizer=...))."""
    path = tmp_path_factory.mktemp("ckpt")
    tok = train_bpe(CORPUS, vocab_size=400)
    M.save(make_model(tok.vocab_size), path, tokenizer=tok)
    return path


def test_the_tokenizer_is_saved_with_the_model(checkpoint, tmp_path):
    assert (checkpoint / "tokenizer.json").is_file()
    tok = train_bpe(CORPUS, vocab_size=400)
    with pytest.raises(ValueError, match="more than the model's vocabulary"):
        M.save(make_model(tok.vocab_size - 10), tmp_path / "small", tokenizer=tok)


async def collect(policy, messages=MESSAGES, stop=None) -> list[str]:
    return [c async for c in policy.stream(messages, stop_sequences() if stop is None else stop)]


async def test_load_policy_local_streams_a_reply(checkpoint):
    policy = load_policy(f"local:{checkpoint}")
    assert isinstance(policy, LocalPolicy)
    try:
        chunks = await collect(policy)
        assert chunks and all(isinstance(c, str) and c for c in chunks)
        engine = policy.engine
        prompt = engine.chat_prompt([(m.role, m.content) for m in MESSAGES])
        want = engine.generate(
            [prompt], SamplingParams(max_new_tokens=1024, stop=stop_sequences())
        )[0]
        assert "".join(chunks) == want.text == policy.last_generation.text
        assert policy.last_generation.finish_reason in ("stop", "length")
    finally:
        await policy.aclose()


async def test_a_local_policy_for_several_runs_decodes_them_together(checkpoint):
    """`tachy eval --workers 4` on local: once decoded two attempts at a time."""
    policy = load_policy(f"local:{checkpoint}", runs=4)
    try:
        assert policy.engine.max_batch == 4
    finally:
        await policy.aclose()
    with pytest.raises(PolicyError, match="at least 1"):
        load_policy(f"local:{checkpoint}", runs=0)


async def test_stream_honours_stop_strings(checkpoint):
    policy = LocalPolicy(checkpoint, max_new_tokens=24)
    try:
        free = "".join(await collect(policy, stop=[]))
        assert len(free) >= 4
        stop = free[2:4]
        text = "".join(await collect(policy, stop=[stop]))
        assert text == free[: free.find(stop)]
        assert policy.last_generation.finish_reason == "stop"
    finally:
        await policy.aclose()


async def test_closing_the_iterator_cancels_the_worker(checkpoint):
    policy = LocalPolicy(checkpoint, max_new_tokens=10_000, max_seq=256)
    agen = policy.stream(MESSAGES, [])
    first = await agen.__anext__()
    assert first
    await agen.aclose()
    await policy.aclose()  # waits for the worker
    gen = policy.last_generation
    assert gen.finish_reason == "cancelled"
    assert len(gen.token_ids) < 256 - len(policy.engine.chat_prompt([("user", "x")]))


async def test_cancelling_the_consuming_task_cancels_the_worker(checkpoint):
    policy = LocalPolicy(checkpoint, max_new_tokens=10_000, max_seq=256)
    got_one = asyncio.Event()

    async def consume():
        async for _ in policy.stream(MESSAGES, []):
            got_one.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_one.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await policy.aclose()
    assert policy.last_generation.finish_reason == "cancelled"


async def test_tokenizer_option_and_json_file(checkpoint, tmp_path):
    from model.tokenizer import Tokenizer

    tok = Tokenizer.from_file(checkpoint)
    bare = tmp_path / "bare"
    M.save(M.load(checkpoint), bare)
    with pytest.raises(PolicyError, match="no tokenizer found"):
        LocalPolicy(bare)
    policy = LocalPolicy(bare, tokenizer=checkpoint / "tokenizer.json", max_new_tokens=3)
    assert await collect(policy) is not None
    await policy.aclose()
    tok.save(bare / "tokenizer")  # a tokenizer/ folder is found too
    policy = LocalPolicy(bare, max_new_tokens=3)
    assert policy.engine.tokenizer.vocab_size == tok.vocab_size
    await policy.aclose()


def test_local_policy_errors(tmp_path, checkpoint):
    with pytest.raises(PolicyError, match="checkpoint directory /models/x does not exist"):
        load_policy("local:/models/x")
    with pytest.raises(PolicyError, match="does not exist"):
        load_policy(f"local:{tmp_path / 'missing'}")
    with pytest.raises(PolicyError, match="not a tachy checkpoint"):
        load_policy(f"local:{tmp_path}")
    with pytest.raises(PolicyError, match="does not exist"):
        LocalPolicy(tmp_path / "missing")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for f in checkpoint.iterdir():
        if f.is_file():
            (corrupt / f.name).write_bytes(f.read_bytes())
    (corrupt / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(PolicyError, match="cannot load"):
        load_policy(f"local:{corrupt}")
    with pytest.raises(PolicyError, match="top_p"):
        LocalPolicy(checkpoint, top_p=2.0)


def test_agent_policy_does_not_import_torch():
    code = (
        "import sys, agent.policy; assert 'torch' not in sys.modules and 'model' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


async def test_a_conversation_longer_than_the_context_is_a_clear_error(checkpoint):
    policy = LocalPolicy(checkpoint, max_seq=64)
    try:
        long = [Message("user", "def add(a, b): return a + b\n" * 40)]
        with pytest.raises(PolicyError, match=r"no longer fits the model's context: it is \d+ "
                           r"tokens; the local model holds at most 63 prompt tokens"):  # fmt: skip
            await collect(policy, long)
        assert await collect(policy)  # and the policy still works
    finally:
        await policy.aclose()


async def test_concurrent_runs_on_one_policy_decode_together(checkpoint):
    """Two runs streaming from one local policy at once (through model.batcher, whose
    batching tests/model/test_prefix_cache.py pins down) each get what they get alone."""
    policy = LocalPolicy(checkpoint, max_batch=2, max_new_tokens=40)
    other = [Message("system", "You are terse."), Message("user", "multiply two numbers")]
    try:
        alone = ["".join(await collect(policy, m)) for m in (MESSAGES, other)]
        together = await asyncio.gather(collect(policy, MESSAGES), collect(policy, other))
        assert ["".join(c) for c in together] == alone
    finally:
        await policy.aclose()
