"""Netting an epoch's updates of one relation: what each key's updates change, in stream order.

Per key (a packed tuple, or an event id) the updates take effect one after the other with set
semantics: inserting a present key or deleting an absent one changes nothing and is counted
(``duplicate_insert``, ``absent_delete``). The epoch's change of a key is its state after its
last update minus its state before the epoch, whatever the epoch boundaries; updates that
changed the set but were undone by a later update of the same epoch are counted as ``netted``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from monitor.index.levels import I8, I64


@dataclass(frozen=True)
class Netted:
    """The effective changes: ``rows`` index each key's last update that changed the set (an
    insert's fields come from it; later duplicates are ignored), ``keys`` and ``diff`` (+1
    inserted, -1 deleted) per change, ``seq`` the sequence number of the key's last update."""

    rows: npt.NDArray[np.intp]
    keys: I64
    diff: I8
    seq: I64
    #: Per key present before and after the epoch but deleted in between (an event deleted and
    #: inserted again is a new event): its row is the re-insert's.
    reborn: I64 = field(default_factory=lambda: np.empty(0, np.int64))
    reborn_rows: npt.NDArray[np.intp] = field(default_factory=lambda: np.empty(0, np.intp))


def net(
    keys: I64,
    insert: npt.NDArray[np.bool_],
    seq: I64,
    present: Callable[[I64], npt.NDArray[np.bool_]],
    ignored: Counter[str],
) -> Netted:
    """The effective changes of updates ``(keys, insert, seq)``; ``present(unique_keys)`` says
    which keys were present before the epoch. Ignored updates are added to ``ignored``."""
    n = keys.shape[0]
    if n == 0:
        empty = np.empty(0, np.intp)
        return Netted(empty, np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.int64))
    if bool((seq[1:] >= seq[:-1]).all()):  # in stream order (as a batch comes): by key only
        ascending = bool((keys[1:] > keys[:-1]).all())
        order = np.arange(n) if ascending else np.argsort(keys, kind="stable")
    else:
        order = np.lexsort((seq, keys))
    sorted_keys, sorted_insert = keys[order], insert[order]
    first = np.ones(n, np.bool_)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    starts = np.flatnonzero(first)
    was = np.asarray(present(sorted_keys[starts]), np.bool_)
    before = np.empty(n, np.bool_)
    before[1:] = sorted_insert[:-1]
    before[starts] = was
    noop = sorted_insert == before
    ignored["duplicate_insert"] += int((noop & sorted_insert).sum())
    ignored["absent_delete"] += int((noop & ~sorted_insert).sum())
    if starts.shape[0] == n:  # distinct keys: each update changes its key or is ignored
        ignored["netted"] += 0  # nothing nets out, none is reborn: no reductions
        changed = np.flatnonzero(~noop)
        rows = order[changed]
        diff = np.where(sorted_insert[changed], np.int8(1), np.int8(-1)).astype(np.int8)
        return Netted(rows, sorted_keys[changed], diff, seq[rows].astype(np.int64))
    last = np.ones(n, np.bool_)
    last[:-1] = first[1:]
    final = sorted_insert[last]
    effective = final != was
    changes = np.add.reduceat((~noop).astype(np.int64), starts)
    ignored["netted"] += int(changes.sum()) - int(effective.sum())
    deciding = order[np.flatnonzero(last)[effective]]
    changing = np.where(noop, -1, np.arange(n))
    last_change = np.maximum.reduceat(changing, starts)[effective]
    rows = order[last_change]
    diff = np.where(final[effective], np.int8(1), np.int8(-1)).astype(np.int8)
    deleted = np.logical_or.reduceat(~noop & ~sorted_insert, starts)
    again = was & final & deleted
    last_insert = np.maximum.reduceat(changing, starts)[again]
    return Netted(
        rows,
        keys[deciding],
        diff,
        seq[deciding].astype(np.int64),
        sorted_keys[starts[again]],
        order[last_insert],
    )
