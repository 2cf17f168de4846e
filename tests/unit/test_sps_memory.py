"""SPS with bounded memory (``max_values``), the anytime schedule, and delayed or lost feedback.

The bounded learner only ever rounds stored scores down, so on the same data its threshold is
never above the exact learner's (the proof is in learners/conformal/sps.py); these tests drive
both learners with one stream, including delayed, lost and tied feedback, and check that
claim round by round, the memory bound, the state, and that the bounded threshold still
approaches ``tau*``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.conformal.sps import MIN_MAX_VALUES, SPS, anytime_log_term
from banditflow.offline.evaluation.conformal import ConformalTask
from banditflow.offline.evaluation.replay import Delay, replay

ALPHA = 0.9
TAU_STAR = 1.0 + NormalDist().inv_cdf(1 - ALPHA)  # true-label scores N(1, 1)


def draw(rng: np.random.Generator, ties: bool) -> float:
    """N(1, 1), or half of the time a score on a coarse grid (ties, as with bids)."""
    if ties and rng.random() < 0.5:
        return float(rng.integers(-8, 16)) / 4.0
    return float(rng.normal(1.0, 1.0))


def run_coupled(
    params: dict,
    max_values: int,
    rounds: int,
    seed: int,
    *,
    delay: int = 0,
    loss: float = 0.0,
    ties: bool = False,
) -> tuple[SPS, SPS]:
    """Exact and bounded SPS on the same scores, delays and losses; checks every round."""
    rng = np.random.default_rng(seed)
    exact = SPS.from_params(params)
    bounded = SPS.from_params({**params, "max_values": max_values})
    in_flight: list[tuple[float, float, float, bool]] = []
    for t in range(rounds):
        assert bounded.threshold <= exact.threshold
        score = draw(rng, ties)
        in_flight.append((score, exact.threshold, bounded.threshold, rng.random() < loss))
        if len(in_flight) > delay:
            s, tau_exact, tau_bounded, lost = in_flight.pop(0)
            # A lost feedback reaches the learner as a timeout: a miss.
            exact.observe(None if lost or s < tau_exact else s)
            bounded.observe(None if lost or s < tau_bounded else s)
        assert len(bounded.above) <= max_values
        if t % 101 == 0:  # the O(m) invariants now and then
            assert len(bounded.weights) == len(bounded.above)
            assert bounded.n_le + sum(bounded.weights) == bounded.n
            assert bounded.above == sorted(set(bounded.above))
    assert bounded.threshold <= exact.threshold
    return exact, bounded


@pytest.mark.parametrize("max_values", [16, 64])
@pytest.mark.parametrize(("delay", "loss", "ties"), [(0, 0.0, False), (9, 0.2, True)])
def test_bounded_threshold_never_above_exact(
    max_values: int, delay: int, loss: float, ties: bool
) -> None:
    for seed in range(1):
        run_coupled(
            {"alpha": ALPHA, "schedule": "anytime"},
            max_values,
            6000,
            seed,
            delay=delay,
            loss=loss,
            ties=ties,
        )


def test_bounded_fixed_schedule_never_above_exact() -> None:
    """Within the horizon, where the exact learner's rank-based trim loses nothing."""
    run_coupled({"alpha": ALPHA, "horizon": 5000}, 32, 5000, 7, delay=3, ties=True)


@pytest.mark.parametrize(("max_values", "tolerance"), [(256, 0.05), (64, 0.3)])
def test_bounded_learner_still_converges_near_tau_star(max_values: int, tolerance: float) -> None:
    """Anytime schedule, 1.5 x 10^4 rounds: safe and close to the exact learner."""
    for seed in range(2):
        exact, bounded = run_coupled(
            {"alpha": ALPHA, "schedule": "anytime"}, max_values, 15_000, 100 + seed
        )
        assert bounded.threshold <= exact.threshold <= TAU_STAR
        assert exact.threshold - bounded.threshold < tolerance
        assert TAU_STAR - bounded.threshold < 0.3 + tolerance  # exact: eps_n ~ 0.04 still


def test_memory_stays_bounded_on_a_long_stream() -> None:
    """5 x 10^4 updates: the entries stay within the bound and the JSON state stays small."""
    sps = SPS.from_params({"alpha": ALPHA, "schedule": "anytime", "max_values": 128})
    rng = np.random.default_rng(3)
    for s in rng.normal(1.0, 1.0, 50_000):
        sps.observe(float(s) if s >= sps.threshold else None)
    assert len(sps.above) <= 128
    assert len(json.dumps(sps.to_state())) < 128 * 2 * 25 + 200
    assert 0.0 < TAU_STAR - sps.threshold < 0.15


def test_bounded_state_round_trip_is_exact_and_json() -> None:
    params = {"alpha": ALPHA, "schedule": "anytime", "max_values": 32}
    _, sps = run_coupled({"alpha": ALPHA, "schedule": "anytime"}, 32, 3000, 5)
    state = json.loads(json.dumps(sps.to_state()))
    assert len(state["weights"]) == len(state["above"])
    restored = SPS.from_state(params, state)
    assert restored.to_state() == sps.to_state()
    for s in np.random.default_rng(1).normal(1.0, 1.0, 2000):
        for learner in (sps, restored):
            learner.observe(float(s) if s >= learner.threshold else None)
    assert restored.to_state() == sps.to_state()


def test_without_max_values_the_state_and_behaviour_are_unchanged() -> None:
    sps = SPS.from_params({"alpha": ALPHA, "horizon": 1000})
    assert sps.weights is None and "weights" not in sps.to_state()
    assert sps.memory_bound == 101


@pytest.mark.parametrize("bad", [MIN_MAX_VALUES - 1, 0, "many"])
def test_max_values_errors_are_clear(bad: object) -> None:
    with pytest.raises(LearnerError, match="max_values"):
        SPS.from_params({"schedule": "anytime", "max_values": bad})


# ------------------------------------------------------------------ anytime schedule (c)
def test_anytime_deltas_sum_to_delta_and_widths_shrink() -> None:
    """delta_n = 6 delta / (pi^2 n^2) sums to delta (a union bound over all n), and eps_n
    decreases to 0, so the anytime learner needs no horizon and keeps learning."""
    delta = 0.01
    deltas = [2.0 / math.exp(anytime_log_term(n, delta)) for n in range(1, 200_001)]
    assert math.isclose(sum(deltas), delta, rel_tol=1e-4)
    sps = SPS.from_params({"alpha": ALPHA, "schedule": "anytime", "delta": delta})
    widths = [sps.epsilon(n) for n in (10, 1000, 10**5, 10**7)]
    assert widths == sorted(widths, reverse=True) and widths[-1] < 0.002


def test_anytime_keeps_improving_past_any_fixed_horizon() -> None:
    """The fixed schedule with a too-short T stops tightening at its eps_T scale only through
    the log term; the anytime learner's threshold keeps rising towards tau* with n."""
    sps = SPS.from_params({"alpha": ALPHA, "schedule": "anytime", "max_values": 256})
    rng = np.random.default_rng(8)
    gaps = []
    for checkpoint in (3_000, 10_000, 30_000):
        while sps.n < checkpoint:
            s = float(rng.normal(1.0, 1.0))
            assert sps.threshold <= TAU_STAR
            sps.observe(s if s >= sps.threshold else None)
        gaps.append(TAU_STAR - sps.threshold)
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 0.15


# ------------------------------------- delayed and lost feedback through the processors (b)
def gaussian_log(rounds: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    records = []
    for t in range(rounds):
        scores = rng.normal(size=5)
        true = int(rng.integers(5))
        scores[true] = rng.normal(1.0, 1.0)
        records.append(
            {
                "event_id": f"r{t}",
                "labels": [f"l{i}" for i in range(5)],
                "scores": scores.round(6).tolist(),
                "true_label": f"l{true}",
            }
        )
    return records


@pytest.mark.parametrize(
    ("params", "delay", "loss"),
    [
        ({"schedule": "anytime", "max_values": 64}, "uniform:0:300", 0.03),
        ({"horizon": 4000, "max_values": 64}, "geometric:0.01", 0.03),
    ],
)
def test_replay_with_delayed_and_lost_feedback_keeps_coverage(
    tmp_path: Path, params: dict, delay: str, loss: float
) -> None:
    """Long delays (mean 100-150 rounds) and 3% lost feedback, through the very processor
    the workers run: the threshold never exceeds tau*, coverage stays >= alpha. (The loss
    must stay below 1 - alpha: lost feedback counts as misses, and a miss rate above
    1 - alpha rightly keeps SPS at the full set.)"""
    task = ConformalTask(gaussian_log(4000, 4), ALPHA)
    rows, summary, _ = replay(
        task,
        "sps",
        {"alpha": ALPHA, **params},
        seed=2,
        delay=Delay.parse(delay, loss=loss),
        feedback_timeout=400,
    )
    assert summary["feedback_lost"] > 60
    assert summary["undercoverage_count"] == 0
    assert summary["coverage"] >= ALPHA
    assert rows[-1]["threshold"] is not None  # it leaves burn-in and learns
