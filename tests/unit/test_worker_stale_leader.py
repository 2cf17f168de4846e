"""StaleLeaderEscape's decisions, on scripted coordinator answers (the broker side is in
tests/integration/test_stale_leader.py), and the aiokafka internals it relies on."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator

from banditflow.streams.group import StaleLeaderEscape


def join(leader: str, me: str, error: int = 0) -> Any:
    return SimpleNamespace(API_KEY=11, error_code=error, leader_id=leader, member_id=me)


def sync(error: int) -> Any:
    return SimpleNamespace(API_KEY=14, error_code=error)


class Coordinator:
    def __init__(self, member_id: str) -> None:
        self.group_id = "g"
        self.member_id = member_id
        self.sent: list[Any] = []
        self.answers: list[Any] = []

    async def _send_req(self, request: Any) -> Any:
        self.sent.append(request)
        return self.answers.pop(0) if self.answers else sync(0)


def run(members: set[str] | None, me: str, script: list[tuple[float, Any]]) -> Coordinator:
    """Feeds ``script`` ((clock, answer) pairs) through an installed escape."""
    coordinator = Coordinator(me)
    now = [0.0]

    async def described() -> set[str] | None:
        return members

    escape = StaleLeaderEscape(coordinator, described, stale_after_s=4.0,
                               clock=lambda: now[0]).install()

    async def drive() -> None:
        for at, answer in script:
            now[0] = at
            coordinator.answers.append(answer)
            assert await coordinator._send_req(object()) is answer

    asyncio.run(drive())
    coordinator.escape = escape  # type: ignore[attr-defined]
    return coordinator


STUCK = [(0.0, join("gone", "m1")), (0.1, sync(27)), (2.0, join("gone", "m1")),
         (2.1, sync(27)), (4.0, join("gone", "m1")), (4.2, sync(27))]


def test_the_smallest_member_rejoins_under_a_departed_leaders_id() -> None:
    coordinator = run({"m1", "m2"}, "m1", STUCK)
    assert coordinator.member_id == "gone"
    # No LeaveGroup for m1: it stays listed until it times out, so m2 does not follow suit.
    assert len(coordinator.sent) == len(STUCK)
    assert run({"m1", "m2"}, "m2", STUCK).member_id == "m2"


def test_nothing_while_the_leader_is_a_member_or_not_yet_stale() -> None:
    assert run({"m1", "gone"}, "m1", STUCK).member_id == "m1"  # a slow leader, not gone
    assert run({"m1", "m2"}, "m1", STUCK[:4]).member_id == "m1"  # 2.1 s < 4 s
    assert run(None, "m1", STUCK).member_id == "m1"  # the group could not be described


def test_only_one_member_escapes() -> None:
    assert run({"m0", "m1"}, "m1", STUCK).member_id == "m1"  # m0 does it


def test_a_new_leader_or_a_sync_that_works_starts_over() -> None:
    changed = [*STUCK[:4], (4.0, join("other", "m1")), (4.2, sync(27))]
    assert run({"m1"}, "m1", changed).member_id == "m1"
    synced = [*STUCK[:3], (2.2, sync(0)), (4.0, join("gone", "m1")), (4.2, sync(27))]
    assert run({"m1"}, "m1", synced).member_id == "m1"
    leading = [*STUCK[:3], (2.2, join("m1", "m1")), (4.0, join("gone", "m1")), (4.2, sync(27))]
    assert run({"m1"}, "m1", leading).member_id == "m1"


def test_the_aiokafka_internals_it_uses() -> None:
    # The coordinator sends every group request through _send_req, and the next JoinGroup
    # carries its member_id (a failed SyncGroup keeps it: only UNKNOWN_MEMBER_ID or
    # ILLEGAL_GENERATION reset it).
    assert callable(GroupCoordinator._send_req)
    join_source = inspect.getsource(CoordinatorGroupRebalance.perform_group_join)
    assert "self._coordinator._send_req(request)" in join_source
    assert "self._coordinator.member_id," in join_source
    sync_source = inspect.getsource(CoordinatorGroupRebalance._send_sync_group_request)
    assert "self._coordinator._send_req(request)" in sync_source
