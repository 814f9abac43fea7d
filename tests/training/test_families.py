"""Task families graded by difficulty: each family's sites, the multi-site ones, the
family list of `tachy tasks build --families`, and a build of every family that the
scripted expert then solves through the real tools."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from training.tasks import families, mutate
from training.tasks.families import (
    FAMILIES,
    FamilyError,
    fixed_files,
    missing_import_sites,
    misspelled_name_sites,
    parse_families,
    rename_tokens,
    renamed_symbol_variants,
    wrong_keyword_sites,
    wrong_literal_sites,
)
from training.tasks.taskset import Mutation

SHAPES = '''"""Shapes."""

from __future__ import annotations

import math

from .text import label


class Circle:
    def __init__(self, radius: float) -> None:
        self.radius = radius

    def area(self) -> float:
        return round(math.pi * self.radius**2, ndigits=2)

    def describe(self) -> str:
        return label("A circle", self.radius)


def total_area(shapes: list) -> float:
    """The sum of the areas."""
    total = 0.0
    for shape in shapes:
        total += shape.area()
    return total
'''


def _applied(source: str, m: Mutation) -> str:
    return mutate.apply_mutation(source, m)


def test_a_misspelled_name_is_one_no_module_defines():
    sites = misspelled_name_sites(SHAPES, "shapes.py")
    assert sites
    names = {n.id for n in ast.walk(ast.parse(SHAPES)) if isinstance(n, ast.Name)}
    for m in sites:
        buggy = _applied(SHAPES, m)
        new = set(mutate._dump(ast.parse(buggy)).split("'")) - set(
            mutate._dump(ast.parse(SHAPES)).split("'")
        )
        assert new and not new & names
        assert mutate.revert_text(buggy, m) == SHAPES
    described = " ".join(m.description for m in sites)
    assert "attribute `radius`" in described and "name `shape`" in described


def test_a_removed_import_is_the_whole_statement_and_never_the_future_one():
    sites = missing_import_sites(SHAPES, "shapes.py")
    assert [m.original for m in sites] == ["import math\n", "from .text import label\n"]
    for m in sites:
        buggy = _applied(SHAPES, m)
        old, new = mutate.fix_edit(buggy, m)
        assert buggy.replace(old, new, 1) == SHAPES


def test_wrong_literals_and_keywords():
    literals = wrong_literal_sites(SHAPES, "shapes.py")
    assert any('"A circle"' in m.original for m in literals)
    typo = next(m for m in literals if '"A circle"' in m.original)
    assert families.literal_shown(typo, "E   AssertionError: assert 'A cirle: 2' == 'A circle: 2'")
    assert not families.literal_shown(typo, "E   assert 3 == 4")
    keywords = wrong_keyword_sites(SHAPES, "shapes.py")
    assert [m.mutated for m in keywords] == ["digits"]  # ndigits= given as digits=


def test_the_family_list_is_checked_before_anything_runs():
    assert parse_families("all") == list(FAMILIES)
    assert parse_families("mutation,misspelled_name") == ["misspelled_name", "mutation"]
    with pytest.raises(FamilyError, match=r"unknown family typo_name.*misspelled_name"):
        parse_families("typo_name")
    tiers = [f.tier for f in FAMILIES.values()]
    assert tiers == sorted(tiers)  # easiest first


def test_a_rename_changes_names_but_no_attribute():
    source = "from .m import helper\n\n\ndef f(x):\n    return helper(x) + x.helper\n"
    assert rename_tokens(source, "helper", "aid") == (
        "from .m import aid\n\n\ndef f(x):\n    return aid(x) + x.helper\n"
    )


def test_an_unfinished_rename_leaves_every_call_site_in_other_modules():
    files = {
        "pkg/util.py": "def squash(text):\n    return ' '.join(text.split())\n",
        "pkg/a.py": "from .util import squash\n\n\ndef title(t):\n    return squash(t).title()\n",
        "pkg/b.py": "from .util import squash\n\n\ndef lower(t):\n    return squash(t).lower()\n",
        "tests/test_util.py": "from pkg.util import squash\n\n\ndef test_squash():\n    assert squash(' a ') == 'a'\n",
    }
    source = ["pkg/util.py", "pkg/a.py", "pkg/b.py"]
    [variant] = renamed_symbol_variants(files, source, ["tests/test_util.py"], seed=0)
    new = variant.extra["new_name"]
    assert variant.extra["old_name"] == "squash" and new != "squash"
    assert {m.path for m in variant.sites} == {"pkg/a.py", "pkg/b.py"}
    assert len(variant.sites) == 4
    # The definition and the tests are renamed in the bug; the call sites are not.
    assert f"def {new}(" in variant.buggy["pkg/util.py"]
    assert new in variant.buggy["tests/test_util.py"]
    assert "squash" in variant.buggy["pkg/a.py"] and new not in variant.buggy["pkg/a.py"]
    assert fixed_files(variant.buggy, variant.sites) == variant.fixed


@pytest.mark.timeout(900)
def test_every_family_builds_from_a_synthetic_project_and_the_expert_solves_it(tmp_path):
    out = tmp_path / "set"
    tachy = [sys.executable, "-m", "server.cli"]
    built = subprocess.run(
        [*tachy, "tasks", "build", "--synthetic", "1", "--seed", "4", "--templates", "train",
         "--families", "all", "--max-tasks", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    tasks = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert {t["metadata"]["family"] for t in tasks} == set(FAMILIES)
    for task in tasks:
        family = task["metadata"]["family"]
        sites = len(task["metadata"]["sites"])
        assert sites == {"two_files": 2}.get(family, sites if family == "renamed_symbol" else 1)
        assert sites >= 2 or family != "renamed_symbol"
        if family == "mutation":
            assert task["id"].rsplit("-", 1)[0] == "synthetic-train-4"
        else:
            assert f"-{family}-" in task["id"]
    record = json.loads((out / "build.json").read_text())
    assert set(record["projects"]["synthetic-train-4"]["families"]) == set(FAMILIES)
    demos = subprocess.run(
        [*tachy, "tasks", "demos", str(out), "--out", str(tmp_path / "demos.jsonl")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert demos.returncode == 0, demos.stderr[-3000:]
    assert f"{len(tasks)}/{len(tasks)} tasks solved" in demos.stderr
    bad = subprocess.run(
        [*tachy, "tasks", "build", "--synthetic", "1", "--families", "misspeled_name",
         "--out", str(tmp_path / "never")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "unknown family misspeled_name" in bad.stderr
    assert not (tmp_path / "never").exists()
