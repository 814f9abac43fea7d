"""What every benchmark records about where and on what it ran."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent.lints import find_executable

REPO = Path(__file__).resolve().parent.parent


def source_state() -> dict[str, Any]:
    """The commit measured, and whether the working tree differed from it."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return None
        return out.stdout.strip()

    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(status) if status is not None else None,
    }


def machine_info() -> dict[str, Any]:
    """CPU, OS, Python and the ripgrep the tools use."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    rg = find_executable("rg")
    rg_version = None
    if rg:
        out = subprocess.run([rg, "--version"], capture_output=True, text=True, check=False)
        rg_version = out.stdout.splitlines()[0] if out.stdout else None
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "ripgrep": rg_version,
        "user_is_root": os.geteuid() == 0,
    }


def report(
    result: dict[str, Any],
    as_json: bool,
    table: Callable[[dict[str, Any]], str],
    one_line: Callable[[dict[str, Any]], str],
) -> None:
    """The benchmark contract: one JSON document (or a table) on stdout, and the
    one-line summary on stderr."""
    print(json.dumps(result, indent=2) if as_json else table(result))
    sys.stdout.flush()
    print(one_line(result["summary"]), file=sys.stderr)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of sorted samples, linearly interpolated."""
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def stats(samples_s: Sequence[float]) -> dict[str, float | int]:
    """Median, p95, min, max and mean of durations in seconds, in ms."""
    ordered = sorted(samples_s)
    if not ordered:
        return {"n": 0}
    return {
        "p50_ms": ms(statistics.median(ordered)),
        "p95_ms": ms(percentile(ordered, 0.95)),
        "min_ms": ms(ordered[0]),
        "max_ms": ms(ordered[-1]),
        "mean_ms": ms(statistics.fmean(ordered)),
        "n": len(ordered),
    }
