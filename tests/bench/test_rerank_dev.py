"""bench.rerank_dev's scoring and training on lists made by hand (the study itself needs
the PyPI corpus: bench/RESULTS.md has its command and figures)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench import rerank_dev
from bench.rerank_dev import LENGTH, TOP, make_scorer, mrr_at_10, score, train_epoch


def a_list(rng: np.random.Generator, vocab: int, answer_at: int) -> dict:
    """A query of two tokens; the answer holds both among noise, the others only noise;
    hybrid ranks the answer at `answer_at` (0-based)."""
    query = [int(t) for t in rng.choice(np.arange(1, 10), 2, replace=False)]
    n = 8
    ids = np.zeros((n, LENGTH), dtype=np.int32)
    lengths = np.full(n, 12, dtype=np.int32)
    for j in range(n):
        ids[j, :12] = rng.integers(10, vocab, 12)
    ids[answer_at, [3, 7]] = query
    return {
        "query": query, "ids": ids, "lengths": lengths,
        "hybrid": np.linspace(1.0, 0.0, n), "paths": [f"f{j}.py" for j in range(n)],
        "relevant": [j == answer_at for j in range(n)],
    }  # fmt: skip


def test_hybrid_alone_and_fused_rankings_are_scored_as_search_would_cap_them():
    rng = np.random.default_rng(0)
    item = a_list(rng, 40, answer_at=2)
    assert mrr_at_10([item], None, None) == pytest.approx(1 / 3, abs=1e-4)
    boost = [np.array([0.0, 0.0, 5.0, 0, 0, 0, 0, 0])]
    assert mrr_at_10([item], boost, None) == 1.0  # the scorer alone
    assert mrr_at_10([item], boost, 0.1) == pytest.approx(1 / 3, abs=1e-4)  # too light
    assert mrr_at_10([item], boost, 0.25) == 0.5  # past the second (hybrid steps of 1/7)
    assert mrr_at_10([item], boost, 2.0) == 1.0
    same_file = {**item, "paths": ["a.py"] * 8}  # five a file at most, as search keeps
    assert mrr_at_10([{**same_file, "relevant": [j == 6 for j in range(8)]}], None, None) == 0.0


def test_training_teaches_the_scorer_to_find_the_query_tokens(monkeypatch):
    monkeypatch.setattr(rerank_dev, "BATCH", 8)
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    vocab = 40
    lists = [a_list(rng, vocab, answer_at=int(rng.integers(0, 8))) for _ in range(64)]
    scorer = make_scorer(rng.standard_normal((vocab, 16)).astype(np.float32))
    optimizer = torch.optim.Adam(scorer.parameters(), lr=1e-2)
    first = train_epoch(scorer, optimizer, lists, rng)
    for _ in range(10):
        last = train_epoch(scorer, optimizer, lists, rng)
    assert last < first
    assert mrr_at_10(lists, score(scorer, lists), None) > 0.9
    assert len(score(scorer, lists[:3])[0]) == 8 <= TOP
