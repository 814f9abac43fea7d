"""The RL weight sync's wire form: an MXFP8 model's sampling state (float8 experts)
goes through pickling, as Ray's object store does, and arrives bit for bit (issue 33:
torch cannot unpickle float8 tensors, so `python -m bench.rl` failed)."""

from __future__ import annotations

import pickle

import pytest
import torch

from tests.model.test_model import make_model
from training.rl.inference import pack_weights, unpack_weights

# What crosses the object store is the subject, not the kernels: the torch path, so a
# Triton interpreter left in a bad state by an earlier test cannot decide this one.
pytestmark = pytest.mark.usefixtures("torch_path")


def test_torch_cannot_pickle_float8_so_the_sync_packs_it():
    with pytest.raises(AttributeError, match="dtype"):
        pickle.loads(pickle.dumps(torch.zeros(4, dtype=torch.float8_e4m3fn)))


def test_an_mxfp8_sampling_state_survives_the_object_store_bit_for_bit():
    trainer = make_model("mxfp8", seed=0).train()
    state = trainer.sampling_state()
    assert any(t.dtype == torch.float8_e4m3fn for t in state.values())
    arrived = unpack_weights(pickle.loads(pickle.dumps(pack_weights(state))))
    assert arrived.keys() == state.keys()
    for name, tensor in state.items():
        assert arrived[name].dtype == tensor.dtype, name
        assert torch.equal(arrived[name].view(torch.uint8), tensor.view(torch.uint8)), name
    sampler = make_model("mxfp8", seed=1).quantize_experts()
    sampler.load_state_dict(arrived)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3))
    expected = make_model("mxfp8", seed=0).quantize_experts()
    expected.load_state_dict(state)
    with torch.no_grad():
        assert torch.equal(sampler(ids), expected(ids))


def test_a_plain_state_passes_unchanged():
    state = {"w": torch.ones(2), "b": torch.zeros(1, dtype=torch.bfloat16)}
    assert unpack_weights(state) == state
    assert all(a is b for a, b in zip(pack_weights(state).values(), state.values(), strict=True))
