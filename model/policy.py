"""The `local:CHECKPOINT_DIR` policy: our model in-process, behind agent's Policy protocol.

    policy = LocalPolicy("ckpt/", temperature=0.0, max_new_tokens=1024)
    async for chunk in policy.stream([Message("user", "hi")], stop=["<tool_result"]):
        ...
    await policy.aclose()

The checkpoint directory is a part of tachy's model (assembled with the installed base)
or one written by model.save (model.checkpoint.open_model); the `tokenizer` option
overrides the tokenizer found with it. Generation runs on the engine's batcher thread
(several runs streaming from one policy at once decode together, each keeping its
prompt prefix cached between turns); text chunks reach the event loop through an
asyncio queue fed with loop.call_soon_threadsafe. Closing or cancelling the iterator sets
the engine's cancel event, so the worker stops at its next decode step.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from agent.policy import CONTEXT_FULL, Message, PolicyError
from model.batcher import Batcher
from model.checkpoint import open_model
from model.generate import Engine, Generation, SamplingParams
from model.hf import CheckpointError

_SAMPLING = ("max_new_tokens", "temperature", "top_p", "top_k", "seed")

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
# The models shipped with tachy, by name (`local:NAME`). `local:` alone is the first,
# the best measured on held-out tasks (bench/RESULTS.md, issue 33: the family warm-up;
# RL from it has not yet beaten it). Each tachy-smollm2* is SmolLM2-135M-Instruct
# upcycled into our MoE plus a part of ours (model/part.py), assembled from the base
# that setup installs: BASE_PART holds only the routers (the untrained start of every
# part), -warmup is the first supervised warm-up (issue 18). The tiny model (8M
# parameters, trained here from scratch, issue 8) stays for tests that need a model
# in a second.
BASE_PART = "tachy-smollm2"
BUNDLED = ("tachy-smollm2-families", BASE_PART, "tachy-smollm2-warmup", "tachy-tiny")


def bundled_checkpoint(name: str = BUNDLED[0]) -> Path:
    path = WEIGHTS_DIR / name
    if not ((path / "part.json").is_file() or (path / "manifest.json").is_file()):
        raise PolicyError(
            f"the bundled model {name} is missing from this install ({path}); reinstall "
            "tachy or pass local:CHECKPOINT_DIR"
        )
    return path


DEFAULT_BATCH = 2  # sequences a local engine decodes together unless told more


def local_policy(checkpoint_dir: str, max_tokens: int | None = None, runs: int = 1) -> LocalPolicy:
    """The `local:CHECKPOINT_DIR` policy kind (see agent.policy.POLICY_FACTORIES): an
    empty directory means the default bundled model, and a bundled model's name
    (`local:tachy-tiny`) that model, unless a directory of that name exists here.
    Its engine decodes `runs` sequences together (at least DEFAULT_BATCH)."""
    if not checkpoint_dir:
        path = bundled_checkpoint()
    elif checkpoint_dir in BUNDLED and not Path(checkpoint_dir).exists():
        path = bundled_checkpoint(checkpoint_dir)
    else:
        path = Path(checkpoint_dir).expanduser()
    if not path.is_dir():
        raise PolicyError(f"local policy: checkpoint directory {path} does not exist")
    if not any((path / f).is_file() for f in ("manifest.json", "part.json")):
        raise PolicyError(
            f"local policy: {path} is not a tachy checkpoint (no manifest.json or part.json); "
            "write one with `tachy model import`"
        )
    options: dict = {"max_batch": max(DEFAULT_BATCH, runs)}
    if max_tokens is not None:
        options["max_new_tokens"] = max_tokens
    return LocalPolicy(path, **options)


class LocalPolicy:
    """Options: tokenizer (path), device, max_batch, max_seq, compile (Engine), and the
    sampling defaults max_new_tokens, temperature, top_p, top_k, seed (SamplingParams)."""

    def __init__(
        self,
        checkpoint_dir: str | Path,
        *,
        tokenizer: str | Path | None = None,
        device: str = "cpu",
        max_batch: int = DEFAULT_BATCH,
        max_seq: int = 8192,
        compile: bool = False,
        max_new_tokens: int = 1024,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int | None = None,
    ) -> None:
        path = Path(checkpoint_dir).expanduser()
        if not path.is_dir():
            raise PolicyError(f"local policy: checkpoint directory {path} does not exist")
        self.params = SamplingParams(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
            seed=seed,
        )  # fmt: skip
        try:
            self.params.check()
        except ValueError as exc:
            raise PolicyError(f"local policy: {exc}") from None

        def make_engine() -> Engine:  # on the batcher's thread, where it will decode
            model, tok = open_model(path, tokenizer=tokenizer, device=device)
            return Engine(model, tok, max_batch=max_batch, max_seq=max_seq, compile=compile)

        self.batcher = Batcher(make_engine)  # several runs on one policy decode together
        try:
            self.engine = self.batcher.ready()
        except CheckpointError as exc:
            raise PolicyError(f"local policy: cannot load {path}: {exc}") from None
        except ValueError as exc:
            raise PolicyError(f"local policy: {exc}") from None
        self.last_generation: Generation | None = None
        self._workers: set[Future] = set()

    def session(self, **sampling: object) -> LocalSession:
        """A policy for one run on this one's engine (several runs decode together):
        sampling options (temperature, seed, ...) override this policy's, and it
        counts its own run's tokens. Closing it leaves this policy open."""
        try:
            params = replace(self.params, **sampling)
            params.check()
        except (TypeError, ValueError) as exc:
            raise PolicyError(f"local policy: {exc}") from None
        return LocalSession(self, params)

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        async for chunk in self.generate(messages, stop, self.params):
            yield chunk

    async def generate(
        self,
        messages: list[Message],
        stop: list[str],
        params: SamplingParams,
        on_generation=None,
    ) -> AsyncIterator[str]:
        """stream() with `params`; `on_generation(generation, prompt_tokens)` hears of
        each finished generation."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        prompt = self.engine.chat_prompt([(m.role, m.content) for m in messages])
        if len(prompt) >= self.engine.max_seq:
            raise PolicyError(
                f"{CONTEXT_FULL}: it is {len(prompt)} tokens; the local model holds at "
                f"most {self.engine.max_seq - 1} prompt tokens"
            )
        params = replace(params, stop=[s for s in stop if s])

        def put(item: object) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: nobody is listening
                cancel.set()

        def on_token(_row: int, _token: int, text: str) -> None:
            if text:
                put(text)

        def done(future: Future) -> None:
            exc = future.exception()
            if exc is not None:  # handed to the consumer
                put(exc)
                return
            gen = future.result()
            if gen is not None:
                self.last_generation = gen
                if on_generation is not None:
                    on_generation(gen, len(prompt))
            put(gen or "")  # None: cancelled before it began

        worker = self.batcher.submit(prompt, params, on_token=on_token, cancel=cancel)
        worker.add_done_callback(done)
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, str):
                    if not item:
                        return
                    yield item
                elif isinstance(item, BaseException):
                    raise PolicyError(f"local model failed: {item}") from item
                else:
                    return
        finally:
            cancel.set()  # no-op when finished; stops the worker when abandoned

    async def aclose(self) -> None:
        """Wait for any worker still running (its generation was cancelled) and stop."""
        pending = [asyncio.wrap_future(f) for f in list(self._workers)]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.to_thread(self.batcher.close)  # joins its thread


class LocalSession:
    """One run's policy on a shared LocalPolicy (LocalPolicy.session): its sampling
    settings, and the run's token counts (`tokens_generated`, which
    training.env.episode records, `prompt_tokens`, `cached_tokens`)."""

    def __init__(self, policy: LocalPolicy, params: SamplingParams) -> None:
        self.policy, self.params = policy, params
        self.tokens_generated = self.prompt_tokens = self.cached_tokens = 0

    def _count(self, gen: Generation, prompt_tokens: int) -> None:  # once per turn
        self.tokens_generated += len(gen.token_ids)
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += gen.cached_tokens

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        async for chunk in self.policy.generate(messages, stop, self.params, self._count):
            yield chunk

    async def aclose(self) -> None:
        return None  # the shared policy's owner closes it
