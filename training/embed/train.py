"""Contrastive training of the static code embedder on (docstring sentence, code) pairs.

The model is the distilled table of token vectors (training.embed.distill); a text's
vector is the normalised sum of its tokens' vectors, for queries and code alike. Each
step takes a batch of pairs and asks every query to pick its own code among the
batch's (InfoNCE with in-batch negatives, both directions: query -> code and code ->
query). Two pairs whose code is the same chunk are not each other's negatives.

With `regress_weight` > 0 each step also fits the static vectors of a batch of code
chunks to MiniLM's vectors of the same chunks (through a linear map to MiniLM's width,
learnt alongside and dropped afterwards; 1 - cosine): model2vec's "tokenlearn" idea,
on code. These are the distillation targets: the transformer's reading of code keeps
the static model close to what it was distilled from while the pairs teach it the
vocabulary of code, and it reaches every token of the corpus, not only the pairs'.
(Matching MiniLM's in-batch query-code similarities, a KL term, and hard negatives
from the query's own file or from the top of the lexical ranking were tried as well
and gave nothing: bench/RESULTS.md.)

Only the vectors of tokens that occur in training move (Adam without weight decay
leaves a row with no gradient exactly as it was): the rest keep their distilled values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from index.static_embedder import code_words
from training.embed.pairs import Pair


@dataclass
class TrainSettings:
    epochs: int = 6
    batch: int = 256
    lr: float = 3e-3
    temperature: float = 0.05
    regress_weight: float = 0.0
    seed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def tokenize(tokenizer, texts: list[str], max_tokens: int = 4096) -> list[list[int]]:
    """Token ids as the static embedder makes them (code_words, no special tokens)."""
    encoded = tokenizer.encode_batch([code_words(t) for t in texts], add_special_tokens=False)
    return [e.ids[:max_tokens] for e in encoded]


def _bag(ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    flat = torch.tensor([t for row in ids for t in row], dtype=torch.long)
    offsets = torch.tensor(np.concatenate(([0], np.cumsum([len(r) for r in ids])[:-1])))
    return flat, offsets.long()


def embed_bag(table: torch.Tensor, ids: list[list[int]]) -> torch.Tensor:
    """Normalised sums of the rows of `table` named by each id list (empty -> zero)."""
    flat, offsets = _bag(ids)
    sums = F.embedding_bag(flat, table, offsets, mode="sum")
    return F.normalize(sums, dim=1)


def pair_loss(q: torch.Tensor, c: torch.Tensor, chunk: torch.Tensor, temperature: float):
    """InfoNCE of unit query vectors q [B, D] against their codes' c [B, D], both
    directions, with in-batch negatives; two pairs whose code is the same chunk
    (`chunk` [B], the chunks' indices) are not each other's negatives."""
    same = chunk[:, None] == chunk[None, :]
    others = same & ~torch.eye(len(chunk), dtype=torch.bool)
    logits = (q @ c.T / temperature).masked_fill(others, -1e4)
    labels = torch.arange(len(chunk))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def train(
    vectors: np.ndarray,
    tokenizer,
    pairs: list[Pair],
    settings: TrainSettings,
    *,
    chunks: list[str] | None = None,
    chunk_targets: np.ndarray | None = None,
    on_epoch: Callable[[int, np.ndarray, float], None] | None = None,
) -> np.ndarray:
    """The table after training on `pairs`; `on_epoch(epoch, table, mean_loss)` after
    each epoch (to evaluate). With settings.regress_weight, `chunks` (code texts) and
    `chunk_targets` (MiniLM's vectors of them) are the texts to fit."""
    if settings.regress_weight and (chunks is None or chunk_targets is None):
        raise ValueError("regress_weight needs the chunks and MiniLM's vectors of them")
    generator = torch.Generator().manual_seed(settings.seed)
    table = torch.nn.Parameter(torch.from_numpy(vectors.astype(np.float32)).clone())
    params = [table]
    if settings.regress_weight:
        chunk_ids = tokenize(tokenizer, chunks)
        targets = torch.from_numpy(chunk_targets.astype(np.float32))
        project = torch.nn.Linear(vectors.shape[1], targets.shape[1], bias=False)
        with torch.no_grad():  # from the run's seed: torch's global one would differ per run
            bound = vectors.shape[1] ** -0.5  # nn.Linear's own initial range
            project.weight.uniform_(-bound, bound, generator=generator)
        params += list(project.parameters())
    optimizer = torch.optim.Adam(params, lr=settings.lr)
    query_ids = tokenize(tokenizer, [p.query for p in pairs])
    code_ids = tokenize(tokenizer, [p.code for p in pairs])
    chunk = torch.tensor([p.chunk for p in pairs])
    n = len(pairs)
    for epoch in range(settings.epochs):
        order = torch.randperm(n, generator=generator)
        losses = []
        for start in range(0, n - 1, settings.batch):
            rows = order[start : start + settings.batch]
            if len(rows) < 2:
                continue
            q = embed_bag(table, [query_ids[i] for i in rows])
            c = embed_bag(table, [code_ids[i] for i in rows])
            loss = pair_loss(q, c, chunk[rows], settings.temperature)
            if settings.regress_weight:
                pick = torch.randint(len(chunk_ids), (len(rows),), generator=generator)
                student = project(embed_bag(table, [chunk_ids[i] for i in pick]))
                fit = 1 - F.cosine_similarity(student, targets[pick], dim=1).mean()
                loss = loss + settings.regress_weight * fit
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        if on_epoch is not None:
            on_epoch(epoch + 1, table.detach().numpy(), float(np.mean(losses)))
    return table.detach().numpy().copy()
