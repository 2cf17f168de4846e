"""The embedded broker's stale-leader quirk (issue 12, the kill suite's stuck group), and the
worker getting out of it (:class:`banditflow.streams.group.StaleLeaderEscape`).

Tansu keeps the leader of a forming group when that leader leaves the group: every member
that joins afterwards is told that the departed member leads, its SyncGroup is answered
REBALANCE_IN_PROGRESS, and the group rejoins one generation for ever. Only a JoinGroup under
the departed leader's member id ends it. The first test pins that behaviour with bare
protocol requests (if a Tansu upgrade fixes it, it fails: then the escape can go); the
second puts a real worker in that state and expects it to serve all the same.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from conftest import run_prefix

from banditflow.streams.connection import KafkaConnection

pytestmark = [pytest.mark.integration, pytest.mark.embedded_broker]

REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79


class Member:
    """A consumer-group member speaking the protocol by hand."""

    def __init__(self, kafka: KafkaConnection, group: str, name: str, topic: str = "t"
                 ) -> None:
        self.client = AIOKafkaClient(**kafka.aiokafka_kwargs(), client_id=name)
        self.group = group
        self.member_id = ""
        self.metadata = RangePartitionAssignor.metadata({topic}).encode()

    async def start(self) -> Member:
        await self.client.bootstrap()
        self.node = self.client.get_random_node()
        return self

    async def join(self):  # -> JoinGroupResponse
        while True:
            response = await self.client.send(self.node, JoinGroupRequest(
                self.group, 2000, 2000, self.member_id, None, "consumer",
                [("range", self.metadata)]))
            self.member_id = response.member_id
            if response.error_code != MEMBER_ID_REQUIRED:
                return response

    async def sync(self, generation: int, assignments=()):  # -> SyncGroupResponse
        return await self.client.send(self.node, SyncGroupRequest(
            self.group, generation, self.member_id, None, list(assignments)))

    async def leave(self, member_id: str) -> None:
        await self.client.send(self.node, LeaveGroupRequest(self.group, member_id))

    async def close(self) -> None:
        await self.client.close()


async def described(kafka: KafkaConnection, group: str) -> tuple[str, list[str]]:
    admin = AIOKafkaAdminClient(**kafka.aiokafka_kwargs())
    await admin.start()
    try:
        found = (await admin.describe_consumer_groups([group]))[0].groups[0]
        return found[2], [member[0] for member in found[5]]
    finally:
        await admin.close()


def assign(member_ids: list[str]) -> list[tuple[str, bytes]]:
    return [(m, ConsumerProtocolMemberAssignment(0, [("t", [i])], b"").encode())
            for i, m in enumerate(member_ids)]


def test_tansu_keeps_the_leader_of_a_forming_group_that_left(broker) -> None:
    async def scenario() -> None:
        group = run_prefix("stale-leader-quirk")
        leader = await Member(broker.connection, group, "a").start()
        follower = await Member(broker.connection, group, "b").start()
        try:
            first = await leader.join()
            assert first.leader_id == leader.member_id
            assert (await follower.join()).leader_id == leader.member_id
            await leader.leave(leader.member_id)  # the leader leaves before it syncs
            assert (await described(broker.connection, group))[1] == [follower.member_id]
            began = time.monotonic()
            while time.monotonic() - began < 8.0:  # four session timeouts
                joined = await follower.join()
                # The departed member still leads; the generation never moves on.
                assert joined.leader_id == leader.member_id
                synced = await follower.sync(joined.generation_id)
                assert synced.error_code == REBALANCE_IN_PROGRESS
            # The way out: a JoinGroup under the departed leader's id is answered as to the
            # leader, with the members, and its SyncGroup forms the group.
            heir = await Member(broker.connection, group, "c").start()
            heir.member_id = leader.member_id
            try:
                joined = await heir.join()
                assert joined.leader_id == joined.member_id == leader.member_id
                members = sorted(m[0] for m in joined.members)
                assert members == sorted([leader.member_id, follower.member_id])
                assert (await heir.sync(joined.generation_id, assign(members))).error_code == 0
                assert (await described(broker.connection, group))[0] == "Stable"
                joined = await follower.join()
                synced = await follower.sync(joined.generation_id)
                assert synced.error_code == 0 and synced.member_assignment
            finally:
                await heir.close()
        finally:
            await leader.close()
            await follower.close()

    asyncio.run(scenario())


def test_worker_gets_out_of_a_group_whose_leader_left_while_forming(
    broker, start_worker, wait_until
) -> None:
    prefix = run_prefix("staleleader")

    async def scenario():
        # A hand-made member joins first, so leads, and never syncs: the group stays forming.
        squatter = Member(broker.connection, prefix, "squatter", topic=f"{prefix}.contexts")
        await squatter.start()
        await squatter.join()
        worker = start_worker(prefix, partitions=2, wait=False)
        deadline = time.monotonic() + 60
        while len((await described(broker.connection, prefix))[1]) < 2:
            assert time.monotonic() < deadline, worker.log()[-3000:]
            await squatter.join()  # (keeps it from timing out: it must leave, not expire)
            await asyncio.sleep(0.5)
        await squatter.leave(squatter.member_id)
        await squatter.close()
        return worker

    worker = asyncio.run(scenario())
    # Stuck for ever without the escape; with it, ready after about 2 session timeouts (the
    # id it gave up holds a partition until it times out, one session later).
    worker.wait_ready(timeout_s=30)
    assert "stuck forming" in worker.log()
    wait_until(lambda: worker.ready() == "ready: partitions [0, 1]", timeout_s=15)
