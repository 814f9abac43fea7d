"""Synthetic repositories: deterministic by seed, clean suites pass, mutants get caught."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from training.env.testrun import run_tests_in
from training.tasks.mutate import apply_mutation, find_mutations, sample_mutations
from training.tasks.synthetic import SyntheticError, SyntheticRepo, generate_repo


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _command(repo: SyntheticRepo) -> str:
    return repo.test_command.replace("{python}", sys.executable)


def test_same_seed_same_bytes_and_seeds_differ(tmp_path):
    a = generate_repo(11, tmp_path / "a")
    b = generate_repo(11, tmp_path / "b")
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert a.name == b.name and a.source_files == b.source_files
    others = [_files(generate_repo(seed, tmp_path / f"s{seed}").root) for seed in (12, 13, 14)]
    assert all(files != _files(tmp_path / "a") for files in others)
    assert len({tuple(sorted(f)) for f in others}) > 1  # different layouts, not just values


def test_layout_and_contents(tmp_path):
    for seed in range(30):
        repo = generate_repo(seed, tmp_path / str(seed))
        modules = [f for f in repo.source_files if not f.endswith("__init__.py")]
        assert 2 <= len(modules) <= 5, (seed, modules)
        assert 15 <= repo.tests <= 60, (seed, repo.tests)
        assert (repo.root / "pyproject.toml").is_file() and (repo.root / "README.md").is_file()
        assert repo.package_dir == repo.root / repo.name
        assert all(t.startswith("tests/test_") for t in repo.test_files[:-1])
        assert repo.test_files[-1] == "tests/conftest.py"  # the per-test time limit
        tested = "\n".join((repo.root / t).read_text() for t in repo.test_files)
        for rel in modules:
            tree = ast.parse((repo.root / rel).read_text())
            assert ast.get_docstring(tree)
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    assert ast.get_docstring(node), (rel, node.name)
                    assert f"{node.name}(" in tested, (rel, node.name)  # every function tested
        assert not list(repo.root.rglob("__pycache__"))


def test_functions_call_across_modules(tmp_path):
    crossing = 0
    for seed in range(10):
        repo = generate_repo(seed, tmp_path / str(seed))
        for rel in repo.source_files:
            crossing += "from ." in (repo.root / rel).read_text()
    assert crossing >= 5


def test_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(SyntheticError, match="not empty"):
        generate_repo(1, tmp_path / "x")
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("seed", [0, 5])
def test_clean_suite_passes_in_the_sandbox(tmp_path, seed):
    repo = generate_repo(seed, tmp_path / "repo")
    report = run_tests_in(repo.root, _command(repo), timeout_s=120)
    assert report.exit_code == 0, report.output
    assert len(report.passing) == repo.tests
    assert report.failing == []


def test_most_mutants_break_a_test(tmp_path):
    """Kill fraction over a sample of mutants (measured: see the report in the PR)."""
    killed = tried = 0
    for seed in (3, 8):
        repo = generate_repo(seed, tmp_path / str(seed))
        candidates = [
            m
            for rel in repo.source_files
            for m in find_mutations((repo.root / rel).read_text(), rel)
        ]
        assert len(candidates) > 40
        for m in sample_mutations(candidates, 5, seed=seed):
            path = repo.root / m.path
            clean = path.read_text()
            path.write_text(apply_mutation(clean, m))
            try:
                report = run_tests_in(repo.root, _command(repo), timeout_s=120)
            finally:
                path.write_text(clean)
            tried += 1
            killed += bool(report.failing)
    assert killed / tried >= 0.75, f"{killed}/{tried} mutants caught"
