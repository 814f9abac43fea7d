"""Training data for the supervised warm-up: a code corpus for pretraining and the
scripted expert's demonstrations for fine-tuning, both as `Examples` (token rows and
loss masks) for training/sft/trainer.py.

    files = corpus_files()                      # the interpreter's stdlib, sorted
    train, heldout = split_files(files, 0.05)   # by a hash of each relative path
    blocks = pack_blocks(encode_files(tok, train), tok, seq_len=256)

    demos = read_demos("demos.jsonl")
    sft = sft_examples(tok, demos, max_len=2048)

Corpus. Python sources under a directory (default: `sysconfig.get_paths()["stdlib"]`),
minus test directories (`test`, `tests`, `idle_test`, `test_*.py`), `site-packages`,
hidden and `__pycache__` entries and files over `max_bytes`, in sorted relative-path
order. A file is held out when the SHA-256 of its relative path falls below the held-out
fraction, so the split never depends on the order, the other files, or the contents.
The files are encoded (special tokens spelt out: source text never fakes a control
token), joined with `<|endoftext|>` after each file into one stream, and cut into rows of
seq_len + 1 tokens at a stride of seq_len, so that every token of the stream is a target
once (the last partial row is dropped).

Demonstrations. Each conversation is rendered exactly as `Engine.chat_prompt` renders a
prompt: per message `<|im_start|>` + encode(f"{role}\\n") + encode(content) + `<|im_end|>`
+ encode("\\n"), each piece encoded on its own with special tokens spelt out, so the ids
are the ones the engine feeds at sampling time (the prompt part of a rendered example up
to an assistant turn equals `engine.chat_prompt(messages[:k])`). The loss mask is 1 on
the tokens of each assistant message's content and on its `<|im_end|>` (where the
engine stops), 0 everywhere else: system, user and tool-result text, the role headers,
the newline after `<|im_end|>`.

Over-long demonstrations are cut after their last whole assistant turn that fits
`max_len` tokens: what is kept is a head of the conversation, exactly what the engine
would see up to that point, and never ends inside a turn (a cut inside a tool call
would teach the model to stop mid-call). A conversation whose first assistant turn does
not fit is
skipped. `SFTStats` counts both. There is no packing: the model has no per-document
attention mask, so two conversations in one row would attend to each other; rows are
right-padded per micro-batch instead (training/sft/trainer.py), which causal attention ignores.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from agent.jsonl import numbered_lines
from model.tokenizer import ENDOFTEXT, Tokenizer, TokenizerError

TEST_DIRS = frozenset({"test", "tests", "idle_test"})
SKIP_DIRS = frozenset({"site-packages", "__pycache__"})
MAX_FILE_BYTES = 256 * 1024


class DataError(ValueError):
    """Training data that cannot be used (missing, empty, malformed); the message says why."""


@dataclass
class Examples:
    """Token rows for training: rows[i] ids [Li] (int64), masks[i] [Li] (bool). Position t
    is a target (predicted from the tokens before it) when t >= 1 and masks[i][t]."""

    rows: list[Tensor]
    masks: list[Tensor]

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.masks):
            raise ValueError(f"{len(self.rows)} rows but {len(self.masks)} masks")
        for ids, mask in zip(self.rows, self.masks, strict=True):
            if ids.shape != mask.shape or ids.dim() != 1:
                raise ValueError(f"row {tuple(ids.shape)} and mask {tuple(mask.shape)} differ")

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def target_tokens(self) -> int:
        return int(sum(int(m[1:].sum()) for m in self.masks))


# --------------------------------------------------------------------- corpus
def default_corpus() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: str | Path | None = None, *, max_bytes: int = MAX_FILE_BYTES) -> list[Path]:
    """The Python sources under `root` (a directory, or one .py file) in sorted
    relative-path order, without tests, site-packages, hidden entries or files over
    `max_bytes`. Raises DataError when `root` is missing or holds none."""
    root = default_corpus() if root is None else Path(root)
    if root.is_file():
        files = [root] if root.stat().st_size <= max_bytes else []
    elif root.is_dir():
        files = []
        for p in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
            parts = p.relative_to(root).parts
            if any(d in TEST_DIRS or d in SKIP_DIRS or d.startswith(".") for d in parts[:-1]):
                continue
            if parts[-1].startswith((".", "test_")) or not p.is_file():
                continue
            if p.stat().st_size <= max_bytes:
                files.append(p)
    else:
        raise DataError(f"corpus {root}: no such file or directory")
    if not files:
        raise DataError(f"corpus {root}: no Python files (*.py up to {max_bytes} bytes) in it")
    return files


def is_heldout(name: str, fraction: float) -> bool:
    """Whether the file `name` (a relative path) is held out: SHA-256 of the name, as a
    number in [0, 1), below `fraction`."""
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_files(
    files: Sequence[Path], fraction: float, root: str | Path | None = None
) -> tuple[list[Path], list[Path]]:
    """(train, held-out) by `is_heldout` of each path relative to `root` (default: the
    files' common directory); order kept."""
    if not 0 <= fraction < 1:
        raise ValueError(f"held-out fraction must be in [0, 1), got {fraction}")
    root = _common_dir(files) if root is None else Path(root)
    if root.is_file():
        root = root.parent
    train, heldout = [], []
    for f in files:
        (heldout if is_heldout(Path(f).relative_to(root).as_posix(), fraction) else train).append(f)
    return train, heldout


def _common_dir(files: Sequence[Path]) -> Path:
    parts = [Path(f).parent.parts for f in files]
    common = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return Path(*common)


def read_texts(files: Iterable[Path]) -> list[str]:
    """The files' texts; files that are not UTF-8 are left out."""
    texts = []
    for f in files:
        try:
            texts.append(Path(f).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


def encode_files(tok: Tokenizer, files: Sequence[Path]) -> list[int]:
    """One stream: each file's tokens (special tokens spelt out) then `<|endoftext|>`."""
    eot = tok.token_to_id(ENDOFTEXT)
    if eot is None:
        raise DataError(f"the tokenizer has no {ENDOFTEXT} token to separate files")
    stream: list[int] = []
    for ids in tok.encode_batch(read_texts(files), allow_special=False):
        stream += ids
        stream.append(eot)
    return stream


def pack_blocks(stream: Sequence[int], seq_len: int) -> Examples:
    """Rows of seq_len + 1 tokens at a stride of seq_len (every token a target once; the
    last partial row dropped); masks all ones."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    ids = torch.tensor(stream, dtype=torch.long)
    n = (len(ids) - 1) // seq_len
    rows = [ids[i * seq_len : (i + 1) * seq_len + 1] for i in range(n)]
    return Examples(rows, [torch.ones_like(r, dtype=torch.bool) for r in rows])


# -------------------------------------------------------------- demonstrations
def read_demos(path: str | Path) -> list[dict]:
    """The lines of a demonstrations file (`tachy tasks demos`): each a JSON object with a
    `messages` list of {role, content}. Raises DataError naming the first bad line."""
    path = Path(path)
    lines = numbered_lines(
        path,
        error=DataError,
        what="demonstrations file",
        missing=f"demonstrations file {path}: not found",
    )
    demos = []
    for n, line in lines:
        try:
            demo = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{n}: not JSON ({exc})") from None
        messages = demo.get("messages") if isinstance(demo, dict) else None
        if not isinstance(messages, list) or not all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise DataError(f"{path}:{n}: needs a 'messages' list of {{role, content}} strings")
        demos.append(demo)
    if not demos:
        raise DataError(f"demonstrations file {path}: no demonstrations in it")
    return demos


def render_chat(tok: Tokenizer, messages: Sequence[tuple[str, str]]) -> tuple[list[int], list[int]]:
    """(ids, mask) of a conversation in Engine.chat_prompt's format (Tokenizer.encode_chat);
    mask 1 on assistant content tokens and their `<|im_end|>`."""
    try:
        return tok.encode_chat(messages)
    except TokenizerError as exc:
        raise DataError(str(exc)) from None


@dataclass
class SFTStats:
    conversations: int = 0
    truncated: int = 0  # cut after a whole assistant turn to fit max_len (kept)
    skipped: list[str] = field(default_factory=list)  # no assistant token within max_len


def sft_examples(tok: Tokenizer, demos: Sequence[dict], max_len: int) -> tuple[Examples, SFTStats]:
    """One row per demonstration, cut at a turn boundary to max_len (see the module
    docstring); demonstrations left with no assistant target are skipped and counted."""
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    rows, masks, stats = [], [], SFTStats(conversations=len(demos))
    for i, demo in enumerate(demos):
        messages = [(m["role"], m["content"]) for m in demo["messages"]]
        ids, mask = render_chat(tok, messages)
        if len(ids) > max_len:
            ids, mask = _cut_at_turn(tok, messages, max_len)
            stats.truncated += 1
        if not any(mask[1:]):
            stats.skipped.append(str(demo.get("task_id", f"line {i + 1}")))
            continue
        rows.append(torch.tensor(ids, dtype=torch.long))
        masks.append(torch.tensor(mask, dtype=torch.bool))
    return Examples(rows, masks), stats


def _cut_at_turn(
    tok: Tokenizer, messages: list[tuple[str, str]], max_len: int
) -> tuple[list[int], list[int]]:
    """The longest head of the conversation that ends with a whole assistant turn and
    fits max_len tokens (empty when not even the first turn fits): a cut inside a turn
    would teach the model to stop in the middle of a tool call."""
    ends = [i + 1 for i, (role, _) in enumerate(messages) if role == "assistant"]
    for end in reversed(ends):
        ids, mask = render_chat(tok, messages[:end])
        if len(ids) <= max_len:
            return ids, mask
    return [], []


def split_demos(demos: Sequence[dict], fraction: float) -> tuple[list[dict], list[dict]]:
    """(train, held-out) by `is_heldout` of each task id (the line number when absent)."""
    train, heldout = [], []
    for i, d in enumerate(demos):
        (heldout if is_heldout(str(d.get("task_id", i)), fraction) else train).append(d)
    return train, heldout
