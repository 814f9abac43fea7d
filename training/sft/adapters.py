"""Low-rank adapters on tachy's model: the cheap update that trains a part.

The model assembled from a part (model.part.assemble) stays frozen, its MXFP8 experts
quantized exactly as the sampler holds them; what trains is, per attention projection
W [out, in], a pair (A [r, in], B [out, r]) with W' = W + B A, and in full the small
tensors (norms, routers). The forward is the model's own, run on the merged weights
(torch.func.functional_call), so a training forward computes what sampling computes.

    adapted = AdaptedModel.from_part("model/weights/tachy-smollm2", rank=16)
    logits = adapted(ids)                       # the model on W + B A
    adapted.write_part("runs/sft")              # a part: the init's tensors + this delta
    engine.load_weights(adapted.sampling_state(), partial=True)   # RL's weight sync

A part written here holds the init part's replacements with the trained ones in their
place, and its low-rank deltas with this run's appended along the rank (B1 A1 + B2 A2 =
[B1 B2] [A1; A2], so a warm-up's part trained further by RL stays one part on the
base). B starts at zero: step 0 is the init model exactly.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn
from torch.func import functional_call

from model.model import Model, MoE, RMSNorm, init_expert_adapters
from model.part import LORA, assemble, part_spec, read_record, write_part
from model.tokenizer import Tokenizer

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")  # attention projections get deltas


def _full_trained(name: str, module: nn.Module) -> dict[str, nn.Parameter]:
    """Small tensors trained in full, by name: the norms, the MoE routers and the
    experts' adapters."""
    if isinstance(module, RMSNorm) or name.endswith(".mlp.gate"):
        return dict(module.named_parameters())
    if isinstance(module, MoE) and module.adapter_rank:
        return {"adapter_a": module.adapter_a, "adapter_b": module.adapter_b}
    return {}


def add_expert_adapters(model: Model, rank: int, seed: int, routing: bool = True) -> None:
    """Give every MoE layer of `model` experts' adapters of `rank` (A a different
    random draw per expert and layer, B zero: the model computes what it did), routed
    as the experts are, or all applied to every token (`routing` False: the dense
    control at the same trainable budget)."""
    if rank < 1:
        raise ValueError(f"the expert adapter rank must be at least 1, got {rank}")
    model.config.expert_adapter_rank = rank
    model.config.expert_adapter_routing = routing
    generator = torch.Generator().manual_seed(seed + 7919)
    for module in model.modules():
        if isinstance(module, MoE):
            E, D = module.gate.weight.shape[0], module.gate.weight.shape[1]
            module.adapter_rank, module.adapter_routing = rank, routing
            module.adapter_a = nn.Parameter(torch.empty(E, rank, D))
            module.adapter_b = nn.Parameter(torch.empty(E, D, rank))
            init_expert_adapters(module, generator)


class AdaptedModel(nn.Module):
    """A frozen Model plus trainable low-rank deltas and full small tensors."""

    def __init__(
        self,
        model: Model,
        *,
        rank: int,
        init: str | Path,
        seed: int = 0,
        held: dict[str, tuple[Tensor, Tensor]] | None = None,
    ) -> None:
        """`model`: the init part assembled without the deltas of the adapted weights;
        `held`: those deltas {weight name: (A, B)}, kept frozen in front of ours."""
        super().__init__()
        if rank < 1:
            raise ValueError(f"the adapter rank must be at least 1, got {rank}")
        self.model, self.rank, self.init = model, rank, Path(init)
        for p in model.parameters():
            p.requires_grad_(False)
        self.full: dict[str, nn.Parameter] = {}
        for name, module in model.named_modules():
            for pname, p in _full_trained(name, module).items():
                p.requires_grad_(True)
                self.full[f"{name}.{pname}"] = p
        g = torch.Generator().manual_seed(seed)
        self.lora_a, self.lora_b = nn.ParameterDict(), nn.ParameterDict()
        self.targets: list[str] = []
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS:
                out_f, in_f = module.weight.shape
                key = name.replace(".", "__")
                # A: small random (so B's gradient is not zero), B: zero (no change yet).
                a = torch.randn(rank, in_f, generator=g) / in_f**0.5
                self.lora_a[key] = nn.Parameter(a)
                self.lora_b[key] = nn.Parameter(torch.zeros(out_f, rank))
                self.targets.append(name)
        self.held = dict(held or {})

    @staticmethod
    def is_target(weight: str) -> bool:
        return weight.endswith(".weight") and weight.rsplit(".", 2)[-2] in TARGETS

    @classmethod
    def from_part(
        cls,
        part: str | Path,
        *,
        rank: int,
        seed: int = 0,
        expert_rank: int = 0,
        expert_routing: bool = True,
    ) -> tuple[AdaptedModel, Tokenizer]:
        """Adapters on the model of `part`. The part's own deltas on the adapted weights
        stay unmerged and are merged with ours in one product, W + [B0 B] [A0; A], as
        assembling the part this writes will: training and sampling forwards agree
        bit for bit. `expert_rank` > 0 gives every expert its own adapters of that rank
        (MoE.adapters; trained in full) where the part has none yet; a part that has
        them keeps training its own (of their rank and routing); `expert_routing`
        False makes the new ones dense (MoE.adapters)."""
        model, tokenizer = assemble(part, unmerged=cls.is_target)
        have = model.config.expert_adapter_rank
        if expert_rank and have and have != expert_rank:
            raise ValueError(
                f"{part} has expert adapters of rank {have}; they keep their rank "
                f"(asked for {expert_rank})"
            )
        if expert_rank and have and model.config.expert_adapter_routing != expert_routing:
            raise ValueError(
                f"{part} has {'routed' if model.config.expert_adapter_routing else 'dense'} "
                "expert adapters; they keep their kind"
            )
        if expert_rank and not have:
            add_expert_adapters(model, expert_rank, seed, expert_routing)
        tensors = load_file(str(Path(part) / "part.safetensors"))
        held = {
            name.removesuffix(LORA[0]): (
                t.float(),
                tensors[name.removesuffix(LORA[0]) + LORA[1]].float(),
            )
            for name, t in tensors.items()
            if name.endswith(LORA[0]) and cls.is_target(name.removesuffix(LORA[0]))
        }
        return cls(model.train(), rank=rank, init=part, seed=seed, held=held), tokenizer

    @property
    def config(self):
        return self.model.config

    def _delta(self, name: str) -> tuple[Tensor, Tensor]:
        """(A, B) of a projection: the init's delta (frozen) stacked with this run's."""
        key, weight = name.replace(".", "__"), f"{name}.weight"
        a, b = self.lora_a[key], self.lora_b[key]
        if weight in self.held:
            a0, b0 = self.held[weight]
            a, b = torch.cat([a0, a], dim=0), torch.cat([b0, b], dim=1)
        return a, b

    def merged(self) -> dict[str, Tensor]:
        """{weight name: W + B A} for every adapted projection."""
        weights = dict(self.model.named_parameters())
        out = {}
        for name in self.targets:
            a, b = self._delta(name)
            out[f"{name}.weight"] = weights[f"{name}.weight"] + b @ a
        return out

    def forward(self, *args, **kwargs):
        return functional_call(self.model, self.merged(), args, kwargs, strict=False)

    def sampling_state(self) -> dict[str, Tensor]:
        """What a sampler of the same part needs to sample from this model: the merged
        attention weights and the full-trained small tensors (detached CPU copies, by
        the Model's state-dict names; Engine.load_weights(..., partial=True)). The
        frozen experts never change, so they are never shipped."""
        with torch.no_grad():
            state = {n: w.detach().clone() for n, w in self.merged().items()}
            state |= {n: p.detach().clone() for n, p in self.full.items()}
        return state

    # ------------------------------------------------------------------ parts
    def part_tensors(self) -> dict[str, Tensor]:
        """The part's tensors: the init part's, the full-trained ones replaced, this
        run's deltas appended to the init's along the rank."""
        tensors = {n: t.float() for n, t in load_file(str(self.init / "part.safetensors")).items()}
        for name, p in self.full.items():
            tensors[name] = p.detach().clone()
        for name in self.targets:
            a, b = self._delta(name)  # the init's delta first, then ours
            weight = f"{name}.weight"
            tensors[weight + LORA[0]], tensors[weight + LORA[1]] = (
                a.detach().clone(),
                b.detach().clone(),
            )
        return tensors

    def write_part(self, path: str | Path) -> Path:
        return write_part(
            self.part_tensors(),
            path,
            part_spec(read_record(self.init), self.init),
            adapter_routing=self.config.expert_adapter_routing,
        )

    def load_adapters(self, path: str | Path) -> None:
        """Set this run's trainable tensors from a part it wrote (a resumed run): the
        full tensors, and the last `rank` rows / columns of each delta."""
        tensors = load_file(str(Path(path) / "part.safetensors"))
        with torch.no_grad():
            for name, p in self.full.items():
                p.copy_(tensors[name])
            for name in self.targets:
                key, weight = name.replace(".", "__"), f"{name}.weight"
                self.lora_a[key].copy_(tensors[weight + LORA[0]][-self.rank :])
                self.lora_b[key].copy_(tensors[weight + LORA[1]][:, -self.rank :])
