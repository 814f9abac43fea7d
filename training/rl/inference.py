"""The inference actor: the generation engine (model/) behind Ray, serving token-in,
token-out samples to rollout workers, with the trainer's weights synced in after each
step.

    actor = InferenceActor.remote("ckpt/", max_batch=8, temperature=1.0, seed=0)
    ray.get(actor.set_weights.remote(3, ray.put(trainer_model.sampling_state())))
    sample = await actor.generate.remote(prompt_ids, 512)      # a token_policy.Sample

Batching: requests queue up while the engine works; each engine call takes the oldest
request and up to max_batch - 1 more that asked for the same number of new tokens, stop
strings and temperature (the engine has one SamplingParams per call). A call runs on a worker thread, so set_weights and
stats are answered meanwhile; new weights are loaded between calls, never during one,
so every token of a Sample comes from one policy version.

Weight sync goes through the Ray object store: the trainer puts one state dict, every
actor loads it in place (the compiled decode graph stays valid). Model.sampling_state
quantizes MXFP8 experts on the trainer's side, as the sampler holds them. On GPUs the
same two calls would carry an NCCL broadcast instead (not built: no GPU here).

`InferenceService` is the class without Ray (tests, and a trainer with no actors).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import ray
import torch
from torch import Tensor

from model.checkpoint import open_model
from model.generate import Engine, SamplingParams
from training.rl.token_policy import Sample


@dataclass
class _Request:
    prompt: list[int]
    max_new_tokens: int
    stop: tuple[str, ...]
    temperature: float
    future: asyncio.Future = field(repr=False)


class InferenceService:
    def __init__(
        self,
        checkpoint_dir: str,
        *,
        max_batch: int = 8,
        max_seq: int = 4096,
        temperature: float = 1.0,
        seed: int = 0,
        threads: int | None = None,
        compile: bool = False,
    ) -> None:
        if threads:
            torch.set_num_threads(threads)
        model, tokenizer = open_model(checkpoint_dir)
        self.engine = Engine(
            model, tokenizer, max_batch=max_batch, max_seq=max_seq, compile=compile
        )
        self.temperature = temperature
        self.seed = seed
        self.version = 0
        self.calls = 0
        self.queue: list[_Request] = []
        self.wakeup: asyncio.Event | None = None
        self.worker: asyncio.Task | None = None
        self.busy_s = 0.0
        self.tokens = 0
        self.batches = 0
        self.rows = 0
        self.sync_s = 0.0

    async def info(self) -> dict:
        return {"pid": os.getpid(), "max_seq": self.engine.max_seq, "version": self.version}

    async def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        stop: list[str] | tuple[str, ...] = (),
        temperature: float | None = None,
    ) -> Sample:
        """Sample up to max_new_tokens after `prompt` (ids), ending early at a stop string
        (the executor's: the model must not write tool results itself), at `temperature`
        (default: the actor's; 0 is greedy, for evaluation)."""
        loop = asyncio.get_running_loop()
        if self.worker is None or self.worker.done():
            self.wakeup = asyncio.Event()
            self.worker = loop.create_task(self._serve())
        temp = self.temperature if temperature is None else float(temperature)
        stops = tuple(s for s in stop if s)
        request = _Request(list(prompt), int(max_new_tokens), stops, temp, loop.create_future())
        self.queue.append(request)
        self.wakeup.set()
        return await request.future

    async def _serve(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            while self.queue:
                first = self.queue[0]
                key = (first.max_new_tokens, first.stop, first.temperature)
                batch = [r for r in self.queue if (r.max_new_tokens, r.stop, r.temperature) == key]
                batch = batch[: self.engine.max_batch]
                for r in batch:
                    self.queue.remove(r)
                await self._run(batch)

    async def _run(self, batch: list[_Request]) -> None:
        self.calls += 1
        params = SamplingParams(
            max_new_tokens=batch[0].max_new_tokens, temperature=batch[0].temperature,
            stop=list(batch[0].stop),
            seed=self.seed * 1_000_003 + self.calls,
        )  # fmt: skip
        started = time.perf_counter()
        try:
            gens = await asyncio.to_thread(self.engine.generate, [r.prompt for r in batch], params)
        except Exception as exc:  # each waiting rollout gets the error
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(exc)
            return
        self.busy_s += time.perf_counter() - started
        self.batches += 1
        self.rows += len(batch)
        for r, g in zip(batch, gens, strict=True):
            self.tokens += len(g.token_ids)
            if not r.future.done():  # the caller may have gone (aborted rollout)
                sample = Sample(
                    g.token_ids, g.logprobs, g.experts, self.version, g.text, g.finish_reason
                )
                r.future.set_result(sample)

    async def set_weights(self, version: int, weights: dict[str, Tensor]) -> float:
        """Load the trainer's weights (Model.sampling_state) as `version`, between engine calls.
        Returns the seconds it took, waiting for a running call included."""
        started = time.perf_counter()

        await asyncio.to_thread(self.engine.load_weights, weights)
        self.version = version
        seconds = time.perf_counter() - started
        self.sync_s += seconds
        return seconds

    async def stats(self) -> dict:
        return {
            "version": self.version,
            "busy_s": round(self.busy_s, 3),
            "tokens": self.tokens,
            "batches": self.batches,
            "mean_batch": round(self.rows / self.batches, 2) if self.batches else 0.0,
            "sync_s": round(self.sync_s, 3),
            "queued": len(self.queue),
        }


# The Ray actor: InferenceActor.remote(checkpoint_dir, ...), or .options(...) first.
InferenceActor = ray.remote(InferenceService)
