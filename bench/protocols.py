"""Benchmark of the protocols other editors and agents use (issue 34): ACP and MCP.

    python -m bench.protocols [--json] [--runs N] [--turns N] [--queries N] [--work DIR]

1. ACP round trip: `tachy acp` as a subprocess, driven by the protocol's Python SDK
   client over stdio, on the agent benchmark's workspace (the stdlib's json package)
   with a replayed model, approval auto: `--runs` prompts (after a warm-up) of
   `--turns` one-call turns each (read_file, grep, run_terminal_cmd, list_dir,
   file_search). Figures: from sending session/prompt to the first session/update,
   and from a tool finishing (the update's `_meta.tachy.finishedAt`, the agent's
   time.time()) to its tool_call_update being received, p50/p95. Anchor, in the same
   run: the same replay through the language server (`tachy serve`, bench.lsp's
   agent part: tool finished -> `tachy/agent/event` received).
2. MCP search: `tachy mcp` on the same workspace, driven by the MCP SDK's client:
   `--queries` codebase_search calls (after the index is built by a first call),
   p50/p95. Anchor: the same calls in this process (server.mcp_index.IndexTools, the
   same code without the protocol), after the server exited.

3. Native against text tool calling on `tachy model serve` (with `--model DIR`, a
   checkpoint or part such as model/weights/tachy-smollm2-families): the server is
   started on a free port and asked for an agent's first turn on each of a few tasks
   twice, alternating: as tachy's text mode asks (its system prompt with the call
   syntax and tool docs), and as its native mode asks (the native system prompt, the
   tools as the OpenAI `tools` list, which the server renders into the model's
   prompt). Greedy, the same max_tokens. Figures per turn: prompt and completion
   tokens (the server's usage) and seconds, medians; and whether the turn called a
   tool (text: parsed from the text; native: `tool_calls` returned).

Prints one JSON document (`--json`) or a table, and a one-line summary on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.common import stats
from bench.lsp import QUERIES, bench_agent, make_agent_workspace

REPO = Path(__file__).resolve().parent.parent


def log(message: str) -> None:
    print(f"bench.protocols: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ 1. ACP
class _Client:
    """The ACP client side: records when each update arrives."""

    def __init__(self) -> None:
        self.updates: list[tuple[float, float, Any]] = []  # (perf_counter, time.time(), update)

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append((time.perf_counter(), time.time(), update))

    async def request_permission(self, *args: Any, **kw: Any) -> Any:
        raise RuntimeError("the benchmark runs with approval auto: nothing should ask")

    def on_connect(self, conn: Any) -> None:
        pass


async def bench_acp(root: Path, replay: Path, runs: int, turns: int) -> dict[str, Any]:
    import acp

    lines = replay.read_text()
    many = replay.with_name("acp-replay.jsonl")
    many.write_text(lines * (runs + 1))  # one agent process: each prompt takes its turns
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server.cli", "acp", "--policy", f"replay:{many}",
        cwd=REPO, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        limit=50 * 2**20,
    )  # fmt: skip
    client = _Client()
    conn = acp.connect_to_agent(client, proc.stdin, proc.stdout)
    first_update, lags, prompts = [], [], []
    try:
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(root), mcp_servers=[])
        await conn.set_config_option(
            config_id="approval", session_id=session.session_id, value="auto"
        )
        for i in range(runs + 1):
            client.updates.clear()
            sent = time.perf_counter()
            result = await conn.prompt(
                session_id=session.session_id,
                prompt=[acp.text_block("Look around the package.")],
            )
            took = time.perf_counter() - sent
            if result.stop_reason != "end_turn":
                raise RuntimeError(f"the ACP run ended with {result.stop_reason}")
            finished = [
                (wall - u.field_meta["tachy"]["finishedAt"])
                for _, wall, u in client.updates
                if u.session_update == "tool_call_update"
            ]
            if len(finished) != turns:
                raise RuntimeError(f"expected {turns} tool results over ACP, got {len(finished)}")
            prompts.append({"warm_up": i == 0, "seconds": round(took, 3)})
            if i > 0:
                first_update.append(client.updates[0][0] - sent)
                lags += finished
    finally:
        await conn.close()
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 30)
    return {
        "prompts": prompts,
        "prompt_to_first_update": stats(first_update),
        "tool_to_update": stats(lags),
    }


# ------------------------------------------------------------------ 2. MCP
async def bench_mcp(root: Path, queries: list[str]) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from server.mcp_index import IndexTools

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "server.cli", "mcp", "--workspace", str(root)],
        cwd=str(REPO),
    )  # fmt: skip
    over_stdio = []
    async with Client(params) as client:
        started = time.perf_counter()
        await client.call_tool("codebase_search", {"query": queries[0]})  # builds the index
        first = time.perf_counter() - started
        for query in queries:
            started = time.perf_counter()
            result = await client.call_tool("codebase_search", {"query": query})
            over_stdio.append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(f"codebase_search failed: {result.content[0].text}")
    local = IndexTools(root)
    in_process = []
    try:
        await local.call("codebase_search", {"query": queries[0]})
        for query in queries:
            started = time.perf_counter()
            await local.call("codebase_search", {"query": query})
            in_process.append(time.perf_counter() - started)
    finally:
        local.close()
    return {
        "queries": len(queries),
        "first_call_s": round(first, 3),
        "over_stdio": stats(over_stdio),
        "in_process": stats(in_process),
    }


# ------------------------------------------------- 3. native against text
TASKS = (
    "The test tests/test_calc.py::test_add fails. Find out why and fix it.",
    "Where is the function that adds two numbers defined? Read it.",
    "Run the tests and tell me which ones fail.",
)


async def bench_native(model: Path, max_tokens: int) -> dict[str, Any]:
    import re
    import statistics

    import httpx

    from agent.parser import parse_all
    from agent.render import render_system_prompt
    from agent.tools import ALL_TOOLS

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server.cli", "model", "serve", str(model), "--port", "0",
        "--max-batch", "1", cwd=REPO, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        url = None
        while url is None:
            line = (await asyncio.wait_for(proc.stderr.readline(), 600)).decode()
            if not line:
                raise RuntimeError("tachy model serve ended before it served")
            found = re.search(r"on (http://\S+/v1)", line)
            url = found.group(1) if found else None
        tools = [tool.function_schema() for tool in ALL_TOOLS]
        modes = {
            "text": {"system": render_system_prompt(ALL_TOOLS), "tools": None},
            "native": {"system": render_system_prompt(ALL_TOOLS, native=True), "tools": tools},
        }
        turns: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        async with httpx.AsyncClient(timeout=900) as client:
            for task in TASKS:
                for mode, ask in modes.items():
                    body: dict[str, Any] = {
                        "model": "m", "temperature": 0, "max_tokens": max_tokens,
                        "messages": [{"role": "system", "content": ask["system"]},
                                     {"role": "user", "content": task}],
                        "stop": ["<tool_result"],
                    }  # fmt: skip
                    if ask["tools"]:
                        body["tools"] = ask["tools"]
                    started = time.perf_counter()
                    response = await client.post(f"{url}/chat/completions", json=body)
                    took = time.perf_counter() - started
                    response.raise_for_status()
                    answer = response.json()
                    message = answer["choices"][0]["message"]
                    if mode == "native":
                        called = len(message.get("tool_calls") or [])
                    else:
                        called = len(
                            [c for c in parse_all(message["content"] or "") if not c.error]
                        )
                    turns[mode].append({
                        "task": task, "seconds": round(took, 3), "calls": called,
                        "prompt_tokens": answer["usage"]["prompt_tokens"],
                        "completion_tokens": answer["usage"]["completion_tokens"],
                    })  # fmt: skip
    finally:
        proc.terminate()
        await proc.wait()

    def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
        figures = {
            key: statistics.median(r[key] for r in rows)
            for key in ("seconds", "prompt_tokens", "completion_tokens")
        }
        return figures | {
            "turns_with_a_call": sum(r["calls"] > 0 for r in rows),
            "turns": len(rows),
        }

    return {"model": str(model), "max_tokens": max_tokens, "turns": turns,
            "median": {mode: medians(rows) for mode, rows in turns.items()}}  # fmt: skip


# ---------------------------------------------------------------- driver
async def run(options: argparse.Namespace, work: Path) -> dict[str, Any]:
    root, replay = make_agent_workspace(work, options.turns)
    log(f"ACP: {options.runs} prompts of {options.turns} turns")
    acp_result = await bench_acp(root, replay, options.runs, options.turns)
    log("anchor: the same replay through the language server (bench.lsp)")
    (work / "lsp").mkdir()
    lsp = await bench_agent(work / "lsp", {"runs": options.runs, "turns": options.turns})
    queries = [QUERIES[i % len(QUERIES)] for i in range(options.queries)]
    log(f"MCP: {len(queries)} codebase_search calls")
    mcp_result = await bench_mcp(root, queries)
    native = None
    if options.model is not None:
        log(f"native against text tool calling on tachy model serve {options.model}")
        native = await bench_native(options.model, options.max_tokens)
    lsp_lags = lsp["tool_to_notification"]["all"]
    summary = {
        "acp_first_update_p50_ms": acp_result["prompt_to_first_update"]["p50_ms"],
        "acp_first_update_p95_ms": acp_result["prompt_to_first_update"]["p95_ms"],
        "acp_tool_to_update_p50_ms": acp_result["tool_to_update"]["p50_ms"],
        "acp_tool_to_update_p95_ms": acp_result["tool_to_update"]["p95_ms"],
        "lsp_tool_to_event_p50_ms": lsp_lags["p50_ms"],
        "lsp_tool_to_event_p95_ms": lsp_lags["p95_ms"],
        "mcp_search_p50_ms": mcp_result["over_stdio"]["p50_ms"],
        "mcp_search_p95_ms": mcp_result["over_stdio"]["p95_ms"],
        "in_process_search_p95_ms": mcp_result["in_process"]["p95_ms"],
    }
    if native is not None:
        for mode, figures in native["median"].items():
            summary[f"{mode}_turn_s"] = float(figures["seconds"])
            summary[f"{mode}_prompt_tokens"] = float(figures["prompt_tokens"])
            summary[f"{mode}_completion_tokens"] = float(figures["completion_tokens"])
    return {
        "benchmark": "protocols",
        "command": "python -m bench.protocols " + " ".join(sys.argv[1:]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": common.machine_info(),
        "source": common.source_state(),
        "acp": acp_result,
        "lsp_anchor": {"tool_to_notification": lsp["tool_to_notification"]},
        "mcp": mcp_result,
        "native_vs_text": native,
        "summary": summary,
    }


def table(result: dict[str, Any]) -> str:
    s = result["summary"]
    return "\n".join(
        [
            f"ACP prompt -> first update: p50 {s['acp_first_update_p50_ms']} ms, p95 {s['acp_first_update_p95_ms']} ms",
            f"ACP tool finished -> update: p50 {s['acp_tool_to_update_p50_ms']} ms, p95 {s['acp_tool_to_update_p95_ms']} ms",
            f"LSP tool finished -> event (anchor): p50 {s['lsp_tool_to_event_p50_ms']} ms, p95 {s['lsp_tool_to_event_p95_ms']} ms",
            f"MCP codebase_search: p50 {s['mcp_search_p50_ms']} ms, p95 {s['mcp_search_p95_ms']} ms "
            f"(in process p95 {s['in_process_search_p95_ms']} ms)",
            *(
                f"tachy model serve, {mode} tool calls: {s[f'{mode}_turn_s']} s, "
                f"{s[f'{mode}_prompt_tokens']:.0f} prompt + {s[f'{mode}_completion_tokens']:.0f} "
                "completion tokens per turn (medians)"
                for mode in ("text", "native")
                if f"{mode}_turn_s" in s
            ),
        ]
    )


def one_line(s: dict[str, Any]) -> str:
    return (
        f"protocols: ACP first update p95 {s['acp_first_update_p95_ms']} ms, tool->update p95 "
        f"{s['acp_tool_to_update_p95_ms']} ms (LSP {s['lsp_tool_to_event_p95_ms']} ms); "
        f"MCP search p95 {s['mcp_search_p95_ms']} ms (in process {s['in_process_search_p95_ms']} ms)"
        + (
            f"; a turn native {s['native_turn_s']} s vs text {s['text_turn_s']} s"
            if "native_turn_s" in s
            else ""
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.protocols", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--runs", type=int, default=5, help="prompts after a warm-up (default 5)")
    parser.add_argument(
        "--turns", type=int, default=30, help="one-call turns per prompt (default 30)"
    )
    parser.add_argument("--queries", type=int, default=len(QUERIES), help="MCP searches")
    parser.add_argument(
        "--work", type=Path, help="keep the work files here (default: a temporary dir)"
    )
    parser.add_argument(
        "--model", type=Path,
        help="also compare native and text tool calling on tachy model serve with this checkpoint",
    )  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=256, help="per turn, with --model (256)")
    options = parser.parse_args(argv)
    if options.work is not None:
        options.work.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(run(options, options.work))
    else:
        work = Path(tempfile.mkdtemp(prefix="tachy-bench-protocols-"))
        try:
            result = asyncio.run(run(options, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    common.report(result, options.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
