"""Every worker reads everything: the input partitions and the control partition, assigned.

The :class:`Reader` is assigned (never subscribed) every input partition and the control
partition, never commits, and hands out each epoch's records per partition in offset order, so
that every worker stages the same changes and nets them the same way.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, repeat
from operator import is_not
from typing import cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
)
from confluent_kafka import TopicPartition as TP

from connectors.kafka import with_consumer_defaults
from connectors.kafka_records import Partition, partition_key
from connectors.kafka_retry import retry
from core.errors import StateError
from monitor.service.cluster.control import (
    EpochSpec,
)
from monitor.service.health import Health

log = logging.getLogger(__name__)

#: A partition's read-ahead buffer is paused above this many records.
MAX_BUFFERED = 200_000


#: The most records one :meth:`Reader._pump` takes.
PUMP_RECORDS = 5000


@dataclass
class _Buffer:
    """A partition's records read ahead, in offset order: the messages from ``head`` on, and
    their offsets beside them, so that an epoch's records are cut out by two binary searches
    and one slice, not a step per record."""

    messages: list[Message] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    head: int = 0

    def __len__(self) -> int:
        return len(self.offsets) - self.head

    def extend(self, messages: list[Message], offsets: list[int]) -> None:
        if self.head and self.head * 2 >= len(self.offsets):  # drop what was handed out
            del self.messages[: self.head], self.offsets[: self.head]
            self.head = 0
        self.messages += messages
        self.offsets += offsets

    def take(self, start: int, end: int) -> list[Message]:
        """The records with offsets in ``[start, end)``; every record below ``end`` leaves."""
        lo = bisect_left(self.offsets, start, self.head)
        self.head = bisect_left(self.offsets, end, self.head)
        return self.messages[lo : self.head]


class Reader:
    """Reads every input partition and the control partition; assigned, never committing."""

    def __init__(
        self,
        config: Mapping[str, str | int | float | bool],
        partitions: Sequence[Partition],
        control: Partition,
        positions: Mapping[Partition, int],
        control_offset: int,
    ) -> None:
        self.consumer = Consumer(
            {
                **with_consumer_defaults(config),
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "logger": logging.getLogger("librdkafka.reader"),
            }
        )
        self.partitions = list(partitions)
        self.control = control
        assignment = [TP(t, p, positions.get((t, p), OFFSET_BEGINNING)) for t, p in partitions]
        assignment.append(TP(control[0], control[1], control_offset))
        self.consumer.assign(assignment)
        self.buffers: dict[Partition, _Buffer] = {p: _Buffer() for p in self.partitions}
        self.paused: set[Partition] = set()
        self.specs: deque[EpochSpec] = deque()
        self.last_spec: EpochSpec | None = None
        # The offset after the last record seen, per partition (the consumer's position is
        # unknown until a first record or marker is read).
        self.seen: dict[Partition, int] = {p: max(positions.get(p, 0), 0) for p in partitions}
        self.seen[control] = max(control_offset, 0)

    def _pump(self, timeout: float) -> None:
        """Read what has arrived into the buffers, a column at a time (``Message``'s methods
        mapped over the records, one slice per partition): no Python step per record.

        Waits at most ``timeout`` for a first record, then takes what else has arrived without
        waiting: ``consume(num_messages=N)`` waits out its whole time-out unless N records come,
        so a lone control record (the next epoch's definition) waited 100 ms in every other
        epoch."""
        first = self.consumer.poll(timeout)
        if first is None:
            return
        messages = [first, *self.consumer.consume(num_messages=PUMP_RECORDS - 1, timeout=0)]
        errors = list(map(Message.error, messages))
        if any(map(is_not, errors, repeat(None))):
            for error in errors:
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
            messages = list(compress(messages, [error is None for error in errors]))
        offsets = cast(list[int], list(map(Message.offset, messages)))
        keys = cast(
            list[Partition],
            list(zip(map(Message.topic, messages), map(Message.partition, messages), strict=True)),
        )
        distinct = dict.fromkeys(keys)
        for where in distinct:
            mine, at = messages, offsets  # one partition: the usual fetch
            if len(distinct) > 1:
                mine, at = self._of(where, keys, messages, offsets)
            self.seen[where] = at[-1] + 1
            if where == self.control:
                for message, offset in zip(mine, at, strict=True):
                    spec = EpochSpec.from_json(message.value() or b"{}", offset)
                    self.specs.append(spec)
                    self.last_spec = spec
                continue
            buffer = self.buffers[where]
            buffer.extend(mine, at)
            if len(buffer) > MAX_BUFFERED and where not in self.paused:
                self.consumer.pause([TP(where[0], where[1])])
                self.paused.add(where)

    @staticmethod
    def _of(
        where: Partition, keys: list[Partition], messages: list[Message], offsets: list[int]
    ) -> tuple[list[Message], list[int]]:
        """The messages of one partition and their offsets."""
        mine = list(map(where.__eq__, keys))
        return list(compress(messages, mine)), list(compress(offsets, mine))

    def next_spec(self, timeout: float) -> EpochSpec | None:
        """The next epoch of the control topic, if one arrives within ``timeout``."""
        if not self.specs:
            self._pump(timeout)
        return self.specs.popleft() if self.specs else None

    def position(self, partition: Partition) -> int:
        """The offset the next record of ``partition`` will have, at least (transaction markers
        advance the consumer's position past the last record)."""
        (tp,) = self.consumer.position([TP(partition[0], partition[1])])
        return max(int(tp.offset), self.seen[partition])

    def read_epoch(self, spec: EpochSpec, health: Health) -> dict[Partition, list[Message]]:
        """The records of ``spec``, per input partition in offset order."""
        out: dict[Partition, list[Message]] = {p: [] for p in self.partitions}
        todo = {p for p in self.partitions if spec.ends.get(p, 0) > spec.starts.get(p, 0)}
        while todo:
            for p in list(todo):
                end, buffer = spec.ends[p], self.buffers[p]
                out[p] += buffer.take(spec.starts.get(p, 0), end)
                if len(buffer) or self.position(p) >= end:
                    todo.discard(p)
                if p in self.paused and len(buffer) < MAX_BUFFERED // 2:
                    self.consumer.resume([TP(p[0], p[1])])
                    self.paused.discard(p)
            if todo:
                health.beat()
                self._pump(0.2)
        return out

    def close(self) -> None:
        self.consumer.close()


def check_retention(reader: Reader, positions: Mapping[Partition, int], where: object) -> None:
    """Refuse a stored state whose input positions the topics no longer hold: reading on from
    the earliest record would silently skip updates."""
    for p, stored in positions.items():
        low, high = retry(
            partial(reader.consumer.get_watermark_offsets, TP(*p), timeout=10, cached=False)
        )
        if stored < low <= high and high > stored:
            raise StateError(
                f"the state in {where} reaches {partition_key(p)} offset {stored}, but the "
                f"topic now starts at {low} (retention): this worker cannot catch up from the "
                f"input; give it a new volume (delete its state directory or PVC) and it "
                f"rebuilds from the changelog"
            )
