"""Instructions written from failing tests' output: the symptom, never the fix."""

from __future__ import annotations

from training.tasks.instruction import (
    MAX_CHARS,
    failure_sections,
    section_title,
    write_instruction,
)

SHORT_OUTPUT = """\
FF.                                                                      [100%]
=================================== FAILURES ===================================
________________________________ TestMean.test_mean ____________________________
tests/test_stats.py:12: in test_mean
    assert mean([1, 2, 3, 6]) == 3
stats/core.py:8: in mean
    return sum(values) / (len(values) - 1)
E   assert 4.0 == 3
E    +  where 4.0 = mean([1, 2, 3, 6])
_________________________________ test_median __________________________________
tests/test_stats.py:20: in test_median
    assert median([3, 1, 2]) == 2
stats/core.py:15: in median
    return ordered[len(ordered) // 2 + 1]
E   IndexError: list index out of range
=========================== short test summary info ============================
FAILED tests/test_stats.py::TestMean::test_mean - assert 4.0 == 3
FAILED tests/test_stats.py::test_median - IndexError: list index out of range
2 failed, 1 passed in 0.05s
"""

F2P = ["tests/test_stats.py::TestMean::test_mean", "tests/test_stats.py::test_median"]
BUGGY = "    return sum(values) / (len(values) - 1)"


def test_section_titles_match_pytest():
    assert section_title("tests/t.py::TestA::test_b[1-x]") == "TestA.test_b[1-x]"
    assert section_title("tests/t.py::test_c") == "test_c"
    sections = failure_sections(SHORT_OUTPUT)
    assert set(sections) == {"TestMean.test_mean", "test_median"}
    assert sections["test_median"][-1] == "E   IndexError: list index out of range"


def test_instruction_shows_the_symptom_not_the_bug():
    text = write_instruction("stats-1", F2P, SHORT_OUTPUT, test_files=["tests/test_stats.py"])
    assert "`tests/test_stats.py::TestMean::test_mean`" in text
    assert "assert mean([1, 2, 3, 6]) == 3" in text
    assert "E   assert 4.0 == 3" in text
    assert "IndexError: list index out of range" in text
    # Frames inside the library (where the bug is) are left out.
    assert "stats/core.py" not in text
    assert "len(values) - 1" not in text and "// 2 + 1" not in text
    assert "mutat" not in text.lower()
    assert "It expects 3 but gets 4.0." in text


def test_hidden_lines_are_dropped_wherever_they_appear():
    output = SHORT_OUTPUT.replace(
        "    assert mean([1, 2, 3, 6]) == 3", "    assert mean([1, 2, 3, 6]) == 3  # " + BUGGY
    )
    text = write_instruction("stats-1", F2P, output, hide=[BUGGY])
    assert BUGGY.strip() not in text


def test_phrasing_is_chosen_by_task_id():
    first = write_instruction("stats-1", F2P, SHORT_OUTPUT)
    assert first == write_instruction("stats-1", F2P, SHORT_OUTPUT)
    openings = {write_instruction(f"stats-{n}", F2P, SHORT_OUTPUT).split("`")[0] for n in range(40)}
    assert len(openings) >= 3


def test_output_without_sections_falls_back_to_the_summary():
    output = "FAILED tests/test_stats.py::test_median - IndexError: list index out of range\n"
    text = write_instruction("stats-2", ["tests/test_stats.py::test_median"], output)
    assert "IndexError: list index out of range" in text


def test_no_output_still_names_the_test():
    text = write_instruction("stats-3", ["tests/test_x.py::test_y"], "")
    assert "tests/test_x.py::test_y" in text


def test_long_output_is_cut():
    frames = "".join(
        f"tests/test_stats.py:{n}: in helper_{n}\n    helper_{n + 1}()\n" for n in range(200)
    )
    output = "_____ test_median _____\n" + frames + "E   RecursionError: " + "x" * 500 + "\n"
    text = write_instruction("stats-4", ["tests/test_stats.py::test_median"], output)
    assert len(text) <= MAX_CHARS
    assert "RecursionError" in text


def test_many_failures_are_counted():
    f2p = [f"tests/test_stats.py::test_{n}" for n in range(7)]
    text = write_instruction("stats-5", f2p, SHORT_OUTPUT)
    assert "7 tests fail in all" in text


COLLECTION_OUTPUT = """\
==================================== ERRORS ====================================
__________________ ERROR collecting tests/test_cache.py ___________________
tests/test_cache.py:7: in <module>
    from lib.cache import LRU
lib/cache.py:84: in <module>
    _MISSING = make_sentinel(var_name='_MISSING')
lib/types.py:101: in make_sentinel
    raise ValueError('sentinels only at module scope')
E   ValueError: sentinels only at module scope
=========================== short test summary info ============================
ERROR tests/test_cache.py - ValueError: sentinels only at module scope
"""


def test_a_module_failing_to_import_is_reported_from_its_collection_error():
    f2p = ["tests/test_cache.py::test_lru", "tests/test_cache.py::test_lri"]
    text = write_instruction("cache-1", f2p, COLLECTION_OUTPUT)
    assert "E   ValueError: sentinels only at module scope" in text
    assert "tests/test_cache.py:7: in <module>" in text
    assert "lib/types.py" not in text and "make_sentinel(" not in text
    # The shared section is shown once.
    assert text.count("ValueError: sentinels") == 1


def test_fixture_errors_count_as_the_tests():
    output = (
        "___________ ERROR at setup of test_db ___________\n"
        "tests/conftest.py:5: in db\n    return connect()\nE   OSError: no database\n"
    )
    text = write_instruction("db-1", ["tests/test_db.py::test_db"], output)
    assert "OSError: no database" in text


def test_wording_agrees_with_the_number_of_tests():
    for n in range(20):
        one = write_instruction(f"s-{n}", F2P[:1], SHORT_OUTPUT)
        two = write_instruction(f"s-{n}", F2P, SHORT_OUTPUT)
        assert " are failing" not in one and " is failing" not in two
        assert "` fail with" not in one and "` fails with" not in two


def test_expectation_follows_the_assert_source_order():
    from training.tasks.instruction import _expectation

    # expected value written first: pytest prints it first too
    reversed_order = [
        "    assert human == inflection.humanize(underscore)",
        "E   AssertionError: assert 'Employee salary' == 'Employee_salary'",
    ]
    assert _expectation(reversed_order) == (
        "It expects 'Employee salary' but gets 'Employee_salary'. "
    )
    # neither side computed: no guess
    assert _expectation(["    assert a == b", "E   assert 4.0 == 3"]) == ""
