"""bench.contextual_dev: the numpy layer the index would run is the torch layer that
trains, and an untrained layer leaves the shipped static model exactly as it is."""

import numpy as np
import torch

from bench.contextual_dev import Context, ContextualEmbedder, layer_forward, padded
from index.static_embedder import StaticEmbedder

TEXTS = [
    "def parse_date_header(value):\n    return email.utils.parsedate_to_datetime(value)\n",
    "retry the request with backoff",
    "",
    "class Session:\n    def close(self):\n        self.pool.clear()\n" * 30,
]


def test_untrained_layer_is_the_static_model():
    static = StaticEmbedder()
    layer = Context(torch.from_numpy(static._vectors), 64, 128)
    both = ContextualEmbedder(static, layer.numpy_weights())
    np.testing.assert_allclose(both.embed(TEXTS), static.embed(TEXTS), atol=1e-6)
    assert both.name != static.name


def test_numpy_twin_matches_torch():
    static = StaticEmbedder()
    torch.manual_seed(1)
    layer = Context(torch.from_numpy(static._vectors), 64, 128)
    torch.nn.init.normal_(layer.up.weight, std=0.1)  # a trained layer's is not zero
    ids = [row[:128] for row in static.tokenize(TEXTS)]
    with torch.no_grad():
        expected = layer(ids).numpy()
    index, mask = padded(ids)
    got = layer_forward(layer.numpy_weights(), static._vectors[index], mask)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[[0, 1, 3]], expected[[0, 1, 3]], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2], 0, atol=1e-6)  # an empty text: nothing to pool


def test_training_moves_the_layer_and_reports_each_epoch():
    from bench.contextual_dev import Settings, train
    from training.embed.pairs import Corpus, Pair

    static = StaticEmbedder()
    codes = [TEXTS[0], TEXTS[3], "def add(a, b):\n    return a + b\n"]
    queries = ["parse a date header", "close the session", "add two numbers"]

    class Tiny(Corpus):  # three pairs over three chunks; texts() as the index embeds them
        def texts(self) -> list[str]:
            return codes

    pairs = [
        Pair(q, c, i, "m.py", 1, 2) for i, (q, c) in enumerate(zip(queries, codes, strict=True))
    ]
    corpus = Tiny(pairs=pairs)
    rng = np.random.default_rng(0)
    seen = []
    train(
        static, corpus, rng.standard_normal((3, 384)), rng.standard_normal((3, 384)),
        Settings(width=32, ff=64, epochs=2, lr=1e-2), lambda *a: seen.append(a),
    )  # fmt: skip
    assert [epoch for epoch, _, _ in seen] == [1, 2]
    assert all(np.isfinite(loss) for _, _, loss in seen)
    assert np.abs(seen[-1][1]["up"]).max() > 0  # no longer the static model
