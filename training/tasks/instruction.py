"""A task's instruction, written the way a user reports a failing test.

    write_instruction("toolz-3", ["toolz/tests/test_itertoolz.py::test_take"], output,
                      test_files=[...], hide=["    return seq[:n - 1]"])

From pytest's output (preferably the failing tests rerun alone with --tb=short) it
takes the failing tests' sections: the frames in test files with their lines, and the
`E` lines (the assertion or exception). Frames inside the library are left out, and so
is any line holding one of the `hide` texts (the buggy line), so the instruction
names the symptom, never the place or the fix. The wording is one of a few
phrasings, picked from the task id (the same id always reads the same).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable

MAX_CHARS = 1500
MAX_EVIDENCE_LINES = 14
MAX_LINE = 160

_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")
_SETUP_ERROR = re.compile(r"^ERROR at (setup|teardown) of ")
_SECTION_END = re.compile(r"^(={3,}|-{3,} (Captured|generated)|_{3,} )")
_FRAME = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>\d+): (?P<rest>.*)$")
_SUMMARY = re.compile(r"^(FAILED|ERROR) (?P<nodeid>\S+)(?: - (?P<message>.*))?$")
_EQUALS = re.compile(r"^E\s+(?:AssertionError: )?assert (?P<got>.+?) == (?P<want>.+)$")

# {tests}: one or two test names; {be}/{fail}/{pass_} agree with how many are named.
_PHRASINGS = (
    "{The_tests} {tests} {be} failing:\n\n```\n{evidence}\n```\n\n{expect}Can you find "
    "the bug and fix it? The tests themselves are right.",
    "Running the test suite I get {count}, for example {tests}:\n\n```\n{evidence}\n```"
    "\n\n{expect}Please fix the code so the tests pass again, without changing the tests.",
    "{tests} {fail} with this:\n\n```\n{evidence}\n```\n\n{expect}Looks like a bug in the "
    "implementation. Please fix it (the tests describe the intended behaviour).",
    "Bug report: {tests} no longer {pass_}.\n\n```\n{evidence}\n```\n\n{expect}The "
    "expected behaviour is what the tests assert; fix the source, not the tests.",
)


def section_title(nodeid: str) -> str:
    """The title pytest gives a test's failure section: the node id after its file,
    with '::' as '.' ("tests/t.py::TestA::test_b[1]" -> "TestA.test_b[1]")."""
    return ".".join(nodeid.split("::")[1:]) or nodeid


def failure_sections(output: str) -> dict[str, list[str]]:
    """title -> the lines of that test's failure section in pytest's output (an error in
    a fixture counts as the test's; a module that failed to import is under "ERROR
    collecting PATH")."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        header = _HEADER.match(line)
        if header:
            title = _SETUP_ERROR.sub("", header.group(1))
            current = sections.setdefault(title, [])
            continue
        if current is not None and _SECTION_END.match(line):
            current = None
            continue
        if current is not None:
            current.append(line.rstrip())
    return sections


def _hidden(line: str, hide: list[str]) -> bool:
    text = line.strip()
    if text.startswith(("E ", ">")):
        text = text[1:].strip()
    return any(text == h or (len(h) >= 8 and h in line) for h in hide)


def evidence(
    lines: list[str], test_files: set[str], hide: list[str], show_source: bool = False
) -> list[str]:
    """The lines a user would paste: frames in test files with their code, E lines;
    with `show_source` the project's own frames too (never the interpreter's)."""
    kept: list[str] = []
    in_test_frame = False
    for line in lines:
        frame = _FRAME.match(line)
        if frame:
            path = frame.group("path").removeprefix("/workspace/")
            in_test_frame = path in test_files or _looks_like_test(path)
            in_test_frame |= show_source and not path.startswith("/")
            if in_test_frame:
                kept.append(f"{path}:{frame.group('line')}: {frame.group('rest')}")
            continue
        if line.startswith("E ") or line == "E":
            in_test_frame = False
            kept.append(line)
        elif in_test_frame and line.startswith("    "):
            kept.append(line)
    kept = [_clip(line) for line in kept if not _hidden(line, hide)]
    # The E lines matter most: keep them, and the last frames before them.
    if len(kept) > MAX_EVIDENCE_LINES:
        errors = [i for i, line in enumerate(kept) if line.startswith("E")]
        first_error = errors[0] if errors else len(kept)
        start = max(0, min(first_error - 4, len(kept) - MAX_EVIDENCE_LINES))
        kept = kept[start : start + MAX_EVIDENCE_LINES]
    return kept


def _looks_like_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py") or "/tests/" in f"/{path}"


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def _summary_lines(output: str, tests: list[str], hide: list[str]) -> list[str]:
    found = []
    for line in output.splitlines():
        match = _SUMMARY.match(line.strip())
        if match and match.group("nodeid") in tests and not _hidden(line, hide):
            found.append(_clip(line.strip()))
    return found


_SOURCE_EQUALS = re.compile(r"^\s*assert (?P<left>.+?) == (?P<right>.+)$")


def _expectation(lines: list[str]) -> str:
    """ "It expects X but gets Y." from an `E assert a == b` line, when the assert's
    source line shows which side is computed (a call) and which is the expected
    value; nothing when that is unclear (pytest prints the sides in source order)."""
    for i, line in enumerate(lines):
        match = _EQUALS.match(line)
        if not match:
            continue
        source = next(
            (_SOURCE_EQUALS.match(s) for s in reversed(lines[:i]) if _SOURCE_EQUALS.match(s)),
            None,
        )
        if source is None:
            continue
        left_call, right_call = "(" in source.group("left"), "(" in source.group("right")
        if left_call == right_call:
            continue
        left, right = match.group("got").strip(), match.group("want").strip()
        got, want = (left, right) if left_call else (right, left)
        if len(got) <= 60 and len(want) <= 60 and "where" not in got:
            return f"It expects {want} but gets {got}. "
    return ""


def _names(tests: list[str]) -> str:
    shown = [f"`{t}`" for t in tests[:2]]
    return " and ".join(shown)


def write_instruction(
    task_id: str,
    fail_to_pass: list[str],
    output: str,
    *,
    test_files: Iterable[str] = (),
    hide: Iterable[str] = (),
    show_source: bool = False,
    intro: str = "",
) -> str:
    """The instruction for a task whose failing tests printed `output`: the frames of
    the tests (and with `show_source` of the project's code, which point at the line),
    the error lines, less anything holding a `hide` text; `intro` opens it."""
    hide_list = [h.strip() for h in hide if h and h.strip()]
    files = set(test_files)
    sections = failure_sections(output)
    focus = fail_to_pass[:2]
    lines: list[str] = []
    used: set[str] = set()
    for nodeid in focus:
        # Its own section, or that of its module failing to import.
        title = section_title(nodeid)
        if title not in sections:
            title = f"ERROR collecting {nodeid.split('::', 1)[0]}"
        body = sections.get(title)
        if body is None or title in used:
            continue
        used.add(title)
        found = evidence(body, files, hide_list, show_source)
        if found:
            if lines:
                lines.append("")
            lines += found
        if len(lines) >= MAX_EVIDENCE_LINES:
            break
    if not lines:
        lines = _summary_lines(output, fail_to_pass, hide_list)
    if not lines:
        lines = [f"FAILED {t}" for t in focus]
    count = len(fail_to_pass)
    choice = zlib.crc32(task_id.encode()) % len(_PHRASINGS)
    template = _PHRASINGS[choice]
    one = len(focus) == 1
    fields = {
        "tests": _names(focus),
        "The_tests": "The test" if one else "The tests",
        "be": "is" if one else "are",
        "fail": "fails" if one else "fail",
        "pass_": "passes" if one else "pass",
        "count": f"{count} failing test{'s' if count != 1 else ''}",
        "expect": _expectation(lines),
    }
    opening = f"{intro}\n\n" if intro else ""
    text = opening + template.format(evidence="\n".join(lines), **fields)
    while len(text) > MAX_CHARS and len(lines) > 2:
        lines = lines[: len(lines) - 1]
        text = opening + template.format(evidence="\n".join(lines), **fields)
    if count > 2:
        text += f" ({count} tests fail in all.)"
    return text[:MAX_CHARS]
