"""The commit protocol without a broker: partition tasks, the committer and recovery on a
simulated log, crashed at every step of every commit.

:class:`SimLog` stands in for the broker behind the committer's producer interface: each
``send`` (the record lands) and each awaited ack is one step, and a run "crashes" at step k
(it raises there and the worker's memory is gone). The partition is then recovered from the
simulated state log as the worker does (streams/recovery.py) and the rest of the input is
applied. Whatever the step, the outcome is the run without a crash: the same state, every
decision and dead letter published, none applied twice; only the outputs of the last two
commits may be published twice, identical (the README's Processing semantics).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from banditflow.streams.committer import Committer
from banditflow.streams.metrics import PrometheusSink
from banditflow.streams.partition_task import PartitionTask, PendingCommit
from banditflow.streams.recovery import restore
from banditflow.streams.settings import WorkerSettings
from banditflow.streams.statelog_reader import LogReader
from banditflow.streams.topics import Topics

TOPICS = Topics("sim")
STATE = "sim-app.state"
LID = "pets"
WALL = 1_000.0
SETTINGS = WorkerSettings(partitions=1)


class Crash(Exception):
    """The worker process dies here."""


class Refused(Exception):
    """The broker can never take this record (too large)."""


@dataclass(frozen=True)
class Ack:
    offset: int


class PendingAck:
    """An acknowledgement not yet awaited; awaiting it is a step (it may crash)."""

    def __init__(self, log: SimLog, topic: str, partition: int, refused: bool = False) -> None:
        self.log, self.topic, self.partition, self.refused = log, topic, partition, refused
        self.offset = -1  # (where the record landed)

    def __await__(self) -> Generator[Any, None, Ack]:
        try:
            self.log.step()
        except Crash:
            raise  # (before its request was sent: it never lands)
        except Exception:
            self.log.land_sent()  # (a broker error: the request landed, its answer lost)
            raise
        self.log.land_sent()
        if self.refused:
            raise Refused(f"record for {self.topic} too large")
        return Ack(self.offset)
        yield  # (a generator: awaitable without an event loop round trip)


class SimLog:
    """Topic partitions as lists; survives a crash of the worker that writes to it.

    A record lands when it is sent, or with ``per_request`` when an acknowledgement is first
    awaited after it, with every record sent before it (one produce request), state log
    records first and a step each: a broker appends a request's partitions in any order,
    and a crash between them leaves some landed."""

    def __init__(self, per_request: bool = False) -> None:
        self.records: dict[tuple[str, int], list[tuple[bytes | None, bytes]]] = {}
        self.steps = 0
        self.fail_at: int | None = None
        self.failure: type[Exception] = Crash
        self.refused_topic = ""  # records larger than 200 bytes are refused on this topic
        self.per_request = per_request
        self.request: list[tuple[PendingAck, bytes | None, bytes]] = []
        self.requests: list[list[str]] = []  # the topics of each request that landed

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.fail_at:
            raise self.failure(f"step {self.steps}")

    async def send(
        self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None
    ) -> Awaitable[Ack]:
        self.step()
        if topic == self.refused_topic and len(value) > 200:
            return PendingAck(self, topic, partition or 0, refused=True)
        ack = PendingAck(self, topic, partition or 0)
        self.request.append((ack, key, value))
        if not self.per_request:
            self.land_sent()
        return ack

    def land_sent(self) -> None:
        request, self.request = self.request, []
        request.sort(key=lambda sent: sent[0].topic != STATE)
        if request:
            self.requests.append([ack.topic for ack, _, _ in request])
        for i, (ack, key, value) in enumerate(request):
            if i:
                self.step()
            log = self.records.setdefault((ack.topic, ack.partition), [])
            log.append((key, value))
            ack.offset = len(log) - 1

    async def keys_at(self, partition: int, offsets: list[int]) -> list[bytes] | None:
        log = self.records.get((STATE, partition), [])
        return [log[offset][0] or b"" for offset in offsets]

    def values(self, topic: str) -> list[str]:
        return [value.decode() for _, value in self.records.get((topic, 0), [])]


@dataclass(frozen=True)
class Record:
    """An input record, as a consumer hands it to a task."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None


def body(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def inputs() -> list[tuple[str, Record]]:
    """The partition's input in the order a worker applies it: a config, then contexts and
    their feedback interleaved, and records the worker dead-letters."""
    streams: dict[str, list[bytes]] = {"learners": [body({
        "learner_id": LID, "family": "conformal", "algorithm": "sps",
        "params": {"target_coverage": 0.8, "horizon": 200}, "feedback_timeout_s": 300.0,
    })], "contexts": [], "feedback": []}
    order = ["learners"]
    for i in range(12):
        streams["contexts"].append(body({"learner_id": LID, "event_id": f"e{i}",
                                         "labels": ["a", "b", "c"], "scores": [0.9, 0.5, 0.1]}))
        order.append("contexts")
        if i % 5 == 4:
            streams["contexts"].append(b"{not json")  # dead-lettered: invalid
            order.append("contexts")
        if i >= 2:
            streams["feedback"].append(body({"learner_id": LID, "event_id": f"e{i - 2}",
                                             "label": "a" if i % 3 else "b"}))
            order.append("feedback")
    taken = dict.fromkeys(streams, 0)
    records = []
    for stream in order:
        offset = taken[stream]
        taken[stream] += 1
        records.append((stream, Record(f"sim.{stream}", 0, offset, int((10 + len(records)) * 1000),
                                       LID.encode(), streams[stream][offset])))
    return records


class GroupOffsets:
    """What the group is told, in order."""

    def __init__(self) -> None:
        self.told: list[dict[int, dict[str, int]]] = []

    def commit(self, marks: dict[int, dict[str, int]]) -> None:
        self.told.append(marks)


CAUGHT_UP: dict[str, float | None] = dict.fromkeys(["learners", "contexts", "feedback", "truth"])


class Worker:
    """The worker's commit path around one partition task, on a simulated log."""

    def __init__(self, log: SimLog) -> None:
        self.log = log
        self.task: PartitionTask | None = None
        self.offsets = GroupOffsets()
        self.committer = Committer(log, lambda exc: isinstance(exc, Refused), TOPICS, STATE,
                                   self.offsets, log.keys_at, self.fenced)

    def fenced(self, task: PartitionTask) -> None:
        self.committer.drop({task.number})
        self.task = None

    async def recover(self) -> None:
        reader = LogReader()
        for offset, (key, value) in enumerate(self.log.records.get((STATE, 0), [])):
            reader.feed(offset, key or b"", value)
        task = PartitionTask(0, reader, SETTINGS, PrometheusSink(), lambda: WALL)
        assert await restore(reader, task, self.committer, lambda: True)
        task.active = True
        self.task = task

    def cut(self) -> list[PendingCommit]:
        assert self.task is not None
        commit = self.task.cut(CAUGHT_UP)
        return [] if commit is None else [commit]

    async def run(self, records: list[tuple[str, Record]], every: int = 4) -> None:
        """Apply ``records`` (those below the marks are passed over, as after a seek),
        committing every ``every``; recover first when there is no task."""
        if self.task is None:
            await self.recover()
        for i, (stream, record) in enumerate(records):
            assert self.task is not None
            self.task.handle(stream, record, WALL)
            if i % every == every - 1:
                await self.commit_now()
        await self.commit_now()
        await self.committer.close_outboxes([self.task] if self.task else [])

    async def commit_now(self) -> None:
        await self.committer.commit(self.cut)
        if self.task is None:  # fenced: read back, the inputs resume at its marks
            await self.recover()


def final_state(log: SimLog) -> dict[str, Any]:
    """The partition's state as a recovery reads it from the state log."""
    reader = LogReader()
    for offset, (key, value) in enumerate(log.records.get((STATE, 0), [])):
        reader.feed(offset, key or b"", value)
    return {key: orjson.loads(value) for key, value in reader.values.items()}


def published(log: SimLog, topic: str) -> Counter[str]:
    return Counter(log.values(topic))


def run_to_end(log: SimLog, first: Callable[[Worker], Awaitable[None]]) -> Worker:
    """Run ``first`` on a worker; on a crash, start another on the same log and run all."""
    records = inputs()
    worker = Worker(log)

    async def go() -> Worker:
        nonlocal worker
        try:
            await first(worker)
        except Crash:
            log.fail_at = None
            log.request = []  # (what the dead worker had not sent yet is gone with it)
            worker = Worker(log)
            await worker.run(records)
        return worker

    return asyncio.run(go())


@pytest.fixture(scope="module", params=[False, True], ids=["landing-at-send", "per-request"])
def reference(request: pytest.FixtureRequest) -> SimLog:
    log = SimLog(per_request=request.param)
    run_to_end(log, lambda worker: worker.run(inputs()))
    return log


def outputs_of_two_commits(log: SimLog, twice: set[str], topic: str) -> bool:
    """Whether the records in ``twice`` are all outputs of two consecutive commits, the
    second saying that the first's may not be out (pipelined commits), or of one."""
    if not twice:
        return True
    reader = LogReader()
    before: set[str] = set()
    for offset, (key, value) in enumerate(log.records.get((STATE, 0), [])):
        commit = reader.feed(offset, key or b"", value)
        if commit is None:
            continue
        outputs = set(commit.outbox if topic == TOPICS.decisions else commit.dead_letters)
        if twice <= outputs | (before if commit.republish_previous else set()):
            return True
        before = outputs
    return False


def test_the_reference_run_publishes_every_output_once(reference: SimLog) -> None:
    decisions = [json.loads(v) for v in reference.values(TOPICS.decisions)]
    assert sorted(d["event_id"] for d in decisions) == sorted(f"e{i}" for i in range(12))
    assert [d["learner_updates"] for d in decisions] == sorted(
        d["learner_updates"] for d in decisions
    )
    assert decisions[-1]["learner_updates"] > 0  # feedback was applied between contexts
    dead = [json.loads(v) for v in reference.values(TOPICS.deadletter)]
    assert [d["reason"] for d in dead] == ["malformed_json", "malformed_json"]
    state = final_state(reference)
    assert f"l/{LID}" in state


def test_a_crash_at_any_step_of_any_commit_loses_nothing_and_doubles_nothing(
    reference: SimLog,
) -> None:
    total = reference.steps
    assert total > 40  # (claims, commits' state records, outputs and their acks)
    expected_state = final_state(reference)
    for topic in (TOPICS.decisions, TOPICS.deadletter):
        assert max(published(reference, topic).values()) == 1
    for k in range(1, total + 1):
        log = SimLog(reference.per_request)
        log.fail_at = k
        run_to_end(log, lambda worker: worker.run(inputs()))
        assert final_state(log) == expected_state, f"crash at step {k}"
        for topic in (TOPICS.decisions, TOPICS.deadletter):
            got, want = published(log, topic), published(reference, topic)
            assert set(got) == set(want), f"crash at step {k}: {topic}"
            twice = {value for value, n in got.items() if n > 1}
            assert max(got.values()) <= 2, f"crash at step {k}: {topic}"
            assert outputs_of_two_commits(log, twice, topic), f"crash at step {k}: {topic}"


def test_a_commit_failing_halfway_is_taken_up_again_with_the_same_records(
    reference: SimLog,
) -> None:
    """A broker error (not a crash) at step k: the same worker retries the unfinished commit
    before cutting anything new; where its retried state record cannot land where expected
    (the first one did), the partition is read back, as after a fencing."""
    expected_state = final_state(reference)
    for k in range(1, reference.steps + 1):
        log = SimLog(reference.per_request)
        log.fail_at, log.failure = k, ConnectionError
        worker = Worker(log)

        async def go(worker: Worker = worker, log: SimLog = log) -> None:
            records = inputs()
            try:
                await worker.run(records)
            except ConnectionError:
                log.fail_at = None
                if worker.task is None:  # (the very first claim failed)
                    await worker.recover()
                assert worker.committer.unfinished or worker.task is not None
                await worker.commit_now()  # the unfinished commit, first
                await worker.run(records)

        asyncio.run(go())
        assert final_state(log) == expected_state, f"failure at step {k}"
        for topic in (TOPICS.decisions, TOPICS.deadletter):
            got, want = published(log, topic), published(reference, topic)
            assert set(got) == set(want), f"failure at step {k}: {topic}"
            assert max(got.values()) <= 2, f"failure at step {k}: {topic}"


def test_outputs_go_out_only_after_their_state_record_and_offsets_after_them() -> None:
    log = SimLog()
    order: list[str] = []
    send = log.send

    async def watched(topic: str, value: bytes, key: bytes | None = None,
                      partition: int | None = None) -> Awaitable[Ack]:
        order.append(topic)
        return await send(topic, value, key, partition)

    log.send = watched  # type: ignore[method-assign]
    worker = Worker(log)

    async def go() -> None:
        await worker.recover()
        order.clear()
        assert worker.task is not None
        for stream, record in inputs()[:3]:
            worker.task.handle(stream, record, WALL)
        await worker.committer.commit(worker.cut)
        assert worker.offsets.told == []  # (the outputs are sent, not yet acknowledged)
        await worker.committer.settle()

    asyncio.run(go())
    assert order[0] == STATE and set(order[1:]) == {TOPICS.decisions}
    assert worker.offsets.told == [{0: {"learners": 1, "contexts": 2}}]


def test_a_commits_state_goes_out_in_one_request_with_the_outputs_before_it() -> None:
    """Pipelined commits: back-to-back commits cost one round trip each, not two."""
    log = SimLog(per_request=True)
    worker = Worker(log)
    asyncio.run(worker.run(inputs(), every=2))
    commits = [topics for topics in log.requests if STATE in topics]
    with_outputs = [topics for topics in commits if TOPICS.decisions in topics]
    assert len(commits) > 10 and len(with_outputs) >= len(commits) - 3, log.requests


def test_a_record_the_broker_refuses_is_replaced_by_a_dead_letter_saying_so() -> None:
    log = SimLog()
    worker = Worker(log)

    async def go() -> None:
        await worker.recover()
        log.refused_topic = TOPICS.decisions
        assert worker.task is not None
        for stream, record in inputs()[:2]:
            worker.task.handle(stream, record, WALL)
        await worker.committer.commit(worker.cut)
        await worker.committer.settle()

    asyncio.run(go())
    assert log.values(TOPICS.decisions) == []
    (stub,) = [json.loads(v) for v in log.values(TOPICS.deadletter)]
    assert stub["reason"] == "unpublishable" and stub["source_topic"] == TOPICS.decisions
    # (the refused decision is small: kept whole, so no raw_size, which says "cut")
    assert json.loads(stub["raw"])["event_id"] and stub["raw_size"] is None


def test_a_fenced_commit_publishes_nothing() -> None:
    """Another owner wrote to the partition: this worker's commit lands elsewhere than its
    log expects, is not published, and the partition is read back."""
    log = SimLog()
    worker = Worker(log)

    async def go() -> None:
        await worker.recover()
        other = Worker(log)
        await other.recover()  # a new owner's claim, after ours
        assert worker.task is not None
        for stream, record in inputs()[:2]:
            worker.task.handle(stream, record, WALL)
        fenced_task = worker.task
        written = await worker.committer.commit(worker.cut)
        assert written == [] and worker.task is not fenced_task

    asyncio.run(go())
    assert log.values(TOPICS.decisions) == []


def test_the_task_and_the_committer_import_no_kafka_client() -> None:
    code = ("import sys, banditflow.streams.committer, banditflow.streams.partition_task; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'aiokafka'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
