"""The account table of the typologies benchmark (``to_new_account``, issue #35).

Every account of the payments stream (:mod:`bench.timed_stream`) has a record: a risk (``high``
for 2% of them) and an opening date, spread over the year before the stream and the stream's
own days (so that some receivers are new when paid). The table arrives first, whole, as a
compacted topic read from its beginning would; then, among the transfers, one account in
``UPDATE_EVERY`` transfers gets a new record (its risk drawn again), which re-evaluates the
matches it touches. In process the records are :class:`~core.records.EventUpdates` of relation
``account``; end to end they are JSON lines keyed by ``key``, as a user's would be.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.timed_stream import START_MS, Texts, TimedStream, format_rows, json_lines
from core.columns import python_values
from core.fields import to_column
from core.records import EventUpdates

I64 = npt.NDArray[np.int64]
DAY_MS = 86_400_000
#: One account's new record every this many transfers.
UPDATE_EVERY = 50
HIGH_RISK = 0.02
RISKS = ("low", "high")


@dataclass(frozen=True)
class Accounts:
    """The table (record ``k`` is account ``k``'s) and the updates among the transfers."""

    risk: I64
    opened: I64
    #: Per update: the transfer position it follows, its account, its new risk.
    at: I64
    keys: I64
    new_risk: I64

    def __len__(self) -> int:
        return int(self.risk.shape[0])


def accounts_of(stream: TimedStream, accounts: int, days: float, seed: int) -> Accounts:
    rng = np.random.default_rng(seed + 1000)
    risk = (rng.random(accounts) < HIGH_RISK).astype(np.int64)
    earliest = START_MS - 365 * DAY_MS
    span = int((365 + days) * DAY_MS)
    opened = earliest + rng.integers(0, span, accounts, dtype=np.int64)
    updates = len(stream) // UPDATE_EVERY
    at = np.sort(rng.integers(0, len(stream), updates, dtype=np.int64))
    keys = rng.integers(0, accounts, updates, dtype=np.int64)
    new_risk = (rng.random(updates) < HIGH_RISK).astype(np.int64)
    return Accounts(risk, opened, at, keys, new_risk)


def records(keys: I64, risk: I64, opened: I64, first_seq: int) -> EventUpdates:
    """Account records as the decoders give them: id, source and destination the key."""
    n = keys.shape[0]
    return EventUpdates(
        keys.astype(object),
        np.ones(n, np.int8),
        np.arange(first_seq, first_seq + n, dtype=np.int64),
        keys,
        keys,
        {
            "risk": to_column("string", [RISKS[r] for r in risk.tolist()]),
            "opened": opened.astype(np.float64),
        },
    )


def concat(parts: list[EventUpdates]) -> EventUpdates:
    """Account records one after another (the table's last ones, then updates)."""
    return EventUpdates(
        np.concatenate([p.ids for p in parts]),
        np.concatenate([p.diff for p in parts]),
        np.concatenate([p.seq for p in parts]),
        np.concatenate([p.src for p in parts]),
        np.concatenate([p.dst for p in parts]),
        {
            "risk": to_column(
                "string", [v for p in parts for v in python_values(p.fields["risk"])]
            ),
            "opened": np.concatenate([p.fields["opened"] for p in parts]),
        },
    )


def table_lines(keys: I64, risk: I64, opened: I64) -> bytes:
    return format_rows(
        b'{"relation":"account","key":',
        keys,
        b',"risk":"',
        Texts(risk, tuple(r.encode() for r in RISKS)),
        b'","opened":',
        opened,
        b"}\n",
    )


def positions(table: Accounts, transfers: int) -> tuple[I64, I64]:
    """Where each transfer and each update stands in the stream of records: the table first,
    then the transfers, each update right after the transfer it follows."""
    before = np.searchsorted(table.at, np.arange(transfers), side="left")
    transfer_at = len(table) + np.arange(transfers) + before
    update_at = len(table) + table.at + 1 + np.arange(table.at.shape[0])
    return transfer_at.astype(np.int64), update_at.astype(np.int64)


def write_with_table(stream: TimedStream, table: Accounts, path: Path) -> None:
    """The table, then the transfers with the updates among them (:func:`positions`), as JSON
    lines (unless ``path`` is there)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    keys = np.arange(len(table), dtype=np.int64)
    chunk = 1_000_000
    with part.open("wb") as handle:
        for lo in range(0, len(table), chunk):
            hi = min(lo + chunk, len(table))
            handle.write(table_lines(keys[lo:hi], table.risk[lo:hi], table.opened[lo:hi]))
        updates = table_lines(table.keys, table.new_risk, table.opened[table.keys])
        lines = updates.split(b"\n")[:-1]
        for lo in range(0, len(stream), chunk):
            hi = min(lo + chunk, len(stream))
            merged = json_lines(stream, lo, hi).split(b"\n")[:-1]
            mine = np.flatnonzero((table.at >= lo) & (table.at < hi))
            # each update after its transfer: insert from the last, so earlier places hold
            for j in mine[::-1].tolist():
                merged.insert(int(table.at[j]) - lo + 1, lines[j])
            handle.write(b"\n".join(merged) + b"\n")
    part.replace(path)
