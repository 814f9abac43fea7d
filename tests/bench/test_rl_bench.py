"""The RL benchmark (bench/rl.py) at its smallest: the JSON's shape, never its timings."""

from __future__ import annotations

import json
import shutil

import pytest

from bench import rl as bench

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def test_main_prints_one_json_document(capsys: pytest.CaptureFixture) -> None:
    argv = ["--json", "--steps", "1", "--group-size", "2", "--groups", "1",
            "--overprovision", "1", "--sync-repeats", "1", "--no-part", "--tachy-steps", "0"]  # fmt: skip
    assert bench.main(argv) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert [m["mode"] for m in result["modes"]] == ["sync", "async"]
    for mode in result["modes"]:
        assert mode["steps"] == 1 and mode["steps_per_min"] > 0
        assert 0 <= mode["trainer_idle_frac_median"] <= 1
    assert [s["preset"] for s in result["weight_sync"]] == ["tiny", "small"]
    assert result["weight_sync_part"] is None  # --no-part: tachy's model is not loaded
    assert result["tachy"] is None  # --tachy-steps 0: no steps of tachy's model
    assert result["weight_sync"][1]["params"] > result["weight_sync"][0]["params"]
    summary = result["summary"]
    assert summary["async_vs_sync_throughput"] > 0 and summary["weight_sync_s_small"] > 0
    assert captured.err.strip().startswith("rl: async")
