"""``banditflow evaluate``: replay logs through the worker's processors, offline.

Each family has a task module in this package (log format, simulated feedback, report)
exposing ``add_options(group)`` for its own command-line options and
``build(args, seed) -> (task, params_for)``, where ``params_for(algorithm)`` gives the learner
parameters. This module runs one or several learners over one or several seeds and writes
the results.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from banditflow.learners.registry import families
from banditflow.offline.evaluation.replay import Delay, Progress, replay
from banditflow.offline.evaluation.report import comparison_table, plot_curves, write_run


def tasks() -> dict[str, str]:
    """Family -> module of its evaluation task, as each family's front door declares it."""
    return {name: declared.evaluation for name, declared in families().items()
            if declared.evaluation is not None}


def task_module(family: str) -> ModuleType:
    module = tasks().get(family)
    if module is None:
        raise SystemExit(f"family {family!r} has no evaluation task")
    return importlib.import_module(module)


def available_families() -> list[str]:
    return sorted(tasks())


def add_evaluate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", required=True, choices=available_families())
    parser.add_argument(
        "--learner", required=True, help="algorithm, or a comma-separated list to compare"
    )
    parser.add_argument("--log", type=Path, help="JSONL log (format: see the family)")
    parser.add_argument(
        "--horizon",
        type=int,
        help="rounds to replay (default: the whole log); also the learners' T",
    )
    parser.add_argument("--seed", default="0", help="seed, or a comma-separated list")
    parser.add_argument(
        "--delay",
        default="0",
        help="feedback delay in rounds: 0 (default, before the next round), K, "
        "fixed:K, uniform:A:B, geometric:P or poisson:MEAN",
    )
    parser.add_argument(
        "--loss",
        type=float,
        default=0.0,
        help="probability that feedback never arrives (timeout rule applies)",
    )
    parser.add_argument(
        "--feedback-timeout",
        type=float,
        default=1000.0,
        help="rounds before a decision without feedback times out",
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="extra learner parameter, e.g. --param gamma=0.01 (repeatable)",
    )
    parser.add_argument(
        "--replay",
        "--engine",  # its former name
        dest="replay",
        choices=("processors", "direct"),
        default="processors",
        help="how the log is replayed: processors (default), every event as JSON through the "
        "worker's processors; direct (conformal only), the learners driven straight from the "
        "log, same results (tested against the processors), about 25-30x faster "
        "(formerly --engine)",
    )
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    for family in available_families():
        task_module(family).add_options(parser.add_argument_group(f"{family} options"))


def parse_params(items: list[str]) -> dict[str, Any]:
    params = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"--param {item!r}: expected NAME=VALUE")
        try:
            params[name] = json.loads(raw)
        except json.JSONDecodeError:
            params[name] = raw
    return params


def build_task(args: argparse.Namespace, seed: int) -> tuple[Any, Callable[[str], dict[str, Any]]]:
    """The family's task for ``seed`` and its ``params_for(algorithm)``, with ``--param``
    overrides."""
    task, params_for = task_module(args.family).build(args, seed)
    extra = parse_params(args.param)
    return task, lambda algorithm: {**params_for(algorithm), **extra}


Replayer = Callable[..., tuple[list[dict[str, Any]], dict[str, Any], Any]]


def replayer(args: argparse.Namespace) -> Replayer:
    """``replay`` (the processors) or the family's ``replay_direct``."""
    if args.replay == "processors":
        return replay
    module = task_module(args.family)
    if not hasattr(module, "replay_direct"):
        direct = [f for f in available_families() if hasattr(task_module(f), "replay_direct")]
        raise SystemExit(
            f"--replay direct is not available for {args.family!r} (only for: "
            f"{', '.join(direct)}); use --replay processors"
        )
    return module.replay_direct


def run_evaluate(args: argparse.Namespace) -> int:
    learners = [name.strip() for name in args.learner.split(",") if name.strip()]
    seeds = [int(s) for s in str(args.seed).split(",") if s.strip()]
    try:
        delay = Delay.parse(args.delay, args.loss)
    except ValueError as exc:
        raise SystemExit(f"--delay/--loss: {exc}") from None
    replay_log = replayer(args)
    single = len(learners) == 1 and len(seeds) == 1
    summaries: dict[str, list[dict[str, Any]]] = {}
    curves: dict[str, dict[str, list[np.ndarray]]] = {}
    for algorithm in learners:
        for seed in seeds:
            task, params_for = build_task(args, seed)
            label = f"{algorithm} seed {seed}"
            progress = None if args.quiet else Progress(label, args.horizon)
            rows, summary, _ = replay_log(
                task,
                algorithm,
                params_for(algorithm),
                seed=seed,
                delay=delay,
                feedback_timeout=args.feedback_timeout,
                progress=progress,
            )
            if progress is not None:
                progress.finish(len(rows))
            summary = {
                "family": args.family,
                "learner": algorithm,
                "seed": seed,
                "params": params_for(algorithm),
                "replay": args.replay,
                **summary,
            }
            run_curves = task.curves(rows)
            directory = args.out if single else args.out / f"{algorithm}-seed{seed}"
            write_run(directory, rows, summary, run_curves, f"{args.family}/{algorithm}")
            summaries.setdefault(algorithm, []).append(summary)
            for name, series in run_curves.items():
                curves.setdefault(algorithm, {}).setdefault(name, []).append(series)
    if single:
        print(json.dumps(summaries[learners[0]][0], indent=2))
        return 0
    stacked = {a: {n: np.vstack(s) for n, s in c.items()} for a, c in curves.items()}
    plot_curves(args.out / "comparison.png", stacked, f"{args.family}: {', '.join(learners)}")
    columns = [
        k
        for k, v in summaries[learners[0]][0].items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k != "seed"
    ]
    table = comparison_table(summaries, columns)
    (args.out / "comparison.md").write_text(table)
    (args.out / "comparison.json").write_text(json.dumps(summaries, indent=2) + "\n")
    print(table)
    return 0
