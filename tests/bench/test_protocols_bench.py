"""The protocols benchmark (bench/protocols.py) at a tiny size: the JSON's shape and
that every figure was measured, never its timings."""

from __future__ import annotations

import json

import pytest

from bench import protocols

pytestmark = pytest.mark.timeout(240)


def test_main_prints_one_json_document(capfd: pytest.CaptureFixture, tmp_path) -> None:
    argv = ["--json", "--runs", "1", "--turns", "3", "--queries", "3", "--work", str(tmp_path)]
    assert protocols.main(argv) == 0
    captured = capfd.readouterr()
    result = json.loads(captured.out)
    assert result["benchmark"] == "protocols"
    assert [p["warm_up"] for p in result["acp"]["prompts"]] == [True, False]
    assert result["acp"]["tool_to_update"]["n"] == 3  # one per turn of the measured prompt
    assert result["lsp_anchor"]["tool_to_notification"]["all"]["n"] == 3
    assert result["mcp"]["over_stdio"]["n"] == result["mcp"]["in_process"]["n"] == 3
    summary = result["summary"]
    assert all(isinstance(v, float) and v >= 0 for v in summary.values())
    assert captured.err.strip().splitlines()[-1].startswith("protocols: ACP first update p95")
