"""Does a repository's history hold files the model must not see?

Hiding `.env` from the working tree is not enough when an old commit still has it:
`git show HEAD~3:.env` or `git grep KEY $(git rev-list --all)` inside a command would
print it. So before commands may see a repository's `.git`, every path its history
ever held (on every ref) is checked against the rules that hide files from the model:
secret names and `.tachyignore`. (Git-ignored paths are not counted: files committed
once and ignored later are common and harmless, and the agent's own git commands need
`.git`.) When something is found, the sandbox hides `.git` from commands.

The check is incremental: the tips already checked are kept (in `.tachy/`, which
commands cannot see or change), and only commits not reachable from them are read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
from pathlib import Path

from agent.hosttools import host_path, host_which
from index import beneath, statedir

log = logging.getLogger(__name__)

STATE_FILE = ".tachy/git-history.json"
CHECK_TIMEOUT_S = 60.0
MAX_REPORTED = 20


class HistoryCheck:
    """Remembers, for one workspace, which history paths the model must not see."""

    def __init__(self, root: Path, hides, git_dir: Path | None = None) -> None:
        """`hides(path) -> bool` says whether a path (from the history) must stay
        hidden from the model. `git_dir`: the repository to read, when not the
        workspace's own `.git` (a nested, bare or separate one)."""
        self.root = root
        self.hides = hides
        self.git_dir = git_dir or root / ".git"
        if git_dir is None:
            self.state_file = STATE_FILE
        else:
            key = hashlib.sha256(os.fsencode(str(git_dir))).hexdigest()[:16]
            self.state_file = f"{statedir.STATE_DIR}/git-history-{key}.json"
        self.git = host_which("git", root)
        self._stamp: tuple | None = None
        self._state = self._load()

    def _load(self) -> dict:
        try:
            # No symlink is followed: .tachy is tachy's, whatever a command planted.
            data, _ = beneath.read_file(self.root, self.state_file, follow_links=False)
            state = json.loads(data.decode("utf-8"))
            if isinstance(state.get("tips"), list) and isinstance(state.get("found"), list):
                return state
        except (OSError, ValueError, AttributeError):
            pass
        return {"tips": [], "found": []}

    def _save(self) -> None:
        try:
            statedir.ensure(self.root)
            beneath.write_file(self.root, self.state_file, json.dumps(self._state).encode())
        except OSError as exc:
            log.warning("cannot keep the git history check in %s: %s", self.state_file, exc)

    def _refs_stamp(self) -> tuple:
        """Changes whenever a ref moves (a commit, fetch, branch or tag)."""
        git_dir = self.git_dir
        stamp = []
        for name in ("HEAD", "packed-refs"):
            with contextlib.suppress(OSError):
                info = os.stat(git_dir / name)
                stamp.append((name, info.st_mtime_ns, info.st_size))
        for directory, _, files in os.walk(git_dir / "refs"):
            for name in files:
                with contextlib.suppress(OSError):
                    info = os.stat(os.path.join(directory, name))
                    stamp.append((directory, name, info.st_mtime_ns))
        return tuple(sorted(stamp))

    def hidden_paths(self) -> list[str] | None:
        """History paths the model must not see (the first few), [] when there are
        none, None when the history could not be checked (no git, a broken or huge
        repository): the caller must then assume the worst."""
        if not self.git_dir.is_dir():
            return []
        if self.git is None:
            return None
        stamp = self._refs_stamp()
        if stamp == self._stamp:
            return self._state["found"]
        tips = self._tips()
        if tips is None:
            return None
        known = set(self._state["tips"])
        new = sorted(set(tips) - known)
        if new:
            paths = self._paths(new, sorted(known & set(tips)))
            if paths is None:
                return None
            found = list(self._state["found"])
            for path in sorted(paths):
                if len(found) >= MAX_REPORTED:
                    break
                if path not in found and self.hides(path):
                    found.append(path)
            self._state = {"tips": sorted(known | set(tips)), "found": found}
            self._save()
        self._stamp = stamp
        return self._state["found"]

    def _git(self, *args: str, timeout: float = CHECK_TIMEOUT_S) -> bytes | None:
        try:
            done = subprocess.run(
                [self.git, f"--git-dir={self.git_dir}", *args],
                capture_output=True,
                timeout=timeout,
                # Git's own configuration of this repository is not trusted to run
                # anything here: no pager, no fsmonitor, no external diff.
                env={
                    "PATH": host_path(self.root),
                    "HOME": "/nonexistent",
                    "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_CONFIG_GLOBAL": "/dev/null",
                    "GIT_OPTIONAL_LOCKS": "0",
                    "GIT_TERMINAL_PROMPT": "0",
                },
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("git %s failed: %s", args[0], exc)
            return None
        if done.returncode != 0:
            log.warning("git %s failed: %s", args[0], done.stderr.decode("utf-8", "replace")[:500])
            return None
        return done.stdout

    def _tips(self) -> list[str] | None:
        out = self._git("-c", "core.fsmonitor=false", "for-each-ref", "--format=%(objectname)")
        if out is None:
            return None
        tips = set(out.decode("ascii", "replace").split())
        head = self._git("rev-parse", "--verify", "--quiet", "HEAD")
        if head:
            tips.add(head.decode("ascii", "replace").strip())
        return sorted(tips)

    def _paths(self, new: list[str], old: list[str]) -> set[str] | None:
        """Every path touched by commits reachable from `new` but not from `old`."""
        out = self._git(
            "-c",
            "core.quotePath=false",
            "log",
            "--format=",
            "--name-only",
            "--no-renames",
            "-z",
            *new,
            "--not",
            *old,
            "--",
        )
        if out is None:
            return None
        return {os.fsdecode(p) for p in out.split(b"\0") if p.strip()}
