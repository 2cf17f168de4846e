"""A family added in a few lines (docs/adding_a_family.md) runs through the processors, the
Prometheus exposition and the offline replay like the built-in ones."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

from banditflow.learners.base import Decided, Learned, Learner, LearnerError
from banditflow.learners.family import Family
from banditflow.learners.fields import FEATURES
from banditflow.learners.prob_graph.family import FAMILY as PROB_GRAPH
from banditflow.learners.registry import family, register, unregister
from banditflow.offline.archive import joined_rounds
from banditflow.offline.evaluation.replay import LoggedRound, replay
from banditflow.processors import PartitionStore, Processor, Source
from banditflow.streams.metrics import PrometheusSink


class Greedy(Learner):
    """Plays the feature with the highest mean reward so far (ties: the first)."""

    family = "toy"
    algorithm = "greedy"
    PARAMS: ClassVar[set[str]] = {"arms"}

    def __init__(self, arms: int) -> None:
        self.totals, self.counts = [0.0] * arms, [0] * arms

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Greedy:
        return cls(int(params.get("arms", 2)))

    def decide(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        means = [t / c if c else 1.0 for t, c in zip(self.totals, self.counts, strict=True)]
        arm = int(np.argmax(means))
        return Decided(output={"arm": arm}, pending={"arm": arm})

    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        arm = pending["arm"]
        self.totals[arm] += feedback["rewards"][str(arm)]
        self.counts[arm] += 1
        return Learned(metrics={"reward": feedback["rewards"][str(arm)]})

    def expire(self, pending: Mapping[str, Any]) -> Learned:
        return Learned()

    def to_state(self) -> dict[str, Any]:
        return {"totals": self.totals, "counts": self.counts}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.totals, self.counts = list(state["totals"]), list(state["counts"])

    def summary(self) -> dict[str, float | list[float]]:
        return {"toy_pulls": [float(c) for c in self.counts]}


ALGORITHMS = {"greedy": Greedy}
TOY = Family(
    name="toy",
    algorithms=__name__,
    context={"features": FEATURES},
    feedback={"rewards": PROB_GRAPH.feedback["rewards"]},
    arm_gauges={"toy_pulls": "Pulls per arm (toy)"},
    played_action="arm",
    revealed="rewards",
    evaluation=__name__,
)


@pytest.fixture
def toy() -> Iterator[Family]:
    register(TOY)
    yield TOY
    unregister("toy")


def event(**fields: Any) -> bytes:
    return json.dumps({"learner_id": "t", **fields}).encode()


def test_a_registered_family_decides_learns_and_exports_its_gauges(toy: Family) -> None:
    assert family("toy") is toy
    sink = PrometheusSink()
    processor = Processor(PartitionStore(), sink=sink)
    config = {"learner_id": "t", "family": "toy", "algorithm": "greedy", "params": {"arms": 2}}
    processor.on_config("t", json.dumps(config).encode(), Source("learners"), 0.0)
    for i in range(4):
        out = processor.on_context(event(event_id=f"e{i}", features=[0.0, 1.0]),
                                   Source("contexts"), float(i))
        arm = out.decisions[0].output["arm"]
        reward = 1.0 if arm == 1 else 0.0
        out = processor.on_feedback(event(event_id=f"e{i}", rewards={str(arm): reward}),
                                    Source("feedback"), float(i))
        assert not out.dead_letters
    # Arm 0 first (ties), then arm 1 once arm 0 has paid nothing: greedy on the toy's rewards.
    assert processor.gauges("t")["toy_pulls"] == [1.0, 3.0]
    sink.learner_state("t", "toy", "greedy", processor.gauges("t"))
    text = sink.exposition().decode()
    series = 'banditflow_toy_pulls{algorithm="greedy",arm="1",family="toy",learner_id="t"}'
    assert f"{series} 3.0" in text
    # Its fields are the only ones it takes: another family's are refused with the reason.
    processor.on_context(event(event_id="open", features=[0.0]), Source("contexts"), 5.0)
    out = processor.on_feedback(event(event_id="open", label="a"), Source("feedback"), 5.0)
    assert out.dead_letters[0].reason == "contradicting_feedback"
    assert "label is not toy feedback (it takes rewards)" in out.dead_letters[0].detail
    out = processor.on_context(event(event_id="x", labels=["a"], scores=[1.0]),
                               Source("contexts"), 5.0)
    assert out.dead_letters[0].reason == "learner_rejected"


class Task:
    """The toy family's evaluation task: arm 1 always pays 1, arm 0 never."""

    family = "toy"

    def rounds(self) -> Iterator[LoggedRound]:
        for t in range(50):
            yield LoggedRound(f"r{t}", {"features": [0.0, 1.0]}, None)

    def feedback(self, round_: LoggedRound, output: Mapping[str, Any],
                 rng: np.random.Generator) -> list[dict[str, Any]]:
        return [{"rewards": {str(output["arm"]): float(output["arm"])}}]

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        return {"arm": output["arm"]}

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"best_arm_rate": sum(row["arm"] for row in rows) / len(rows)}


def test_a_registered_family_replays_offline(toy: Family) -> None:
    rows, summary, _ = replay(Task(), "greedy", {"arms": 2})
    assert len(rows) == 50 and summary["best_arm_rate"] == 49 / 50


def test_a_registered_familys_decisions_are_logged_rounds(toy: Family) -> None:
    def archived(topic: str, **value: Any) -> dict[str, Any]:
        return {"topic": topic, "value": {"learner_id": "t", "event_id": "e", **value}}

    (round_,) = joined_rounds([
        archived("decisions", family="toy", algorithm="greedy", output={"arm": 1}),
        archived("feedback", rewards={"1": 0.5, "0": 0.0}),
    ])
    assert (round_.action, round_.reward, round_.revealed) == (1, 0.5, {1: 0.5, 0: 0.0})


def test_a_family_with_fields_the_schemas_lack_is_refused() -> None:
    from pydantic import Field

    odd = Family(name="odd", algorithms=__name__,
                 context={"weights": (list[float] | None, Field(None))})
    with pytest.raises(LearnerError, match="'weights' is not in the event schemas"):
        register(odd)
    with pytest.raises(LearnerError, match="unknown family 'odd'"):
        family("odd")
    loose = Family(name="loose", algorithms=__name__, context={"features": FEATURES},
                   sized={"features": "max_labels"})
    with pytest.raises(LearnerError, match="'features' is not bounded by max_labels"):
        register(loose)
