"""Benchmark of the environment server (issue 7): sandbox resets and concurrency.

    python -m bench.envs [--json] [--quick] [--tasks DIR]

1. Reset latency (target < 50 ms at p95): `Env.reset()` after a typical rollout's
   changes (three files edited, a directory with two files added, a file deleted) for
   each copy-on-write strategy that works here (overlay, reflink, copy), on three
   repositories: a small synthetic package (~25 files), the running interpreter's
   standard library without its tests (~400 files) and with them (~2,000 files). The
   anchor, measured in the same run on the same file system after the same changes,
   is a plain `shutil.rmtree` + `shutil.copytree` of the repository. A reset covers
   killing the previous rollout's processes, restoring the tree, writing the task's
   files and building fresh Workspace and Sandbox objects.
2. Concurrency: N sandboxes (auto strategy) each running the small task's test suite
   (pytest, in bubblewrap) at the same time, for growing N; throughput in test runs
   per second, the N where adding sandboxes stops raising it (< 10 % gain), and
   peak RSS. Also: how long creating an idle sandbox takes and what a pool of them
   costs in memory.
3. Task-set build figures (tasks per minute, validated mutation fraction per
   project) copied from a task set's build.json with `--tasks DIR`; `"build": null`
   otherwise.

Prints one JSON document (`--json`) or a table on stdout, and a one-line summary on
stderr. Sandboxes live in a temporary workdir that is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import os
import resource
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench import common
from bench.common import ms
from training.env import snapshot
from training.env.pool import EnvLimits, EnvPool
from training.tasks.taskset import BUILD_FILE, BuildRecord, Task, TaskMeta, append_tasks

RESET_TARGET_MS = 50.0
MEDIUM_PACKAGES = (
    "json", "email", "asyncio", "concurrent", "importlib", "unittest", "xml", "http",
    "logging", "multiprocessing", "urllib", "sqlite3", "ctypes", "tomllib", "zoneinfo",
    "wsgiref", "xmlrpc", "html", "dbm", "curses", "re", "collections", "encodings",
)  # fmt: skip
LARGE_EXTRA = ("test",)
SIZES = ("small", "medium", "large")
# Plugins of tachy's own venv (hypothesis, pytest-lsp, ...) would dominate a tiny suite.
TEST_COMMAND = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {python} -m pytest -q -p no:cacheprovider tests"


# ------------------------------------------------------------------ inputs


def make_small(root: Path, modules: int = 10) -> None:
    """A package of small modules with one test file per module."""
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    for i in range(modules):
        (root / "pkg" / f"mod{i}.py").write_text(
            f"def f{i}(x):\n    return x + {i}\n\n\ndef g{i}(x):\n    return x * {i}\n"
        )
        (root / "tests" / f"test_mod{i}.py").write_text(
            f"from pkg.mod{i} import f{i}, g{i}\n\n\n"
            f"def test_f():\n    assert f{i}(1) == {1 + i}\n\n\n"
            f"def test_g():\n    assert g{i}(2) == {2 * i}\n"
        )
    (root / "README.md").write_text("# small\n")


def copy_stdlib(root: Path, packages: tuple[str, ...]) -> None:
    lib = Path(sysconfig.get_paths()["stdlib"])
    for name in packages:
        if (lib / name).is_dir():
            shutil.copytree(lib / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))


def make_taskset(directory: Path, sizes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """A task set with one task per repository size; returns per-size facts."""
    facts: dict[str, dict[str, Any]] = {}
    tasks = []
    for size in sizes:
        repo = directory / "repos" / size
        if size == "small":
            make_small(repo)
        else:
            copy_stdlib(repo, MEDIUM_PACKAGES + (LARGE_EXTRA if size == "large" else ()))
        files = sorted(
            str(p.relative_to(repo)) for p in repo.rglob("*.py") if p.stat().st_size > 100
        )
        target = files[len(files) // 2]
        tasks.append(
            Task(
                id=f"{size}-1",
                repo=f"repos/{size}",
                instruction="benchmark task",
                test_command=TEST_COMMAND if size == "small" else "{python} -c pass",
                fail_to_pass=["tests/test_mod0.py::test_f"],
                pass_to_pass=[],
                files={target: (repo / target).read_text(errors="replace") + "\n# bug\n"},
                timeout_s=120.0,
                metadata=TaskMeta(source="synthetic:bench", project=size),
            )
        )
        entries = list(repo.rglob("*"))
        facts[size] = {
            "files": sum(1 for p in entries if p.is_file()),
            "bytes": sum(p.stat().st_size for p in entries if p.is_file()),
            "edit_candidates": files,
        }
    append_tasks(directory, tasks)
    return facts


def mutate(root: Path, candidates: list[str], round_: int) -> None:
    """A typical rollout's footprint: three files edited, a directory with two new
    files, one file deleted."""
    for k in range(3):
        path = root / candidates[(round_ * 3 + k) % len(candidates)]
        with open(path, "a") as out:
            out.write(f"\n# edited in round {round_}\n")
    (root / "scratch_dir").mkdir(exist_ok=True)
    (root / "scratch_dir" / "a.txt").write_text("a")
    (root / "scratch_dir" / "b.py").write_text("b = 1\n")
    victim = root / candidates[(round_ * 7 + 1) % len(candidates)]
    victim.unlink(missing_ok=True)


# ------------------------------------------------------------------ resets


def bench_resets(
    taskset: Path, workdir: Path, facts: dict, sizes: tuple[str, ...], repeats: int
) -> dict[str, Any]:
    strategies: dict[str, str | None] = {}
    probe_repo = taskset / "repos" / sizes[0]
    for name in snapshot.STRATEGIES:
        strategies[name] = snapshot.strategy_unavailable(name, workdir, probe_repo)
    auto, auto_reason = snapshot.choose_strategy("auto", workdir, probe_repo)
    results: dict[str, Any] = {}
    for size in sizes:
        candidates = facts[size]["edit_candidates"]
        source = taskset / "repos" / size
        row: dict[str, Any] = {"files": facts[size]["files"], "bytes": facts[size]["bytes"]}
        for name, why in strategies.items():
            if why is not None:
                row[name] = {"unavailable": why}
                continue
            with EnvPool(taskset, size=0, workdir=workdir, strategy=name) as pool:
                started = time.perf_counter()
                env = pool.acquire(f"{size}-1")
                create_s = time.perf_counter() - started
                mutate(env.root, candidates, repeats)
                env.reset()  # one warm-up reset, not counted
                samples = []
                for r in range(repeats):
                    mutate(env.root, candidates, r)
                    started = time.perf_counter()
                    env.reset()
                    samples.append(time.perf_counter() - started)
                disk_limited = env.checkout.disk_limited
                pool.release(env)
            stats = common.stats(samples)
            row[name] = {
                "reset": stats,
                "create_ms": ms(create_s),
                "disk_limited": disk_limited,
            }
        # The anchor: a fresh plain copy after the same changes, on the same disk (after
        # the strategies, so that its dirty pages do not slow their resets).
        dest = workdir / f"anchor-{size}"
        shutil.copytree(source, dest, symlinks=True)
        samples = []
        for r in range(repeats):
            mutate(dest, candidates, r)
            started = time.perf_counter()
            shutil.rmtree(dest)
            shutil.copytree(source, dest, symlinks=True)
            samples.append(time.perf_counter() - started)
        shutil.rmtree(dest)
        row["anchor_copytree"] = common.stats(samples)
        for name in snapshot.STRATEGIES:
            if "reset" in row[name]:
                row[name]["anchor_over_reset_p50"] = round(
                    row["anchor_copytree"]["p50_ms"] / max(row[name]["reset"]["p50_ms"], 1e-6), 1
                )
        results[size] = row
    return {
        "strategies": {k: (v or "available") for k, v in strategies.items()},
        "auto": auto.name,
        "auto_reason": auto_reason,
        "sizes": results,
    }


# ------------------------------------------------------------- concurrency


def _meminfo_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


async def bench_concurrency(
    taskset: Path, workdir: Path, levels: tuple[int, ...], rounds: int, idle: int
) -> dict[str, Any]:
    per_level: dict[str, Any] = {}
    limits = EnvLimits(memory_bytes=1024**3, disk_bytes=256 * 1024**2)
    with EnvPool(taskset, size=max(levels), workdir=workdir, limits=limits) as pool:
        strategy = pool.strategy.name
        # One warm-up run, so that the first level does not pay for cold caches.
        env = pool.acquire("small-1")
        await env.run_tests()
        pool.release(env)
        for n in levels:
            envs = [pool.acquire("small-1") for _ in range(n)]
            latencies: list[float] = []
            ok = True

            async def one(env, latencies: list[float] = latencies) -> None:
                nonlocal ok
                started = time.perf_counter()
                report = await env.run_tests()
                latencies.append(time.perf_counter() - started)
                ok = ok and report.exit_code == 0 and len(report.passing) == 20

            started = time.perf_counter()
            for _ in range(rounds):
                await asyncio.gather(*(one(env) for env in envs))
            wall = time.perf_counter() - started
            for env in envs:
                pool.release(env)
            per_level[str(n)] = {
                "runs": n * rounds,
                "wall_s": round(wall, 3),
                "runs_per_s": round(n * rounds / wall, 3),
                "run_latency": common.stats(latencies),
                "all_passed": ok,
            }
    best_n, stops_at = levels[0], None
    for previous, current in itertools.pairwise(levels):
        gain = per_level[str(current)]["runs_per_s"] / per_level[str(previous)]["runs_per_s"]
        if gain < 1.1:
            stops_at = previous
            break
        best_n = current
    if stops_at is None:
        stops_at = best_n
    # Idle sandboxes: what keeping a pool warm costs.
    before = _meminfo_available()
    started = time.perf_counter()
    with EnvPool(taskset, size=idle, workdir=workdir, limits=limits) as pool:
        create_s = (time.perf_counter() - started) / max(idle, 1)
        held = before - _meminfo_available()
        alive = len(pool.envs)
    return {
        "strategy": strategy,
        "test_command": TEST_COMMAND,
        "rounds": rounds,
        "levels": per_level,
        "scaling_stops_at": stops_at,
        "best_runs_per_s": max(v["runs_per_s"] for v in per_level.values()),
        "idle_sandboxes": {
            "count": alive,
            "create_ms_each": ms(create_s),
            "memory_mib_each": round(max(held, 0) / max(idle, 1) / 1024**2, 3),
        },
    }


# ------------------------------------------------------------------ build


def build_figures(directory: Path) -> dict[str, Any]:
    """Per-project figures from a task set's build.json (training.tasks.taskset.BuildRecord)."""
    path = directory / BUILD_FILE
    try:
        record = msgspec.json.decode(path.read_bytes(), type=BuildRecord)
    except FileNotFoundError:
        raise SystemExit(f"{path} does not exist: --tasks needs a built task set") from None
    except msgspec.DecodeError as exc:
        raise SystemExit(f"{path} is not a valid build record: {exc}") from None
    projects = {}
    for name, p in record.projects.items():
        projects[name] = {
            "source": p.source,
            "tasks": p.tasks,
            "seconds": p.seconds,
            "tasks_per_minute": round(p.tasks / p.seconds * 60, 2) if p.seconds else None,
            "mutations_tried": p.mutations_tried,
            "mutations_validated": p.mutations_validated,
            "validated_fraction": (
                round(p.mutations_validated / p.mutations_tried, 3) if p.mutations_tried else None
            ),
            "skipped": p.skipped,
        }
    tasks = sum(p.tasks for p in record.projects.values())
    return {
        "task_set": str(directory),
        "command": record.command,
        "seconds": record.seconds,
        "tasks": tasks,
        "tasks_per_minute": round(tasks / record.seconds * 60, 2) if record.seconds else None,
        "projects": projects,
    }


# ------------------------------------------------------------------ report


def make_plan(quick: bool, options: argparse.Namespace) -> dict[str, Any]:
    plan = {
        "sizes": SIZES,
        "repeats": 40,
        "levels": (1, 2, 3, 4, 6, 8, 16),
        "rounds": 3,
        "idle": 32,
    }
    if quick:
        plan.update(sizes=("small", "medium"), repeats=10, levels=(1, 2, 4), rounds=1, idle=4)
    for key in ("sizes", "repeats", "levels", "rounds", "idle"):
        value = getattr(options, key)
        if value is not None:
            plan[key] = tuple(value) if isinstance(value, list) else value
    return plan


def run_benchmark(plan: dict[str, Any], tasks_dir: Path | None, command: str) -> dict[str, Any]:
    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tachy-bench-envs-") as tmp:
        taskset, workdir = Path(tmp) / "tasks", Path(tmp) / "envs"
        workdir.mkdir()
        sizes = tuple(plan["sizes"])
        facts = make_taskset(taskset, tuple(dict.fromkeys(("small", *sizes))))
        resets = bench_resets(taskset, workdir, facts, sizes, plan["repeats"])
        concurrency = asyncio.run(
            bench_concurrency(taskset, workdir, tuple(plan["levels"]), plan["rounds"], plan["idle"])
        )
        left = snapshot.mounts_under(workdir)
    elapsed = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    auto = resets["auto"]
    reset_summary: dict[str, Any] = {}
    met = True
    for size, row in resets["sizes"].items():
        entry: dict[str, Any] = {
            "files": row["files"],
            "anchor_copytree_p50_ms": row["anchor_copytree"]["p50_ms"],
            "anchor_copytree_p95_ms": row["anchor_copytree"]["p95_ms"],
        }
        for name in snapshot.STRATEGIES:
            if "reset" in row[name]:
                entry[name] = {
                    "p50_ms": row[name]["reset"]["p50_ms"],
                    "p95_ms": row[name]["reset"]["p95_ms"],
                    "anchor_over_reset_p50": row[name]["anchor_over_reset_p50"],
                }
        met = met and row[auto]["reset"]["p95_ms"] < RESET_TARGET_MS
        reset_summary[size] = entry
    summary: dict[str, Any] = {
        "strategy_auto": auto,
        "reset_target_ms": RESET_TARGET_MS,
        "reset_target_met": met,  # the auto strategy's p95, at every size
        "reset": reset_summary,
        "concurrent_runs_per_s": {n: v["runs_per_s"] for n, v in concurrency["levels"].items()},
        "concurrency_scaling_stops_at": concurrency["scaling_stops_at"],
        "idle_sandbox_create_ms": concurrency["idle_sandboxes"]["create_ms_each"],
        "peak_rss_mib": round(rss, 1),
        "peak_child_rss_mib": round(child_rss, 1),
        "left_mounted": [str(p) for p in left],
        # Filled from a task set's build.json with --tasks DIR (training.tasks.taskset.BuildRecord).
        "build": build_figures(tasks_dir) if tasks_dir is not None else None,
    }
    return {
        "benchmark": "envs",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "machine": common.machine_info(),
        "source": common.source_state(),
        "plan": {k: list(v) if isinstance(v, tuple) else v for k, v in plan.items()},
        "resets": resets,
        "concurrency": concurrency,
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "elapsed_s": round(elapsed, 1),
        "summary": summary,
    }


def one_line(summary: dict[str, Any]) -> str:
    auto = summary["strategy_auto"]
    parts = []
    for size, entry in summary["reset"].items():
        mine = entry.get(auto, {})
        parts.append(
            f"{size} ({entry['files']} files) {mine.get('p50_ms', float('nan')):.1f}/"
            f"{mine.get('p95_ms', float('nan')):.1f} ms vs copytree "
            f"{entry['anchor_copytree_p50_ms']:.1f} ms"
        )
    mark = "ok" if summary["reset_target_met"] else "MISSED"
    runs = summary["concurrent_runs_per_s"]
    stop = summary["concurrency_scaling_stops_at"]
    return (
        f"envs: {auto} reset p50/p95 {'; '.join(parts)} (target p95 < "
        f"{RESET_TARGET_MS:g} ms: {mark}); concurrent test runs scale to N={stop} "
        f"({runs[str(stop)]:.2f} runs/s); peak RSS {summary['peak_rss_mib']:.0f} MiB"
    )


def table(result: dict[str, Any]) -> str:
    lines = [
        f"strategies: {result['resets']['strategies']}",
        f"auto: {result['resets']['auto_reason']}",
    ]
    lines.append("")
    lines.append("1. reset latency after a rollout's changes, ms (p50 / p95)")
    for size, row in result["resets"]["sizes"].items():
        a = row["anchor_copytree"]
        lines.append(
            f"   {size:>6} ({row['files']} files): copytree {a['p50_ms']:.2f} / {a['p95_ms']:.2f}"
        )
        for name in snapshot.STRATEGIES:
            if "reset" in row[name]:
                r = row[name]["reset"]
                lines.append(
                    f"   {'':>6} {name:>8}: {r['p50_ms']:.2f} / {r['p95_ms']:.2f} "
                    f"({row[name]['anchor_over_reset_p50']}x faster than the anchor)"
                )
            else:
                lines.append(f"   {'':>6} {name:>8}: unavailable ({row[name]['unavailable']})")
    lines.append("")
    c = result["concurrency"]
    lines.append(f"2. concurrent test runs ({c['strategy']})")
    for n, level in c["levels"].items():
        lines.append(
            f"   N={n:>3}: {level['runs_per_s']:.2f} runs/s, run p50 "
            f"{level['run_latency']['p50_ms']:.0f} ms, all passed: {level['all_passed']}"
        )
    lines.append(f"   scaling stops at N={c['scaling_stops_at']}")
    idle = c["idle_sandboxes"]
    lines.append(
        f"   {idle['count']} idle sandboxes: {idle['create_ms_each']} ms and "
        f"{idle['memory_mib_each']} MiB each"
    )
    lines.append("")
    s = result["summary"]
    lines.append(f"peak RSS {s['peak_rss_mib']} MiB; elapsed {result['elapsed_s']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.envs", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--tasks", type=Path, help="a built task set: copy its build.json figures")
    parser.add_argument("--sizes", nargs="+", choices=SIZES, help="repository sizes to reset")
    parser.add_argument("--repeats", type=int, help="resets per strategy and size")
    parser.add_argument("--levels", nargs="+", type=int, help="concurrent sandbox counts")
    parser.add_argument("--rounds", type=int, help="rounds of concurrent test runs per level")
    parser.add_argument("--idle", type=int, help="idle sandboxes to create")
    options = parser.parse_args(argv)
    plan = make_plan(options.quick, options)
    command = "python -m bench.envs " + " ".join(argv if argv is not None else sys.argv[1:])
    result = run_benchmark(plan, options.tasks, command.strip())
    common.report(result, options.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
