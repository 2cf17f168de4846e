"""End to end through the embedded broker: decisions/s and latency percentiles.

Broker + one worker process + the simulated application (contexts, decisions, delayed
feedback and truth), as `banditflow demo` runs them. Prints a table; no assertions on time.
"""

from __future__ import annotations

import time

import numpy as np

from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.demo import start_worker, stop, wait_until_ready
from banditflow.streams.simulate import SimulationSettings, run_simulation


def test_pipeline_throughput_and_latency(tmp_path) -> None:
    events, window = 4000, 200
    with EmbeddedBroker(port=free_port(), log_path=tmp_path / "broker.log") as broker:
        web_port = free_port()
        worker = start_worker(broker.bootstrap, web_port, 4, "bench", tmp_path / "worker.log")
        try:
            wait_until_ready(worker, web_port, timeout_s=90)
            started = time.monotonic()
            report = run_simulation(
                SimulationSettings(
                    kafka=broker.connection,
                    prefix="bench",
                    events=events,
                    window=window,
                    delay_mean=0.05,
                    timeout=600,
                )
            )
            elapsed = time.monotonic() - started
        finally:
            stop(worker)
    latency = np.percentile(report.latencies, [50, 95, 99]) * 1000
    trip = np.percentile(report.round_trips, [50, 95, 99]) * 1000
    print(
        f"\npipeline: {report.decided} decisions in {elapsed:.1f}s = "
        f"{report.decided / elapsed:.0f} decisions/s (window {window} contexts in flight, "
        f"each with feedback + truth)"
    )
    print(f"  worker latency ms   p50 {latency[0]:.1f}  p95 {latency[1]:.1f}  p99 {latency[2]:.1f}")
    print(f"  round trip ms       p50 {trip[0]:.1f}  p95 {trip[1]:.1f}  p99 {trip[2]:.1f}")
    assert report.decided == events
