"""The generation engine: batched prefill and decode on the static KV cache, gpt-fast style.

    engine = Engine(model, tokenizer, max_batch=8, max_seq=4096)
    gens = engine.generate([ids_a, ids_b], SamplingParams(max_new_tokens=64, temperature=0.7))
    gen = engine.complete("def add(a, b):", SamplingParams(stop=["\\n\\n"]))
    ids = engine.chat_prompt([("system", "..."), ("user", "...")])

Layout. Prompts are *right-padded*: every row's prompt sits at positions 0..len-1 (the
prefill feeds [B, Lmax] with the pad id after each shorter prompt, positions 0..Lmax-1 for
all rows) and the next-token logits are read at each row's own last prompt position. Each
decode step then feeds one token per row at that row's own position ([B, 1] ids, [B, 1]
positions), which overwrites the cache slot a pad token may have held; attention only
reads slots <= the position, so pads and anything left by earlier calls are never seen.
One cache (model.setup_cache(max_batch, max_seq)) is made once and reused; calls are
serialised by a lock.

Per row, generation ends at a tokenizer stop id ("stop"; the id is listed in token_ids
with its log-prob but its text is not part of `text`), at a stop string ("stop"; `text`
is cut before it, the tokens stay listed), at max_new_tokens or the end of the cache
("length"), or when `cancel` is set ("cancelled", checked after every step). Finished
rows ride along in the batch forward (re-feeding their last token at its own position,
which rewrites the same cache slot) until every row is done.

What RL needs comes back per token: `logprobs[t]` is the log-prob of token t under the
distribution it was sampled from (temperature, then top-k, then top-p; for greedy
decoding the plain log_softmax of the logits), and `experts[t]` the experts token t was
routed to in each MoE layer when it was fed to the model (the last token is fed by one
extra forward at the end), i.e. what a training forward over prompt + generation
replays.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from model.model import Model
from model.tokenizer import IncrementalDecoder, Tokenizer


@dataclass
class SamplingParams:
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    stop: list[str] = field(default_factory=list)  # stop strings, besides the stop ids
    seed: int | None = None

    def check(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")


@dataclass
class Generation:
    token_ids: list[int]  # generated ids, prompt excluded
    logprobs: list[float]  # sampler log-prob of each generated token
    experts: Tensor  # int16 [n_generated, moe_layers, k]
    text: str
    finish_reason: str  # "stop" | "length" | "cancelled"


def filter_logits(logits: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    """logits [B, V] -> fp32 logits of the distribution sampled from: divided by the
    temperature, then all but the top_k set to -inf, then all outside the smallest set
    whose probability reaches top_p (the most likely token always stays)."""
    x = logits.float() / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]  # [B, 1]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        before = probs.cumsum(-1) - probs  # mass strictly above each token
        drop_sorted = before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x


def stop_hold(text: str, stops: list[str]) -> int:
    """How many characters at the end of `text` could begin a stop string (held back)."""
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:n]):
                hold = n
                break
    return hold


class _Row:
    """One prompt's state during a generate call."""

    def __init__(self, engine: Engine, prompt: list[int], limit: int) -> None:
        self.prompt_len = len(prompt)
        self.limit = limit  # most tokens this row may generate
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.experts: list[Tensor] = []  # [moe_layers, k] per fed token
        self.decoder = IncrementalDecoder(engine.tokenizer)
        self.text = ""  # decoded text of the non-stop-id tokens, uncut
        self.emitted = 0  # characters of `text` handed to on_token
        self.finish: str | None = None

    @property
    def last_position(self) -> int:
        """The position of the last generated token (where it is fed)."""
        return self.prompt_len + len(self.ids) - 1


class Engine:
    def __init__(
        self,
        model: Model,
        tokenizer: Tokenizer,
        *,
        max_batch: int = 8,
        max_seq: int = 4096,
        compile: bool = False,
    ) -> None:
        """`max_seq` (prompt + generation) is capped at the model's max_position_embeddings.
        `compile=True` runs the decode step through torch.compile: several times fewer
        host-side ops per token (what bounds decoding small models on a CPU), paid for
        with seconds of compilation on the first calls (a C++ compiler must be present)."""
        if max_batch < 1 or max_seq < 2:
            raise ValueError(f"need max_batch >= 1 and max_seq >= 2, got {max_batch}, {max_seq}")
        if tokenizer.vocab_size > model.config.vocab_size:
            raise ValueError(
                f"the tokenizer has {tokenizer.vocab_size} ids but the model only "
                f"{model.config.vocab_size}: not a matching pair"
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.max_seq = min(max_seq, model.config.max_position_embeddings)
        self.device = model.embed_tokens.weight.device
        self.cache = model.setup_cache(max_batch, self.max_seq)
        self.stop_ids = tokenizer.stop_ids
        pad = tokenizer.pad_id
        self.pad_id = 0 if pad is None else pad
        self._lock = threading.Lock()
        self._decode = self._decode_step
        if compile:
            self._decode = torch.compile(self._decode_step, dynamic=None)

    def load_weights(self, state: dict[str, Tensor]) -> None:
        """Copy new weights (a full state dict of this model) in place, between
        generations, never during one (RL weight sync); a compiled decode step stays
        valid."""
        with self._lock, torch.no_grad():
            self.model.load_state_dict(state, strict=True)

    # ------------------------------------------------------------------ prompts
    def chat_prompt(self, messages: list[tuple[str, str]]) -> list[int]:
        """The prompt ids of a chat, ready for the assistant's turn (Tokenizer.encode_chat
        with the generation prompt; ValueError if the tokenizer has no chat markers)."""
        return self.tokenizer.encode_chat(messages, generation_prompt=True)[0]

    def complete(self, prompt: str, params: SamplingParams, **kw) -> Generation:
        """One text prompt (encoded with special tokens allowed), one Generation."""
        return self.generate([self.tokenizer.encode(prompt)], params, **kw)[0]

    # --------------------------------------------------------------- generation
    def _check(self, prompts: list[list[int]], params: SamplingParams) -> None:
        params.check()
        if not prompts:
            raise ValueError("no prompts given")
        if len(prompts) > self.max_batch:
            raise ValueError(f"batch of {len(prompts)} prompts exceeds max_batch {self.max_batch}")
        vocab = self.model.config.vocab_size
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty")
            if len(p) >= self.max_seq:
                raise ValueError(
                    f"prompt {i} has {len(p)} tokens; max_seq {self.max_seq} leaves no room "
                    "to generate (at most max_seq - 1 prompt tokens)"
                )
            if min(p) < 0 or max(p) >= vocab:
                raise ValueError(f"prompt {i} has token ids outside the vocabulary [0, {vocab})")

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        *,
        on_token: Callable[[int, int, str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Generation]:
        """Generate for each prompt (token ids); see the module docstring."""
        self._check(prompts, params)
        with self._lock:
            return self._generate(prompts, params, on_token, cancel)

    def _generate(self, prompts, params, on_token, cancel) -> list[Generation]:
        B, dev = len(prompts), self.device
        rows = [_Row(self, p, min(params.max_new_tokens, self.max_seq - len(p))) for p in prompts]
        if params.max_new_tokens == 0:
            for r in rows:
                r.finish = "length"
            return [self._result(r) for r in rows]
        if cancel is not None and cancel.is_set():
            for r in rows:
                r.finish = "cancelled"
            return [self._result(r) for r in rows]
        gen = None
        if params.temperature > 0:
            gen = torch.Generator(device=dev)
            if params.seed is not None:
                gen.manual_seed(params.seed)
            else:
                gen.seed()

        # prefill, right-padded: [B, Lmax]
        lens = torch.tensor([len(p) for p in prompts], device=dev)
        L = int(lens.max())
        ids = torch.full((B, L), self.pad_id, dtype=torch.long, device=dev)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
        logits = self.model(ids, torch.arange(L, device=dev), self.cache, cache_len=L)
        logits = logits[torch.arange(B, device=dev), lens - 1]  # [B, V]

        while True:
            tokens, logprobs = self._sample(logits, params, gen)
            cancelled = cancel is not None and cancel.is_set()
            for i, r in enumerate(rows):
                if r.finish is None:
                    self._accept(i, r, tokens[i], logprobs[i], params, on_token, cancelled)
            # feed every row's last token at its own position (finished rows re-feed theirs)
            last = torch.tensor([r.ids[-1] for r in rows], device=dev)[:, None]  # [B, 1]
            pos = torch.tensor([r.last_position for r in rows], device=dev)[:, None]  # [B, 1]
            pending = [len(r.experts) < len(r.ids) for r in rows]
            if not any(pending):
                break
            logits, routing = self._decode(last, pos, max(r.last_position for r in rows) + 1)
            routing = routing.to(torch.int16).cpu()  # [moe_layers, B, k]
            for i, r in enumerate(rows):
                if pending[i]:
                    r.experts.append(routing[:, i])
            if all(r.finish is not None for r in rows):
                break
        return [self._result(r) for r in rows]

    def _decode_step(self, tokens: Tensor, positions: Tensor, length: int) -> tuple[Tensor, Tensor]:
        """tokens, positions [B, 1] -> next-token logits [B, V], experts [moe_layers, B, k];
        attention reads the first `length` cache slots."""
        out = self.model(tokens, positions, self.cache, cache_len=length, return_routing=True)
        return out.logits[:, -1], out.routing[:, :, 0]

    def _sample(
        self, logits: Tensor, params: SamplingParams, gen: torch.Generator | None
    ) -> tuple[list[int], list[float]]:
        """logits [B, V] -> a token and its sampler log-prob per row."""
        if params.temperature == 0:
            logp = torch.log_softmax(logits.float(), dim=-1)
            tokens = logp.argmax(-1)  # [B]
        else:
            logp = torch.log_softmax(
                filter_logits(logits, params.temperature, params.top_k, params.top_p), dim=-1
            )
            tokens = torch.multinomial(logp.exp(), 1, generator=gen)[:, 0]  # [B]
        chosen = logp.gather(-1, tokens[:, None])[:, 0]
        return tokens.tolist(), chosen.tolist()

    def _accept(self, i, r: _Row, token, logprob, params, on_token, cancelled) -> None:
        """Append one sampled token to row `r`, decide whether it ends the row, and hand the
        text it completes to on_token (holding back what may begin a stop string)."""
        r.ids.append(token)
        r.logprobs.append(logprob)
        if token in self.stop_ids:
            r.finish = "stop"
        else:
            r.text += r.decoder.push(token)
            if len(r.ids) >= r.limit:
                r.finish = "length"
            elif cancelled:
                r.finish = "cancelled"
        if r.finish is not None:
            r.text += r.decoder.flush()
        cut = min(
            (j for j in (r.text.find(s, r.emitted) for s in params.stop) if j >= 0), default=-1
        )
        if cut >= 0:
            r.text, r.finish = r.text[:cut], "stop"
        end = len(r.text) if r.finish else len(r.text) - stop_hold(r.text, params.stop)
        delta = r.text[r.emitted : end] if end > r.emitted else ""
        r.emitted = max(r.emitted, end)
        if on_token is not None:
            on_token(i, token, delta)

    def _result(self, r: _Row) -> Generation:
        k = self.model.config.num_experts_per_tok
        n_moe = sum(self.model.config.is_moe_layer(i) for i in range(len(self.model.layers)))
        experts = torch.stack(r.experts) if r.experts else torch.zeros(0, n_moe, k)
        return Generation(
            token_ids=r.ids,
            logprobs=r.logprobs,
            experts=experts.to(torch.int16),
            text=r.text,
            finish_reason=r.finish or "length",
        )
