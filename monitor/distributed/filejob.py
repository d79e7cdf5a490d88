"""``run --workers``: the file job on the partitioned engine, its deltas on standard output or in
an ``--output`` file, exactly once with ``--state-dir``.

Each epoch of the source is processed by :class:`~monitor.distributed.delta.ShardedEpochs` and
its match deltas are written as the single process writes them (the same records, with the same
``match_id``; within an epoch the rows may come in another order, since the single process
orders them by its dense ids). With ``--state-dir``, every epoch is committed in two phases
(:mod:`monitor.distributed.durable`): written and synced, prepared by every shard, recorded by
the driver, folded. A rerun after a death anywhere continues from the last recorded epoch and
writes what an uninterrupted run writes. ``--preload`` loads a graph into the shards before the
first epoch and ``--initial`` emits its matches as epoch 0, as the single process does; with a
state directory they are epoch 0, recorded once every shard wrote its snapshot.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from connectors.files import EdgeFileSource
from connectors.sinks import JsonLinesSink, OutputFile
from core.errors import StateError
from core.records import Checkpoint, exact_batches, mirrored
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.durable import DriverMeta, DriverStore
from monitor.distributed.shard_calls import Shards
from monitor.failpoints import failpoint
from monitor.query.ast import Query
from monitor.service.filejob import open_output
from monitor.service.query_output import QueryOutput
from monitor.service.settings import Settings
from monitor.service.stop import Stop, stop_on_signals

log = logging.getLogger(__name__)


@dataclass
class PartitionedTotals:
    """What a partitioned run did: epochs, updates, match deltas by query and sign."""

    epochs: int = 0
    updates: int = 0
    deltas: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: Each shard's pairs, index bytes and work at the end; rounds of calls made.
    shards: list[dict[str, int]] = field(default_factory=list)
    rounds: int = 0
    #: The epoch the run started after (0: a new run).
    resumed: int = 0
    #: Bad input lines skipped (dead letters), in the preload and the input.
    bad_lines: int = 0
    #: Updates that changed nothing, by reason; events expired; the watermark at the end.
    ignored: Counter[str] = field(default_factory=Counter)
    expired: int = 0
    watermark: float = -math.inf


@dataclass(frozen=True)
class PartitionedJob:
    """What to run: the input (opened at a checkpoint, skipping to an update), the state
    directory and the output file (None: stdout)."""

    edges: str
    #: Opens a file: ``(path, checkpoint to start at, updates to skip to)``.
    open_source: Callable[[str, Checkpoint | None, int], EdgeFileSource]
    state_dir: str | None = None
    output: str | None = None
    preload: str | None = None
    initial: bool = False
    #: Called every ``progress_seconds`` with the totals so far (and each shard's figures).
    progress: Callable[[PartitionedTotals], None] | None = None


def run_partitioned(
    queries: Sequence[Query], settings: Settings, job: PartitionedJob, shards: Shards
) -> PartitionedTotals:
    """Every epoch of the job's input through the shards, its deltas to the output."""
    epochs = ShardedEpochs(
        queries, shards, settings.max_prefixes, settings=settings, static=job.initial
    )
    store = DriverStore.open(job.state_dir) if job.state_dir else None
    try:
        wanted = _wanted(queries, settings, job, shards.count)
        meta = store.meta if store is not None else None
        sink = open_output(job.output, None if meta is None else meta.output_bytes or 0)
        totals = PartitionedTotals(resumed=max(meta.epoch, 0) if meta else 0)
        if store is not None and meta is not None and meta.epoch >= 0:
            _check_compatible(store, meta, wanted)
            _restore(store, epochs, meta)
        else:
            meta = _start(store, epochs, settings, job, wanted, sink, totals)
        _stream(store, epochs, settings, job, meta, sink, totals)
        if store is not None:
            epochs.index.close()
    finally:
        if store is not None:
            store.close()
    totals.shards = with_traffic(epochs.index.stats(), shards)
    totals.rounds = shards.traffic.rounds
    totals.ignored = epochs.index.ignored
    totals.watermark = epochs.clock.watermark
    return totals


def _wanted(
    queries: Sequence[Query], settings: Settings, job: PartitionedJob, shards: int
) -> DriverMeta:
    """A new run's record: what must hold for a later run to continue it."""
    return DriverMeta(
        position={"input": job.edges, "seq": 0, "checkpoint": None},
        output_bytes=0 if job.output is not None else None,
        queries=tuple(str(q) for q in queries),
        settings={
            "batch_size": settings.batch_size,
            "undirected": settings.undirected,
            "default_relation": settings.default_relation,
            "shards": shards,
        },
    )


def _start(
    store: DriverStore | None,
    epochs: ShardedEpochs,
    settings: Settings,
    job: PartitionedJob,
    wanted: DriverMeta,
    sink: JsonLinesSink,
    totals: PartitionedTotals,
) -> DriverMeta:
    """A new run (or one that died before its epoch 0 was recorded): mark it started, preload,
    emit the initial matches, and record epoch 0."""
    if store is not None:
        store.commit(replace(wanted, epoch=-1))
        epochs.index.restore(str(store.path), -1)  # (shards empty, or emptied)
    if job.preload is not None:
        preload = job.open_source(job.preload, None, 0)
        for batch in preload.batches(1 << 20):
            epochs.preload(mirrored(batch) if settings.undirected else batch)
        totals.bad_lines += preload.dead_letters
    if job.initial:
        epochs.initial(lambda out: _write(sink, 0, out, totals))
    sink.flush()
    meta = replace(
        wanted,
        position={**wanted.position, **epochs.position()},
        output_bytes=sink.sync() if isinstance(sink, OutputFile) else None,
    )
    if store is not None:
        epochs.index.checkpoint(0)
        failpoint("after_shards_checkpoint")
        store.commit(meta)
    return meta


def _restore(store: DriverStore, epochs: ShardedEpochs, meta: DriverMeta) -> None:
    """Every shard loads its part at the recorded epoch."""
    loading = time.perf_counter()
    pairs = epochs.index.restore(str(store.path), meta.epoch)
    epochs.restored(meta.position)
    epochs.epochs = meta.epoch
    log.info(
        "loaded state from %s: epoch %d, %d pairs on %d shards in %.2f s",
        store.path,
        meta.epoch,
        pairs,
        epochs.index.shards.count,
        time.perf_counter() - loading,
    )


def _check_compatible(store: DriverStore, meta: DriverMeta, wanted: DriverMeta) -> None:
    for name, value in wanted.settings.items():
        stored = meta.settings.get(name)
        if stored != value:
            flag = f"--{name.replace('_', '-')}"
            raise StateError(
                f"state in {store.path} was built with {name}={stored!r}, this run has "
                f"{name}={value!r}; rerun with the same {flag}, or give a new --state-dir"
            )
    if meta.position.get("input") != wanted.position["input"]:
        raise StateError(
            f"state in {store.path} was built from input {meta.position.get('input')!r}, this "
            f"run reads {wanted.position['input']!r}; rerun on the same input to continue, or "
            "give a new --state-dir"
        )
    if (meta.output_bytes is None) != (wanted.output_bytes is None):
        had = "with" if meta.output_bytes is not None else "without"
        raise StateError(
            f"state in {store.path} was built {had} --output; rerun the same way, or give a "
            "new --state-dir"
        )
    if meta.queries != wanted.queries:
        raise StateError(
            f"state in {store.path} was built for other queries; the partitioned engine "
            "continues only the same queries: rerun with them, or give a new --state-dir"
        )


def _stream(
    store: DriverStore | None,
    epochs: ShardedEpochs,
    settings: Settings,
    job: PartitionedJob,
    meta: DriverMeta,
    sink: JsonLinesSink,
    totals: PartitionedTotals,
) -> None:
    checkpoint = meta.position.get("checkpoint")
    start = Checkpoint.from_dict(checkpoint) if checkpoint else None
    source = job.open_source(job.edges, start, int(meta.position.get("seq", 0)))
    last_report = time.perf_counter()
    with stop_on_signals():
        for batch in exact_batches(source.batches(settings.batch_size), settings.batch_size):
            epoch = epochs.epochs + 1
            deltas = epochs.evaluate(mirrored(batch) if settings.undirected else batch)
            for out in epochs.outputs(deltas):
                _write(sink, epoch, out, totals)
            failpoint("before_output_sync")
            sink.flush()
            length = sink.sync() if isinstance(sink, OutputFile) else None
            failpoint("after_output_sync")
            if store is not None:
                epochs.index.prepare(epoch)
                failpoint("after_shards_prepare")
                meta = replace(
                    meta,
                    epoch=epoch,
                    position={
                        "input": job.edges,
                        "seq": batch.first_seq + batch.count,
                        "checkpoint": batch.resume.to_dict() if batch.resume else None,
                        **epochs.position(),
                    },
                    output_bytes=length,
                )
                store.commit(meta)
                failpoint("after_epoch_commit")
            if epochs.events is not None:
                totals.expired += sum(int(e.shape[0]) for e in epochs.events.expired.values())
            epochs.commit()
            totals.epochs += 1
            totals.updates += batch.count
            now = time.perf_counter()
            if job.progress is not None and now - last_report >= settings.progress_seconds:
                last_report = now
                totals.shards = with_traffic(epochs.index.stats(), epochs.index.shards)
                job.progress(totals)
            if Stop.requested:
                log.warning("stopping after epoch %d as requested", epoch)
                break
    totals.bad_lines += source.dead_letters
    if isinstance(sink, OutputFile):
        sink.close()


def _write(sink: JsonLinesSink, epoch: int, out: QueryOutput, totals: PartitionedTotals) -> None:
    """Write a query's deltas of an epoch as the single process writes them."""
    sink.write_deltas(
        out.query, epoch, out.variables, out.columns, out.diff, out.edges or None, out.extra
    )
    plus = int((out.diff > 0).sum())
    totals.deltas[(out.query, 1)] += plus
    totals.deltas[(out.query, -1)] += int(out.diff.shape[0]) - plus


def with_traffic(stats: list[dict[str, int]], shards: Shards) -> list[dict[str, int]]:
    """Each shard's figures with the bytes sent to it and received from it."""
    traffic = shards.traffic
    return [
        {**figures, "sent": sent, "received": received}
        for figures, sent, received in zip(stats, traffic.sent, traffic.received, strict=True)
    ]
