"""tachy's static code embedder (index/static_embedder.py) and the choice of embedder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from index.embedder import (
    DEFAULT_EMBEDDER,
    Embedder,
    EmbedderError,
    default_embedder,
    embedder_kind,
    make_embedder,
)
from index.static_embedder import StaticEmbedder, code_words, default_static_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    return StaticEmbedder()


def test_identifiers_split_at_humps_and_digits():
    assert code_words("readHTTPFile2 getX") == "read HTTP File 2 get X"
    assert code_words("snake_case stays") == "snake_case stays"  # the tokenizer splits at _
    assert code_words("") == ""


def test_the_shipped_model_is_the_default_and_embeds_unit_rows(static: StaticEmbedder):
    assert DEFAULT_EMBEDDER == "static" and isinstance(default_embedder(), StaticEmbedder)
    assert isinstance(static, Embedder) and static.dim == 256
    assert embedder_kind(static.name) == "static" and StaticEmbedder().name == static.name
    texts = ["def read_file(path):\n    return open(path).read()", "x", "", "!!!"]
    vecs = static.embed(texts)
    assert vecs.shape == (4, 256) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs[:2], axis=1), 1.0, atol=1e-5)
    assert not vecs[2].any()  # no token: a zero row, never NaN
    assert np.array_equal(vecs, static.embed(texts))  # deterministic
    assert static.embed([]).shape == (0, 256)
    assert (default_static_dir() / "vectors.safetensors").stat().st_size < 30 * 2**20


def test_meaning_not_only_words(static: StaticEmbedder):
    """A docstring-style query lands nearer the code it describes than other code."""
    code = {
        "read": "def load_text(name):\n    with open(name, encoding='utf-8') as fh:\n        return fh.read()",
        "sort": "def ordered(items):\n    return sorted(items, key=lambda item: item.priority)",
        "http": "def fetch(url):\n    response = urlopen(url)\n    return response.status",
    }
    queries = {
        "read": "Return the contents of a file as a string.",
        "sort": "Sort the tasks by their priority.",
        "http": "Download a web page and give its status code.",
    }
    names = list(code)
    c = static.embed([code[n] for n in names])
    q = static.embed([queries[n] for n in names])
    assert [names[i] for i in (q @ c.T).argmax(axis=1)] == names


def test_long_and_bad_inputs(static: StaticEmbedder):
    long = "value = compute(value)\n" * 20_000
    ids = static.tokenize([long])[0]
    assert len(ids) == static.max_tokens
    assert np.isfinite(static.embed([long])).all()
    with pytest.raises(TypeError):
        static.embed("a str")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        static.embed(["ok", None])  # type: ignore[list-item]
    with pytest.raises(EmbedderError, match="unknown embedder 'bert'"):
        make_embedder("bert")


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(default_static_dir(), target)
    return target


def test_missing_or_corrupt_model_files_are_named(tmp_path: Path):
    with pytest.raises(EmbedderError, match="is not a directory"):
        StaticEmbedder(tmp_path / "nowhere")
    for case, (name, damage, message) in enumerate(
        (
            ("config.json", None, "config.json is missing"),
            ("config.json", "{not json", "config.json is unreadable"),
            ("config.json", '{"model_type": "bert"}', "is not a tachy-static model"),
            ("vectors.safetensors", None, "vectors.safetensors is missing"),
            ("vectors.safetensors", "garbage", "cannot load"),
            ("tokenizer.json", None, "tokenizer.json is missing"),
            ("tokenizer.json", "{", "tokenizer.json is corrupt"),
        )
    ):
        model = _copy(tmp_path / str(case))
        if damage is None:
            (model / name).unlink()
        else:
            (model / name).write_text(damage)
        with pytest.raises(EmbedderError, match=message):
            StaticEmbedder(model)


def test_vectors_that_do_not_fit_the_tokenizer_are_refused(tmp_path: Path):
    from safetensors.numpy import save_file

    model = _copy(tmp_path)
    save_file({"vectors": np.ones((10, 4), dtype=np.float16)}, str(model / "vectors.safetensors"))
    with pytest.raises(EmbedderError, match="the vectors 10"):
        StaticEmbedder(model)
    save_file(
        {"vectors": np.full((10, 4), np.nan, dtype=np.float32)}, str(model / "vectors.safetensors")
    )
    with pytest.raises(EmbedderError, match="NaN"):
        StaticEmbedder(model)


def _with_config(tmp_path: Path, **changes) -> Path:
    model = _copy(tmp_path)
    config = json.loads((model / "config.json").read_text())
    config.update(changes)
    (model / "config.json").write_text(
        json.dumps({k: v for k, v in config.items() if v is not None})
    )
    return model


def test_the_name_follows_the_vectors_and_head_rule_not_the_notes(
    tmp_path: Path, static: StaticEmbedder
):
    assert StaticEmbedder(_with_config(tmp_path / "a", note="more words")).name == static.name
    other = StaticEmbedder(_with_config(tmp_path / "b", head_lines=2)).name
    assert other != static.name
    none = StaticEmbedder(_with_config(tmp_path / "c", head_lines=None, head_weight=None))
    assert none.name not in (static.name, other) and none.head_weight == 0


def test_the_head_of_a_chunk_counts_again(tmp_path: Path, static: StaticEmbedder):
    """A text of more than head_lines lines: normalise(v(all) + w * v(head)), each part
    normalised; a text of head_lines lines or fewer (a query, a name) is unchanged."""
    assert static.head_lines == 4 and static.head_weight == 0.6  # the shipped rule
    plain = StaticEmbedder(_with_config(tmp_path, head_lines=None, head_weight=None))
    head = "class Cache:\n    def evict(self, key):\n        # drop the entry\n\n"
    body = "".join(f"        self.items[{i}] = self.store.pop(key, None)\n" for i in range(30))
    chunk, query = head + body, "Remove an entry from the cache."
    expected = plain.embed([chunk])[0] + 0.6 * plain.embed([head])[0]
    assert np.allclose(static.embed([chunk])[0], expected / np.linalg.norm(expected), atol=1e-6)
    short = [query, "evict", head.rstrip("\n"), "a\nb\nc\nd\n\n\n"]  # <= 4 lines of tokens
    assert np.allclose(static.embed(short), plain.embed(short), atol=1e-6)
    # the long body no longer drowns what the chunk is: the query moves nearer to it
    q = static.embed([query])[0]
    assert static.embed([chunk])[0] @ q > plain.embed([chunk])[0] @ q
    # a character the tokenizer drops where the body begins still finds the head's end
    odd = head + "\x00" + body
    assert np.isfinite(static.embed([odd])).all()
    assert static._encode([odd])[0][1] == len(static.tokenize([head])[0])


@pytest.mark.parametrize(
    ("lines", "weight"),
    [(-1, 0.5), (2, -0.5), (2, 0), (0, 0.5), ("4", 0.5), (2, True), (2, float("nan"))],
)
def test_a_bad_head_rule_is_refused(tmp_path: Path, lines, weight):
    model = _with_config(tmp_path, head_lines=lines, head_weight=weight)
    with pytest.raises(EmbedderError, match="head_lines must be a whole number"):
        StaticEmbedder(model)


def test_import_and_embedding_load_no_torch():
    code = (
        "import sys\n"
        "from index.static_embedder import StaticEmbedder\n"
        "assert StaticEmbedder().embed(['def f(): pass']).shape == (1, 256)\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "files.py").write_text(
        "def load_text(name):\n    with open(name) as fh:\n        return fh.read()\n"
    )
    (root / "pkg" / "maths.py").write_text("def mean(xs):\n    return sum(xs) / len(xs)\n")
    return root


def test_the_index_records_its_embedder_and_switching_re_embeds(tmp_path: Path):
    from index.indexer import CodeIndex

    root = _workspace(tmp_path)
    with CodeIndex(root, embedder="minilm") as idx:
        assert idx.update().embedded == 2 and embedder_kind(idx.embedder.name) == "minilm"
    with CodeIndex(root, embedder="recorded") as idx:  # what `tachy search` opens
        assert embedder_kind(idx.embedder.name) == "minilm"
        assert idx.pending_count() == 0
    with CodeIndex(root, embedder="static") as idx:  # another model: every chunk again
        idx.search("x", mode="lexical")
        assert idx.embedder.dim == 256
        assert idx.embed_pending() == 2
        assert idx.search("read a file's text", mode="dense")[0].path == "pkg/files.py"
    with CodeIndex(root, embedder="recorded") as idx:
        assert embedder_kind(idx.embedder.name) == "static"
    with CodeIndex(root, embedder="minilm") as idx:  # back: MiniLM's vectors are kept
        assert idx.embed_pending() == 0 and idx.pending_count() == 0
        assert idx.search("average of numbers", mode="dense")[0].path == "pkg/maths.py"


def test_tachy_index_and_search_take_the_embedder(tmp_path: Path):
    root = _workspace(tmp_path)

    def tachy(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "server.cli", *args], capture_output=True, text=True,
            cwd=REPO, timeout=120,
        )  # fmt: skip

    built = tachy("index", str(root), "--json")
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["embedded"] == 2
    found = tachy("search", "--workspace", str(root), "--mode", "dense", "--json", "mean value")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "pkg/maths.py"
    from index.embedder import EMBEDDERS
    from server import index_commands

    assert index_commands.EMBEDDERS == EMBEDDERS  # the CLI's copy (kept free of numpy)
    bad = tachy("index", str(root), "--embedder", "bert")
    assert bad.returncode == 2 and "invalid choice: 'bert'" in bad.stderr
