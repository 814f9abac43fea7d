"""What every `tachy` command line shares: path arguments made absolute once, where they
are parsed, and command groups (`tachy model …`, `tachy tasks …`) declared one way.

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


def command_group(
    commands: argparse._SubParsersAction, name: str, *, help: str, description: str
) -> argparse._SubParsersAction:
    """Add `tachy NAME COMMAND …` to `commands` and return the table its commands go in.
    The chosen command lands in `args.NAME_command` (a command is required)."""
    group = commands.add_parser(name, help=help, description=description)
    return group.add_subparsers(dest=f"{name}_command", metavar="COMMAND", required=True)
