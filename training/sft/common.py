"""What the supervised and the RL trainers share: AdamW with weight decay where it
belongs, the per-epoch data order, and the output directory's checkpoint, trainer state
and metrics files (written and read back the same way by both).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import save
from model.model import Model
from model.tokenizer import Tokenizer

STATE_FILE = "trainer_state.pt"
METRICS_FILE = "metrics.jsonl"


def adamw(
    model: Model, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.999)
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (all of a model; an adapted model's deltas
    and small tensors), weight decay on matrices and expert tensors only (not norms)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=lr,
        betas=betas,
    )


def epoch_permutation(n: int, seed: int, epoch: int) -> list[int]:
    """The order of n items in `epoch`: a fresh permutation seeded by (seed, epoch)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g).tolist()


class TrainStateError(RuntimeError):
    """A trainer state that cannot be resumed from (missing, corrupt, or not matching)."""


def write_checkpoint(model: Model, tokenizer: Tokenizer, out: Path, state: dict[str, Any]) -> None:
    """The model (model.save: loadable by model.load and `local:`) and a trainer state
    into `out`: everything into a scratch directory first, then moved in with the state
    file last, so a crash leaves either the old pair or a pair the weights hash check
    refuses. The state gets the weights' SHA-256."""
    scratch = out / ".saving"
    shutil.rmtree(scratch, ignore_errors=True)
    if hasattr(model, "write_part"):  # adapters (training.sft.adapters): a part of the base
        model.write_part(scratch)
    else:
        save(model, scratch, tokenizer=tokenizer)
    torch.save(state | {"weights_sha256": weights_sha256(scratch)}, scratch / STATE_FILE)
    for f in sorted(scratch.iterdir(), key=lambda f: f.name == STATE_FILE):
        os.replace(f, out / f.name)
    scratch.rmdir()


def weights_sha256(out: Path) -> str | None:
    """The content hash a checkpoint (manifest.json) or a part (part.json) records."""
    for record in ("manifest.json", "part.json"):
        if (out / record).is_file():
            return json.loads((out / record).read_text()).get("sha256")
    return None


def read_state(out: str | Path) -> dict[str, Any]:
    """The trainer state saved in `out`, checked against the weights beside it."""
    out = Path(out)
    path = out / STATE_FILE
    if not path.is_file():
        raise TrainStateError(f"{path}: missing (nothing to resume in {out})")
    try:
        state = torch.load(path, weights_only=True)
        weights = weights_sha256(out)
    except Exception as exc:
        raise TrainStateError(f"{path}: unreadable ({exc})") from None
    if state.get("weights_sha256") != weights:
        raise TrainStateError(
            f"{out}: the weights do not belong to {STATE_FILE} (a save was "
            "interrupted?); cannot resume exactly"
        )
    return state


def truncate_metrics(out: Path, step: int) -> None:
    """Cut out/metrics.jsonl back to the lines of steps <= `step` (a resumed run)."""
    metrics = out / METRICS_FILE
    if metrics.is_file():
        kept = [
            line
            for line in metrics.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        metrics.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
