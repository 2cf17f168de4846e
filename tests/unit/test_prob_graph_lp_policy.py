"""Branches, LP cache, in-flight counting and cascade refresh of the prob_graph lp_policy."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from banditflow.learners.base import LearnerError
from banditflow.learners.prob_graph import LPPolicy
from banditflow.learners.prob_graph.bound import information_targets
from banditflow.learners.prob_graph.lp_policy import exploration_level

# Every arm observes itself; arm 2 also reveals arms 0 and 1 with probability 0.9.
REVEALING: dict[str, Any] = {
    "arms": 3,
    "edges": [[0, 0, 1.0], [1, 1, 1.0], [2, 2, 1.0], [2, 0, 0.9], [2, 1, 0.9]],
}


def learner_in_state(
    plays: list[int],
    observations: list[int],
    means: list[float],
    *,
    exploration_rounds: int = 0,
    **params: Any,
) -> LPPolicy:
    """An lp_policy whose closed plays, observations and empirical means are given; its
    targets use the means as given (``target_shrink=0``) unless ``params`` say otherwise."""
    learner = LPPolicy.from_params({**REVEALING, "target_shrink": 0.0, **params})
    state = learner.to_state()
    state.update(
        decisions=sum(plays),
        plays=plays,
        observations=observations,
        reward_sums=[m * o for m, o in zip(means, observations, strict=True)],
        exploration_rounds=exploration_rounds,
    )
    learner.load_state(state)
    return learner


def decide(learner: LPPolicy, seed: int = 0) -> tuple[int, str, dict[str, Any]]:
    decided = learner.decide({}, np.random.default_rng(seed))
    return decided.output["arm"], decided.output["branch"], dict(decided.pending)


def test_warmup_plays_the_arm_revealing_the_most_and_counts_in_flight() -> None:
    learner = LPPolicy.from_params(REVEALING)
    first = decide(learner)
    assert first[:2] == (2, "warmup")  # the revealer: 1 + 0.9 + 0.9 expected observations
    # In flight, it is expected to reveal arms 0 and 1 with 0.9 each, less than the one
    # observation the warm-up asks: the revealer again.
    assert decide(learner)[:2] == (2, "warmup")
    # It revealed arm 1 but not arm 0: arm 0 is left, which it observes best itself.
    learner.learn(first[2], {"rewards": {"1": 0.0, "2": 0.5}, "complete": True})
    learner.load_state({**learner.to_state(), "open": {}})
    assert decide(learner)[:2] == (0, "warmup")


def test_the_warm_up_of_a_revealing_graph_plays_the_revealer_not_every_arm() -> None:
    """Every arm observes itself, the revealer (the last) also reveals the other 39 with
    p = 0.9: the old warm-up (bestParent of one short arm at a time) played all 39 directly;
    this one plays the revealer until few arms are left unobserved."""
    from banditflow.learners.prob_graph.scenarios import Environment, revealing_action

    scenario = revealing_action([1.0] + [0.6] * 38 + [0.5], revealer=39)
    learner = LPPolicy.from_params(scenario.learner_params())
    environment, rng = Environment(scenario), np.random.default_rng(3)
    warmup = []
    while True:
        arm, branch, pending = decide(learner)
        if branch != "warmup":
            break
        warmup.append(arm)
        learner.learn(pending, environment.feedback(arm, rng))
    assert warmup[0] == 39 and len(warmup) <= 6, warmup


def test_warmup_ends_once_every_arm_is_observed() -> None:
    learner = LPPolicy.from_params(REVEALING)
    arm, branch, pending = decide(learner)
    assert arm == 2  # reveals itself surely, so complete feedback carries its reward
    learner.learn(pending, {"rewards": {"0": 1.0, "2": 0.0}, "complete": True})
    arm, branch, pending = decide(learner)  # arm 1, the only arm not yet observed
    assert branch == "warmup"
    learner.learn(pending, {"rewards": {str(arm): 0.0}, "complete": True})
    assert decide(learner)[1] != "warmup"


def test_realisation_guard_fires_when_observations_lag_closed_plays() -> None:
    # Ten closed revealer plays: m = (9, 9, 10), but arm 0 and 1 were observed once each.
    learner = learner_in_state([0, 0, 10], [1, 1, 10], [1.0, 0.0, -1.0])
    assert decide(learner)[:2] == (0, "guard")


def test_guard_ignores_in_flight_plays_but_targets_count_them() -> None:
    learner = learner_in_state([0, 0, 0], [1, 1, 1], [1.0, 0.0, -1.0])
    state = learner.to_state()
    state["decisions"] = 10
    state["open"] = {str(n): [2, []] for n in range(1, 11)}  # ten revealer plays in flight
    learner.load_state(state)
    # In flight: m = (9, 9, 10) counts for the exploit test (alpha(11) < log 11 = 2.4,
    # b = (2, 2, 0.5)),
    # while the guard, on closed plays only, sees m = 0 and does not fire.
    assert decide(learner)[:2] == (0, "exploit")


def test_exploration_level_forms() -> None:
    for t in (1, 2, 10, 10**5):
        assert exploration_level(t, "log") == math.log(t)
        assert exploration_level(t, "log", 0.5) == 0.5 * math.log(t)
    # log t - log log t where log t >= 1, log t below (log log t <= 0 there): 9.07 at 10^5
    assert exploration_level(10**5) == pytest.approx(math.log(10**5) - math.log(math.log(10**5)))
    assert exploration_level(10**5) == pytest.approx(9.069, abs=1e-3)
    assert exploration_level(2) == math.log(2) and exploration_level(1) == 0.0
    assert exploration_level(3) == pytest.approx(math.log(3) - math.log(math.log(3)))
    rounds = np.unique(np.geomspace(1, 10**9, 2000).astype(int))
    levels = np.array([exploration_level(int(t)) for t in rounds])
    logs = np.log(rounds)
    assert np.all(np.diff(levels) >= 0)  # non-decreasing, continuous at t = e
    assert np.all(levels[1:] > 0) and np.all(levels <= logs + 1e-12)
    assert exploration_level(10**5) / math.log(10**5) == pytest.approx(0.788, abs=1e-3)
    # asymptotically log t: the ratio tends to 1 (slowly, like 1 - log log t / log t)
    ratios = [exploration_level(10**k) / math.log(10**k) for k in (5, 10, 50, 300)]
    assert ratios == sorted(ratios) and ratios[-1] > 0.99
    with pytest.raises(LearnerError, match="alpha_rule"):
        exploration_level(10, "sqrt")


def test_exploit_test_uses_the_log_minus_loglog_level_by_default() -> None:
    # 70 revealer plays at t = 10,001: m = (63, 63, 70), b = (8, 8, 5.6), so the exploit test
    # needs alpha(t) <= 63 / 8 = 7.9: log t - log log t = 6.99 passes, log t = 9.21 does not.
    def learner(**params: Any) -> LPPolicy:
        state_learner = learner_in_state([0, 0, 70], [63, 63, 70], [1.0, 0.5, 0.4], **params)
        state_learner.load_state({**state_learner.to_state(), "decisions": 10_000})
        return state_learner

    assert decide(learner())[:2] == (0, "exploit")
    assert decide(learner(alpha_rule="log_minus_loglog"))[:2] == (0, "exploit")
    assert decide(learner(alpha_rule="log"))[1] == "lp"
    assert decide(learner(alpha_rule="log", alpha_scale=0.8))[:2] == (0, "exploit")


def test_exploit_when_every_arm_has_enough_expected_observations() -> None:
    learner = learner_in_state([1000, 1000, 1000], [1900, 1900, 1000], [1.0, 0.0, -1.0])
    assert decide(learner)[:2] == (0, "exploit")
    assert learner.exploration_rounds == 0


@pytest.mark.parametrize(("forced_count", "expected_arm"), [("m", 2), ("o", 1)])
def test_forced_exploration_on_expected_or_real_observations(
    forced_count: str, expected_arm: int
) -> None:
    # m = P^T N = (27.2, 15.2, 8), O = (27, 9, 10), beta(3600) / K = 0.5 * 60 / 3 = 10.
    # The deficit test on m points at arm 2, the one on O at arm 1; bestParent(j) = j.
    learner = learner_in_state(
        [20, 8, 8],
        [27, 9, 10],
        [1.0, 0.5, 0.0],
        exploration_rounds=3600,
        forced_count=forced_count,
    )
    assert decide(learner)[:2] == (expected_arm, "forced")
    assert learner.exploration_rounds == 3601
    assert learner.lp_solves == 0


def test_tied_best_means_go_to_forced_exploration() -> None:
    learner = learner_in_state([5, 5, 5], [10, 10, 5], [1.0, 1.0, 0.0])
    arm, branch, _ = decide(learner)
    assert branch == "forced"
    assert arm in (0, 1)


def lp_state(**params: Any) -> LPPolicy:
    # alpha(12) = log 12 - log log 12 = 1.58, b = (8, 8, 5.6), m = (9.9, 1.9, 1): exploit fails,
    # n_e = 0 so no forced exploration.
    return learner_in_state([9, 1, 1], [10, 2, 1], [1.0, 0.5, 0.4], **params)


def test_lp_branch_plays_the_most_revealing_arm_below_target() -> None:
    learner = lp_state()
    arm, branch, _ = decide(learner)
    assert (arm, branch) == (2, "lp")
    assert learner.exploration_rounds == 1
    assert learner.lp_solves == 1
    c = np.array(learner.lp_cache["c"])
    _, targets, _ = information_targets(np.array([1.0, 0.5, 0.4]), "gaussian")
    P = LPPolicy.from_params(REVEALING).setting.probabilities
    assert np.all(P.T @ c >= targets * (1 - 1e-7))


def test_lp_choice_ratio_plays_the_arm_furthest_below_its_target() -> None:
    # Arms 1 and 2 are both below their LP targets; arm 2 reveals the most short arms
    # ("reveal"), arm 1 has the smallest N_i / target_i ("ratio").
    def state(choice: str) -> LPPolicy:
        return learner_in_state([9, 1, 3], [12, 4, 3], [1.0, 0.5, 0.4], lp_choice=choice)

    assert decide(state("reveal"))[:2] == (2, "lp")
    ratio = state("ratio")
    arm, branch, _ = decide(ratio)
    target = np.array(ratio.lp_cache["c"]) * math.log(ratio.decisions)
    below = np.flatnonzero(ratio.plays < target)
    assert set(below.tolist()) == {1, 2}
    assert (arm, branch) == (1, "lp")
    assert arm == below[np.argmin(ratio.plays[below] / target[below])]


def test_lp_is_re_solved_only_when_plug_in_quantities_change() -> None:
    learner = lp_state(lp_tolerance=0.05)
    _, branch, pending = decide(learner)
    assert branch == "lp"
    assert decide(learner)[1] == "lp"
    assert learner.lp_solves == 1  # same plug-in estimates: cached
    # Arm 1: (1.0 + 0.6) / 3 = 0.533, moved by 0.033 < 0.05: still cached.
    learner.learn(pending, {"rewards": {"1": 0.6}, "complete": False})
    assert decide(learner)[1] == "lp"
    assert learner.lp_solves == 1
    # Arm 2: (0.4 - 0.2) / 2 = 0.1, moved by 0.3: re-solved.
    learner.learn(pending, {"rewards": {"2": -0.2}, "complete": False})
    assert decide(learner)[1] == "lp"
    assert learner.lp_solves == 2


def test_lp_is_re_solved_when_the_empirical_best_arm_changes() -> None:
    learner = lp_state(lp_tolerance=100.0)
    _, _, pending = decide(learner)
    assert learner.lp_solves == 1
    learner.learn(pending, {"rewards": {"1": 2.5}, "complete": False})  # arm 1: 3.5 / 3 > 1
    _, branch, _ = decide(learner)
    assert branch == "lp"
    assert learner.lp_cache["best"] == 1
    assert learner.lp_solves == 2


def test_in_flight_decisions_fill_targets_without_overshooting() -> None:
    learner = lp_state()
    branches = []
    for _ in range(200):
        branches.append(decide(learner)[1])
        if branches[-1] == "exploit":
            break
    # No feedback at all: only the in-flight count can satisfy the exploit test.
    assert branches[-1] == "exploit"
    assert set(branches[:-1]) == {"lp"}
    P = learner.setting.probabilities
    _, targets, _ = information_targets(np.array([1.0, 0.5, 0.4]), "gaussian")
    alpha = exploration_level(learner.decisions)  # the default alpha(t) of round t
    expected = P.T @ (learner.plays + learner.in_flight)
    assert np.all(expected >= alpha * targets)
    # The LP plays stop at the LP targets c_i alpha(t): no overshoot past the allocation.
    c = np.array(learner.lp_cache["c"])
    lp_plays = learner.in_flight.copy()
    lp_plays[0] -= 1  # the final exploit decision
    assert np.all(learner.plays + lp_plays <= np.maximum(np.ceil(c * alpha), learner.plays))
    assert learner.summary()["in_flight"] == len(branches)


def cascade_learner(**params: Any) -> LPPolicy:
    return LPPolicy.from_params(
        {
            "arms": 3,
            "edges": [[0, 1, 0.9], [1, 2, 0.5], [2, 0, 0.3], [1, 1, 1.0]],
            "case": "cascade",
            "mc_samples": 200,
            **params,
        }
    )


def test_cascade_refreshes_reachability_when_gamma_steps_down() -> None:
    learner = cascade_learner()
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(9):
        decided = learner.decide({}, rng)
        learner.expire(decided.pending)
        samples.append(learner.reach_samples)
    # gamma(t) = gamma0 / (1 + floor(log2 t)) steps down at t = 2, 4, 8.
    assert samples == [200, 400, 400, 600, 600, 600, 600, 800, 800]
    matrix = learner.feedback_matrix(9, rng)
    assert matrix[0, 2] == pytest.approx(0.45, abs=0.08)  # r_02 = 0.9 * 0.5 via arm 1
    assert np.all(matrix >= learner.setting.probabilities)  # a direct edge is a path


def test_cascade_threshold_drops_unlikely_paths_but_keeps_best_parents() -> None:
    learner = cascade_learner(gamma0=1.0)
    learner.feedback_matrix(1, np.random.default_rng(0))  # gamma = 1: only best parents stay
    kept = learner.matrix > 0
    assert kept.sum(axis=0).tolist() == [1, 1, 1]
    assert np.argmax(learner.matrix, axis=0).tolist() == [2, 1, 1]


def test_cascade_feedback_may_reveal_reachable_arms() -> None:
    learner = cascade_learner()
    decided = learner.decide({}, np.random.default_rng(0))
    # warm-up: arm 1 reveals the most (itself, and arm 2 through 1 -> 2 with r = 0.5)
    assert decided.output["arm"] == 1
    learned = learner.learn(decided.pending, {"rewards": {"0": 1.0, "1": 0.5, "2": 0.1}})
    assert learned.done
    assert learned.metrics == {"reward": 0.5}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"beta_a": 0.7}, "beta_a"),
        ({"beta_b": 1.0}, "beta_b"),
        ({"forced_count": "x"}, "forced_count"),
        ({"guard_ratio": 1.0}, "guard_ratio"),
        ({"tie_break": "yes"}, "tie_break"),
        ({"mc_samples": 0}, "mc_samples"),
        ({"gamma0": 0.0}, "gamma0"),
        ({"alpha_scale": "fast"}, "alpha_scale"),
        ({"kl_clip": 0.5}, "kl_clip"),
        ({"lp_tolerance": -1.0}, "lp_tolerance"),
        ({"lp_choice": "greedy"}, "lp_choice"),
        ({"alpha_rule": "sqrt"}, "alpha_rule"),
        ({"alpha_rule": 1.0}, "alpha_rule"),
        ({"alpha": 1.0}, "unknown parameter"),
    ],
)
def test_invalid_parameters_are_named(params: dict[str, Any], message: str) -> None:
    with pytest.raises(LearnerError, match=message):
        LPPolicy.from_params({**REVEALING, **params})


def run_with_delay(learner: LPPolicy, rounds: int, seed: int) -> list[dict[str, Any]]:
    """Decide ``rounds`` times, answering each decision three decisions later."""
    rng = np.random.default_rng(seed)
    outputs, waiting = [], []
    for _ in range(rounds):
        decided = learner.decide({}, rng)
        outputs.append(decided.output)
        arm = decided.output["arm"]
        revealed = np.flatnonzero(rng.random(3) < learner.setting.probabilities[arm])
        rewards = {str(j): float(rng.normal([1.0, 0.5, 0.2][j])) for j in revealed}
        waiting.append((decided.pending, {"rewards": rewards, "complete": True}))
        if len(waiting) > 3:
            learner.learn(*waiting.pop(0))
    return outputs


@pytest.mark.parametrize("case", ["one_step", "cascade"])
def test_state_round_trip_continues_identically(case: str) -> None:
    params = {**REVEALING, "case": case, "mc_samples": 50}
    learner = LPPolicy.from_params(params)
    run_with_delay(learner, 300, seed=1)
    state = learner.to_state()
    assert state["open"]  # decisions in flight are part of the state
    restored = LPPolicy.from_state(params, json.loads(json.dumps(state)))
    assert restored.to_state() == state
    assert run_with_delay(restored, 200, seed=2) == run_with_delay(learner, 200, seed=2)
    assert restored.to_state() == learner.to_state()


def test_decisions_are_deterministic_given_the_seed() -> None:
    params = {**REVEALING, "case": "cascade", "mc_samples": 50}
    first = run_with_delay(LPPolicy.from_params(params), 300, seed=7)
    second = run_with_delay(LPPolicy.from_params(params), 300, seed=7)
    assert first == second
    assert {output["branch"] for output in first} >= {"warmup", "lp", "exploit"}


# Arm 1 cannot observe itself; it reveals the best arm 0 cheaply (p = 0.9). Arms 0 and 2 reveal
# arm 1. In the state below arm 1 was played 5000 times while its estimate (0.69, 10
# observations) sits next to the best arm's (0.7): both targets are huge, and only plays of its
# parents 0 and 2 can correct it.
TRAP: dict[str, Any] = {
    "arms": 3,
    "edges": [[1, 0, 0.9], [1, 2, 0.5], [0, 1, 0.2], [0, 2, 0.5], [2, 1, 0.9], [2, 0, 0.3]],
}


def trapped(lp_choice: str) -> LPPolicy:
    learner = LPPolicy.from_params({**TRAP, "lp_choice": lp_choice, "target_shrink": 0.0})
    state = learner.to_state()
    plays, observations, means = [30, 5000, 5], [4500, 10, 2515], [0.7, 0.69, 0.3]
    state.update(
        decisions=sum(plays),
        plays=plays,
        observations=observations,
        reward_sums=[m * o for m, o in zip(means, observations, strict=True)],
    )
    learner.load_state(state)
    return learner


def test_lp_choice_progress_leaves_the_trap_that_reveal_stays_in() -> None:
    # "reveal" counts short arms revealed: arm 1 (p 0.9 to the short best arm) wins forever.
    arm, branch, _ = decide(trapped("reveal"))
    assert (arm, branch) == (1, "lp")
    # "progress" divides by the short arms' expected observations: arm 0 is seen 4500 times
    # (weight 1/4500), arm 1 about 7 times, so a parent of arm 1 is played.
    learner = trapped("progress")
    arm, branch, _ = decide(learner)
    assert branch == "lp" and arm in (0, 2)
    m = learner.setting.probabilities.T @ (learner.plays + learner.in_flight)
    assert m[1] < 20 < m[0]


def test_lp_choice_progress_bounds_plays_by_the_short_arms_observations() -> None:
    # The budget of the module docstring: while arm 1 is short and a parent of it is below its
    # target, the LP branch chooses arm 1 only if N_1 <= K m_1 / p (K = 3 arms, p = 0.2 the
    # smaller parent edge), counting in-flight plays. No feedback arrives, so the estimates
    # (and the trap's inflated targets) stay frozen for the 400 decisions.
    learner = trapped("progress")
    learner.load_state({**learner.to_state(), "plays": [30, 5, 5], "decisions": 40})
    matrix = learner.setting.probabilities
    chosen = []
    for _ in range(400):
        pulls = learner.plays + learner.in_flight
        arm, branch, _ = decide(learner)
        assert branch == "lp"
        if arm == 1:
            assert pulls[1] <= 3 * (matrix.T @ pulls)[1] / 0.2
        chosen.append(arm)
    assert 0 < chosen.count(1) < 400 and {0, 2} & set(chosen)


def test_progress_is_not_trapped_on_the_random_graph() -> None:
    """Issue 16, reduced: the report's random p_ij clique (Bernoulli, K = 8, C* = 6.12),
    T = 10^4, seeds 0-5. The old default ("reveal") spends 10^3-10^4 rounds on a gap-0.1 arm
    that cannot observe itself on seeds 0 and 5 (over 10x C* log T); "progress" stays within
    4x on every seed and 2x on average."""
    from banditflow.learners.prob_graph.scenarios import Environment, simulate
    from banditflow.offline.logs.prob_graph import build

    scenario, _ = build("random", 0)
    horizon = 10_000
    reference = scenario.lower_bound()[0] * math.log(horizon)

    def ratio(lp_choice: str, seed: int, **params: Any) -> float:
        learner = LPPolicy.from_params(
            {**scenario.learner_params(), "lp_choice": lp_choice, **params}
        )
        return simulate(learner, Environment(scenario), horizon, seed).sum() / reference

    ratios = np.array([ratio("progress", seed) for seed in range(6)])
    print(f"progress R_T / (C* log T) per seed: {ratios.round(2)}")
    assert ratios.max() <= 4.0 and ratios.mean() <= 2.0
    # The test separates the rules (with the targets' shrinkage, which by itself moves the
    # trapped arm's estimate away from the best one's, off)
    assert ratio("reveal", 0, target_shrink=0.0) > 4.0


def test_targets_lower_every_arm_but_the_best_by_its_standard_errors() -> None:
    learner = learner_in_state([0, 0, 0], [4, 100, 25], [1.0, 0.5, 0.4], target_shrink=1.5)
    lowered = learner.target_means(learner.plugin_means())
    assert lowered.tolist() == pytest.approx([1.0, 0.5 - 1.5 / 10, 0.4 - 1.5 / 5])
    bernoulli = LPPolicy.from_params({**REVEALING, "rewards": "bernoulli"})
    bernoulli.load_state({**bernoulli.to_state(), "observations": [4, 100, 25],
                          "reward_sums": [3.0, 50.0, 10.0]})
    spread = math.sqrt(0.5 * 0.5) / 10, math.sqrt(0.4 * 0.6) / 5  # sqrt(theta (1 - theta) / O)
    assert bernoulli.target_means(bernoulli.plugin_means()).tolist() == pytest.approx(
        [0.75, 0.5 - spread[0], 0.4 - spread[1]]
    )


def test_lowered_targets_stop_chasing_the_noisiest_of_many_arms() -> None:
    """Issue 16 part 2, reduced: on the 40-arm revealing graph the plug-in targets follow the
    highest of 38 noisy gap-0.4 arms, and the LP buys its excess with direct plays; lowered by
    a standard error (the default), the same seeds cost far less."""
    from banditflow.learners.prob_graph.scenarios import Environment, revealing_action, simulate

    scenario = revealing_action([1.0] + [0.6] * 38 + [0.5], revealer=39)

    def regret(seed: int, **params: Any) -> float:
        learner = LPPolicy.from_params({**scenario.learner_params(), **params})
        return float(simulate(learner, Environment(scenario), 5_000, seed).sum())

    for seed in (0, 1):
        assert regret(seed) < 0.8 * regret(seed, target_shrink=0.0), seed


def test_lp_is_re_solved_when_the_lowered_means_move_with_the_observations() -> None:
    # Same empirical means, four times the observations: the lowered means move by half a
    # standard error (0.5 / sqrt(2), 0.5 at O = 2 and 1), so the LP is solved again.
    learner = lp_state(lp_tolerance=0.05, target_shrink=1.0)
    assert decide(learner)[1] == "lp" and learner.lp_solves == 1
    state = learner.to_state()
    state["observations"] = [4 * o for o in state["observations"]]
    state["reward_sums"] = [4 * s for s in state["reward_sums"]]
    learner.load_state({**state, "open": {}})
    decide(learner)
    assert learner.lp_solves == 2
