"""Dense retrieval quality of an embedder on a mined corpus: MRR@10 and Recall@10.

Every chunk of the corpus's files is a candidate (not only the chunks of pairs), each
pair's query is answered by cosine similarity, and a hit counts when it lies in the
function's file and overlaps its lines. This is the trainer's quick check (dense
only, no index); bench/index.py measures the real index (lexical, dense, hybrid).
"""

from __future__ import annotations

import numpy as np

from training.embed.pairs import Corpus

K = 10


def rank_chunks(query_vectors: np.ndarray, chunk_vectors: np.ndarray, k: int = K) -> np.ndarray:
    """The top-k chunk indices per query, best first."""
    scores = query_vectors @ chunk_vectors.T
    top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
    order = np.take_along_axis(scores, top, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, axis=1)


def retrieval_scores(
    corpus: Corpus, query_vectors: np.ndarray, chunk_vectors: np.ndarray, k: int = K
) -> dict:
    """MRR@k and Recall@k of the pairs' queries over all the corpus's chunks."""
    ranked = rank_chunks(query_vectors, chunk_vectors, k)
    reciprocal, found = [], []
    for pair, row in zip(corpus.pairs, ranked, strict=True):
        rank = next((r for r, c in enumerate(row) if corpus.relevant(pair, int(c))), None)
        reciprocal.append(0.0 if rank is None else 1.0 / (rank + 1))
        found.append(rank is not None)
    return {
        f"mrr@{k}": round(float(np.mean(reciprocal)), 4),
        f"recall@{k}": round(float(np.mean(found)), 4),
        "queries": len(corpus.pairs),
        "chunks": len(corpus.chunks),
    }


def evaluate(embedder, corpus: Corpus, chunk_vectors: np.ndarray | None = None) -> dict:
    """retrieval_scores for an embedder (chunk vectors computed unless given)."""
    if chunk_vectors is None:
        chunk_vectors = embedder.embed(corpus.texts())
    queries = embedder.embed([p.query for p in corpus.pairs])
    return retrieval_scores(corpus, queries, chunk_vectors)
