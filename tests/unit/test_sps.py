"""SPS against a brute-force reading of the paper, and its coverage guarantee."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.conformal.sps import SPS


class BruteForceSPS:
    """The paper's Algorithm 1 literally: keep every (substituted) score, build
    G_t(tau) = (1/n) sum 1(max(tau_t, s_j) <= tau) (eq. 3), add eps_n (eq. 4), and take
    tau = sup{tau : G_t(tau) + eps_n <= 1 - c} (c the target coverage) by scanning every
    value."""

    def __init__(self, coverage: float, log_term) -> None:
        self.coverage = coverage
        self.log_term = log_term
        self.tau = -math.inf
        self.scores: list[float] = []

    def observe(self, score: float | None, tau_used: float) -> None:
        self.scores.append(tau_used if score is None else score)
        n = len(self.scores)
        eps = math.sqrt(self.log_term(n) / (2 * n))
        values = sorted(max(self.tau, s) for s in self.scores)
        # sup{tau : G(tau) <= c}: the set is empty (sup = -inf) when c < 0; otherwise, G being
        # a right-continuous step CDF, it is the first value v with G(v) > c (one exists as
        # c < 1).
        c = 1 - self.coverage - eps
        sup = -math.inf
        for v in values if c >= 0 else []:
            if sum(1 for w in values if w <= v) / n > c:
                sup = v
                break
        self.tau = max(self.tau, sup)


def run_pair(coverage: float, horizon: int, schedule: str, rounds: int, delay: int, seed: int):
    """Drive SPS and the brute force with the same stream; feedback ``delay`` rounds late."""
    rng = np.random.default_rng(seed)
    params = {"target_coverage": coverage, "horizon": horizon, "schedule": schedule, "delta": 0.05}
    sps = SPS.from_params(params)
    if schedule == "fixed":
        brute = BruteForceSPS(coverage, lambda n: math.log(horizon**2))
    else:
        brute = BruteForceSPS(coverage, lambda n: math.log(2 * math.pi**2 * n * n / (6 * 0.05)))
    queue: list[tuple[float, float]] = []
    thresholds = []
    for _ in range(rounds):
        # Discrete scores make ties, the case where >= versus > matters.
        score = float(rng.integers(0, 40)) / 4.0 if rng.random() < 0.5 else float(rng.normal())
        queue.append((score, sps.threshold))
        assert sps.threshold == brute.tau
        if len(queue) > delay:
            s, tau_used = queue.pop(0)
            covered = s >= tau_used
            sps.observe(s if covered else None)
            brute.observe(s if covered else None, tau_used)
        thresholds.append(sps.threshold)
    return sps, brute, thresholds


@pytest.mark.parametrize("schedule", ["fixed", "anytime"])
@pytest.mark.parametrize("delay", [0, 7])
@pytest.mark.parametrize("seed", range(4))
def test_sps_equals_brute_force(schedule: str, delay: int, seed: int) -> None:
    sps, brute, thresholds = run_pair(0.8, 600, schedule, 600, delay, seed)
    assert sps.threshold == brute.tau
    assert thresholds[-1] > -math.inf, "the stream is long enough to leave burn-in"
    assert thresholds == sorted(thresholds), "tau only ever increases"


def test_burn_in_length_matches_the_paper() -> None:
    """eps_n <= 1 - coverage first at n >= ln(T^2) / (2 (1 - coverage)^2): 922 for T = 10^4."""
    sps = SPS.from_params({"target_coverage": 0.9, "horizon": 10_000})
    first = next(n for n in range(1, 5000) if sps.epsilon(n) <= 0.1)
    assert first == math.ceil(math.log(10_000**2) / (2 * 0.1**2)) == 922


def gaussian_stream(seed: int, rounds: int, coverage: float):
    """True-label scores N(1, 1): tau* = 1 + Phi^-1(1 - coverage)."""
    rng = np.random.default_rng(seed)
    return rng.normal(1.0, 1.0, rounds), 1.0 + NormalDist().inv_cdf(1 - coverage)


@pytest.mark.parametrize("schedule", ["fixed", "anytime"])
def test_sps_never_undercovers_on_seeded_streams(schedule: str) -> None:
    coverage, horizon, seeds = 0.9, 10_000, 20
    final_gaps = []
    for seed in range(seeds):
        scores, tau_star = gaussian_stream(seed, horizon, coverage)
        sps = SPS.from_params({"target_coverage": coverage, "horizon": horizon,
                               "schedule": schedule})
        covered = 0
        for s in scores:
            assert sps.threshold <= tau_star, f"seed {seed}: tau {sps.threshold} > tau* {tau_star}"
            hit = s >= sps.threshold
            covered += hit
            sps.observe(float(s) if hit else None)
        assert covered / horizon >= coverage
        final_gaps.append(tau_star - sps.threshold)
    # And it learns: the final threshold approaches tau* (not stuck at the full set).
    assert max(final_gaps) < 0.35
    assert float(np.mean(final_gaps)) < 0.25


def test_timeouts_as_misses_keep_safety() -> None:
    """Half the feedback lost (counted as misses at expiry): still never above tau*."""
    coverage, horizon = 0.9, 10_000
    for seed in range(5):
        scores, tau_star = gaussian_stream(100 + seed, horizon, coverage)
        rng = np.random.default_rng(seed)
        sps = SPS.from_params({"target_coverage": coverage, "horizon": horizon})
        for s in scores:
            assert sps.threshold <= tau_star
            lost = rng.random() < 0.5
            sps.observe(None if lost or s < sps.threshold else float(s))


def test_memory_bound_and_round_down() -> None:
    coverage, horizon = 0.9, 2000
    sps = SPS.from_params({"target_coverage": coverage, "horizon": horizon})
    reference = SPS.from_params({"target_coverage": coverage, "horizon": horizon})
    reference.memory_bound = None  # unbounded twin
    rng = np.random.default_rng(5)
    for s in rng.normal(size=3 * horizon):  # three times past the horizon
        hit = s >= sps.threshold
        sps.observe(float(s) if hit else None)
        reference.observe(float(s) if s >= reference.threshold else None)
        assert len(sps.above) <= sps.memory_bound == math.ceil(0.1 * horizon) + 1
        if sps.n <= horizon:
            assert sps.threshold == reference.threshold
        else:
            assert sps.threshold <= reference.threshold  # only ever rounded down


def test_state_round_trip_is_exact_and_json() -> None:
    sps, _, _ = run_pair(0.9, 800, "fixed", 900, 3, 11)
    state = json.loads(json.dumps(sps.to_state()))
    restored = SPS.from_state(
        {"target_coverage": 0.9, "horizon": 800, "schedule": "fixed", "delta": 0.05}, state
    )
    assert restored.to_state() == sps.to_state()
    for s in np.random.default_rng(1).normal(size=200):
        for learner in (sps, restored):
            learner.observe(float(s) if s >= learner.threshold else None)
    assert restored.to_state() == sps.to_state()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"alpha": 1.5, "horizon": 10}, "target coverage"),
        ({"schedule": "fixed"}, "needs parameter 'horizon'"),
        ({"horizon": 1}, "must be >= 2"),
        ({"horizon": 100, "alfa": 0.9}, "unknown parameter"),
        ({"schedule": "weekly"}, "'fixed' or 'anytime'"),
        ({"alpha": "high"}, "must be float"),
    ],
)
def test_parameter_errors_are_clear(params: dict, message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        SPS.from_params(params)
