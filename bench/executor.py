"""Benchmark of the agent executor (issue 2).

    python -m bench.executor [--json] [--quick]

Measures, on a temporary workspace holding a slice of the running interpreter's
standard library (the json, email and asyncio packages; no network):

1. Executor overhead per tool call beyond the tool's own work (target < 2 ms).
   Replayed turns of N read_file calls (N = 1, 8, 32) run through `Executor`; each
   turn is timed from the moment the policy is asked for it to the moment it is asked
   for the next one, so a turn's time covers streaming, parsing, binding, scheduling,
   the tool calls, events, rendering and the results message. The anchor is the same
   N calls made directly on the tool object, concurrently (`asyncio.gather`) and one
   after another; overhead per call = (turn - the faster anchor) / N.
2. Parallelism: eight read-only calls in one turn (grep with eight patterns over the
   corpus; read_file of the eight largest files) against the slowest of the same
   calls made alone, each in its own turn (target ratio <= 1.5). Also reported: the
   ratio to what the cores allow for CPU-bound calls (max(slowest, sum / CPUs)), and
   two pure-latency cases (a benchmark-only tool that waits 20 ms, on the event loop
   and on a worker thread) that show the executor's own overlap.
3. Sandboxed command start-up: `Sandbox.run("true")` with bubblewrap (target < 50 ms)
   and with the unsandboxed fallback, against a plain `subprocess.run(["/bin/sh",
   "-c", "true"])` (the anchor), a breakdown of where the bubblewrap time goes, and
   the same start-up on a 10,000-file workspace.
4. What each isolation measure costs (issue 15), each beside the same work without
   it: bubblewrap's argv with and without dropping capabilities; ruff (read_lints)
   and ripgrep (grep) confined in the sandbox against the same run unconfined; a file
   read through directory handles (index.beneath) against a plain open; and the
   first and later commands of a run in a git repository (the history check).

Also reports the process's peak RSS and the machine. All inputs are fixed; figures are
medians over repeats. The whole run takes well under two minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import itertools
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec

from agent import events as ev
from agent import sandbox as sandbox_module
from agent.cgroup import ProcessCgroup
from agent.executor import Executor
from agent.lints import LintRunner
from agent.parser import RawCall
from agent.policy import Message, ReplayPolicy
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ALL_TOOLS, Tool, ToolContext, bind_args
from agent.tools.base import _POOL, run_blocking
from agent.workspace import Workspace
from bench import common
from bench.common import ms

CORPUS_PACKAGES = ("json", "email", "asyncio")
CALLS_PER_TURN = (1, 8, 32)
GREP_PATTERNS = (
    r"def \w+\(self",
    r"class \w+\(",
    r"^import |^from ",
    r"raise \w+Error",
    r"async def",
    r"self\.\w+ = None",
    r"return None",
    r"TODO|XXX|FIXME",
)
OVERHEAD_TARGET_MS = 2.0
PARALLEL_TARGET_RATIO = 1.5
SANDBOX_TARGET_MS = 50.0

LATENCY_MS = 20
SCALE_DIRS, SCALE_FILES_PER_DIR = 500, 20  # the 10,000-file workspace for start-up scaling


class BenchWait(Tool):
    """Wait for some milliseconds and return (a benchmark-only tool: pure latency, no
    CPU work, to show how the executor overlaps calls independently of the cores)."""

    name = "bench_wait"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        ms: Annotated[int, msgspec.Meta(ge=0, description="how long to wait")]
        thread: Annotated[
            bool, msgspec.Meta(description="block a tool worker thread (run_blocking)")
        ] = False

    async def run(self, args: Args, ctx: ToolContext) -> str:
        if args.thread:
            await run_blocking(time.sleep, args.ms / 1000)
        else:
            await asyncio.sleep(args.ms / 1000)
        return f"waited {args.ms} ms"


BENCH_TOOLS: tuple[type[Tool], ...] = (*ALL_TOOLS, BenchWait)
TOOLS: dict[str, Tool] = {tool.name: tool() for tool in BENCH_TOOLS}


# ------------------------------------------------------------------ helpers


def stats(samples_s: Sequence[float]) -> dict[str, float | int]:
    """Median, quartiles and count of a list of durations in seconds, in ms."""
    ordered = sorted(samples_s)
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4)
    else:
        q1 = q3 = statistics.median(ordered)
    return {
        "median_ms": ms(statistics.median(ordered)),
        "p25_ms": ms(q1),
        "p75_ms": ms(q3),
        "min_ms": ms(ordered[0]),
        "n": len(ordered),
    }


def call_text(tool: str, **params: object) -> str:
    body = "".join(f"<{key}>{value}</{key}>\n" for key, value in params.items())
    return f'<tool_call name="{tool}">\n{body}</tool_call>\n'


def bind(tool: str, **params: object) -> Any:
    raw = RawCall(index=0, name=tool, params={k: str(v) for k, v in params.items()})
    return bind_args(TOOLS[tool], raw)


def make_context(root: Path, **sandbox_options: Any) -> ToolContext:
    workspace = Workspace(root)
    return ToolContext(
        workspace=workspace,
        sandbox=Sandbox(workspace, SandboxConfig(**sandbox_options)),
        linters=LintRunner(workspace),
    )


def make_corpus(root: Path) -> dict[str, Any]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in CORPUS_PACKAGES:
        shutil.copytree(
            stdlib / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    sizes = {rel: (root / rel).stat().st_size for rel in files}
    return {"files": files, "sizes": sizes}


class TimedReplay(ReplayPolicy):
    """A replay policy that records when each turn is requested."""

    def __init__(self, turns: list[str]) -> None:
        super().__init__(turns, source="bench")
        self.starts: list[float] = []

    async def stream(self, messages: list[Message], stop: list[str]) -> AsyncIterator[str]:
        self.starts.append(time.perf_counter())
        async for chunk in super().stream(messages, stop):
            yield chunk


async def run_turns(ctx: ToolContext, turns: list[str]) -> tuple[list[float], Executor]:
    """Run the turns (plus a final answer) through the executor; per-turn durations."""
    policy = TimedReplay([*turns, "Done."])
    executor = Executor(ctx, policy, tools=BENCH_TOOLS, max_turns=len(turns) + 1)
    result = await executor.run("benchmark")
    if result.stop_reason != "end_turn":
        raise RuntimeError(f"benchmark run ended with {result.stop_reason}: {result.error}")
    errors = [e for e in executor.events if isinstance(e, ev.ToolResult) and e.is_error]
    if errors:
        raise RuntimeError(f"a benchmark tool call failed: {errors[0].content[:500]}")
    starts = policy.starts
    return [b - a for a, b in itertools.pairwise(starts)], executor


async def time_async(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


def time_sync(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ------------------------------------------------------- 1. overhead per call
async def bench_overhead(ctx: ToolContext, small: list[str], plan: dict) -> dict[str, Any]:
    tool = TOOLS["read_file"]
    sizes = []
    for n in CALLS_PER_TURN:
        paths = [small[i % len(small)] for i in range(n)]
        text = "Reading the files.\n" + "".join(call_text("read_file", path=p) for p in paths)
        argses = [bind("read_file", path=p) for p in paths]
        turns_per_run = plan["overhead_turns"][n]

        async def gather(argses: list[Any] = argses) -> None:
            await asyncio.gather(*(tool.run(a, ctx) for a in argses))

        async def sequential(argses: list[Any] = argses) -> None:
            for a in argses:
                await tool.run(a, ctx)

        await run_turns(ctx, [text] * 3)  # warm up
        for _ in range(3):
            await gather()
        turn_s: list[float] = []
        gather_s: list[float] = []
        seq_s: list[float] = []
        meta_ms: list[float] = []
        for _ in range(plan["overhead_runs"]):
            gc.collect()
            for _ in range(turns_per_run):
                gather_s.append(await time_async(gather))
                seq_s.append(await time_async(sequential))
            durations, executor = await run_turns(ctx, [text] * turns_per_run)
            turn_s += durations
            meta_ms += [
                e.meta["duration_ms"] for e in executor.events if isinstance(e, ev.ToolResult)
            ]
        turn = stats(turn_s)
        anchor = stats(gather_s)
        serial = stats(seq_s)
        # The tool's own work: the faster of the two direct ways (the conservative choice).
        work = min(anchor["median_ms"], serial["median_ms"])
        overhead = (turn["median_ms"] - work) / n
        sizes.append(
            {
                "calls_per_turn": n,
                "turn": turn,
                "direct_gather": anchor,
                "direct_sequential": serial,
                "meta_duration_ms_median": round(statistics.median(meta_ms), 3),
                "overhead_ms_per_call": round(overhead, 3),
            }
        )
    single = next(s for s in sizes if s["calls_per_turn"] == 1)
    return {
        "tool": "read_file",
        "files": small,
        "direct_single_call_ms": min(
            single["direct_gather"]["median_ms"], single["direct_sequential"]["median_ms"]
        ),
        "sizes": sizes,
    }


# ------------------------------------------------------------- 2. parallelism
async def bench_parallel_case(
    ctx: ToolContext,
    tool_name: str,
    calls: list[dict[str, object]],
    repeats: int,
    cpu_bound: bool = True,
) -> dict[str, Any]:
    """Each call alone in its own turn vs all of them in one turn (and the same two
    made directly on the tool object, without the executor)."""
    tool = TOOLS[tool_name]
    texts = [call_text(tool_name, **params) for params in calls]
    argses = [bind(tool_name, **params) for params in calls]
    all_in_one = "Working.\n" + "".join(texts)
    singles = ["Working.\n" + text for text in texts]

    await run_turns(ctx, [*singles, all_in_one])  # warm up
    single_s: list[list[float]] = [[] for _ in calls]
    direct_single_s: list[list[float]] = [[] for _ in calls]
    parallel_s: list[float] = []
    direct_parallel_s: list[float] = []
    block = 5
    for start in range(0, repeats, block):
        count = min(block, repeats - start)
        gc.collect()
        durations, _ = await run_turns(ctx, singles * count)
        for i, duration in enumerate(durations):
            single_s[i % len(calls)].append(duration)
        durations, _ = await run_turns(ctx, [all_in_one] * count)
        parallel_s += durations
        for _ in range(count):
            for i, args in enumerate(argses):
                direct_single_s[i].append(await time_async(lambda a=args: tool.run(a, ctx)))
            direct_parallel_s.append(
                await time_async(lambda: asyncio.gather(*(tool.run(a, ctx) for a in argses)))
            )
    singles_stats = [stats(s) for s in single_s]
    slowest = max(s["median_ms"] for s in singles_stats)
    total = sum(s["median_ms"] for s in singles_stats)
    # What the cores allow if every call is CPU-bound and nothing else costs anything:
    # the slowest call, or all the work spread over the usable CPUs. Pure waits need
    # no CPU: there the ideal is the slowest call.
    ideal = max(slowest, total / len(os.sched_getaffinity(0))) if cpu_bound else slowest
    parallel = stats(parallel_s)
    return {
        "tool": tool_name,
        "calls": calls,
        "single_turns": singles_stats,
        "slowest_single_ms": slowest,
        "sum_of_singles_ms": round(total, 3),
        "cpu_bound_ideal_ms": round(ideal, 3),
        "parallel_turn": parallel,
        "ratio": round(parallel["median_ms"] / slowest, 3),
        "ratio_vs_cpu_bound_ideal": round(parallel["median_ms"] / ideal, 3),
        "direct_slowest_single_ms": max(stats(s)["median_ms"] for s in direct_single_s),
        "direct_parallel": stats(direct_parallel_s),
    }


async def bench_parallel(ctx: ToolContext, corpus: dict, plan: dict) -> dict[str, Any]:
    sizes = corpus["sizes"]
    largest = sorted(sizes, key=lambda rel: (-sizes[rel], rel))[:8]
    cases: dict[str, tuple[str, list[dict[str, object]]]] = {
        "grep": ("grep", [{"pattern": p} for p in GREP_PATTERNS]),
        "read_file": (
            "read_file",
            [{"path": rel, "start_line": 1, "end_line": 2000} for rel in largest],
        ),
        # Pure latency, no CPU: shows whether the executor itself overlaps the calls.
        "wait_async": ("bench_wait", [{"ms": LATENCY_MS}] * 8),
        # The same latency spent blocking a worker thread, as the file tools and grep
        # do: bounded by the size of asyncio's default thread pool.
        "wait_thread": ("bench_wait", [{"ms": LATENCY_MS, "thread": "true"}] * 8),
    }
    out = {}
    for name, (tool, calls) in cases.items():
        repeats = plan["parallel_repeats"] if tool != "bench_wait" else plan["latency_repeats"]
        out[name] = await bench_parallel_case(
            ctx, tool, calls, repeats, cpu_bound=tool != "bench_wait"
        )
    return out


# ---------------------------------------------------------- 3. sandbox start-up
def _bwrap_version() -> str | None:
    binary = shutil.which("bwrap")
    if not binary:
        return None
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or None


def make_wide_tree(root: Path, *, hidden_every: int = 0) -> int:
    """A workspace of SCALE_DIRS x SCALE_FILES_PER_DIR small files. With
    `hidden_every=N`, every Nth directory also holds two files that commands must not
    see, each a mount of its own: an ignored log and a secret (issue 32)."""
    if hidden_every:
        root.mkdir(parents=True)
        (root / ".gitignore").write_text("*.log\n")
    for d in range(SCALE_DIRS):
        directory = root / f"pkg{d // 20}" / f"mod{d}"
        directory.mkdir(parents=True)
        for f in range(SCALE_FILES_PER_DIR):
            (directory / f"file{f}.py").write_bytes(b"x = 1\n")
        if hidden_every and d % hidden_every == 0:
            (directory / "run.log").write_bytes(b"log\n")
            (directory / ".env").write_bytes(b"KEY=1\n")
    return SCALE_DIRS * SCALE_FILES_PER_DIR


async def bench_sandbox(
    root: Path, scale_root: Path, hidden_roots: dict[str, Path], plan: dict
) -> dict[str, Any]:
    """Each way of starting `true` is measured in blocks of its own: interleaving them
    one by one makes bubblewrap's namespace teardown (kernel work that outlives each
    bwrap) slow down whatever runs next, which no real run of a single mode sees."""
    has_bwrap = shutil.which("bwrap") is not None
    repeats = plan["sandbox_repeats"]
    workspace = Workspace(root)
    fallback = Sandbox(workspace, SandboxConfig(use_bubblewrap=False))
    terminal = TOOLS["run_terminal_cmd"]
    true_args = bind("run_terminal_cmd", command="true")

    async def checked(sandbox: Sandbox) -> None:
        result = await sandbox.run("true")
        if result.exit_code != 0:
            raise RuntimeError(f"`true` failed in the {sandbox.mode} sandbox: {result}")

    def plain() -> None:
        subprocess.run(["/bin/sh", "-c", "true"], check=True)

    def plain_preexec() -> None:
        subprocess.run(["/bin/sh", "-c", "true"], check=True, preexec_fn=lambda: None)

    async def asyncio_plain() -> None:
        process = await asyncio.create_subprocess_exec("/bin/sh", "-c", "true")
        await process.wait()

    # name -> (function, is it a coroutine function, repeats)
    measures: dict[str, tuple[Callable[[], Any], bool, int]] = {
        "plain_subprocess": (plain, False, repeats),
        "plain_subprocess_preexec_fn": (plain_preexec, False, repeats),
        "asyncio_subprocess": (asyncio_plain, True, repeats),
        "sandbox_fallback": (lambda: checked(fallback), True, repeats),
    }
    out: dict[str, Any] = {"bubblewrap": _bwrap_version()}
    if has_bwrap:
        sandboxed = Sandbox(workspace, SandboxConfig(use_bubblewrap=True))
        tool_ctx = make_context(root)
        measures["sandbox_bwrap"] = (lambda: checked(sandboxed), True, repeats)
        measures["run_terminal_cmd_tool"] = (
            lambda: terminal.run(true_args, tool_ctx),
            True,
            repeats,
        )
        # Where the bubblewrap time goes: tachy's work before the spawn, then bwrap
        # itself with the same argv and with a minimal one (no tachy work at all).
        measures["hidden_paths"] = (sandboxed.hidden_paths, False, repeats)
        root_binds = getattr(sandbox_module, "_root_binds", None)
        if root_binds is not None:
            measures["root_binds"] = (root_binds, False, repeats)

        def cgroup_cycle() -> None:
            group = ProcessCgroup.create(max_processes=256, memory_bytes=4 * 1024**3)
            if group is not None:
                group.remove()

        measures["cgroup_create_remove"] = (cgroup_cycle, False, repeats)
        argv = sandboxed._argv("true")
        measures["raw_bwrap_same_argv"] = (
            lambda: subprocess.run(argv, cwd=root, check=True),
            False,
            repeats,
        )
        minimal = [sandboxed.bwrap or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
        minimal += ["--proc", "/proc", "--unshare-all", "--die-with-parent"]
        minimal += ["/bin/sh", "-c", "true"]
        measures["raw_bwrap_minimal"] = (
            lambda: subprocess.run(minimal, cwd=root, check=True),
            False,
            repeats,
        )
        # How start-up grows with the workspace: the same on 10,000 files.
        wide = Sandbox(Workspace(scale_root), SandboxConfig(use_bubblewrap=True))
        scale_repeats = plan["scale_repeats"]
        measures["wide_sandbox_bwrap"] = (lambda: checked(wide), True, scale_repeats)
        measures["wide_hidden_paths"] = (wide.hidden_paths, False, scale_repeats)
        # The same with hidden files in some of its 500 folders (every 20th: 50 files,
        # 100 mounts) and in all of them (1,000 files: 2,000 mounts, past
        # agent.sandbox.MAX_MOUNTS, so folders are hidden whole).
        for label, hidden_root in hidden_roots.items():
            spread = Sandbox(Workspace(hidden_root), SandboxConfig(use_bubblewrap=True))
            measures[f"{label}_bwrap"] = (lambda s=spread: checked(s), True, scale_repeats)
            measures[f"{label}_paths"] = (spread.hidden_paths, False, scale_repeats)
            mounts = spread.hidden_paths()
            out[f"{label}_mounts"] = {
                action: sum(1 for m in mounts if m.action == action)
                for action in ("hide", "protect")
            }
        out["bwrap_argv_length"] = len(argv)
        out["hidden_path_count"] = len(sandboxed.hidden_paths())
        out["wide_workspace_files"] = SCALE_DIRS * SCALE_FILES_PER_DIR
    # Each measure runs in short blocks (one warm-up, then its samples back to back),
    # and the blocks go round several times so slow drift of the machine spreads over
    # all of them.
    samples: dict[str, list[float]] = {name: [] for name in measures}
    rounds = plan["sandbox_rounds"]
    for round_number in range(rounds):
        for name, (fn, is_async, count) in measures.items():
            per_round = count // rounds + (1 if round_number < count % rounds else 0)
            gc.collect()
            if is_async:
                await fn()
                for _ in range(per_round):
                    samples[name].append(await time_async(fn))
            else:
                fn()
                for _ in range(per_round):
                    samples[name].append(time_sync(fn))
    cgroup_probe = ProcessCgroup.create(max_processes=256, memory_bytes=None)
    if cgroup_probe is not None:
        cgroup_probe.remove()
    out["cgroups_available"] = cgroup_probe is not None
    out.update({name: stats(s) for name, s in samples.items()})
    return out


async def bench_isolation(
    root: Path, repo: Path, corpus: dict[str, Any], plan: dict[str, Any]
) -> dict[str, Any]:
    """Each isolation measure beside the same work without it (block by block, as in
    bench_sandbox). `costs_ms` holds the differences of the medians."""
    if shutil.which("bwrap") is None:
        return {"costs_ms": {}, "skipped": "bubblewrap is not installed"}
    repeats = plan["sandbox_repeats"]
    workspace = Workspace(root)
    confined = Sandbox(workspace, SandboxConfig(use_bubblewrap=True))
    host = Sandbox(workspace, SandboxConfig(use_bubblewrap=False))
    lint_file = next(rel for rel in corpus["files"] if rel.endswith(".py"))
    lint_confined = LintRunner(workspace, sandbox=confined)
    lint_host = LintRunner(workspace, sandbox=host)
    grep_ctx = make_context(root)
    grep_host_ctx = make_context(root, use_bubblewrap=False)
    grep_tool, grep_args = TOOLS["grep"], bind("grep", pattern="def __init__")
    argv = confined._argv("true")
    at = argv.index("--cap-drop")
    no_cap_drop = argv[:at] + argv[at + 2 :]
    read_rel = lint_file

    # A git repository holding the corpus: the first command of a run checks its
    # history (remembered in .tachy/); later commands look at the refs only.
    shutil.copytree(root, repo, ignore=shutil.ignore_patterns(".tachy"))
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com"}
    env.update(GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.com")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "corpus"]):
        subprocess.run(["git", "-C", str(repo), *args], env=env, check=True)
    repo_sandbox = Sandbox(Workspace(repo), SandboxConfig(use_bubblewrap=True))

    async def first_command_in_repo() -> None:
        (repo / ".tachy" / "git-history.json").unlink(missing_ok=True)
        fresh = Sandbox(Workspace(repo), SandboxConfig(use_bubblewrap=True))
        if (await fresh.run("true")).exit_code != 0:
            raise RuntimeError("`true` failed in the repository's sandbox")

    async def later_command_in_repo() -> None:
        if (await repo_sandbox.run("true")).exit_code != 0:
            raise RuntimeError("`true` failed in the repository's sandbox")

    pairs: dict[str, tuple[tuple[Callable[[], Any], bool], tuple[Callable[[], Any], bool]]] = {
        "cap_drop": (
            (lambda: subprocess.run(argv, cwd=root, check=True), False),
            (lambda: subprocess.run(no_cap_drop, cwd=root, check=True), False),
        ),
        "lint_in_sandbox": (
            (lambda: lint_confined.lint([lint_file]), False),
            (lambda: lint_host.lint([lint_file]), False),
        ),
        "grep_in_sandbox": (
            (lambda: grep_tool.run(grep_args, grep_ctx), True),
            (lambda: grep_tool.run(grep_args, grep_host_ctx), True),
        ),
        "handle_relative_read": (
            (lambda: workspace.read_disk(read_rel), False),
            (lambda: (root / read_rel).read_bytes(), False),
        ),
        "git_history_first_command": (
            (first_command_in_repo, True),
            (lambda: confined.run("true"), True),
        ),
        "git_history_later_command": (
            (later_command_in_repo, True),
            (lambda: confined.run("true"), True),
        ),
    }
    out: dict[str, Any] = {"costs_ms": {}}
    for name, ((with_fn, with_async), (without_fn, without_async)) in pairs.items():
        times: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(plan["sandbox_rounds"]):
            for key, fn, is_async in (
                ("with", with_fn, with_async),
                ("without", without_fn, without_async),
            ):
                count = max(1, repeats // plan["sandbox_rounds"])
                gc.collect()
                if is_async:
                    await fn()
                    times[key] += [await time_async(fn) for _ in range(count)]
                else:
                    fn()
                    times[key] += [time_sync(fn) for _ in range(count)]
        entry = {"with": stats(times["with"]), "without": stats(times["without"])}
        entry["cost_ms"] = round(entry["with"]["median_ms"] - entry["without"]["median_ms"], 3)
        out[name] = entry
        out["costs_ms"][name] = entry["cost_ms"]
    return out


# ------------------------------------------------------------------- driver
def machine_info() -> dict[str, Any]:
    return {
        **common.machine_info(),
        "python_implementation": platform.python_implementation(),
        # The tool thread pool (agent.tools.base.run_blocking) the file tools and grep
        # run on.
        "tool_thread_pool_workers": _POOL._max_workers,
    }


def make_plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "overhead_runs": 2,
            "overhead_turns": {1: 20, 8: 10, 32: 5},
            "parallel_repeats": 5,
            "latency_repeats": 5,
            "sandbox_repeats": 10,
            "sandbox_rounds": 2,
            "scale_repeats": 4,
        }
    return {
        "overhead_runs": 6,
        "overhead_turns": {1: 50, 8: 25, 32: 10},
        "parallel_repeats": 25,
        "latency_repeats": 10,
        "sandbox_repeats": 40,
        "sandbox_rounds": 4,
        "scale_repeats": 12,
    }


async def run_benchmark(quick: bool) -> dict[str, Any]:
    plan = make_plan(quick)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tachy-bench-") as tmp:
        root = Path(tmp) / "workspace"
        root.mkdir()
        corpus = make_corpus(root)
        sizes = corpus["sizes"]
        small = [rel for rel in corpus["files"] if 1000 <= sizes[rel] <= 4000]
        scale_root = Path(tmp) / "wide"
        make_wide_tree(scale_root)
        hidden_roots = {}
        for label, every in (("hidden_every_20th", 20), ("hidden_everywhere", 1)):
            hidden_roots[label] = Path(tmp) / label
            make_wide_tree(hidden_roots[label], hidden_every=every)
        ctx = make_context(root)
        overhead = await bench_overhead(ctx, small, plan)
        parallel = await bench_parallel(ctx, corpus, plan)
        sandbox = await bench_sandbox(root, scale_root, hidden_roots, plan)
        isolation = await bench_isolation(root, Path(tmp) / "repo", corpus, plan)
    elapsed = time.perf_counter() - started
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    per_call = {s["calls_per_turn"]: s["overhead_ms_per_call"] for s in overhead["sizes"]}
    worst = max(per_call.values())
    grep = parallel["grep"]
    bw = sandbox.get("sandbox_bwrap")
    wide = sandbox.get("wide_sandbox_bwrap")
    plain_ms = sandbox["plain_subprocess"]["median_ms"]
    fallback_ms = sandbox["sandbox_fallback"]["median_ms"]
    summary: dict[str, Any] = {
        "read_file_direct_ms": overhead["direct_single_call_ms"],
        **{f"overhead_ms_per_call_{n}": v for n, v in per_call.items()},
        "overhead_ms_per_call_max": worst,
        "overhead_target_ms": OVERHEAD_TARGET_MS,
        "overhead_target_met": worst < OVERHEAD_TARGET_MS,
        "parallel_grep_slowest_single_ms": grep["slowest_single_ms"],
        "parallel_grep_turn_ms": grep["parallel_turn"]["median_ms"],
        "parallel_grep_ratio": grep["ratio"],
        "parallel_grep_ratio_vs_cpu_bound_ideal": grep["ratio_vs_cpu_bound_ideal"],
        "parallel_read_file_ratio": parallel["read_file"]["ratio"],
        "parallel_wait_async_ratio": parallel["wait_async"]["ratio"],
        "parallel_wait_thread_ratio": parallel["wait_thread"]["ratio"],
        "parallel_target_ratio": PARALLEL_TARGET_RATIO,
        "parallel_target_met": grep["ratio"] <= PARALLEL_TARGET_RATIO,
        "plain_subprocess_ms": plain_ms,
        "sandbox_fallback_ms": fallback_ms,
        "sandbox_fallback_vs_plain": round(fallback_ms / plain_ms, 2),
        "sandbox_bwrap_ms": bw["median_ms"] if bw else None,
        "sandbox_bwrap_vs_plain": round(bw["median_ms"] / plain_ms, 2) if bw else None,
        "sandbox_target_ms": SANDBOX_TARGET_MS,
        "sandbox_target_met": (bw["median_ms"] < SANDBOX_TARGET_MS) if bw else None,
        "sandbox_bwrap_10k_files_ms": wide["median_ms"] if wide else None,
        **{
            f"sandbox_bwrap_10k_files_{label}_ms": (
                sandbox[f"{label}_bwrap"]["median_ms"] if wide else None
            )
            for label in ("hidden_every_20th", "hidden_everywhere")
        },
        **{f"isolation_{name}_ms": value for name, value in isolation["costs_ms"].items()},
        "peak_rss_mib": round(rss_mib, 1),
    }
    return {
        "benchmark": "executor",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python -m bench.executor" + (" --quick" if quick else "") + " --json",
        "machine": machine_info(),
        "source": common.source_state(),
        "plan": {**plan, "overhead_turns": {str(k): v for k, v in plan["overhead_turns"].items()}},
        "corpus": {
            "packages": list(CORPUS_PACKAGES),
            "source": sysconfig.get_paths()["stdlib"],
            "files": len(corpus["files"]),
            "bytes": sum(sizes.values()),
        },
        "overhead": overhead,
        "parallel": parallel,
        "sandbox": sandbox,
        "isolation": isolation,
        "peak_rss_mib": round(rss_mib, 1),
        "peak_rss_children_mib": round(children_mib, 1),
        # Other work on the machine shows here; the figures are only as quiet as it was.
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "elapsed_s": round(elapsed, 1),
        "summary": summary,
    }


def one_line(summary: dict[str, Any]) -> str:
    def mark(ok: bool | None) -> str:
        return "n/a" if ok is None else ("ok" if ok else "MISSED")

    bw = summary["sandbox_bwrap_ms"]
    return (
        f"executor: overhead {summary['overhead_ms_per_call_max']:.3f} ms/call max "
        f"(target < {OVERHEAD_TARGET_MS:g}: {mark(summary['overhead_target_met'])}); "
        f"8 parallel greps {summary['parallel_grep_ratio']:.2f}x slowest single "
        f"(target <= {PARALLEL_TARGET_RATIO:g}: {mark(summary['parallel_target_met'])}); "
        f"bwrap start {'n/a' if bw is None else f'{bw:.1f}'} ms vs "
        f"{summary['plain_subprocess_ms']:.1f} ms plain "
        f"(target < {SANDBOX_TARGET_MS:g}: {mark(summary['sandbox_target_met'])}); "
        f"peak RSS {summary['peak_rss_mib']:.0f} MiB"
    )


def table(result: dict[str, Any]) -> str:
    lines = []
    m = result["machine"]
    lines.append(
        f"machine: {m['cpu_count']} CPUs ({m['cpu_model']}), {m['machine']}, "
        f"Python {m['python']}, {m['platform']}"
    )
    c = result["corpus"]
    lines.append(f"corpus: {', '.join(c['packages'])} ({c['files']} files, {c['bytes']} bytes)")
    lines.append("")
    lines.append("1. executor overhead per call (read_file of a 1-4 KB file)")
    lines.append(
        f"   {'calls/turn':>10} {'turn ms':>10} {'direct ms':>10} {'seq ms':>10} "
        f"{'overhead ms/call':>17}"
    )
    for s in result["overhead"]["sizes"]:
        lines.append(
            f"   {s['calls_per_turn']:>10} {s['turn']['median_ms']:>10.3f} "
            f"{s['direct_gather']['median_ms']:>10.3f} "
            f"{s['direct_sequential']['median_ms']:>10.3f} {s['overhead_ms_per_call']:>17.3f}"
        )
    lines.append("")
    lines.append("2. eight parallel read-only calls in one turn")
    lines.append(
        f"   {'case':>11} {'slowest 1':>10} {'sum of 8':>10} {'8 in 1 turn':>12} {'ratio':>6} "
        f"{'vs CPU-bound ideal':>19}"
    )
    for name, case in result["parallel"].items():
        lines.append(
            f"   {name:>11} {case['slowest_single_ms']:>10.2f} {case['sum_of_singles_ms']:>10.2f} "
            f"{case['parallel_turn']['median_ms']:>12.2f} {case['ratio']:>6.2f} "
            f"{case['ratio_vs_cpu_bound_ideal']:>19.2f}"
        )
    lines.append("")
    lines.append("3. command start-up (`true`), median ms")
    for name, value in result["sandbox"].items():
        if isinstance(value, dict) and "median_ms" in value:
            lines.append(f"   {name:>28}: {value['median_ms']:8.2f}")
    lines.append("")
    lines.append("4. isolation measures: median ms with and without, and the cost")
    for name, entry in result["isolation"].items():
        if isinstance(entry, dict) and "cost_ms" in entry:
            lines.append(
                f"   {name:>28}: {entry['with']['median_ms']:8.2f} vs "
                f"{entry['without']['median_ms']:8.2f}  ({entry['cost_ms']:+.2f})"
            )
    lines.append("")
    lines.append(f"peak RSS {result['peak_rss_mib']} MiB; elapsed {result['elapsed_s']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.executor", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
    options = parser.parse_args(argv)
    result = asyncio.run(run_benchmark(options.quick))
    common.report(result, options.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
