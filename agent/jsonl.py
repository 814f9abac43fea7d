"""The one reader of JSON Lines files (replays, demonstrations, task sets).

Each caller decodes and checks its own records and words its own errors; what they share
is here: a missing file and an unreadable or non-UTF-8 file are clear errors of the
caller's kind, blank lines are skipped, and every record comes with its 1-based line
number so an error can point at it (`FILE:LINE: …`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def numbered_lines(
    path: Path, *, error: type[Exception], what: str, missing: str
) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for each non-blank line of `path`.

    Raises `error(missing)` when the file does not exist and
    `error("cannot read {what} {path}: …")` when it cannot be read or is not UTF-8."""
    try:
        data = path.read_bytes()
        data.decode("utf-8")
    except FileNotFoundError:
        raise error(missing) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} {path}: {exc}") from None
    for number, line in enumerate(data.splitlines(), 1):
        if line.strip():
            yield number, line
