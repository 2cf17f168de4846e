"""A broker that comes back empty (the embedded broker keeps everything in memory): the
worker says so and exits with status 3, or, told ``--on-state-loss fresh``, starts over. A
broker that only stops answering for a while: the worker waits and resumes.

It used to stay up answering 503 forever, logging a misleading "not a banditflow state log"
and over a hundred aiokafka errors a second while the broker was away.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from banditflow.streams.broker import EmbeddedBroker, free_port
from banditflow.streams.demo import wait_until_ready
from banditflow.streams.scrape import fetch
from banditflow.streams.topics import Topics, ensure_topics
from banditflow.streams.worker import EXIT_STATE_LOST

pytestmark = [pytest.mark.integration, pytest.mark.embedded_broker]

LID = "reset"


def start(bootstrap: str, prefix: str, partitions: int, web_port: int, log: Path,
          *extra: str) -> subprocess.Popen[bytes]:
    ensure_topics(bootstrap, Topics(prefix), partitions, prefix)
    command = [
        sys.executable, "-m", "banditflow.streams.cli", "worker", "--bootstrap", bootstrap,
        "--prefix", prefix, "--app-id", prefix, "--partitions", str(partitions),
        "--web-port", str(web_port), "--loglevel", "info", *extra,
    ]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    wait_until_ready(process, web_port, 60)
    return process


def decide(bootstrap: str, prefix: str, first: int, count: int) -> set[str]:
    """Configure the learner, send ``count`` contexts, return the event ids decided."""
    topics = Topics(prefix)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topics.learners, key=LID.encode(), value=json.dumps(
        {"learner_id": LID, "family": "conformal", "algorithm": "sps",
         "params": {"alpha": 0.8, "horizon": 1000}}).encode())
    wanted = {f"e{i}" for i in range(first, first + count)}
    for event_id in sorted(wanted):
        producer.send(topics.contexts, key=LID.encode(), value=json.dumps(
            {"learner_id": LID, "event_id": event_id, "labels": ["a", "b"],
             "scores": [1.0, 0.0]}).encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topics.decisions, bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while not wanted <= seen and time.monotonic() < deadline:
        seen |= {json.loads(m.value)["event_id"] for m in consumer}
    consumer.close()
    return seen & wanted


def test_a_broker_that_lost_the_state_stops_the_worker_with_status_3(tmp_path) -> None:
    port, web = free_port(), free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker.log").start()
    worker = start(broker.bootstrap, "lost", 2, web, tmp_path / "worker.log")
    try:
        assert len(decide(broker.bootstrap, "lost", 0, 20)) == 20
        broker.stop()
        time.sleep(8)  # an outage: the worker waits, and does not flood its log
        outage_lines = (tmp_path / "worker.log").read_text().count("\n")
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker.log").start()
        assert worker.wait(timeout=60) == EXIT_STATE_LOST
        log = (tmp_path / "worker.log").read_text()
        assert "records this worker had written are gone" in log or "is gone" in log
        assert "--on-state-loss=fresh" in log
        assert "Traceback" not in log
        assert outage_lines < 200, f"{outage_lines} log lines for an 8 s outage"
    finally:
        if worker.poll() is None:
            worker.kill()
        broker.stop()


def test_told_to_start_fresh_the_worker_decides_again_on_the_emptied_broker(tmp_path) -> None:
    """With as many partitions as the broker creates topics with when clients ask for them
    (Tansu: 4, the worker's default), the worker starts the partitions afresh: once the
    learner is configured again, new contexts are decided."""
    port, web = free_port(), free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker.log").start()
    worker = start(broker.bootstrap, "fresh", 4, web, tmp_path / "worker.log",
                   "--on-state-loss", "fresh")
    try:
        assert len(decide(broker.bootstrap, "fresh", 0, 20)) == 20
        broker.stop()
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker.log").start()
        assert len(decide(broker.bootstrap, "fresh", 100, 20)) == 20
        assert worker.poll() is None
        log = (tmp_path / "worker.log").read_text()
        assert "starts afresh (--on-state-loss=fresh)" in log or "creating the missing" in log
        assert "Traceback" not in log
    finally:
        if worker.poll() is None:
            worker.kill()
        broker.stop()


def test_a_broker_outage_stalls_the_worker_which_then_resumes(tmp_path) -> None:
    """The broker stops answering for 8 s (SIGSTOP, its memory intact): /ready says so, the
    worker stays up, and once the broker answers again it decides where it left off."""
    port, web = free_port(), free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "broker.log").start()
    worker = start(broker.bootstrap, "pause", 2, web, tmp_path / "worker.log")
    assert broker.process is not None
    try:
        assert len(decide(broker.bootstrap, "pause", 0, 20)) == 20
        os.kill(broker.process.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    fetch(f"http://127.0.0.1:{web}/ready", timeout_s=2.0)
                except urllib.error.HTTPError as exc:
                    assert exc.code == 503
                    break
                assert time.monotonic() < deadline, "/ready still 200 with the broker stopped"
                time.sleep(0.5)
            time.sleep(3)
            assert worker.poll() is None
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        assert len(decide(broker.bootstrap, "pause", 100, 20)) == 20
        wait_until_ready(worker, web, 30)
        assert "Traceback" not in (tmp_path / "worker.log").read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
        broker.stop()
