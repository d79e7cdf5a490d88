"""The embedded main job: edges from a file or stdin, match deltas as JSON lines.

It reads top to bottom: recover the stored state (if a state directory is given), preload and
emit the initial matches (a new run only), then for every epoch of ``batch_size`` updates:
stage, evaluate, write the deltas, make them durable, commit the index, and commit the epoch to
the store. Progress goes to a reporter every few seconds.

Exactly-once file output: the store records, with every epoch, the output file's length after
that epoch. On restart the file is cut back to that length (dropping the lines of an epoch that
was written but not committed) and the input is read on from the stored position; epochs are cut
by update count, so the resumed run writes the same lines an uninterrupted one would.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from connectors.files import EdgeFileSource
from connectors.sinks import JsonLinesSink, OutputFile
from core.errors import StateError
from core.records import Checkpoint, exact_batches
from monitor.failpoints import failpoint
from monitor.index.store import StateStore
from monitor.index.stored_meta import StoredMeta
from monitor.query.ast import Query
from monitor.query.parser import parse_queries
from monitor.service.allocator import keep_freed_memory
from monitor.service.epoch_output import RunTotals
from monitor.service.epochs import EpochProcessor
from monitor.service.query_output import QueryOutput
from monitor.service.stop import Stop, stop_on_signals

log = logging.getLogger(__name__)

#: Opens the input: ``(path, checkpoint to start at, updates to skip to)``; the source reads the
#: relations' arities from the processor's :attr:`~EpochProcessor.arities` (the queries', and
#: the index's once restored or preloaded).
SourceOpener = Callable[[str, Checkpoint | None, int], EdgeFileSource]


@dataclass(frozen=True)
class Progress:
    """A progress report: what has been read and produced so far."""

    updates: int
    epochs: int
    deltas: int
    seconds: float
    fraction: float | None


@dataclass(frozen=True)
class FileJob:
    """What to run: input, optional preload, state directory and output file."""

    edges: str
    open_source: SourceOpener
    preload: str | None = None
    initial: bool = False
    state_dir: str | None = None
    output: str | None = None
    progress: Callable[[Progress], None] | None = None
    progress_seconds: float = 5.0
    sources: list[EdgeFileSource] = field(default_factory=list)


def run_file_job(processor: EpochProcessor, job: FileJob) -> RunTotals:
    """Run the job to the end of its input (or a stop request); returns the run's totals."""
    started = time.perf_counter()
    settings = processor.settings
    keep_freed_memory(settings.malloc_keep_bytes)
    store = (
        StateStore.open(
            job.state_dir,
            cache_bytes=settings.rocksdb_cache_bytes,
            snapshot_ratio=settings.snapshot_ratio,
            snapshot_min_bytes=settings.snapshot_min_bytes,
        )
        if job.state_dir
        else None
    )
    try:
        meta = _recover(store, processor, job)
        sink = _open_sink(job, meta)
        if meta is None or meta.epoch < 0:
            meta = _start(store, processor, job, sink)
        else:
            meta = _reconcile_queries(store, processor, meta, sink)
        _stream(store, processor, job, sink, meta, started)
        sink.flush()
        if isinstance(sink, OutputFile):
            sink.close()
    finally:
        if store is not None:
            store.close()
    return processor.totals


def _recover(
    store: StateStore | None, processor: EpochProcessor, job: FileJob
) -> StoredMeta | None:
    """Load the stored state into the processor; the stored metadata, or None if none."""
    if store is None or store.meta is None:
        return None
    meta = store.meta
    _check_compatible(store, meta, processor, job)
    loading = time.perf_counter()
    processor.restore(store)
    processor.epoch = max(meta.epoch, 0)
    log.info(
        "loaded state from %s: epoch %d, %d tuples, %d vertices in %.2f s",
        store.path,
        meta.epoch,
        processor.index.edge_count(),
        len(processor.index.dictionary),
        time.perf_counter() - loading,
    )
    return meta


def _check_compatible(
    store: StateStore, meta: StoredMeta, processor: EpochProcessor, job: FileJob
) -> None:
    wanted = _state_settings(processor)
    for name, value in wanted.items():
        stored = meta.settings.get(name)
        if stored != value:
            raise StateError(
                f"state in {store.path} was built with {name}={stored!r}, this run has "
                f"{name}={value!r}; rerun with the same setting, or give a new --state-dir"
            )
    stored_input = meta.position.get("input")
    if stored_input is not None and stored_input != job.edges:
        raise StateError(
            f"state in {store.path} was built from input {stored_input!r}, this run reads "
            f"{job.edges!r}; rerun on the same input to continue, or give a new --state-dir"
        )
    if (meta.output_bytes is None) != (job.output is None):
        had = "with" if meta.output_bytes is not None else "without"
        raise StateError(
            f"state in {store.path} was built {had} --output; rerun the same way, or give a "
            f"new --state-dir"
        )


def _state_settings(processor: EpochProcessor) -> dict[str, object]:
    s = processor.settings
    return {
        "batch_size": s.batch_size,
        "undirected": s.undirected,
        "default_relation": s.default_relation,
    }


def _open_sink(job: FileJob, meta: StoredMeta | None) -> JsonLinesSink:
    return open_output(job.output, None if meta is None else meta.output_bytes or 0)


def open_output(path: str | None, committed: int | None) -> JsonLinesSink:
    """Standard output (``path`` None), or the output file cut back to the ``committed`` bytes
    of the stored state (None: a new state, and the file must then be empty or absent)."""
    if path is None:
        return JsonLinesSink(sys.stdout.buffer)
    if committed is None:
        try:
            with open(path, "rb") as existing:
                if existing.read(1):
                    raise StateError(
                        f"output file {path} already has content that no state directory "
                        f"accounts for; remove it or choose another --output"
                    )
        except FileNotFoundError:
            pass
    try:
        return OutputFile(path, committed or 0)
    except OSError as error:
        raise StateError(f"{error}; restore the file or give a new --state-dir") from error


def _sync(sink: JsonLinesSink) -> int | None:
    sink.flush()
    return sink.sync() if isinstance(sink, OutputFile) else None


def _start(
    store: StateStore | None, processor: EpochProcessor, job: FileJob, sink: JsonLinesSink
) -> StoredMeta:
    """A new run: mark the state as started, preload, emit the initial matches (epoch 0)."""
    meta = StoredMeta(
        epoch=-1,
        position={"input": job.edges, "seq": 0, "checkpoint": None},
        output_bytes=0 if job.output is not None else None,
        queries=tuple(str(q) for q in processor.queries),
        settings=_state_settings(processor),
    )
    if store is not None:
        meta = store.commit_epoch(processor.index, meta, {}, len(processor.index.dictionary))
    if job.preload is None and not job.initial:
        return meta
    if job.preload is not None:
        preload = job.open_source(job.preload, None, 0)
        job.sources.append(preload)
        for batch in preload.batches(1 << 20):
            processor.preload(batch)
    if job.initial:
        processor.initial(lambda out: _write(sink, out, 0))
    meta = StoredMeta(
        epoch=0,
        position={**meta.position, "clock": processor.clock.to_dict()},
        output_bytes=_sync(sink),
        queries=meta.queries,
        settings=meta.settings,
    )
    if store is not None:
        meta = store.commit_epoch(processor.index, meta, {}, 0, snapshot=True)
    return meta


def _reconcile_queries(
    store: StateStore | None, processor: EpochProcessor, meta: StoredMeta, sink: JsonLinesSink
) -> StoredMeta:
    """Bring a restarted run's result sets in line with a changed query set.

    A query that is new, or whose text changed, gets its current matches emitted as +1 deltas
    (after -1 deltas for the matches of its old text) with the epoch number of the stored
    state; a query no longer asked for just stops. Everything is committed before streaming on.
    """
    current = {q.name: q for q in processor.queries}
    stored: dict[str, Query] = {}
    for text in meta.queries:
        (query,) = parse_queries(text)
        stored[query.name] = query
    changed = [n for n, q in current.items() if n not in stored or str(stored[n]) != str(q)]
    dropped = [n for n in stored if n not in current]
    if not changed and not dropped:
        return meta
    for name in changed:
        if name in stored:
            processor.initial(
                lambda out: _retract(processor, sink, out, meta.epoch), queries=[stored[name]]
            )
        processor.initial(lambda out: _write(sink, out, meta.epoch), queries=[current[name]])
    log.warning(
        "query set changed since epoch %d: new or changed %s, dropped %s; their current "
        "matches were emitted at epoch %d",
        meta.epoch,
        changed or "none",
        dropped or "none",
        meta.epoch,
    )
    new_meta = StoredMeta(
        epoch=meta.epoch,
        position=meta.position,
        output_bytes=_sync(sink),
        queries=tuple(str(q) for q in processor.queries),
        settings=meta.settings,
    )
    if store is None:
        return new_meta
    return store.commit_epoch(processor.index, new_meta, {}, len(processor.index.dictionary))


def _retract(processor: EpochProcessor, sink: JsonLinesSink, out: QueryOutput, epoch: int) -> None:
    """-1 deltas for the matches of a query whose text changed (none with ``emit`` of
    appearances only)."""
    if processor.settings.emit != "appearances":
        _write(sink, out, epoch, sign=-1)


def _write(sink: JsonLinesSink, out: QueryOutput, epoch: int, sign: int = 1) -> None:
    sink.write_deltas(
        out.query,
        epoch,
        out.variables,
        out.columns,
        sign * out.diff,
        edges=out.edges or None,
        extra=out.extra,
    )


def _stream(
    store: StateStore | None,
    processor: EpochProcessor,
    job: FileJob,
    sink: JsonLinesSink,
    meta: StoredMeta,
    started: float,
) -> None:
    position = meta.position
    checkpoint = position.get("checkpoint")
    start = Checkpoint.from_dict(checkpoint) if checkpoint else None
    source = job.open_source(job.edges, start, int(position.get("seq", 0)))
    job.sources.append(source)
    last_report = time.perf_counter()
    totals = processor.totals
    with stop_on_signals():
        for batch in exact_batches(
            source.batches(processor.settings.batch_size), processor.settings.batch_size
        ):
            vertices_before = len(processor.index.dictionary)
            out = processor.process(batch)
            for q in out.queries:
                _write(sink, q, out.epoch)
            failpoint("before_output_sync")
            length = _sync(sink)
            failpoint("after_output_sync")
            processor.commit()
            if store is not None:
                end = batch.first_seq + batch.count
                meta = StoredMeta(
                    epoch=out.epoch,
                    position={
                        "input": job.edges,
                        "seq": end,
                        "checkpoint": batch.resume.to_dict() if batch.resume else None,
                        "clock": processor.clock.to_dict(),
                    },
                    output_bytes=length,
                    queries=meta.queries,
                    settings=meta.settings,
                )
                meta = store.commit_epoch(
                    processor.index,
                    meta,
                    out.changes,
                    vertices_before,
                    event_changes=out.event_changes,
                )
                failpoint("after_epoch_commit")
            now = time.perf_counter()
            if job.progress is not None and now - last_report >= job.progress_seconds:
                last_report = now
                total = source.total_bytes
                job.progress(
                    Progress(
                        totals.updates,
                        totals.epochs,
                        sum(totals.deltas.values()),
                        now - started,
                        source.bytes_read / total if total else None,
                    )
                )
            if Stop.requested:
                log.warning("stopping after epoch %d as requested", out.epoch)
                break
