"""What `banditflow worker` says at its default log level (issue 29): one line when it is
ready (version, bootstrap, partitions, metrics URL, event loop), one per rebalance, and
nothing from the Kafka client libraries; `--loglevel info` shows the worker's own lines,
still without the clients' chatter unless `--client-loglevel` asks for it."""

from __future__ import annotations

import re

import pytest
from conftest import run_prefix

from banditflow import __version__

pytestmark = pytest.mark.integration


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_ready_and_rebalance_lines_at_the_default_level(broker, start_worker, wait_until) -> None:
    prefix = run_prefix("quiet")
    first = start_worker(prefix, partitions=4, extra_args=["--loglevel", "warning"])
    wait_until(lambda: "ready" in first.log(), timeout_s=30)
    # (the connection as the worker describes it: "127.0.0.1:9092 (PLAINTEXT)" on the
    # embedded broker; on an external one its security protocol and identity, as configured)
    ready = (rf"banditflow {re.escape(__version__)} worker ready: bootstrap "
             rf"{re.escape(broker.connection.describe())}, group {re.escape(prefix)}, "
             rf"topics {re.escape(prefix)}\.\*, partitions \[0, 1, 2, 3\], "
             rf"metrics http://127\.0\.0\.1:{first.web_port}/metrics, event loop uvloop$")
    assert [line for line in lines(first.log()) if re.search(ready, line)], first.log()

    second = start_worker(prefix, partitions=4,
                          extra_args=["--loglevel", "warning", "--event-loop", "asyncio"])
    wait_until(lambda: "rebalance: partitions" in first.log(), timeout_s=60)
    rebalance = [line for line in lines(first.log()) if "rebalance: partitions" in line]
    assert re.search(r"rebalance: partitions \[\d(, \d)*\] \(took \[\], gave up \[\d(, \d)*\]\)$",
                     rebalance[0]), rebalance
    wait_until(lambda: "worker ready" in second.log(), timeout_s=60)
    assert re.search(r"worker ready: .*, event loop asyncio$", second.log(), re.M), second.log()
    for worker in (first, second):
        # Besides those lines, only warnings (a client's "Heartbeat failed ... rebalancing").
        others = [line for line in lines(worker.log()) if "banditflow.worker.lifecycle" not in line]
        assert [line for line in others if not re.search(r" (WARNING|ERROR) ", line)] == []


def test_info_keeps_the_client_libraries_at_warning(start_worker) -> None:
    worker = start_worker(run_prefix("chatty"), partitions=2)  # the fixture's --loglevel info
    text = worker.log()
    assert "INFO banditflow.worker" in text
    assert not [line for line in lines(text) if re.search(r" (DEBUG|INFO) (aiokafka|kafka)", line)]
