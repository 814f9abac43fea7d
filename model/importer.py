"""`tachy model import`: a GGUF file or a Hugging Face directory into our checkpoint
format, optionally upcycled into our MoE.

    model, tokenizer = import_model("SmolLM2-135M-Instruct.Q4_1.gguf", Upcycle(8, 2))
    model.save(model, "ckpt/", tokenizer)

A dense model is kept in fp32 unless upcycled; an upcycled (or MoE) model gets MXFP8
experts, pre-quantized for sampling, so the checkpoint serves as written.
"""

from __future__ import annotations

from pathlib import Path

from model.gguf_import import read_gguf
from model.hf import CheckpointError, from_hf
from model.model import Model
from model.part import assemble, is_part
from model.tokenizer import Tokenizer, TokenizerError, find_tokenizer
from model.upcycle import Upcycle, upcycle


def import_model(
    source: str | Path, spec: Upcycle | None = None, precision: str = "mxfp8"
) -> tuple[Model, Tokenizer]:
    """(model, tokenizer) of SOURCE: a .gguf file, a Hugging Face checkpoint
    directory with its tokenizer, or a part of tachy's model (assembled with its base). `spec` upcycles a dense model into our MoE.
    `precision`: "mxfp8" (experts quantized for sampling) or "fp32" (nothing quantized,
    for parity checks). CheckpointError says what is wrong with SOURCE."""
    source = Path(source)
    if is_part(source):
        if spec is not None:
            raise CheckpointError(f"{source}: a part is upcycled already; drop --upcycle")
        model, tokenizer = assemble(source)
        return model, tokenizer
    if source.is_dir():
        dense = from_hf(source, precision="fp32")
        config, state = dense.config, dense.state_dict()
        try:
            tokenizer = find_tokenizer(source)
        except TokenizerError as exc:
            raise CheckpointError(f"{source}: {exc}") from exc
    elif source.suffix == ".gguf" or source.is_file():
        config, state, tokenizer = read_gguf(source)
    else:
        raise CheckpointError(f"{source}: neither a .gguf file nor a checkpoint directory")
    if spec is not None:
        try:
            config, state = upcycle(config, state, spec)
        except ValueError as exc:
            raise CheckpointError(f"{source}: cannot upcycle: {exc}") from exc
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"{source}: the tokenizer has {tokenizer.vocab_size} tokens, more than the "
            f"model's {config.vocab_size}"
        )
    quantized = precision == "mxfp8" and config.has_moe
    return Model.from_state_dict(config, state, precision, quantized), tokenizer
