"""The tokenizer: a thin wrapper over the `tokenizers` library, a byte-level BPE trainer
for code, and a streaming decoder for the generation engine.

    tok = Tokenizer.from_file("ckpt/")            # ours, or a Hugging Face tokenizer.json
    ids = tok.encode(text); assert tok.decode(ids) == text
    dec = IncrementalDecoder(tok)
    for i in ids: print(dec.push(i), end="")
    print(dec.flush())

    tok = train_bpe(files, vocab_size=32_000)    # python -m model.tokenizer train ...

Exactness. Our trained tokenizer has no normalizer, a byte-level pre-tokenizer (a
Qwen2-style split regex, then bytes mapped to printable characters, no prefix space) and
the byte-level decoder, so `decode(encode(x)) == x` for every string. `decode` never
drops special tokens unless asked. A loaded Hugging Face tokenizer keeps its own
pipeline: Qwen's normalizes to NFC, so there the round trip is exact for NFC text only.

Which tags are single tokens, and of which kind. Every fixed string of the tool-call
syntax (DESIGN.md, agent/parser.py, agent/render.py) is one id, so the model writes a
tag in one step, a stop string such as "<tool_result" is one token, and the RL loss can
mask tool output by id:

- Control tokens, added as *special*: "<|endoftext|>" (end of a document; padding),
  "<|im_start|>" and "<|im_end|>" (chat turns, as in Qwen). They are never part of
  ordinary text: `encode(text, allow_special=False)` spells them out as plain bytes, which
  is how untrusted text (file contents, command output) must be encoded so that it cannot
  forge a turn boundary; `decode(..., skip_special_tokens=True)` drops them.
- Tool-syntax tags, added as ordinary (*non-special*) tokens: "<tool_call", "</tool_call>",
  "<tool_result", "</tool_result>" and, for every parameter of every tool in
  agent/tools, "<name>" and "</name>" (e.g. "<path>", "</old_string>"). They are text the
  model writes and the parser reads, so they are always matched (also inside untrusted
  text, where "<path>" is the same characters whatever it means) and never skipped by
  decode. The opening tags carry attributes (`<tool_call name="edit_file">`,
  `<tool_result name="grep" call_id="c1" status="error">`), so the token is the prefix
  "<tool_call" / "<tool_result" and ` name="edit_file">` is ordinary BPE text. Tool
  names are not tokens: they are learnt from data like any identifier.

`eos_id` is the token that ends a generation: for our tokenizer "<|im_end|>" (the end of
an assistant turn), for a Hugging Face one the tokenizer_config.json's `eos_token`.
`stop_ids` adds every other end marker present ("<|endoftext|>", "<|im_end|>"), since a
base model ends with the former and a chat model with the latter.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, trainers

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
CONTROL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# The parameter names of the tools in agent/tools (checked against the registry by a test;
# kept literal here so that the tokenizer, once trained, never changes with the code).
TOOL_PARAMETERS = (
    "path",
    "start_line",
    "end_line",
    "depth",
    "query",
    "limit",
    "pattern",
    "glob",
    "ignore_case",
    "max_results",
    "paths",
    "old_string",
    "new_string",
    "replace_all",
    "content",
    "command",
    "timeout_s",
    "background",
    "todos",
)
TOOL_TAGS = (
    "<tool_call",
    "</tool_call>",
    "<tool_result",
    "</tool_result>",
    *(tag for name in TOOL_PARAMETERS for tag in (f"<{name}>", f"</{name}>")),
)

# Qwen2's split: contractions, letter runs with one leading non-letter, single digits,
# punctuation runs with their trailing newlines, newline runs, other whitespace.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Tokens taken as end of sequence when a tokenizer does not name one, in order of preference.
_EOS_GUESSES = (IM_END, ENDOFTEXT, "<|eot_id|>", "<|end_of_text|>", "</s>", "<eos>")


class TokenizerError(ValueError):
    """A tokenizer file that is missing, unreadable or not a tokenizer."""


def _token_content(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the special tokens the engine needs."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        eos_token: str | None = None,
        pad_token: str | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.backend = backend
        # The model's own Jinja template, kept to be saved beside the tokenizer for other
        # tools; tachy renders chats with encode_chat (ChatML), which it must agree with.
        self.chat_template = chat_template
        self.eos_token = eos_token if eos_token is not None else self._guess_eos()
        if self.eos_token is not None and backend.token_to_id(self.eos_token) is None:
            raise TokenizerError(f"eos token {self.eos_token!r} is not in the vocabulary")
        if pad_token is not None and backend.token_to_id(pad_token) is None:
            raise TokenizerError(f"pad token {pad_token!r} is not in the vocabulary")
        self.pad_token = pad_token
        self._plain: tokenizers.Tokenizer | None = None

    # ----------------------------------------------------------------- loading
    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """Load a tokenizer.json, or a directory holding one (and maybe a
        tokenizer_config.json / special_tokens_map.json naming eos and pad tokens)."""
        path = Path(path)
        directory = path if path.is_dir() else path.parent
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise TokenizerError(f"no tokenizer file at {file}")
        try:
            backend = tokenizers.Tokenizer.from_file(str(file))
        except Exception as exc:
            raise TokenizerError(f"{file} is not a valid tokenizer.json: {exc}") from exc
        eos = pad = template = None
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            config_file = directory / name
            if not config_file.is_file():
                continue
            try:
                config = json.loads(config_file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise TokenizerError(f"{config_file} is not valid JSON: {exc}") from exc
            if not isinstance(config, dict):
                raise TokenizerError(f"{config_file} is not a JSON object")
            eos = eos or _token_content(config.get("eos_token"))
            pad = pad or _token_content(config.get("pad_token"))
            if isinstance(config.get("chat_template"), str):
                template = template or config["chat_template"]
        return cls(backend, eos_token=eos, pad_token=pad, chat_template=template)

    def save(self, path: str | Path) -> None:
        """Write `path` as a tokenizer.json if it ends in .json, else a directory holding
        tokenizer.json and a tokenizer_config.json (loadable by transformers as well)."""
        path = Path(path)
        if path.suffix == ".json":
            path.parent.mkdir(parents=True, exist_ok=True)
            self.backend.save(str(path))
            return
        path.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path / "tokenizer.json"))
        config: dict[str, object] = {"tokenizer_class": "PreTrainedTokenizerFast"}
        if self.eos_token is not None:
            config["eos_token"] = self.eos_token
        if self.pad_token is not None:
            config["pad_token"] = self.pad_token
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")

    def _guess_eos(self) -> str | None:
        for token in _EOS_GUESSES:
            if self.backend.token_to_id(token) is not None:
                return token
        return None

    # -------------------------------------------------------------- vocabulary
    @property
    def vocab_size(self) -> int:
        """Every id the model may see, added tokens included (the embedding's rows)."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    @property
    def eos_id(self) -> int | None:
        return None if self.eos_token is None else self.backend.token_to_id(self.eos_token)

    @property
    def pad_id(self) -> int | None:
        """The pad token's id; the eos id when the tokenizer names no pad token."""
        if self.pad_token is not None:
            return self.backend.token_to_id(self.pad_token)
        return self.eos_id

    @property
    def stop_ids(self) -> frozenset[int]:
        """Ids that end a generation: eos and any end-of-text / end-of-turn marker."""
        ids = {self.backend.token_to_id(t) for t in (ENDOFTEXT, IM_END)}
        ids.add(self.eos_id)
        return frozenset(i for i in ids if i is not None)

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the added tokens marked special (control tokens, not text)."""
        return frozenset(
            i for i, tok in self.backend.get_added_tokens_decoder().items() if tok.special
        )

    # ---------------------------------------------------------------- encoding
    def encode(self, text: str, *, allow_special: bool = True) -> list[int]:
        """Token ids of `text`, with no BOS/EOS added. With `allow_special=False`, control
        tokens such as "<|im_end|>" written in `text` are encoded as plain characters."""
        return self._backend_for(allow_special).encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str], *, allow_special: bool = True) -> list[list[int]]:
        backend = self._backend_for(allow_special)
        return [e.ids for e in backend.encode_batch(list(texts), add_special_tokens=False)]

    def _backend_for(self, allow_special: bool) -> tokenizers.Tokenizer:
        if allow_special:
            return self.backend
        # A copy that spells special tokens out, so that no shared state is toggled
        # (the engine may encode from several threads).
        if self._plain is None:
            plain = tokenizers.Tokenizer.from_str(self.backend.to_str())
            plain.encode_special_tokens = True
            self._plain = plain
        return self._plain

    def encode_chat(
        self, messages: Sequence[tuple[str, str]], *, generation_prompt: bool = False
    ) -> tuple[list[int], list[int]]:
        """(ids, mask) of a conversation in the chat format (Qwen's ChatML):
        `<|im_start|>role\\ncontent<|im_end|>\\n` per message, then, with
        `generation_prompt`, `<|im_start|>assistant\\n` (where the model writes next).
        Roles and contents are encoded with allow_special=False, so no text can fake a
        turn; the markers are the control tokens. `mask` is 1 on the tokens a model
        writes (each assistant content and its `<|im_end|>`), 0 elsewhere. The one
        renderer of chats: the engine's prompts, SFT data and RL rollouts all use it."""
        start, end = self.token_to_id(IM_START), self.token_to_id(IM_END)
        if start is None or end is None:
            raise TokenizerError(f"the tokenizer has no {IM_START} / {IM_END} tokens for chat")
        newline = self.encode("\n", allow_special=False)
        ids: list[int] = []
        mask: list[int] = []
        for role, content in messages:
            header = [start, *self.encode(f"{role}\n", allow_special=False)]
            body = [*self.encode(content, allow_special=False), end]
            learn = 1 if role == "assistant" else 0
            ids += header + body + newline
            mask += [0] * len(header) + [learn] * len(body) + [0] * len(newline)
        if generation_prompt:
            header = [start, *self.encode("assistant\n", allow_special=False)]
            ids += header
            mask += [0] * len(header)
        return ids, mask

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_batch(
        self, batch: Sequence[Sequence[int]], *, skip_special_tokens: bool = False
    ) -> list[str]:
        return self.backend.decode_batch(
            [list(ids) for ids in batch], skip_special_tokens=skip_special_tokens
        )


# ------------------------------------------------------------------ streaming
_ZWJ = "\u200d"


def _extends(ch: str) -> bool:
    """Whether `ch` joins the grapheme before it (combining marks, ZWJ, variation
    selectors, emoji skin tones, tag characters)."""
    cp = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or ch == _ZWJ
        or 0xFE00 <= cp <= 0xFE0F
        or 0xE0100 <= cp <= 0xE01EF
        or 0x1F3FB <= cp <= 0x1F3FF
        or 0xE0020 <= cp <= 0xE007F
    )


def _is_regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _safe_end(text: str) -> int:
    """How much of `text` can be shown now: all of it, unless its last grapheme is one
    that the next character could still extend (anything non-ASCII, or a CR), which is
    then held back. ASCII text streams without delay."""
    if not text:
        return 0
    last = text[-1]
    if last < "\x80" and last != "\r":
        return len(text)
    i = len(text) - 1
    while i > 0:
        ch = text[i]
        if _extends(ch) or text[i - 1] == _ZWJ:
            i -= 1
            continue
        if _is_regional(ch):
            run = 0
            while i - run >= 0 and _is_regional(text[i - run]):
                run += 1
            if run % 2 == 0:  # the last two indicators form one flag
                i -= 1
        break
    return i


class IncrementalDecoder:
    """Turns a stream of token ids into text, emitting only what is final: never half a
    UTF-8 character (byte-level BPE splits them across tokens), never a grapheme that
    the next token could still extend (an emoji waiting for its ZWJ sequence, a letter
    for its accent). ASCII is emitted as soon as it arrives.

    `"".join(push(i) for i in ids) + flush() == tokenizer.decode(ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix = 0  # ids[_prefix:_read] decode to text already handed on
        self._read = 0
        self._pending = ""  # decoded text held back at a grapheme boundary

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (often "")."""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        text = self._decode(self.ids[self._prefix :])
        if len(text) <= len(prefix_text) or text.endswith("\ufffd"):
            return ""  # an incomplete UTF-8 sequence: wait for its remaining bytes
        self._pending += text[len(prefix_text) :]
        self._prefix, self._read = self._read, len(self.ids)
        end = _safe_end(self._pending)
        out, self._pending = self._pending[:end], self._pending[end:]
        return out

    def push_many(self, ids: Iterable[int]) -> str:
        return "".join(self.push(i) for i in ids)

    def flush(self) -> str:
        """The text still held back (at the end of a generation), invalid bytes replaced."""
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        text = self._decode(self.ids[self._prefix :])
        out = self._pending + text[len(prefix_text) :]
        self._pending = ""
        self._prefix = self._read = len(self.ids)
        return out


# ------------------------------------------------------------------- training
def _iter_texts(files_or_iterator: Iterable[str | Path] | Iterator[str]) -> Iterator[str]:
    """Texts from file paths (directories are walked, skipping hidden entries, __pycache__
    and files that are not UTF-8) or from strings. A `Path` is always a path; a `str` is
    taken as a path only if something exists there, else as training text."""
    for item in files_or_iterator:
        path = Path(item)
        if isinstance(item, Path) or (len(item) < 4096 and "\n" not in item and path.exists()):
            paths = [path]
            if path.is_dir():
                paths = sorted(
                    p
                    for p in path.rglob("*")
                    if p.is_file()
                    and not any(
                        part.startswith(".") or part == "__pycache__"
                        for part in p.relative_to(path).parts
                    )
                )
            for p in paths:
                try:
                    yield p.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue  # binary or unreadable: not training text
        else:
            yield item


def find_tokenizer(checkpoint_dir: Path, tokenizer: str | Path | None = None) -> Tokenizer:
    """The tokenizer saved with a checkpoint (its tokenizer.json, or a tokenizer/ folder),
    or the one at `tokenizer`. Raises TokenizerError saying where it looked."""
    candidates = (
        [Path(tokenizer)]
        if tokenizer is not None
        else [checkpoint_dir / "tokenizer.json", checkpoint_dir / "tokenizer"]
    )
    for path in candidates:
        if path.is_file() or (path.is_dir() and (path / "tokenizer.json").is_file()):
            try:
                return Tokenizer.from_file(path)
            except TokenizerError as exc:
                raise TokenizerError(f"bad tokenizer at {path}: {exc}") from None
    raise TokenizerError(
        f"no tokenizer found (looked for {', '.join(map(str, candidates))}); "
        "save one there with Tokenizer.save or pass tokenizer=PATH"
    )


def new_byte_level_bpe() -> tokenizers.Tokenizer:
    """An empty byte-level BPE with our pipeline (no normalizer: text is kept exactly)."""
    tok = tokenizers.Tokenizer(models.BPE(byte_fallback=False, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(
    files_or_iterator: Iterable[str | Path] | Iterator[str],
    vocab_size: int,
    *,
    special_tokens: Sequence[str] = CONTROL_TOKENS,
    tool_tags: Sequence[str] = TOOL_TAGS,
    min_frequency: int = 2,
    eos_token: str = IM_END,
    pad_token: str = ENDOFTEXT,
) -> Tokenizer:
    """Train a byte-level BPE of `vocab_size` ids (special tokens first, then the 256
    bytes, the merges, and the tool tags last) on files, directories or strings. A corpus
    too small to yield enough merges gives a smaller vocabulary, never a larger one."""
    special_tokens = list(dict.fromkeys(special_tokens))
    tool_tags = [t for t in dict.fromkeys(tool_tags) if t not in special_tokens]
    base = len(special_tokens) + len(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size < base + len(tool_tags):
        raise ValueError(
            f"vocab_size {vocab_size} is too small: the bytes, special tokens and tool tags "
            f"alone take {base + len(tool_tags)}"
        )
    for token in (eos_token, pad_token):
        if token not in special_tokens:
            raise ValueError(f"{token!r} must be one of the special tokens")
    tok = new_byte_level_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(tool_tags),
        min_frequency=min_frequency,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in special_tokens],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_iter_texts(files_or_iterator), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in tool_tags])
    return Tokenizer(tok, eos_token=eos_token, pad_token=pad_token)


# ------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model.tokenizer")
    sub = parser.add_subparsers(dest="cmd", required=True)
    train = sub.add_parser("train", help="train a byte-level BPE on files or directories")
    train.add_argument("--vocab-size", type=int, required=True)
    train.add_argument("--out", required=True, help="output directory (or a .json file)")
    train.add_argument("--min-frequency", type=int, default=2)
    train.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.files if not f.exists()]
    if missing:
        parser.error(f"no such file or directory: {', '.join(missing)}")
    try:
        tok = train_bpe(args.files, args.vocab_size, min_frequency=args.min_frequency)
    except ValueError as exc:
        parser.error(str(exc))
    tok.save(args.out)
    print(f"wrote a tokenizer of {tok.vocab_size} tokens to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
