"""The control topic: the global epochs one leader publishes, and the topics of a deployment.

An :class:`EpochSpec` is one control record: the epoch's number and, for every input partition,
the offsets ``[start, end)`` it covers. Every worker reads the same records of an epoch because
it reads them from the same spec.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.cimpl import NewTopic

from connectors.kafka_records import Partition, parse_partition_key, partition_key
from connectors.kafka_retry import create_topics
from core.errors import StateError
from monitor.service.settings import Settings

log = logging.getLogger(__name__)

#: The changelog keeps every record younger than this uncompacted (a rebuild reads them).
CHANGELOG_COMPACTION_LAG_MS = 3_600_000
EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class EpochSpec:
    """One global epoch: for every input partition, the offsets it covers ``[start, end)``."""

    epoch: int
    starts: dict[Partition, int]
    ends: dict[Partition, int]
    leader: str = ""
    offset: int = -1  # of the control record

    @property
    def records(self) -> int:
        return sum(self.ends[p] - self.starts.get(p, 0) for p in self.ends)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "epoch": self.epoch,
                "starts": {partition_key(p): o for p, o in sorted(self.starts.items())},
                "ends": {partition_key(p): o for p, o in sorted(self.ends.items())},
                "leader": self.leader,
                "at": time.time(),
            }
        )

    @classmethod
    def from_json(cls, value: bytes, offset: int) -> EpochSpec:
        data = orjson.loads(value)
        return cls(
            int(data["epoch"]),
            {parse_partition_key(k): int(v) for k, v in data["starts"].items()},
            {parse_partition_key(k): int(v) for k, v in data["ends"].items()},
            str(data.get("leader", "")),
            offset,
        )


def control_topic(settings: Settings) -> str:
    if not settings.control_topic:
        raise StateError("scale-out needs SGM_CONTROL_TOPIC")
    return settings.control_topic


def changelog_topic(settings: Settings) -> str:
    return settings.changelog_topic or f"{settings.group_id}-changelog"


def ensure_topics(admin: AdminClient, settings: Settings) -> None:
    """Create the control and changelog topics when they do not exist yet."""
    wanted = {
        control_topic(settings): NewTopic(
            control_topic(settings), num_partitions=1, replication_factor=-1
        ),
        changelog_topic(settings): NewTopic(
            changelog_topic(settings),
            num_partitions=1,
            replication_factor=-1,
            config={
                "cleanup.policy": "compact",
                "min.compaction.lag.ms": str(CHANGELOG_COMPACTION_LAG_MS),
            },
        ),
    }
    existing = admin.list_topics(timeout=10).topics
    missing = [t for name, t in wanted.items() if name not in existing]
    for name in create_topics(admin, missing):
        log.info("topic created", extra={"topic": name})
    # A topic another worker has just created may have no leader yet: wait for one.
    deadline = time.monotonic() + 60
    while True:
        topics = admin.list_topics(timeout=10).topics
        ready = all(
            name in topics
            and topics[name].error is None
            and topics[name].partitions
            and all(p.leader >= 0 for p in topics[name].partitions.values())
            for name in wanted
        )
        if ready:
            return
        if time.monotonic() > deadline:
            raise StateError(f"topics {sorted(wanted)} have no leader after 60 s")
        time.sleep(0.2)


def input_partitions(admin: AdminClient, topics: Sequence[str]) -> list[Partition]:
    """Every partition of the input topics, sorted: the order every worker reads an epoch in."""
    meta = admin.list_topics(timeout=10).topics
    found: list[Partition] = []
    for topic in topics:
        t = meta.get(topic)
        if t is None or t.error is not None:
            raise StateError(f"input topic {topic!r} does not exist")
        found.extend((topic, p) for p in t.partitions)
    return sorted(found)


def ends_json(ends: Mapping[Partition, int]) -> dict[str, dict[str, int]]:
    return {"kafka": {partition_key(p): o for p, o in sorted(ends.items())}}
