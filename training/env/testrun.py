"""Running a task's tests and reading each test's outcome.

Tests run as the agent's commands do, through agent.sandbox.Sandbox (no network, the
time, process and memory limits), with a small pytest plugin
(training/env/pytest_plugin/tachy_results.py) recording every test's outcome in a file of
the workspace. The plugin is added through PYTEST_ADDOPTS, so any pytest command works
unchanged.

    report = await run_tests(sandbox, "python -m pytest -q tests", timeout_s=120)
    report.outcomes["tests/test_a.py::test_x"]  # "passed", "failed", ...
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from agent.sandbox import Sandbox, SandboxConfig
from agent.workspace import Workspace

PLUGIN_DIR = Path(__file__).resolve().parent / "pytest_plugin"
OUTPUT_KEEP = 16 * 1024  # characters of the run's output kept in a report

# Outcomes that count as a test passing (xfailed: it failed as its author expects).
PASSING = frozenset({"passed", "xfailed"})


@dataclass
class TestReport:
    __test__ = False  # not a pytest test class, whatever its name
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> outcome
    exit_code: int | None = None
    timed_out: bool = False
    output: str = ""  # the start and end of what the run printed
    duration_s: float = 0.0

    def passed(self, nodeid: str) -> bool:
        """True when the test ran and passed; a test that did not run did not pass."""
        return self.outcomes.get(nodeid) in PASSING

    @property
    def passing(self) -> list[str]:
        return sorted(n for n, o in self.outcomes.items() if o in PASSING)

    @property
    def failing(self) -> list[str]:
        """Tests that ran and did not pass (failed, error, xpassed, collection_error)."""
        return sorted(n for n, o in self.outcomes.items() if o not in PASSING | {"skipped"})


class _Line(msgspec.Struct):
    nodeid: str
    outcome: str


_line = msgspec.json.Decoder(_Line)


def wrap_command(command: str, results_path: str) -> str:
    """The test command with the outcome plugin loaded and writing to results_path."""
    plugin = shlex.quote(str(PLUGIN_DIR))
    return (
        f"TACHY_RESULTS={shlex.quote(results_path)} "
        f'PYTHONPATH={plugin}"${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'PYTEST_ADDOPTS="-p tachy_results ${{PYTEST_ADDOPTS:-}}" '
        f"{command}"
    )


def read_results(path: Path) -> dict[str, str]:
    """node id -> outcome; a line cut short by a kill is skipped."""
    outcomes: dict[str, str] = {}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return outcomes
    for raw in data.splitlines():
        try:
            item = _line.decode(raw)
        except msgspec.DecodeError:
            continue
        outcomes[item.nodeid] = item.outcome
    return outcomes


async def run_tests(sandbox: Sandbox, command: str, *, timeout_s: float) -> TestReport:
    """Run a pytest command in the sandbox's workspace; every test's outcome."""
    # The outcomes go to a directory of the host's, bound into the sandbox for this
    # command alone: not in the workspace, whose .tachy/ commands cannot write and
    # where the agent's own commands could have planted a forged file.
    results_dir = Path(tempfile.mkdtemp(prefix="tachy-test-results-"))
    results = results_dir / f"{uuid.uuid4().hex}.jsonl"
    try:
        run = await sandbox.run(
            wrap_command(command, str(results)),
            timeout_s=timeout_s,
            writable=(str(results_dir),),
        )
        outcomes = read_results(results)
    finally:
        shutil.rmtree(results_dir, ignore_errors=True)
    head = run.head.decode("utf-8", "replace")
    tail = run.tail.decode("utf-8", "replace")
    if run.omitted_bytes > 0:
        output = f"{head[: OUTPUT_KEEP // 2]}\n[... output cut ...]\n{tail[-OUTPUT_KEEP // 2 :]}"
    else:
        output = (head + tail)[-OUTPUT_KEEP:]
    return TestReport(
        outcomes=outcomes,
        exit_code=run.exit_code,
        timed_out=run.timed_out,
        output=output,
        duration_s=run.duration_s,
    )


def run_tests_in(
    directory: str | Path,
    command: str,
    *,
    timeout_s: float,
    config: SandboxConfig | None = None,
) -> TestReport:
    """run_tests on a plain directory, from synchronous code (the task builders)."""
    sandbox = Sandbox(Workspace(directory), config)
    return asyncio.run(run_tests(sandbox, command, timeout_s=timeout_s))
