"""The inference actor: the generation engine (model/) behind Ray, serving token-in,
token-out samples to rollout workers, with the trainer's weights synced in after each
step.

    actor = InferenceActor.remote("ckpt/", max_batch=8, temperature=1.0, seed=0)
    ray.get(actor.set_weights.remote(3, ray.put(pack_weights(trainer_model.sampling_state()))))
    sample = await actor.generate.remote(prompt_ids, 512)      # a token_policy.Sample

Batching: requests queue up while the engine works; each engine call takes up to
max_batch of them, whatever their lengths, stops and temperatures (model.batcher), and
each rollout's conversation stays in the engine's prefix cache between its turns. Calls
run on the batcher's thread, so set_weights and stats are answered meanwhile; new
weights are loaded between calls, never during one (the engine's lock), so every token
of a Sample comes from one policy version; they empty the prefix cache.

Weight sync goes through the Ray object store: the trainer puts one state dict, every
actor loads it in place (the compiled decode graph stays valid). Model.sampling_state
quantizes MXFP8 experts on the trainer's side, as the sampler holds them; an adapter
trainer (tachy's model) ships only the merged attention weights and the small tensors
it trains (AdaptedModel.sampling_state, `partial`), the frozen experts never move. On GPUs the
same two calls would carry an NCCL broadcast instead (not built: no GPU here).

`InferenceService` is the class without Ray (tests, and a trainer with no actors).
"""

from __future__ import annotations

import asyncio
import os
import time

import ray
import torch
from torch import Tensor

from model.batcher import Batcher
from model.checkpoint import open_model
from model.generate import Engine, SamplingParams
from training.rl.token_policy import Sample

# torch (2.13) cannot unpickle a float8 tensor (its storage has no dtype on the way
# back: "UntypedStorage has no attribute 'dtype'"), and Ray pickles what it puts in the
# object store, so a full weight sync of an MXFP8 model failed. Float8 tensors travel
# as their bytes, a uint8 view tagged with the dtype, and are viewed back on arrival.
_FLOAT8 = {
    str(dtype): dtype
    for dtype in (
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2fnuz,
    )
}


def pack_weights(state: dict[str, Tensor]) -> dict[str, Tensor | tuple[str, Tensor]]:
    """`state` in a form that pickles (and so goes through Ray's object store)."""
    return {
        name: (str(t.dtype), t.view(torch.uint8)) if str(t.dtype) in _FLOAT8 else t
        for name, t in state.items()
    }


def unpack_weights(packed: dict[str, Tensor | tuple[str, Tensor]]) -> dict[str, Tensor]:
    """The state dict pack_weights packed (a plain state dict passes unchanged)."""
    return {
        name: value[1].view(_FLOAT8[value[0]]) if isinstance(value, tuple) else value
        for name, value in packed.items()
    }


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

        def make_engine() -> Engine:  # on the batcher's thread, where it will decode
            if threads:
                torch.set_num_threads(threads)
            model, tokenizer = open_model(checkpoint_dir)
            return Engine(model, tokenizer, max_batch=max_batch, max_seq=max_seq, compile=compile)

        self.batcher = Batcher(make_engine)
        self.engine = self.batcher.ready()
        self.temperature = temperature
        self.seed = seed
        self.version = 0
        self.requests = 0
        self.tokens = 0
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
        temp = self.temperature if temperature is None else float(temperature)
        self.requests += 1
        params = SamplingParams(
            max_new_tokens=int(max_new_tokens), temperature=temp,
            stop=[s for s in stop if s],
            seed=self.seed * 1_000_003 + self.requests,  # each sample its own stream
        )  # fmt: skip
        g = await asyncio.wrap_future(self.batcher.submit(list(prompt), params))
        self.tokens += len(g.token_ids)
        return Sample(
            g.token_ids, g.logprobs, g.experts, g.weights_version, g.text, g.finish_reason
        )

    async def set_weights(
        self, version: int, weights: dict[str, Tensor | tuple[str, Tensor]], partial: bool = False
    ) -> float:
        """Load the trainer's weights (its model's sampling_state, packed by
        pack_weights or not) as `version`, between
        engine calls; `partial`: only the tensors an adapter trainer changes. Returns
        the seconds it took, waiting for a running call included."""
        started = time.perf_counter()
        weights = unpack_weights(weights)

        # on the engine's thread, between its calls
        await asyncio.wrap_future(
            self.batcher.call(lambda: self.engine.load_weights(weights, version, partial=partial))
        )
        self.version = version
        seconds = time.perf_counter() - started
        self.sync_s += seconds
        return seconds

    async def stats(self) -> dict:
        return {
            "version": self.version,
            "busy_s": round(self.batcher.busy_s, 3),
            "tokens": self.tokens,
            "batches": self.batcher.calls,
            "mean_batch": round(self.batcher.rows / self.batcher.calls, 2)
            if self.batcher.calls
            else 0.0,
            "sync_s": round(self.sync_s, 3),
            "queued": self.batcher.waiting,
            "prompt_tokens": self.engine.prompt_tokens,
            "cached_prompt_tokens": self.engine.cached_tokens,
        }


# The Ray actor: InferenceActor.remote(checkpoint_dir, ...), or .options(...) first.
InferenceActor = ray.remote(InferenceService)
