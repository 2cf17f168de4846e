"""The gateway's request metrics count every answer in its own series, though each series is
looked up once (GatewayMetrics keeps the labelled children)."""

from __future__ import annotations

from banditflow.streams.gateway import GatewayMetrics

DECISIONS = "/v1/learners/{learner_id}/decisions"


def test_each_answer_counts_once_in_its_series() -> None:
    metrics = GatewayMetrics()
    for status, seconds in ((200, 0.002), (200, 0.03), (422, 0.001)):
        metrics.observe(DECISIONS, "POST", status, seconds)
    metrics.observe("other", "GET", 200, 0.5)
    for invented in ("BREW", "X1", "X2"):  # (any token is a method to some HTTP parsers)
        metrics.observe("other", invented, 405, 0.001)

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    requests = "banditflow_gateway_requests_total"
    assert value(requests, route=DECISIONS, method="POST", status="200") == 2
    assert value(requests, route=DECISIONS, method="POST", status="422") == 1
    assert value(requests, route="other", method="GET", status="200") == 1
    assert value(requests, route=DECISIONS, method="GET", status="200") is None
    assert value(requests, route="other", method="other", status="405") == 3
    seconds = "banditflow_gateway_request_seconds"
    assert value(f"{seconds}_count", route=DECISIONS) == 3
    assert abs(value(f"{seconds}_sum", route=DECISIONS) - 0.033) < 1e-12
    assert value(f"{seconds}_bucket", route=DECISIONS, le="0.0025") == 2
