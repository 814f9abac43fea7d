"""The layering DESIGN.md states, checked on the import graph of the source.

Imports point one way: server -> agent -> index; training -> agent, model, index;
model -> kernels (and model.policy -> agent.policy, whose Policy protocol the local
model implements). `agent` never names `model` or `training`, not even by a string;
nothing imports `server` or `training` but their own modules and the entry point
(server.cli). `agent`, `index` and the language server load no torch at import time.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "index", "server", "model", "kernels", "training", "bench")

# package -> the packages of ours it may import (besides itself).
ALLOWED = {
    "index": set(),
    "kernels": set(),
    "agent": {"index"},
    "model": {"kernels"},
    "server": {"agent", "index"},
    "training": {"agent", "model", "index", "kernels"},
    "bench": set(PACKAGES),
}
# Single modules with a wider reach, and why.
EXCEPTIONS = {
    "model/policy.py": {"agent"},  # LocalPolicy implements agent.policy.Policy
    # The entry point: `tachy model`, `tachy tasks`, `tachy train` and the local: policy
    # kind, each imported only when that command runs.
    "server/cli.py": {"model", "training"},
}
MODULE_PATH = re.compile(rf"^({'|'.join(PACKAGES)})(\.[A-Za-z_]\w*)+$")


def modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def imported(path: Path) -> set[str]:
    """Top-level packages of ours that `path` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", [p for p in PACKAGES if p != "bench"])
def test_imports_point_one_way(package):
    wrong = []
    for path in modules(package):
        rel = path.relative_to(ROOT).as_posix()
        allowed = ALLOWED[package] | EXCEPTIONS.get(rel, set()) | {package}
        for name in sorted(imported(path) - allowed):
            wrong.append(f"{rel} imports {name}")
    assert wrong == []


def test_agent_never_names_model_or_training_even_by_a_string():
    named = []
    for path in modules("agent"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = MODULE_PATH.match(node.value.strip())
                if match and match.group(1) in ("model", "training", "server"):
                    named.append(f"{path.relative_to(ROOT)}: {node.value!r}")
    assert named == []


def test_no_import_cycles_between_packages():
    graph = {p: set() for p in PACKAGES if p != "bench"}
    for package in graph:
        for path in modules(package):
            graph[package] |= imported(path) - {package, "bench"}
    # server.cli is the entry point: what it imports lazily per command is no cycle.
    for package, targets in graph.items():
        for target in targets:
            assert package not in _reachable(graph, target, skip=("server",)), (
                f"{package} -> {target} -> ... -> {package}"
            )


def _reachable(graph: dict[str, set[str]], start: str, skip: tuple[str, ...]) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt not in seen and nxt not in skip:
                seen.add(nxt)
                stack.append(nxt)
    return seen


@pytest.mark.parametrize(
    "modules_",
    [
        "agent.executor, agent.tools, agent.policy, agent.sandbox",
        "index.indexer, index.search",
        "server.lsp",
        "server.cli",
    ],
)
def test_the_editor_path_loads_no_torch_at_import(modules_):
    code = f"import sys; import {modules_}; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
