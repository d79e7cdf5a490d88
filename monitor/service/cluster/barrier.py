"""The barrier: a worker commits epoch E only when every input partition has completed E.

A partition has completed E when the group's committed offset for it reached E's end; the
offsets are committed by the seed transactions, so the barrier waits for the other workers'
transactions, not for messages between workers. While it waits, a worker publishes every
pending partition it owns: its own, and any it was assigned mid-epoch because its previous owner
died or left before committing.

Most of the wait is inside the offset fetch: while another worker's transaction holds offsets,
the broker answers that they are unstable and librdkafka asks again. The group consumer asks
every 10 ms, backing off to 50 ms (``GroupMember``), so a worker passes the barrier within about
50 ms of the last commit; with librdkafka's defaults (100 ms doubling to 1 s) it was up to a second.

Why it is needed (DESIGN.md had no barrier): without it a worker that takes over a partition
whose previous owner died mid-epoch would already have committed E to its own index, and could
no longer seed E's changes against the state before E (the index keeps one uncommitted level,
not a history of epochs).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from connectors.kafka_records import Partition
from monitor.service.cluster.control import EpochSpec
from monitor.service.cluster.group import GroupMember
from monitor.service.health import Health
from monitor.service.stop import Stop

#: How long a worker waits between checks of the barrier.
BARRIER_POLL_SECONDS = 0.02


def pending(spec: EpochSpec, group: GroupMember, partitions: list[Partition]) -> set[Partition]:
    """The partitions whose committed offset is still below ``spec``'s end."""
    committed = group.committed(partitions)
    return {p for p in partitions if committed.get(p, -1) < spec.ends[p]}


def wait_for_epoch(
    spec: EpochSpec,
    group: GroupMember,
    partitions: list[Partition],
    publish: Callable[[set[Partition]], None],
    serve_group: Callable[[], None],
    health: Health,
) -> bool:
    """Publish the pending partitions this worker owns until no partition is pending; False
    when a stop was requested first (the epoch is then not complete here)."""
    while True:
        serve_group()
        todo = pending(spec, group, partitions)
        mine = todo & group.owned
        if mine:
            publish(mine)
            continue
        if not todo:
            return True
        if Stop.requested:
            return False
        health.beat()
        time.sleep(BARRIER_POLL_SECONDS)
