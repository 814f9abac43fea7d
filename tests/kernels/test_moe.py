"""kernels.moe_ffn against its twin kernels.reference.moe_ffn, and both against the
unquantized fp32 model (issue 5's error budgets). Every test takes the torch path
(the `torch_path` fixture of tests/conftest.py) except the `triton_device` ones,
which run kernels.grouped_gemm: on a GPU, or under the Triton interpreter that
tests/conftest.py turns on when there is none."""

from __future__ import annotations

import os

import pytest
import torch

from kernels import moe, reference
from kernels.moe import moe_ffn

# Read at import, before any fixture changes it (conftest set it before triton loaded).
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture(autouse=True)
def _torch_path_by_default(torch_path: None) -> None:
    """TRITON_INTERPRET=0: the plain-torch path (triton_device turns Triton back on)."""


@pytest.fixture
def triton_device(monkeypatch: pytest.MonkeyPatch) -> str:
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    pytest.skip("needs a GPU or TRITON_INTERPRET=1 (set by tests/conftest.py)")


# (T, k, E, D, F): k = 1, T = 1, E larger than T * k, a token count that is not a
# multiple of 32, d_ff != d_model.
SHAPES = [(64, 2, 4, 64, 96), (1, 1, 4, 32, 32), (3, 2, 16, 32, 64), (45, 1, 3, 96, 32)]


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(
        a.flatten().double(), b.flatten().double(), 0
    ).item()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def problem(T: int, k: int, E: int, D: int, F: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Gaussian tokens, softmax-top-k routing, weights scaled to keep unit activations."""
    torch.manual_seed(seed)
    weights, ids = torch.softmax(torch.randn(T, E), dim=-1).topk(k, dim=-1)
    return {
        "x": torch.randn(T, D),
        "topk_weights": weights,
        "topk_ids": ids,
        "w_gate_up": torch.randn(E, 2 * F, D) / D**0.5,
        "w_down": torch.randn(E, D, F) / F**0.5,
    }


GRAD_NAMES = ("x", "topk_weights", "w_gate_up", "w_down")


def run(fn, p: dict[str, torch.Tensor], dy: torch.Tensor, **kw) -> tuple[torch.Tensor, dict]:
    """Output and the gradients of x, topk_weights, w_gate_up and w_down for y.backward(dy)."""
    leaves = {n: t.detach().clone().requires_grad_(n in GRAD_NAMES) for n, t in p.items()}
    y = fn(**leaves, **kw)
    y.backward(dy)
    return y.detach(), {n: leaves[n].grad for n in GRAD_NAMES}


@pytest.mark.parametrize(("T", "k", "E", "D", "F"), SHAPES)
def test_forward_and_backward_match_the_reference(T: int, k: int, E: int, D: int, F: int) -> None:
    p = problem(T, k, E, D, F)
    dy = torch.randn(T, D)
    y, grads = run(moe_ffn, p, dy)
    y_ref, grads_ref = run(reference.moe_ffn, p, dy)
    assert y.shape == (T, D) and y.dtype == torch.float32
    assert rel(y, y_ref) < 1e-5
    for name in GRAD_NAMES:
        assert grads[name].shape == p[name].shape, name
        assert rel(grads[name], grads_ref[name]) < 1e-5, name


@pytest.mark.parametrize(("T", "k", "E", "D", "F"), [(128, 2, 4, 64, 96), (96, 4, 8, 128, 64)])
def test_error_against_unquantized_fp32(T: int, k: int, E: int, D: int, F: int) -> None:
    p = problem(T, k, E, D, F, seed=1)
    dy = torch.randn(T, D)
    y, grads = run(moe_ffn, p, dy)
    y32, grads32 = run(reference.moe_ffn, p, dy, quantize=False)
    assert rel(y, y32) < 0.08  # four MX operands, each about 2-3 %
    for name in GRAD_NAMES:
        assert cos(grads[name], grads32[name]) > 0.99, name


def test_unquantized_reference_is_the_obvious_loop() -> None:
    """The fp32 twin against a per-(token, choice) loop written from the formula."""
    p = problem(6, 2, 3, 32, 32, seed=2)
    y = reference.moe_ffn(**p, quantize=False)
    F = p["w_down"].shape[2]
    expected = torch.zeros_like(p["x"])
    for t in range(6):
        for j in range(2):
            e = int(p["topk_ids"][t, j])
            gu = p["w_gate_up"][e] @ p["x"][t]
            h = torch.nn.functional.silu(gu[:F]) * gu[F:]
            expected[t] += p["topk_weights"][t, j] * (p["w_down"][e] @ h)
    assert torch.allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_quantized_reference_quantizes_the_four_operands() -> None:
    """quantize=True differs from the fp32 model run on MX copies of x and the weights
    only by the quantization of h: a few per cent, not zero."""
    p = problem(16, 1, 2, 32, 32, seed=3)
    mx = reference.mx_round_trip
    manual = reference.moe_ffn(
        mx(p["x"]),
        p["topk_weights"],
        p["topk_ids"],
        mx(p["w_gate_up"]),
        mx(p["w_down"]),
        quantize=False,
    )
    y = reference.moe_ffn(**p)
    assert 0 < rel(y, manual) < 0.05  # only h's quantization differs


def test_twice_is_bit_identical() -> None:
    p = problem(64, 2, 4, 64, 96, seed=4)
    dy = torch.randn(64, 64)
    y1, g1 = run(moe_ffn, p, dy)
    y2, g2 = run(moe_ffn, p, dy)
    assert torch.equal(y1, y2)
    for name in GRAD_NAMES:
        assert torch.equal(g1[name], g2[name]), name


def test_prequantized_weights_give_the_same_forward() -> None:
    p = problem(32, 2, 4, 64, 64, seed=6)
    wgu = reference.mx_quantize(p["w_gate_up"], -1)
    wd = reference.mx_quantize(p["w_down"], -1)
    y = moe_ffn(**p)
    pre = {**p, "w_gate_up": wgu, "w_down": wd}
    assert torch.equal(moe_ffn(**pre), y)
    assert torch.equal(reference.moe_ffn(**pre), reference.moe_ffn(**p))
    # Sampling needs no gradient, but x and the router still get one.
    x = p["x"].clone().requires_grad_()
    tw = p["topk_weights"].clone().requires_grad_()
    dy = torch.randn_like(x)
    moe_ffn(x, tw, p["topk_ids"], wgu, wd).backward(dy)
    x_ref = p["x"].clone().requires_grad_()
    tw_ref = p["topk_weights"].clone().requires_grad_()
    reference.moe_ffn(x_ref, tw_ref, p["topk_ids"], wgu, wd).backward(dy)
    assert rel(x.grad, x_ref.grad) < 1e-5 and rel(tw.grad, tw_ref.grad) < 1e-5


def test_only_the_gradients_asked_for() -> None:
    p = problem(16, 2, 4, 32, 32, seed=7)
    x = p["x"].clone().requires_grad_()
    w_down = p["w_down"].clone().requires_grad_()
    moe_ffn(x, p["topk_weights"], p["topk_ids"], p["w_gate_up"], w_down).sum().backward()
    assert x.grad is not None and w_down.grad is not None
    with torch.no_grad():
        assert torch.equal(moe_ffn(**p), reference.moe_ffn(**p))


def test_bfloat16_inputs() -> None:
    p = problem(32, 2, 4, 64, 32, seed=8)
    p16 = {n: (t.bfloat16() if t.is_floating_point() else t) for n, t in p.items()}
    dy = torch.randn(32, 64).bfloat16()
    y, grads = run(moe_ffn, p16, dy)
    y_ref, grads_ref = run(reference.moe_ffn, p16, dy)
    assert y.dtype == torch.bfloat16
    assert rel(y, y_ref) < 1e-2  # the same fp32 result, rounded to bf16
    for name in GRAD_NAMES:
        assert grads[name].dtype == torch.bfloat16, name
        assert rel(grads[name], grads_ref[name]) < 1e-2, name


def test_the_torch_backend_runs_on_plain_cpu() -> None:
    assert moe._backend(torch.zeros(1)) is moe.TorchGemms


# (T, k, E, D, F) for the Triton path: an empty expert, a segment longer than one
# 64-row interpreter tile, d_ff != d_model, a token choosing one expert twice.
TRITON_SHAPES = [(40, 2, 5, 64, 32), (3, 1, 4, 32, 64)]


@pytest.mark.parametrize(("T", "k", "E", "D", "F"), TRITON_SHAPES)
def test_triton_path_matches_the_reference(
    triton_device: str, T: int, k: int, E: int, D: int, F: int
) -> None:
    p = problem(T, k, E, D, F, seed=9)
    p["topk_ids"] = torch.where(p["topk_ids"] == 1, 0, p["topk_ids"])  # expert 1 gets nothing
    dy = torch.randn(T, D)
    assert moe._backend(torch.zeros(1, device=triton_device)) is not moe.TorchGemms
    on_device = {n: t.to(triton_device) for n, t in p.items()}
    y, grads = run(moe_ffn, on_device, dy.to(triton_device))
    y_ref, grads_ref = run(reference.moe_ffn, p, dy)
    assert rel(y.cpu(), y_ref) < 1e-5
    for name in GRAD_NAMES:
        assert rel(grads[name].cpu(), grads_ref[name]) < 1e-5, name


@pytest.mark.parametrize("fn", [moe_ffn, reference.moe_ffn], ids=["kernels", "reference"])
def test_bad_arguments_are_refused(fn) -> None:
    p = problem(4, 2, 4, 64, 32)

    def call(**changes):
        return fn(**{**p, **changes})

    with pytest.raises(ValueError, match="multiples of 32"):
        call(x=torch.randn(4, 48), w_gate_up=torch.randn(4, 64, 48), w_down=torch.randn(4, 48, 32))
    with pytest.raises(ValueError, match="multiples of 32"):
        call(w_gate_up=torch.randn(4, 40, 64), w_down=torch.randn(4, 64, 20))
    with pytest.raises(ValueError, match=r"must lie in \[0, 4\)"):
        call(topk_ids=torch.tensor([[0, 1], [2, 3], [4, 0], [1, 2]]))
    with pytest.raises(ValueError, match="4 experts but w_down has 5"):
        call(w_down=torch.randn(5, 64, 32))
    with pytest.raises(ValueError, match="d_model 64"):
        call(w_down=torch.randn(4, 32, 32))
    with pytest.raises(ValueError, match="2 \\* d_ff"):
        call(w_gate_up=torch.randn(4, 96, 64))
    with pytest.raises(ValueError, match="must match"):
        call(topk_weights=torch.ones(4, 3))
    with pytest.raises(ValueError, match=r"\[T, D\]"):
        call(x=torch.randn(4, 2, 32))
    with pytest.raises(ValueError, match="not MX-quantized"):
        call(w_down=(p["w_down"].to(torch.float8_e4m3fn), torch.zeros(4, 64, 2, dtype=torch.uint8)))


def test_dequantized_weights_are_reused_but_never_stale(torch_path: None) -> None:
    """Pre-quantized weights are dequantized once per tensor; changing them in place
    (or swapping the scales) is seen at once."""
    torch.manual_seed(12)
    w = torch.randn(2, 64, 32)
    q, s = reference.mx_quantize(w, -1)
    first = moe.dequantized_weights(q, s)
    assert moe.dequantized_weights(q, s) is first  # cached
    assert torch.equal(first, reference.mx_dequantize(q, s, -1))
    q.view(torch.uint8).zero_()  # in place: the version counter moves
    assert torch.equal(moe.dequantized_weights(q, s), torch.zeros_like(w))
    other_s = s.clone()
    other_s.fill_(127)
    q2, _ = reference.mx_quantize(w, -1)
    assert torch.equal(
        moe.dequantized_weights(q2, other_s), reference.mx_dequantize(q2, other_s, -1)
    )


def test_bf16_holds_every_mxfp8_value_exactly(torch_path: None) -> None:
    """The sampler's weight cache is bf16 because it loses nothing: every e4m3 code
    times every scale the weights of real models use (and far beyond) is exact."""
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    codes = codes[codes.isfinite()]  # 254 values: the two NaN codes dropped
    for exponent in range(-100, 101):
        values = codes * 2.0**exponent
        assert torch.equal(values.bfloat16().float(), values), exponent
    torch.manual_seed(13)
    w = torch.randn(2, 64, 64) * torch.logspace(-6, 3, 64)  # a spread of block scales
    q, s = reference.mx_quantize(w, -1)
    cached = moe.dequantized_weights(q, s, dtype=torch.bfloat16)
    assert cached.dtype == torch.bfloat16
    assert torch.equal(cached.float(), reference.mx_dequantize(q, s, -1))


@pytest.mark.parametrize("strategy", ["pairs", "dense", "loop", None])
@pytest.mark.parametrize("T", [3, 10, 40])
def test_torch_experts_match_reference(T, strategy, torch_path):
    from kernels import mx_quantize
    from kernels.moe import dequantized_weights, torch_experts

    w_gate_up, w_down = torch.randn(8, 2 * 64, 64) * 0.05, torch.randn(8, 64, 64) * 0.05
    x = torch.randn(T, 64)
    w = torch.rand(T, 2)
    e = torch.stack([torch.randperm(8)[:2] for _ in range(T)])
    got = torch_experts(x, w, e, w_gate_up, w_down, mx_activations=False, strategy=strategy)
    want = reference.moe_ffn(x, w, e, w_gate_up, w_down, quantize=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)

    # MX activations over dequantized MX weights: the kernels' forward
    gu, d = mx_quantize(w_gate_up, -1), mx_quantize(w_down, -1)
    got = torch_experts(
        x, w, e, dequantized_weights(*gu), dequantized_weights(*d), mx_activations=True,
        strategy=strategy,
    )  # fmt: skip
    want = reference.moe_ffn(x, w, e, gu, d, quantize=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_expert_strategy_choices(monkeypatch) -> None:
    """Eagerly large experts loop; compiled, a decode batch of large experts gathers
    its pairs rather than running every expert; small experts as before."""
    large, small = moe.LOOP_EXPERT_SIZE, 1 << 14
    assert moe.expert_strategy(1, 2, 8, large) == "loop"
    assert moe.expert_strategy(8, 2, 8, large) == "loop"
    assert moe.expert_strategy(1, 2, 8, small) == "pairs"
    assert moe.expert_strategy(8, 2, 8, small) == "dense"
    assert moe.expert_strategy(100, 2, 8, small) == "loop"
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert moe.expert_strategy(1, 2, 8, large) == "pairs"
    assert moe.expert_strategy(8, 2, 8, large) == "pairs"
    assert moe.expert_strategy(33, 2, 8, large) == "loop"
    assert moe.expert_strategy(8, 2, 8, small) == "dense"


def test_the_fp32_workspace_serves_inference_mode_and_plain_calls(torch_path) -> None:
    """The loop converts bf16 expert weights into reused buffers; one made under
    inference_mode must not be written by a later plain call (torch forbids it)."""
    from kernels.moe import torch_experts

    torch.manual_seed(3)
    w_gu, w_d = torch.randn(2, 64, 32).bfloat16(), torch.randn(2, 32, 32).bfloat16()
    x, w, e = torch.randn(3, 32), torch.full((3, 1), 1.0), torch.tensor([[0], [1], [0]])
    with torch.inference_mode():
        a = torch_experts(x, w, e, w_gu, w_d, mx_activations=False, strategy="loop")
    with torch.no_grad():
        b = torch_experts(x, w, e, w_gu, w_d, mx_activations=False, strategy="loop")
    assert torch.equal(a, b)


def copies(p: dict[str, torch.Tensor]) -> dict:
    """The problem with every expert a copy of expert 0, pre-quantized (upcycled,
    frozen experts)."""
    E = p["w_gate_up"].shape[0]
    return {
        **p,
        "w_gate_up": reference.mx_quantize(p["w_gate_up"][:1].repeat(E, 1, 1), -1),
        "w_down": reference.mx_quantize(p["w_down"][:1].repeat(E, 1, 1), -1),
    }


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_identical_frozen_experts_run_once_per_token(path, request) -> None:
    """Copies of one expert: one pass per token, weighted by the routing weights' sum,
    gives the top-k computation's output (to fp32 rounding) and gradients for x and the
    router as close to the unquantized layer's as the top-k pass gives (the MXFP8
    backward rounds the sum-weighted gradient instead of each weighted one)."""
    if path == "triton":
        request.getfixturevalue("triton_device")
    p = copies(problem(40, 2, 4, 64, 96, seed=21))
    shared = moe.shared_expert(p["w_gate_up"], p["w_down"])
    assert shared is not None and shared[0][0].shape[0] == 1
    assert moe.shared_expert(p["w_gate_up"], p["w_down"]) is shared  # checked once
    dy = torch.randn(40, 64)
    values = {k: reference.mx_dequantize(*p[k], -1) for k in ("w_gate_up", "w_down")}

    def grads(fn, weights, **kw):
        x = p["x"].clone().requires_grad_()
        tw = p["topk_weights"].clone().requires_grad_()
        y = fn(x, tw, p["topk_ids"], weights["w_gate_up"], weights["w_down"], **kw)
        y.backward(dy)
        return y.detach(), x.grad, tw.grad

    y, dx, dtw = grads(moe_ffn, p)
    y_ref, dx_ref, dtw_ref = grads(reference.moe_ffn, p)  # top-k passes
    _, dx_fp32, dtw_fp32 = grads(reference.moe_ffn, values, quantize=False)
    assert rel(y, y_ref) < 1e-5
    assert rel(dx, dx_fp32) < 1.5 * rel(dx_ref, dx_fp32) + 1e-3
    assert rel(dtw, dtw_fp32) < 1.5 * rel(dtw_ref, dtw_fp32) + 1e-3
    with torch.no_grad():  # the sampler's path gives the training path's forward
        y_sampled = moe_ffn(p["x"], p["topk_weights"], p["topk_ids"], p["w_gate_up"], p["w_down"])
    assert rel(y_sampled, y) < 1e-5


def test_experts_that_differ_or_train_are_never_shared() -> None:
    p = problem(8, 2, 4, 32, 32, seed=22)
    same = copies(p)
    assert moe.shared_expert(p["w_gate_up"], p["w_down"]) is None  # full precision: may train apart
    different = {k: reference.mx_quantize(p[k], -1) for k in ("w_gate_up", "w_down")}
    assert moe.shared_expert(different["w_gate_up"], different["w_down"]) is None
    assert moe.shared_expert(same["w_gate_up"], same["w_down"]) is not None
    q = same["w_down"][0]
    q.view(torch.uint8)[1, 0, 0] ^= 1  # expert 1 changed in place: no longer a copy
    assert moe.shared_expert(same["w_gate_up"], same["w_down"]) is None


def test_weights_that_are_dropped_leave_every_cache(torch_path) -> None:
    """The caches of kernels.moe are keyed weakly by the weight tensors: once a model's
    MX experts are dropped, neither the shared-expert check nor the dequantized copies
    keep them (a value that held a view of its own key once kept every model ever
    sampled from, 2.5 GB each for tachy's, until the process ended)."""
    import gc
    import weakref

    p = copies(problem(8, 2, 4, 32, 32, seed=23))
    with torch.no_grad():
        moe_ffn(p["x"], p["topk_weights"], p["topk_ids"], p["w_gate_up"], p["w_down"])
    assert moe.shared_expert(p["w_gate_up"], p["w_down"]) is not None  # cached
    gc.collect()  # what earlier tests dropped leaves first, so that only this one is counted
    before = (len(moe._SHARED), len(moe._DEQUANTIZED))
    gone = [weakref.ref(t) for t in (*p["w_gate_up"], *p["w_down"])]
    del p
    gc.collect()
    assert all(ref() is None for ref in gone)
    assert len(moe._SHARED) <= before[0] - 1
    assert len(moe._DEQUANTIZED) < before[1]
