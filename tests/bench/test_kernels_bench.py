"""The MoE kernels benchmark (bench/kernels.py) at a tiny size on the torch path: its
anchors compute the layer they stand for, and the JSON has its shape (never its
timings). The CUDA section cannot run here; its summary logic is fed a made-up
section."""

from __future__ import annotations

import json

import pytest
import torch

from bench import kernels as bench
from kernels import reference

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("torch_path")]


def positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def test_anchors_compute_the_unquantized_layer() -> None:
    p = bench.make_problem(40, 5, 2, 32, 64)
    expected = reference.moe_ffn(**p, quantize=False)
    assert torch.allclose(bench.naive_moe(**p), expected, rtol=1e-5, atol=1e-5)
    if hasattr(torch, "_grouped_mm"):
        assert torch.allclose(bench.grouped_mm_moe(**p), expected, rtol=1e-5, atol=1e-5)


def test_make_problem_is_seeded() -> None:
    a, b = bench.make_problem(8, 4, 2, 32, 32), bench.make_problem(8, 4, 2, 32, 32)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert a["topk_ids"].shape == (8, 2) and a["w_gate_up"].shape == (4, 64, 32)


def test_main_prints_one_json_document(capsys: pytest.CaptureFixture) -> None:
    argv = ["--json", "--sizes", "64x4", "40x8", "--top-k", "2", "--d-model", "64"]
    argv += ["--d-ff", "32", "--quant-shape", "64x256", "--repeats", "2", "--no-cuda"]
    assert bench.main(argv) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert err.strip().splitlines()[-1].startswith("kernels: CPU torch path at 40x8")

    assert result["benchmark"] == "kernels" and result["cuda"] is None
    for key in ("machine", "source", "date", "command", "elapsed_s", "loadavg_1m_before_after"):
        assert key in result
    layers = result["cpu"]["layers"]
    assert [(s["tokens"], s["experts"]) for s in layers] == [(64, 4), (40, 8)]
    for s in layers:
        assert s["path"] == "torch" and s["top_k"] == 2
        for name in ("naive_fwd", "kernels_fwd", "kernels_fwd_prequantized"):
            assert s[name]["n"] == 2 and positive(s[name]["p50_ms"]), name
        for name in ("naive_fwd_bwd", "kernels_fwd_bwd"):
            assert positive(s[name]["p50_ms"]), name
        assert 0 < s["fwd_rel_error_vs_fp32"] < 0.08
    quant = result["cpu"]["quantize"]
    assert quant["shape"] == [64, 256]
    assert set(quant["gbps"]) == {
        "public_rowwise",
        "public_colwise",
        "reference_rowwise",
        "reference_colwise",
        "cast_fp8",
    }
    summary = result["summary"]
    assert summary["cpu_size"] == "40x8" and summary["cpu_path"] == "torch"
    for key in (
        "cpu_fwd_speedup_vs_naive",
        "cpu_sampling_fwd_speedup_vs_naive",
        "cpu_fwd_bwd_speedup_vs_naive",
        "cpu_fwd_rel_error_vs_fp32",
        "cpu_quantize_gbps",
        "cpu_quantize_reference_gbps",
        "cpu_cast_gbps",
        "cpu_quantize_vs_cast",
        "cpu_quantize_reference_vs_cast",
    ):
        assert positive(summary[key]), key
    assert summary["cuda_ran"] is False
    assert summary["cuda_quantize_tbps"] is None and summary["cuda_layer_target_met"] is None


def test_cuda_summary_from_a_made_up_section() -> None:
    timing = {"p50_ms": 1.0, "n": 5}
    layer = {"tokens": 4, "experts": 2, "path": "torch", "fwd_rel_error_vs_fp32": 0.06}
    layer.update(
        fwd_speedup_vs_naive=1.0, sampling_fwd_speedup_vs_naive=1.0, fwd_bwd_speedup_vs_naive=1.0
    )
    quant = {"gbps": dict.fromkeys(("public_rowwise", "reference_rowwise", "cast_fp8"), 1.0)}
    cuda = {
        "quantize": {"tbps": {"rowwise": 3.2}},
        "gemms": {"error": "RuntimeError: no kernel"},
        "layer": {
            "timings": {"mx_fwd_bwd": timing},
            "fwd_bwd_speedup_vs_best_bf16": 1.1,
            "errors": {"bf16_loop_fwd_bwd": "OutOfMemoryError: ..."},
        },
    }
    summary = bench.summarize([layer], quant, cuda)
    assert summary["cuda_ran"] is True
    assert summary["cuda_quantize_tbps"] == 3.2 and summary["cuda_quantize_target_met"] is True
    assert summary["cuda_gate_up_tflops"] is None
    assert summary["cuda_layer_fwd_bwd_ms"] == 1.0
    assert summary["cuda_layer_target_met"] is False
    assert set(summary["cuda_errors"]) == {"gemms", "bf16_loop_fwd_bwd"}
    assert "CUDA: quantize 3.2 TB/s" in bench.one_line(summary)


def test_cuda_parts_run_on_cpu_under_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA section's code, on CPU tensors with the Triton kernels interpreted and
    one untimed call per figure: its keys and error handling, not its numbers."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch._grouped_mm is missing")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(bench, "cuda_time", lambda fn, repeats: (fn(), {"p50_ms": 1.0})[1])
    p = bench.make_problem(32, 4, 2, 32, 32, dtype=torch.bfloat16)

    quant = bench.bench_cuda_quantize(p, 1)
    assert quant["shape"] == [64, 32] and set(quant["tbps"]) == {
        "rowwise",
        "colwise",
        "dual",
        "cast_fp8",
    }
    gemms = bench.bench_cuda_gemms(p, 1)
    assert gemms["dot_mode"] == "dequant" and not gemms["errors"]
    assert set(gemms["tflops"]) == {
        "mx_gate_up_swiglu",
        "mx_down_weighted",
        "bf16_grouped_mm_gate_up",
        "bf16_grouped_mm_down",
        "bf16_loop_gate_up",
        "bf16_loop_down",
    }
    assert gemms["gate_up_ratio_vs_best_bf16"] == 1.0
    layer = bench.bench_cuda_layer(p, 1)
    assert layer["backend"] == "triton"
    for name in ("mx_fwd", "mx_fwd_prequantized", "mx_fwd_bwd", "bf16_loop_fwd_bwd"):
        assert name in layer["timings"], layer["errors"]
    assert layer["fwd_bwd_speedup_vs_best_bf16"] == 1.0
    assert 0 < layer["fwd_rel_error_vs_bf16_loop"] < 0.1
