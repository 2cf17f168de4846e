"""The conformal family's baselines: Greedy, ACI, DLR, ETC and Con-ETC.

Each update rule is checked against a direct implementation of its formula on random streams
(ties, misses under the full set, timeouts, delayed and reordered feedback); states
round-trip through strict JSON; and on a seeded stream with a known tau* the coverage and
undercoverage behaviour matches the paper's account of each baseline.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.conformal import ALGORITHMS
from banditflow.learners.conformal.aci import ACI
from banditflow.learners.conformal.base import ConformalLearner
from banditflow.learners.conformal.dlr import DLR
from banditflow.learners.conformal.etc import ETC, ConETC, sps_burn_in
from banditflow.learners.conformal.greedy import Greedy
from banditflow.learners.registry import make_learner

ALPHA = 0.9
TRUE_LABEL = "y"

# (pending threshold as a float, the true score if covered else None)
Feedback = tuple[float, float | None]


def feedback_stream(
    learner: ConformalLearner, rng: np.random.Generator, rounds: int, *, discrete: bool
) -> Iterator[Feedback]:
    """Drive ``learner`` through ``rounds`` decisions with delayed, reordered feedback.

    Yields after every incorporated feedback. Scores are U(0, 1) or small integers (ties);
    the true label is sometimes absent from the candidates (a miss even under the full set,
    which only a timeout can tell), and some decisions time out instead of getting feedback.
    """
    in_flight: list[tuple[dict[str, Any], float, bool]] = []

    def settle(index: int) -> Feedback:
        pending, true_score, timed_out = in_flight.pop(index)
        if TRUE_LABEL in pending["labels"] and not timed_out:
            learner.learn(pending, {"label": TRUE_LABEL})
        elif len(pending["labels"]) < pending["offered"] and not timed_out:
            learner.learn(pending, {"missed": True})
        else:  # (a miss of a set holding every candidate contradicts it: only a timeout)
            learner.expire(pending)
        used = -math.inf if pending["threshold"] is None else pending["threshold"]
        covered = TRUE_LABEL in pending["labels"] and not timed_out
        return used, true_score if covered else None

    for _ in range(rounds):
        true_score = float(rng.integers(0, 8)) if discrete else float(rng.uniform())
        labels, scores = ["z"], [float(rng.uniform(-1.0, 2.0))]
        if rng.uniform() > 0.05:  # the true label is among the candidates
            labels.append(TRUE_LABEL)
            scores.append(true_score)
        decided = learner.decide({"labels": labels, "scores": scores}, rng)
        in_flight.append((decided.pending, true_score, bool(rng.uniform() < 0.03)))
        while len(in_flight) > rng.integers(0, 6):
            yield settle(int(rng.integers(0, len(in_flight))))
    while in_flight:
        yield settle(0)


def sup_below(values: list[float], level: float) -> float:
    """sup{tau : #{v <= tau} <= level}, by scanning; -inf when no tau qualifies."""
    if level < 0:
        return -math.inf
    for candidate in sorted(values):
        if sum(v <= candidate for v in values) > level:
            return candidate
    return math.inf


STREAMS = [(seed, discrete) for seed in range(4) for discrete in (False, True)]


@pytest.mark.parametrize(("seed", "discrete"), STREAMS)
def test_greedy_matches_the_truncated_plug_in_quantile(seed: int, discrete: bool) -> None:
    rounds = 300
    learner = Greedy.from_params({"alpha": ALPHA, "horizon": rounds})  # memory bound in use
    substituted: list[float] = []
    tau = -math.inf
    stream = feedback_stream(learner, np.random.default_rng(seed), rounds, discrete=discrete)
    for used, score in stream:
        substituted.append(used if score is None else score)
        truncated = [max(tau, v) for v in substituted]  # G_n is the CDF of max(tau_n, s_j)
        tau = sup_below(truncated, len(substituted) * (1.0 - ALPHA))
        assert learner.threshold == tau
        assert len(learner.above) <= learner.memory_bound
    assert learner.dropped > 0  # the memory bound was exercised and the result stayed exact


@pytest.mark.parametrize(("seed", "discrete"), STREAMS)
@pytest.mark.parametrize(("gamma", "window"), [(0.005, 1000), (0.3, 7)])
def test_aci_matches_its_update_rule(seed: int, discrete: bool, gamma: float, window: int) -> None:
    learner = ACI.from_params({"alpha": ALPHA, "gamma": gamma, "window": window})
    level, observed = 1.0 - ALPHA, []
    rng = np.random.default_rng(seed)
    for _, score in feedback_stream(learner, rng, 300, discrete=discrete):
        level += gamma * ((1.0 - ALPHA) - (1.0 if score is None else 0.0))
        if score is not None:
            observed.append(score)
        recent = observed[-window:]
        if level >= 1.0:
            expected = math.inf
        elif level <= 0.0 or not recent:
            expected = -math.inf
        else:
            expected = sup_below(recent, len(recent) * level)
        assert learner.level == level
        assert learner.threshold == expected
        assert len(learner.recent) <= window


def test_aci_level_edges_give_the_full_and_the_empty_set() -> None:
    learner = ACI.from_params({"alpha": ALPHA, "gamma": 1.0})
    rng = np.random.default_rng(0)
    context = {"labels": ["a", "b"], "scores": [0.2, 0.7]}
    learner.observe(None)  # a_2 = 0.1 + (0.1 - 1) < 0
    assert learner.level < 0.0
    assert learner.decide(context, rng).output["labels"] == ["a", "b"]
    while learner.level < 1.0:  # each covered round adds gamma (1 - alpha)
        learner.observe(0.5)
    assert learner.threshold == math.inf
    assert learner.decide(context, rng).output["set_size"] == 0
    learner.observe(None)
    assert 0.0 < learner.level < 1.0 and learner.threshold == 0.5


@pytest.mark.parametrize(("seed", "discrete"), STREAMS)
def test_dlr_matches_its_update_rule(seed: int, discrete: bool) -> None:
    learner = DLR.from_params({"alpha": ALPHA, "lr": 0.5, "initial_threshold": -0.25})
    tau = -0.25
    for t, (_, score) in enumerate(
        feedback_stream(learner, np.random.default_rng(seed), 300, discrete=discrete), start=1
    ):
        err = 1.0 if score is None else 0.0
        tau = tau - 0.5 * t**-0.6 * (err - (1.0 - ALPHA))
        assert learner.threshold == tau


def test_dlr_signs_by_hand() -> None:
    learner = DLR.from_params({"alpha": 0.9})
    learner.observe(0.7)  # covered: tau rises by eta_1 (1 - alpha) = 0.1
    assert learner.threshold == pytest.approx(0.1)
    learner.observe(None)  # missed: tau falls by eta_2 alpha = 2^-0.6 * 0.9, a bigger set
    assert learner.threshold == pytest.approx(0.1 - 0.9 * 2**-0.6)


@pytest.mark.parametrize(("seed", "discrete"), STREAMS)
@pytest.mark.parametrize("conservative", [False, True])
def test_etc_commits_to_the_quantile_of_its_exploration(
    seed: int, discrete: bool, conservative: bool
) -> None:
    rounds, explore = 400, 150
    cls = ConETC if conservative else ETC
    learner = cls.from_params({"alpha": 0.8, "horizon": rounds, "explore_rounds": explore})
    eps = math.sqrt(math.log(rounds**2) / (2 * explore)) if conservative else 0.0
    explored: list[float] = []
    expected = -math.inf
    stream = feedback_stream(learner, np.random.default_rng(seed), rounds, discrete=discrete)
    for used, score in stream:
        if len(explored) < explore:  # later feedback, even for exploration decisions, is ignored
            assert used == -math.inf
            explored.append(used if score is None else score)
            assert len(learner.lowest) <= max(learner.rank + 1, 0)
            if len(explored) == explore:
                expected = sup_below(explored, explore * (1.0 - 0.8 - eps))
        assert learner.threshold == expected
    assert learner.committed and learner.lowest == []


def test_con_etc_commits_to_the_full_set_when_the_band_is_too_wide() -> None:
    learner = ConETC.from_params({"alpha": ALPHA, "horizon": 10_000, "explore_rounds": 500})
    for score in np.random.default_rng(0).uniform(size=500):
        learner.observe(float(score))
    assert learner.committed and learner.threshold == -math.inf


def test_etc_default_exploration_is_the_sps_burn_in() -> None:
    assert sps_burn_in(0.9, 10_000) == 922
    assert ETC.from_params({"horizon": 10_000}).explore_rounds == 922


PARAMS: dict[str, dict[str, Any]] = {
    "greedy": {"alpha": ALPHA, "horizon": 500},
    "aci": {"alpha": ALPHA, "gamma": 0.05, "window": 50},
    "dlr": {"alpha": ALPHA, "lr": 0.3},
    "etc": {"alpha": ALPHA, "horizon": 500, "explore_rounds": 120},
    "con_etc": {"alpha": 0.7, "horizon": 500, "explore_rounds": 120},
}


@pytest.mark.parametrize("name", sorted(PARAMS))
@pytest.mark.parametrize("stop", [0, 60, 200])
def test_state_round_trips_through_strict_json(name: str, stop: int) -> None:
    params = PARAMS[name]
    original = make_learner("conformal", name, params)
    rng = np.random.default_rng(1)
    scores = rng.uniform(size=400)
    covered = rng.uniform(size=400) < 0.9
    for score, cov in zip(scores[:stop], covered[:stop], strict=True):
        original.observe(float(score) if cov else None)
    state = json.loads(json.dumps(original.to_state(), allow_nan=False))
    restored = ALGORITHMS[name].from_state(params, state)
    assert restored.to_state() == original.to_state()
    for score, cov in zip(scores[stop:], covered[stop:], strict=True):
        original.observe(float(score) if cov else None)
        restored.observe(float(score) if cov else None)
        assert restored.threshold == original.threshold
    assert restored.to_state() == original.to_state()


def test_registered_names() -> None:
    assert {name: cls.algorithm for name, cls in ALGORITHMS.items()} == {
        name: name for name in ("sps", "greedy", "aci", "dlr", "etc", "con_etc")
    }


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("greedy", {}, "'horizon'"),
        ("greedy", {"horizon": 100, "alpha": 1.0}, "'alpha'"),
        ("greedy", {"horizon": 100, "eps": 0.1}, "unknown parameter(s) 'eps'"),
        ("aci", {"gamma": 0.0}, "'gamma'"),
        ("aci", {"gamma": "fast"}, "'gamma' must be float"),
        ("aci", {"window": 0}, "'window'"),
        ("dlr", {"lr": -1.0}, "'lr'"),
        ("dlr", {"initial_threshold": float("-inf")}, "'initial_threshold' must be finite"),
        ("etc", {}, "'horizon'"),
        ("etc", {"horizon": 100, "explore_rounds": 101}, "'explore_rounds' must be"),
        ("etc", {"horizon": 100}, "'explore_rounds' (default: SPS burn-in) must be"),
        ("con_etc", {"horizon": 100, "explore_rounds": 0}, "'explore_rounds'"),
        ("con_etc", {"horizon": 100, "delta": 0.1}, "unknown parameter(s) 'delta'"),
    ],
)
def test_bad_parameters_are_named(name: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(LearnerError, match=re.escape(message)):
        make_learner("conformal", name, params)


# --- a seeded stream with known tau*: the true label scores U(0, 1), so tau* = 1 - ALPHA ---

HORIZON = 10_000
TAU_STAR = 1.0 - ALPHA


def coverage_run(
    make: Callable[[], ConformalLearner], seed: int = 0
) -> tuple[float, int, list[float]]:
    """(coverage rate, undercoverage count sum 1[tau_t > tau*], thresholds) over HORIZON."""
    learner = make()
    rng = np.random.default_rng(seed)
    covered_rounds, undercovered, thresholds = 0, 0, []
    for score in rng.uniform(size=HORIZON):
        thresholds.append(learner.threshold)
        undercovered += learner.threshold > TAU_STAR
        decided = learner.decide({"labels": [TRUE_LABEL, "z"], "scores": [score, -1.0]}, rng)
        covered = TRUE_LABEL in decided.output["labels"]
        covered_rounds += covered
        learner.learn(decided.pending, {"label": TRUE_LABEL} if covered else {"missed": True})
    return covered_rounds / HORIZON, undercovered, thresholds


def test_greedy_undercovers_and_stays_there() -> None:
    coverage, undercovered, thresholds = coverage_run(
        lambda: Greedy.from_params({"alpha": ALPHA, "horizon": HORIZON})
    )
    assert thresholds == sorted(thresholds)  # monotone, as read from the paper
    assert undercovered > HORIZON // 2
    assert coverage < ALPHA - 0.1


def test_aci_undercovers_often() -> None:
    coverage, undercovered, _ = coverage_run(lambda: ACI.from_params({"alpha": ALPHA}))
    assert undercovered > HORIZON // 5
    assert coverage == pytest.approx(ALPHA, abs=0.02)  # ACI's long-run miss-rate guarantee


def test_dlr_keeps_coverage() -> None:
    coverage, undercovered, _ = coverage_run(lambda: DLR.from_params({"alpha": ALPHA}))
    assert coverage >= ALPHA - 0.005
    # lr = 1 is large for U(0, 1) scores: tau oscillates around tau*, so it crosses it often
    assert undercovered > 0


def test_dlr_with_a_small_learning_rate_never_undercovers() -> None:
    coverage, undercovered, thresholds = coverage_run(
        lambda: DLR.from_params({"alpha": ALPHA, "lr": 0.03})
    )
    assert undercovered == 0  # climbs from the conservative start and has not crossed tau*
    assert coverage >= ALPHA
    assert thresholds[-1] > TAU_STAR - 0.03


def test_etc_commits_once_and_overshoots_about_half_the_time() -> None:
    explore = sps_burn_in(ALPHA, HORIZON)
    _, undercovered, thresholds = coverage_run(
        lambda: ETC.from_params({"alpha": ALPHA, "horizon": HORIZON})
    )
    committed = thresholds[explore]
    assert thresholds[:explore] == [-math.inf] * explore
    assert set(thresholds[explore:]) == {committed}
    assert undercovered == (HORIZON - explore if committed > TAU_STAR else 0)
    overshooting = 0
    for seed in range(20):  # the commit only depends on the exploration scores
        learner = ETC.from_params({"alpha": ALPHA, "horizon": HORIZON})
        for score in np.random.default_rng(seed).uniform(size=explore):
            learner.observe(float(score))
        overshooting += learner.threshold > TAU_STAR
    assert 3 <= overshooting <= 17


@pytest.mark.parametrize("explore", [None, 3000])
def test_con_etc_never_undercovers(explore: int | None) -> None:
    params: dict[str, Any] = {"alpha": ALPHA, "horizon": HORIZON}
    if explore is not None:
        params["explore_rounds"] = explore
    coverage, undercovered, thresholds = coverage_run(lambda: ConETC.from_params(params))
    assert undercovered == 0
    assert coverage >= ALPHA
    assert len(set(thresholds)) == 2  # the full set, then one committed threshold
