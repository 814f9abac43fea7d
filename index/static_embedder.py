"""tachy's own code embedder: a static model (one vector per vocabulary entry).

A text's vector is the sum of its tokens' vectors, L2-normalised: no transformer runs
at embedding time, so the standard library embeds in seconds on two cores where
MiniLM takes most of an hour. The vectors were distilled from the MiniLM we ship and
then trained on code (training/embed: docstring sentences against the code they
describe, from the standard library's training part); their norms carry each token's
weight, so frequent tokens count for little.

    text -> identifiers split at camelCase humps (snake_case the tokenizer splits
    itself) -> MiniLM's WordPiece tokenizer (lower case, no [CLS]/[SEP])
    -> sum of the token vectors -> L2 normalise

In a text of more than `head_lines` lines (a chunk: its enclosing headers, its own
`def` line, the lines after it) the head counts again: its vector is
normalise(v(all) + head_weight * v(first head_lines lines)), each part L2-normalised
first. A mean over a long body dilutes the few lines that say what the code is; this
gives them back their weight whatever the body's length (tuned on the development
units of the training split: dense MRR@10 +4 points, bench/RESULTS.md). A text of
head_lines lines or fewer (a query, a name) is unchanged by it.

A model directory holds config.json ({"model_type": "tachy-static", "dim": D,
"head_lines": H, "head_weight": W, ...}; no head_* keys: no head rule),
tokenizer.json and vectors.safetensors (one tensor "vectors" [V, D], float16 or
float32). It needs numpy, safetensors and tokenizers only; no torch. A missing or
corrupt directory raises EmbedderError naming the file.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from index.embedder import EmbedderError, EmbedTimings, load_tokenizer

__all__ = ["MODEL_TYPE", "StaticEmbedder", "code_words", "default_static_dir"]

MODEL_TYPE = "tachy-static"
# Texts per gather-and-average step: bounds the [tokens, D] block held at once.
_BATCH = 128
# Humps of camelCase and PascalCase (getHTTPResponse -> get HTTP Response) and
# letter/digit boundaries are where a space goes in.
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])")
# Where the text after a chunk's head begins.
_NON_SPACE = re.compile(r"\S")


def default_static_dir() -> Path:
    """The model shipped in the repository (index/models/tachy-code-static)."""
    return Path(__file__).resolve().parent / "models" / "tachy-code-static"


def code_words(text: str) -> str:
    """The text with identifiers split into words at camelCase humps and before digits
    (`readHTTPFile2` -> `read HTTP File 2`); underscores and punctuation the tokenizer
    splits at anyway. Training and embedding both pass texts through this."""
    return _HUMP.sub(" ", text)


class StaticEmbedder:
    """A static code embedder (see the module docstring). `max_tokens` bounds the tokens
    read per text (index chunks are far below it; a pasted file is cut there)."""

    def __init__(self, model_dir: str | Path | None = None, *, max_tokens: int = 4096) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else default_static_dir()
        if not self.model_dir.is_dir():
            raise EmbedderError(f"embedding model: {self.model_dir} is not a directory")
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        config_path = self.model_dir / "config.json"
        try:
            config = json.loads(config_path.read_text())
        except FileNotFoundError:
            raise EmbedderError(f"embedding model: {config_path} is missing") from None
        except (OSError, ValueError) as exc:
            raise EmbedderError(f"embedding model: {config_path} is unreadable: {exc}") from None
        if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
            raise EmbedderError(f"embedding model: {config_path} is not a {MODEL_TYPE} model")
        self.config = config
        self.head_lines, self.head_weight = _head_rule(config, config_path)
        self.max_tokens = max_tokens
        self._vectors = self._load_vectors()
        self.dim = int(self._vectors.shape[1])
        self._tokenizer = self._load_tokenizer(self._vectors.shape[0])
        h = hashlib.blake2b(digest_size=8)
        for name in ("tokenizer.json", "vectors.safetensors"):  # what decides the output
            h.update((self.model_dir / name).read_bytes())
        if self.head_weight:  # ... and the head rule (a model without one keeps its name)
            h.update(f"head {self.head_lines} {self.head_weight!r}".encode())
        self.name = f"static-D{self.dim}@{h.hexdigest()}/t{max_tokens}"
        self._lock = threading.Lock()
        self.last_timings = EmbedTimings()

    def __repr__(self) -> str:
        return f"StaticEmbedder({str(self.model_dir)!r}, name={self.name!r})"

    def _load_vectors(self) -> np.ndarray:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        path = self.model_dir / "vectors.safetensors"
        try:
            tensors = load_file(str(path))
        except FileNotFoundError:
            raise EmbedderError(f"embedding model: {path} is missing") from None
        except (SafetensorError, OSError, ValueError) as exc:
            raise EmbedderError(f"embedding model: cannot load {path}: {exc}") from None
        vectors = tensors.get("vectors")
        if vectors is None or vectors.ndim != 2 or not vectors.size:
            raise EmbedderError(f"embedding model: {path} lacks a 2-D tensor 'vectors'")
        if not np.isfinite(vectors).all():
            raise EmbedderError(f"embedding model: {path} holds NaN or infinite values")
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _load_tokenizer(self, vocab: int):
        tok = load_tokenizer(self.model_dir)
        if tok.get_vocab_size() != vocab:
            raise EmbedderError(
                f"embedding model: {self.model_dir / 'tokenizer.json'} has "
                f"{tok.get_vocab_size()} entries, the vectors {vocab}"
            )
        tok.no_truncation()
        return tok

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text (no special tokens), at most max_tokens each."""
        return [ids for ids, _ in self._encode(texts)]

    def _encode(self, texts: Sequence[str]) -> list[tuple[list[int], int]]:
        """(token ids, how many of them form the head) per text; the head is all of
        them when there is no head rule or the text has no more than head_lines lines."""
        inputs = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
            # ~3 characters a token in code: cut far enough out never to lose a token
            inputs.append(code_words(text[: 12 * self.max_tokens]))
        encoded = self._tokenizer.encode_batch(inputs, add_special_tokens=False)
        out = []
        for text, enc in zip(inputs, encoded, strict=True):
            ids = enc.ids[: self.max_tokens]
            out.append((ids, min(self._head_tokens(text, enc), len(ids))))
        return out

    def _head_tokens(self, text: str, encoding) -> int:
        """How many tokens the first head_lines lines of `text` make (the tokenizer
        splits at whitespace, so they are a prefix of its tokens)."""
        if not self.head_weight:
            return len(encoding.ids)
        end = -1
        for _ in range(self.head_lines):
            end = text.find("\n", end + 1)
            if end < 0:
                return len(encoding.ids)
        rest = _NON_SPACE.search(text, end)
        if rest is None:
            return len(encoding.ids)
        first = encoding.char_to_token(rest.start())
        if first is None:  # a character the tokenizer drops: count the head's own tokens
            first = len(self._tokenizer.encode(text[:end], add_special_tokens=False).ids)
        return first

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a str")
        t0 = time.perf_counter()
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        encoded = self._encode(texts)
        t1 = time.perf_counter()
        tokens = 0
        with self._lock:
            for start in range(0, n, _BATCH):
                rows = encoded[start : start + _BATCH]
                whole = self._unit_sums([ids for ids, _ in rows])
                tokens += sum(len(ids) for ids, _ in rows)
                headed = [i for i, (ids, head) in enumerate(rows) if head < len(ids)]
                if headed:
                    heads = self._unit_sums([rows[i][0][: rows[i][1]] for i in headed])
                    whole[headed] += self.head_weight * heads
                    whole[headed] = _normalised(whole[headed])
                out[start : start + len(rows)] = whole
        t2 = time.perf_counter()
        self.last_timings = EmbedTimings(
            texts=n, tokens=tokens, padded_tokens=tokens,
            tokenize_s=t1 - t0, forward_s=t2 - t1, total_s=t2 - t0,
        )  # fmt: skip
        return out

    def _unit_sums(self, rows: list[list[int]]) -> np.ndarray:
        """The L2-normalised sum of each id list's vectors (an empty list: a zero row)."""
        sums = np.zeros((len(rows), self.dim), dtype=np.float32)
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        present = np.flatnonzero(lengths)
        if len(present):
            flat = np.fromiter(
                (t for r in rows for t in r), dtype=np.int64, count=int(lengths.sum())
            )
            offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))[present]
            sums[present] = np.add.reduceat(self._vectors[flat], offsets, axis=0)
        return _normalised(sums)


def _normalised(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def _head_rule(config: dict, config_path: Path) -> tuple[int, float]:
    """(head_lines, head_weight) from a model's config; (0, 0.0) when it has none."""
    lines, weight = config.get("head_lines", 0), config.get("head_weight", 0.0)
    if (
        isinstance(lines, bool)
        or not isinstance(lines, int)
        or isinstance(weight, bool)
        or not isinstance(weight, (int, float))
        or lines < 0
        or not 0 <= weight < float("inf")
        or (weight > 0) != (lines > 0)
    ):
        raise EmbedderError(
            f"embedding model: {config_path}: head_lines must be a whole number >= 0 and "
            f"head_weight a number >= 0, both zero or both not (got {lines!r}, {weight!r})"
        )
    return lines, float(weight)
