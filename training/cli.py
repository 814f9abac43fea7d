"""`tachy train`: the supervised warm-up (pretrain, sft), RL (rl) and the curves of runs (plot).

    tachy train pretrain --out ckpt/pre --steps 200            # the stdlib, tiny preset
    tachy train sft --init ckpt/pre --demos demos.jsonl --out ckpt/sft --steps 100
    tachy train pretrain --out ckpt/pre --resume               # continue exactly
    tachy train plot runs/rl-s0 runs/rl-s1                     # runs/rl-s0/metrics.png

Progress goes to stderr, one JSON line per step to DIR/metrics.jsonl; DIR ends up a
checkpoint that `model.load` reads and `--policy local:DIR` drives. A run refuses an
--out directory that already holds one unless --resume is given; --resume takes every
data and model option from the saved run (only --steps may change, which changes the
cosine schedule from there on). Exit codes: 0 done, 2 bad usage or unusable data,
130 interrupted (the last saved checkpoint stays valid).

This module imports only the standard library at import time (the parser must stay
cheap for `tachy --help`); torch and the data code load when a command runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

from agent.cliargs import command_group, path_arg

OUT_HELP = "checkpoint and metrics go here"


def add_parsers(commands: argparse._SubParsersAction) -> None:
    sub = command_group(
        commands,
        "train",
        help="train the model: pretraining, fine-tuning on demonstrations, RL on tasks",
        description=(
            "Train our model: the supervised warm-up (pretrain, sft), reinforcement learning "
            "in sandboxed tasks (rl), and the metrics of a run (plot)."
        ),
    )

    pre = sub.add_parser(
        "pretrain",
        help="pretrain on a corpus of Python source",
        description=(
            "Train a model from scratch on Python files (default: this interpreter's standard "
            "library, tests excluded). Without --tokenizer a byte-level BPE of --vocab-size "
            "is trained on the training files first. The model is the --preset with its "
            "vocabulary set to the tokenizer's size."
        ),
    )
    pre.add_argument("--out", required=True, type=path_arg, metavar="DIR", help=OUT_HELP)
    pre.add_argument(
        "--corpus", type=path_arg, metavar="PATH", help="a directory of .py files (default: stdlib)"
    )
    pre.add_argument("--max-files", type=int, metavar="N", help="use only the first N files")
    pre.add_argument("--preset", default="tiny", help="model preset (default tiny)")
    pre.add_argument("--seq-len", type=int, default=256, metavar="L", help="tokens per row (256)")
    pre.add_argument(
        "--heldout", type=float, default=0.02, metavar="F", help="held-out files (0.02)"
    )
    tok = pre.add_mutually_exclusive_group()
    tok.add_argument(
        "--tokenizer", type=path_arg, metavar="PATH", help="a tokenizer.json or its directory"
    )
    tok.add_argument(
        "--vocab-size", type=int, metavar="V", help="train a BPE of V ids (default: the preset's)"
    )
    _common_options(pre, steps=200, batch=8, lr=2e-3)

    sft = sub.add_parser(
        "sft",
        help="fine-tune a checkpoint on the expert's demonstrations",
        description=(
            "Fine-tune CHECKPOINT_DIR on demonstrations (`tachy tasks demos` JSONL) in the chat "
            "format the engine samples with; the loss is on the assistant turns only. "
            "Conversations longer than --max-len tokens are cut after the last whole "
            "assistant turn that fits (never inside a turn or a tool call); one whose first "
            "assistant turn does not fit is skipped. With a part of tachy's model as --init "
            "(model/weights/tachy-smollm2, or one this command wrote), the model stays frozen "
            "and rank --lora-rank adapters train, written as a part to --out."
        ),
    )
    sft.add_argument(
        "--init", type=path_arg, metavar="CHECKPOINT_DIR", help="the model to start from"
    )
    sft.add_argument(
        "--demos", required=True, type=path_arg, metavar="FILE", help="demonstrations (JSONL)"
    )
    sft.add_argument("--out", required=True, type=path_arg, metavar="DIR", help=OUT_HELP)
    sft.add_argument(
        "--max-len",
        type=int,
        default=4096,
        metavar="L",
        help="tokens per conversation (4096); a model with a shorter context is extended to L",
    )
    sft.add_argument("--heldout", type=float, default=0.1, metavar="F", help="held-out demos (0.1)")
    sft.add_argument(
        "--lora-rank",
        type=int,
        default=16,
        metavar="R",
        help="with a part as --init (tachy's model): rank of the attention adapters (16)",
    )
    sft.add_argument(
        "--expert-rank",
        type=int,
        default=0,
        metavar="R",
        help="with a part as --init: give each expert its own low-rank adapters of rank R, "
        "trained in full (the upcycled experts are identical copies until they have them; "
        "a part that has them trains its own). 0: none added (default)",
    )
    sft.add_argument(
        "--dense-expert-adapters",
        action="store_true",
        help="with --expert-rank: apply every expert's adapter to every token, whatever "
        "the router chose (one dense adapter of rank EXPERTS x R beside the MLP): the "
        "dense control for routed adapters at the same trainable budget",
    )
    sft.add_argument(
        "--full-backward",
        action="store_true",
        help="backpropagate through the system prompt too. By default the prefix every "
        "demonstration of a step shares (the system prompt) is forwarded once per step "
        "without gradient and the rest trains after it: the same loss, ~40%% less work",
    )
    _common_options(sft, steps=100, batch=4, lr=5e-4)

    rl = sub.add_parser(
        "rl",
        help="reinforcement learning on tasks, rollouts in sandboxes (Ray)",
        description=(
            "Improve a checkpoint by RL: group_size runs of each task from the same start in "
            "sandboxed repositories (the agent executor and tools as in the editor), scored "
            "by the task's tests, and the model moved toward the better runs. Everything is "
            "set in a TOML config file of training.rl.config.RLConfig fields (see "
            "training/configs/rl-tiny.toml); relative paths in it are from its directory."
        ),
    )
    rl.add_argument(
        "--config", required=True, type=path_arg, metavar="FILE", help="the run's TOML config"
    )
    rl.add_argument("--out", required=True, type=path_arg, metavar="DIR", help=OUT_HELP)
    rl.add_argument("--steps", type=int, metavar="N", help="RL steps (default: the config's)")
    rl.add_argument("--seed", type=int, metavar="S", help="override the config's seed")
    rl.add_argument("--resume", action="store_true", help="continue the run saved in --out")

    from training.embed import cli as embed_cli

    embed_cli.add_parser(sub)

    plot = sub.add_parser(
        "plot",
        help="draw the curves of one run or several (seeds) as a PNG, or tabulate one",
        description=(
            "Read DIR/metrics.jsonl of each run and draw its curves (loss, reward, held-out "
            "solve rate, parallel calls per turn, ...) one panel per metric, the runs side by "
            "side (default picture: the first DIR's metrics.png). With --out FILE.csv, write "
            "one run's metrics as CSV and print a text summary of its curves."
        ),
    )
    plot.add_argument("dirs", nargs="+", type=path_arg, metavar="DIR", help="runs' --out dirs")
    plot.add_argument("--out", type=path_arg, metavar="FILE", help="the PNG or CSV to write")
    plot.add_argument(
        "--metrics",
        metavar="NAME,...",
        help="draw only these curves, in this order (default: every one tachy plots that "
        "the runs have; names as in metrics.jsonl)",
    )

    experts = sub.add_parser(
        "experts",
        help="do the experts differ? router entropy and load per layer, and expert drift",
        description=(
            "Run a model over the conversations of a demonstrations file and report, per MoE "
            "layer, the router's entropy (a share of log E), each expert's share of the "
            "top-k assignments, and how far apart the experts' outputs are on the same "
            "hidden states (0 for the identical copies upcycling makes)."
        ),
    )
    experts.add_argument("model", type=path_arg, metavar="DIR", help="a part or a checkpoint")
    experts.add_argument("--demos", required=True, type=path_arg, metavar="FILE")
    experts.add_argument("--tokens", type=int, default=4096, metavar="N", help="tokens read (4096)")
    experts.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def _common_options(p: argparse.ArgumentParser, *, steps: int, batch: int, lr: float) -> None:
    p.add_argument("--steps", type=int, metavar="N", help=f"optimizer steps (default {steps})")
    p.add_argument("--batch", type=int, default=batch, metavar="B", help=f"rows per step ({batch})")
    p.add_argument(
        "--micro-batch", type=int, metavar="M", help="rows per forward (default: B; divides B)"
    )
    p.add_argument("--lr", type=float, default=lr, help=f"peak learning rate ({lr})")
    p.add_argument("--warmup", type=int, default=10, metavar="N", help="warm-up steps (10)")
    p.add_argument("--eval-every", type=int, default=50, metavar="N", help="held-out loss every N")
    p.add_argument("--save-every", type=int, default=0, metavar="N", help="checkpoint every N")
    p.add_argument(
        "--precision",
        choices=("fp32", "mxfp8"),
        help="expert weights in the training forward (default: fp32; sft: the checkpoint's)",
    )
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch CPU threads (default: torch's; 1 is faster on a busy machine)",
    )
    p.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    p.set_defaults(default_steps=steps)


class UsageError(Exception):
    """Bad options or unusable inputs: exit 2 with the message."""


def run(args: argparse.Namespace) -> int:
    try:
        if args.train_command == "plot":
            return run_plot(args)
        if args.train_command == "experts":
            return run_experts(args)
        if args.train_command == "rl":
            return run_rl(args)
        if args.train_command == "embedder":
            from training.embed import cli as embed_cli

            return embed_cli.run(args)
        return run_training(args)
    except UsageError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tachy: interrupted (the last saved checkpoint stays valid)", file=sys.stderr)
        return 130


# ------------------------------------------------------------------ RL
def run_rl(args: argparse.Namespace) -> int:
    from training.rl.config import RLConfig
    from training.rl.controller import RLRun, check_resumable
    from training.sft.common import TrainStateError
    from training.tasks.taskset import TaskError

    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    try:
        config = RLConfig.from_file(args.config, steps=args.steps, seed=args.seed)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out)
    if args.resume:
        try:
            saved = check_resumable(out)
        except TrainStateError as exc:
            raise UsageError(str(exc)) from None
        changed = [
            k
            for k in ("seed", "group_size", "groups_per_step", "init", "lora_rank")
            if saved.get(k, getattr(config, k)) != getattr(config, k)  # older runs: no lora_rank
        ]
        if changed:
            raise UsageError(f"--resume with other {', '.join(changed)} than the saved run's")
    elif (out / "trainer_state.pt").exists():
        raise UsageError(f"{out} already holds a run; pass --resume to continue it")
    started = time.perf_counter()
    try:
        with RLRun(config, out, resume=args.resume, log=sys.stderr) as run:
            history = run.train()
    except (ValueError, TrainStateError, TaskError) as exc:
        raise UsageError(str(exc)) from None
    last = history[-1] if history else {}
    print(
        f"tachy: {len(history)} RL steps in {time.perf_counter() - started:.1f} s; "
        f"last reward {last.get('reward', 'n/a')}; checkpoint in {out}",
        file=sys.stderr,
    )
    return 0


# ------------------------------------------------------------------ training
def _check_args(args: argparse.Namespace) -> None:
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    micro = args.micro_batch or args.batch
    if micro < 1 or args.batch % micro:
        raise UsageError(f"--micro-batch ({micro}) must be >= 1 and divide --batch ({args.batch})")
    if not args.lr > 0:
        raise UsageError(f"--lr must be positive, got {args.lr}")
    if min(args.warmup, args.eval_every, args.save_every) < 0:
        raise UsageError("--warmup, --eval-every and --save-every must be >= 0")
    if not 0 <= args.heldout < 1:
        raise UsageError(f"--heldout must be in [0, 1), got {args.heldout}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    if args.train_command == "pretrain":
        if args.seq_len < 2:
            raise UsageError(f"--seq-len must be at least 2, got {args.seq_len}")
        if args.vocab_size is not None and args.vocab_size < 1:
            raise UsageError(f"--vocab-size must be positive, got {args.vocab_size}")
        if args.max_files is not None and args.max_files < 1:
            raise UsageError(f"--max-files must be at least 1, got {args.max_files}")
    else:
        if args.max_len < 2:
            raise UsageError(f"--max-len must be at least 2, got {args.max_len}")
        if not args.resume and not args.init:
            raise UsageError("sft needs --init CHECKPOINT_DIR (or --resume)")


def run_training(args: argparse.Namespace) -> int:
    _check_args(args)
    from training.sft.common import METRICS_FILE, STATE_FILE, TrainStateError
    from training.sft.trainer import read_state_config

    out = Path(args.out)
    if args.resume:
        try:
            config, meta = read_state_config(out)
        except TrainStateError as exc:
            raise UsageError(str(exc)) from None
        if meta.get("command") != args.train_command:
            raise UsageError(
                f"{out} holds a `{meta.get('command')}` run, not `{args.train_command}`"
            )
        if args.steps is not None:
            config.steps = args.steps
    else:
        if any((out / f).exists() for f in (STATE_FILE, METRICS_FILE, "manifest.json")):
            raise UsageError(
                f"{out} already holds a checkpoint or a training run: pass --resume to continue "
                "the run, or choose another --out (nothing there is overwritten)"
            )
        config = _train_config(args)
        meta = {"command": args.train_command}

    import torch

    from model.hf import CheckpointError
    from model.tokenizer import TokenizerError
    from training.sft.data import DataError

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(config.seed)
    try:
        if args.train_command == "pretrain":
            trainer = _pretrain_setup(args, config, meta)
        else:
            trainer = _sft_setup(args, config, meta)
    except (DataError, CheckpointError, TokenizerError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if args.resume:
        try:
            step = trainer.restore()
        except TrainStateError as exc:
            raise UsageError(str(exc)) from None
        if step >= config.steps:
            print(f"tachy: {out} is already at step {step} of {config.steps}", file=sys.stderr)
            return 0
        print(f"tachy: resuming {out} at step {step}", file=sys.stderr)
    started = time.perf_counter()
    history = trainer.train()
    seconds = time.perf_counter() - started
    if history:
        last = history[-1]
        tokens = sum(m["tokens"] for m in history)
        summary = (
            f"tachy: {len(history)} steps in {seconds:.1f} s ({len(history) / seconds:.2f} steps/s, "
            f"{tokens / seconds:,.0f} tokens/s); loss {last['loss']:.4f}"
        )
        if last.get("eval_loss") is not None:
            summary += f", held-out loss {last['eval_loss']:.4f}"
        print(summary + f"; checkpoint in {out}", file=sys.stderr)
    return 0


def _train_config(args: argparse.Namespace):
    from training.sft.trainer import TrainConfig

    return TrainConfig(
        steps=args.steps if args.steps is not None else args.default_steps,
        batch_size=args.batch,
        micro_batch_size=args.micro_batch or args.batch,
        lr=args.lr,
        warmup_steps=args.warmup,
        eval_every=args.eval_every,
        save_every=args.save_every,
        seed=args.seed,
        shared_prefix=not getattr(args, "full_backward", True),
    )


def _pretrain_setup(args: argparse.Namespace, config, meta: dict):
    from model.checkpoint import load
    from model.config import PRESETS, preset
    from model.model import Model
    from model.tokenizer import Tokenizer, train_bpe
    from training.sft.data import (
        DataError,
        corpus_files,
        default_corpus,
        encode_files,
        pack_blocks,
        split_files,
    )
    from training.sft.trainer import Trainer

    out = Path(args.out)
    if not args.resume:
        meta.update(
            corpus=str(Path(args.corpus).resolve()) if args.corpus else str(default_corpus()),
            max_files=args.max_files,
            seq_len=args.seq_len,
            heldout=args.heldout,
            preset=args.preset,
            precision=args.precision or "fp32",
        )
        if args.preset not in PRESETS:
            raise DataError(f"unknown preset {args.preset!r}; choose from {sorted(PRESETS)}")
    root = Path(meta["corpus"])
    files = corpus_files(root)[: meta["max_files"]]
    train_files, heldout_files = split_files(files, meta["heldout"], root)
    if not train_files:
        raise DataError(f"corpus {root}: every file is held out; lower --heldout")
    print(
        f"tachy: corpus {root}: {len(train_files)} training files, {len(heldout_files)} held out",
        file=sys.stderr,
    )
    if args.resume:
        tokenizer = Tokenizer.from_file(out)
        model = load(out)
    else:
        if args.tokenizer:
            tokenizer = Tokenizer.from_file(args.tokenizer)
        else:
            vocab = args.vocab_size or PRESETS[args.preset]["vocab_size"]
            print(f"tachy: training a BPE tokenizer of {vocab} ids ...", file=sys.stderr)
            tokenizer = train_bpe(train_files, vocab)
        model_config = preset(args.preset, vocab_size=tokenizer.vocab_size)
        model = Model(model_config, precision=meta["precision"])
    seq_len = meta["seq_len"]
    if seq_len > model.config.max_position_embeddings - 1:
        raise DataError(
            f"--seq-len {seq_len} exceeds the model's {model.config.max_position_embeddings - 1} "
            "positions"
        )
    train = pack_blocks(encode_files(tokenizer, train_files), seq_len)
    heldout = (
        pack_blocks(encode_files(tokenizer, heldout_files), seq_len) if heldout_files else None
    )
    if len(train) == 0:
        raise DataError(f"corpus {root}: too small for one row of --seq-len {seq_len} tokens")
    print(
        f"tachy: {len(train)} training rows of {seq_len} tokens, "
        f"{len(heldout) if heldout else 0} held out; model {model.config.num_params:,} parameters "
        f"({meta['precision']} experts), tokenizer {tokenizer.vocab_size} ids",
        file=sys.stderr,
    )
    return Trainer(model, tokenizer, train, heldout, config, out, meta=meta, log=sys.stderr)


def _sft_setup(args: argparse.Namespace, config, meta: dict):
    from model.checkpoint import load, sha256_file
    from model.model import Model
    from model.part import is_part
    from model.tokenizer import Tokenizer
    from training.sft.adapters import AdaptedModel
    from training.sft.data import DataError, read_demos, sft_examples, split_demos
    from training.sft.trainer import Trainer

    out = Path(args.out)
    demos_path = Path(args.demos)
    demos = read_demos(demos_path)
    if args.resume:
        if sha256_file(demos_path) != meta.get("demos_sha256"):
            raise DataError(f"{demos_path} is not the demonstrations file the run in {out} used")
        if meta.get("lora_rank"):
            model, tokenizer = AdaptedModel.from_part(
                meta["init"], rank=meta["lora_rank"], seed=config.seed,
                expert_rank=meta.get("expert_rank", 0),
                expert_routing=not meta.get("dense_expert_adapters", False),
            )  # fmt: skip
            model.load_adapters(out)
        else:
            tokenizer, model = Tokenizer.from_file(out), load(out)
    elif is_part(args.init):
        # tachy's model: the base stays frozen (MXFP8 experts as sampled), adapters train
        if args.lora_rank < 1:
            raise DataError(f"--lora-rank must be at least 1, got {args.lora_rank}")
        if args.expert_rank < 0:
            raise DataError(f"--expert-rank must be 0 or more, got {args.expert_rank}")
        if args.dense_expert_adapters and not args.expert_rank:
            raise DataError("--dense-expert-adapters goes with --expert-rank R")
        init = Path(args.init)
        try:
            model, tokenizer = AdaptedModel.from_part(
                init, rank=args.lora_rank, seed=config.seed, expert_rank=args.expert_rank,
                expert_routing=not args.dense_expert_adapters,
            )  # fmt: skip
        except ValueError as exc:
            raise DataError(str(exc)) from None
        meta.update(
            init=str(init.resolve()), lora_rank=args.lora_rank, expert_rank=args.expert_rank,
            dense_expert_adapters=args.dense_expert_adapters,
            demos_sha256=sha256_file(demos_path), max_len=args.max_len, heldout=args.heldout,
        )  # fmt: skip
        print(
            f"tachy: adapters of rank {args.lora_rank} on {init} (the base frozen, MXFP8 "
            f"experts); {sum(p.numel() for p in model.parameters() if p.requires_grad):,} "
            "trainable parameters",
            file=sys.stderr,
        )
    else:
        init = Path(args.init)
        tokenizer, model = Tokenizer.from_file(init), load(init)
        if model.quantized:
            raise DataError(
                f"{init} holds pre-quantized experts (for sampling); it cannot be trained"
            )
        precision = args.precision or model.precision
        if precision != model.precision:
            converted = Model(model.config, precision=precision)
            converted.load_state_dict(model.state_dict())
            model = converted
        if args.max_len > model.config.max_position_embeddings:
            # RoPE has no learnt positions: the context is a number in the config, raised
            # so that the conversations fit (and so that the engine may sample that far).
            print(
                f"tachy: raising the model's context from {model.config.max_position_embeddings} "
                f"to --max-len {args.max_len} tokens",
                file=sys.stderr,
            )
            model.config.max_position_embeddings = args.max_len
        meta.update(
            init=str(init.resolve()),
            demos_sha256=sha256_file(demos_path),
            max_len=args.max_len,
            heldout=args.heldout,
        )
    train_demos, heldout_demos = split_demos(demos, meta["heldout"])
    if not train_demos:  # a handful of demos, all drawn for held-out: train on them all
        train_demos, heldout_demos = heldout_demos, []
    train, stats = sft_examples(tokenizer, train_demos, meta["max_len"])
    heldout, _ = sft_examples(tokenizer, heldout_demos, meta["max_len"])
    if len(train) == 0:
        raise DataError(
            f"{demos_path}: no demonstration has an assistant turn within --max-len "
            f"{meta['max_len']} tokens"
        )
    print(
        f"tachy: {len(train)} training conversations ({train.target_tokens:,} assistant tokens; "
        f"{stats.truncated} cut to {meta['max_len']} tokens, {len(stats.skipped)} skipped), "
        f"{len(heldout)} held out",
        file=sys.stderr,
    )
    return Trainer(model, tokenizer, train, heldout, config, out, meta=meta, log=sys.stderr)


# ---------------------------------------------------------------------- experts
def run_experts(args: argparse.Namespace) -> int:
    import torch

    from model.checkpoint import load, open_tokenizer
    from model.hf import CheckpointError
    from model.part import assemble, is_part
    from training.eval.experts import expert_report
    from training.sft.data import DataError, read_demos

    try:
        if is_part(args.model):
            model, tokenizer = assemble(args.model)
        else:
            model, tokenizer = load(args.model), open_tokenizer(args.model)
        demos = read_demos(args.demos)
    except (CheckpointError, DataError, OSError) as exc:
        raise UsageError(str(exc)) from None
    batches = [
        torch.tensor([tokenizer.encode_chat([(m["role"], m["content"]) for m in d["messages"]])[0]])
        for d in demos
    ]
    report = expert_report(model, batches, max_tokens=args.tokens)
    if args.json:
        print(json.dumps(report))
    mean = report["mean"]
    print(
        f"{len(report['layers'])} MoE layers over {report['tokens']} tokens: router entropy "
        f"{mean['entropy']} of log E, busiest expert {mean['load_max_over_mean']}x the mean "
        f"load, expert drift {mean['drift']}",
        file=sys.stderr,
    )
    return 0


# ---------------------------------------------------------------------- plot
PLOTTED = (
    # pretrain / sft
    "loss", "eval_loss", "aux_loss", "lr", "grad_norm", "tokens_per_s",
    # rl
    "reward", "train_reward", "heldout_solve_rate", "heldout_well_formed_frac",
    "heldout_parallel_calls_per_turn", "heldout_reads_before_edit", "heldout_codebase_searches",
    "turns", "tool_calls", "tool_error_frac", "well_formed_frac", "parallel_calls_per_turn",
    "reads_before_edit", "codebase_searches", "tokens", "turns_solved", "tokens_solved",
    "rollout_s_mean", "step_s", "trainer_idle_frac", "staleness_mean", "logprob_mismatch",
    "weight_sync_s", "dropped_share", "hinted_share", "hint_level",
)  # fmt: skip
SPARK = "▁▂▃▄▅▆▇█"


def read_metrics(directory: Path) -> list[dict]:
    path = directory / "metrics.jsonl"
    if not path.is_file():
        raise UsageError(f"{path}: not found (not a training output directory?)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise UsageError(f"{path}:{n}: not JSON") from None
    if not rows:
        raise UsageError(f"{path}: empty")
    return rows


def sparkline(values: list[float], width: int = 60) -> str:
    """The values, averaged into at most `width` buckets, as block characters."""
    if not values:
        return ""
    n = min(width, len(values))
    buckets = [values[i * len(values) // n : (i + 1) * len(values) // n] for i in range(n)]
    means = [sum(b) / len(b) for b in buckets]
    lo, hi = min(means), max(means)
    span = hi - lo or 1.0
    return "".join(SPARK[int((m - lo) / span * (len(SPARK) - 1))] for m in means)


def run_plot(args: argparse.Namespace) -> int:
    runs = {Path(d): read_metrics(Path(d)) for d in args.dirs}
    csv_out = args.out is not None and args.out.suffix == ".csv"
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        plt = None
    if plt is None or csv_out:
        if len(runs) > 1:
            raise UsageError("a CSV holds one run: give one DIR (a picture compares several)")
        return _write_csv(*runs.items(), args.out, reason=None if plt else "not installed")
    out = Path(args.out or args.dirs[0] / "metrics.png")
    names = PLOTTED
    if args.metrics:
        names = tuple(n.strip() for n in args.metrics.split(",") if n.strip())
        known = {k for rows in runs.values() for r in rows for k, v in r.items() if _number(v)}
        if unknown := [n for n in names if n not in known]:
            raise UsageError(
                f"--metrics: no run has {', '.join(unknown)} (it has {', '.join(sorted(known))})"
            )
    series = {
        name: {d: [(r["step"], r[name]) for r in rows if _number(r.get(name))]
               for d, rows in runs.items()}
        for name in names
    }  # fmt: skip
    series = {k: v for k, v in series.items() if any(v.values())}
    if not series:
        raise UsageError("the metrics hold none of the curves tachy plots")
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.2 * len(series)), sharex=True)
    for ax, (name, per_run) in zip(
        list(getattr(axes, "flat", [axes])), series.items(), strict=True
    ):
        for d, points in per_run.items():
            if points:
                ax.plot(*zip(*points, strict=True), marker="." if len(points) < 50 else None,
                        label=d.name)  # fmt: skip
        ax.set_ylabel(name, fontsize=8)
    if len(runs) > 1:
        fig.axes[0].legend(fontsize=8)
    fig.supxlabel("step")
    fig.tight_layout()
    fig.savefig(out)
    print(f"tachy: wrote {out} ({len(series)} curves of {len(runs)} runs)", file=sys.stderr)
    for directory, rows in runs.items():
        if (line := heldout_change(rows)) is not None:
            print(f"{directory.name}: {line}", file=sys.stderr)
    return 0


def heldout_change(rows: list[dict]) -> str | None:
    """The held-out solve rate at a run's first evaluation and at its last, and the
    gain with its paired 95 % interval over the same tasks (None before a second
    evaluation). The tasks are the run's fixed held-out list, so a task is named in
    `heldout_solved` or was not solved."""
    from training.eval.stats import paired_gain

    evals = [r for r in rows if isinstance(r.get("heldout_solved"), list)]
    if len(evals) < 2 or evals[0].get("heldout_tasks") != evals[-1].get("heldout_tasks"):
        return None
    first, last = evals[0], evals[-1]
    tasks = sorted(set(first["heldout_solved"]) | set(last["heldout_solved"]))
    unsolved = [0.0] * (int(first["heldout_tasks"]) - len(tasks))  # in neither evaluation
    before = [float(t in first["heldout_solved"]) for t in tasks] + unsolved
    after = [float(t in last["heldout_solved"]) for t in tasks] + unsolved
    gain, low, high = paired_gain(before, after)

    def rate(r: dict) -> str:
        low, high = r.get("heldout_solve_ci95", (0, 0))
        return f"{r['heldout_solve_rate']:.3f} [{low:.3f}, {high:.3f}] at step {r['step']}"

    families = sorted(
        set(first.get("heldout_families", {})) | set(last.get("heldout_families", {}))
    )
    per_family = ", ".join(
        f"{f} {first['heldout_families'].get(f, 0):.2f}->{last['heldout_families'].get(f, 0):.2f}"
        for f in families
    )
    return (
        f"held-out {rate(first)} -> {rate(last)} ({len(before)} tasks): gain {gain:+.3f}, "
        f"paired 95 % interval [{low:+.3f}, {high:+.3f}]" + (f"; {per_family}" if families else "")
    )


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _write_csv(run: tuple[Path, list[dict]], out: Path | None, *, reason: str | None) -> int:
    """One run's metrics as CSV, and a text summary of its curves on stderr."""
    directory, rows = run
    out = Path(out or directory / "metrics.csv")
    columns = ["step", *[k for k in rows[0] if k != "step"]]
    columns += sorted({k for r in rows for k in r} - set(columns))
    with out.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for r in rows:
            cells = [r.get(c) for c in columns]
            writer.writerow(
                "" if v is None else json.dumps(v) if isinstance(v, dict | list) else v
                for v in cells
            )
    why = f" (matplotlib is {reason})" if reason else ""
    print(f"tachy: wrote the metrics as CSV to {out}{why}", file=sys.stderr)
    print(f"{len(rows)} steps ({rows[0]['step']}..{rows[-1]['step']})", file=sys.stderr)
    if (line := heldout_change(rows)) is not None:
        print(line, file=sys.stderr)
    series = {k: [r[k] for r in rows if _number(r.get(k))] for k in PLOTTED}
    width = max(map(len, series), default=0)
    for name, values in series.items():
        if values:
            print(
                f"{name:>{width}}  first {values[0]:<10.4g} last {values[-1]:<10.4g} "
                f"min {min(values):<10.4g} {sparkline(values)}",
                file=sys.stderr,
            )
    return 0
