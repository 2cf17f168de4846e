"""A family added in one file (this one) and registered at run time, as
docs/adding_a_family.md says: it has fields no built-in family has, gets decisions through
the processors, exports its gauges, passes the learner contract suite, is simulated
(``banditflow simulate``'s traffic), replays offline and its decisions are logged rounds.

Everything below is what a family author writes: learners (``ALGORITHMS``), event models,
an evaluation task and a log builder, and the front door, ``TOY``."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import ConfigDict, Field, model_validator
from test_learner_contract import check_learner_contract

from banditflow.learners.base import Decided, Learned, Learner, LearnerError
from banditflow.learners.family import JSON, Application, Contract, Family
from banditflow.learners.registry import algorithms, family, register, unregister
from banditflow.offline.archive import joined_rounds
from banditflow.offline.evaluation.replay import LoggedRound, replay
from banditflow.processors import PartitionStore, Processor, Source
from banditflow.schemas.events import (
    ContextRecord,
    FamilyEvents,
    FeedbackRecord,
    TruthRecord,
    refuses_what_its_envelope_refuses,
)
from banditflow.streams.metrics import PrometheusSink
from banditflow.streams.simulate import SimulationSettings, prepare


# ------------------------------------------------------------------------------- learners
class Greedy(Learner):
    """Serves the dish with the highest mean rating so far (ties: the first) among the
    ``dishes`` a context offers (each named by its index in the learner's menu)."""

    family = "toy"
    algorithm = "greedy"
    PARAMS: ClassVar[set[str]] = {"dishes"}

    def __init__(self, dishes: int) -> None:
        self.totals, self.counts = [0.0] * dishes, [0] * dishes

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Greedy:
        return cls(int(params.get("dishes", 2)))

    def choose(self, offered: list[int]) -> int:
        means = [self.totals[d] / self.counts[d] if self.counts[d] else 1.0 for d in offered]
        return offered[int(np.argmax(means))]

    def decide(self, context: Mapping[str, Any], rng: np.random.Generator) -> Decided:
        offered = list(context["dishes"])
        if any(not 0 <= d < len(self.counts) for d in offered):
            raise LearnerError(f"dishes {offered} are not all on the menu of {len(self.counts)}")
        dish = self.choose(offered)
        return Decided(output={"dish": dish}, pending={"dish": dish})

    def learn(self, pending: Mapping[str, Any], feedback: Mapping[str, Any]) -> Learned:
        dish = pending["dish"]
        rating = feedback["ratings"][str(dish)]
        self.totals[dish] += rating
        self.counts[dish] += 1
        return Learned(metrics={"rating": rating})

    def expire(self, pending: Mapping[str, Any]) -> Learned:
        return Learned()

    def to_state(self) -> dict[str, Any]:
        return {"totals": self.totals, "counts": self.counts}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.totals, self.counts = list(state["totals"]), list(state["counts"])

    def summary(self) -> dict[str, float | list[float]]:
        return {"toy_served": [float(c) for c in self.counts]}


class First(Greedy):
    """The baseline: the first dish offered."""

    algorithm = "first"

    def choose(self, offered: list[int]) -> int:
        return offered[0]


ALGORITHMS = {"greedy": Greedy, "first": First}


# --------------------------------------------------------------------------- event models
class ToyContext(ContextRecord):
    dishes: list[int] = Field(min_length=1, description="toy: the dishes on offer today")

    SIZED: ClassVar = {"dishes": "max_labels"}


class ToyFeedback(FeedbackRecord):
    ratings: dict[str, float] | None = Field(None, description="toy: served dish -> rating")


class ToyTruth(TruthRecord):
    best: int | None = Field(None, description="toy: the best dish on offer")

    @model_validator(mode="after")
    def _a_dish(self) -> ToyTruth:
        if self.best is not None and self.best < 0:
            raise ValueError("'best' is a dish index")
        return self


EVENTS = FamilyEvents(ToyContext, ToyFeedback, ToyTruth)


# ------------------------------------------------------------- evaluation task, log builder
RATINGS = [0.2, 0.9, 0.5]  # dish 1 is the best


class Task:
    """Rounds from a toy log; a served dish is rated by its fixed rating."""

    family = "toy"

    def __init__(self, path: Path, horizon: int | None) -> None:
        lines = path.read_text().splitlines()[:horizon]
        self.offers = [json.loads(line)["dishes"] for line in lines]

    def rounds(self) -> Iterator[LoggedRound]:
        for t, dishes in enumerate(self.offers):
            yield LoggedRound(f"r{t}", {"dishes": dishes}, None)

    def feedback(self, round_: LoggedRound, output: Mapping[str, Any],
                 rng: np.random.Generator) -> list[dict[str, Any]]:
        return [{"ratings": {str(output["dish"]): RATINGS[output["dish"]]}}]

    def truth(self, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        return {"best": max(round_.context["dishes"], key=RATINGS.__getitem__)}

    def row(self, t: int, round_: LoggedRound, output: Mapping[str, Any]) -> dict[str, Any]:
        return {"dish": output["dish"]}

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"best_dish_rate": sum(row["dish"] == 1 for row in rows) / len(rows)}


def add_options(group: Any) -> None:
    """(``banditflow evaluate --family toy`` takes no options of its own.)"""


def build(args: Any, seed: int) -> tuple[Task, Any]:
    return Task(args.log, args.horizon), lambda algorithm: {"dishes": len(RATINGS)}


def _write_log(out: Path, rounds: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    out.write_text("".join(json.dumps({"dishes": sorted({0, int(rng.integers(3))} | {1})})
                           + "\n" for _ in range(rounds)))
    return f"{rounds} toy offers"


LOGS = {"toy-offers": _write_log}


# ------------------------------------------------------------------------------ front door
def _contract_context(rng: np.random.Generator) -> JSON:
    return {"dishes": sorted({int(d) for d in rng.integers(3, size=2)})}


def _contract_feedback(output: JSON, rng: np.random.Generator) -> list[JSON]:
    return [{"ratings": {str(output["dish"]): round(float(rng.random()), 6)}}]


TOY = Family(
    name="toy",
    algorithms=__name__,
    events=__name__,
    arm_gauges={"toy_served": "Servings per dish (toy)"},
    played_action="dish",
    revealed="ratings",
    evaluation=__name__,
    logs=(__name__,),
    application=Application("toy-offers", "greedy", "first", 60, 100.0),
    contract=Contract(_contract_context, _contract_feedback,
                      lambda output: output["dish"] in range(3), {"dishes": 3},
                      bad_context={"dishes": [7]}),
)


# ----------------------------------------------------------------------------------- tests
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
    config = {"learner_id": "t", "family": "toy", "algorithm": "greedy", "params": {"dishes": 2}}
    processor.on_config("t", json.dumps(config).encode(), Source("learners"), 0.0)
    for i in range(4):
        out = processor.on_context(event(event_id=f"e{i}", dishes=[0, 1]),
                                   Source("contexts"), float(i))
        dish = out.decisions[0].output["dish"]
        out = processor.on_feedback(event(event_id=f"e{i}", ratings={str(dish): float(dish)}),
                                    Source("feedback"), float(i))
        assert not out.dead_letters
        out = processor.on_truth(event(event_id=f"e{i}", best=1), Source("truth"), float(i))
        assert not out.dead_letters
    # Dish 0 first (ties), then dish 1 once dish 0 has rated nothing: greedy on its ratings.
    assert processor.gauges("t")["toy_served"] == [1.0, 3.0]
    sink.learner_state("t", "toy", "greedy", processor.gauges("t"))
    text = sink.exposition().decode()
    series = 'banditflow_toy_served{algorithm="greedy",arm="1",family="toy",learner_id="t"}'
    assert f"{series} 3.0" in text


@pytest.mark.parametrize(("kind", "fields", "reason", "says"), [
    # its own fields, checked by its own models
    ("context", {"dishes": []}, "invalid_schema", "dishes: List should have at least 1 item"),
    ("context", {"dishes": ["soup"]}, "invalid_schema", "dishes.0: Input should be a valid"),
    ("context", {"dishes": list(range(5))}, "oversize", "5 dishes exceeds the limit of 4"),
    ("context", {"dishes": [7]}, "learner_rejected", "not all on the menu"),
    ("truth", {"best": -1}, "invalid_schema", "'best' is a dish index"),
    # another family's fields, refused with what the toy takes
    ("context", {"dishes": [0], "labels": ["a"], "scores": [1.0]}, "learner_rejected",
     "labels, scores is not toy context (it takes dishes)"),
    ("feedback", {"label": "a"}, "contradicting_feedback",
     "label is not toy feedback (it takes ratings)"),
    ("feedback", {}, "invalid_schema", "feedback carries nothing; expected one of ratings"),
    # a field no family has
    ("context", {"dishes": [0], "colour": "red"}, "invalid_schema",
     "colour: Extra inputs are not permitted"),
])
def test_its_records_are_checked_by_its_own_models(
    toy: Family, kind: str, fields: dict[str, Any], reason: str, says: str
) -> None:
    from banditflow.schemas import Limits

    processor = Processor(limits=Limits(max_labels=4))
    config = {"learner_id": "t", "family": "toy", "algorithm": "greedy", "params": {"dishes": 2}}
    processor.on_config("t", json.dumps(config).encode(), Source("learners"), 0.0)
    decided = processor.on_context(event(event_id="open", dishes=[0]), Source("contexts"), 1.0)
    assert decided.decisions and not decided.dead_letters
    handle = {"context": processor.on_context, "feedback": processor.on_feedback,
              "truth": processor.on_truth}[kind]
    out = handle(event(event_id="open" if kind != "context" else "new", **fields),
                 Source(kind), 2.0)
    (dead,) = out.dead_letters
    assert dead.reason == reason and says in dead.detail, dead.detail


@pytest.mark.parametrize("name", ["greedy", "first"])
def test_a_registered_family_passes_the_learner_contract(toy: Family, name: str) -> None:
    assert set(algorithms("toy")) == {"greedy", "first"}
    check_learner_contract("toy", name)


def test_a_registered_family_is_simulated(toy: Family, tmp_path: Path) -> None:
    """``banditflow simulate --family toy --baseline``'s traffic and learners (what it
    produces to Kafka), played here through the processors."""
    played, report = prepare(SimulationSettings(family="toy", events=60, seed=3, baseline=True,
                                                workdir=tmp_path))
    assert [t.algorithm for t in report.tallies] == ["greedy", "first"]
    assert len(played.rounds) == 60
    processor = Processor()
    served: dict[str, list[int]] = {}
    for tally in report.tallies:
        config = {"learner_id": tally.learner_id, "family": "toy",
                  "algorithm": tally.algorithm, "params": tally.params}
        processor.on_config(tally.learner_id, json.dumps(config).encode(), Source("learners"),
                            0.0)
        rng = np.random.default_rng(0)
        for t, round_ in enumerate(played.rounds):
            context = {"learner_id": tally.learner_id, "event_id": round_.event_id,
                       **round_.context}
            out = processor.on_context(json.dumps(context).encode(), Source("contexts"), t)
            output = out.decisions[0].output
            served.setdefault(tally.algorithm, []).append(output["dish"])
            for part in played.feedback(round_, output, rng):
                body = {"learner_id": tally.learner_id, "event_id": round_.event_id, **part}
                assert not processor.on_feedback(json.dumps(body).encode(), Source("feedback"),
                                                 t).dead_letters
            truth = {"learner_id": tally.learner_id, "event_id": round_.event_id,
                     **played.truth(round_, output)}
            assert not processor.on_truth(json.dumps(truth).encode(), Source("truth"),
                                          t).dead_letters
    # Every offer holds dish 1, the best: greedy finds it, the baseline serves dish 0 when
    # it is offered.
    assert served["greedy"][-30:] == [1] * 30
    assert served["first"].count(0) > 10


def test_a_registered_family_replays_offline(toy: Family, tmp_path: Path) -> None:
    path = tmp_path / "toy.jsonl"
    _write_log(path, 50, seed=1)
    rows, summary, _ = replay(Task(path, None), "greedy", {"dishes": 3})
    assert len(rows) == 50 and summary["best_dish_rate"] >= 48 / 50


def test_a_registered_familys_decisions_are_logged_rounds(toy: Family) -> None:
    def archived(topic: str, **value: Any) -> dict[str, Any]:
        return {"topic": topic, "value": {"learner_id": "t", "event_id": "e", **value}}

    (round_,) = joined_rounds([
        archived("decisions", family="toy", algorithm="greedy", output={"dish": 1}),
        archived("feedback", ratings={"1": 0.5, "0": 0.0}),
    ])
    assert (round_.action, round_.reward, round_.revealed) == (1, 0.5, {1: 0.5, 0: 0.0})


class LooseContext(ToyContext):
    model_config = ConfigDict(extra="allow")


class AliasedContext(ToyContext):
    dishes: list[int] = Field(min_length=1, alias="menu")


class LooseIdContext(ToyContext):
    event_id: str  # (the envelope's is a bounded, non-empty id)


class RewritingContext(ToyContext):
    @model_validator(mode="before")
    @classmethod
    def _menu_is_dishes(cls, data: Any) -> Any:
        return {("dishes" if key == "menu" else key): value for key, value in data.items()}


@pytest.mark.parametrize("model", [LooseContext, AliasedContext, LooseIdContext,
                                   RewritingContext])
def test_a_model_that_takes_what_its_envelope_refuses_is_not_read_alone(
    model: type[ContextRecord],
) -> None:
    assert refuses_what_its_envelope_refuses(ToyContext)
    assert not refuses_what_its_envelope_refuses(model)


def test_a_loose_familys_records_are_read_envelope_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker reads a known learner's record with its family's model alone (one parse)
    only if that model refuses all the envelope refuses: a plug-in's model that takes any
    field gets its records read envelope first, which refuses a field no family has."""
    module = types.ModuleType("loose_events")
    module.EVENTS = FamilyEvents(LooseContext, ToyFeedback, ToyTruth)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "loose_events", module)
    register(dataclasses.replace(TOY, name="loose", events="loose_events"))
    try:
        processor = Processor()
        config = {"learner_id": "t", "family": "loose", "algorithm": "greedy",
                  "params": {"dishes": 2}}
        processor.on_config("t", json.dumps(config).encode(), Source("learners"), 0.0)
        out = processor.on_context(event(event_id="a", dishes=[0]), Source("contexts"), 1.0)
        assert out.decisions and not out.dead_letters
        out = processor.on_context(event(event_id="b", dishes=[0], colour="red"),
                                   Source("contexts"), 1.0)
        (dead,) = out.dead_letters
        assert dead.reason == "invalid_schema" and "no family's context has such a field" in (
            dead.detail), dead.detail
    finally:
        unregister("loose")


def test_an_unregistered_family_is_unknown() -> None:
    with pytest.raises(LearnerError, match="unknown family 'toy'"):
        family("toy")
