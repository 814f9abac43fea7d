"""The environment-server benchmark (bench/envs.py) at a tiny size: the JSON's shape,
never its timings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from bench import envs as bench
from training.tasks.taskset import BUILD_FILE, BuildRecord, ProjectBuild

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def test_main_prints_one_json_document(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    record = BuildRecord(
        command="tachy tasks build",
        started="2026-11-30T00:00:00Z",
        seconds=120.0,
        projects={
            "calc": ProjectBuild(
                source="synthetic:seed=1", tasks=6, seconds=60.0, mutations_tried=10,
                mutations_validated=4,
            ),
            "empty": ProjectBuild(source="pypi:x==1", skipped="no tests"),
        },
    )  # fmt: skip
    (tmp_path / BUILD_FILE).write_bytes(msgspec.json.encode(record))
    argv = ["--json", "--quick", "--sizes", "small", "--repeats", "2", "--levels", "1", "2"]
    argv += ["--rounds", "1", "--idle", "2", "--tasks", str(tmp_path)]
    assert bench.main(argv) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert out.err.startswith("envs: ")  # the one-line summary
    summary = result["summary"]
    assert summary["strategy_auto"] in ("overlay", "reflink", "copy")
    assert isinstance(summary["reset_target_met"], bool)
    small = summary["reset"]["small"]
    assert positive(small["files"]) and positive(small["anchor_copytree_p50_ms"])
    assert positive(small["copy"]["p50_ms"]) and positive(small["copy"]["p95_ms"])
    assert summary["strategy_auto"] in small
    assert set(summary["concurrent_runs_per_s"]) == {"1", "2"}
    assert all(positive(v) for v in summary["concurrent_runs_per_s"].values())
    assert summary["concurrency_scaling_stops_at"] in (1, 2)
    assert all(level["all_passed"] for level in result["concurrency"]["levels"].values())
    assert summary["left_mounted"] == []
    assert positive(summary["peak_rss_mib"])
    build = summary["build"]
    assert build["tasks"] == 6 and build["tasks_per_minute"] == 3.0
    assert build["projects"]["calc"]["tasks_per_minute"] == 6.0
    assert build["projects"]["calc"]["validated_fraction"] == 0.4
    assert build["projects"]["empty"]["validated_fraction"] is None


def test_without_tasks_the_build_figures_are_null(capsys: pytest.CaptureFixture) -> None:
    argv = ["--json", "--sizes", "small", "--repeats", "2", "--levels", "1"]
    argv += ["--rounds", "1", "--idle", "1"]
    assert bench.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["summary"]["build"] is None
    assert result["plan"]["sizes"] == ["small"]
