"""Netting an epoch's updates against a per-key replay of them, one update after the other.

Keys drawn from a small range (repeated updates of a key, in and out of stream order) and from
a large one (distinct keys, the fast path a batch of new ids takes), some present before.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.index.netting import net


def replay(
    keys: list[int], insert: list[bool], seq: list[int], present: set[int]
) -> tuple[dict[int, tuple[int, int, int]], dict[int, int], Counter[str]]:
    """Per key changed: (row of its last change, diff, seq of its last update); per key reborn
    its re-insert's row; the updates ignored."""
    ignored: Counter[str] = Counter()
    by_key: dict[int, list[int]] = {}
    for i in sorted(range(len(keys)), key=lambda i: (seq[i], i)):
        by_key.setdefault(keys[i], []).append(i)
    changed, reborn = {}, {}
    for key, rows in by_key.items():
        was = state = key in present
        changes, last_change, deleted = 0, -1, False
        for i in rows:
            if insert[i] != state:
                state, changes, last_change = insert[i], changes + 1, i
                deleted |= not insert[i]
            else:
                ignored["duplicate_insert" if insert[i] else "absent_delete"] += 1
        if state != was:
            changed[key] = (last_change, 1 if state else -1, seq[rows[-1]])
        elif was and deleted:
            reborn[key] = last_change
        ignored["netted"] += changes - (state != was)
    return changed, reborn, ignored


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 40),
    span=st.sampled_from([5, 40, 10**9]),
    in_order=st.booleans(),
)
def test_net_is_the_replay_of_each_keys_updates(
    seed: int, n: int, span: int, in_order: bool
) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, span, n).astype(np.int64)
    if span > n and rng.random() < 0.5:  # distinct keys, ascending or not
        keys = np.sort(keys) if rng.random() < 0.5 else keys
    insert = rng.random(n) < 0.7
    seq = np.arange(n, dtype=np.int64) if in_order else rng.integers(0, n + 1, n).astype(np.int64)
    present = {int(k) for k in keys if rng.random() < 0.4}
    ignored: Counter[str] = Counter()
    netted = net(keys, insert, seq, lambda k: np.isin(k, list(present)), ignored)
    changed, reborn, expected_ignored = replay(
        keys.tolist(), insert.tolist(), seq.tolist(), present
    )
    got = {
        int(k): (int(r), int(d), int(s))
        for k, r, d, s in zip(netted.keys, netted.rows, netted.diff, netted.seq, strict=True)
    }
    assert got == changed
    assert dict(zip(netted.reborn.tolist(), netted.reborn_rows.tolist(), strict=True)) == reborn
    assert +ignored == +expected_ignored
