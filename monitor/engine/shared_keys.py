"""Intersecting once per distinct key tuple: prefixes that probe alike share the work.

An adjacency extender's proposals for a prefix depend on its key only, and so does whether it
holds a value. A stage that closes a cycle intersects, for every prefix, the adjacency of one
bound vertex with that of another: ``round_trip``'s six-hop ring seeded by its last hop binds
the first intermediary from the origin's successors and the third's predecessors, for 39M
prefixes on 800k events that hold 15M distinct pairs of the two (the backward paths to one
vertex share it, and most of them start at a few busy accounts). Graphflow caches the last
intersection for the next prefix of a scan (Mhedhbi and Salihoglu, VLDB 2019); on whole arrays
the same idea is a hash of the key tuples: the stage counts, proposes and intersects once per
distinct tuple, then hands each prefix its tuple's values (:func:`expanded`), and the
comparisons and join filters, which read the prefixes' other columns, run on those.

It pays where tuples repeat: :func:`distinct_probes` declines (None) a batch whose tuples are
mostly distinct, having spent one hash pass on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.index.adjacency import Probe
from monitor.index.levels import I32, I64, gather_ranges
from monitor.index.unique import first_rows

#: Below this many prefixes a stage intersects per prefix (nothing much to share).
LEAST = 4096
#: The share of distinct tuples above which the batch is intersected per prefix: the hash
#: pass, the gather and the expansion cost about what the tuples left out would have.
MOST_DISTINCT = 0.75


@dataclass(frozen=True)
class SharedProbe:
    """An extender's probe of the distinct key tuples of a batch (``probe``) and each
    prefix's tuple (``of``): what :func:`shared_counts` hands the stage, rows of it for a
    part of the batch."""

    probe: Probe
    of: npt.NDArray[np.intp]

    def __len__(self) -> int:
        return int(self.of.shape[0])

    def __getitem__(self, rows: npt.NDArray[np.integer] | slice) -> SharedProbe:
        return SharedProbe(self.probe, self.of[rows])


def distinct_keys(
    keys: list[npt.NDArray[np.integer]],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]] | None:
    """Of two adjacency key columns of a batch: the first row of each distinct pair and every
    row's pair; None where the batch is small, a key not below 2**31, or mostly distinct."""
    n = int(keys[0].shape[0])
    if len(keys) != 2 or n < LEAST:
        return None
    left, right = (np.asarray(k, np.int64) for k in keys)
    if int(left.min()) < 0 or int(right.min()) < 0 or max(left.max(), right.max()) >= 1 << 31:
        return None
    first, inverse = first_rows((left << 32) | right)
    if first.shape[0] > MOST_DISTINCT * n:
        return None
    return first, inverse


def distinct_probes(probes: list[Any]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]] | None:
    """For two adjacency probes of a batch: the first row of each distinct pair of keys and
    every row's pair (as :func:`~monitor.index.unique.first_rows`); None where the batch is
    small, its keys not two adjacency keys below 2**31, or mostly distinct."""
    if len(probes) != 2 or not all(isinstance(p, Probe) for p in probes):
        return None
    return distinct_keys([p.keys for p in probes])


def expanded(
    rows: npt.NDArray[np.integer], values: I32, inverse: npt.NDArray[np.intp], distinct: int
) -> tuple[I64, I32]:
    """Every prefix's values: ``(rows, values)`` found for the distinct tuples (``rows`` among
    ``distinct`` of them), given to each prefix whose tuple it is (``inverse``), in the order
    of the prefixes."""
    order = np.argsort(rows, kind="stable")
    counts = np.bincount(rows, minlength=distinct)
    ends = np.cumsum(counts)
    starts = ends - counts
    owner, positions = gather_ranges(starts[inverse], ends[inverse])
    return owner, values[order[positions]]
