"""The task-building pipeline on small local projects (no network)."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import msgspec
import pytest

from tests.training.projects import TESTS, make_env, write_project
from training.tasks.build import (
    BuildError,
    BuildOptions,
    LocalSource,
    TaskSet,
    build_tasks,
    limit_pass_to_pass,
)
from training.tasks.cli import check_task_runs
from training.tasks.pypi import (
    ProjectSkip,
    extract,
    find_layout,
    project_name,
    read_test_requirements,
)
from training.tasks.taskset import BUILD_FILE, TASKS_FILE, BuildRecord, load_tasks

# Each test runs real test suites in the sandbox (several seconds each on 2 busy cores).
pytestmark = pytest.mark.timeout(300)


def _build(project: Path, out: Path, **options) -> BuildRecord:
    defaults = {"max_tasks": 3, "workers": 2, "timeout_s": 60.0}
    return build_tasks(
        [LocalSource(project)], out, BuildOptions(**{**defaults, **options}), command="test"
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, BuildRecord]:
    root = tmp_path_factory.mktemp("build")
    project = write_project(root / "calc-project")
    out = root / "set"
    return project, out, _build(project, out)


def test_build_writes_validated_tasks(built):
    project, out, record = built
    figures = record.projects["calc-project"]
    tasks = load_tasks(out)
    assert [t.id for t in tasks] == [f"calc-project-{n}" for n in range(1, len(tasks) + 1)]
    assert 1 <= len(tasks) <= 3 == figures.tasks or len(tasks) == figures.tasks
    assert figures.suite_tests == figures.suite_passing == 7
    assert figures.mutations_tried >= figures.mutations_validated >= len(tasks)
    assert figures.skipped == ""
    assert (out / "repos" / "calc-project" / "calc" / "__init__.py").is_file()
    for task in tasks:
        assert task.repo == "repos/calc-project" and task.env == ""
        assert list(task.files) == ["calc/__init__.py"]
        assert task.test_files == ["tests/test_calc.py"]
        assert task.metadata.project == "calc-project"
        assert task.metadata.source == f"local:{project.resolve()}"
        mutation = task.metadata.mutation
        assert mutation is not None and mutation.path == "calc/__init__.py"
        # Every test is either broken by the bug or still passing.
        names = ["add", "clamp_low", "clamp_high", "clamp_inside", "mean", "mean_empty"]
        names.append("count_positive")
        assert sorted(task.fail_to_pass + task.pass_to_pass) == sorted(
            f"tests/test_calc.py::test_{name}" for name in names
        )
        # The instruction names a failing test and never shows the buggy line.
        assert any(t.split("::")[1] in task.instruction for t in task.fail_to_pass)
        buggy_line = task.files["calc/__init__.py"].splitlines()[mutation.line - 1].strip()
        assert buggy_line not in task.instruction
        assert "mutat" not in task.instruction.lower()
        assert len(task.instruction) <= 1500


def test_built_tasks_pass_their_check(built):
    _, out, _ = built
    for task in load_tasks(out):
        verdict = check_task_runs(out.resolve(), task)
        assert verdict.ok, verdict.problems


def test_build_json_records_the_project(built):
    _, out, record = built
    on_disk = msgspec.json.decode((out / BUILD_FILE).read_bytes(), type=BuildRecord)
    assert on_disk.command == "test"
    assert on_disk.projects["calc-project"].tasks == record.projects["calc-project"].tasks


def test_rebuilding_resumes_without_duplicates(built, tmp_path):
    project, out, _ = built
    copy = tmp_path / "set"
    shutil.copytree(out, copy)
    before = load_tasks(copy)
    # The same build again adds nothing: the project already has its tasks.
    record = _build(project, copy)
    assert [t.id for t in load_tasks(copy)] == [t.id for t in before]
    assert record.projects["calc-project"].tasks == len(before)
    # An interrupted write (a half line) is dropped, and a bigger build continues the
    # numbering without repeating a mutation.
    with open(copy / TASKS_FILE, "ab") as handle:
        handle.write(b'{"id": "calc-project-99", "repo": "rep')
    _build(project, copy, max_tasks=len(before) + 2)
    after = load_tasks(copy)
    assert [t.id for t in after[: len(before)]] == [t.id for t in before]
    assert len({t.id for t in after}) == len(after)
    keys = [(t.metadata.mutation.line, t.metadata.mutation.mutated) for t in after]
    assert len(set(keys)) == len(keys)
    assert len(after) > len(before)


def test_src_layout_projects_import_from_src(tmp_path):
    project = write_project(tmp_path / "srcproj", src=True)
    record = _build(project, tmp_path / "set", max_tasks=1)
    assert record.projects["srcproj"].suite_passing == 7
    (task,) = load_tasks(tmp_path / "set")
    assert list(task.files) == ["src/calc/__init__.py"]
    assert task.test_command.startswith("PYTHONPATH=src")


def test_project_without_tests_is_skipped_with_its_reason(tmp_path):
    project = write_project(tmp_path / "untested", tests=None)
    record = _build(project, tmp_path / "set")
    figures = record.projects["local:" + str(project)]
    assert figures.tasks == 0 and "it has no tests" in figures.skipped
    assert not (tmp_path / "set" / TASKS_FILE).exists()


def test_hanging_suite_is_skipped_by_its_timeout(tmp_path):
    hanging = TESTS + "\n\ndef test_hangs():\n    import time\n    time.sleep(600)\n"
    project = write_project(tmp_path / "hangs", tests=hanging)
    record = _build(project, tmp_path / "set", timeout_s=4.0)
    figures = record.projects["hangs"]
    assert figures.tasks == 0 and "did not finish within 4 s" in figures.skipped


def test_failing_suite_is_skipped(tmp_path):
    failing = "def test_broken():\n    assert False\n"
    project = write_project(tmp_path / "broken", tests=failing)
    record = _build(project, tmp_path / "set")
    assert "no test passed" in record.projects["broken"].skipped


def test_a_second_build_into_the_same_directory_is_refused(tmp_path):
    first = TaskSet(tmp_path, "one")
    try:
        with pytest.raises(BuildError, match="another build is writing"):
            TaskSet(tmp_path, "two")
    finally:
        first.close()
    TaskSet(tmp_path, "three").close()


def test_a_corrupt_task_file_stops_the_build(tmp_path):
    (tmp_path / TASKS_FILE).write_text("not json\n")
    with pytest.raises(BuildError, match="not a valid task"):
        TaskSet(tmp_path, "x")


@dataclasses.dataclass(frozen=True)
class OwnEnvSource(LocalSource):
    """A local project run in its own environment inside the set, as PyPI projects are."""

    def prepare(self, out, log):
        project = super().prepare(out, log)
        make_env(out / "envs" / project.name)
        return dataclasses.replace(project, env=f"envs/{project.name}")


def test_a_project_with_its_own_environment_builds_under_tmp(tmp_path):
    """The set in mktemp -d, its environment in DIR/envs/ (hidden by the sandbox's
    private /tmp unless bound in): the suite runs, tasks are validated and check."""
    project = write_project(tmp_path / "calc-project")
    out = Path(tempfile.mkdtemp(prefix="tachy-set-", dir="/tmp"))
    try:
        sources = [OwnEnvSource(project)]
        options = BuildOptions(max_tasks=1, workers=2, timeout_s=60.0)
        record = build_tasks(sources, out, options, command="test")
        figures = record.projects["calc-project"]
        assert figures.skipped == "" and figures.suite_passing == 7 and figures.tasks == 1
        (task,) = load_tasks(out)
        assert task.env == "envs/calc-project"
        verdict = check_task_runs(out, task)
        assert verdict.ok, verdict.problems
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_pass_to_pass_is_capped_deterministically():
    f2p = ["tests/test_a.py::test_0"]
    p2p = [f"tests/test_a.py::test_{i}" for i in range(1, 400)]
    p2p += [f"tests/test_b.py::test_{i}" for i in range(400)]
    kept = limit_pass_to_pass(p2p, f2p, 100, "task-1")
    assert len(kept) == 100 and kept == sorted(kept)
    assert sum(t.startswith("tests/test_a.py") for t in kept) == 50
    assert kept == limit_pass_to_pass(p2p, f2p, 100, "task-1")
    small = p2p[:10]
    assert limit_pass_to_pass(small, f2p, 100, "x") == sorted(small)


def test_layouts(tmp_path):
    src = tmp_path / "src-layout"
    (src / "src" / "pkg").mkdir(parents=True)
    (src / "src" / "pkg" / "__init__.py").write_text("X = 1\n")
    (src / "src" / "pkg" / "core.py").write_text("def f():\n    return 1\n")
    (src / "tests").mkdir()
    (src / "tests" / "test_core.py").write_text("def test_f():\n    pass\n")
    (src / "tests" / "data.txt").write_text("x\n")
    (src / "docs").mkdir()
    (src / "docs" / "conf.py").write_text("x = 1\n")
    layout = find_layout(src)
    assert layout.import_root == "src" and layout.test_paths == ["tests"]
    assert layout.test_files == ["tests/data.txt", "tests/test_core.py"]
    assert layout.source_files == ["src/pkg/__init__.py", "src/pkg/core.py"]

    inner = tmp_path / "inner"
    (inner / "pkg" / "tests").mkdir(parents=True)
    (inner / "pkg" / "__init__.py").write_text("")
    (inner / "pkg" / "mod.py").write_text("A = 1\n")
    (inner / "pkg" / "tests" / "__init__.py").write_text("")
    (inner / "pkg" / "tests" / "test_mod.py").write_text("def test_a():\n    pass\n")
    layout = find_layout(inner)
    assert layout.import_root == "." and layout.test_paths == ["pkg/tests"]
    assert layout.source_files == ["pkg/__init__.py", "pkg/mod.py"]

    flat = tmp_path / "flat"
    (flat / "mod").mkdir(parents=True)
    (flat / "mod" / "__init__.py").write_text("A = 1\n")
    (flat / "test_mod.py").write_text("def test_a():\n    pass\n")
    (flat / "setup.py").write_text("")
    layout = find_layout(flat)
    assert layout.test_paths == ["test_mod.py"] and layout.source_files == ["mod/__init__.py"]

    with pytest.raises(ProjectSkip, match="no tests"):
        find_layout(tmp_path / "src-layout" / "src")


def test_test_requirements(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project.optional-dependencies]\ntest = ["hypothesis"]\nfast = ["x"]\n'
        '[dependency-groups]\ntests = ["pytest-mock>=3", {include-group = "x"}]\n'
    )
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "testing.txt").write_text(
        "# comment\n-r base.txt\nattrs>=20  # why\n-e .\n"
    )
    extras, requirements = read_test_requirements(tmp_path)
    assert extras == ["test"]
    assert requirements == ["pytest-mock>=3", "attrs>=20"]


def test_project_names_and_unsafe_archives(tmp_path):
    assert project_name("More_Itertools==10.5.0") == "more-itertools"
    assert project_name("toolz") == "toolz"
    with pytest.raises(ProjectSkip):
        project_name("==1.0")
    import zipfile

    archive = tmp_path / "evil-1.0.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../escape.py", "x = 1\n")
    with pytest.raises(ProjectSkip, match="unsafe member"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "escape.py").exists()
