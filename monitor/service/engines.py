"""What the Kafka service runs its epochs on: the embedded engine (one process, its index in
memory and in a RocksDB store) or, with ``SGM_ENGINE=distributed``, the partitioned engine
(:mod:`monitor.distributed.service`). The serve loop (:mod:`monitor.service.serve`) sees only
:class:`ServiceEngine`.

The epoch protocol, the same for both: :meth:`~ServiceEngine.process` stages an epoch and
evaluates its deltas; the loop writes them in a Kafka transaction with the input offsets (the
epoch number as their metadata); after that transaction commits, :meth:`~ServiceEngine.commit`
makes the epoch durable with those offsets and folds it; if it fails, :meth:`~ServiceEngine.abort`
forgets it. A death between the Kafka commit and the store's leaves Kafka ahead of the store:
on restart the records between are applied again without emitting (:func:`~monitor.service.
recovery.catch_up`), so the input topic is what stages an epoch until the store has it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from connectors.events import FieldTypes
from core.records import UpdateBatch
from monitor.index.store import StateStore
from monitor.query.ast import Query
from monitor.service.clock import EventClock
from monitor.service.epoch_output import EpochOutput
from monitor.service.epochs import EpochProcessor
from monitor.service.health import Health
from monitor.service.metrics import Metrics
from monitor.service.recovery import Positions, load_state, stored_meta
from monitor.service.settings import Settings


class ServiceEngine(Protocol):
    """An engine the serve loop runs epochs on."""

    #: The event relations and their field types, and each relation's arity: what the Kafka
    #: source decodes against (kept up to date by the engine).
    field_types: FieldTypes | None
    arities: dict[str, int]

    @property
    def clock(self) -> EventClock:
        """The event clock (its watermark, per partition)."""
        ...

    @property
    def epoch(self) -> int:
        """The last epoch processed (committed, or staged and not yet committed)."""
        ...

    def load(self) -> Positions:
        """Load the stored state (a new one: empty); the input positions it includes."""
        ...

    def number_from(self, epoch: int) -> None:
        """Number the next epoch ``epoch`` (a catch-up of epochs that Kafka committed and the
        state lost: the output goes on with Kafka's numbers)."""
        ...

    def reload(self) -> Positions:
        """After a :class:`~core.errors.WorkerLost`: load the stored state again, dropping
        what is staged; the input positions it includes."""
        ...

    def process(self, batch: UpdateBatch) -> EpochOutput:
        """Stage the next epoch and evaluate every query's change."""
        ...

    def commit(self, out: EpochOutput, positions: Positions) -> None:
        """After the epoch's Kafka transaction committed: store it with ``positions``, fold
        it."""
        ...

    def abort(self) -> None:
        """Forget the staged epoch (its transaction failed); its number is reused."""
        ...

    def expiry_due(self) -> bool:
        """Whether an epoch would expire events even without input."""
        ...

    def observe(self, metrics: Metrics) -> None:
        """Set the gauges of the index and the events after a committed epoch."""
        ...


class EmbeddedEngine:
    """The single process: an :class:`EpochProcessor` and its :class:`StateStore`."""

    def __init__(self, settings: Settings, processor: EpochProcessor, store: StateStore) -> None:
        self.settings = settings
        self.processor = processor
        self.store = store
        self.field_types = processor.field_types
        self.arities = processor.arities

    @property
    def clock(self) -> EventClock:
        return self.processor.clock

    @property
    def epoch(self) -> int:
        return self.processor.epoch

    def number_from(self, epoch: int) -> None:
        self.processor.epoch = max(self.processor.epoch, epoch - 1)

    def load(self) -> Positions:
        return Positions.of(load_state(self.settings, self.processor, self.store))

    def reload(self) -> Positions:
        raise NotImplementedError("the embedded engine has no workers to lose")

    def process(self, batch: UpdateBatch) -> EpochOutput:
        self._vertices = len(self.processor.index.dictionary)
        return self.processor.process(batch)

    def commit(self, out: EpochOutput, positions: Positions) -> None:
        self.processor.commit()
        self.store.commit_epoch(
            self.processor.index,
            stored_meta(self.store, self.processor, positions, out.epoch),
            out.changes,
            self._vertices,
            event_changes=out.event_changes,
        )

    def abort(self) -> None:
        self.processor.abort()

    def expiry_due(self) -> bool:
        return self.processor.expiry_due()

    def observe(self, metrics: Metrics) -> None:
        index = self.processor.index
        metrics.index({name: len(rel) for name, rel in index.relations.items()}, index.nbytes)
        events = self.processor.events
        metrics.events(events.stored(), events.field_bytes())
        metrics.kept({name: len(m) for name, m in self.processor.kept.matches.items()})


#: Makes the engine for the settings and queries, closed when the context ends.
OpenEngine = Callable[
    [Settings, tuple[Query, ...], Metrics, Health], AbstractContextManager[ServiceEngine]
]


@contextmanager
def embedded(
    settings: Settings, queries: tuple[Query, ...], metrics: Metrics, health: Health
) -> Iterator[EmbeddedEngine]:
    """The embedded engine over the state directory's store, closed after."""
    store = StateStore.open(
        settings.state_dir or "state",
        cache_bytes=settings.rocksdb_cache_bytes,
        snapshot_ratio=settings.snapshot_ratio,
        snapshot_min_bytes=settings.snapshot_min_bytes,
    )
    try:
        yield EmbeddedEngine(settings, EpochProcessor(queries, settings), store)
    finally:
        store.close()
