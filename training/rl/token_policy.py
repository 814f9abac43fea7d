"""The rollout policy, token in, token out: the executor's Policy over a sampler that
takes and returns token ids, recording what the trainer needs.

    policy = TokenPolicy(sample, tokenizer, max_tokens=8192, max_new_tokens=512)
    episode = await run_episode(env, policy)
    policy.sequence        # rl_loss.TokenSequence: ids, loss mask, sampler log-probs,
                           # each token's policy version and routed experts

Why not re-encode the conversation each turn (what `local:` does): the text of a turn
re-encoded need not give back the ids that were sampled (BPE merges differ at the
edges, a stop string cuts a token in two), and the loss must be taken on exactly the
ids the sampler drew with exactly its log-probs. So the prompt of each turn is the
previous turn's prompt, the sampled ids as drawn, then only the new context encoded:
the end of the assistant turn when the sampler did not write it, and the tool results
as a user message (Tokenizer.encode_chat, the one chat renderer).

`sample(prompt_ids, max_new_tokens, stop) -> Sample` is the inference actor's generate
(or an in-process InferenceService's), given the executor's stop strings; the policy enforces the rollout's token budget (prompt + generations)
and the staleness bound: a turn sampled more than `max_staleness` policy versions
after the rollout's first raises StaleRollout. Both end the run with a PolicyError
that the rollout worker reads from `stop` ("max_tokens", "stale") to mask the rollout
instead of scoring it as a failure.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from torch import Tensor

from agent.policy import Message, PolicyError
from model.tokenizer import IM_END, Tokenizer
from training.rl.loss import TokenSequence


@dataclass
class Sample:
    """One generation from the sampler, as it crosses the process boundary."""

    token_ids: list[int]
    logprobs: list[float]
    experts: Tensor | None  # int16 [n, moe_layers, k], routing of each token when fed
    version: int  # the policy version (weights) that sampled every token of it
    text: str  # decoded, cut before a stop string
    finish_reason: str  # stop | length | cancelled


class RolloutLimit(PolicyError):
    """The rollout reached a limit of the trainer's (not the model's fault)."""

    reason = "limit"


class TokenLimit(RolloutLimit):
    reason = "max_tokens"


class StaleRollout(RolloutLimit):
    reason = "stale"


SampleFn = Callable[[list[int], int, list[str]], Awaitable[Sample]]


class TokenPolicy:
    def __init__(
        self,
        sample: SampleFn,
        tokenizer: Tokenizer,
        *,
        max_tokens: int,
        max_new_tokens: int,
        max_staleness: int | None = None,
        hint: tuple[str, str] | None = None,
    ) -> None:
        """`hint` = (the instruction as the task gives it, the instruction with a hint):
        the sampler is prompted with the second; the sequence the trainer learns from
        holds the first (training.rl.curriculum: the ratio against the un-hinted context)."""
        self.sample = sample
        self.hint = hint
        self._sampler_head: list[int] = []  # the first context as the sampler saw it
        self._head = 0  # ... and its length in the trainer's sequence
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.max_new_tokens = max_new_tokens
        self.max_staleness = max_staleness
        self.sequence = TokenSequence()
        self.stop: str | None = None  # the RolloutLimit that ended the run, if any
        self.tokens_generated = 0
        self.turns = 0
        self.sample_s = 0.0  # waiting for the sampler (its queue and its decoding)
        self._seen = 0  # messages already in the sequence
        self._last: Sample | None = None
        self._end = tokenizer.token_to_id(IM_END)
        self._newline = tokenizer.encode("\n", allow_special=False)

    @property
    def versions(self) -> tuple[int, int] | None:
        """(oldest, newest) policy version among the sampled tokens."""
        seq = self.sequence
        sampled = [v for v, m in zip(seq.policy_version, seq.loss_mask, strict=True) if m]
        return (min(sampled), max(sampled)) if sampled else None

    def _encode(self, messages: list[Message]) -> list[int]:
        return self.tokenizer.encode_chat(
            [(m.role, m.content) for m in messages], generation_prompt=True
        )[0]

    def _context(self, messages: list[Message]) -> list[int]:
        """The ids to append before sampling this turn."""
        if self._last is None:
            ids = self._encode(messages)
            if self.hint is not None:
                plain, hinted = self.hint
                if not any(m.role == "user" and m.content == hinted for m in messages):
                    raise PolicyError("token policy: the hinted instruction is not in the prompt")
                self._sampler_head = ids
                ids = self._encode([
                    Message(m.role, plain) if m.role == "user" and m.content == hinted else m
                    for m in messages
                ])  # fmt: skip
                self._head = len(ids)
            return ids
        previous = messages[self._seen] if len(messages) > self._seen else None
        if previous is None or previous.role != "assistant" or previous.content != self._last.text:
            raise PolicyError(
                "token policy: the conversation does not continue the last sampled turn "
                "(one TokenPolicy serves one rollout)"
            )
        ids = [] if self._last.token_ids[-1:] == [self._end] else [self._end]
        ids += self._newline  # the turn's end, as encode_chat writes it
        new = [(m.role, m.content) for m in messages[self._seen + 1 :]]
        return ids + self.tokenizer.encode_chat(new, generation_prompt=True)[0]

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        context = self._context(messages)
        self.sequence.append_context(context)
        self._seen = len(messages)
        used = len(self.sequence.token_ids) + len(self._sampler_head) - self._head
        budget = min(self.max_new_tokens, self.max_tokens - used)
        if budget <= 0:
            self.stop = TokenLimit.reason
            raise TokenLimit(f"the rollout reached its limit of {self.max_tokens} tokens")
        started = time.perf_counter()
        prompt = self._sampler_head + list(self.sequence.token_ids)[self._head :]
        sample = await self.sample(prompt, budget, stop)
        self.sample_s += time.perf_counter() - started
        versions = self.versions
        if (
            self.max_staleness is not None
            and versions is not None
            and sample.version - versions[0] > self.max_staleness
        ):
            self.stop = StaleRollout.reason
            raise StaleRollout(
                f"policy version {sample.version} is more than {self.max_staleness} "
                f"versions after this rollout's first ({versions[0]})"
            )
        experts = sample.experts
        if experts is not None and experts.shape[0] != len(sample.token_ids):
            experts = None  # not recorded for every token: those route freely in replay
        if sample.token_ids:
            self.sequence.append_sampled(sample.token_ids, sample.logprobs, sample.version, experts)
        self.tokens_generated += len(sample.token_ids)
        self.turns += 1
        self._last = sample
        if sample.finish_reason == "cancelled":
            raise PolicyError("the sampler cancelled the generation")
        if sample.text:
            yield sample.text

    async def aclose(self) -> None:
        pass
