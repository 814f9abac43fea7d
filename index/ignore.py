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

# Names that hold credentials. Matched against the file name only.
SECRET_NAME_PATTERNS = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    ".netrc",
    ".pgpass",
    ".pypirc",
    ".npmrc",
    "credentials",
    "credentials.json",
    "*.kdbx",
)
# Templates that document which variables exist without holding values.
SECRET_NAME_EXCEPTIONS = (".env.example", ".env.sample", ".env.template", ".env.dist")


# One compiled pattern: this runs on every file name of every walk.
_SECRET_RE = re.compile("|".join(fnmatch.translate(p) for p in SECRET_NAME_PATTERNS))


def is_secret_name(name: str) -> bool:
    """True when a file name looks like it holds credentials."""
    return name not in SECRET_NAME_EXCEPTIONS and _SECRET_RE.match(name) is not None


class IgnoreRules:
    """Answers "is this workspace-relative path ignored?" with git's semantics.

    Each directory's ignore files apply to paths below it, deeper files override
    shallower ones, and a path inside an ignored directory is ignored whatever a
    negation says (as in git). Spec files are read lazily and cached; call
    `invalidate()` after an ignore file changes.
    """

    def __init__(
        self,
        root: Path,
        names: tuple[str, ...] = IGNORE_FILES,
        hidden_dirs: frozenset[str] = ALWAYS_HIDDEN_DIRS,
    ) -> None:
        self.root = root
        self._names = names
        self._hidden_dirs = hidden_dirs
        self._specs: dict[str, pathspec.GitIgnoreSpec | None] = {}
        self._dir_cache: dict[str, bool] = {}

    def invalidate(self) -> None:
        self._specs.clear()
        self._dir_cache.clear()

    def _spec(self, directory: str) -> pathspec.GitIgnoreSpec | None:
        if directory not in self._specs:
            lines: list[str] = []
            for name in self._names:
                try:
                    text = (self.root / directory / name).read_text(
                        encoding="utf-8", errors="replace"
                    )
                except OSError:
                    continue
                lines.extend(text.splitlines())
            self._specs[directory] = pathspec.GitIgnoreSpec.from_lines(lines) if lines else None
        return self._specs[directory]

    def _decide(self, rel: str, is_dir: bool) -> bool:
        """Ignore decision for `rel` alone, not counting its ancestors."""
        parts = rel.split("/")
        if is_dir and parts[-1] in self._hidden_dirs:
            return True
        ignored = False
        for depth in range(len(parts)):
            directory = "/".join(parts[:depth])
            spec = self._spec(directory)
            if spec is None:
                continue
            sub = "/".join(parts[depth:]) + ("/" if is_dir else "")
            result = spec.check_file(sub)
            if result.include is not None:
                ignored = result.include
        return ignored

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
):
    """Yield (rel_path, is_dir) for every visible entry under `start`, sorted, depth first
    (each directory is followed by its own entries, as in a tree).

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
