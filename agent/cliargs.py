"""Path arguments of the command lines, made absolute once, where they are parsed.

Every `tachy` command declares its path options and arguments with `type=path_arg`,
so a relative path means the same whatever directory the work later runs in (pip and
the test runs run elsewhere: a relative `tachy tasks build --pypi --out runs/tasks`
named no interpreter at `runs/tasks/envs/NAME/bin/python` from there). It lives in
`agent`, the layer every entry point (server, training) may import.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def path_arg(text: str) -> Path:
    """An argparse `type=`: the path with `~` expanded, made absolute against the
    current directory. Lexically, like os.path.abspath: symlinks are kept (a virtual
    environment's `bin/python` must stay the environment's, not its base interpreter)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return Path(os.path.abspath(os.path.expanduser(text)))
