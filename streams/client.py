"""The application's front door: ask for a decision, report what happened, manage learners.

:class:`AsyncClient` (asyncio) and :class:`Client` (blocking, the same client on a thread of
its own) speak banditflow's topics so that an application does not have to:

- :meth:`AsyncClient.decide` validates the context with the models the worker applies,
  produces it to the partition the worker reads it from (the murmur2 partition of its
  learner id), and returns the decision of *that* event, read from the same partition of the
  decisions topic. One consumer serves every concurrent call; it reads only the partitions
  of the learners the client asked about. A context the worker dead-letters raises
  :class:`Rejected` with the worker's reason as soon as the dead letter is published (matched
  by the context's learner and event id, or, for a record the worker could not read, by its
  partition and offset); no answer in time raises :class:`DecisionTimeout`.
- An unknown learner is refused at once (``Rejected("unknown_learner")``), without producing
  anything: the client reads the compacted learners topic (for :attr:`AsyncClient.learners`
  anyway) and, before refusing, reads it up to its end, so a learner created a moment ago
  elsewhere is found. The worker itself would hold such a context ten seconds waiting for a
  config before dead-lettering it.
- :meth:`AsyncClient.feedback` and :meth:`AsyncClient.truth` validate locally (schema, the
  family's fields) and return once the broker acknowledged the record.
- :attr:`AsyncClient.learners` creates, updates, deletes, gets and lists learner configs;
  a config is checked exactly as the worker checks it (the processor builds the learner and
  its candidates) before it is produced.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from banditflow.processors import Processor, Source
from banditflow.schemas import (
    ContextEnvelope,
    FeedbackEnvelope,
    LearnerConfig,
    Limits,
    TruthEnvelope,
    parse_event,
    parse_family_event,
)
from banditflow.schemas import Rejected as SchemaRejected
from banditflow.streams.connection import KafkaConnection, as_connection
from banditflow.streams.topics import Topics, partition_for

T = TypeVar("T")

# Dead letters of records the worker could not read carry no event id; they are matched by
# the context's offset, which the client learns only once the broker acknowledged it. Those
# that arrive before (a commit right after the produce) wait here, the latest ones only.
EARLY_DEAD_LETTERS = 10_000
# How long the consumer may go without a fetch answered before the client says it has lost
# the broker (not_ready; the gateway's /ready).
READY_SILENCE_S = 5.0


class Rejected(ValueError):
    """A record banditflow refuses: ``reason`` is the worker's dead-letter reason
    (``invalid_schema``, ``unknown_learner``, ``learner_rejected``, ...), ``detail`` says why."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class DecisionTimeout(TimeoutError):
    """No decision (and no dead letter) for the context within the timeout."""


@dataclass(frozen=True)
class Decision:
    """The decision of one context; ``record`` is the JSON published on the decisions topic."""

    learner_id: str
    event_id: str
    family: str
    algorithm: str
    learner_version: int
    output: dict[str, Any]
    redelivered: bool
    record: dict[str, Any]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Decision:
        return cls(record["learner_id"], record["event_id"], record["family"],
                   record["algorithm"], record["learner_version"], record["output"],
                   bool(record.get("redelivered", False)), record)


def _encode(record: Mapping[str, Any]) -> bytes:
    # orjson (a twentieth of json's time) unless its text could differ from json's: orjson
    # writes NaN and infinities as null, which the schema would refuse as a wrong type or
    # take for an absent field, so a text with a null in it is written again by json, whose
    # NaN is refused as what it is (non_finite); what orjson cannot write (a float subclass,
    # an int beyond 64 bits), json tries too.
    try:
        raw = orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)
        if b"null" not in raw:
            return raw
    except TypeError:
        pass
    try:
        return json.dumps(record, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise Rejected("invalid_schema", f"not JSON-serialisable: {exc}") from None


def _parse(raw: bytes, model: type[T], limits: Limits) -> T:
    try:
        return parse_event(raw, model, limits)  # type: ignore[type-var]
    except SchemaRejected as exc:
        raise Rejected(exc.reason, exc.detail) from None


def _parse_family(raw: bytes, family_name: str, kind: str, limits: Limits) -> None:
    """``raw`` checked as the worker checks it once it knows the learner's family."""
    try:
        parse_family_event(raw, family_name, kind, limits)
    except SchemaRejected as exc:
        raise Rejected(exc.reason, exc.detail) from None


def check_config(raw: bytes, limits: Limits | None = None) -> LearnerConfig:
    """``raw`` as a learner config the worker would accept, else :class:`Rejected` with the
    worker's reason (``invalid_schema``, ``invalid_config``, ...): the worker's own processor
    reads it, building the learner and its candidates."""
    config = _parse(raw, LearnerConfig, limits or Limits())
    checked = Processor(limits=limits).on_config(
        config.learner_id, raw, Source("learners", 0, 0, 0.0), 0.0
    )
    if checked.dead_letters:
        dead = checked.dead_letters[0]
        raise Rejected(dead.reason, dead.detail)
    return config


class _Waiter:
    """One decide call waiting for its decision or dead letter."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()

    def settle(self, decision: Decision | None, dead: dict[str, Any] | None) -> None:
        if self.future.done():
            return
        if decision is not None:
            self.future.set_result(decision)
        elif dead is not None:
            self.future.set_exception(Rejected(str(dead.get("reason")), str(dead.get("detail"))))


class AsyncClient:
    """banditflow for an asyncio application; use ``async with AsyncClient(...) as bf:``.

    ``bootstrap`` is the broker's address or a :class:`KafkaConnection`; ``prefix`` the topics'
    prefix; ``limits`` the worker's input limits (``--max-event-bytes`` etc.), checked before
    producing; ``timeout`` the default of :meth:`decide`.
    """

    def __init__(
        self,
        bootstrap: str | KafkaConnection = "127.0.0.1:9092",
        *,
        prefix: str = "banditflow",
        limits: Limits | None = None,
        timeout: float = 10.0,
        fetch_wait_ms: int | None = None,
    ) -> None:
        self.connection = as_connection(bootstrap)
        self.topics = Topics(prefix)
        self.limits = limits or Limits()
        self.timeout = timeout
        self._fetch_wait_ms = fetch_wait_ms
        self.learners = AsyncLearners(self)
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._partitions = 0
        self._configs: dict[str, LearnerConfig] = {}
        self._learner_tps: list[TopicPartition] = []
        self._learners_at: dict[TopicPartition, int] = {}  # how far the reader got
        self._read: asyncio.Condition | None = None  # notified after every batch read
        self._assigning = asyncio.Lock()
        self._listening: set[int] = set()  # partitions whose decisions are read
        self._by_event: dict[tuple[str, str], list[_Waiter]] = {}
        self._by_offset: dict[tuple[int, int], _Waiter] = {}
        self._early_dead: OrderedDict[tuple[int, int], dict[str, Any]] = OrderedDict()
        self._failure: BaseException | None = None
        self._started_at = 0.0  # (time.time(), as aiokafka's fetch timestamps)

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> AsyncClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect, and read the learners topic to its end."""
        kwargs = self.connection.aiokafka_kwargs()
        wait_ms = self._fetch_wait_ms
        if wait_ms is None:
            wait_ms = 20 if await self._is_tansu() else 500
        self._producer = AIOKafkaProducer(**kwargs, acks="all", client_id="banditflow-client")
        self._consumer = AIOKafkaConsumer(
            **kwargs, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=wait_ms,
            client_id="banditflow-client",
        )
        try:
            await self._producer.start()
            await self._consumer.start()
            topics = await self._consumer.topics()
            missing = [t for t in (self.topics.learners, self.topics.contexts,
                                   self.topics.decisions, self.topics.deadletter)
                       if t not in topics]
            if missing:
                raise RuntimeError(
                    f"no topic {', '.join(missing)} on {self.connection.bootstrap}: start a "
                    f"worker with --prefix {self.topics.prefix} (it creates them)"
                )
            self._partitions = len(self._consumer.partitions_for_topic(self.topics.contexts)
                                   or ())
            self._learner_tps = [
                TopicPartition(self.topics.learners, p)
                for p in sorted(self._consumer.partitions_for_topic(self.topics.learners) or ())
            ]
            self._consumer.assign(self._learner_tps)
            await self._consumer.seek_to_beginning(*self._learner_tps)
            self._read = asyncio.Condition()
            self._started_at = time.time()
            self._reader = asyncio.create_task(self._read_loop(), name="banditflow-client")
            await self._learners_read()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        for waiters in self._by_event.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(RuntimeError("the client was closed"))
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    def not_ready(self, silence_s: float = READY_SILENCE_S) -> str | None:
        """Why the client cannot serve now (None: it can): not started, its consumer failed,
        or no fetch of its consumer answered for ``silence_s`` seconds (a broker lost after
        the start: an idle fetch is answered at least every fetch wait, 20-500 ms)."""
        consumer = self._consumer
        if self._reader is None or consumer is None:
            return "not started"
        if self._reader.done():
            return f"the consumer failed: {self._failure!r}"
        heard = max((consumer.last_poll_timestamp(tp) or 0 for tp in consumer.assignment()),
                    default=0) / 1000 or self._started_at
        silent = time.time() - heard
        if silent > silence_s:
            return (f"no answer from the broker ({self.connection.bootstrap}) for "
                    f"{silent:.1f}s")
        return None

    async def _is_tansu(self) -> bool:
        # The embedded broker looks again at an empty fetch only after half its wait (the
        # worker's --fetch-wait-ms says more): wait 20 ms there.
        admin = AIOKafkaAdminClient(**self.connection.aiokafka_kwargs())
        await admin.start()
        try:
            cluster = await admin.describe_cluster()
            return str(cluster.get("cluster_id") or "").startswith("tansu")
        finally:
            await admin.close()

    # ------------------------------------------------------------------ reading
    async def _read_loop(self) -> None:
        consumer, read = self._consumer, self._read
        assert consumer is not None and read is not None
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=1000)
                for tp, records in batches.items():
                    if tp.topic == self.topics.decisions:
                        for record in records:
                            self._on_decision(record.value)
                    elif tp.topic == self.topics.deadletter:
                        for record in records:
                            self._on_dead_letter(record.value)
                    else:
                        for record in records:
                            self._on_config(record.key, record.value)
                for tp in self._learner_tps:
                    self._learners_at[tp] = await consumer.position(tp)
                async with read:
                    read.notify_all()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a broken consumer must not leave calls hanging
            self._failure = exc
            for waiters in self._by_event.values():
                for waiter in waiters:
                    if not waiter.future.done():
                        waiter.future.set_exception(exc)
            async with read:
                read.notify_all()
            raise

    def _on_decision(self, value: bytes | None) -> None:
        try:
            record = orjson.loads(value or b"null")
            key = (record["learner_id"], record["event_id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return  # not a decision this client asked for
        waiters = self._by_event.get(key)
        if waiters:
            decision = Decision.from_record(record)
            for waiter in waiters:
                waiter.settle(decision, None)

    def _on_dead_letter(self, value: bytes | None) -> None:
        try:
            dead = orjson.loads(value or b"null")
            if dead["source_topic"] != self.topics.contexts:
                return
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        lid, eid = dead.get("learner_id"), dead.get("event_id")
        if lid is not None and eid is not None:
            for waiter in self._by_event.get((lid, eid), ()):
                waiter.settle(None, dead)
            return
        at = (dead.get("partition"), dead.get("offset"))
        waiter = self._by_offset.get(at)  # type: ignore[arg-type]
        if waiter is not None:
            waiter.settle(None, dead)
        elif isinstance(at[0], int) and isinstance(at[1], int):
            self._early_dead[at] = dead  # type: ignore[index]
            if len(self._early_dead) > EARLY_DEAD_LETTERS:
                self._early_dead.popitem(last=False)

    def _on_config(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        lid = key.decode("utf-8", "replace")
        if value is None:
            self._configs.pop(lid, None)
            return
        try:
            config = check_config(value, self.limits)
        except Rejected:
            return  # the worker dead-letters it and keeps the learner as it was
        if config.learner_id == lid:
            self._configs[lid] = config

    async def _learners_read(self) -> None:
        """Wait until the learners topic is read up to its end as of now."""
        consumer, read = self._consumer, self._read
        assert consumer is not None and read is not None
        ends = await consumer.end_offsets(self._learner_tps)

        def done() -> bool:
            if self._failure is not None:
                raise self._failure
            return all(self._learners_at.get(tp, -1) >= end for tp, end in ends.items())

        async with read:
            await read.wait_for(done)

    async def _listen(self, partition: int) -> None:
        """Read ``partition`` of the decisions and dead-letter topics from now on (returns
        once the consumer's position there is known, so that nothing produced after it is
        missed)."""
        if partition in self._listening:
            return
        consumer = self._consumer
        assert consumer is not None
        async with self._assigning:
            if partition in self._listening:
                return
            wanted = [TopicPartition(self.topics.decisions, partition),
                      TopicPartition(self.topics.deadletter, partition)]
            assigned = consumer.assignment()
            # assign() forgets positions: put back those known (reading again from there
            # settles nothing twice), the new partitions start at their end.
            positions = {tp: await consumer.position(tp) for tp in assigned}
            consumer.assign([*assigned, *wanted])
            for tp, position in positions.items():
                consumer.seek(tp, position)
            await consumer.seek_to_end(*wanted)
            for tp in wanted:
                await consumer.position(tp)
            self._listening.add(partition)

    # ------------------------------------------------------------------ learners
    async def _config(self, learner_id: str) -> LearnerConfig:
        config = self._configs.get(learner_id)
        if config is None:
            await self._learners_read()
            config = self._configs.get(learner_id)
        if config is None:
            raise Rejected(
                "unknown_learner",
                f"no learner {learner_id!r}: create it first (client.learners.create, "
                "banditflow learners create, PUT /v1/learners/{id})",
            )
        return config

    def _partition(self, learner_id: str) -> int:
        """The partition of ``learner_id``'s contexts and feedback (``partition_for`` caches
        it: murmur2 in Python costs as much as a record's encoding)."""
        return partition_for(learner_id, self._partitions)

    # ------------------------------------------------------------------ the calls
    def _producer_started(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise RuntimeError("the client is not started: use it in `async with`")
        return self._producer

    async def decide(
        self, learner_id: str, *, event_id: str | None = None, timeout: float | None = None,
        **fields: Any,
    ) -> Decision:
        """The decision of learner ``learner_id`` on the context ``fields`` (``labels``,
        ``scores``, ``features``, ...; an ``event_id`` is generated if not given)."""
        return await self.decide_record(
            {"learner_id": learner_id, "event_id": event_id or uuid.uuid4().hex, **fields},
            timeout=timeout,
        )

    async def decide_record(
        self, record: Mapping[str, Any], *, timeout: float | None = None
    ) -> Decision:
        """:meth:`decide` for a context record as on the contexts topic (``learner_id`` and
        ``event_id`` included)."""
        producer = self._producer_started()
        raw = _encode(record)
        context = _parse(raw, ContextEnvelope, self.limits)
        lid, eid = context.learner_id, context.event_id
        config = await self._config(lid)
        _parse_family(raw, config.family, "context", self.limits)
        partition = self._partition(lid)
        await self._listen(partition)
        waiter = _Waiter()
        self._by_event.setdefault((lid, eid), []).append(waiter)
        at: tuple[int, int] | None = None
        seconds = self.timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(seconds):  # the produce included
                sent = await producer.send_and_wait(self.topics.contexts, raw, lid.encode(),
                                                    partition=partition)
                at = (partition, sent.offset)
                early = self._early_dead.pop(at, None)
                if early is not None:
                    waiter.settle(None, early)
                self._by_offset[at] = waiter
                return await waiter.future
        except TimeoutError:
            raise DecisionTimeout(f"no decision for {lid}/{eid} within {seconds:g}s") from None
        finally:
            waiters = self._by_event.get((lid, eid), [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._by_event.pop((lid, eid), None)
            if at is not None:
                self._by_offset.pop(at, None)

    async def feedback(self, learner_id: str, event_id: str, **fields: Any) -> None:
        """Report what the application observed for decision ``event_id`` (``label``,
        ``missed``, ``losses``, ``model_reward``, ...); returns once the broker has it."""
        await self.feedback_record({"learner_id": learner_id, "event_id": event_id, **fields})

    async def feedback_record(self, record: Mapping[str, Any]) -> None:
        """:meth:`feedback` for a record as on the feedback topic."""
        await self._send_checked(record, FeedbackEnvelope, self.topics.feedback, "feedback")

    async def truth(self, learner_id: str, event_id: str, **fields: Any) -> None:
        """Report the full ground truth of decision ``event_id`` (exact regret in the
        metrics; learners never see it)."""
        await self.truth_record({"learner_id": learner_id, "event_id": event_id, **fields})

    async def truth_record(self, record: Mapping[str, Any]) -> None:
        """:meth:`truth` for a record as on the truth topic."""
        await self._send_checked(record, TruthEnvelope, self.topics.truth, "truth")

    async def _send_checked(
        self, record: Mapping[str, Any], model: type, topic: str, kind: str
    ) -> None:
        producer = self._producer_started()
        raw = _encode(record)
        event = _parse(raw, model, self.limits)
        lid = event.learner_id
        config = await self._config(lid)
        _parse_family(raw, config.family, kind, self.limits)
        await producer.send_and_wait(topic, raw, lid.encode(),
                                     partition=self._partition(lid))


class AsyncLearners:
    """Learner configs: checked as the worker checks them, then produced to the compacted
    learners topic; ``get`` and ``list`` read that topic to its end."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> list[LearnerConfig]:
        await self._client._learners_read()
        return [self._client._configs[lid] for lid in sorted(self._client._configs)]

    async def get(self, learner_id: str) -> LearnerConfig | None:
        await self._client._learners_read()
        return self._client._configs.get(learner_id)

    async def create(self, config: Mapping[str, Any] | LearnerConfig) -> LearnerConfig:
        """A new learner; :class:`Rejected` (``learner_exists``) if ``learner_id`` is taken."""
        return await self._put(config, exists=False)

    async def update(self, config: Mapping[str, Any] | LearnerConfig) -> LearnerConfig:
        """Reconfigure a learner; :class:`Rejected` (``unknown_learner``) if it does not
        exist."""
        return await self._put(config, exists=True)

    async def put(self, config: Mapping[str, Any] | LearnerConfig) -> LearnerConfig:
        """Create or reconfigure (the gateway's PUT)."""
        return await self._put(config, exists=None)

    async def delete(self, learner_id: str) -> None:
        """Delete a learner (a tombstone); :class:`Rejected` (``unknown_learner``) if none."""
        client = self._client
        await client._config(learner_id)
        await client._producer_started().send_and_wait(
            client.topics.learners, None, learner_id.encode(),
            partition=partition_for(learner_id, len(client._learner_tps)),
        )
        client._configs.pop(learner_id, None)

    async def _put(
        self, config: Mapping[str, Any] | LearnerConfig, exists: bool | None
    ) -> LearnerConfig:
        client = self._client
        raw = (config.model_dump_json(exclude_unset=True).encode()
               if isinstance(config, LearnerConfig) else _encode(config))
        checked = check_config(raw, client.limits)
        lid = checked.learner_id
        if exists is not None:
            await client._learners_read()
            if exists and lid not in client._configs:
                raise Rejected("unknown_learner", f"no learner {lid!r} to update")
            if not exists and lid in client._configs:
                raise Rejected("learner_exists",
                               f"learner {lid!r} exists: update it, or delete it first")
        await client._producer_started().send_and_wait(
            client.topics.learners, raw, lid.encode(),
            partition=partition_for(lid, len(client._learner_tps)),
        )
        client._configs[lid] = checked
        return checked


class Client:
    """banditflow for blocking code: :class:`AsyncClient` on an event loop of its own thread
    (calls from several threads run concurrently). Use ``with Client(...) as bf:``."""

    def __init__(
        self,
        bootstrap: str | KafkaConnection = "127.0.0.1:9092",
        *,
        prefix: str = "banditflow",
        limits: Limits | None = None,
        timeout: float = 10.0,
        fetch_wait_ms: int | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="banditflow-client",
                                        daemon=True)
        self._thread.start()
        self._async = self._call(self._create(bootstrap, prefix, limits, timeout,
                                              fetch_wait_ms))
        self.learners = Learners(self)

    @staticmethod
    async def _create(*args: Any) -> AsyncClient:
        bootstrap, prefix, limits, timeout, fetch_wait_ms = args
        return AsyncClient(bootstrap, prefix=prefix, limits=limits, timeout=timeout,
                           fetch_wait_ms=fetch_wait_ms)

    def _call(self, coroutine: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
        async def run() -> T:
            return await coroutine

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def __enter__(self) -> Client:
        try:
            self._call(self._async.start())
        except BaseException:
            self._stop_loop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._async.close())
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        if not self._loop.is_closed():
            self._loop.close()

    def decide(
        self, learner_id: str, *, event_id: str | None = None, timeout: float | None = None,
        **fields: Any,
    ) -> Decision:
        """See :meth:`AsyncClient.decide`."""
        return self._call(self._async.decide(learner_id, event_id=event_id, timeout=timeout,
                                             **fields))

    def feedback(self, learner_id: str, event_id: str, **fields: Any) -> None:
        """See :meth:`AsyncClient.feedback`."""
        self._call(self._async.feedback(learner_id, event_id, **fields))

    def truth(self, learner_id: str, event_id: str, **fields: Any) -> None:
        """See :meth:`AsyncClient.truth`."""
        self._call(self._async.truth(learner_id, event_id, **fields))


class Learners:
    """:class:`AsyncLearners`, blocking."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._async = client._async.learners

    def list(self) -> list[LearnerConfig]:
        return self._client._call(self._async.list())

    def get(self, learner_id: str) -> LearnerConfig | None:
        return self._client._call(self._async.get(learner_id))

    def create(self, config: Mapping[str, Any] | LearnerConfig) -> LearnerConfig:
        return self._client._call(self._async.create(config))

    def update(self, config: Mapping[str, Any] | LearnerConfig) -> LearnerConfig:
        return self._client._call(self._async.update(config))

    def delete(self, learner_id: str) -> None:
        self._client._call(self._async.delete(learner_id))


__all__ = ["AsyncClient", "AsyncLearners", "Client", "Decision", "DecisionTimeout", "Learners",
           "Rejected", "check_config"]
