"""Import a Hugging Face Qwen3-MoE checkpoint directory (config.json + safetensors).

Expert layouts accepted, per MoE layer i (names under "model."):
  hub (per expert, what transformers 5.24's save_pretrained writes too):
      layers.{i}.mlp.experts.{j}.gate_proj.weight [F, D], .up_proj.weight [F, D],
      .down_proj.weight [D, F]
  fused (transformers v5 in-memory layout):
      layers.{i}.mlp.experts.gate_up_proj [E, 2F, D] (gate rows first),
      layers.{i}.mlp.experts.down_proj [E, D, F]
Everything else maps one to one (our module names are HF's minus "model.").
With precision="mxfp8" each layer's experts are quantized as they are read, so the
full-precision expert weights of the whole model are never held at once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import safe_open

from model.config import ModelConfig
from model.model import Model

_EXPERT = re.compile(
    r"^layers\.(\d+)\.mlp\.experts\.(?:(\d+)\.(gate_proj|up_proj|down_proj)\.weight|(gate_up_proj|down_proj))$"
)
_IGNORED = re.compile(r"(rotary_emb\.inv_freq)$")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (the message says why)."""


def read_hf_config(path: Path) -> ModelConfig:
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file}: no config.json in the checkpoint directory")
    try:
        hf = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{cfg_file}: invalid JSON ({exc})") from exc
    try:
        return ModelConfig.from_hf_config(hf)
    except KeyError as exc:
        raise CheckpointError(f"{cfg_file}: missing field {exc}") from exc
    except ValueError as exc:
        raise CheckpointError(f"{cfg_file}: {exc}") from exc


def shard_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = [path / f for f in sorted(set(weight_map.values()))]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"shards named by {index.name} are missing: {missing}")
        return files
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors files")
    return files


def _read_tensors(files: list[Path]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as sf:
                for name in sf.keys():  # noqa: SIM118 (safe_open is not a dict)
                    out[name] = sf.get_tensor(name)
        except Exception as exc:
            raise CheckpointError(f"{f}: not a readable safetensors file ({exc})") from exc
    return out


def from_hf(path: str | Path, precision: str = "mxfp8") -> Model:
    """Load a Qwen3-MoE checkpoint directory into our Model. precision="mxfp8" stores the
    experts as MXFP8 buffers (quantized at load); "fp32" keeps every weight unquantized."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a checkpoint directory")
    config = read_hf_config(path)
    quantized = precision == "mxfp8"
    with torch.device("meta"):
        model = Model(config, precision=precision, quantized=quantized)
        # Our names with full-precision experts: a quantized model quantizes them as
        # they load (MoE's load hook).
        expected = Model(config, precision=precision).state_dict()
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)

    raw = _read_tensors(shard_files(path))
    state: dict[str, torch.Tensor] = {}
    loaded: set[str] = set()  # expert weights, loaded as each layer is assembled
    experts: dict[int, dict] = {}  # layer -> {(j, proj) or proj: tensor}
    unexpected = []
    for hf_name, t in raw.items():
        name = hf_name.removeprefix("model.")
        if _IGNORED.search(name) or (config.tie_word_embeddings and name == "lm_head.weight"):
            continue
        m = _EXPERT.match(name)
        if m:
            layer = int(m.group(1))
            key = (int(m.group(2)), m.group(3)) if m.group(2) is not None else m.group(4)
            experts.setdefault(layer, {})[key] = t
        elif name in expected:
            state[name] = t
        else:
            unexpected.append(hf_name)
    raw.clear()

    E, Fe, D = config.num_experts, config.moe_intermediate_size, config.hidden_size
    for i in range(config.num_hidden_layers):
        if not config.is_moe_layer(i):
            continue
        found = experts.pop(i, {})
        if "gate_up_proj" in found or "down_proj" in found:
            gu, dn = found.pop("gate_up_proj", None), found.pop("down_proj", None)
            if gu is None or dn is None:
                raise CheckpointError(
                    f"layer {i}: fused experts need both gate_up_proj and down_proj"
                )
        else:
            missing = [
                f"model.layers.{i}.mlp.experts.{j}.{p}.weight"
                for j in range(E)
                for p in ("gate_proj", "up_proj", "down_proj")
                if (j, p) not in found
            ]
            if missing:
                raise CheckpointError(
                    f"missing expert tensors: {missing[:6]}{' ...' if len(missing) > 6 else ''}"
                )
            gu = torch.stack(
                [
                    torch.cat([found.pop((j, "gate_proj")), found.pop((j, "up_proj"))])
                    for j in range(E)
                ]
            )
            dn = torch.stack([found.pop((j, "down_proj")) for j in range(E)])
        if found:
            unexpected += [f"model.layers.{i}.mlp.experts.{k}" for k in found]
        for name, t, shape in (("gate_up", gu, (E, 2 * Fe, D)), ("down", dn, (E, D, Fe))):
            if tuple(t.shape) != shape:
                raise CheckpointError(
                    f"layer {i} experts {name}: shape {tuple(t.shape)}, config needs {shape}"
                )
        # Loaded layer by layer, so that a quantized model holds one layer's experts in
        # full precision at a time (its load hook quantizes them on the way in).
        model.layers[i].mlp.load_state_dict(
            {"w_gate_up": gu.float(), "w_down": dn.float()}, strict=False, assign=True
        )
        loaded.update(f"layers.{i}.mlp.{w}" for w in ("w_gate_up", "w_down"))
    for i, rest in experts.items():
        unexpected += [f"model.layers.{i}.mlp.experts.{k}" for k in rest]

    if unexpected:
        raise CheckpointError(f"{path}: unexpected tensors: {sorted(map(str, unexpected))[:8]}")
    missing = sorted(set(expected) - set(state) - loaded)
    if missing:
        raise CheckpointError(f"{path}: missing tensors (our names): {missing[:8]}")
    for name, t in state.items():
        want = expected[name]
        if t.shape != want.shape:
            raise CheckpointError(
                f"{path}: tensor {name} has shape {tuple(t.shape)}, config needs {tuple(want.shape)}"
            )
        if want.dtype.is_floating_point:
            state[name] = t.to(want.dtype)
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval()
