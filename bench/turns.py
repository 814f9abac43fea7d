"""Multi-turn agent speed on tachy's own model (issue 17).

    python -m bench.turns [--json] [--turns 5] [--new-tokens 24] [--agent-turns 4]

Two parts, both on the model `local:` runs (SmolLM2-135M-Instruct upcycled into our MoE,
model/weights/tachy-smollm2), on this machine's CPU:

1. A 5-turn agent conversation, side by side in one run: the real system prompt and
   tool documentation (agent.render), a task, then per turn the model's answer and a
   tool result (real source files of this repository, about 450 tokens each), growing
   to ~3k tokens. Each turn's prompt goes to two engines on the same weights: one
   keeps its prefix cache between turns (what local:, tachy model serve and the RL
   actors run), the other empties it first (re-prefilling the whole conversation, what
   an engine without the cache does). Time to first token per turn (taken when the
   first token reaches on_token), the tokens the cache held, and end-to-end seconds
   for the conversation. Both sides decode greedily and must produce the same tokens.
   Goal: turn >= 2 at least 5x faster to its first token with the cache.

2. `tachy agent` with the default policy (local:) on a small repository with a failing
   test, as a user runs it (a subprocess; --max-turns --agent-turns): seconds per turn
   (each turn's end is when its assistant event reaches the transcript file, which is
   written as it goes), the model's load time, and the share of its tool calls that
   were well formed (not answered with "could not be parsed", "no tool named" or
   "invalid call"). Before any fine-tuning this share is the starting point issue 18
   improves.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from agent.executor import is_malformed_result
from bench import common

TARGET_TTFT_RATIO = 5.0
SOURCES = ["agent/render.py", "agent/parser.py", "model/batcher.py", "agent/events.py"]
TASK = "The test tests/test_calc.py::test_add fails: add() returns the wrong value. Fix it."


def tool_result(i: int, tokenizer, budget: int) -> str:
    """A read_file result of about `budget` tokens: the start of a real source file."""
    from agent.render import render_results_message

    text = (common.REPO / SOURCES[i % len(SOURCES)]).read_text()
    lines = []
    for n, line in enumerate(text.splitlines(), 1):
        lines.append(f"{n:>4}  {line}")
        if len(tokenizer.encode("\n".join(lines))) >= budget:
            break
    return render_results_message([(f"c{i}", "read_file", False, "\n".join(lines))])


def timed(engine, prompt: list[int], params) -> tuple[Any, float, float]:
    """(generation, seconds to the first token, seconds in all)."""
    first: list[float] = []
    start = time.perf_counter()

    def on_token(_row: int, _token: int, _text: str) -> None:
        if not first:
            first.append(time.perf_counter())

    gen = engine.generate([prompt], params, on_token=on_token)[0]
    end = time.perf_counter()
    return gen, (first[0] if first else end) - start, end - start


def conversation(args: argparse.Namespace) -> dict[str, Any]:
    from agent.render import render_system_prompt
    from agent.tools import ALL_TOOLS
    from model.generate import Engine, SamplingParams
    from model.part import assemble
    from model.policy import bundled_checkpoint

    t0 = time.perf_counter()
    model, tok = assemble(bundled_checkpoint())
    load_s = time.perf_counter() - t0
    cached = Engine(model, tok, max_batch=1, max_seq=8192, compile=args.compile)
    plain = Engine(model, tok, max_batch=1, max_seq=8192, compile=args.compile)
    for e in (cached, plain):
        e.stop_ids = frozenset()  # exactly --new-tokens per turn on both sides
    params = SamplingParams(max_new_tokens=args.new_tokens)
    system = render_system_prompt(ALL_TOOLS)
    messages = [("system", system), ("user", TASK)]
    warm = cached.chat_prompt([("user", "hi")])
    cached.generate([warm], SamplingParams(max_new_tokens=2))  # first-call costs
    plain.generate([warm], SamplingParams(max_new_tokens=2))
    cached.clear_cache()
    turns = []
    for turn in range(1, args.turns + 1):
        prompt = cached.chat_prompt(messages)
        order = (cached, plain) if turn % 2 else (plain, cached)  # who goes first alternates
        out = {}
        for engine in order:
            if engine is plain:
                engine.clear_cache()
            out[engine is cached] = timed(engine, prompt, params)
        (g_c, ttft_c, total_c), (g_p, ttft_p, total_p) = out[True], out[False]
        turns.append({
            "turn": turn,
            "prompt_tokens": len(prompt),
            "cached_tokens": g_c.cached_tokens,
            "ttft_s_cached": round(ttft_c, 3),
            "ttft_s_reprefill": round(ttft_p, 3),
            "ttft_ratio": round(ttft_p / ttft_c, 2) if ttft_c else None,
            "turn_s_cached": round(total_c, 3),
            "turn_s_reprefill": round(total_p, 3),
            "same_tokens": g_c.token_ids == g_p.token_ids,
        })  # fmt: skip
        print(f"bench.turns: turn {turn}: {turns[-1]}", file=sys.stderr, flush=True)
        messages += [("assistant", g_c.text), ("user", tool_result(turn, tok, args.result_tokens))]
    later = [t["ttft_ratio"] for t in turns[1:] if t["ttft_ratio"]]
    return {
        "load_s": round(load_s, 2),
        "system_prompt_tokens": len(tok.encode(system)),
        "system_prompt_chars": len(system),
        "turns": turns,
        "conversation_s_cached": round(sum(t["turn_s_cached"] for t in turns), 2),
        "conversation_s_reprefill": round(sum(t["turn_s_reprefill"] for t in turns), 2),
        "ttft_ratio_turn2_plus_median": round(statistics.median(later), 2) if later else None,
        "ttft_ratio_turn2_plus_min": min(later) if later else None,
        "same_tokens_every_turn": all(t["same_tokens"] for t in turns),
    }


def failing_repo(root: Path) -> Path:
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    return root


def agent_run(args: argparse.Namespace) -> dict[str, Any]:
    """`tachy agent` (default policy) as a subprocess; each line of its transcript is
    timed as it appears."""
    with tempfile.TemporaryDirectory(prefix="tachy-bench-turns-") as tmp:
        (Path(tmp) / "repo").mkdir()
        repo = failing_repo(Path(tmp) / "repo")
        transcript = Path(tmp) / "run.jsonl"
        env = {k: v for k, v in os.environ.items() if k not in ("TACHY_POLICY", "TRITON_INTERPRET")}
        cmd = [sys.executable, "-m", "server.cli", "agent", "--workspace", str(repo),
               "--max-turns", str(args.agent_turns), "--max-tokens", str(args.agent_tokens),
               "--transcript", str(transcript), TASK]  # fmt: skip
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=common.REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        stderr: list[str] = []
        reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
        reader.start()
        seen: list[tuple[float, dict]] = []
        while True:
            done = proc.poll() is not None
            if transcript.exists():
                lines = transcript.read_text().splitlines()
                for line in lines[len(seen) :]:
                    if line.endswith("}"):
                        seen.append((time.perf_counter() - start, json.loads(line)))
            if done:
                break
            time.sleep(0.05)
        wall = time.perf_counter() - start
        reader.join(5)
    events = [e for _, e in seen]
    starts = [t for t, e in seen if e["event"] == "run_start"]
    ends = [t for t, e in seen if e["event"] == "assistant"]
    per_turn, previous = [], starts[0] if starts else 0.0
    for t, e in seen:  # a turn: from the last event before it to its assistant event
        if e["event"] == "assistant":
            per_turn.append(round(t - previous, 2))
        if e["event"] in ("run_start", "tool_result"):
            previous = t
    final = next((e for e in reversed(events) if e["event"] == "final"), {})
    return (
        count_calls(events)
        | {
            "returncode": proc.returncode,
            "wall_s": round(wall, 2),
            "startup_s": round(starts[0], 2) if starts else None,  # process start + model load
            "turns": len(ends),
            "seconds_per_turn": per_turn,
            "seconds_per_turn_median": statistics.median(per_turn) if per_turn else None,
            "stop_reason": final.get("stop_reason"),
            "first_answer": next(
                (e["text"][:300] for e in events if e["event"] == "assistant"), None
            ),
            "stderr_tail": "".join(stderr)[-500:] if proc.returncode not in (0, 3) else "",
        }
    )


def count_calls(events: list[dict]) -> dict[str, Any]:
    """Tool calls in a transcript, and how many the executor refused as malformed."""
    results = [e for e in events if e["event"] == "tool_result"]
    malformed = [r for r in results if is_malformed_result(r["content"], r["is_error"])]
    calls = len(results)
    return {
        "tool_calls": calls,
        "malformed_calls": len(malformed),
        "well_formed_share": round((calls - len(malformed)) / calls, 3) if calls else None,
        "turns_with_a_call": sum(
            1 for e in events if e["event"] == "assistant" and "<tool_call" in e["text"]
        ),
    }


def table(result: dict[str, Any]) -> str:
    c = result["conversation"]
    lines = ["turn  prompt  cached  TTFT cached s  TTFT re-prefill s  ratio  same tokens"]
    for t in c["turns"]:
        lines.append(
            f"{t['turn']:>4} {t['prompt_tokens']:>7} {t['cached_tokens']:>7} "
            f"{t['ttft_s_cached']:>14.3f} {t['ttft_s_reprefill']:>18.3f} {t['ttft_ratio']:>6} "
            f"{t['same_tokens']}"
        )
    return "\n".join(lines) + "\n" + json.dumps(result["summary"], indent=2)


def one_line(s: dict[str, Any]) -> str:
    verdict = "met" if s["ttft_target_met"] else "missed"
    return (
        f"turns: TTFT with the session cache {s['ttft_ratio_turn2_plus_median']}x faster at "
        f"turns >= 2 (min {s['ttft_ratio_turn2_plus_min']}x; target >= {TARGET_TTFT_RATIO}x: "
        f"{verdict}), conversation {s['conversation_s_cached']} s vs "
        f"{s['conversation_s_reprefill']} s; tachy agent local: "
        f"{s['agent_seconds_per_turn_median']} s/turn, well-formed calls "
        f"{s['agent_well_formed_share']} of {s['agent_tool_calls']}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.turns", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--new-tokens", type=int, default=24, help="tokens each turn generates")
    p.add_argument("--result-tokens", type=int, default=450, help="tokens of each tool result")
    p.add_argument("--agent-turns", type=int, default=4, help="tachy agent --max-turns")
    p.add_argument("--agent-tokens", type=int, default=256, help="tachy agent --max-tokens")
    p.add_argument("--no-agent", action="store_true", help="skip the tachy agent run")
    p.add_argument("--compile", action="store_true", help="both engines with compile=True")
    args = p.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "0"  # the CPU torch path
    started = dt.datetime.now(dt.UTC)
    conv = conversation(args)
    agent = None if args.no_agent else agent_run(args)
    summary = {
        "target_ttft_ratio": TARGET_TTFT_RATIO,
        "ttft_ratio_turn2_plus_median": conv["ttft_ratio_turn2_plus_median"],
        "ttft_ratio_turn2_plus_min": conv["ttft_ratio_turn2_plus_min"],
        "ttft_target_met": (conv["ttft_ratio_turn2_plus_min"] or 0) >= TARGET_TTFT_RATIO,
        "conversation_s_cached": conv["conversation_s_cached"],
        "conversation_s_reprefill": conv["conversation_s_reprefill"],
        "final_prompt_tokens": conv["turns"][-1]["prompt_tokens"],
        "system_prompt_tokens": conv["system_prompt_tokens"],
        "same_tokens_every_turn": conv["same_tokens_every_turn"],
        "agent_seconds_per_turn_median": agent and agent["seconds_per_turn_median"],
        "agent_well_formed_share": agent and agent["well_formed_share"],
        "agent_tool_calls": agent and agent["tool_calls"],
        "agent_startup_s": agent and agent["startup_s"],
    }
    result = {
        "benchmark": "turns",
        "started": started.isoformat(timespec="seconds"),
        "machine": common.machine_info(),
        "source": common.source_state(),
        "params": vars(args),
        "conversation": conv,
        "agent": agent,
        "summary": summary,
    }
    common.report(result, args.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
