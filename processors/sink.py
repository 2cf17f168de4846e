"""Where processors report what happened; the worker exports it to Prometheus."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from banditflow.processors.estimators import PolicyEstimates
from banditflow.processors.records import Outcome


class Sink:
    """Observations from the processors. This base ignores them (offline replay); the
    worker's Prometheus sink overrides every method. Implementations must not raise."""

    def processed(self, topic: str, outcome: Outcome) -> None:
        """One record of ``topic`` handled with ``outcome``."""

    def feedback_applied(self, learner_id: str, delay_s: float) -> None:
        """Feedback applied ``delay_s`` after its decision."""

    def learner_state(
        self,
        learner_id: str,
        family: str,
        algorithm: str,
        gauges: Mapping[str, float | list[float]],
    ) -> None:
        """The learner's live gauges after an update (coverage, threshold, regret, …)."""

    def ope_estimates(self, learner_id: str, estimates: Sequence[PolicyEstimates]) -> None:
        """The learner's live OPE estimates (the logged policy's and each candidate's)."""

    def pending(self, partition: int, open_decisions: int) -> None:
        """Open decisions of ``partition`` after a timeout sweep."""

    def forget(self, *learner_ids: str) -> None:
        """Drop the learners' series (deleted, or their partition left this worker)."""
