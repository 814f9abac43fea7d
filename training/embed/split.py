"""The split of the standard library that the code embedder trains and is evaluated on.

The unit is a top-level module or package (`json`, `email`, `asyncio.py`'s package...):
a function and its near copies live in one unit, so a split by unit keeps evaluation
code out of training. A unit goes to evaluation when the CRC-32 of its name is 0 mod
EVAL_MODULUS (about one in five), so the rule gives the same answer on any machine and
for units a later Python adds; the lists themselves are recorded in
training/configs/embed-split.json, and training reads the recorded training list only,
so a unit that is not in the file is never trained on.

    python -m training.embed.split        # write the file again (this Python's stdlib)
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

from training.embed.docstrings import default_source, source_units

EVAL_MODULUS = 5
SPLIT_FILE = Path(__file__).resolve().parents[1] / "configs" / "embed-split.json"


def is_eval_unit(name: str) -> bool:
    return zlib.crc32(name.encode()) % EVAL_MODULUS == 0


def make_split(source: Path | None = None) -> dict:
    """The split of `source` (default: this interpreter's standard library)."""
    source = (source or default_source()).resolve()
    names = sorted(source_units(source))
    return {
        "source": "stdlib",
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "rule": f"a unit is for evaluation when crc32(name) % {EVAL_MODULUS} == 0",
        "train": [n for n in names if not is_eval_unit(n)],
        "eval": [n for n in names if is_eval_unit(n)],
    }


def write_split(path: Path = SPLIT_FILE, source: Path | None = None) -> dict:
    split = make_split(source)
    path.write_text(json.dumps(split, indent=1) + "\n")
    return split


def read_split(path: Path = SPLIT_FILE) -> dict:
    """The recorded split; ValueError naming the file when it is missing or malformed."""
    try:
        split = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the embedder's split {path}: {exc}") from None
    if not isinstance(split, dict) or not all(
        isinstance(split.get(k), list) for k in ("train", "eval")
    ):
        raise ValueError(f"{path} is not a split (it needs 'train' and 'eval' lists)")
    if set(split["train"]) & set(split["eval"]):
        raise ValueError(f"{path}: a unit is in both parts")
    return split


if __name__ == "__main__":
    written = write_split()
    print(
        f"{SPLIT_FILE}: {len(written['train'])} training units, {len(written['eval'])} evaluation units"
    )
