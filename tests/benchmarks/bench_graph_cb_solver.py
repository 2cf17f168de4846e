"""Benchmark of the graph_cb dec solver: optimality against cvxpy by graph kind, and speed.

1. **Relative gap to the optimum.** For every kind of
   :data:`graph_cb_reference.GRAPH_KINDS` (self-aware, loopless strongly observable, strongly
   observable with some self-loops missing, weakly observable, stochastic), K in
   {2, 3, 5, 8, 12, 20, 35, 50} and gamma log-uniform in [4, 10^4], seeded random instances
   (:func:`graph_cb_reference.random_graph`, :func:`graph_cb_reference.random_losses`):
   ``(dec - optimum) / optimum`` of ``min_dec_distribution(fhat, G, gamma)`` with its defaults
   (what SquareCB.G plays) against the cvxpy optimum; the median and the max per kind, and how
   many instances are within 1 % (or 1e-9 absolute, for optima near 0). For the graphs that
   have a closed form (loopless: cops-and-robbers; symmetric self-aware) the same for the
   closed form, which ``solver="auto"`` used before and which is only constant-factor optimal.
2. **Speed.** For K in {5, 10, 20, 50}, median wall time per call (µs) of the default call
   without a warm start (``cold``), with a :class:`banditflow.learners.graph_cb.solver.WarmStart`
   along
   a realistic sequence (same graph and gamma, f drifting by N(0, 0.01^2) per round; the first,
   cold, call of a sequence is not timed) and of the cvxpy reference (compiled once per K).

Numba compilation happens at import (or loads from its cache), before any timing. Timings are
wall clock on a shared machine: run it under ``nice`` when others are busy and read the medians
as indicative. Run::

    python tests/benchmarks/bench_graph_cb_solver.py [--instances 12] [--calls 60] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from graph_cb_reference import GRAPH_KINDS, random_graph, random_losses, reference_min_dec

from banditflow.learners.graph_cb import min_dec_distribution
from banditflow.learners.graph_cb.graphs import detect_kind
from banditflow.learners.graph_cb.solver import WarmStart

Instance = tuple[np.ndarray, np.ndarray, float]
GAP_SIZES = (2, 3, 5, 8, 12, 20, 35, 50)
SPEED_SIZES = (5, 10, 20, 50)
RELATIVE, ABSOLUTE = 0.01, 1e-9


def instance(kind: str, actions: int, rng: np.random.Generator) -> Instance:
    """``(fhat, G, gamma)`` with gamma log-uniform in [4, 10^4]."""
    graph = random_graph(kind, actions, rng)
    gamma = float(np.exp(rng.uniform(np.log(4.0), np.log(1e4))))
    return random_losses(actions, rng), graph, gamma


def relative_gap(dec: float, optimum: float) -> float:
    """``(dec - optimum) / optimum``, 0 for an optimum within the absolute tolerance of 0."""
    return 0.0 if optimum <= ABSOLUTE else (dec - optimum) / optimum


def gap_table(per_kind: int, seed: int) -> tuple[str, dict]:
    """Section 1: the markdown table and the raw gaps."""
    rng = np.random.default_rng(seed)
    rows, raw = [], {}
    for kind in GRAPH_KINDS:
        gaps, closed, within = [], [], 0
        for actions in GAP_SIZES:
            for _ in range(per_kind):
                fhat, graph, gamma = instance(kind, actions, rng)
                _, dec = min_dec_distribution(fhat, graph, gamma)
                _, optimum = reference_min_dec(fhat, graph, gamma)
                gaps.append(relative_gap(dec, optimum))
                within += dec <= optimum * (1.0 + RELATIVE) + ABSOLUTE
                named = detect_kind(graph)
                if named in ("cops_and_robbers", "self_aware"):
                    _, closed_dec = min_dec_distribution(fhat, graph, gamma, solver=named)
                    closed.append(relative_gap(closed_dec, optimum))
        raw[kind] = {"gaps": gaps, "closed_form_gaps": closed}
        closed_cells = (f"{statistics.median(closed):.1e} | {max(closed):.2f} ({len(closed)})"
                        if closed else "- | -")
        rows.append(f"| {kind} | {len(gaps)} | {statistics.median(gaps):.1e} | {max(gaps):.1e} "
                    f"| {within}/{len(gaps)} | {closed_cells} |")
    header = ("| graph kind | instances | median gap | max gap | within 1 % or 1e-9 "
              "| closed form: median gap | max gap (instances) |\n|---|---|---|---|---|---|---|")
    return header + "\n" + "\n".join(rows), raw


def timed(solve: Callable[[np.ndarray, np.ndarray, float], object],
          instances: list[Instance]) -> list[float]:
    """Wall time per call (s)."""
    times = []
    for fhat, graph, gamma in instances:
        start = time.perf_counter()
        solve(fhat, graph, gamma)
        times.append(time.perf_counter() - start)
    return times


def drifting(first: Instance, rounds: int, rng: np.random.Generator) -> list[Instance]:
    """``rounds`` instances with the graph and gamma of ``first`` and f drifting slowly."""
    fhat, graph, gamma = first
    sequence = []
    for _ in range(rounds):
        sequence.append((fhat, graph, gamma))
        fhat = np.clip(fhat + rng.normal(0.0, 0.01, fhat.size), -1.0, 1.0)
    return sequence


def speed_table(calls: int, sequences: int, rounds: int, reference_calls: int,
                seed: int) -> tuple[str, dict]:
    """Section 2: the markdown table (median µs, all kinds pooled) and the medians per kind."""
    rng = np.random.default_rng(seed)
    rows, raw = [], {}
    for actions in SPEED_SIZES:
        pooled: dict[str, list[float]] = {"cold": [], "warm": [], "cvxpy": []}
        for kind in GRAPH_KINDS:
            instances = [instance(kind, actions, rng) for _ in range(calls)]
            cold = timed(min_dec_distribution, instances)
            warm: list[float] = []
            for start in instances[:sequences]:
                state = WarmStart()

                def solve(f: np.ndarray, g: np.ndarray, gamma: float,
                          state: WarmStart = state) -> object:
                    return min_dec_distribution(f, g, gamma, warm_start=state)

                warm += timed(solve, drifting(start, rounds, rng))[1:]
            reference_min_dec(*instances[0])  # compile the DPP problem outside the timing
            cvxpy = timed(reference_min_dec, instances[:reference_calls])
            raw[f"{actions}/{kind}"] = {name: statistics.median(values) * 1e6 for name, values
                                        in (("cold", cold), ("warm", warm), ("cvxpy", cvxpy))}
            pooled["cold"] += cold
            pooled["warm"] += warm
            pooled["cvxpy"] += cvxpy
        cold, warm, cvxpy = (statistics.median(pooled[name]) * 1e6 for name in pooled)
        rows.append(f"| {actions} | {cold:,.0f} | {warm:,.0f} | {cvxpy:,.0f} | "
                    f"{cvxpy / cold:,.0f}x |")
    header = ("| K | cold µs | warm µs | cvxpy µs | cvxpy / cold |\n|---|---|---|---|---|")
    return header + "\n" + "\n".join(rows), raw


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=12,
                        help="gap instances per graph kind and K (default 12)")
    parser.add_argument("--calls", type=int, default=60, help="cold calls per K and kind")
    parser.add_argument("--sequences", type=int, default=3, help="warm sequences per K/kind")
    parser.add_argument("--rounds", type=int, default=40, help="rounds per warm sequence")
    parser.add_argument("--reference-calls", type=int, default=6, help="cvxpy calls per K/kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    gaps, gap_raw = gap_table(args.instances, args.seed)
    print(f"## Relative dec gap to the cvxpy optimum (K in {list(GAP_SIZES)}, gamma in "
          f"[4, 1e4], seed {args.seed})\n\n{gaps}\n")
    speed, speed_raw = speed_table(args.calls, args.sequences, args.rounds,
                                   args.reference_calls, args.seed)
    print(f"## Median µs per call, default solver, all kinds pooled\n\n{speed}")
    if args.json is not None:
        args.json.write_text(json.dumps({"gaps": gap_raw, "speed": speed_raw}, indent=1))


if __name__ == "__main__":
    main()


def test_solver_benchmark() -> None:
    """`make bench` entry point (prints the tables; no timing assertions)."""
    main([])
