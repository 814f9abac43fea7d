"""The MoE transformer (Qwen3-MoE family), Hugging Face import and our checkpoint format.

model.from_hf(path, precision="mxfp8") -> Model
model.save(m, path) / model.load(path) -> Model
Model(config, precision).forward(input_ids [B, L]) -> logits [B, L, V]
"""

from model.checkpoint import CheckpointError, load, save
from model.config import PRESETS, ModelConfig, preset
from model.hf import from_hf
from model.model import KVCache, Model, ModelOutput, load_balancing_loss

__all__ = [
    "PRESETS",
    "CheckpointError",
    "KVCache",
    "Model",
    "ModelConfig",
    "ModelOutput",
    "from_hf",
    "load",
    "load_balancing_loss",
    "preset",
    "save",
]
