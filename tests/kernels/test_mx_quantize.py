"""MXFP8 quantize/dequantize: the Triton kernels (under the interpreter here) against
the reference, bit for bit, over the edge cases of the format; the reference against
torch's own fp8 cast and the OCP scale rule."""

from __future__ import annotations

import math

import pytest
import torch

import kernels
from kernels import mx_torch, reference
from kernels import quantize as triton_ops

E4M3 = torch.float8_e4m3fn


def bits(q: torch.Tensor) -> torch.Tensor:
    return q.view(torch.uint8)


def edge_rows() -> torch.Tensor:
    """Rows of 32 values, each block an edge case of the format."""
    rows = []
    rows.append(torch.zeros(32))
    rows.append(torch.full((32,), -0.0))
    mixed_zero = torch.zeros(32)
    mixed_zero[::2] = -0.0
    rows.append(mixed_zero)
    tiny = torch.tensor([1e-45, -1e-45, 1e-40, 2.0**-126, 2.0**-127] * 6 + [0.0, -0.0])
    rows.append(tiny)  # fp32 subnormals and the smallest normal
    for k in (-20, -1, 0, 3, 30):
        exact = torch.linspace(-1, 1, 32) * 448 * 2.0**k
        exact[5] = 448 * 2.0**k  # amax exactly 448 * 2^k
        rows.append(exact)
        above = exact.clone()
        above[5] = math.nextafter(448 * 2.0**k, math.inf)  # just above: next scale up
        rows.append(above)
    ramp = torch.arange(32, dtype=torch.float32) * 2.0**-9  # lands on fp8 subnormals
    rows.append(ramp)
    halves = (torch.arange(32, dtype=torch.float32) + 0.5) * 2.0**-9  # ties to even
    halves[-1] = 448.0
    rows.append(halves)
    big = torch.full((32,), 3.0e38)
    big[0] = -3.4e38
    rows.append(big)  # near fp32's max: the scale byte is near 254
    for special in (float("nan"), float("inf"), float("-inf")):
        row = torch.randn(32)
        row[7] = special
        rows.append(row)
    rows.append(torch.randn(32) * 1e-3)
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rounding", ["rceil", "floor"])
@pytest.mark.parametrize(
    "quantize", [triton_ops.quantize, mx_torch.quantize], ids=["triton", "torch"]
)
def test_both_paths_are_bit_exact_on_edge_cases(
    dtype: torch.dtype, rounding: str, quantize
) -> None:
    x = edge_rows()
    if dtype == torch.float16:
        x = x.clamp(-60000, 60000)  # keep fp16 finite where the row was finite
    x = x.to(dtype)
    q, s = quantize(x, -1, rounding)
    rq, rs = reference.mx_quantize(x, -1, rounding)
    assert q.dtype == E4M3 and s.dtype == torch.uint8
    assert torch.equal(bits(q), bits(rq))
    assert torch.equal(s, rs)


@pytest.mark.parametrize("shape,dim", [((64, 96), 0), ((3, 64, 5), 1), ((2, 3, 64), -1)])
def test_kernel_quantizes_along_any_dim(shape: tuple[int, ...], dim: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(shape) * torch.logspace(-3, 3, shape[-1])
    q, s = triton_ops.quantize(x, dim)
    rq, rs = reference.mx_quantize(x, dim)
    expected = list(shape)
    expected[dim] //= 32
    assert list(s.shape) == expected
    assert torch.equal(bits(q), bits(rq)) and torch.equal(s, rs)
    y = triton_ops.dequantize(q, s, dim)
    assert torch.equal(y, reference.mx_dequantize(rq, rs, dim))


def test_scale_rules_follow_the_spec() -> None:
    amax = torch.tensor([448.0, 449.0, 1.0, 1.75, 1.7500001, 0.0, 1e-40, 3e38, float("nan")])
    rceil = reference.scale_bytes(amax, "rceil")
    floor = reference.scale_bytes(amax, "floor")
    for value, r, f in zip(amax.tolist(), rceil.tolist(), floor.tolist(), strict=True):
        if math.isnan(value):
            assert r == f == 255
        elif value == 0.0 or value < 2.0**-126:
            assert r == f == 0
        else:
            # RCEIL: the smallest power of two with amax / scale <= 448.
            assert r - 127 == math.ceil(math.log2(value / 448.0))
            assert f - 127 == math.floor(math.log2(value)) - 8


def test_reference_encoding_matches_torchs_cast() -> None:
    torch.manual_seed(1)
    x = torch.cat([torch.randn(50_000) * scale for scale in (1e-3, 0.05, 1, 20, 200)])
    x = x.clamp(-448, 448)
    assert torch.equal(reference.encode_e4m3(x).to(torch.uint8), bits(x.to(E4M3)))
    every = torch.arange(256, dtype=torch.uint8).view(E4M3).float()
    finite = torch.isfinite(every)
    assert torch.equal(
        reference.encode_e4m3(every[finite]).to(torch.uint8),
        torch.arange(256, dtype=torch.uint8)[finite],
    )


def test_special_blocks() -> None:
    x = torch.zeros(3, 32)
    x[1, 4] = float("nan")
    x[2, 9] = float("-inf")
    q, s = triton_ops.quantize(x)
    assert s.tolist() == [[0], [255], [255]]
    assert torch.equal(bits(q[0]), torch.zeros(32, dtype=torch.uint8))
    y = triton_ops.dequantize(q, s)
    assert torch.equal(y[0], torch.zeros(32)) and y[1:].isnan().all()


def test_dequantize_to_other_dtypes() -> None:
    x = torch.randn(4, 64)
    q, s = triton_ops.quantize(x)
    for dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(
            triton_ops.dequantize(q, s, dtype=dtype), reference.mx_dequantize(q, s, dtype=dtype)
        )


@pytest.mark.parametrize("rounding", ["rceil", "floor"])
def test_dual_is_both_single_passes(rounding: str) -> None:
    torch.manual_seed(2)
    x = torch.randn(64, 96) * torch.logspace(-2, 2, 96)
    x[3, 40] = float("nan")
    (qr, sr), (qc, sc) = triton_ops.quantize_dual(x, rounding)
    (rqr, rsr), (rqc, rsc) = reference.mx_quantize_dual(x, rounding)
    assert torch.equal(bits(qr), bits(rqr)) and torch.equal(sr, rsr)
    assert torch.equal(bits(qc), bits(rqc)) and torch.equal(sc, rsc)


def test_quantization_noise_on_gaussian_data() -> None:
    torch.manual_seed(3)
    x = torch.randn(256, 512)
    q, s = kernels.mx_quantize(x)
    error = kernels.mx_dequantize(q, s) - x
    sqnr = 10 * torch.log10(x.pow(2).sum() / error.pow(2).sum())
    assert sqnr >= 28.0


def test_public_ops_agree_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(4)
    x = torch.randn(32, 64)
    via_triton = kernels.mx_quantize(x, dim=0)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    via_torch = kernels.mx_quantize(x, dim=0)
    assert torch.equal(bits(via_triton[0]), bits(via_torch[0]))
    assert torch.equal(via_triton[1], via_torch[1])
    assert torch.equal(
        kernels.mx_dequantize(*via_torch, dim=0), reference.mx_dequantize(*via_torch, dim=0)
    )


def test_bad_inputs_are_clear_errors() -> None:
    for quantize in (triton_ops.quantize, mx_torch.quantize, reference.mx_quantize):
        with pytest.raises(ValueError, match="multiple of 32"):
            quantize(torch.randn(4, 40))
        with pytest.raises(ValueError, match="rounding"):
            quantize(torch.randn(4, 32), -1, "nearest")
    for quantize in (triton_ops.quantize, mx_torch.quantize):
        with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
            quantize(torch.ones(4, 32, dtype=torch.int32))
    q, s = reference.mx_quantize(torch.randn(4, 64))
    with pytest.raises(ValueError, match="do not fit"):
        triton_ops.dequantize(q, s[:, :1])
    with pytest.raises(ValueError, match="2-D"):
        triton_ops.quantize_dual(torch.randn(2, 32, 32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [1, -1])
def test_torch_path_quantize_is_the_reference_bit_for_bit(dtype: torch.dtype, dim: int) -> None:
    torch.manual_seed(10)
    x = torch.randn(4, 64, 96) * torch.logspace(-45, 38, 96, base=2)  # subnormal .. huge
    x[0, :32, 0] = 0.0
    x[0, :32, 1] = -0.0
    x[1, 0, :] = float("nan")
    x[1, 5, 7] = float("inf")
    x[1, 6, 9] = -float("inf")
    x[2, :32, 2] = 448.0 * 2.0**3  # amax exactly 448 * 2^k
    x[2, :32, 3] = torch.nextafter(torch.tensor(448.0 * 2.0**3), torch.tensor(1e9))
    x[3, :32, 4] = 2.0**-140  # a subnormal-only block
    x[3, 10, :32] = 0.0  # and the same cases along the last dim
    x[3, 11, 32:64] = 2.0**-140
    x[3, 12, 64:] = 448.0 * 2.0**-5
    x = x.to(dtype)
    q, s = mx_torch.quantize(x, dim)
    q_ref, s_ref = reference.mx_quantize(x, dim)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.uint8
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    assert torch.equal(s, s_ref)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_torch_path_dequantize_is_the_reference_bit_for_bit(dim: int) -> None:
    torch.manual_seed(11)
    x = torch.randn(32, 64, 96) * torch.logspace(-45, 38, 96, base=2)
    x[1, 0, :] = float("nan")
    q, s = reference.mx_quantize(x, dim)
    s[0, 0, 0] = 0  # the extreme scales 2^-127 and 2^127
    s[0, 0, 1] = 254
    got = mx_torch.dequantize(q, s, dim)
    expected = reference.mx_dequantize(q, s, dim)
    assert got.dtype == torch.float32
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())
    got16 = mx_torch.dequantize(q, s, dim, torch.bfloat16)
    assert got16.dtype == torch.bfloat16
    assert torch.equal(got16.nan_to_num(), expected.bfloat16().nan_to_num())
