"""The embedded main job: edges from a file or stdin, match deltas as JSON lines.

It reads top to bottom: preload (optional), initial matches (optional), then for every epoch of
``batch_size`` updates: stage, evaluate, write the deltas, commit. Progress goes to a reporter
every few seconds and a summary at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from connectors.records import UpdateBatch, exact_batches
from connectors.sinks import JsonLinesSink
from monitor.service.epochs import EpochProcessor, QueryOutput, RunTotals


@dataclass(frozen=True)
class Progress:
    """A progress report: what has been read and produced so far."""

    updates: int
    epochs: int
    deltas: int
    seconds: float
    fraction: float | None


def run_file_job(
    processor: EpochProcessor,
    stream: Iterable[UpdateBatch],
    sink: JsonLinesSink,
    *,
    preload: Iterable[UpdateBatch] | None = None,
    initial: bool = False,
    progress: Callable[[Progress], None] | None = None,
    fraction: Callable[[], float | None] = lambda: None,
    progress_seconds: float = 5.0,
) -> RunTotals:
    """Run the job to the end of ``stream``; returns the run's totals."""
    started = time.perf_counter()
    if preload is not None:
        for batch in preload:
            processor.preload(batch)
    if initial:

        def emit_initial(out: QueryOutput) -> None:
            sink.write_deltas(out.query, 0, out.variables, out.columns, out.diff)

        processor.initial(emit_initial)
        sink.flush()
    last_report = time.perf_counter()
    totals = processor.totals
    for batch in exact_batches(stream, processor.settings.batch_size):
        out = processor.process(batch)
        for q in out.queries:
            sink.write_deltas(q.query, out.epoch, q.variables, q.columns, q.diff)
        sink.flush()
        processor.commit()
        now = time.perf_counter()
        if progress is not None and now - last_report >= progress_seconds:
            last_report = now
            progress(
                Progress(
                    totals.updates,
                    totals.epochs,
                    sum(totals.deltas.values()),
                    now - started,
                    fraction(),
                )
            )
    return totals
