"""Our checkpoint format: a directory with

    config.json        {"config": ModelConfig fields, "precision": ..., "quantized": bool}
    model.safetensors  every weight; MXFP8 expert weights as uint8 q (float8_e4m3fn bytes)
                       and uint8 E8M0 scales when quantized
    manifest.json      {"format": "tachy-model", "version": 1, "sha256": of model.safetensors,
                        "size": bytes, "tensors": {name: [dtype, shape]}}
    tokenizer.json     the model's tokenizer, when saved with one (Tokenizer.save, with
    tokenizer_config.json   its tokenizer_config.json, as in a Hugging Face directory), so
                       the directory alone serves (`local:DIR`, `tachy model serve DIR`)

`load` refuses anything that does not match (missing file, wrong format or version,
size/hash mismatch, missing/unexpected/misshapen tensor) with a CheckpointError.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from model.config import ModelConfig
from model.hf import CheckpointError
from model.model import Model
from model.tokenizer import Tokenizer

FORMAT = "tachy-model"
VERSION = 1
_FP8 = torch.float8_e4m3fn


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save(model: Model, path: str | Path, tokenizer: Tokenizer | None = None) -> Path:
    """Write `model` (and its tokenizer, when given) to directory `path` (created;
    files overwritten)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        if tokenizer.vocab_size > model.config.vocab_size:
            raise ValueError(
                f"the tokenizer has {tokenizer.vocab_size} tokens, more than the model's "
                f"vocabulary of {model.config.vocab_size}"
            )
        tokenizer.save(path)  # tokenizer.json + tokenizer_config.json beside the weights
    state = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        t = t.detach().contiguous().cpu()
        state[name] = t.view(torch.uint8) if t.dtype == _FP8 else t
    weights = path / "model.safetensors"
    save_file(state, str(weights))
    (path / "config.json").write_text(
        json.dumps(
            {
                "config": model.config.to_dict(),
                "precision": model.precision,
                "quantized": model.quantized,
            },
            indent=2,
        )
    )
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "sha256": sha256_file(weights),
        "size": weights.stat().st_size,
        "tensors": {
            n: [str(t.dtype).removeprefix("torch."), list(t.shape)] for n, t in state.items()
        },
    }
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return path


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (not a tachy checkpoint directory?)")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: corrupt JSON ({exc})") from exc


def load(path: str | Path, device: str | torch.device = "cpu") -> Model:
    """Read a directory written by `save`; raises CheckpointError if anything mismatches."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    manifest = _read_json(path / "manifest.json")
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    if manifest.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: format version {manifest.get('version')!r}, this code reads {VERSION}"
        )
    meta = _read_json(path / "config.json")
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing")
    size = weights.stat().st_size
    if size != manifest.get("size"):
        raise CheckpointError(
            f"{weights}: {size} bytes, manifest says {manifest.get('size')} (truncated or replaced?)"
        )
    if sha256_file(weights) != manifest.get("sha256"):
        raise CheckpointError(f"{weights}: content hash mismatch (corrupt file)")
    try:
        config = ModelConfig.from_dict(meta["config"])
        precision, quantized = meta["precision"], bool(meta["quantized"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path / 'config.json'}: invalid ({exc})") from exc
    try:
        state = load_file(str(weights), device=str(device))
    except Exception as exc:
        raise CheckpointError(f"{weights}: unreadable safetensors ({exc})") from exc

    with torch.device("meta"):
        model = Model(config, precision=precision, quantized=quantized)
    expected = model.state_dict()
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{weights}: missing tensors {missing[:8]}, unexpected {unexpected[:8]}"
        )
    for name, want in expected.items():
        t = state[name]
        if want.dtype == _FP8 and t.dtype == torch.uint8:
            t = state[name] = t.view(_FP8)
        if t.dtype != want.dtype or t.shape != want.shape:
            raise CheckpointError(
                f"{weights}: tensor {name} is {t.dtype} {tuple(t.shape)}, the config needs "
                f"{want.dtype} {tuple(want.shape)}"
            )
    return Model.from_state_dict(config, state, precision, quantized)  # checked above


def open_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of any directory `open_model` reads, without loading the model
    (a part's is the installed base's). CheckpointError says what is wrong."""
    from model.part import is_part, part_tokenizer
    from model.tokenizer import TokenizerError, find_tokenizer

    path = Path(path)
    if is_part(path):
        return part_tokenizer(path)
    try:
        return find_tokenizer(path)
    except TokenizerError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def open_model(
    path: str | Path,
    *,
    tokenizer: str | Path | None = None,
    device: str | torch.device = "cpu",
    precision: str = "mxfp8",
) -> tuple[Model, Tokenizer]:
    """(model ready to sample from, its tokenizer) from any directory tachy serves:

    - a part of tachy's model (part.json): assembled with the installed base;
    - our checkpoint (manifest.json), with the tokenizer saved beside it;
    - a Hugging Face checkpoint directory (config.json + safetensors + tokenizer).

    MXFP8 experts are pre-quantized (sampling takes them so); `tokenizer` overrides the
    one found with the model. CheckpointError says what is wrong."""
    from model.hf import from_hf
    from model.part import assemble, is_part
    from model.tokenizer import TokenizerError, find_tokenizer

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    found: Tokenizer | None = None
    if is_part(path):
        model, found = assemble(path)
        model = model.to(device)
    elif (path / "manifest.json").is_file():
        model = load(path, device=device)
    elif (path / "config.json").is_file():
        try:
            model = from_hf(path, precision=precision).to(device)
        except FileNotFoundError as exc:
            raise CheckpointError(str(exc)) from None
    else:
        raise CheckpointError(
            f"{path}: not a model directory (no part.json, manifest.json or config.json); "
            "write one with `tachy model import`"
        )
    if tokenizer is not None or found is None:
        try:
            found = find_tokenizer(path, tokenizer)
        except TokenizerError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
    if model.precision == "mxfp8" and model.config.has_moe and not model.quantized:
        model.quantize_experts()
    if found.vocab_size > model.config.vocab_size:
        raise CheckpointError(
            f"{path}: the tokenizer has {found.vocab_size} ids but the model only "
            f"{model.config.vocab_size}: not a matching pair"
        )
    return model, found
