"""``run --workers``: the file job on the partitioned engine, its deltas on standard output.

Each epoch of the source is processed by :class:`~monitor.distributed.delta.ShardedEpochs` and
its match deltas are written as the single process writes them (the same records, with the same
``match_id``; within an epoch the rows may come in another order, since the single process
orders them by its dense ids). What the file job of the partitioned engine does not do yet
(``--state-dir``, ``--preload``, ``--initial``, ``--output``) is refused at start, by name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from connectors.sinks import JsonLinesSink
from core.errors import InputError
from core.records import UpdateBatch, mirrored
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.sharded import Shards
from monitor.query.ast import Query
from monitor.service.match_ids import match_ids
from monitor.service.settings import Settings


@dataclass
class PartitionedTotals:
    """What a partitioned run did: epochs, updates, match deltas by query and sign."""

    epochs: int = 0
    updates: int = 0
    deltas: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: Each shard's pairs, index bytes and work at the end; rounds of calls made.
    shards: list[dict[str, int]] = field(default_factory=list)
    rounds: int = 0


def refuse_options(**given: object) -> None:
    """Refuse the file job's options the partitioned engine does not take yet, by name."""
    for name, value in given.items():
        if value:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} does not work with --workers yet; run without --workers")


def run_partitioned(
    queries: Sequence[Query],
    settings: Settings,
    batches: Iterable[UpdateBatch],
    sink: JsonLinesSink,
    shards: Shards,
) -> PartitionedTotals:
    """Every epoch of ``batches`` through the shards, its deltas to ``sink``."""
    epochs = ShardedEpochs(queries, shards, settings.max_prefixes)
    totals = PartitionedTotals()
    for batch in batches:
        epoch = epochs.epochs + 1
        for deltas in epochs.process(mirrored(batch) if settings.undirected else batch):
            diff = deltas.diff
            columns = [c.astype(np.int64) for c in deltas.columns]  # (the ids are the ids)
            if settings.emit == "appearances":
                keep = diff > 0
                columns, diff = [c[keep] for c in columns], diff[keep]
            if not diff.shape[0]:
                continue
            extra = {"match_id": match_ids(deltas.query, columns, diff.shape[0])}
            sink.write_deltas(deltas.query, epoch, deltas.variables, columns, diff, extra=extra)
            plus = int((diff > 0).sum())
            totals.deltas[(deltas.query, 1)] += plus
            totals.deltas[(deltas.query, -1)] += int(diff.shape[0]) - plus
        sink.flush()
        totals.epochs += 1
        totals.updates += batch.count
    totals.shards, totals.rounds = with_traffic(epochs.index.stats(), shards), shards.traffic.rounds
    return totals


def with_traffic(stats: list[dict[str, int]], shards: Shards) -> list[dict[str, int]]:
    """Each shard's figures with the bytes sent to it and received from it."""
    traffic = shards.traffic
    return [
        {**figures, "sent": sent, "received": received}
        for figures, sent, received in zip(stats, traffic.sent, traffic.received, strict=True)
    ]
