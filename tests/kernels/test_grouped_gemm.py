"""Grouped MX GEMMs (kernels/grouped_gemm.py) against dequantize-then-fp32-matmul
references built here from kernels.reference, on small routed problems: an empty
expert (the first or a middle one), an expert with more slots than one tile, padding
slots inside segments, unused slots past the last segment, and D/F that leave partial
tiles. Every MX product variant runs; without a GPU, under the Triton interpreter."""

from __future__ import annotations

import os

# Triton fixes compiled-or-interpreted when a kernel is defined (at import), so the
# choice comes before anything imports triton (tests/conftest.py does the same).
if not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as torch_f

from kernels import grouped_gemm as gg
from kernels import reference

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
if INTERPRET and type(gg._grouped_mm_kernel).__name__ != "InterpretedFunction":
    # triton (its own tl.* helpers included) was imported before the variable was
    # set; nothing short of a fresh process fixes that.
    raise RuntimeError(
        "triton was imported before TRITON_INTERPRET=1 was set: set it first "
        "(tests/conftest.py does, for runs under tests/)"
    )

if INTERPRET:
    DEVICE = "cpu"
elif torch.cuda.is_available():
    DEVICE = "cuda"
else:
    pytest.skip("needs a GPU or TRITON_INTERPRET=1", allow_module_level=True)

MODES = ["dequant", "fp8", "scaled"]
# (tokens T, experts E, the empty expert, D, F); top-2 routing.
SHAPES = {
    "T72-E4-D64-F64": (72, 4, 2, 64, 64),
    "T70-E3-D96-F96": (70, 3, 0, 96, 96),  # K and N tails narrower than a tile
}
K_TOP = 2


def make_routing(num_tokens: int, k: int, num_experts: int, empty: int, seed: int = 0):
    """The documented slot layout: (token [S], weight [S], offsets [E + 1]). Expert
    `empty` gets no token, every segment is padded to a multiple of 32 with slots of
    token T and weight 0, and S has room for the worst case (as kernels.routing sizes
    it), so unused slots follow offsets[E]."""
    g = torch.Generator().manual_seed(seed)
    choices = torch.tensor([e for e in range(num_experts) if e != empty])
    probs = torch.ones(len(choices))
    probs[0] = 4.0  # skewed, so that one expert gets more slots than one tile
    ids = torch.stack([torch.multinomial(probs, k, generator=g) for _ in range(num_tokens)])
    ids = choices[ids]  # [T, k], distinct experts per token
    wts = torch.softmax(torch.randn(num_tokens, k, generator=g), dim=-1)
    S = (num_tokens * k + num_experts * 31 + 31) // 32 * 32
    token = torch.full((S,), num_tokens, dtype=torch.int64)
    weight = torch.zeros(S)
    offsets = [0]
    for e in range(num_experts):
        t, j = (ids == e).nonzero(as_tuple=True)
        start, n = offsets[-1], t.numel()
        token[start : start + n] = t
        weight[start : start + n] = wts[t, j]
        offsets.append(start + (n + 31) // 32 * 32)
    return token, weight, torch.tensor(offsets, dtype=torch.int64)


def quant(x: torch.Tensor, dim: int):
    """(q, s, dequantized values) of x quantized along dim by the reference."""
    q, s = reference.mx_quantize(x, dim)
    return q, s, reference.mx_dequantize(q, s, dim)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative Frobenius error of a against b."""
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def dev(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to(DEVICE) for t in tensors]


def u8(q: torch.Tensor) -> torch.Tensor:
    return q.cpu().view(torch.uint8)


@pytest.fixture(scope="module", params=list(SHAPES), ids=list(SHAPES))
def p(request) -> dict:
    """A routed problem and random MX operands (with their values) for every op."""
    T, E, empty, D, F = SHAPES[request.param]
    token, weight, offsets = make_routing(T, K_TOP, E, empty)
    S = token.numel()
    g = torch.Generator().manual_seed(1)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    return {
        "T": T, "E": E, "empty": empty, "D": D, "F": F, "S": S,
        "token": token, "weight": weight, "offsets": offsets,
        "x": quant(randn(T, D), -1),
        "w_gu": quant(randn(E, 2 * F, D) / D**0.5, -1),  # [E, 2F, D] along D
        "w_gu_col": quant(randn(E, 2 * F, D), 1),  # along 2F: scales [E, 2F // 32, D]
        "w_down": quant(randn(E, D, F), -1),  # [E, D, F] along F
        "w_down_col": quant(randn(E, D, F), 1),  # along D: scales [E, D // 32, F]
        "h": quant(randn(S, F), -1),
        "dy": quant(randn(S, D), -1),
        "dgu": quant(randn(S, 2 * F), -1),
        "a": quant(randn(S, 2 * F), 0),  # along the slot dim: scales [S // 32, 2F]
        "b": quant(randn(S, D), 0),
    }  # fmt: skip


def segments(p: dict) -> list[tuple[int, int, int]]:
    offsets = p["offsets"].tolist()
    return [(e, offsets[e], offsets[e + 1]) for e in range(p["E"])]


def per_expert_rows(p: dict, n_cols: int, fn) -> torch.Tensor:
    """[S, n_cols]: fn(e, lo, hi) in the rows of each expert, zeros elsewhere."""
    out = torch.zeros(p["S"], n_cols)
    for e, lo, hi in segments(p):
        if hi > lo:
            out[lo:hi] = fn(e, lo, hi)
    return out


def gate_up_reference(p: dict) -> torch.Tensor:
    """[S, 2F]: x[token[i]] @ W_gate_up[e]^T from dequantized operands (0 for padding)."""
    T, token, xd, wd = p["T"], p["token"], p["x"][2], p["w_gu"][2]

    def gu(e, lo, hi):
        rows = xd[token[lo:hi].clamp(max=T - 1)] * (token[lo:hi] < T)[:, None]
        return rows @ wd[e].T

    return per_expert_rows(p, 2 * p["F"], gu)


@pytest.fixture(params=MODES)
def mode(request, monkeypatch) -> str:
    monkeypatch.setenv("TACHY_MX_DOT", request.param)
    return request.param


def test_routing_helper_makes_the_documented_layout(p):
    offsets, token, S, T = p["offsets"], p["token"], p["S"], p["T"]
    assert (offsets % 32 == 0).all() and offsets[-1] < S  # unused slots at the end
    assert offsets[p["empty"] + 1] == offsets[p["empty"]]
    assert (offsets[1:] - offsets[:-1]).max() > gg.INTERPRETER_CONFIG["BLOCK_M"]
    assert (token[offsets[-1] :] == T).all() and (token < T).sum() == T * K_TOP


def test_gate_up_swiglu(p, mode):
    F = p["F"]
    x_q, x_s, _ = p["x"]
    w_q, w_s, _ = p["w_gu"]
    token = p["token"]
    real = token < p["T"]
    gu_ref = gate_up_reference(p)
    h_q, h_s, pre = gg.gate_up_swiglu(
        *dev(x_q, x_s, token, p["offsets"], w_q, w_s), save_preact=True
    )
    pre = pre.cpu()
    assert h_q.dtype == torch.float8_e4m3fn and h_q.shape == (p["S"], F)
    assert h_s.dtype == torch.uint8 and h_s.shape == (p["S"], F // 32)
    assert rel_err(pre, gu_ref) < 1e-5
    # h bit for bit: the reference quantizer on the SwiGLU of the kernel's own fp32
    # pre-activations (fp32 sums in another order could put a value on the other side
    # of a rounding edge)...
    ref_q, ref_s = reference.mx_quantize(torch_f.silu(pre[:, :F]) * pre[:, F:], -1)
    assert torch.equal(u8(h_q), u8(ref_q)) and torch.equal(h_s.cpu(), ref_s)
    # ...and, on these problems, on the reference's pre-activations too.
    ref_q, ref_s = reference.mx_quantize(torch_f.silu(gu_ref[:, :F]) * gu_ref[:, F:], -1)
    assert torch.equal(u8(h_q), u8(ref_q)) and torch.equal(h_s.cpu(), ref_s)
    # Padding slots and unused slots: zero bytes, scale byte 0, zero pre-activations.
    assert (u8(h_q)[~real] == 0).all() and (h_s.cpu()[~real] == 0).all()
    assert (pre[~real] == 0).all()


def test_gate_up_swiglu_without_preact(p):
    args = dev(*p["x"][:2], p["token"], p["offsets"], *p["w_gu"][:2])
    h_q, h_s, pre = gg.gate_up_swiglu(*args, save_preact=False)
    h_q2, h_s2, _ = gg.gate_up_swiglu(*args, save_preact=True)
    assert pre is None
    assert torch.equal(u8(h_q), u8(h_q2)) and torch.equal(h_s, h_s2)


def test_gate_up_nan_scale_gives_nan_blocks(p):
    """A NaN scale byte (255) in x makes every slot of that token NaN, which the
    epilogue quantizes as the reference does: scale 255, values 0x7F."""
    x_q, x_s, _ = p["x"]
    x_s = x_s.clone()
    x_s[p["token"][0], 1] = 255
    h_q, h_s, _ = gg.gate_up_swiglu(
        *dev(x_q, x_s, p["token"], p["offsets"], *p["w_gu"][:2]), save_preact=False
    )
    hit = p["token"] == p["token"][0]
    assert (h_s.cpu()[hit] == 255).all() and (u8(h_q)[hit] == 0x7F).all()
    assert (h_s.cpu()[~hit] != 255).all()


def test_down_weighted(p, mode):
    h_q, h_s, hd = p["h"]
    w_q, w_s, wd = p["w_down"]
    weight = p["weight"]
    ref = per_expert_rows(p, p["D"], lambda e, lo, hi: weight[lo:hi, None] * (hd[lo:hi] @ wd[e].T))
    out = gg.down_weighted(*dev(h_q, h_s, w_q, w_s, p["offsets"], weight)).cpu()
    assert out.dtype == torch.float32 and out.shape == (p["S"], p["D"])
    assert rel_err(out, ref) < 1e-5
    assert (out[weight == 0] == 0).all()  # padding and unused slots


def test_grad_down(p, mode):
    dy_q, dy_s, dyd = p["dy"]
    w_q, w_s, wd = p["w_down_col"]
    ref = per_expert_rows(p, p["F"], lambda e, lo, hi: dyd[lo:hi] @ wd[e])
    out = gg.grad_down(*dev(dy_q, dy_s, w_q, w_s, p["offsets"])).cpu()
    assert out.shape == (p["S"], p["F"])
    assert rel_err(out, ref) < 1e-5
    assert (out[int(p["offsets"][-1]) :] == 0).all()


def test_grad_gate_up(p, mode):
    dgu_q, dgu_s, dgud = p["dgu"]
    w_q, w_s, wd = p["w_gu_col"]
    ref = per_expert_rows(p, p["D"], lambda e, lo, hi: dgud[lo:hi] @ wd[e])
    out = gg.grad_gate_up(*dev(dgu_q, dgu_s, w_q, w_s, p["offsets"])).cpu()
    assert out.shape == (p["S"], p["D"])
    assert rel_err(out, ref) < 1e-5
    assert (out[int(p["offsets"][-1]) :] == 0).all()


def test_weight_grad(p, mode):
    a_q, a_s, ad = p["a"]
    b_q, b_s, bd = p["b"]
    ref = torch.zeros(p["E"], 2 * p["F"], p["D"])
    for e, lo, hi in segments(p):  # the unused slots past offsets[E] count nowhere
        ref[e] = ad[lo:hi].T @ bd[lo:hi]
    out = gg.weight_grad(*dev(a_q, a_s, b_q, b_s, p["offsets"]), p["E"]).cpu()
    assert out.shape == ref.shape
    assert rel_err(out, ref) < 1e-5
    assert (out[p["empty"]] == 0).all()


@pytest.mark.skipif(not INTERPRET, reason="sets the interpreter's tile sizes")
def test_other_tile_sizes(p, monkeypatch):
    """BLOCK_M = 32 (a tile per MX block) with BLOCK_N and BLOCK_K wider than the
    matrices: the tile map and the masks give the same answers."""
    monkeypatch.setitem(gg.INTERPRETER_CONFIG, "BLOCK_M", 32)
    monkeypatch.setitem(gg.INTERPRETER_CONFIG, "BLOCK_N", 128)
    monkeypatch.setitem(gg.INTERPRETER_CONFIG, "BLOCK_K", 128)
    h_q, h_s, hd = p["h"]
    w_q, w_s, wd = p["w_down"]
    weight = p["weight"]
    ref = per_expert_rows(p, p["D"], lambda e, lo, hi: weight[lo:hi, None] * (hd[lo:hi] @ wd[e].T))
    assert rel_err(gg.down_weighted(h_q, h_s, w_q, w_s, p["offsets"], weight), ref) < 1e-5
    a_q, a_s, ad = p["a"]
    b_q, b_s, bd = p["b"]
    dw = gg.weight_grad(a_q, a_s, b_q, b_s, p["offsets"], p["E"])
    for e, lo, hi in segments(p):
        if hi > lo:
            assert rel_err(dw[e], ad[lo:hi].T @ bd[lo:hi]) < 1e-5
        else:
            assert (dw[e] == 0).all()
    h_q, h_s, pre = gg.gate_up_swiglu(
        *p["x"][:2], p["token"], p["offsets"], *p["w_gu"][:2], save_preact=True
    )
    assert rel_err(pre, gate_up_reference(p)) < 1e-5
    F = p["F"]
    ref_q, ref_s = reference.mx_quantize(torch_f.silu(pre[:, :F]) * pre[:, F:], -1)
    assert torch.equal(u8(h_q), u8(ref_q)) and torch.equal(h_s, ref_s)


def test_no_slots():
    """S = 0: empty outputs (and weight gradients of zeros); nothing is launched."""
    offsets = torch.zeros(4, dtype=torch.int64)
    x_q, x_s = reference.mx_quantize(torch.randn(4, 32), -1)
    w_q, w_s = reference.mx_quantize(torch.randn(3, 64, 32), -1)
    token = torch.zeros(0, dtype=torch.int64)
    h_q, h_s, pre = gg.gate_up_swiglu(*dev(x_q, x_s, token, offsets, w_q, w_s), save_preact=True)
    assert h_q.shape == (0, 32) and h_s.shape == (0, 1) and pre.shape == (0, 64)
    a_q = torch.zeros(0, 32, dtype=torch.float8_e4m3fn)
    a_s = torch.zeros(0, 32, dtype=torch.uint8)
    dw = gg.weight_grad(*dev(a_q, a_s, a_q, a_s, offsets), 3)
    assert dw.shape == (3, 32, 32) and (dw == 0).all()


def test_bad_shapes_and_types_raise(p):
    T, S, E = p["T"], p["S"], p["E"]
    x_q, x_s, _ = p["x"]
    w_q, w_s, _ = p["w_gu"]
    token, offsets = p["token"], p["offsets"]

    def gate_up(**changes):
        args = {"x_q": x_q, "x_s": x_s, "token": token, "offsets": offsets}
        args |= {"w_q": w_q, "w_s": w_s, **changes}
        return gg.gate_up_swiglu(**args, save_preact=False)

    with pytest.raises(ValueError, match="S = 48 must be a multiple of 32"):
        gate_up(token=token[:48])
    with pytest.raises(ValueError, match="w_q has shape"):
        gate_up(
            **dict(zip(("x_q", "x_s"), reference.mx_quantize(torch.randn(T, 128)), strict=True))
        )
    with pytest.raises(ValueError, match="x_s has shape"):
        gate_up(x_s=x_s[:, :1])
    with pytest.raises(ValueError, match=rf"offsets must have E \+ 1 = {E + 1}"):
        gate_up(offsets=offsets[:-1])
    with pytest.raises(TypeError, match="offsets must be int64"):
        gate_up(offsets=offsets.int())
    with pytest.raises(TypeError, match="x_q must be float8_e4m3fn"):
        gate_up(x_q=x_q.float())
    with pytest.raises(ValueError, match="F = 48 must be a multiple of 32"):
        gate_up(w_q=torch.zeros(E, 96, p["D"], dtype=torch.float8_e4m3fn))
    # D not a multiple of 32 (which the reference cannot quantize: raw bytes).
    dy_q = torch.zeros(S, 48, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="D = 48 must be a multiple of 32"):
        gg.grad_down(dy_q, torch.zeros(S, 1, dtype=torch.uint8), *p["w_down_col"][:2], offsets)
    with pytest.raises(ValueError, match="w_s has shape"):  # the row-wise copy given
        gg.grad_down(*p["dy"][:2], *p["w_down"][:2], offsets)
    with pytest.raises(ValueError, match="w_s has shape"):
        gg.grad_gate_up(*p["dgu"][:2], *p["w_gu"][:2], offsets)
    with pytest.raises(ValueError, match="weight must have S"):
        gg.down_weighted(*p["h"][:2], *p["w_down"][:2], offsets, p["weight"][:-32])
    a_q, a_s, _ = p["a"]
    with pytest.raises(ValueError, match="a_s has shape"):
        gg.weight_grad(a_q, a_s.T, *p["b"][:2], offsets, E)
    with pytest.raises(ValueError, match=rf"offsets must have E \+ 1 = {E}"):
        gg.weight_grad(a_q, a_s, *p["b"][:2], offsets, E - 1)
    with pytest.raises(ValueError, match="TACHY_MX_DOT"), pytest.MonkeyPatch.context() as mp:
        mp.setenv("TACHY_MX_DOT", "int8")
        gg.weight_grad(a_q, a_s, *p["b"][:2], offsets, E)
