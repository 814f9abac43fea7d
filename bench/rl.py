"""Benchmark of the RL trainer (issue 8): asynchronous against synchronous steps on a
workload with long-tailed rollout durations, the trainer's idle fraction, and the
time a weight sync takes.

    python -m bench.rl [--json] [--quick] [--steps N] [--seed S]

1. Step throughput. The same RL run (training.rl.controller.RLRun: Ray, an inference actor, a
   rollout worker with real sandboxes, the tiny preset model, G rollouts per task, B
   tasks per step) twice in one process: synchronous (the anchor: launch B groups,
   wait for all, train, sync) and asynchronous (B + overprovision groups in flight,
   a step takes the first B groups to finish, bounded staleness eta = 1). The tasks'
   test suites sleep a duration drawn per run from a log-normal (by default median 2 s,
   sigma 1.2, capped at 40 s: one run in ten sleeps over 9 s, one in fifty over 23 s),
   so rollout durations are long-tailed as real agent runs are. Figures: steps per minute in each mode and
   their ratio (target >= 1.5x), the trainer's idle fraction (median over steps;
   target < 15 % for async), rollout durations (p50, p95, max).
2. Weight sync: the trainer's weights put in the Ray object store once and loaded
   by an inference actor, for the tiny and small presets (median of repeats), which
   shows how it grows with the model; and for tachy's model (the bundled part on the
   SmolLM2 base), the adapter trainer's sync (merged attention weights and small
   tensors) against shipping the whole sampling state (the anchor).
3. tachy's model at work (issue 33): a few steps of the shipped RL configuration
   (training/configs/rl-smollm2.toml: the warm-up part, the curriculum, hints, groups
   without signal dropped and refilled) on tier-1 family tasks built here from two
   synthetic projects. Figures: rollouts an hour, training included (every rollout
   run, and those trained on), the trainer's idle fraction, and where a step's time
   goes (sampling, tools, tests, training, weight sync).

In parts 1 and 2 the model is initialised at random (what is measured is the
machinery, not what the model learns); rewards come from a coin flip in the tests, so groups carry signal and
every step updates. Prints one JSON document (`--json`) or a table, and a one-line
summary on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
import torch

from agent.render import render_system_prompt
from agent.tools import ALL_TOOLS
from bench import common
from model.checkpoint import load, save
from model.config import preset
from model.model import Model
from model.tokenizer import train_bpe
from training.rl.config import RLConfig
from training.rl.controller import RLRun
from training.rl.inference import InferenceActor, pack_weights
from training.tasks.taskset import Task, TaskMeta, append_tasks

# The test sleeps a long-tailed time, then flips a coin: the agent cannot change either.
SLOW_COIN = """\
import math
import os
import random
import time


def test_coin():
    rng = random.Random(os.urandom(8))
    time.sleep(min({cap}, {median} * math.exp(rng.gauss(0.0, {sigma}))))
    assert rng.random() < 0.5
"""


def make_taskset(root: Path, median: float, sigma: float, cap: float, n: int = 8) -> Path:
    repo = root / "repos" / "coin"
    (repo / "tests").mkdir(parents=True)
    (repo / "coin.py").write_text("VALUE = 1\n")
    test = SLOW_COIN.format(median=median, sigma=sigma, cap=cap)
    (repo / "tests" / "test_coin.py").write_text(test)
    tasks = [
        Task(
            id=f"coin-{i}",
            repo="repos/coin",
            instruction="make tests/test_coin.py pass",
            test_command="{python} -m pytest -q -p no:cacheprovider tests",
            fail_to_pass=["tests/test_coin.py::test_coin"],
            pass_to_pass=[],
            test_files=["tests"],
            timeout_s=60.0,
            metadata=TaskMeta(source="bench:slow-coin", project="coin"),
        )
        for i in range(n)
    ]
    append_tasks(root, tasks)
    return root


def make_checkpoint(root: Path, name: str = "tiny") -> Path:
    system = render_system_prompt(ALL_TOOLS)
    tok = train_bpe([system] * 4 + [Path(__file__).read_text()] * 2, 2000)
    torch.manual_seed(0)
    model = Model(
        preset(name, vocab_size=tok.vocab_size, max_position_embeddings=4096), precision="fp32"
    )
    path = root / f"init-{name}"
    save(model, path, tokenizer=tok)
    return path


PER_STEP = (
    "step", "step_s", "trainer_idle_frac", "train_s", "staleness_mean", "rollout_s_mean",
    "rollout_s_max", "carried_over",
)  # fmt: skip


def run_mode(base: dict[str, Any], out: Path, asynchronous: bool) -> dict[str, Any]:
    config = RLConfig(**base, async_rollouts=asynchronous)
    started = time.perf_counter()
    with RLRun(config, out) as run:
        history = run.train()
    wall = time.perf_counter() - started
    steps = [m for m in history if "step_s" in m]
    step_s = [m["step_s"] for m in steps]
    idle = [m["trainer_idle_frac"] for m in steps]
    # the first step includes starting the actors and filling the pipeline
    steady = step_s[1:] or step_s
    return {
        "mode": "async" if asynchronous else "sync",
        "steps": len(steps),
        "wall_s": round(wall, 2),
        "step_s_median": round(statistics.median(steady), 3),
        "steps_per_min": round(60.0 * len(steady) / sum(steady), 3),
        "trainer_idle_frac_median": round(statistics.median(idle[1:] or idle), 4),
        "train_s_median": round(statistics.median(m["train_s"] for m in steps), 3),
        "weight_sync_s_median": round(statistics.median(m["weight_sync_s"] for m in steps), 4),
        "rollout_s_max": max(m["rollout_s_max"] for m in steps),
        "stale_masked": sum(m["stale_masked"] for m in steps),
        "masked": sum(m["masked"] for m in steps),
        "updates": sum(bool(m["updated"]) for m in steps),
        "per_step": [{k: m.get(k) for k in PER_STEP} for m in steps],
    }


def weight_sync(root: Path, name: str, repeats: int) -> dict[str, Any]:
    """Seconds to put the weights in the object store and load them into one actor."""
    ckpt = make_checkpoint(root, name)
    model = load(ckpt)
    actor = InferenceActor.options(num_cpus=0).remote(str(ckpt), max_batch=1, max_seq=64)
    ray.get(actor.info.remote())  # started: its start-up is not a sync
    times = []
    for version in range(1, repeats + 1):
        started = time.perf_counter()
        ref = ray.put(pack_weights(model.sampling_state()))
        ray.get(actor.set_weights.remote(version, ref))
        times.append(time.perf_counter() - started)
    ray.kill(actor)
    params = sum(p.numel() for p in model.parameters())
    return {
        "preset": name,
        "params": params,
        "megabytes": round(params * 4 / 1e6, 1),
        "sync_s_median": round(statistics.median(times), 4),
        "sync_s_min": round(min(times), 4),
    }


def weight_sync_part(repeats: int, rank: int = 16) -> dict[str, Any]:
    """tachy's model (the bundled part on the SmolLM2 base): the adapter trainer's sync
    (merged attention weights and small tensors, `partial`) against shipping the whole
    sampling state (the anchor: what a full fine-tune must send), into one actor."""
    from model.policy import BASE_PART, bundled_checkpoint
    from training.sft.adapters import AdaptedModel

    part = bundled_checkpoint(BASE_PART)
    adapted, _ = AdaptedModel.from_part(part, rank=rank)
    actor = InferenceActor.options(num_cpus=0).remote(str(part), max_batch=1, max_seq=64)
    ray.get(actor.info.remote())
    states = {"full": lambda: adapted.model.sampling_state(), "adapters": adapted.sampling_state}
    out: dict[str, Any] = {"model": f"tachy-smollm2 part, adapters of rank {rank}"}
    version = 0
    for kind, make in states.items():
        times, size = [], 0
        for _ in range(repeats):
            version += 1
            started = time.perf_counter()
            state = make()
            ref = ray.put(pack_weights(state))
            ray.get(actor.set_weights.remote(version, ref, kind == "adapters"))
            times.append(time.perf_counter() - started)
            size = sum(t.numel() * t.element_size() for t in state.values())
            del state, ref
        out[kind] = {
            "megabytes": round(size / 1e6, 1),
            "sync_s_median": round(statistics.median(times), 4),
        }
    ray.kill(actor)
    out["speedup"] = round(out["full"]["sync_s_median"] / out["adapters"]["sync_s_median"], 2)
    return out


TACHY_CONFIG = Path(__file__).resolve().parents[1] / "training" / "configs" / "rl-smollm2.toml"
TIER1 = "misspelled_name,missing_import,wrong_literal,wrong_keyword"
# per step: what the step-time table shows (means over the step's rollouts for the
# rollout_* columns, seconds of the whole step for the others)
STEP_TIME = (
    "step_s", "trainer_idle_s", "sampler_busy_s", "rollout_sample_s", "rollout_tools_s",
    "rollout_test_s", "train_s", "weight_sync_s", "rollouts_run", "rollouts",
)  # fmt: skip


def tachy_steps(root: Path, steps: int, seed: int) -> dict[str, Any]:
    """`steps` RL steps of tachy's model with the shipped configuration, on tier-1
    family tasks of two synthetic projects, no held-out evaluation (not step time)."""
    from server.cli import main as tachy

    tasks = root / "families"
    argv = ["tasks", "build", "--synthetic", "2", "--templates", "train", "--families", TIER1,
            "--max-tasks", "1", "--seed", str(seed), "--out", str(tasks)]  # fmt: skip
    if tachy(argv) != 0:
        raise RuntimeError(f"tachy {' '.join(argv)} failed")
    config = RLConfig.from_file(TACHY_CONFIG, tasks=str(tasks))
    config = dataclasses.replace(
        config, heldout_tasks=None, steps=steps, save_every=0, seed=seed,
        workdir=str(root / "envs-tachy"),
    )  # fmt: skip
    started = time.perf_counter()
    with RLRun(config, root / "tachy") as run:
        history = run.train()
    wall = time.perf_counter() - started
    done = [m for m in history if "step_s" in m]
    step_s = sum(m["step_s"] for m in done)
    run_count = sum(m.get("rollouts_run", m["rollouts"]) for m in done)
    trained = sum(m["rollouts"] for m in done)
    return {
        "config": str(TACHY_CONFIG.relative_to(TACHY_CONFIG.parents[2])),
        "init": config.init,
        "tasks": f"tier-1 families ({TIER1}) of 2 synthetic projects",
        "steps": len(done),
        "wall_s": round(wall, 1),
        "rollouts_per_hour": round(3600 * run_count / step_s, 1) if step_s else 0.0,
        "trained_rollouts_per_hour": round(3600 * trained / step_s, 1) if step_s else 0.0,
        "trainer_idle_frac_median": round(
            statistics.median(m["trainer_idle_frac"] for m in done), 4
        ),
        "solve_rate": round(statistics.fmean(m["solve_rate"] for m in done), 4),
        "per_step": [{k: m.get(k) for k in ("step", *STEP_TIME)} for m in done],
    }


def run_benchmark(options: argparse.Namespace, command: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tachy-bench-rl-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        tasks = make_taskset(
            root / "tasks", options.sleep_median, options.sleep_sigma, options.sleep_cap
        )
        init = make_checkpoint(root)
        base = dict(
            tasks=str(tasks), init=str(init), group_size=options.group_size,
            groups_per_step=options.groups, overprovision=options.overprovision,
            max_staleness=1, max_turns=1, max_tokens=4096, max_new_tokens=16,
            rollout_timeout_s=60.0, inference_batch=8, envs_per_worker=4,
            workdir=str(root / "envs"), steps=options.steps, save_every=0, lr=1e-4,
            micro_batch=2, seed=options.seed, trainer_threads=1,
            # every group trains, as in the runs RESULTS compares against: dropping coin
            # groups whose runs agree would add refills to one mode's steps by chance
            dynamic_sampling=False,
        )  # fmt: skip
        ray.init(
            num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False,
            log_to_driver=False, logging_level="ERROR",
        )  # fmt: skip
        try:
            modes = [
                run_mode(base, root / "sync", asynchronous=False),
                run_mode(base, root / "async", asynchronous=True),
            ]
            syncs = [weight_sync(root, name, options.sync_repeats) for name in ("tiny", "small")]
            part_sync = weight_sync_part(options.sync_repeats) if options.part else None
            tachy = (
                tachy_steps(root, options.tachy_steps, options.seed)
                if options.tachy_steps
                else None
            )
        finally:
            ray.shutdown()
    sync, asyn = modes
    summary = {
        "async_vs_sync_throughput": round(asyn["steps_per_min"] / sync["steps_per_min"], 3),
        "async_steps_per_min": asyn["steps_per_min"],
        "sync_steps_per_min": sync["steps_per_min"],
        "async_trainer_idle_frac": asyn["trainer_idle_frac_median"],
        "sync_trainer_idle_frac": sync["trainer_idle_frac_median"],
        "weight_sync_s_tiny": syncs[0]["sync_s_median"],
        "weight_sync_s_small": syncs[1]["sync_s_median"],
    }
    if part_sync is not None:
        summary |= {
            "weight_sync_s_part_adapters": part_sync["adapters"]["sync_s_median"],
            "weight_sync_s_part_full": part_sync["full"]["sync_s_median"],
            "part_sync_speedup": part_sync["speedup"],
        }
    if tachy is not None:
        summary |= {
            "tachy_rollouts_per_hour": tachy["rollouts_per_hour"],
            "tachy_trained_rollouts_per_hour": tachy["trained_rollouts_per_hour"],
            "tachy_trainer_idle_frac": tachy["trainer_idle_frac_median"],
        }
    return {
        "benchmark": "rl",
        "command": command,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": common.machine_info(),
        "source": common.source_state(),
        "workload": {
            "group_size": options.group_size,
            "groups_per_step": options.groups,
            "overprovision": options.overprovision,
            "steps": options.steps,
            "test_sleep": (
                f"min({options.sleep_cap}, {options.sleep_median} * exp(N(0, "
                f"{options.sleep_sigma}))) s per rollout"
            ),
            "model": "tiny preset, random init, fp32 trainer",
        },
        "modes": modes,
        "weight_sync": syncs,
        "weight_sync_part": part_sync,
        "tachy": tachy,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "summary": summary,
    }


def table(result: dict[str, Any]) -> str:
    lines = ["mode   steps/min  step_s(med)  idle(med)  train_s  sync_s  rollout_max"]
    for m in result["modes"]:
        lines.append(
            f"{m['mode']:<6} {m['steps_per_min']:>9} {m['step_s_median']:>12} "
            f"{m['trainer_idle_frac_median']:>10} {m['train_s_median']:>8} "
            f"{m['weight_sync_s_median']:>7} {m['rollout_s_max']:>12}"
        )
    for s in result["weight_sync"]:
        lines.append(f"weight sync {s['preset']} ({s['megabytes']} MB): {s['sync_s_median']} s")
    part = result["weight_sync_part"]
    for kind in ("full", "adapters") if part else ():
        lines.append(
            f"weight sync tachy-smollm2 {kind} ({part[kind]['megabytes']} MB): "
            f"{part[kind]['sync_s_median']} s"
        )
    if result["tachy"]:
        lines.append("tachy's model, seconds per step:  " + "  ".join(STEP_TIME))
        for m in result["tachy"]["per_step"]:
            lines.append(f"  step {m['step']}: " + "  ".join(str(m[k]) for k in STEP_TIME))
    return "\n".join(lines)


def one_line(s: dict[str, Any]) -> str:
    return (
        f"rl: async {s['async_steps_per_min']} vs sync {s['sync_steps_per_min']} steps/min = "
        f"{s['async_vs_sync_throughput']}x; trainer idle {s['async_trainer_idle_frac']:.0%} "
        f"(sync {s['sync_trainer_idle_frac']:.0%}); weight sync {s['weight_sync_s_tiny']} s "
        f"tiny, {s['weight_sync_s_small']} s small"
        + (
            f"; tachy's model {s['weight_sync_s_part_adapters']} s adapters vs "
            f"{s['weight_sync_s_part_full']} s full = {s['part_sync_speedup']}x"
            if "part_sync_speedup" in s
            else ""
        )
        + (
            f"; tachy's model {s['tachy_rollouts_per_hour']} rollouts/h "
            f"({s['tachy_trained_rollouts_per_hour']} trained), idle "
            f"{s['tachy_trainer_idle_frac']:.0%}"
            if "tachy_rollouts_per_hour" in s
            else ""
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rl", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="2 steps per mode (a smoke run)")
    parser.add_argument("--steps", type=int, help="RL steps per mode (default 8)")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task (4)")
    parser.add_argument("--groups", type=int, default=2, help="tasks per step (2)")
    parser.add_argument("--overprovision", type=int, default=2, help="extra groups (2)")
    parser.add_argument("--sync-repeats", type=int, help="weight syncs per preset (5)")
    parser.add_argument("--sleep-median", type=float, default=2.0, help="test sleep median (2 s)")
    parser.add_argument("--sleep-sigma", type=float, default=1.2, help="its log-normal sigma (1.2)")
    parser.add_argument("--sleep-cap", type=float, default=40.0, help="its cap (40 s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-part",
        dest="part",
        action="store_false",
        help="skip the weight sync of tachy's model (adapters vs full state; needs ~8 GB)",
    )
    parser.add_argument(
        "--tachy-steps",
        type=int,
        help="RL steps of tachy's model on family tasks (default 3, --quick 1; 0 skips; "
        "minutes each)",
    )
    options = parser.parse_args(argv)
    if options.tachy_steps is None:
        options.tachy_steps = 1 if options.quick else 3
    options.steps = options.steps or (2 if options.quick else 8)
    options.sync_repeats = options.sync_repeats or (2 if options.quick else 5)
    command = "python -m bench.rl " + " ".join(argv if argv is not None else sys.argv[1:])
    result = run_benchmark(options, command.strip())
    common.report(result, options.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
