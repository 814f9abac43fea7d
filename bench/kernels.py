"""Benchmark of the MXFP8 MoE kernels (issue 5).

    python -m bench.kernels [--json] [--quick] [--no-cuda]

CPU (always; the torch path of kernels.moe_ffn, as a CPU-only user gets it):

1. The MoE expert layer (SwiGLU, top-k routing) at a few sizes T tokens x E experts:
   kernels.moe_ffn forward (weights quantized inside), forward with pre-quantized
   weights (sampling), and forward + backward, against the per-expert loop a user
   would write (for each expert: mask its tokens, fp32 matmuls, index_add; the
   anchor). Ratios are anchor time / kernels time (> 1: kernels faster). Also the
   forward's relative error against the anchor (it is unquantized fp32).
2. mx_quantize throughput (GB/s = bytes read + written per second) of the public op
   and of the bit-level reference (kernels.reference.mx_quantize), against a
   plain fp32 -> fp8 cast of the same tensor.

CUDA (only when torch.cuda.is_available(); issue 5's shape: 16k tokens, 64 experts,
top-8, d_model 2048, d_ff 1408, BF16 inputs and weights), each part guarded so one
failure is recorded and the rest still runs:

3. Quantize bandwidth (TB/s; target >= 3 on an H200) of the [T*k, D] BF16 activations
   row-wise, column-wise and dual, against a plain BF16 -> fp8 cast.
4. Grouped GEMM TFLOP/s of the two forward GEMMs (kernels.grouped_gemm) against BF16
   torch._grouped_mm on the same slot layout (target: >= the BF16 baseline), FLOPs
   counted on the real T*k rows.
5. The layer forward and forward + backward against BF16 torch: torch._grouped_mm
   with autograd on the same routing, and the per-expert loop; target: the faster
   BF16 baseline's time / ours >= 1.2.

Figures are medians over repeats (CUDA: CUDA events after warm-up). Inputs are seeded.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as torch_f

import kernels
from bench import common
from kernels import moe, reference
from kernels.routing import combine, permute, route

CPU_SIZES = ((256, 8), (1024, 16))  # (tokens, experts)
CPU_TOP_K, CPU_D_MODEL, CPU_D_FF = 2, 256, 512
QUANT_SHAPE = (1024, 4096)
CUDA_SHAPE = {"tokens": 16384, "experts": 64, "top_k": 8, "d_model": 2048, "d_ff": 1408}
QUANT_TARGET_TBPS = 3.0
LAYER_TARGET_RATIO = 1.2


# ------------------------------------------------------------------ problem and anchor


def make_problem(
    tokens: int, experts: int, top_k: int, d_model: int, d_ff: int, device: str = "cpu",
    dtype: torch.dtype = torch.float32, seed: int = 0,
) -> dict[str, torch.Tensor]:  # fmt: skip
    """Gaussian tokens, softmax top-k routing, weights scaled for unit activations
    (drawn on `device`, then cast to `dtype`)."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)

    logits = torch.randn(tokens, experts, generator=g, device=device)
    weights, ids = torch.softmax(logits, dim=-1).topk(top_k, dim=-1)
    return {
        "x": randn(tokens, d_model),
        "topk_weights": weights.to(dtype),
        "topk_ids": ids,
        "w_gate_up": randn(experts, 2 * d_ff, d_model, scale=d_model**-0.5),
        "w_down": randn(experts, d_model, d_ff, scale=d_ff**-0.5),
    }


def naive_moe(x, topk_weights, topk_ids, w_gate_up, w_down) -> torch.Tensor:
    """The per-expert loop a user writes (the anchor): mask the tokens of each expert,
    plain matmuls in the inputs' dtype, index_add the weighted outputs."""
    y = torch.zeros_like(x)
    d_ff = w_down.shape[2]
    for e in range(w_gate_up.shape[0]):
        t, j = torch.where(topk_ids == e)
        if t.numel() == 0:
            continue
        gu = x[t] @ w_gate_up[e].T  # [n, 2F]
        h = torch_f.silu(gu[:, :d_ff]) * gu[:, d_ff:]  # [n, F]
        y.index_add_(0, t, (h @ w_down[e].T) * topk_weights[t, j, None])
    return y


def grouped_mm_moe(x, topk_weights, topk_ids, w_gate_up, w_down) -> torch.Tensor:
    """BF16 torch baseline on the same 32-aligned slot layout: torch._grouped_mm for
    both GEMMs (differentiable on CUDA), kernels.routing for the permutation."""
    T, E = x.shape[0], w_gate_up.shape[0]
    r = route(topk_ids, topk_weights, E)
    offs = r.offsets[1:].to(torch.int32)
    gu = torch._grouped_mm(permute(x, r), w_gate_up.transpose(-2, -1), offs=offs)  # [S, 2F]
    g, u = gu.chunk(2, dim=-1)
    out = torch._grouped_mm(torch_f.silu(g) * u, w_down.transpose(-2, -1), offs=offs)  # [S, D]
    return combine(out * r.weight[:, None].to(out.dtype), r, T)


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return round(((a.double() - b.double()).norm() / b.double().norm()).item(), 5)


# ------------------------------------------------------------------ timing


def cpu_times(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict]:
    """Stats of each closure, run in rounds (one call of each per round, after one
    warm-up call each) so that a noisy neighbour slows every contender alike."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: common.stats(values) for name, values in samples.items()}


def cuda_time(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> dict[str, float | int]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000)
    return common.stats(samples)


def fwd_bwd(fn: Callable[..., torch.Tensor], p: dict[str, torch.Tensor], dy: torch.Tensor):
    """A closure running fn forward and backward for gradients of x, the routing
    weights and both weight tensors (fresh leaves, so nothing accumulates)."""
    leaves = {
        n: (t.detach().requires_grad_() if t.is_floating_point() else t) for n, t in p.items()
    }

    def run() -> None:
        for t in leaves.values():
            t.grad = None
        fn(**leaves).backward(dy)

    return run


def no_grad(fn: Callable[..., torch.Tensor], p: dict[str, Any]) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        with torch.no_grad():
            return fn(**p)

    return run


def ratio(anchor: dict, measured: dict) -> float:
    return round(anchor["p50_ms"] / measured["p50_ms"], 3)


def gbps(num_bytes: int, timing: dict) -> float:
    return round(num_bytes / (timing["p50_ms"] / 1000) / 1e9, 3)


def mx_bytes(numel: int, in_bytes: int) -> int:
    """Bytes moved by an MX quantize: read the input, write fp8 values and scales."""
    return numel * in_bytes + numel + numel // reference.MX_BLOCK


# ------------------------------------------------------------------ CPU


def bench_cpu_layer(tokens: int, experts: int, top_k: int, d_model: int, d_ff: int, repeats: int):
    p = make_problem(tokens, experts, top_k, d_model, d_ff)
    dy = torch.randn(tokens, d_model, generator=torch.Generator().manual_seed(1))
    pre = {
        **p,
        "w_gate_up": kernels.mx_quantize(p["w_gate_up"]),
        "w_down": kernels.mx_quantize(p["w_down"]),
    }
    timings = cpu_times(
        {
            "naive_fwd": no_grad(naive_moe, p),
            "kernels_fwd": no_grad(moe.moe_ffn, p),
            "kernels_fwd_prequantized": no_grad(moe.moe_ffn, pre),
            "naive_fwd_bwd": fwd_bwd(naive_moe, p, dy),
            "kernels_fwd_bwd": fwd_bwd(moe.moe_ffn, p, dy),
        },
        repeats,
    )
    return {
        "tokens": tokens,
        "experts": experts,
        "top_k": top_k,
        "d_model": d_model,
        "d_ff": d_ff,
        "path": "triton" if kernels.use_triton(p["x"]) else "torch",
        **timings,
        "fwd_speedup_vs_naive": ratio(timings["naive_fwd"], timings["kernels_fwd"]),
        "sampling_fwd_speedup_vs_naive": ratio(
            timings["naive_fwd"], timings["kernels_fwd_prequantized"]
        ),
        "fwd_bwd_speedup_vs_naive": ratio(timings["naive_fwd_bwd"], timings["kernels_fwd_bwd"]),
        "fwd_rel_error_vs_fp32": rel_error(no_grad(moe.moe_ffn, p)(), no_grad(naive_moe, p)()),
    }


def bench_cpu_quantize(rows: int, cols: int, repeats: int) -> dict[str, Any]:
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(2))
    moved = mx_bytes(x.numel(), 4)
    timings = cpu_times(
        {
            "public_rowwise": lambda: kernels.mx_quantize(x, -1),
            "public_colwise": lambda: kernels.mx_quantize(x, 0),
            "reference_rowwise": lambda: reference.mx_quantize(x, -1),
            "reference_colwise": lambda: reference.mx_quantize(x, 0),
            "cast_fp8": lambda: x.to(torch.float8_e4m3fn),
        },
        repeats,
    )
    cast_bytes = x.numel() * 5
    return {
        "shape": [rows, cols],
        "path": "triton" if kernels.use_triton(x) else "torch",
        "timings": timings,
        "gbps": {
            name: gbps(cast_bytes if name == "cast_fp8" else moved, t)
            for name, t in timings.items()
        },
    }


# ------------------------------------------------------------------ CUDA


def guarded(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one CUDA part; an exception is recorded instead of ending the benchmark."""
    try:
        return fn()
    except Exception as exc:  # a GPU-only failure we cannot reproduce here: keep going
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def bench_cuda_quantize(p: dict[str, torch.Tensor], repeats: int) -> dict[str, Any]:
    top_k = p["topk_ids"].shape[1]
    act = p["x"].repeat(top_k, 1)  # [T*k, D] bf16: the size of the permuted activations
    moved = mx_bytes(act.numel(), act.element_size())
    timings = {
        "rowwise": cuda_time(lambda: kernels.mx_quantize(act, -1), repeats),
        "colwise": cuda_time(lambda: kernels.mx_quantize(act, 0), repeats),
        "dual": cuda_time(lambda: kernels.mx_quantize_dual(act), repeats),
        "cast_fp8": cuda_time(lambda: act.to(torch.float8_e4m3fn), repeats),
    }
    dual_bytes = act.numel() * act.element_size() + 2 * (moved - act.numel() * act.element_size())
    nbytes = {"rowwise": moved, "colwise": moved, "dual": dual_bytes}
    nbytes["cast_fp8"] = act.numel() * (act.element_size() + 1)
    tbps = {name: round(gbps(nbytes[name], t) / 1000, 3) for name, t in timings.items()}
    return {"shape": list(act.shape), "dtype": str(act.dtype), "timings": timings, "tbps": tbps}


def bench_cuda_gemms(p: dict[str, torch.Tensor], repeats: int) -> dict[str, Any]:
    """The two forward grouped GEMMs, MX (Triton; the first with its SwiGLU and
    re-quantization epilogue) against BF16 torch on the same slot layout:
    torch._grouped_mm, and a loop of per-expert matmuls (bounds read once, outside the
    timing). Each timing is guarded on its own."""
    from kernels import grouped_gemm

    x, w_gate_up, w_down = p["x"], p["w_gate_up"], p["w_down"]
    E, two_f, D = w_gate_up.shape
    F = two_f // 2
    pairs = p["topk_ids"].numel()
    r = route(p["topk_ids"], p["topk_weights"], E)
    x_q, x_s = kernels.mx_quantize(x)
    wgu_q, wgu_s = kernels.mx_quantize(w_gate_up)
    wd_q, wd_s = kernels.mx_quantize(w_down)
    h_q, h_s, _ = grouped_gemm.gate_up_swiglu(
        x_q, x_s, r.token, r.offsets, wgu_q, wgu_s, save_preact=False
    )
    offs = r.offsets[1:].to(torch.int32)
    bounds = r.offsets.tolist()
    xs = permute(x, r)  # [S, D] bf16
    h = torch.randn(r.num_slots, F, device=x.device, dtype=x.dtype)  # [S, F] bf16

    def loop(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # a [S, K], w [E, N, K]
        out = a.new_zeros(a.shape[0], w.shape[1])
        for e in range(E):
            out[bounds[e] : bounds[e + 1]] = a[bounds[e] : bounds[e + 1]] @ w[e].T
        return out

    runs = {  # name: (which GEMM, closure)
        "mx_gate_up_swiglu": ("gate_up", lambda: grouped_gemm.gate_up_swiglu(
            x_q, x_s, r.token, r.offsets, wgu_q, wgu_s, save_preact=False)),
        "mx_down_weighted": ("down", lambda: grouped_gemm.down_weighted(
            h_q, h_s, wd_q, wd_s, r.offsets, r.weight)),
        "bf16_grouped_mm_gate_up": ("gate_up", lambda: torch._grouped_mm(
            xs, w_gate_up.transpose(-2, -1), offs=offs)),
        "bf16_grouped_mm_down": ("down", lambda: torch._grouped_mm(
            h, w_down.transpose(-2, -1), offs=offs)),
        "bf16_loop_gate_up": ("gate_up", lambda: loop(xs, w_gate_up)),
        "bf16_loop_down": ("down", lambda: loop(h, w_down)),
    }  # fmt: skip
    flops = {"gate_up": 2 * pairs * two_f * D, "down": 2 * pairs * D * F}  # real rows only
    timings, tflops, errors = {}, {}, {}
    for name, (gemm, fn) in runs.items():
        try:
            timings[name] = cuda_time(fn, repeats)
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        tflops[name] = round(flops[gemm] / (timings[name]["p50_ms"] / 1000) / 1e12, 2)
    out: dict[str, Any] = {
        "dot_mode": grouped_gemm.dot_mode(x.device),
        "timings": timings,
        "tflops": tflops,
        "errors": errors,
    }
    for gemm, mine in (("gate_up", "mx_gate_up_swiglu"), ("down", "mx_down_weighted")):
        anchors = [n for n in (f"bf16_grouped_mm_{gemm}", f"bf16_loop_{gemm}") if n in timings]
        best = min(anchors, key=lambda n: timings[n]["p50_ms"]) if anchors else None
        out[f"bf16_best_{gemm}_tflops"] = tflops[best] if best else None
        if mine in timings and best:  # same FLOPs: the time ratio is the TFLOP/s ratio
            out[f"{gemm}_ratio_vs_best_bf16"] = ratio(timings[best], timings[mine])
    return out


def bench_cuda_layer(p: dict[str, torch.Tensor], repeats: int) -> dict[str, Any]:
    dy = torch.randn_like(p["x"])
    pre = {
        **p,
        "w_gate_up": kernels.mx_quantize(p["w_gate_up"]),
        "w_down": kernels.mx_quantize(p["w_down"]),
    }
    out: dict[str, Any] = {
        "backend": "triton" if moe._backend(p["x"]) is not moe.TorchGemms else "torch"
    }
    runs = {
        "mx_fwd": no_grad(moe.moe_ffn, p),
        "mx_fwd_prequantized": no_grad(moe.moe_ffn, pre),
        "mx_fwd_bwd": fwd_bwd(moe.moe_ffn, p, dy),
        "bf16_grouped_mm_fwd": no_grad(grouped_mm_moe, p),
        "bf16_grouped_mm_fwd_bwd": fwd_bwd(grouped_mm_moe, p, dy),
        "bf16_loop_fwd": no_grad(naive_moe, p),
        "bf16_loop_fwd_bwd": fwd_bwd(naive_moe, p, dy),
    }
    on_cuda = p["x"].is_cuda  # (the tests run this part on CPU, under the interpreter)
    timings, errors, peak_mib = {}, {}, {}
    for name, fn in runs.items():
        if on_cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            timings[name] = cuda_time(fn, repeats)
            if on_cuda:
                peak_mib[name] = round(torch.cuda.max_memory_allocated() / 2**20)
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
        if on_cuda:
            torch.cuda.empty_cache()
    out.update(timings=timings, peak_mib=peak_mib, errors=errors)
    for phase in ("fwd", "fwd_bwd"):
        mine = timings.get(f"mx_{phase}")
        anchors = [
            timings[f"bf16_{b}_{phase}"]
            for b in ("grouped_mm", "loop")
            if f"bf16_{b}_{phase}" in timings
        ]
        if mine and anchors:
            best = min(anchors, key=lambda t: t["p50_ms"])
            out[f"{phase}_speedup_vs_best_bf16"] = ratio(best, mine)
    with torch.no_grad():
        y = moe.moe_ffn(**p).float()
        out["fwd_rel_error_vs_bf16_loop"] = rel_error(y, naive_moe(**p).float())
    return out


def bench_cuda(shape: dict[str, int], repeats: int) -> dict[str, Any]:
    p = make_problem(**shape, device="cuda", dtype=torch.bfloat16)
    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "capability": list(torch.cuda.get_device_capability(0)),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "has_grouped_mm": hasattr(torch, "_grouped_mm"),
        "shape": shape,
        "quantize": guarded(lambda: bench_cuda_quantize(p, repeats)),
        "gemms": guarded(lambda: bench_cuda_gemms(p, repeats)),
        "layer": guarded(lambda: bench_cuda_layer(p, repeats)),
    }


# ------------------------------------------------------------------ report


def summarize(cpu_layers: list[dict], quant: dict, cuda: dict | None) -> dict[str, Any]:
    head = cpu_layers[-1]
    g = quant["gbps"]
    summary: dict[str, Any] = {
        "cpu_size": f"{head['tokens']}x{head['experts']}",
        "cpu_path": head["path"],
        "cpu_fwd_speedup_vs_naive": head["fwd_speedup_vs_naive"],
        "cpu_sampling_fwd_speedup_vs_naive": head["sampling_fwd_speedup_vs_naive"],
        "cpu_fwd_bwd_speedup_vs_naive": head["fwd_bwd_speedup_vs_naive"],
        "cpu_fwd_rel_error_vs_fp32": head["fwd_rel_error_vs_fp32"],
        "cpu_quantize_gbps": g["public_rowwise"],
        "cpu_quantize_reference_gbps": g["reference_rowwise"],
        "cpu_cast_gbps": g["cast_fp8"],
        "cpu_quantize_vs_cast": round(g["public_rowwise"] / g["cast_fp8"], 3),
        "cpu_quantize_reference_vs_cast": round(g["reference_rowwise"] / g["cast_fp8"], 3),
        "cuda_ran": cuda is not None,
    }
    q = (cuda or {}).get("quantize", {})
    gm = (cuda or {}).get("gemms", {})
    layer = (cuda or {}).get("layer", {})
    tbps = q.get("tbps", {}).get("rowwise")
    speedup = layer.get("fwd_bwd_speedup_vs_best_bf16")
    summary.update(
        cuda_quantize_tbps=tbps,
        cuda_quantize_target_met=None if tbps is None else tbps >= QUANT_TARGET_TBPS,
        cuda_gate_up_tflops=gm.get("tflops", {}).get("mx_gate_up_swiglu"),
        cuda_bf16_gate_up_tflops=gm.get("bf16_best_gate_up_tflops"),
        cuda_gemm_ratio_vs_bf16=gm.get("gate_up_ratio_vs_best_bf16"),
        cuda_down_gemm_ratio_vs_bf16=gm.get("down_ratio_vs_best_bf16"),
        cuda_layer_fwd_bwd_ms=layer.get("timings", {}).get("mx_fwd_bwd", {}).get("p50_ms"),
        cuda_layer_fwd_bwd_speedup_vs_bf16=speedup,
        cuda_layer_target_met=None if speedup is None else speedup >= LAYER_TARGET_RATIO,
        cuda_errors={
            **{
                n: part["error"]
                for n, part in (("quantize", q), ("gemms", gm), ("layer", layer))
                if "error" in part
            },
            **gm.get("errors", {}),
            **layer.get("errors", {}),
        }
        or None,
    )
    return summary


def one_line(summary: dict[str, Any]) -> str:
    text = (
        f"kernels: CPU {summary['cpu_path']} path at {summary['cpu_size']}: fwd "
        f"{summary['cpu_fwd_speedup_vs_naive']:.2f}x, sampling fwd "
        f"{summary['cpu_sampling_fwd_speedup_vs_naive']:.2f}x, fwd+bwd "
        f"{summary['cpu_fwd_bwd_speedup_vs_naive']:.2f}x the naive fp32 loop "
        f"(rel err {summary['cpu_fwd_rel_error_vs_fp32']:.3f}); quantize "
        f"{summary['cpu_quantize_gbps']:.2f} GB/s public, "
        f"{summary['cpu_quantize_reference_gbps']:.2f} GB/s reference "
        f"(cast {summary['cpu_cast_gbps']:.2f}); "
    )
    if not summary["cuda_ran"]:
        return text + "CUDA: not available"
    return text + (
        f"CUDA: quantize {summary['cuda_quantize_tbps']} TB/s (target >= {QUANT_TARGET_TBPS:g}), "
        f"gate/up GEMM {summary['cuda_gate_up_tflops']} vs BF16 "
        f"{summary['cuda_bf16_gate_up_tflops']} TFLOP/s, layer fwd+bwd "
        f"{summary['cuda_layer_fwd_bwd_speedup_vs_bf16']}x BF16 (target >= {LAYER_TARGET_RATIO:g})"
    )


def table(result: dict[str, Any]) -> str:
    lines = [f"machine: {result['machine']['cpu_count']} CPUs, torch {torch.__version__}"]
    lines.append("CPU layer (median ms; speedup = naive / kernels)")
    lines.append(
        f"  {'size':>9} {'naive fwd':>10} {'fwd':>9} {'sampling':>9} "
        f"{'naive f+b':>10} {'f+b':>9} {'fwd x':>6} {'f+b x':>6}"
    )
    for s in result["cpu"]["layers"]:
        lines.append(
            f"  {s['tokens']:>5}x{s['experts']:<3} {s['naive_fwd']['p50_ms']:>10.2f} "
            f"{s['kernels_fwd']['p50_ms']:>9.2f} {s['kernels_fwd_prequantized']['p50_ms']:>9.2f} "
            f"{s['naive_fwd_bwd']['p50_ms']:>10.2f} {s['kernels_fwd_bwd']['p50_ms']:>9.2f} "
            f"{s['fwd_speedup_vs_naive']:>6.2f} {s['fwd_bwd_speedup_vs_naive']:>6.2f}"
        )
    q = result["cpu"]["quantize"]
    lines.append(
        f"CPU quantize {q['shape']} (GB/s): " + ", ".join(f"{k} {v}" for k, v in q["gbps"].items())
    )
    cuda = result["cuda"]
    lines.append("CUDA: not available" if cuda is None else f"CUDA: {cuda}")
    return "\n".join(lines)


def parse_size(text: str) -> tuple[int, int]:
    tokens, _, experts = text.partition("x")
    return int(tokens), int(experts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kernels", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=list(CPU_SIZES),
                        metavar="TxE", help="CPU layer sizes, tokens x experts")  # fmt: skip
    parser.add_argument("--top-k", type=int, default=CPU_TOP_K)
    parser.add_argument("--d-model", type=int, default=CPU_D_MODEL)
    parser.add_argument("--d-ff", type=int, default=CPU_D_FF)
    parser.add_argument("--quant-shape", type=parse_size, default=QUANT_SHAPE, metavar="RxC")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per figure")
    parser.add_argument("--no-cuda", action="store_true", help="skip the CUDA section")
    options = parser.parse_args(argv)
    repeats = options.repeats or (2 if options.quick else 7)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print(
            "note: TRITON_INTERPRET=1, the CPU figures are the Triton interpreter's",
            file=sys.stderr,
        )

    started = time.perf_counter()
    load_before = os.getloadavg()
    layers = [
        bench_cpu_layer(t, e, options.top_k, options.d_model, options.d_ff, repeats)
        for t, e in options.sizes
    ]
    quant = bench_cpu_quantize(*options.quant_shape, repeats)
    cuda = None
    if torch.cuda.is_available() and not options.no_cuda:
        cuda = bench_cuda(CUDA_SHAPE, max(repeats, 5))
    result = {
        "benchmark": "kernels",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python -m bench.kernels "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            **common.machine_info(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        },
        "source": common.source_state(),
        "cpu": {"layers": layers, "quantize": quant},
        "cuda": cuda,
        # Other work on the machine shows here; the figures are only as quiet as it was.
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "elapsed_s": round(time.perf_counter() - started, 1),
        "summary": summarize(layers, quant, cuda),
    }
    common.report(result, options.json, table, one_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
