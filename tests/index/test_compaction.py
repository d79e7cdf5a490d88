"""Compaction of event stores: the output is the same, byte for byte, with or without it; it
equals the oracle; and memory follows the live events, not every event ever seen.

Compaction renumbers live eids and ids in order, so nothing outside changes: a run compacting
at every commit it can (minimum 0) must publish exactly the rows, in the same order, of a run
that never compacts, and both the brute-force oracle's matches. A long stream whose window
stays ~constant (each event deleted some events after it came) keeps bytes per live event
bounded, with no growth between two points of the stream once the window is full.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.columns import python_values
from core.records import EventUpdates, UpdateBatch
from monitor.index.compaction import compact_pool, compact_store, due
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import OPS, QUERIES, Model, batch, check_epochs

COMPACTING = Settings(event_compaction_min=0)
NEVER = Settings(event_compaction_min=2**40)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, min_size=4, max_size=60), cuts=st.lists(st.integers(1, 60), max_size=8))
def test_compacting_at_every_commit_changes_no_output_row(ops: list, cuts: list[int]) -> None:  # type: ignore[type-arg]
    compacted = check_epochs(QUERIES, Model(), batch, ops, cuts, COMPACTING)
    assert compacted == check_epochs(QUERIES, Model(), batch, ops, cuts, NEVER)


def test_a_long_random_stream_compacts_many_times_and_keeps_the_output() -> None:
    rng = np.random.default_rng(5)
    ops: list[tuple[object, ...]] = []
    for i in range(2500):
        roll = rng.random()
        if roll < 0.5:
            channel = str(rng.choice(["cash", "wire", "card", f"new-{i}"]))
            ops.append(("insert", *map(int, rng.integers(0, [12, 3, 3, 4])), channel))
        elif roll < 0.9:
            ops.append(("delete", int(rng.integers(0, 12))))
        else:
            ops.append(("e+" if rng.random() < 0.6 else "e-", *map(int, rng.integers(0, 3, 2))))
    cuts = list(range(0, len(ops), 37))
    processor_outputs = check_epochs(QUERIES, Model(), batch, ops, cuts, COMPACTING)
    assert processor_outputs == check_epochs(QUERIES, Model(), batch, ops, cuts, NEVER)
    assert sum(len(rows) for rows in processor_outputs) > 100, "the check would be empty"
    processor = EpochProcessor(QUERIES, Settings(event_compaction_min=16))
    for lo in cuts:
        processor.process(batch(ops[lo : lo + 37], lo))
        processor.commit()
    store = processor.index.event_stores["transfer"]
    assert store.compactions >= 10
    assert store.size - len(store) <= max(len(store), 16)


# -- memory --------------------------------------------------------------------------------

PAIRS = parse_queries(
    'pair(a, b) := transfer(a, b) as t, transfer(b, a), t.amount >= 5, t.device != "x".'
)
WINDOW, PER_EPOCH, EPOCHS = 2000, 1000, 200


def window_batch(epoch: int, rng: np.random.Generator) -> UpdateBatch:
    """``PER_EPOCH`` new transfers (string ids never reused, a string field new per event) and
    the deletes of those ``WINDOW`` events older."""
    inserted = np.arange(epoch * PER_EPOCH, (epoch + 1) * PER_EPOCH)
    deleted = inserted[inserted >= WINDOW] - WINDOW
    n, d = inserted.shape[0], deleted.shape[0]
    ids = np.array([f"tx-{i}" for i in np.concatenate([inserted, deleted])], dtype=object)
    device = np.full(n + d, None, dtype=object)
    device[:n] = [f"device-{i}" for i in inserted]
    seq = np.arange(2 * epoch * PER_EPOCH, 2 * epoch * PER_EPOCH + n + d, dtype=np.int64)
    events = EventUpdates(
        ids,
        np.concatenate([np.ones(n, np.int8), np.full(d, -1, np.int8)]),
        seq,
        np.concatenate([rng.integers(0, 300, n), np.zeros(d, np.int64)]),
        np.concatenate([rng.integers(0, 300, n), np.zeros(d, np.int64)]),
        {
            "amount": np.concatenate([rng.integers(0, 10, n).astype(float), np.full(d, np.nan)]),
            "device": device,
        },
    )
    return UpdateBatch({}, int(seq[0]), n + d, None, {"transfer": events})


def test_memory_stays_bounded_once_the_window_is_full() -> None:
    processor = EpochProcessor(PAIRS, Settings(event_compaction_min=4096))
    rng = np.random.default_rng(0)
    held = []
    for epoch in range(EPOCHS):
        processor.process(window_batch(epoch, rng))
        processor.commit()
        held.append(sum(processor.events.breakdown().values()))
    store = processor.index.event_stores["transfer"]
    assert len(store) == WINDOW
    assert store.compactions >= EPOCHS // 10
    assert len(store.ids) == store.size <= 2 * WINDOW + 4096
    assert len(store.pool.strings) <= 2 * (2 * WINDOW + 4096)
    # Every byte of the events, the id map, the pool and the derived relations, per live event
    # (without compaction: ~15,000 at the end of this stream, and growing).
    assert max(held[EPOCHS // 2 :]) / WINDOW < 700, processor.events.breakdown()
    first, second = max(held[EPOCHS // 4 : EPOCHS // 2]), max(held[3 * EPOCHS // 4 :])
    assert second <= 1.05 * first, (first, second)


# -- the pieces ----------------------------------------------------------------------------

TWO = parse_queries(
    """
    sent(a, b) := transfer(a, b) as t, t.channel = "wire".
    seen(a, b) := login(a, b) as l, l.device != "x".
    """
)


def events(relation: str, ids: list[str], diff: int, strings: list[str | None], field: str):  # type: ignore[no-untyped-def]
    n = len(ids)
    column = np.array(strings, dtype=object) if diff > 0 else np.full(n, None, dtype=object)
    return EventUpdates(
        np.array(ids, dtype=object),
        np.full(n, diff, np.int8),
        np.arange(n, dtype=np.int64),
        np.arange(n, dtype=np.int64) % 3,
        (np.arange(n, dtype=np.int64) + 1) % 3,
        {field: column},
    )


def test_the_string_pool_keeps_what_any_relation_uses() -> None:
    processor = EpochProcessor(TWO, NEVER)
    transfers = [f"t{i}" for i in range(6)]
    logins = [f"l{i}" for i in range(4)]
    first = {
        "transfer": events("transfer", transfers, 1, [f"s{i}" for i in range(6)], "channel"),
        "login": events("login", logins, 1, ["s0", "s5", "d1", None], "device"),
    }
    processor.process(UpdateBatch({}, 0, 10, None, first))
    processor.commit()
    gone = {"transfer": events("transfer", transfers[:5], -1, [], "channel")}
    processor.process(UpdateBatch({}, 10, 5, None, gone))
    processor.commit()
    stores = processor.index.event_stores
    pool = stores["transfer"].pool
    assert pool is stores["login"].pool
    assert compact_pool(pool, stores.values()) == 4  # s1..s4: no live event has them
    assert sorted(pool.strings) == ["d1", "s0", "s5"] and pool.kept == 3
    decode = processor.index.dictionary.decode
    assert stores["login"].columns(np.arange(4, dtype=np.int32), decode)["device"].tolist() == [
        "s0",
        "s5",
        "d1",
        None,
    ]
    assert stores["transfer"].columns(np.array([5], np.int32), decode)["channel"].tolist() == ["s5"]
    live = np.flatnonzero(stores["transfer"].alive[: stores["transfer"].size]).astype(np.int32)
    assert python_values(stores["transfer"].columns(live, decode)["id"]) == ["t5"]


def test_a_staged_epoch_is_never_compacted_and_an_abort_after_a_compaction_undoes() -> None:
    processor = EpochProcessor(TWO, NEVER)
    ids = [f"t{i}" for i in range(8)]
    channels = ["wire", "cash"] * 4
    processor.process(
        UpdateBatch({}, 0, 8, None, {"transfer": events("transfer", ids, 1, channels, "channel")})
    )
    processor.commit()
    gone = {"transfer": events("transfer", ids[:6], -1, [], "channel")}
    processor.process(UpdateBatch({}, 8, 6, None, gone))
    store = processor.index.event_stores["transfer"]
    with pytest.raises(ValueError, match="staged epoch"):
        compact_store(store)
    processor.commit()
    assert due(store, 0) and list(processor.events.compact(0)) == ["transfer"]
    assert (store.size, len(store), len(store.ids), store.compactions) == (2, 2, 2, 1)
    before = processor.counts()
    again = {"transfer": events("transfer", ["t6", "t9"], -1, [], "channel")}
    out = processor.process(UpdateBatch({}, 14, 2, None, again))
    assert [(q.query, python_values(q.edges["t"]["id"]), q.diff.tolist()) for q in out.queries] == [
        ("sent", ["t6"], [-1])
    ]
    processor.abort()
    assert processor.counts() == before == {"sent": 1, "seen": 0} and len(store) == 2
    live = store.columns(np.arange(2, dtype=np.int32), processor.index.dictionary.decode)
    assert python_values(live["id"]) == ["t6", "t7"] and live["channel"].tolist() == [
        "wire",
        "cash",
    ]


def test_the_selections_of_a_relation_share_one_key_per_pair() -> None:
    """``big_ring`` reads ``transfer`` through two selections; a pair both hold has one tuple
    key, not two, and a compaction rebuilds the keys from the live pairs only."""
    processor = EpochProcessor(QUERIES, Settings(event_compaction_min=0))
    ops = [
        ("insert", 0, 1, 2, 3, "wire"),  # in both selections of big_ring (and relay's)
        ("insert", 1, 2, 3, 2, "cash"),  # in the one without the channel's test
        ("insert", 2, 3, 1, 1, "wire"),
        ("insert", 3, 1, 2, 2, "card"),  # a second event of the pair (1, 2)
    ]
    processor.process(batch(ops, 0))
    processor.commit()
    keys = processor.events.pair_keys["transfer"]
    assert keys.size - 1 == 3  # key 0 stands for no tuple
    events = [s.events for s in processor.events.selections if s.relation == "transfer"]
    assert len(events) >= 2
    assert all(processor.index.relations[n].tuple_keys[-1] is keys for n in events)
    shared = processor.events.breakdown()["events relations: tuple keys"]
    assert shared == keys.nbytes, "the shared keys are counted once"
    processor.process(batch([("delete", 0), ("delete", 3), ("delete", 1)], 4))
    processor.commit()  # compacts (minimum 0): only the pair (3, 1) is left
    rebuilt = processor.events.pair_keys["transfer"]
    assert rebuilt is not keys and rebuilt.size - 1 == 1
    assert all(processor.index.relations[n].tuple_keys[-1] is rebuilt for n in events)
