"""`tachy train embedder`: build tachy's static code embedder (training/embed/pipeline.py).

    tachy train embedder --out runs/embedder             # ~12 min on two cores, cold
    tachy train embedder --out runs/embedder --json      # the record as JSON on stdout
    tachy train embedder --out runs/embedder --corpus    # + the PyPI corpus: ~25 min cold

Standard library only at import time (the parser must stay cheap for `tachy --help`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agent.cliargs import path_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "embedder",
        help="train tachy's code embedder (static, distilled from MiniLM, trained on the stdlib)",
        description=(
            "Build the static code embedder that `tachy index` uses by default: distil "
            "MiniLM into one vector per token, then train it on (docstring or comment, "
            "code) pairs and on MiniLM's vectors of code, all from the training part of "
            "the standard library's split (training/configs/embed-split.json), and report "
            "dense MRR@10 / Recall@10 on its evaluation part. With --corpus, the PyPI "
            "packages of training/configs/embed-corpus.json join the training data "
            "(its train packages, with pairs from names, tests and signatures too) "
            "and its dev packages are a development evaluation. OUT then holds a "
            "model directory; ship it as index/models/tachy-code-static."
        ),
    )
    p.add_argument("--out", required=True, type=path_arg, metavar="DIR", help="the model goes here")
    p.add_argument("--dim", type=int, default=256, metavar="D", help="vector width (256)")
    p.add_argument("--sif", type=float, default=1e-4, metavar="A", help="SIF weight a (1e-4)")
    p.add_argument("--epochs", type=int, default=6, metavar="N", help="passes over the pairs (6)")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (3e-3)")
    p.add_argument(
        "--batch",
        type=int,
        metavar="B",
        help="pairs per step, each the others' negatives (256; 1024 with --corpus, where "
        "more negatives per step did better on the development packages)",
    )
    p.add_argument(
        "--regress-weight",
        type=float,
        default=3.0,
        metavar="W",
        help="weight of fitting MiniLM's vectors of the training chunks (3; 0: pairs only)",
    )
    p.add_argument(
        "--head-lines",
        type=int,
        default=4,
        metavar="N",
        help="a chunk's first N lines count again when it is embedded (4; 0: no head rule)",
    )
    p.add_argument(
        "--head-weight",
        type=float,
        default=0.6,
        metavar="W",
        help="the weight of those lines' own vector (0.6)",
    )
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument(
        "--cache",
        type=path_arg,
        metavar="DIR",
        help="where MiniLM's vectors of the training texts are kept (~/.cache/tachy/embed)",
    )
    p.add_argument(
        "--corpus",
        action="store_true",
        help="train on the PyPI corpus's training packages too (downloaded into "
        "~/.cache/tachy/embed-corpus when missing) and report its development packages",
    )
    p.add_argument(
        "--package-cap",
        type=int,
        default=1500,
        metavar="N",
        help="with --corpus: at most N pairs from one package (1500)",
    )
    p.add_argument("--json", action="store_true", help="print the record as JSON on stdout")


def run(args: argparse.Namespace) -> int:
    problems = [
        message
        for bad, message in (
            (args.dim < 1, "--dim must be at least 1"),
            (args.dim > 384, "--dim can be at most 384 (MiniLM's width)"),
            (not 0 < args.sif < 1, "--sif must be between 0 and 1"),
            (args.epochs < 1, "--epochs must be at least 1"),
            (args.lr <= 0, "--lr must be positive"),
            (args.batch is not None and args.batch < 2, "--batch must be at least 2"),
            (args.regress_weight < 0, "--regress-weight must be 0 or more"),
            (args.head_lines < 0, "--head-lines must be 0 or more"),
            (not 0 <= args.head_weight < float("inf"), "--head-weight must be 0 or more"),
            (args.package_cap < 1, "--package-cap must be at least 1"),
        )
        if bad
    ]
    if problems:
        print(f"tachy: {problems[0]}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"tachy: {out} exists and is not a directory", file=sys.stderr)
        return 2
    from training.embed.pipeline import CORPUS_BATCH, Recipe, build
    from training.embed.train import TrainSettings

    recipe = Recipe(
        dim=args.dim,
        sif=args.sif,
        head_lines=args.head_lines if args.head_weight else 0,
        head_weight=args.head_weight if args.head_lines else 0.0,
        train=TrainSettings(
            epochs=args.epochs,
            batch=args.batch or (CORPUS_BATCH if args.corpus else TrainSettings.batch),
            lr=args.lr,
            regress_weight=args.regress_weight,
            seed=args.seed,
        ),
        corpus=args.corpus,
        package_cap=args.package_cap,
    )
    try:
        record = build(
            out, recipe, cache=args.cache, log=lambda m: print(m, file=sys.stderr, flush=True)
        )
    except ValueError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(record, indent=1))
    return 0
