"""Budget safety of every deferral learner under delayed, reordered, lost feedback and restarts.

A seeded harness plays a stream the way the processors do: each decision's feedback parts
arrive after independent random delays (so the human part often precedes the model part),
some parts never arrive and the decision times out, and the learner is periodically restored
from its JSON state (a crash and restart). The harness charges each deferral independently
of the learner (the human's cost if it answered in time, else the full reservation) and
checks that no budget period ever spends more than B.
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from banditflow.learners.deferral import ALGORITHMS
from banditflow.learners.deferral.base import DeferralLearner

HORIZON = 500  # rounds per budget period
PERIODS = 4
BUDGET = 25.0
TIMEOUT = 60  # rounds until a decision expires
MAX_DELAY = 80  # delays beyond TIMEOUT mean the part is lost
LOSS = 0.1  # probability that a part is dropped
RESTART_EVERY = 97


def params(algorithm: str, feedback: str) -> dict[str, Any]:
    base = {"dim": 3, "budget": BUDGET, "horizon": HORIZON, "feedback": feedback}
    if algorithm == "best_reject":
        return {**base, "threshold": 0.6}
    if algorithm == "ucb":
        return {**base, "warmup": 30}
    return base


def restart(learner: DeferralLearner, algorithm: str, feedback: str) -> DeferralLearner:
    state = json.loads(json.dumps(learner.to_state()))
    return ALGORITHMS[algorithm].from_state(params(algorithm, feedback), state)


def run_stream(
    algorithm: str, feedback: str, seed: int, forget_reservations: bool = False
) -> dict[str, Any]:
    """Play the harness; returns per-period charged costs and the peak learner spend."""
    rng = np.random.default_rng(seed)
    learner = ALGORITHMS[algorithm].from_params(params(algorithm, feedback))
    queue: list[tuple[int, int, int, str]] = []  # (arrival round, tie-break, decision, part)
    pending: dict[int, dict[str, Any]] = {}
    truth: dict[int, dict[str, float]] = {}
    answered: set[int] = set()
    charged: defaultdict[int, float] = defaultdict(float)
    events = {"timeout_charged": 0, "human_first": 0}
    peak = 0.0
    order = 0
    for now in range(HORIZON * PERIODS):
        while queue and queue[0][0] <= now:
            _, _, decision, part = heapq.heappop(queue)
            if decision not in pending:
                continue  # arrived after the timeout: the processor drops it
            record = pending[decision]
            if part == "model":
                feedback_event = {"part": "model", "model_reward": truth[decision]["model"]}
            else:
                cost = truth[decision]["cost"]
                feedback_event = {"part": "human", "human_reward": truth[decision]["human"],
                                  "human_cost": cost}
                charged[record["period"]] += cost
                answered.add(decision)
            result = learner.learn(record, feedback_event)
            events["human_first"] += part == "human" and not result.done
            if result.done:
                del pending[decision]
        for decision in [d for d, record in pending.items() if record["deadline"] <= now]:
            record = pending.pop(decision)
            learner.expire(record)
            if record["defer"] and decision not in answered:
                charged[record["period"]] += record["reserved"]
                events["timeout_charged"] += 1
        if now % RESTART_EVERY == 0:
            learner = restart(learner, algorithm, feedback)
        x = rng.normal(size=3)
        x *= rng.uniform(0.2, 1.0) / np.linalg.norm(x)
        decided = learner.decide({"features": x.tolist(),
                                  "model_reward_estimate": float(rng.uniform())},
                                 np.random.default_rng([seed, now]))
        if forget_reservations:
            learner.reserved = 0.0  # a broken learner: the reservation is not kept
        peak = max(peak, learner.spent + learner.reserved)
        decision = decided.pending["decision"]
        pending[decision] = {**decided.pending, "deadline": now + TIMEOUT}
        truth[decision] = {"model": float(rng.uniform() < 0.3), "human": float(rng.uniform()),
                           "cost": float(rng.uniform(0.3, 1.0))}
        for part in decided.pending["parts"]:
            if rng.uniform() >= LOSS:
                order += 1
                arrival = now + int(rng.integers(0, MAX_DELAY))
                heapq.heappush(queue, (arrival, order, decision, part))
    return {"charged": dict(charged), "peak": peak, **events}


@pytest.mark.parametrize("feedback", ["full", "bandit"])
@pytest.mark.parametrize("algorithm", ["ucb", "arbitrary_human", "best_reject"])
def test_budget_never_exceeded(algorithm: str, feedback: str) -> None:
    for seed in range(2):
        result = run_stream(algorithm, feedback, seed)
        assert set(result["charged"]) == set(range(PERIODS))  # every period deferred
        for period, spend in result["charged"].items():
            assert spend <= BUDGET + 1e-9, (period, spend)
        assert result["peak"] <= BUDGET + 1e-9
        assert result["timeout_charged"] > 0
        assert (result["human_first"] > 0) == (feedback == "full")
        # the budget binds: a learner that spends it is close to B in every period
        if algorithm == "arbitrary_human":
            assert min(result["charged"].values()) > BUDGET - 1.0


def test_harness_catches_a_learner_without_reservations() -> None:
    """Sanity check of the stream: forgetting reservations overspends by far."""
    result = run_stream("arbitrary_human", "full", seed=0, forget_reservations=True)
    assert max(result["charged"].values()) > 2 * BUDGET


def test_reservation_settled_by_cost_and_charged_on_timeout() -> None:
    learner = ALGORITHMS["arbitrary_human"].from_params(
        {"dim": 1, "budget": 3.0, "horizon": 10, "c_max": 1.5}
    )
    rng = np.random.default_rng(0)
    first = learner.decide({"features": [1.0]}, rng)
    second = learner.decide({"features": [1.0]}, rng)
    third = learner.decide({"features": [1.0]}, rng)
    assert [first.output["defer"], second.output["defer"], third.output["defer"]] == [
        True, True, False]
    assert learner.reserved == 3.0 and learner.budget_remaining == 0.0
    learner.learn(first.pending, {"part": "human", "human_reward": 1.0, "human_cost": 0.5})
    assert (learner.spent, learner.reserved) == (0.5, 1.5)
    expired = learner.expire(second.pending)
    assert expired.metrics["cost"] == 1.5
    assert (learner.spent, learner.reserved) == (2.0, 0.0)
    assert learner.decide({"features": [1.0]}, rng).output["defer"] is False  # 2 + 1.5 > 3


def test_new_period_resets_budget_and_late_settlement_keeps_it() -> None:
    learner = ALGORITHMS["arbitrary_human"].from_params({"dim": 1, "budget": 1.0, "horizon": 3})
    rng = np.random.default_rng(0)
    deferred = learner.decide({"features": [1.0]}, rng)
    assert deferred.output["defer"]
    for _ in range(2):
        assert not learner.decide({"features": [1.0]}, rng).output["defer"]
    fresh = learner.decide({"features": [1.0]}, rng)  # round 3: period 1
    assert fresh.output["defer"] and learner.summary()["period"] == 1.0
    # the period-0 deferral settles late: period 1's budget is untouched by it
    learner.learn(deferred.pending, {"part": "human", "human_reward": 0.0, "human_cost": 1.0})
    assert (learner.spent, learner.reserved) == (0.0, 1.0)


def test_parts_in_either_order_and_never_twice() -> None:
    learner = ALGORITHMS["arbitrary_human"].from_params({"dim": 1, "budget": 5.0, "horizon": 10})
    decided = learner.decide({"features": [0.5]}, np.random.default_rng(0))
    human = {"part": "human", "human_reward": 1.0, "human_cost": 0.25}
    first = learner.learn(decided.pending, human)
    assert not first.done and first.metrics == {"reward": 1.0, "cost": 0.25, "deferred": 1.0}
    again = learner.learn(decided.pending, human)  # a duplicate: not applied again
    assert not again.done and learner.spent == 0.25
    assert learner.learn(decided.pending, {"part": "model", "model_reward": 0.0}).done
    assert learner.partial == {}
    # a timeout after the human answered charges nothing more
    other = learner.decide({"features": [0.5]}, np.random.default_rng(1))
    learner.learn(other.pending, {"part": "human", "human_reward": 1.0, "human_cost": 0.5})
    assert "cost" not in learner.expire(other.pending).metrics
    assert (learner.spent, learner.reserved, learner.partial) == (0.75, 0.0, {})
