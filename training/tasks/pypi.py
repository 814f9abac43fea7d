"""Projects from PyPI, ready for the task builder: fetch a source distribution, find its
tests, snapshot the repository and make a virtual environment its tests run in.

    project = prepare_pypi("more-itertools==11.2.1", Path("tasks/"))
    project.repo        # tasks/repos/more-itertools (a clean snapshot)
    project.env         # "envs/more-itertools" (relative to the set)
    project.test_command  # "{python} -m pytest -p no:cacheprovider ... -q tests"

Nothing is committed: the sdist is downloaded at build time (`pip download
--no-binary :all:`), extracted safely, and the project's own installation is removed
from the environment again, so its tests import the repository copy (PYTHONPATH is
the import root: "src" for a src layout, else the repository itself).

A project that cannot give tasks raises ProjectSkip with the reason (no such project,
no tests in its sdist, an install that fails); the builder records it and goes on.
"""

from __future__ import annotations

import email.parser
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable
from configparser import ConfigParser
from configparser import Error as ConfigError
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# Projects known to build end to end (small, pure Python, tests in the sdist, suites
# of seconds), fastest first; versions pinned so a set can be rebuilt identically.
# Measured with --max-tasks 20 on 2 busy cores: tasks per minute (validated share of
# mutants tried): toolz 17 (91%), inflection 29 (87%), python-slugify 22 (87%),
# semver 9.5 (77%), tabulate 6 (67%), boltons 6 (44%), more-itertools 3.4 (71%).
# Left out: jmespath 1.1.0 (its sdist lacks tests/__init__.py, so 5 of 6 test modules
# fail to import), idna 3.20 (6,400 tests, 15 s a run: 1.4 tasks per minute),
# sortedcontainers 2.4.0 (no tests in its sdist).
DEFAULT_PROJECTS = (
    "toolz==1.2.0",
    "inflection==0.5.1",
    "python-slugify==9.2.0",
    "semver==3.1.2",
    "tabulate==0.10.0",
    "boltons==26.2.0",
    "more-itertools==11.2.1",
)

PIP_TIMEOUT_S = 600.0
READY_MARK = ".tachy-ready"  # in the environment: the source it was made for

# What a snapshot leaves out: version control, build output, caches.
SNAPSHOT_IGNORE = shutil.ignore_patterns(
    ".git", ".hg", ".svn", "__pycache__", "*.pyc", "*.pyo", "*.egg-info", ".eggs", "build",
    "dist", ".tox", ".nox", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", "venv",
    ".coverage",
)  # fmt: skip
TEST_DIR_NAMES = ("tests", "test", "testing")
# Files never mutated: packaging, test helpers, documentation, examples, benchmarks.
NOT_SOURCE_NAMES = frozenset({"setup.py", "conftest.py", "noxfile.py", "fabfile.py"})
NOT_SOURCE_DIRS = frozenset(
    {"docs", "doc", "examples", "example", "benchmarks", "benchmark", "bench", "tools",
     "scripts", "bin", "tests", "test", "testing", "build", "dist"}
)  # fmt: skip
TEST_EXTRAS = ("test", "tests", "testing")


class ProjectSkip(Exception):
    """A project that gives no tasks; the message is the reason (shown and recorded)."""


@dataclass
class Project:
    """A repository the builder can mutate: a clean snapshot and how to test it."""

    name: str  # directory names and task ids: "more-itertools"
    source: str  # "pypi:more-itertools==11.2.1", "synthetic:seed=7", "local:/path"
    repo: Path  # the clean snapshot (DIR/repos/NAME)
    test_command: str  # the whole suite; {python} is the interpreter
    pytest_base: str  # test_command without its test paths and -q (for focused reruns)
    source_files: list[str]  # repository-relative files the mutations go into
    test_files: list[str]  # restored before scoring
    env: str = ""  # "envs/NAME" relative to the set, "" = the interpreter running tachy
    alternatives: list[tuple[str, str]] = field(default_factory=list)  # (command, base)


@dataclass
class Layout:
    import_root: str  # "src" or "."
    test_paths: list[str]  # what pytest is given: directories or files
    test_files: list[str]  # every file under the test paths
    source_files: list[str]


def project_name(spec: str) -> str:
    """The normalised distribution name of a requirement spec ("More_Itertools>=1" ->
    "more-itertools"); ProjectSkip for something that is not one."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not match:
        raise ProjectSkip(f"{spec!r} is not a project name or requirement (e.g. toolz==1.2.0)")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _pip_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip gave no output"])[-1]


def fetch_sdist(spec: str, dest: Path) -> Path:
    """Download the source distribution of `spec` into dest; the archive's path."""
    command = [
        sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
        "--quiet", "--disable-pip-version-check", spec, "-d", str(dest),
    ]  # fmt: skip
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ProjectSkip(f"downloading {spec} took over {PIP_TIMEOUT_S:.0f} s") from None
    archives = [p for p in dest.iterdir() if p.name.endswith((".tar.gz", ".zip", ".tgz"))]
    if run.returncode != 0 or not archives:
        raise ProjectSkip(f"no source distribution of {spec}: {_pip_error(run.stderr)}")
    return archives[0]


def extract(archive: Path, dest: Path) -> Path:
    """Unpack an sdist safely (no absolute paths, no `..`, no links out, no devices) and
    return its project root (the archive's single top-level directory)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    parts = PurePosixPath(name).parts
                    if name.startswith("/") or ".." in parts or "\\" in name:
                        raise ProjectSkip(f"{archive.name}: unsafe member {name!r}")
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(dest, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise ProjectSkip(f"{archive.name}: cannot extract ({exc})") from None
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return dest


def read_metadata(root: Path) -> tuple[str, str]:
    """(name, version) from the sdist's PKG-INFO."""
    try:
        text = (root / "PKG-INFO").read_text(encoding="utf-8", errors="replace")
    except OSError:
        raise ProjectSkip(f"{root.name}: no PKG-INFO (not a source distribution)") from None
    info = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = info.get("Name"), info.get("Version")
    if not name or not version:
        raise ProjectSkip(f"{root.name}: PKG-INFO names no Name or Version")
    return project_name(name), version


def _is_test_file(name: str) -> bool:
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _files_under(root: Path, rel: str) -> list[str]:
    path = root / rel
    if path.is_file():
        return [rel]
    return sorted(
        p.relative_to(root).as_posix()
        for p in path.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def find_layout(root: Path) -> Layout:
    """Where a project's importable code and its tests are; ProjectSkip without tests.

    Tests: a top-level tests/, test/ or testing/ directory; else tests/ directories
    inside the packages (toolz/tests); else test_*.py files at the top level.
    """
    src = root / "src"
    import_root = "src" if src.is_dir() and any(src.glob("*/__init__.py")) else "."
    code_root = root / import_root
    test_paths = [
        name
        for name in TEST_DIR_NAMES
        if (root / name).is_dir() and any(_is_test_file(p.name) for p in (root / name).rglob("*"))
    ][:1]
    if not test_paths:
        test_paths = sorted(
            p.relative_to(root).as_posix()
            for p in code_root.glob("*/**/tests")
            if p.is_dir() and any(_is_test_file(q.name) for q in p.rglob("*"))
        )
        # Keep the outermost ones only (toolz/tests holds no nested tests to add).
        test_paths = [p for p in test_paths if not any(p.startswith(q + "/") for q in test_paths)]
    if not test_paths:
        test_paths = sorted(p.name for p in root.iterdir() if p.is_file() and _is_test_file(p.name))
    if not test_paths:
        raise ProjectSkip(
            "it has no tests (no tests/ or test/ directory, no tests inside the package, "
            "no test_*.py files)"
        )
    test_files = [f for path in test_paths for f in _files_under(root, path)]
    if (root / "conftest.py").is_file():
        test_files.append("conftest.py")
    in_tests = set(test_files)
    source_files = []
    for path in sorted(code_root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        inner = path.relative_to(code_root).parts
        if rel in in_tests or path.name in NOT_SOURCE_NAMES or _is_test_file(path.name):
            continue
        if any(part in NOT_SOURCE_DIRS or part.startswith(".") for part in inner[:-1]):
            continue
        helper = path.name.startswith(("setup", "noxfile", "tasks", "_version", "version"))
        if len(inner) == 1 and import_root == "." and helper:
            continue  # a top-level helper script, not the project's code
        source_files.append(rel)
    if not source_files:
        raise ProjectSkip("no Python source files to put bugs into were found")
    return Layout(import_root, test_paths, test_files, source_files)


def pytest_commands(layout: Layout) -> list[tuple[str, str]]:
    """(command, base) pairs to try in order: as configured, then with the project's
    addopts dropped (they often name plugins or coverage options)."""
    # Added to PYTHONPATH, not replacing it: the test runner puts its plugin there.
    env = (
        f'PYTHONPATH={layout.import_root}"${{PYTHONPATH:+:$PYTHONPATH}}" '
        if layout.import_root != "."
        else ""
    )
    paths = " ".join(shlex.quote(p) for p in layout.test_paths)
    pairs = []
    for extra in ("", " -o addopts="):
        base = (
            f"{env}{{python}} -m pytest -p no:cacheprovider --continue-on-collection-errors{extra}"
        )
        pairs.append((f"{base} -q {paths}", base))
    return pairs


def snapshot(source: Path, target: Path) -> None:
    """Copy a repository without build output, caches and version control."""
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target, ignore=SNAPSHOT_IGNORE, symlinks=False)


# ------------------------------------------------------------------ dependencies
def _requirement_lines(path: Path) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-", ".", "/")) and "://" not in line:
            out.append(line)
    return out


def read_test_requirements(root: Path) -> tuple[list[str], list[str]]:
    """(extras, requirements) the project names for its tests, where that is simple to
    read: extras called test/tests/testing (pyproject or setup.cfg), PEP 735 dependency
    groups of those names, and requirements-test*.txt / requirements/test*.txt files."""
    extras: list[str] = []
    requirements: list[str] = []
    try:
        pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        pyproject = {}
    optional = pyproject.get("project", {}).get("optional-dependencies", {})
    extras += [name for name in TEST_EXTRAS if name in optional]
    groups = pyproject.get("dependency-groups", {})
    for name in TEST_EXTRAS:
        requirements += [r for r in groups.get(name, []) if isinstance(r, str)]
    cfg = ConfigParser()
    try:
        cfg.read(root / "setup.cfg", encoding="utf-8")
        if cfg.has_section("options.extras_require"):
            extras += [n for n in TEST_EXTRAS if cfg.has_option("options.extras_require", n)]
    except ConfigError:
        pass
    patterns = ("requirements-test*.txt", "requirements_test*.txt", "test-requirements*.txt",
                "test_requirements*.txt", "requirements/test*.txt", "requirements/tests*.txt")  # fmt: skip
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            requirements += _requirement_lines(path)
    return sorted(set(extras)), list(dict.fromkeys(requirements))


def _pip(python: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    command = [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    try:
        return subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ProjectSkip(f"pip {' '.join(args[:2])} took over {PIP_TIMEOUT_S:.0f} s") from None


def make_env(root: Path, env_dir: Path, name: str, log: Callable[[str], None]) -> None:
    """A virtual environment with pytest, the project's dependencies and its test
    dependencies, but not the project itself (its tests import the repository copy)."""
    if env_dir.exists():
        shutil.rmtree(env_dir)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(env_dir)],
            check=True, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise ProjectSkip(f"cannot create a virtual environment: {exc}") from None
    python = env_dir / "bin" / "python"
    extras, requirements = read_test_requirements(root)
    target = f".[{','.join(extras)}]" if extras else "."
    run = _pip(python, ["install", "pytest", target, *requirements], root)
    if run.returncode != 0 and (extras or requirements):
        log(f"{name}: its test dependencies did not install ({_pip_error(run.stderr)}); "
            "trying without them")  # fmt: skip
        run = _pip(python, ["install", "pytest", "."], root)
    if run.returncode != 0:
        raise ProjectSkip(f"pip cannot install it: {_pip_error(run.stderr)}")
    run = _pip(python, ["uninstall", "-y", name], root)
    if run.returncode != 0:
        raise ProjectSkip(f"cannot uninstall it again: {_pip_error(run.stderr)}")


def prepare_pypi(spec: str, out: Path, log: Callable[[str], None] = lambda _: None) -> Project:
    """Fetch, snapshot and install one PyPI project into the task set `out`.

    An environment and snapshot made earlier for the same name are reused (a resumed
    build keeps its repository byte for byte); a spec pinning another version than the
    one there is refused."""
    name = project_name(spec)
    repo, env_dir = out / "repos" / name, out / "envs" / name
    mark = env_dir / READY_MARK
    if mark.is_file() and repo.is_dir():
        source = mark.read_text(encoding="utf-8").strip()
        pinned = re.search(r"==\s*([^\s;,]+)", spec)
        if pinned and source != f"pypi:{name}=={pinned.group(1)}":
            raise ProjectSkip(
                f"{out} already holds {source}, not {spec}; build into another directory"
            )
        log(f"{name}: reusing {repo} and {env_dir}")
    else:
        with tempfile.TemporaryDirectory(prefix="tachy-sdist-") as tmp:
            log(f"{name}: downloading the source distribution of {spec}")
            archive = fetch_sdist(spec, Path(tmp) / "dl")
            root = extract(archive, Path(tmp) / "src")
            real_name, version = read_metadata(root)
            if real_name != name:
                raise ProjectSkip(f"{spec} unpacked as {real_name!r}, not {name!r}")
            source = f"pypi:{name}=={version}"
            find_layout(root)  # no tests: skip before installing anything
            snapshot(root, repo)
            log(f"{name}: installing its dependencies into {env_dir}")
            make_env(root, env_dir, name, log)
        mark.write_text(source + "\n", encoding="utf-8")
    layout = find_layout(repo)
    commands = pytest_commands(layout)
    return Project(
        name=name,
        source=source,
        repo=repo,
        test_command=commands[0][0],
        pytest_base=commands[0][1],
        source_files=layout.source_files,
        test_files=layout.test_files,
        env=f"envs/{name}",
        alternatives=commands[1:],
    )


def prepare_local(path: Path, out: Path, name: str | None = None) -> Project:
    """A project from a local directory (tests, and repositories not on PyPI): its
    snapshot is taken into the set; its tests run with the interpreter running tachy."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise ProjectSkip(f"{path} is not a directory")
    name = name or project_name(path.name)
    repo = out / "repos" / name
    if not repo.is_dir():
        find_layout(path)
        snapshot(path, repo)
    layout = find_layout(repo)
    commands = pytest_commands(layout)
    return Project(
        name=name,
        source=f"local:{path}",
        repo=repo,
        test_command=commands[0][0],
        pytest_base=commands[0][1],
        source_files=layout.source_files,
        test_files=layout.test_files,
        alternatives=commands[1:],
    )
