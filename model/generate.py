"""The generation engine: batched prefill and decode on the static KV cache, gpt-fast style.

    engine = Engine(model, tokenizer, max_batch=8, max_seq=4096)
    gens = engine.generate([ids_a, ids_b], SamplingParams(max_new_tokens=64, temperature=0.7))
    gen = engine.complete("def add(a, b):", SamplingParams(stop=["\\n\\n"]))
    ids = engine.chat_prompt([("system", "..."), ("user", "...")])

Layout. Every row's prompt sits at positions 0..len-1 of its cache row. The prefill
feeds [B, Lnew], each row's tokens after the part of its prompt the cache already holds
(see below), right-padded with the pad id, and reads the next-token logits at each row's
own last prompt position. Each decode step then feeds one token per row at that row's own
position ([B, 1] ids, [B, 1] positions), which overwrites the cache slot a pad token may
have held; attention only reads slots <= the position, so pads and anything left by
earlier calls are never seen. Calls are serialised by a lock.

The prefix cache. Agents call the engine turn after turn with a prompt that is the last
one plus the model's answer and the tool results, and every conversation begins with the
same system prompt. So the cache (model.setup_cache(cache_slots, max_seq), made once)
keeps, for each of its `cache_slots` rows, the tokens whose keys and values it holds,
and a call only prefills what no row holds already:

- a prompt that continues a row (the row's tokens are a prefix of it: the same session's
  next turn) extends that row in place;
- a prompt that shares a prefix with a row holding something else (another session with
  the same system prompt) gets a copy of that prefix in a free row, so both stay;
- prompts of one call that share a prefix nothing holds (an RL group's first turn) have
  it prefilled once and copied;
- rows are reused least recently used first: `cache_slots` (default max_batch + 1) rows
  of max_seq tokens bound the memory, and an evicted session is simply prefilled again.

The rows a call uses are moved to the front of the cache first (rows 0..B-1; a copy of
their held tokens, cheap next to prefilling them). New weights (load_weights) empty it.

Per row, generation ends at a tokenizer stop id ("stop"; the id is listed in token_ids
with its log-prob but its text is not part of `text`), at a stop string ("stop"; `text`
is cut before it, the tokens stay listed), at max_new_tokens or the end of the cache
("length"), or when `cancel` is set ("cancelled", checked after every step). Finished
rows ride along in the batch forward (re-feeding their last token at its own position,
which rewrites the same cache slot) until every row is done.

`params` is one SamplingParams for every prompt or one per prompt (prompts of different
sessions decode together whatever their settings).

Continuous batching (`run`, what model.batcher uses): the same loop, but each job is
handed its Generation the moment it is done, and a free row (or one the batch can still
grow by) is offered to new jobs between decode steps. A joining job is prefilled alone
into its own row (model.CacheRows) from the longest prefix any row holds, while the
other rows keep their cache rows and positions; what its row held before, a finished
session's last turn, is first moved to a row outside the batch when one is free, so
that session's next turn still finds it. Every token is the one a fresh engine gives.

What RL needs comes back per token: `logprobs[t]` is the log-prob of token t under the
distribution it was sampled from (temperature, then top-k, then top-p; for greedy
decoding the plain log_softmax of the logits), and `experts[t]` the experts token t was
routed to in each MoE layer when it was fed to the model (the last token is fed by one
extra forward at the end), i.e. what a training forward over prompt + generation
replays.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor

from model.model import CacheRows, Model
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
    cached_tokens: int = 0  # prompt tokens whose keys/values came from the prefix cache
    weights_version: int = 0  # the Engine.load_weights that produced it (0: the first)


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


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of two token lists (binary search over
    slice comparisons, which run in C)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi - 1:  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class _Row:
    """One prompt's state during a generate call."""

    def __init__(self, engine: Engine, prompt: list[int], params: SamplingParams) -> None:
        self.prompt_len = len(prompt)
        self.params = params
        self.limit = min(params.max_new_tokens, engine.max_seq - len(prompt))  # most new tokens
        self.cached = 0  # prompt tokens the prefix cache held
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.experts: list[Tensor] = []  # [moe_layers, k] per fed token
        self.decoder = IncrementalDecoder(engine.tokenizer)
        self.text = ""  # decoded text of the non-stop-id tokens, uncut
        self.emitted = 0  # characters of `text` handed to on_token
        self.finish: str | None = None
        self.placed = False  # its prompt is in its cache row

    @property
    def last_position(self) -> int:
        """The position of the last generated token (where it is fed)."""
        return self.prompt_len + len(self.ids) - 1


@dataclass
class Job:
    """A prompt for Engine.run: on_token(token id, new text) as it comes, then its
    Generation to done(), or what went wrong to fail()."""

    prompt: list[int]
    params: SamplingParams
    done: Callable[[Generation], None]
    fail: Callable[[BaseException], None]
    on_token: Callable[[int, str], None] | None = None
    cancel: threading.Event | None = None


def _raised(exc: BaseException) -> None:
    """generate()'s jobs fail by the error it raises."""


class _Batch:
    """The rows one engine run decodes: batch row i is cache row i; jobs[i] is None
    once done (the row is free: re-fed, harmlessly, until a new job takes it)."""

    def __init__(self, engine: Engine, jobs: list[Job]) -> None:
        self.jobs: list[Job | None] = list(jobs)
        self.prompts = [j.prompt for j in jobs]
        self.params = [j.params for j in jobs]
        self.rows = [_Row(engine, j.prompt, j.params) for j in jobs]
        for r, j in zip(self.rows, jobs, strict=True):
            if r.limit == 0 or j.params.max_new_tokens == 0:
                r.finish = "length"
            elif j.cancel is not None and j.cancel.is_set():
                r.finish = "cancelled"
        self.gens = engine._generators(self.params) if jobs else []
        self.logits: Tensor | None = None  # [B, V]: the next token's, per row

    def live(self) -> Iterator[tuple[_Row, Job | None]]:
        return zip(self.rows, self.jobs, strict=True)

    def clear(self) -> None:
        """No rows (in place: the run's error handler holds this object)."""
        self.jobs, self.prompts, self.params, self.rows, self.gens = [], [], [], [], []
        self.logits = None

    def grow(self) -> None:
        """One more row (filled by set)."""
        for column in (self.jobs, self.prompts, self.params, self.rows, self.gens):
            column.append(None)
        if self.logits is not None:
            self.logits = torch.cat([self.logits, self.logits[-1:]])

    def set(self, i: int, job: Job, row: _Row, gen: torch.Generator | None) -> None:
        self.jobs[i], self.prompts[i], self.params[i] = job, job.prompt, job.params
        self.rows[i], self.gens[i] = row, gen


class Engine:
    def __init__(
        self,
        model: Model,
        tokenizer: Tokenizer,
        *,
        max_batch: int = 8,
        max_seq: int = 4096,
        cache_slots: int | None = None,
        compile: bool = False,
    ) -> None:
        """`max_seq` (prompt + generation) is capped at the model's max_position_embeddings;
        `cache_slots` (>= max_batch; default max_batch + 1) rows of max_seq tokens make the
        prefix cache (module docstring), whose memory is cache_slots * max_seq * layers *
        2 * kv_heads * head_dim * 4 bytes.
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
        slots = max_batch + 1 if cache_slots is None else cache_slots
        if slots < max_batch:
            raise ValueError(f"cache_slots {slots} < max_batch {max_batch}")
        self.cache = model.setup_cache(slots, self.max_seq)
        self.held: list[list[int]] = [[] for _ in range(slots)]  # tokens each row holds
        self._used = [0] * slots  # when each row was last used (LRU)
        self._clock = 0
        self.weights_version = 0
        self.prompt_tokens = 0  # prompt tokens of every call, and of those ...
        self.cached_tokens = 0  # ... the ones the prefix cache held
        self.stop_ids = tokenizer.stop_ids
        pad = tokenizer.pad_id
        self.pad_id = 0 if pad is None else pad
        self._lock = threading.Lock()
        self._decode = self._decode_step
        if compile:
            self._decode = torch.compile(self._decode_step, dynamic=None)

    def load_weights(
        self, state: dict[str, Tensor], version: int | None = None, *, partial: bool = False
    ) -> None:
        """Copy new weights (a full state dict of this model; with `partial`, only some of
        its tensors: what an adapter trainer changes) in place, between generations,
        never during one (RL weight sync); a compiled decode step stays valid.
        Generations made with them carry `version` (default: one more)."""
        with self._lock, torch.no_grad():
            if partial:
                unknown = sorted(set(state) - set(self.model.state_dict()))
                if unknown:
                    raise ValueError(f"weights this model does not have: {unknown[:4]}")
            self.model.load_state_dict(state, strict=not partial)
            self.clear_cache()
            self.weights_version = self.weights_version + 1 if version is None else version

    def clear_cache(self) -> None:
        """Forget what the prefix cache holds (it was computed by other weights)."""
        self.held = [[] for _ in self.held]

    # ------------------------------------------------------------------ prompts
    def chat_prompt(self, messages: list[tuple[str, str]]) -> list[int]:
        """The prompt ids of a chat, ready for the assistant's turn (Tokenizer.encode_chat
        with the generation prompt; ValueError if the tokenizer has no chat markers)."""
        return self.tokenizer.encode_chat(messages, generation_prompt=True)[0]

    def complete(self, prompt: str, params: SamplingParams, **kw) -> Generation:
        """One text prompt (encoded with special tokens allowed), one Generation."""
        return self.generate([self.tokenizer.encode(prompt)], params, **kw)[0]

    # --------------------------------------------------------------- generation
    def _check(self, prompts: list[list[int]], params: list[SamplingParams]) -> None:
        if not prompts:
            raise ValueError("no prompts given")
        if len(params) != len(prompts):
            raise ValueError(f"{len(params)} SamplingParams for {len(prompts)} prompts")
        for p in params:
            p.check()
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
        params: SamplingParams | list[SamplingParams],
        *,
        on_token: Callable[[int, int, str], None] | None = None,
        cancel: threading.Event | list[threading.Event | None] | None = None,
    ) -> list[Generation]:
        """Generate for each prompt (token ids); see the module docstring. `params` and
        `cancel` are one for the whole call or one per prompt."""
        each = params if isinstance(params, list) else [params] * len(prompts)
        self._check(prompts, each)
        cancels = cancel if isinstance(cancel, list) else [cancel] * len(prompts)
        out: list[Generation] = [None] * len(prompts)  # type: ignore[list-item]

        def job(i: int) -> Job:
            def done(g: Generation) -> None:
                out[i] = g

            report = None if on_token is None else partial(on_token, i)
            return Job(prompts[i], each[i], done, _raised, report, cancels[i])

        with self._lock:
            self._loop([job(i) for i in range(len(prompts))], None)
        return out

    @torch.inference_mode()
    def run(self, jobs: list[Job], more: Callable[[int], list[Job]] | None = None) -> None:
        """Continuous batching: decode `jobs` (at most max_batch) together and hand each
        its Generation (job.done) the moment it is finished, so its caller can go on
        (run its tools) while the others decode. Whenever a row is free, or the batch is
        below max_batch, `more(n)` is asked for up to n new jobs, which join the batch
        at once, mid-run (each prefilled alone into its row, reusing what the cache
        holds). Returns when no job runs and `more` gives none. A job whose prompt is
        bad fails alone (job.fail); an error of the engine fails every job not yet
        done, then is raised."""
        with self._lock:
            self._loop(self._valid(jobs), more)

    def _valid(self, jobs: list[Job]) -> list[Job]:
        """The jobs whose prompt and settings this engine takes; the others fail."""
        good = []
        for j in jobs:
            try:
                self._check([j.prompt], [j.params])
            except ValueError as exc:
                j.fail(exc)
            else:
                good.append(j)
        return good

    def _loop(self, jobs: list[Job], more: Callable[[int], list[Job]] | None) -> None:
        batch = _Batch(self, jobs)
        try:
            self._decode_batch(batch, more)
        except BaseException as exc:
            for j in batch.jobs:
                if j is not None:
                    j.fail(exc)
            raise

    def _decode_batch(self, b: _Batch, more: Callable[[int], list[Job]] | None) -> None:
        dev = self.device
        if any(r.finish is None for r in b.rows):
            b.logits = self._prefill(b.prompts, b.rows)  # [B, V]
        else:  # nothing to generate: done without touching the cache
            for r, j in b.live():
                j.done(self._result(r))
            b.clear()
        while True:
            if b.logits is not None:
                tokens, logprobs = self._sample(b.logits, b.params, b.gens)
                for i, (r, j) in enumerate(zip(b.rows, b.jobs, strict=True)):
                    if j is not None and r.finish is None:
                        cancelled = j.cancel is not None and j.cancel.is_set()
                        self._accept(r, tokens[i], logprobs[i], j.on_token, cancelled)
            # feed every row's last token at its own position (finished and free rows
            # re-feed theirs; a row that generated nothing re-feeds its last prompt token)
            pending = [j is not None and len(r.experts) < len(r.ids) for r, j in b.live()]
            if any(pending):
                last = [
                    r.ids[-1] if r.ids else p[-1] for r, p in zip(b.rows, b.prompts, strict=True)
                ]
                last = torch.tensor(last, device=dev)[:, None]  # [B, 1]
                pos = torch.tensor([r.last_position for r in b.rows], device=dev)[:, None]
                b.logits, routing = self._decode(last, pos, int(pos.max()) + 1)
                routing = routing.to(torch.int16).cpu()  # [moe_layers, B, k]
                for i, r in enumerate(b.rows):
                    if pending[i]:
                        r.experts.append(routing[:, i])
            for i, (r, j) in enumerate(b.live()):  # done: every sampled token fed
                if j is not None and r.finish is not None and len(r.experts) == len(r.ids):
                    if r.placed:
                        self.held[i] = b.prompts[i] + r.ids  # what the cache row holds
                    b.jobs[i] = None
                    j.done(self._result(r))
            if more is not None:
                self._admit(b, more)
            if all(j is None for j in b.jobs):
                return

    # ------------------------------------------------------------ joining mid-run
    def _admit(self, b: _Batch, more: Callable[[int], list[Job]]) -> None:
        """Fill free rows (and grow the batch to max_batch) with the jobs `more` gives."""
        free = [i for i, j in enumerate(b.jobs) if j is None]
        room = len(free) + self.max_batch - len(b.rows)
        new = self._valid(more(room)) if room > 0 else []
        for job in new:
            slot = self._slot(b, job.prompt, free)
            if slot == len(b.rows):  # the batch grows by one row
                b.grow()
            else:
                free.remove(slot)
            row = _Row(self, job.prompt, job.params)
            if row.limit == 0 or job.params.max_new_tokens == 0:
                row.finish = "length"
            b.set(slot, job, row, self._generators([job.params])[0])
            logits = self._join(b, slot, job.prompt, row)  # [V]
            if b.logits is None:
                b.logits = logits[None].repeat(len(b.rows), 1)
            else:
                b.logits[slot] = logits

    def _slot(self, b: _Batch, prompt: list[int], free: list[int]) -> int:
        """The free row for a joining prompt: the one it continues (its session's last
        turn), else the least recently used; or a new row if the batch has room."""
        grow = [len(b.rows)] if len(b.rows) < self.max_batch else []
        choices = free + grow
        contents = [self.held[i] for i in choices]
        reuse = [common_prefix(prompt, h) if h else 0 for h in contents]
        best = max(range(len(choices)), key=lambda k: reuse[k])
        if reuse[best] >= len(contents[best]) - 1 and reuse[best] > 0:
            return choices[best]
        return min(choices, key=lambda i: self._used[i])

    def _join(self, b: _Batch, slot: int, prompt: list[int], row: _Row) -> Tensor:
        """Prefill `prompt` into cache row `slot` while the batch's other rows keep
        theirs: the longest prefix any row holds is reused (copied if another row holds
        it); what `slot` held before is first moved to a row outside the batch, if one
        is free, so the session it belongs to finds it on its next turn. Returns the
        next-token logits [V]."""
        self._clock += 1
        contents = list(self.held)  # what each cache row holds now
        for i, r in enumerate(b.rows):
            if i != slot and r is not None and r.placed:
                contents[i] = b.prompts[i] + r.ids[: len(r.experts)]
        reuse = [min(common_prefix(prompt, h), len(prompt) - 1) for h in contents]
        src = max(range(len(contents)), key=lambda i: (reuse[i], i == slot))
        c = reuse[src]
        own = self.held[slot]
        continued = src == slot and c >= len(own) - 1
        if own and not continued:
            spare = [i for i in range(len(b.rows), len(self.held)) if i != src]
            if spare:
                park = min(spare, key=lambda i: self._used[i])
                self.cache.copy_rows([slot], [park], len(own))
                self.held[park], self._used[park] = own, self._used[slot]
                contents[park] = own
        if src != slot and c > 0:
            self.cache.copy_rows([src], [slot], c)
        self.held[slot] = prompt[:c]
        self._used[slot] = self._clock
        row.cached = c
        self.prompt_tokens += len(prompt)
        self.cached_tokens += c
        dev = self.device
        ids = torch.tensor(prompt[c:], dtype=torch.long, device=dev)[None]  # [1, L]
        positions = torch.arange(c, len(prompt), device=dev)[None]
        logits = self.model(
            ids, positions, CacheRows(self.cache, [slot]), cache_len=len(prompt),
            logits_at=torch.tensor([len(prompt) - c - 1], device=dev),
        )  # fmt: skip
        row.placed = True
        return logits[0, 0]

    # ------------------------------------------------------------- prefix cache
    def _prefill(self, prompts: list[list[int]], rows: list[_Row]) -> Tensor:
        """Arrange the cache, prefill what it does not hold, return the next-token
        logits [B, V] at each prompt's last token."""
        B, dev = len(prompts), self.device
        starts = self._place(prompts)
        starts = self._share_batch_prefix(prompts, starts)
        for r, c in zip(rows, starts, strict=True):
            r.cached, r.placed = c, True
        self.prompt_tokens += sum(map(len, prompts))
        self.cached_tokens += sum(starts)
        L = max(len(p) - c for p, c in zip(prompts, starts, strict=True))  # >= 1
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        for i, (p, c) in enumerate(zip(prompts, starts, strict=True)):
            ids[i, : len(p) - c] = torch.tensor(p[c:], dtype=torch.long)
        start = torch.tensor(starts)[:, None]  # [B, 1]
        # pads go to the slots after each prompt (rewritten before they are read)
        positions = (start + torch.arange(L)[None]).clamp(max=self.max_seq - 1)  # [B, L]
        last = torch.tensor([len(p) - c - 1 for p, c in zip(prompts, starts, strict=True)])
        length = int(positions.max()) + 1
        logits = self.model(
            ids.to(dev), positions.to(dev), self.cache, cache_len=length, logits_at=last.to(dev)
        )
        return logits[:, 0]

    def _place(self, prompts: list[list[int]]) -> list[int]:
        """Move into rows 0..B-1 of the cache the longest prefix of each prompt that some
        row holds (continuing it in place, or copying it into the least recently used
        row); returns how many tokens of each prompt are held."""
        self._clock += 1
        n = len(self.held)
        claimed: set[int] = set()  # rows given to a prompt of this call
        sources: set[int] = set()  # rows copied from (kept until the copies are made)
        plan: list[tuple[int, int]] = [(0, 0)] * len(prompts)  # (row, tokens held)
        copies: list[tuple[int, int, int]] = []  # (from, to, tokens)
        best = []
        for p in prompts:
            reuse = [min(common_prefix(p, h), len(p) - 1) for h in self.held]
            row = max(range(n), key=lambda j: (reuse[j], self._used[j]))
            best.append((reuse[row], row))
        for i in sorted(range(len(prompts)), key=lambda i: -best[i][0]):
            c, row = best[i]
            continues = c > 0 and c >= len(self.held[row]) - 1  # nothing else lost
            if continues and row not in claimed and row not in sources:
                claimed.add(row)
                plan[i] = (row, c)
                continue
            free = [j for j in range(n) if j not in claimed and j not in sources and j != row]
            if free:
                to = min(free, key=lambda j: (len(self.held[j]) > 0, self._used[j]))
                if c > 0:
                    copies.append((row, to, c))
                    sources.add(row)
                claimed.add(to)
                plan[i] = (to, c)
            elif row not in claimed and row not in sources:  # own it after all
                claimed.add(row)
                plan[i] = (row, c)
            else:  # every row is taken: prefill from scratch
                to = next(j for j in range(n) if j not in claimed)
                claimed.add(to)
                plan[i] = (to, 0)
        if copies:  # all read before any is written: a copy's source may be another's target
            srcs, dsts, lengths = zip(*copies, strict=True)
            self.cache.copy_rows(list(srcs), list(dsts), max(lengths))
            held = [self.held[src][:c] for src, _, c in copies]
            for dst, tokens in zip(dsts, held, strict=True):
                self.held[dst] = tokens
        for row, c in plan:
            self.held[row] = self.held[row][:c]
        # the planned rows to the front, in prompt order; the rest keep their order
        order = [row for row, _ in plan]
        order += [j for j in range(n) if j not in claimed]
        moved = [j for j in range(n) if order[j] != j]
        if moved:
            src = [order[j] for j in moved]
            self.cache.copy_rows(src, moved, max(len(self.held[j]) for j in src))
            self.held = [self.held[j] for j in order]
            self._used = [self._used[j] for j in order]
        for i in range(len(prompts)):
            self._used[i] = self._clock
        return [c for _, c in plan]

    def _share_batch_prefix(self, prompts: list[list[int]], starts: list[int]) -> list[int]:
        """Prompts of one call that begin alike (an RL group, one task sampled G times)
        get the prefix they all share, beyond what the cache held, prefilled once in row
        0 and copied to the others."""
        if len(prompts) < 2:
            return starts
        shared = min(common_prefix(prompts[0], p) for p in prompts[1:])
        shared = min(shared, min(len(p) for p in prompts) - 1)
        if shared - max(starts) < 16:  # not worth a separate pass
            return starts
        c0, dev = starts[0], self.device
        ids = torch.tensor(prompts[0][c0:shared], dtype=torch.long, device=dev)[None]
        positions = torch.arange(c0, shared, device=dev)[None]
        self.model(ids, positions, self.cache, cache_len=shared, logits_at=ids.new_zeros(1))
        rest = list(range(1, len(prompts)))
        self.cache.copy_rows([0] * len(rest), rest, shared)
        for i in range(len(prompts)):
            self.held[i] = prompts[i][:shared]
        return [shared] * len(prompts)

    def _decode_step(self, tokens: Tensor, positions: Tensor, length: int) -> tuple[Tensor, Tensor]:
        """tokens, positions [B, 1] -> next-token logits [B, V], experts [moe_layers, B, k];
        attention reads the first `length` cache slots."""
        out = self.model(tokens, positions, self.cache, cache_len=length, return_routing=True)
        return out.logits[:, -1], out.routing[:, :, 0]

    def _generators(self, params: list[SamplingParams]) -> list[torch.Generator | None]:
        """One generator for a call whose rows share their settings (as before per-row
        settings existed: a seed gives the same samples), else one per sampled row."""
        shared = all(p == params[0] for p in params)
        made: list[torch.Generator | None] = []
        for i, p in enumerate(params):
            if p.temperature == 0:
                made.append(None)
            elif shared and i > 0:
                made.append(made[0])
            else:
                gen = torch.Generator(device=self.device)
                if p.seed is not None:
                    gen.manual_seed(p.seed)
                else:
                    gen.seed()
                made.append(gen)
        return made

    def _sample(
        self, logits: Tensor, params: list[SamplingParams], gens: list[torch.Generator | None]
    ) -> tuple[list[int], list[float]]:
        """logits [B, V] -> a token and its sampler log-prob per row."""
        if all(p == params[0] for p in params):
            return self._sample_rows(logits, params[0], gens[0])
        tokens, logprobs = [], []
        for i, (p, g) in enumerate(zip(params, gens, strict=True)):
            t, lp = self._sample_rows(logits[i : i + 1], p, g)
            tokens += t
            logprobs += lp
        return tokens, logprobs

    @staticmethod
    def _sample_rows(
        logits: Tensor, params: SamplingParams, gen: torch.Generator | None
    ) -> tuple[list[int], list[float]]:
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

    def _accept(self, r: _Row, token, logprob, on_token, cancelled) -> None:
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
        stops = r.params.stop
        cut = min((j for j in (r.text.find(s, r.emitted) for s in stops) if j >= 0), default=-1)
        if cut >= 0:
            r.text, r.finish = r.text[:cut], "stop"
        end = len(r.text) if r.finish else len(r.text) - stop_hold(r.text, stops)
        delta = r.text[r.emitted : end] if end > r.emitted else ""
        r.emitted = max(r.emitted, end)
        if on_token is not None:
            on_token(token, delta)

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
            cached_tokens=r.cached,
            weights_version=self.weights_version,
        )
