"""Prometheus exposition of what the processors report (prefix ``banditflow_``)."""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: F401  (re-export)
from prometheus_client import (
    CollectorRegistry,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import (
    Counter as PromCounter,
)

from banditflow.learners.registry import families
from banditflow.processors.estimators import Estimate, PolicyEstimates
from banditflow.processors.records import Outcome
from banditflow.processors.sink import Sink

# The *_created series double every counter and histogram for no use on our dashboards.
disable_created_metrics()

LEARNER_LABELS = ("learner_id", "family", "algorithm")

# A decision's time inside the worker: milliseconds on an idle broker, up to about a
# hundred under load on the embedded one (tests/benchmarks/bench_latency.py); finer where
# its percentiles fall, so that they read back from the buckets to a few milliseconds.
IN_WORKER_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02,
                     0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1)
# A commit's stages, in order (banditflow_commit_stage_seconds).
COMMIT_STAGES = ("cut", "state", "outputs")

# Gauges every learner exports, with their help text; each family adds its own (its front
# door's ``gauges``). Anything else a learner reports in its summary is exported as
# banditflow_learner_value{name=...}.
LEARNER_GAUGES: dict[str, str] = {
    "decisions": "Decisions made by the current learner version",
    "feedback": "Decisions whose feedback is complete (or timed out)",
    "timeouts": "Decisions settled by the feedback timeout",
    "mean_reward": "Mean realised reward",
}


def learner_gauges() -> dict[str, str]:
    """Every ``banditflow_learner_<name>`` gauge with its help text: the common ones, then
    each family's."""
    gauges = dict(LEARNER_GAUGES)
    for declared in families().values():
        for name, text in declared.gauges.items():
            if gauges.setdefault(name, text) != text:
                raise RuntimeError(f"gauge {name!r} is declared twice, with different help")
    return gauges


class PrometheusSink(Sink):
    """A :class:`banditflow.processors.sink.Sink` backed by a prometheus_client registry."""

    def __init__(self, max_learners: int = 100, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.max_learners = max_learners
        self._exported: set[str] = set()
        r = self.registry
        self.records = PromCounter(
            "banditflow_records",
            "Records handled, by topic and outcome",
            ("topic", "outcome"),
            registry=r,
        )
        self.dead_letters = PromCounter(
            "banditflow_dead_letters", "Records dead-lettered, by reason", ("reason",), registry=r
        )
        self.decision_latency = Histogram(
            "banditflow_decision_latency_seconds",
            "Time from a context's timestamp to its decision's publication (acknowledged)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.decision_in_worker = Histogram(
            "banditflow_decision_in_worker_seconds",
            "Time from the fetch that brought a context to its decision's publication "
            "(acknowledged): the worker's own share of a decision's latency",
            buckets=IN_WORKER_BUCKETS,
            registry=r,
        )
        self.decision_queued = Histogram(
            "banditflow_decision_queued_seconds",
            "Time from the fetch that brought a context to the cut of the commit that carries "
            "its decision (the commit in flight, the rest of the fetch): the part of "
            "banditflow_decision_in_worker_seconds before that commit's "
            "banditflow_commit_seconds",
            buckets=IN_WORKER_BUCKETS,
            registry=r,
        )
        self.feedback_delay = Histogram(
            "banditflow_feedback_delay_seconds",
            "Time from a decision to its applied feedback",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
            registry=r,
        )
        self.pending_decisions = Gauge(
            "banditflow_pending_decisions",
            "Open decisions awaiting feedback, by partition",
            ("partition",),
            registry=r,
        )
        self.learners_not_exported = Gauge(
            "banditflow_learners_not_exported",
            "Learners beyond --max-exported-learners, left out of per-learner series",
            registry=r,
        )
        self.regret = Gauge(
            "banditflow_regret",
            "Cumulative regret; kind=exact from ground truth, else estimate",
            (*LEARNER_LABELS, "kind"),
            registry=r,
        )
        self.arm_gauges = {
            name: Gauge(f"banditflow_{name}", text, (*LEARNER_LABELS, "arm"), registry=r)
            for declared in families().values()
            for name, text in declared.arm_gauges.items()
        }
        self.gauges = {
            name: Gauge(f"banditflow_learner_{name}", text, LEARNER_LABELS, registry=r)
            for name, text in learner_gauges().items()
        }
        self.other = Gauge(
            "banditflow_learner_value",
            "Other learner gauges, by name",
            (*LEARNER_LABELS, "name"),
            registry=r,
        )
        self.ope_estimate = Gauge(
            "banditflow_ope_estimate",
            "Live off-policy estimate of a policy's mean reward on a learner's logged decisions "
            "(policy: a candidate named in its config, or logged), by estimator (ips, snips, "
            "dr) and bound (value, ci_low, ci_high: the 95% interval)",
            ("learner_id", "policy", "estimator", "bound"),
            registry=r,
        )
        self.ope_effective_sample_size = Gauge(
            "banditflow_ope_effective_sample_size",
            "Kish's effective sample size of a policy's live off-policy estimates",
            ("learner_id", "policy"),
            registry=r,
        )
        self.ope_rounds = Gauge(
            "banditflow_ope_rounds",
            "Logged rounds scored by live off-policy evaluation (feedback revealed the logged "
            "action's reward)",
            ("learner_id", "policy"),
            registry=r,
        )
        self.ope_learned_rounds = Gauge(
            "banditflow_ope_learned_rounds",
            "Logged rounds a candidate policy learned from (explore_eval acceptance)",
            ("learner_id", "policy"),
            registry=r,
        )
        self.ope_difference = Gauge(
            "banditflow_ope_difference",
            "Live off-policy estimate of a candidate's mean reward minus the logged policy's, "
            "paired on the same rounds, by estimator (ips, dr) and bound (value, ci_low, "
            "ci_high: the 95% interval)",
            ("learner_id", "policy", "estimator", "bound"),
            registry=r,
        )
        self.ope_skipped_rounds = Gauge(
            "banditflow_ope_skipped_rounds",
            "Logged rounds live off-policy evaluation could not score for a policy (a "
            "candidate that failed to decide; for policy=logged, rounds the whole evaluation "
            "dropped on an unexpected failure)",
            ("learner_id", "policy"),
            registry=r,
        )
        self.ope_clipped_rounds = Gauge(
            "banditflow_ope_clipped_rounds",
            "Logged rounds whose explore_eval acceptance was capped at 1 for a candidate (the "
            "logged propensity was below its explore_eval_bound: such rounds are "
            "under-represented in what it learns)",
            ("learner_id", "policy"),
            registry=r,
        )
        self.recovery_seconds = Gauge(
            "banditflow_recovery_seconds",
            "Time the last recovery of a partition's state took (read, re-publish, claim)",
            ("partition",),
            registry=r,
        )
        self.recovery_bytes = Gauge(
            "banditflow_recovery_bytes",
            "State log bytes read by the last recovery of a partition (from its snapshot)",
            ("partition",),
            registry=r,
        )
        self.state_log_bytes = PromCounter(
            "banditflow_state_log_bytes",
            "Bytes written to the state log (compressed commits and snapshot slices)",
            registry=r,
        )
        self.offset_gaps = PromCounter(
            "banditflow_offset_gaps",
            "Gaps in the offsets of an input partition's records, by outcome: filled (the "
            "broker handed out records past an offset it had not stored yet; they were held "
            "back until it had) or skipped (not in the log: compaction, transaction markers, "
            "retention)",
            ("outcome",), registry=r,
        )
        self.commits = PromCounter(
            "banditflow_commits", "Commits written to the state log, per partition",
            ("partition",), registry=r,
        )
        self.input_fetches = PromCounter(
            "banditflow_input_fetches",
            "Fetch answers of the worker's input consumer, per stream, counted once per "
            "partition in the answer: how often each stream is fetched (feedback and truth "
            "less often with --feedback-fetch-interval-ms)",
            ("stream",), registry=r,
        )
        self.state_keys = Gauge(
            "banditflow_state_keys",
            "Keys in a partition's state (learners twice, decisions kept, holds): what a "
            "recovery reads, about",
            ("partition",),
            registry=r,
        )
        commit_buckets = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                          2.5)
        self.commit_seconds = Histogram(
            "banditflow_commit_seconds",
            "Time from a commit's cut to its decisions being acknowledged by the broker",
            buckets=commit_buckets,
            registry=r,
        )
        self.commit_stage_seconds = Histogram(
            "banditflow_commit_stage_seconds",
            "A commit's time by stage, adding up to banditflow_commit_seconds: cut (its state "
            "made), state (its state log records acknowledged), outputs (its decisions and "
            "dead letters acknowledged; when a commit follows at once, they go out with its "
            "state, after its cut)",
            ("stage",),
            buckets=commit_buckets,
            registry=r,
        )
        self._not_exported: set[str] = set()
        self._ope_policies: dict[str, set[str]] = {}
        self._records: Counter[tuple[str, str]] = Counter()
        self._dead_letters: Counter[str] = Counter()
        self._fetches: Counter[str] = Counter()
        self._latencies: list[float] = []
        self._in_worker: list[float] = []
        self._queued: list[float] = []
        self._delays: list[float] = []

    # Per-event observations are counted in plain Python and handed to prometheus_client in
    # one pass (flush), at each commit and each scrape: its locks cost more than the counting.
    def processed(self, topic: str, outcome: Outcome) -> None:
        self._records[topic, outcome] += 1

    def dead_lettered(self, reason: str) -> None:
        """One dead letter published with ``reason`` (the worker's own observation: a
        fenced commit's dead letters are never published, nor counted)."""
        self._dead_letters[reason] += 1

    def fetched(self, stream: str) -> None:
        """A fetch answer brought (or said nothing is new in) a partition of ``stream``."""
        self._fetches[stream] += 1

    def published(
        self, latencies_s: list[float], in_worker_s: list[float], queued_s: list[float]
    ) -> None:
        """Decisions published (acknowledged by the broker), each this long after its
        context's timestamp, and after the fetch that brought the context, of which
        ``queued_s`` before its commit was cut (the worker's own observation, not the
        processors')."""
        self._latencies.extend(latencies_s)
        self._in_worker.extend(in_worker_s)
        self._queued.extend(queued_s)

    def committed(self, stages_s: tuple[float, float, float]) -> None:
        """Commits published together, in ``stages_s`` (``COMMIT_STAGES``)."""
        self.commit_seconds.observe(sum(stages_s))
        for stage, seconds in zip(COMMIT_STAGES, stages_s, strict=True):
            self.commit_stage_seconds.labels(stage).observe(seconds)

    def feedback_applied(self, learner_id: str, delay_s: float) -> None:
        self._delays.append(delay_s)

    def flush(self) -> None:
        """Apply the observations counted since the last flush to the exported metrics."""
        for (topic, outcome), count in self._records.items():
            self.records.labels(topic, outcome).inc(count)
        for reason, count in self._dead_letters.items():
            self.dead_letters.labels(reason).inc(count)
        for stream, count in self._fetches.items():
            self.input_fetches.labels(stream).inc(count)
        for value in self._latencies:
            self.decision_latency.observe(value)
        for value in self._in_worker:
            self.decision_in_worker.observe(value)
        for value in self._queued:
            self.decision_queued.observe(value)
        for value in self._delays:
            self.feedback_delay.observe(value)
        self._records.clear()
        self._dead_letters.clear()
        self._fetches.clear()
        self._latencies.clear()
        self._in_worker.clear()
        self._queued.clear()
        self._delays.clear()

    def pending(self, partition: int, open_decisions: int) -> None:
        self.pending_decisions.labels(str(partition)).set(open_decisions)

    def forget_partition(self, partition: int) -> None:
        """Drop the series that describe ``partition`` as it is now (it left this worker;
        its new owner exports them). Its last recovery's figures stay: they describe that
        recovery."""
        for gauge in (self.pending_decisions, self.state_keys):
            with contextlib.suppress(KeyError):
                gauge.remove(str(partition))

    def learner_state(
        self,
        learner_id: str,
        family: str,
        algorithm: str,
        gauges: Mapping[str, float | list[float]],
    ) -> None:
        if learner_id not in self._exported:
            if len(self._exported) >= self.max_learners:
                self._not_exported.add(learner_id)
                self.learners_not_exported.set(len(self._not_exported))
                return
            self._exported.add(learner_id)
        labels = (learner_id, family, algorithm)
        for name, value in gauges.items():
            if name == "regret_estimate":
                self.regret.labels(*labels, "estimate").set(float(value))  # type: ignore[arg-type]
            elif name == "regret_exact":
                self.regret.labels(*labels, "exact").set(float(value))  # type: ignore[arg-type]
            elif name in self.arm_gauges and isinstance(value, list):
                for arm, arm_value in enumerate(value):
                    self.arm_gauges[name].labels(*labels, str(arm)).set(arm_value)
            elif isinstance(value, list):
                continue
            elif name in self.gauges:
                self.gauges[name].labels(*labels).set(value)
            elif math.isfinite(float(value)) or name.endswith("threshold"):
                self.other.labels(*labels, name).set(value)

    def _ope_metrics(self) -> tuple[Gauge, ...]:
        return (self.ope_estimate, self.ope_effective_sample_size, self.ope_rounds,
                self.ope_learned_rounds, self.ope_skipped_rounds, self.ope_clipped_rounds,
                self.ope_difference)

    def ope_estimates(self, learner_id: str, estimates: Sequence[PolicyEstimates]) -> None:
        if not estimates and learner_id not in self._ope_policies:
            return  # (a learner without candidates, the usual case: nothing to do)
        if learner_id not in self._exported:  # (learner_state, called first, admits it)
            return
        policies = {e.policy for e in estimates}
        gone = self._ope_policies.get(learner_id, set()) - policies
        if gone:  # candidates removed from the config: their series go with them
            self._remove(self._ope_metrics(),
                         lambda labels: labels[0] == learner_id and labels[1] in gone)
        if policies:
            self._ope_policies[learner_id] = policies
        else:
            self._ope_policies.pop(learner_id, None)
        for policy in estimates:
            name = policy.policy
            for estimator in ("ips", "snips", "dr"):
                self._set_estimate(self.ope_estimate, (learner_id, name, estimator),
                                   getattr(policy, estimator))
            for estimator, difference in (("ips", policy.ips_difference),
                                          ("dr", policy.dr_difference)):
                if difference is not None:
                    self._set_estimate(self.ope_difference, (learner_id, name, estimator),
                                       difference)
            self.ope_effective_sample_size.labels(learner_id, name).set(policy.ess)
            self.ope_rounds.labels(learner_id, name).set(policy.rounds)
            self.ope_skipped_rounds.labels(learner_id, name).set(policy.skipped)
            if policy.learned_from is not None:
                self.ope_learned_rounds.labels(learner_id, name).set(policy.learned_from)
                self.ope_clipped_rounds.labels(learner_id, name).set(policy.clipped)

    @staticmethod
    def _set_estimate(gauge: Gauge, labels: tuple[str, ...], estimate: Estimate) -> None:
        for bound in ("value", "ci_low", "ci_high"):
            number = getattr(estimate, bound)
            if math.isfinite(number):
                gauge.labels(*labels, bound).set(number)
            elif (*labels, bound) in gauge._metrics:
                # undefined now (too few rounds for an interval, SNIPS without a matching
                # round): no stale number stays exported
                gauge.remove(*labels, bound)

    @staticmethod
    def _remove(metrics: Sequence[Gauge], selected: Callable[[tuple[str, ...]], bool]) -> None:
        for metric in metrics:
            for labels in list(metric._metrics):
                if selected(labels):
                    metric.remove(*labels)

    def forget(self, *learner_ids: str) -> None:
        # One pass over the series for all of them: a partition's learners leave together.
        gone = set(learner_ids)
        self._exported -= gone
        for learner_id in gone:
            self._ope_policies.pop(learner_id, None)
        metrics = (self.regret, self.other, *self.arm_gauges.values(), *self.gauges.values(),
                   *self._ope_metrics())
        self._remove(metrics, lambda labels: labels[0] in gone)

    def exposition(self, flush: bool = True) -> bytes:
        """The text format; ``flush=False`` from another thread (the worker flushes at every
        commit, on its own thread)."""
        if flush:
            self.flush()
        return generate_latest(self.registry)
