"""Where processors report what happened; the worker exports it to Prometheus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Sink(Protocol):
    """Observations from the processors. Implementations must not raise."""

    def processed(self, topic: str, outcome: str) -> None:
        """One record of ``topic`` handled with ``outcome`` (decided, applied, deduplicated…)."""

    def dead_lettered(self, reason: str) -> None: ...

    def decided(self, learner_id: str, latency_s: float) -> None: ...

    def feedback_applied(self, learner_id: str, delay_s: float) -> None: ...

    def learner_state(
        self,
        learner_id: str,
        family: str,
        algorithm: str,
        gauges: Mapping[str, float | list[float]],
    ) -> None:
        """The learner's live gauges after an update (coverage, threshold, regret, …)."""

    def pending(self, partition: int, open_decisions: int) -> None: ...

    def forget(self, learner_id: str) -> None:
        """The learner was deleted: drop its series."""


class NullSink:
    """Ignores everything (offline replay without metrics)."""

    def processed(self, topic: str, outcome: str) -> None:
        pass

    def dead_lettered(self, reason: str) -> None:
        pass

    def decided(self, learner_id: str, latency_s: float) -> None:
        pass

    def feedback_applied(self, learner_id: str, delay_s: float) -> None:
        pass

    def learner_state(
        self,
        learner_id: str,
        family: str,
        algorithm: str,
        gauges: Mapping[str, float | list[float]],
    ) -> None:
        pass

    def pending(self, partition: int, open_decisions: int) -> None:
        pass

    def forget(self, learner_id: str) -> None:
        pass
