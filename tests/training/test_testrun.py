"""Running a pytest suite through the agent's sandbox and reading each test's outcome."""

from __future__ import annotations

import sys
from pathlib import Path

from training.env.testrun import run_tests_in

COMMAND = f"{sys.executable} -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests"

SUITE = """
import pytest

def test_ok():
    assert 1

def test_bad():
    assert 0, "boom"

@pytest.mark.xfail
def test_expected_failure():
    assert 0

@pytest.fixture
def broken():
    raise RuntimeError("fixture")

def test_setup_error(broken):
    pass

@pytest.mark.skip
def test_skipped():
    pass

@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    assert x == 1
"""


def make_suite(root: Path, extra: dict[str, str] | None = None) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text(SUITE)
    for name, text in (extra or {}).items():
        (root / "tests" / name).write_text(text)
    return root


def test_every_outcome_is_recorded(tmp_path):
    root = make_suite(tmp_path, {"test_b.py": "import no_such_module_here\n"})
    report = run_tests_in(root, COMMAND, timeout_s=120)
    assert report.outcomes == {
        "tests/test_a.py::test_ok": "passed",
        "tests/test_a.py::test_bad": "failed",
        "tests/test_a.py::test_expected_failure": "xfailed",
        "tests/test_a.py::test_setup_error": "error",
        "tests/test_a.py::test_skipped": "skipped",
        "tests/test_a.py::test_param[1]": "passed",
        "tests/test_a.py::test_param[2]": "failed",
        "tests/test_b.py": "collection_error",
    }
    assert report.exit_code == 1 and not report.timed_out
    assert report.passing == [
        "tests/test_a.py::test_expected_failure",
        "tests/test_a.py::test_ok",
        "tests/test_a.py::test_param[1]",
    ]
    assert "tests/test_a.py::test_skipped" not in report.failing
    assert "boom" in report.output  # the failure output is kept for instructions
    # The results went to the host's own folder: nothing of them is in the workspace
    # (the sandbox keeps an empty .tachy there, hidden from commands).
    assert [p.name for p in root.joinpath(".tachy").glob("**/*")] in ([], [".gitignore"])


def test_a_hanging_suite_is_cut_at_its_limit_keeping_finished_tests(tmp_path):
    hang = "import time\n\ndef test_first():\n    pass\n\ndef test_hangs():\n    time.sleep(600)\n"
    root = tmp_path
    (root / "tests").mkdir()
    (root / "tests" / "test_h.py").write_text(hang)
    report = run_tests_in(root, COMMAND, timeout_s=5)
    assert report.timed_out and report.exit_code is None
    assert report.outcomes == {"tests/test_h.py::test_first": "passed"}
    assert not report.passed("tests/test_h.py::test_hangs")
