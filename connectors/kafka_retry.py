"""Kafka calls that retry the errors that pass, and whole-partition reads.

A topic just created has no leader for a moment, a group coordinator moves or loads after a
restart: such errors pass within seconds, and the calls here retry them for a minute before
giving up. Nothing here knows the engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from connectors.kafka_records import Partition

log = logging.getLogger(__name__)

#: Group-coordinator errors that pass: the coordinator moves or loads (a new group, a restart).
RETRIABLE_COORDINATOR_ERRORS = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
)


#: Partition-leadership errors that pass (a topic just created, a leader moving).
RETRIABLE_LEADER_ERRORS = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
)

#: Topic-creation errors that pass: a broker just (re)started is fenced until it has caught up
#: with the controller, and refuses to place replicas meanwhile.
RETRIABLE_CREATION_ERRORS = (
    KafkaError.INVALID_REPLICATION_FACTOR,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
)

T = TypeVar("T")


def retry(
    call: Callable[[], T], codes: tuple[int, ...] = RETRIABLE_LEADER_ERRORS, what: str = ""
) -> T:
    """``call()``, retried for a minute while it fails with one of ``codes`` (errors that pass:
    a topic just created, a leader or the group coordinator moving)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code not in codes or time.monotonic() > deadline:
                raise
            log.info("%s not available yet (%s); retrying", what or "Kafka", error)
            time.sleep(0.5)


def create_topics(admin: AdminClient, topics: list[NewTopic]) -> list[str]:
    """Create ``topics``, those another client created meanwhile taken as they are, retrying
    for a minute while the broker cannot place them yet (:data:`RETRIABLE_CREATION_ERRORS`);
    the names of those created here."""
    created: list[str] = []
    pending = list(topics)

    def create() -> None:
        for name, future in admin.create_topics(pending, operation_timeout=30).items():
            try:
                future.result(timeout=60)
                created.append(name)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
            pending[:] = [t for t in pending if t.topic != name]

    if pending:
        retry(create, RETRIABLE_CREATION_ERRORS, "creating " + ", ".join(t.topic for t in topics))
    return created


def committed_offsets(consumer: Consumer, partitions: Iterable[Partition]) -> list[TP]:
    """The group's committed offsets of ``partitions`` (stable offsets: librdkafka waits out
    pending transactional commits), retrying coordinator errors."""
    wanted = [TP(t, p) for t, p in partitions]
    return list(
        retry(
            partial(consumer.committed, wanted, timeout=30),
            RETRIABLE_COORDINATOR_ERRORS,
            "committed offsets",
        )
    )


def epoch_header(message: Message) -> int | None:
    """The record's ``epoch`` header, if it has one."""
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    for name, value in pairs:
        if name == "epoch" and value is not None:
            return int(value)
    return None


def wait_resolved(
    committed: Consumer, uncommitted: Consumer, tp: TP, what: str, warn_every: float = 10.0
) -> int:
    """Wait until every transaction open on ``tp`` now is resolved; returns the end it had.

    A ``read_committed`` reader sees a partition only up to its last stable offset, the first
    record of the oldest open transaction: a producer killed inside one (a zombie, aborted by
    the broker only after its transaction time-out) hides every record committed after it,
    however complete those transactions are. So the end is taken as the high watermark now
    (``uncommitted``, a ``read_uncommitted`` client) and the last stable offset (``committed``)
    awaited until it reaches it; transactions begun later do not hold it back."""
    high = retry(partial(uncommitted.get_watermark_offsets, tp, timeout=10, cached=False))[1]
    started = time.monotonic()
    next_warning = started + 1.0  # a live worker's transaction resolves well within a second
    while True:
        stable = retry(partial(committed.get_watermark_offsets, tp, timeout=10, cached=False))[1]
        if stable >= high:
            return high
        now = time.monotonic()
        if now >= next_warning:
            log.warning(
                "waiting for open transactions on %s to be committed or aborted",
                what,
                extra={
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "last_stable_offset": stable,
                    "high_watermark": high,
                    "waited_s": round(now - started, 1),
                },
            )
            next_warning = now + warn_every
        time.sleep(0.2)


def read_to_end(consumer: Consumer, partitions: list[TP]) -> Iterable[Message]:
    """Every committed record of ``partitions`` up to their end offsets as of now (for a
    ``read_committed`` consumer the last stable offsets: see :func:`wait_resolved`)."""
    ends = {}
    for tp in partitions:
        _, high = retry(partial(consumer.get_watermark_offsets, tp, timeout=10, cached=False))
        ends[(tp.topic, tp.partition)] = high
    todo = {p for p, e in ends.items() if e > 0}
    consumer.assign([TP(t, p, OFFSET_BEGINNING) for t, p in ends])
    while todo:
        # consume waits for its 5,000 records until the time-out: a short one, since the last
        # records of a partition (all of a small one, such as the control topic) are fewer.
        for message in consumer.consume(num_messages=5000, timeout=0.05):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(error)
            yield message
        for p in list(todo):
            (tp,) = consumer.position([TP(p[0], p[1])])
            if tp.offset >= ends[p]:
                todo.discard(p)
    consumer.unassign()
