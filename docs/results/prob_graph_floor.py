"""What the exploit test costs on the revealing-action graph, run with the lower bound's own
plan, for alpha(t) = log t (the spec's [R] choice) and log t - log log t (lp_policy's default).

The report's revealing-action graphs: ``K - 2`` arms at 0.6 that observe themselves, a
revealer at 0.5 that reveals each of them with p = 0.9, the best arm at 1.0; unit-variance
Gaussian rewards. The LP of C*(theta) with the true means puts all exploration on the
revealer (c = 13.9 per log T, C* = 6.94). This idealised policy follows that plan with no
estimation error anywhere else: it knows every mean except through the test itself, runs
``lp_policy``'s exploit test on observation counts, "every suboptimal arm j has
O_j KL(thetahat_j, 1.0) >= alpha(t)", plays the revealer (regret 0.5) while an arm fails it and
exploits (regret 0) otherwise. ``alpha(t)`` is ``log t`` (``--alpha log``, the spec's [R]
choice) or ``log t - log max(log t, 1)`` (``--alpha log_minus_loglog``, ``lp_policy``'s
default since issue 16; the two forms are copied from
``banditflow.learners.prob_graph.lp_policy.exploration_level``). No warm-up, no noisy plug-in gaps
or LP, no
direct plays. Its regret is nonetheless well above C* log T at T = 10^5: the test waits for
the *slowest* of the K - 2 arms, all served by the same revealer plays, a second-order term
(about sqrt(log T log K) observations per arm) that C* log T leaves out. A policy with
alpha(t) = log t pays it too (the plug-in policy can save a little by playing an outlier arm
directly, and loses more to noisy estimates); only a smaller alpha(t) removes it, such as
log t - log log t, which is still log t (1 + o(1)).

Run: ``python docs/results/prob_graph_floor.py [--seeds 0-9] [--horizon 100000]
[--alpha log,log_minus_loglog]``
(``docs/results/prob_graph.sh``, step ``floor``, writes ``docs/results/prob_graph/floor.md``).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

GAP, REVEALER_GAP, REVEAL_P = 0.4, 0.5, 0.9  # the 0.6-arms' gap, the revealer's, its edges
C_STAR = REVEALER_GAP * (2.0 / GAP**2) / REVEAL_P
ALPHAS = {
    "log": lambda t: math.log(t),
    "log_minus_loglog": lambda t: math.log(t) - math.log(max(math.log(t), 1.0)),
}
FORMULAS = {"log": "log t", "log_minus_loglog": "log t - log log t"}


def first_round_above(alpha, level: float, start: int, stop: int) -> int:
    """The smallest ``t`` in ``[start, stop]`` with ``alpha(t) > level`` (``stop`` if none);
    ``alpha`` is non-decreasing."""
    if alpha(stop) <= level:
        return stop
    low, high = start, stop
    while low < high:
        middle = (low + high) // 2
        if alpha(middle) > level:
            high = middle
        else:
            low = middle + 1
    return low


def floor_regret(arms: int, horizon: int, seed: int, rule: str = "log") -> float:
    """The idealised revealer-only policy's regret on the revealing graph with ``arms`` arms."""
    alpha = ALPHAS[rule]
    rng = np.random.default_rng(seed)
    others = arms - 2
    sums, counts = np.zeros(others), np.zeros(others)
    regret, t = 0.0, 1
    while t <= horizon:
        with np.errstate(divide="ignore", invalid="ignore"):
            glr = np.where(counts > 0, counts * (1.0 - sums / counts) ** 2 / 2.0, 0.0)
        short = np.flatnonzero(glr < alpha(t))
        if short.size == 0:  # exploit until alpha(t) catches up with the smallest statistic
            t = first_round_above(alpha, glr.min(), t + 1, horizon + 1)
            continue
        observed = np.flatnonzero(rng.random(others) < REVEAL_P)
        regret += REVEALER_GAP
        sums[observed] += rng.normal(1.0 - GAP, 1.0, observed.size)
        counts[observed] += 1
        t += 1
    return regret


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--horizon", type=int, default=100_000)
    parser.add_argument("--alpha", default="log,log_minus_loglog",
                        help="comma-separated forms of alpha(t): " + ", ".join(ALPHAS))
    args = parser.parse_args()
    rules = [rule.strip() for rule in args.alpha.split(",") if rule.strip()]
    unknown = [rule for rule in rules if rule not in ALPHAS]
    if unknown:
        parser.error(f"unknown --alpha {', '.join(unknown)}; known: {', '.join(ALPHAS)}")
    if "-" in args.seeds:
        low, high = args.seeds.split("-", 1)
        seeds = list(range(int(low), int(high) + 1))
    else:
        seeds = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
    reference = C_STAR * math.log(args.horizon)
    print(f"The lower bound's plan (revealer only) under the exploit test with alpha(t), "
          f"T = {args.horizon}, seeds {args.seeds}, C* log T = {reference:.1f}:\n")
    print("| alpha(t) | K | R_T (mean ± std) | mean / (C* log T) | worst seed / (C* log T) |")
    print("|---|---|---|---|---|")
    for rule in rules:
        for arms in (20, 40):
            regrets = np.array([floor_regret(arms, args.horizon, seed, rule) for seed in seeds])
            print(f"| {FORMULAS[rule]} | {arms} | {regrets.mean():.1f} ± "
                  f"{regrets.std(ddof=1):.1f} | {regrets.mean() / reference:.2f} | "
                  f"{regrets.max() / reference:.2f} |")


if __name__ == "__main__":
    main()
