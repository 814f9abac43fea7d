"""Training tachy's code embedder (training/embed): the split, the pairs, the trainer,
the teacher cache and `tachy train embedder`'s checks of its options."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from index.embedder import default_model_dir
from training.embed.distill import pca, plain_tokenizer, sif_weights, token_counts
from training.embed.docstrings import comment_candidates
from training.embed.pairs import Corpus, add_file
from training.embed.pipeline import teacher_vectors
from training.embed.split import SPLIT_FILE, is_eval_unit, make_split, read_split
from training.embed.train import TrainSettings, embed_bag, tokenize, train

REPO = Path(__file__).resolve().parents[2]

SOURCE = textwrap.dedent(
    '''
    import os


    def load_settings(path):
        """Read the settings file and return its values as a dictionary.

        More words.
        """
        values = {}
        # Skip blank lines and comments in the settings file.
        for line in open(path):
            if line.strip() and not line.startswith("#"):
                key, value = line.split("=", 1)
                values[key.strip()] = value.strip()
        return values


    class Cache:
        """Keep recently computed results in memory for reuse."""

        def __init__(self):
            self.items = {}  # noqa: RUF012
    '''
)


def test_the_recorded_split_follows_its_rule_and_keeps_the_parts_apart(tmp_path: Path):
    split = read_split()
    assert split["train"] and split["eval"] and not set(split["train"]) & set(split["eval"])
    assert all(is_eval_unit(u) for u in split["eval"])
    assert not any(is_eval_unit(u) for u in split["train"])
    assert SPLIT_FILE == REPO / "training" / "configs" / "embed-split.json"
    tree = tmp_path / "tree"
    for name in ("alpha.py", "beta/__init__.py", "gamma.py", "tests/x.py"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("x = 1\n")
    made = make_split(tree)
    assert sorted(made["train"] + made["eval"]) == ["alpha.py", "beta", "gamma.py"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"train": ["a"], "eval": ["a"]}')
    with pytest.raises(ValueError, match="in both parts"):
        read_split(bad)
    with pytest.raises(ValueError, match="cannot read"):
        read_split(tmp_path / "missing.json")


def test_pairs_pair_a_sentence_with_code_that_does_not_contain_it():
    corpus = Corpus()
    add_file(corpus, "pkg/settings.py", SOURCE)
    assert [p.query for p in corpus.pairs] == [
        "Read the settings file and return its values as a dictionary."
    ]
    pair = corpus.pairs[0]
    assert "def load_settings(path):" in pair.code and "Read the settings" not in pair.code
    assert corpus.relevant(pair, pair.chunk)
    more = Corpus()
    add_file(more, "pkg/settings.py", SOURCE, more=True)
    queries = {p.query for p in more.pairs}
    assert "Skip blank lines and comments in the settings file." in queries  # a comment
    assert "Keep recently computed results in memory for reuse." in queries  # a class
    assert not any("noqa" in q for q in queries)
    for p in more.pairs:
        assert p.query.rstrip(".") not in p.code


def test_comment_blocks_answer_with_the_code_after_them():
    found = comment_candidates("m.py", SOURCE)
    assert len(found) == 1
    c = found[0]
    lines = SOURCE.split("\n")
    assert lines[c.doc_start - 1].strip().startswith("# Skip blank lines")
    assert lines[c.start_line - 1].strip().startswith("for line in open(path):")
    assert "#!/usr/bin/env python" not in [
        c.query for c in comment_candidates("s.py", "#!/usr/bin/env python\nx = 1\n")
    ]


def test_distillation_helpers():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 8)).astype(np.float32)
    keep = np.ones(50, dtype=bool)
    keep[:3] = False
    reduced = pca(vectors, keep, 4)
    assert reduced.shape == (50, 4) and not reduced[:3].any()
    assert np.allclose(reduced[keep].mean(axis=0), 0, atol=1e-5)  # centred
    weights = sif_weights(np.array([1000, 10, 0]), 1e-2)
    assert weights[0] < weights[1] < weights[2] <= 1
    tok = plain_tokenizer(default_model_dir())
    long = "word " * 1000
    counts = token_counts(tok, [long, "other"], tok.get_vocab_size())
    assert counts.sum() == 1001  # no truncation at MiniLM's 256 tokens


def test_contrastive_training_pulls_pairs_together_and_leaves_unseen_tokens():
    tok = plain_tokenizer(default_model_dir())
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(tok.get_vocab_size(), 16)).astype(np.float32)
    from training.embed.pairs import Pair

    topics = ["network socket", "matrix algebra", "calendar date", "image pixel", "audio sound"]
    codes = ["def send_packet(conn): conn.sendall(data)", "def invert(m): return solve(m, eye)",
             "def weekday(day): return day.isoweekday()", "def blur(img): return convolve(img)",
             "def volume(wave): return rms(wave)"]  # fmt: skip
    pairs = [
        Pair(q, c, i, f"f{i}.py", 1, 1) for i, (q, c) in enumerate(zip(topics, codes, strict=True))
    ]
    q_ids = tokenize(tok, topics)
    c_ids = tokenize(tok, codes)

    def accuracy(table: np.ndarray) -> float:
        import torch

        t = torch.from_numpy(table)
        sims = embed_bag(t, q_ids) @ embed_bag(t, c_ids).T
        return float((sims.argmax(dim=1) == torch.arange(len(pairs))).float().mean())

    trained = train(vectors, tok, pairs, TrainSettings(epochs=30, batch=8, lr=0.05, seed=1))
    assert accuracy(trained) == 1.0 > accuracy(vectors)
    seen = {t for row in q_ids + c_ids for t in row}
    unseen = np.array([i for i in range(len(vectors)) if i not in seen])
    assert np.array_equal(trained[unseen], vectors[unseen])
    with pytest.raises(ValueError, match="regress_weight needs"):
        train(vectors, tok, pairs, TrainSettings(regress_weight=1.0))
    # fitting MiniLM-like targets of the chunks alongside, it still learns the pairs
    chunks = [p.code for p in pairs] + ["def unrelated(): return 0"]
    targets = rng.normal(size=(len(chunks), 8)).astype(np.float32)
    both = train(
        vectors, tok, pairs, TrainSettings(epochs=30, batch=8, lr=0.05, regress_weight=0.1, seed=1),
        chunks=chunks, chunk_targets=targets,
    )  # fmt: skip
    assert accuracy(both) == 1.0


def test_training_is_a_function_of_its_seed():
    # Two seeds' spread is only a spread if one seed gives one model: the map to
    # MiniLM's width is drawn from the run's generator, and the embedding-bag sums
    # and their gradients are deterministic on CPU.
    tok = plain_tokenizer(default_model_dir())
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(tok.get_vocab_size(), 16)).astype(np.float32)
    from training.embed.pairs import Pair

    words = [
        "read",
        "file",
        "parse",
        "config",
        "socket",
        "send",
        "data",
        "matrix",
        "date",
        "image",
        "sound",
        "return",
        "self",
    ]

    def sentence() -> str:
        return " ".join(rng.choice(words, size=int(rng.integers(3, 20))))

    pairs = [Pair(sentence(), sentence(), i, f"f{i}.py", 1, 1) for i in range(300)]
    chunks = [sentence() for _ in range(50)]
    targets = rng.normal(size=(50, 8)).astype(np.float32)

    def run(seed: int) -> np.ndarray:
        settings = TrainSettings(epochs=2, batch=64, lr=0.01, regress_weight=1.0, seed=seed)
        return train(vectors, tok, pairs, settings, chunks=chunks, chunk_targets=targets)

    first = run(1)
    import torch

    torch.manual_seed(12345)  # the global generator must not matter
    assert np.array_equal(run(1), first)
    assert not np.array_equal(run(2), first)


class CountingTeacher:
    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        return np.full((len(texts), 3), float(len(texts)), dtype=np.float32)


def test_teacher_vectors_are_cached_for_exactly_the_same_texts(tmp_path: Path):
    teacher, cache = CountingTeacher(), tmp_path / "c" / "teacher.npz"
    first = teacher_vectors(teacher, ["a", "b"], cache, "chunks")
    again = teacher_vectors(teacher, ["a", "b"], cache, "chunks")
    assert np.array_equal(first, again) and teacher.calls == 1
    teacher_vectors(teacher, ["q"], cache, "queries")  # another name beside it
    assert teacher_vectors(teacher, ["a", "b"], cache, "chunks").shape == (2, 3)
    assert teacher.calls == 2
    assert teacher_vectors(teacher, ["a", "c"], cache, "chunks")[0, 0] == 2.0
    assert teacher.calls == 3


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--dim", "0"], "--dim must be at least 1"),
        (["--dim", "500"], "at most 384"),
        (["--sif", "2"], "--sif must be between 0 and 1"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--batch", "1"], "--batch must be at least 2"),
        (["--regress-weight", "-1"], "--regress-weight must be 0 or more"),
        (["--head-lines", "-1"], "--head-lines must be 0 or more"),
        (["--head-weight", "-0.5"], "--head-weight must be 0 or more"),
    ],
)
def test_train_embedder_refuses_bad_options(tmp_path: Path, flags: list[str], message: str):
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", "train", "embedder", "--out", str(tmp_path / "m"), *flags],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (tmp_path / "m").exists()


def test_the_shipped_model_records_how_it_was_made():
    config = json.loads(
        (REPO / "index" / "models" / "tachy-code-static" / "config.json").read_text()
    )
    assert config["model_type"] == "tachy-static" and config["split"].endswith("embed-split.json")
    assert config["eval"]["queries"] > 100 and 0 < config["eval"]["mrr@10"] <= 1
    assert (config["head_lines"], config["head_weight"]) == (4, 0.6)  # the recipe's rule
    # Trained on the PyPI corpus, with the recipe's batch for it (issue 35).
    from training.embed.pipeline import CORPUS_BATCH

    assert config["corpus"].endswith("embed-corpus.json") and config["dev"]["queries"] > 100
    assert config["train"]["batch"] == CORPUS_BATCH
