"""Benchmark of the graph_cb dec solver against the old barrier solver and cvxpy.

Prints, for K in {5, 10, 20, 50} and seeded random strongly observable, weakly observable and
stochastic graphs with gamma in {10, 100, 1000}, the median wall time per call (µs) of

* ``old``: the previous production path (graph detection, the numpy log-barrier method, dec of
  the result), still in the code as the fallback;
* ``cold``: ``min_dec_distribution(..., solver="numeric")`` without a warm start (the compiled
  primal-dual method);
* ``warm``: the same call with a :class:`~learners.graph_cb.solver.WarmStart` along a realistic
  sequence: the same graph and gamma, f drifting by N(0, 0.01^2) per round (the first, cold,
  call of each sequence is not timed);
* ``cvxpy``: the reference (compiled once per K, DPP; fewer calls, it is slow);

then the speed-ups of cold and warm over old and cvxpy, and the worst relative dec gap to
cvxpy of cold and warm (``(dec - optimum) / optimum``; tiny optima fall under the absolute
tolerance, see the tests). Numba compilation happens at import (or loads from its cache), before
any timing. All runs share the machine: read the medians as indicative under load.

Run: ``python tests/benchmarks/bench_graph_cb_solver.py [--calls 60] [--reference-calls 6]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from graph_cb_reference import reference_min_dec

from learners.graph_cb import decision_estimation_coefficient, min_dec_distribution
from learners.graph_cb.graphs import as_graph, detect_kind
from learners.graph_cb.solver import WarmStart, _barrier_method

KINDS = ("strong", "weak", "stochastic")
Instance = tuple[np.ndarray, np.ndarray, float]


def random_instance(kind: str, actions: int, rng: np.random.Generator) -> Instance:
    """(fhat, G, gamma) with every column of G nonzero."""
    if kind == "stochastic":
        graph = rng.random((actions, actions)) * (rng.random((actions, actions)) < 0.5)
    else:
        graph = (rng.random((actions, actions)) < 0.3).astype(float)
        np.fill_diagonal(graph, 1.0 if kind == "strong" else rng.random(actions) < 0.5)
    for column in np.flatnonzero(graph.max(axis=0) == 0.0):
        graph[rng.integers(actions), column] = 1.0
    return rng.uniform(-1.0, 1.0, actions), graph, float(rng.choice([10.0, 100.0, 1000.0]))


def drifting_sequence(instance: Instance, rounds: int, rng: np.random.Generator) -> list[Instance]:
    """``rounds`` instances with the graph and gamma of ``instance`` and f drifting slowly."""
    fhat, graph, gamma = instance
    sequence = []
    for _ in range(rounds):
        sequence.append((fhat, graph, gamma))
        fhat = np.clip(fhat + rng.normal(0.0, 0.01, fhat.size), -1.0, 1.0)
    return sequence


def old_solver(fhat: np.ndarray, graph: np.ndarray, gamma: float) -> tuple[np.ndarray, float]:
    """The previous ``solver="numeric"`` path, step for step."""
    fhat = np.asarray(fhat, dtype=float)
    matrix = as_graph(graph, fhat.size)
    detect_kind(matrix)
    p = _barrier_method(gamma * (fhat - fhat.min()), matrix, 1e-3, 1e-7 * gamma)
    return p, decision_estimation_coefficient(p, fhat, matrix, gamma)


def cold_solver(fhat: np.ndarray, graph: np.ndarray, gamma: float) -> tuple[np.ndarray, float]:
    """The production numeric solver without a warm start."""
    return min_dec_distribution(fhat, graph, gamma, solver="numeric")


def timed(
    solve: Callable[[np.ndarray, np.ndarray, float], tuple[np.ndarray, float]],
    instances: list[Instance],
) -> tuple[list[float], list[float]]:
    """Wall time per call (s) and the dec values."""
    times, decs = [], []
    for fhat, graph, gamma in instances:
        start = time.perf_counter()
        _, dec = solve(fhat, graph, gamma)
        times.append(time.perf_counter() - start)
        decs.append(dec)
    return times, decs


def worst_gap(decs: list[float], optima: list[float]) -> float:
    """The largest relative excess of dec over the optimum."""
    return max((dec - best) / max(best, 1e-9) for dec, best in zip(decs, optima, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="cold calls per K and kind")
    parser.add_argument("--old-calls", type=int, default=15, help="old-solver calls per K/kind")
    parser.add_argument("--sequences", type=int, default=3, help="warm sequences per K and kind")
    parser.add_argument("--rounds", type=int, default=40, help="rounds per warm sequence")
    parser.add_argument("--reference-calls", type=int, default=6, help="cvxpy calls per K/kind")
    args = parser.parse_args()
    header = (f"{'K':>3} {'kind':>10} {'old µs':>8} {'cold µs':>8} {'warm µs':>8} "
              f"{'cvxpy µs':>9} {'old/cold':>8} {'old/warm':>8} {'cvx/cold':>8} "
              f"{'gap cold':>9} {'gap warm':>9}")
    print(header)
    summary: dict[int, dict[str, list[float]]] = {}
    for actions in (5, 10, 20, 50):
        rng = np.random.default_rng(actions)
        totals = summary.setdefault(actions, {"old": [], "cold": [], "warm": [], "cvxpy": []})
        for kind in KINDS:
            instances = [random_instance(kind, actions, rng) for _ in range(args.calls)]
            cold_times, cold_decs = timed(cold_solver, instances)
            old_times, _ = timed(old_solver, instances[: args.old_calls])
            warm_times, warm_decs, warm_checked = [], [], []
            for instance in instances[: args.sequences]:
                sequence = drifting_sequence(instance, args.rounds, rng)
                state = WarmStart()

                def warm(f: np.ndarray, g: np.ndarray, gamma: float,
                         state: WarmStart = state) -> tuple[np.ndarray, float]:
                    return min_dec_distribution(f, g, gamma, solver="numeric", warm_start=state)

                times, decs = timed(warm, sequence)
                warm_times += times[1:]  # the first call of a sequence is cold
                warm_decs += decs[1 : 1 + args.reference_calls // args.sequences + 1]
                warm_checked += sequence[1 : 1 + args.reference_calls // args.sequences + 1]
            reference_min_dec(*instances[0])  # compile the DPP problem outside the timing
            checked = instances[: args.reference_calls]
            cvx_times, optima = timed(reference_min_dec, checked)
            _, warm_optima = timed(reference_min_dec, warm_checked)
            row = {"old": old_times, "cold": cold_times, "warm": warm_times, "cvxpy": cvx_times}
            for name, values in row.items():
                totals[name] += values
            old, cold, hot, cvx = (statistics.median(row[name]) * 1e6 for name in row)
            print(f"{actions:>3} {kind:>10} {old:>8.0f} {cold:>8.0f} {hot:>8.0f} {cvx:>9.0f} "
                  f"{old / cold:>8.1f} {old / hot:>8.1f} {cvx / cold:>8.1f} "
                  f"{worst_gap(cold_decs[: len(optima)], optima):>9.1e} "
                  f"{worst_gap(warm_decs, warm_optima):>9.1e}")
    print("\nAll kinds pooled, median µs per call:")
    print(f"{'K':>3} {'old':>8} {'cold':>8} {'warm':>8} {'cvxpy':>8}")
    for actions, totals in summary.items():
        medians = [statistics.median(totals[name]) * 1e6 for name in ("old", "cold", "warm",
                                                                      "cvxpy")]
        print(f"{actions:>3} " + " ".join(f"{value:>8.0f}" for value in medians))


if __name__ == "__main__":
    main()


def test_solver_benchmark() -> None:
    """`make bench` entry point (prints the table; no timing assertions)."""
    main()
