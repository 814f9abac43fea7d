"""The protocols benchmark (bench/protocols.py) at a tiny size: the JSON's shape and
that every figure was measured, never its timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import protocols

pytestmark = pytest.mark.timeout(240)


def test_main_prints_one_json_document(capfd: pytest.CaptureFixture, tmp_path) -> None:
    tiny = Path(__file__).resolve().parents[2] / "model" / "weights" / "tachy-tiny"
    argv = ["--json", "--runs", "1", "--turns", "3", "--queries", "3", "--work", str(tmp_path),
            "--model", str(tiny), "--max-tokens", "4"]  # fmt: skip
    assert protocols.main(argv) == 0
    captured = capfd.readouterr()
    result = json.loads(captured.out)
    assert result["benchmark"] == "protocols"
    assert [p["warm_up"] for p in result["acp"]["prompts"]] == [True, False]
    assert result["acp"]["tool_to_update"]["n"] == 3  # one per turn of the measured prompt
    assert result["lsp_anchor"]["tool_to_notification"]["all"]["n"] == 3
    assert result["mcp"]["over_stdio"]["n"] == result["mcp"]["in_process"]["n"] == 3
    native = result["native_vs_text"]["median"]
    assert native["text"]["turns"] == native["native"]["turns"] == len(protocols.TASKS)
    # the native request carries the tools, which the server renders into the prompt
    assert native["native"]["prompt_tokens"] > 0 and native["text"]["prompt_tokens"] > 0
    summary = result["summary"]
    assert all(isinstance(v, float) and v >= 0 for v in summary.values())
    assert captured.err.strip().splitlines()[-1].startswith("protocols: ACP first update p95")
