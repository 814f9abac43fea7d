"""Which files the agent may see: ignore rules and secret files.

Ignore rules are `.gitignore` files (at any depth, git semantics, whether or not the
workspace is a git repository) and `.tachyignore` files (same syntax, for things the
agent must not see even though git tracks them). `.git/` and `.tachy/` are always
hidden. Secret files (`.env`, private keys, credential stores) are hidden unless the
user opts in.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

import pathspec

IGNORE_FILES = (".gitignore", ".tachyignore")
ALWAYS_HIDDEN_DIRS = frozenset({".git", ".tachy", ".hg", ".svn"})

# Names that hold credentials, as other tools that guard them recognise them (git
# hosting secret scanners, editors' and agents' ignore defaults). Matched against the
# file name only. Users add their own with TACHY_SECRET_PATTERNS (see below).
SECRET_NAME_PATTERNS = (
    # environment files
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    # keys and certificates with private parts
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "*.keytab",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    # credential stores of common tools
    ".netrc",
    "_netrc",
    ".pgpass",
    ".pypirc",
    ".npmrc",
    ".yarnrc.yml",
    ".git-credentials",
    ".htpasswd",
    ".boto",
    ".s3cfg",
    "kubeconfig",
    "credentials",
    "credentials.json",
    "credentials.csv",
    "credentials.yml",
    "credentials.yaml",
    "credentials.toml",
    "credentials.ini",
    "credentials.xml",
    "secrets.json",
    "secrets.yaml",
    "secrets.yml",
    "secrets.toml",
    "*.kdbx",
    # infrastructure state, which holds every secret of what it manages
    "*.tfstate",
    "*.tfstate.*",
    "*.tfvars",
)
# Templates that document which variables exist without holding values.
SECRET_NAME_EXCEPTIONS = (".env.example", ".env.sample", ".env.template", ".env.dist")
# More secret name patterns, from the user: globs separated by commas or colons.
SECRET_PATTERNS_VARIABLE = "TACHY_SECRET_PATTERNS"


def secret_name_patterns() -> tuple[str, ...]:
    """The built-in secret name patterns plus the user's (TACHY_SECRET_PATTERNS)."""
    extra = os.environ.get(SECRET_PATTERNS_VARIABLE, "").replace(":", ",")
    return SECRET_NAME_PATTERNS + tuple(p.strip() for p in extra.split(",") if p.strip())


# One compiled pattern: this runs on every file name of every walk. Case is ignored:
# on macOS and Windows `.ENV` is the very file a dotenv loader opens, and `ID_RSA` or
# `Credentials.json` hold what their lower-case names do anywhere.
_SECRET_RE = re.compile(
    "|".join(fnmatch.translate(p) for p in secret_name_patterns()), re.IGNORECASE
)
_SECRET_EXCEPTIONS_FOLDED = frozenset(name.casefold() for name in SECRET_NAME_EXCEPTIONS)


def is_secret_name(name: str) -> bool:
    """True when a file name looks like it holds credentials, in any letter case."""
    return name.casefold() not in _SECRET_EXCEPTIONS_FOLDED and _SECRET_RE.match(name) is not None


# Directories that hold a project's environments, dependencies and tool caches.
# Git-ignored, they stay out of listings, search and the index like anything ignored,
# but builds and tests need them (a test run imports from .venv), so commands see them
# as they are (what they hold is installed, not the user's own) and read_file reads a
# file in one when it is named (secret names still refused). Any directory holding a
# pyvenv.cfg (a virtual environment by another name) counts too.
TOOL_DIR_NAMES = frozenset(
    {
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        ".eggs",
    }
)


def is_tool_dir(root: Path, rel: str) -> bool:
    """Whether the directory `rel` under `root` holds an environment or a tool's cache.
    (Build output such as build/ or dist/ is not one: it stays hidden when ignored.)"""
    name = rel.rsplit("/", 1)[-1]
    if name in TOOL_DIR_NAMES or name.endswith(".egg-info"):
        return True
    return os.path.isfile(root / rel / "pyvenv.cfg")


class IgnoreRules:
    """Answers "is this workspace-relative path ignored?" with git's semantics.

    Each directory's ignore files apply to paths below it, deeper files override
    shallower ones, and a path inside an ignored directory is ignored whatever a
    negation says (as in git). Spec files are read lazily and cached; call
    `invalidate()` after an ignore file changes.

    With `tighten_only` (what binds an agent run) rules can only grow: a path ignored
    under the ignore files as they were first read stays ignored whatever those files
    say later, so an agent that rewrites or adds an ignore file (a negation `!x`)
    cannot uncover what the user's rules hid.
    """

    def __init__(
        self,
        root: Path,
        names: tuple[str, ...] = IGNORE_FILES,
        hidden_dirs: frozenset[str] = ALWAYS_HIDDEN_DIRS,
        *,
        tighten_only: bool = False,
    ) -> None:
        self.root = root
        self._names = names
        self._hidden_dirs = hidden_dirs
        self._specs: dict[str, pathspec.GitIgnoreSpec | None] = {}
        self._dir_cache: dict[str, bool] = {}
        self.tighten_only = tighten_only
        # directory -> its rule lines when first read, and the spec they make.
        self._first: dict[str, tuple[tuple[str, ...], pathspec.GitIgnoreSpec | None]] = {}
        self._drifted = False  # some ignore file differs from its first reading

    def invalidate(self) -> None:
        self._specs.clear()
        self._dir_cache.clear()

    def _read_lines(self, directory: str) -> tuple[str, ...]:
        lines: list[str] = []
        for name in self._names:
            try:
                text = (self.root / directory / name).read_text(encoding="utf-8", errors="replace")
            except (OSError, ValueError):
                continue
            lines.extend(text.splitlines())
        return tuple(lines)

    def _spec(self, directory: str) -> pathspec.GitIgnoreSpec | None:
        if directory not in self._specs:
            lines = self._read_lines(directory)
            spec = pathspec.GitIgnoreSpec.from_lines(lines) if lines else None
            self._specs[directory] = spec
            first = self._first.setdefault(directory, (lines, spec))
            if first[0] != lines:
                self._drifted = True
        return self._specs[directory]

    def _first_spec(self, directory: str) -> pathspec.GitIgnoreSpec | None:
        self._spec(directory)  # records the first reading if there was none
        return self._first[directory][1]

    def _decide(self, rel: str, is_dir: bool) -> bool:
        """Ignore decision for `rel` alone, not counting its ancestors."""
        parts = rel.split("/")
        if is_dir and parts[-1].casefold() in self._hidden_dirs:
            return True
        ignored = self._decide_with(self._spec, parts, is_dir)
        if not ignored and self.tighten_only and self._drifted:
            ignored = self._decide_with(self._first_spec, parts, is_dir)
        return ignored

    @staticmethod
    def _decide_with(spec_of, parts: list[str], is_dir: bool) -> bool:
        ignored = False
        for depth in range(len(parts)):
            spec = spec_of("/".join(parts[:depth]))
            if spec is None:
                continue
            sub = "/".join(parts[depth:]) + ("/" if is_dir else "")
            result = spec.check_file(sub)
            if result.include is not None:
                ignored = result.include
        return ignored

    def ignored_from_the_start(self, rel: str, is_dir: bool = False) -> bool:
        """Whether `rel` is ignored under the ignore files as first read (for an agent
        run: as they were before it could change them). A directory the run's own
        additions ignore is ignored, but not "from the start"."""
        if rel in ("", "."):
            return False
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            here, here_is_dir = parts[:depth], is_dir or depth < len(parts)
            if here_is_dir and here[-1].casefold() in self._hidden_dirs:
                return True
            if self._decide_with(self._first_spec, here, here_is_dir):
                return True
        return False

    def read_before_change(self, directory: str) -> None:
        """Take the first reading of `directory`'s ignore files now, before someone
        changes them: with `tighten_only`, what they hide now stays hidden."""
        self._spec(directory)

    def is_ignored(self, rel: str, is_dir: bool = False) -> bool:
        """True when `rel` (a '/'-separated path relative to the root) is ignored."""
        if rel in ("", "."):
            return False
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            cached = self._dir_cache.get(prefix)
            if cached is None:
                cached = self._decide(prefix, True)
                self._dir_cache[prefix] = cached
            if cached:
                return True
        if is_dir:
            cached = self._dir_cache.get(rel)
            if cached is None:
                cached = self._dir_cache[rel] = self._decide(rel, True)
            return cached
        return self._decide(rel, False)


def walk_visible(
    root: Path,
    rules: IgnoreRules,
    start: str = "",
    *,
    allow_secrets: bool = False,
    max_depth: int | None = None,
    hidden_inodes: set[int] | frozenset[int] = frozenset(),
):
    """Yield (rel_path, is_dir) for every visible entry under `start`, sorted, depth first
    (each directory is followed by its own entries, as in a tree). Entries whose inode
    is in `hidden_inodes` (hidden earlier in an agent run, and moved since) are left out.

    Ignored directories are not descended into; `max_depth=1` lists `start` only.
    Symlinks are reported but never followed (a symlink to a directory is listed as a
    file-like entry).
    """

    def children(directory: str) -> list[tuple[str, bool]]:
        try:
            with os.scandir(root / directory if directory else root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return []
        visible = []
        for entry in entries:
            rel = f"{directory}/{entry.name}" if directory else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if rules.is_ignored(rel, is_dir):
                continue
            if not is_dir and not allow_secrets and is_secret_name(entry.name):
                continue
            if hidden_inodes and entry.inode() in hidden_inodes:
                continue
            visible.append((rel, is_dir))
        return visible

    if max_depth is not None and max_depth < 1:
        return
    # A stack of iterators, one per directory being listed, so that deep trees do not
    # hit the recursion limit.
    stack = [iter(children(start))]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        rel, is_dir = item
        yield rel, is_dir
        if is_dir and (max_depth is None or len(stack) < max_depth):
            stack.append(iter(children(rel)))
