"""Tiny local projects the task-builder tests build from (no network needed)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

CALC = '''\
"""A small calculator."""


def add(a, b):
    return a + b


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)


def count_positive(values):
    total = 0
    for value in values:
        if value > 0:
            total += 1
    return total
'''

TESTS = """\
import pytest

from calc import add, clamp, count_positive, mean


def test_add():
    assert add(2, 3) == 5


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_count_positive():
    assert count_positive([-1, 0, 1, 2]) == 2
"""


def write_project(root: Path, *, tests: str | None = TESTS, src: bool = False) -> Path:
    """A package `calc` with a pytest suite under tests/ (none when tests is None), in
    src/ with src=True."""
    package = root / "src" / "calc" if src else root / "calc"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(CALC)
    (root / "setup.py").write_text("from setuptools import setup\n\nsetup(name='calc')\n")
    if tests is not None:
        (root / "tests").mkdir()
        (root / "tests" / "test_calc.py").write_text(tests)
    return root


def make_env(env_dir: Path) -> Path:
    """A virtual environment at `env_dir` (as a PyPI build makes in DIR/envs/NAME) whose
    site sees this interpreter's packages (pytest) without installing anything; its
    python path."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env_dir)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (site,) = env_dir.glob("lib/python*/site-packages")
    purelib = sysconfig.get_paths()["purelib"]
    (site / "tachy-tests.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")
    return env_dir / "bin" / "python"
