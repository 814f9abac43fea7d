"""The MiniLM embedder: parity with sentence-transformers, batching, limits, bad model dirs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from index.embedder import (
    Embedder,
    EmbedderError,
    MiniLMEmbedder,
    default_embedder,
    default_model_dir,
)

REPO = Path(__file__).resolve().parents[2]

LONG_CODE = "".join(
    f"def function_{i}(alpha, beta):\n    return alpha * {i} + beta  # step {i}\n\n"
    for i in range(400)
)
TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "",
    "parse the configuration file and return a dict of settings",
    "class LRUCache:\n    def __init__(self, capacity: int) -> None:\n        self.data = {}\n",
    "SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '1 day';",
    'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}',
    "func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }",
    "The quick brown fox jumps over the lazy dog.",
    "naïve café résumé — Ünïcödé ﬁ ligature",
    "日本語のテキストと中文文本 and 한국어",
    "emoji 🚀🔥 and math ∑∫√ symbols",
    LONG_CODE,  # far beyond max_tokens
    "word " * 5000,
    "x" * 3000,  # one giant "word"
    "   \n\t  ",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
    "camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
    "a",
    "// TODO: handle the error case where the socket closes early\nreturn nil, err",
    "<div class=\"header\"><span id='x'>Hello &amp; welcome</span></div>",
]


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    emb = MiniLMEmbedder()
    emb.load()
    return emb


def test_parity_with_sentence_transformers(embedder: MiniLMEmbedder) -> None:
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(embedder.model_dir), device="cpu")
    assert model.max_seq_length == embedder.max_tokens
    ref = model.encode(TEXTS, normalize_embeddings=True, batch_size=8, convert_to_numpy=True)
    # batch_size 3: several batches, most of them padded
    small = MiniLMEmbedder(batch_size=3)
    for ours in (embedder.embed(TEXTS), small.embed(TEXTS)):
        assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
        cos = (ours * ref).sum(axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() > 0.9999, list(zip(cos.round(6), [t[:30] for t in TEXTS], strict=True))


def test_rows_are_unit_and_in_input_order(embedder: MiniLMEmbedder) -> None:
    texts = ["short", LONG_CODE, "a medium sized sentence about sorting lists", "", "short"]
    together = embedder.embed(texts)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    timings = embedder.last_timings
    assert timings.texts == 5 and timings.tokens <= timings.padded_tokens
    one_by_one = np.concatenate([embedder.embed([t]) for t in texts])  # no padding at all
    np.testing.assert_allclose(together, one_by_one, atol=2e-5)
    np.testing.assert_allclose(together[0], together[4], atol=1e-6)
    # the batch really was reordered (longest first) and put back
    ids = embedder.tokenize(texts)
    assert sorted(map(len, ids), reverse=True) != [len(x) for x in ids]


def test_empty_input_gives_empty_matrix_without_loading() -> None:
    emb = MiniLMEmbedder()
    out = emb.embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32
    assert not emb.loaded


def test_long_text_is_truncated_exactly(embedder: MiniLMEmbedder) -> None:
    tok = embedder._tokenizer  # encodes the whole text, truncating to max_tokens
    cases = [
        "value = compute(value)\n" * 20_000,  # cut at a line boundary
        "y" * 100_000,  # no whitespace: tokenized whole
        "start " + " " * 30_000 + "end of it " * 10,  # the cut prefix does not fill
    ]
    for text in cases:
        assert embedder.tokenize([text])[0] == tok.encode(text).ids
    ids = embedder.tokenize([cases[0]])[0]
    assert len(ids) == embedder.max_tokens and ids[0] == 101 and ids[-1] == 102
    vecs = embedder.embed(cases)
    assert vecs.shape == (3, 384) and np.isfinite(vecs).all()


def test_name_identifies_model_and_settings(embedder: MiniLMEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 384
    assert MiniLMEmbedder().name == embedder.name
    assert MiniLMEmbedder(batch_size=7).name == embedder.name  # batching does not change vectors
    assert MiniLMEmbedder(max_tokens=128).name != embedder.name
    assert default_embedder() is default_embedder()


def test_torch_thread_setting_is_restored(embedder: MiniLMEmbedder) -> None:
    import torch

    before = torch.get_num_threads()
    emb = MiniLMEmbedder(threads=1 if before != 1 else 2)
    emb.embed(["def f(): pass"])
    assert torch.get_num_threads() == before


def test_bad_arguments(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        embedder.embed(["ok", None])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        MiniLMEmbedder(max_tokens=1000)
    with pytest.raises(ValueError):
        MiniLMEmbedder(batch_size=0)


def test_import_and_construction_do_not_load_torch() -> None:
    """torch loads on first embed(); the OpenMP setting made for it does not leak into
    the environment (child processes)."""
    code = (
        "import os, sys, index, index.embedder, index.vectors\n"
        "from index.embedder import MiniLMEmbedder\n"
        "from index.vectors import VectorStore\n"
        "emb = MiniLMEmbedder()\n"
        "heavy = ('torch', 'faiss', 'sentence_transformers', 'transformers')\n"
        "assert not [m for m in heavy if m in sys.modules], sys.modules.keys() & heavy\n"
        "VectorStore(8)\n"
        "assert 'torch' not in sys.modules\n"
        "assert emb.embed(['def f(): pass']).shape == (1, 384)\n"
        "assert 'torch' in sys.modules and 'OMP_WAIT_POLICY' not in os.environ\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, timeout=60)


# --- missing or corrupt model directories -----------------------------------------


def _model_copy(tmp_path: Path, skip: str | None = None) -> Path:
    """A model dir whose files link to the real ones, except `skip`."""
    src, dst = default_model_dir(), tmp_path / "model"
    dst.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        if name != skip:
            (dst / name).symlink_to(src / name)
    return dst


def test_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="not a directory"):
        MiniLMEmbedder(tmp_path / "nope")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_missing_model_file(tmp_path: Path, name: str) -> None:
    with pytest.raises(EmbedderError, match=name.replace(".", r"\.")):
        MiniLMEmbedder(_model_copy(tmp_path, skip=name))


def test_truncated_weights(tmp_path: Path) -> None:
    model = _model_copy(tmp_path, skip="model.safetensors")
    data = (default_model_dir() / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(EmbedderError, match="truncated"):
        MiniLMEmbedder(model)


def test_garbage_weights(tmp_path: Path) -> None:
    model = _model_copy(tmp_path, skip="model.safetensors")
    (model / "model.safetensors").write_bytes(os.urandom(4096))
    with pytest.raises(EmbedderError, match="safetensors"):
        MiniLMEmbedder(model)


def test_corrupt_config_and_tokenizer(tmp_path: Path) -> None:
    model = _model_copy(tmp_path, skip="config.json")
    (model / "config.json").write_text("{not json")
    with pytest.raises(EmbedderError, match=r"config\.json"):
        MiniLMEmbedder(model)
    cfg = json.loads((default_model_dir() / "config.json").read_text())
    cfg["hidden_size"] = 512  # weights no longer match the config
    cfg["num_attention_heads"] = 8
    (model / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EmbedderError, match="shape"):
        MiniLMEmbedder(model)
    (tmp_path / "b").mkdir()
    model2 = _model_copy(tmp_path / "b", skip="tokenizer.json")
    (model2 / "tokenizer.json").write_text('{"version": "1.0", "model": 42}')
    with pytest.raises(EmbedderError, match=r"tokenizer\.json"):
        MiniLMEmbedder(model2)


def test_unsupported_pooling(tmp_path: Path) -> None:
    model = _model_copy(tmp_path)
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
    )
    with pytest.raises(EmbedderError, match="mean pooling"):
        MiniLMEmbedder(model)
    shutil.rmtree(model / "1_Pooling")
    MiniLMEmbedder(model)  # without a pooling config: fine
