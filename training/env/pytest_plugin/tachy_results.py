"""A pytest plugin that records every test's outcome, one JSON object per line, in
the file named by $TACHY_RESULTS: {"nodeid": ..., "outcome": ...}. Loaded by
training.env.testrun through PYTEST_ADDOPTS="-p tachy_results".

Outcomes: passed, failed, error (setup or teardown failed), skipped, xfailed, xpassed,
and collection_error (for a module that failed to import). A line is written as soon
as a test's teardown ends, so a run killed by its time limit keeps what finished.
"""

from __future__ import annotations

import json
import os

_path = os.environ.get("TACHY_RESULTS")
_current: dict[str, str] = {}


def _write(nodeid: str, outcome: str) -> None:
    if not _path:
        return
    with open(_path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"nodeid": nodeid, "outcome": outcome}) + "\n")


def pytest_runtest_logreport(report) -> None:
    nodeid = report.nodeid
    xfail = hasattr(report, "wasxfail")
    if report.when == "setup":
        if report.failed:
            _current[nodeid] = "error"
        elif report.skipped:
            _current[nodeid] = "xfailed" if xfail else "skipped"
    elif report.when == "call":
        if xfail:
            _current[nodeid] = "xfailed" if report.skipped else "xpassed"
        elif report.passed:
            _current[nodeid] = "passed"
        elif report.failed:
            _current[nodeid] = "failed"
        else:
            _current[nodeid] = "skipped"
    elif report.when == "teardown":
        outcome = _current.pop(nodeid, "error")
        if report.failed and outcome in ("passed", "skipped", "xfailed"):
            outcome = "error"
        _write(nodeid, outcome)


def pytest_collectreport(report) -> None:
    if report.failed:
        _write(report.nodeid or "<collection>", "collection_error")
