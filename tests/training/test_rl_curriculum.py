"""The RL curriculum (training/rl/curriculum.py): pass-rate estimates per task and family,
tasks chosen at the edge of the model's competence, groups without signal dropped, a
hint for what was not solved, a schedule that fades to none, and a state that resumes."""

from __future__ import annotations

import pytest

from training.rl.config import RLConfig
from training.rl.curriculum import Curriculum, CurriculumError, HintSchedule, hint_note
from training.tasks.taskset import Mutation

FAMILIES = {"a-1": "misspelled_name", "a-2": "misspelled_name", "b-1": "mutation"}


def test_only_tasks_strictly_between_0_and_1_or_unknown_are_chosen():
    c = Curriculum(FAMILIES, seed=0)
    assert c.record("a-1", [True, True, True, True], step=0, hint=0) is False  # no signal
    assert c.record("a-2", [True, False, False, False], step=0, hint=0) is True
    assert c.record("b-1", [False] * 4, step=0, hint=0) is False
    assert c.estimate("a-1", 1) == 1.0 and c.estimate("a-2", 1) == 0.25
    assert c.estimate("b-1", 1) == 0.0
    chosen = {c.next(step=1, hint_level=0)[0] for _ in range(30)}
    assert chosen == {"a-2"}  # solved and unsolved tasks wait
    families = c.family_estimates(1)
    assert families["misspelled_name"]["pass_rate"] == 0.625
    assert families["misspelled_name"]["tasks_frontier"] == 1
    assert families["mutation"]["pass_rate"] == 0.0
    # Outcomes older than the horizon no longer count: the model has changed since.
    assert c.estimate("a-1", 0 + c.horizon) is None
    assert "a-1" in {c.next(step=c.horizon, hint_level=0)[0] for _ in range(60)}


def test_an_unsolved_group_comes_back_with_a_hint_while_the_schedule_gives_one():
    c = Curriculum(FAMILIES, seed=0)
    c.record("b-1", [False] * 4, step=0, hint=0)
    assert c.next(step=1, hint_level=0)[1] == 0  # no hint in the schedule: none given
    assert c.next(step=1, hint_level=2) == ("b-1", 2)
    # A hinted group does not move the un-hinted estimate.
    c.record("b-1", [True, False, False, False], step=1, hint=2)
    assert c.estimate("b-1", 2) == 0.0
    assert c.next(step=2, hint_level=2)[1] == 0  # the queue is empty again


def test_the_hint_schedule_fades_to_none_before_the_end_and_bad_ones_are_refused():
    s = HintSchedule.parse("prefix,line,file@0.6")
    levels = [s.level(step, 10) for step in range(10)]
    assert levels == [3, 3, 2, 2, 1, 1, 0, 0, 0, 0]
    assert HintSchedule.parse("none").level(0, 10) == 0
    for bad, message in [
        ("prefix,line", "fraction"),
        ("prefix@1.0", "before the run does"),
        ("hint@0.5", "unknown hint level 'hint'"),
        ("line@x", "not a number"),
    ]:
        with pytest.raises(CurriculumError, match=message):
            HintSchedule.parse(bad)
    with pytest.raises(ValueError, match="unknown hint level"):
        RLConfig(tasks="t", init="i", hints="lines@0.5").check()


def test_the_hint_reads_as_a_reviewer_note():
    site = Mutation(operator="x", path="pkg/m.py", line=12, original="a", mutated="b")
    other = Mutation(operator="x", path="pkg/n.py", line=3, original="a", mutated="b")
    assert hint_note([site], 0) == ""
    assert (
        hint_note([site, other], 1) == "Reviewer's note: the bug is in `pkg/m.py` and `pkg/n.py`."
    )
    assert hint_note([site], 2) == "Reviewer's note: look at line 12 of `pkg/m.py`."


def test_a_resumed_curriculum_chooses_what_the_uninterrupted_one_would():
    a = Curriculum(FAMILIES, seed=3)
    for step in range(3):
        a.record("a-2", [True, False], step, 0)
        a.record("b-1", [False, False], step, 0)
        a.next(step, 1)
    saved = a.state_dict()
    b = Curriculum(FAMILIES, seed=3)
    b.load_state_dict(saved)
    assert [a.next(5, 1) for _ in range(10)] == [b.next(5, 1) for _ in range(10)]


def test_a_held_out_evaluation_of_the_first_n_covers_every_family():
    from training.rl.controller import _spread

    families = {"a-1": "x", "a-2": "x", "a-3": "x", "b-1": "y", "c-1": "z", "c-2": "z"}
    assert _spread(sorted(families), families) == ["a-1", "b-1", "c-1", "a-2", "c-2", "a-3"]
