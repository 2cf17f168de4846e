"""Benchmark of the graph_cb dec solver against the cvxpy reference.

Prints, for K in {5, 10, 20, 50}, the median time per call of
``min_dec_distribution(..., solver="numeric")`` and of the cvxpy reference (compiled once per
K, DPP), and the largest relative dec gap to cvxpy, on seeded random strongly observable,
weakly observable and stochastic graphs with gamma in {10, 100, 1000}.

Run: ``python tests/benchmarks/bench_graph_cb_solver.py [--calls 30] [--reference-calls 6]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from graph_cb_reference import reference_min_dec

from learners.graph_cb import min_dec_distribution

KINDS = ("strong", "weak", "stochastic")


def random_instance(
    kind: str, actions: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, float]:
    """(fhat, G, gamma) with every column of G nonzero."""
    if kind == "stochastic":
        graph = rng.random((actions, actions)) * (rng.random((actions, actions)) < 0.5)
    else:
        graph = (rng.random((actions, actions)) < 0.3).astype(float)
        np.fill_diagonal(graph, 1.0 if kind == "strong" else rng.random(actions) < 0.5)
    for column in np.flatnonzero(graph.max(axis=0) == 0.0):
        graph[rng.integers(actions), column] = 1.0
    return rng.uniform(-1.0, 1.0, actions), graph, float(rng.choice([10.0, 100.0, 1000.0]))


def median_microseconds(solve, instances) -> tuple[float, list[float]]:
    """Median wall time per call (µs) and the dec values."""
    times, decs = [], []
    for fhat, graph, gamma in instances:
        start = time.perf_counter()
        _, dec = solve(fhat, graph, gamma)
        times.append(time.perf_counter() - start)
        decs.append(dec)
    return statistics.median(times) * 1e6, decs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="solver calls per K and kind")
    parser.add_argument("--reference-calls", type=int, default=6, help="cvxpy calls per K/kind")
    args = parser.parse_args()
    print(f"{'K':>3} {'kind':>10} {'ours µs':>10} {'cvxpy µs':>10} {'max rel gap':>12}")
    for actions in (5, 10, 20, 50):
        rng = np.random.default_rng(actions)
        for kind in KINDS:
            instances = [random_instance(kind, actions, rng) for _ in range(args.calls)]
            ours, our_decs = median_microseconds(
                lambda f, g, gamma: min_dec_distribution(f, g, gamma, solver="numeric"), instances
            )
            reference_min_dec(*instances[0])  # compile the DPP problem outside the timing
            checked = instances[: args.reference_calls]
            theirs, optimum = median_microseconds(reference_min_dec, checked)
            gap = max((mine - best) / max(best, 1e-9)
                      for mine, best in zip(our_decs, optimum, strict=False))
            print(f"{actions:>3} {kind:>10} {ours:>10.0f} {theirs:>10.0f} {gap:>12.1e}")


if __name__ == "__main__":
    main()
