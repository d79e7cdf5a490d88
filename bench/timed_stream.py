"""A timestamped payments stream, whole-array numpy: generated, sliced into batches, written.

``timed_payments`` makes ``n`` transfers over ``days`` simulated days: accounts with power-law
activity (Zipf-like choice of payers and payees, as ``bench.payments``), lognormal amounts in
whole cents, string ids ``tx-N`` (made per batch, see :func:`batch`), and a time ``ts`` in
milliseconds since the epoch. Stream order is the order of arrival; one event in ten arrives
late, its ``ts`` its arrival time minus a delay below ``lateness`` ms, so ``ts`` increases
with a little disorder and no event is older than the latest ``ts`` seen minus ``lateness``.

Planted at known positions and times, on the even positions, each position used once:

- *layering rings*: three transfers ``a -> b -> c -> a`` of 1,000 or more, ``ts`` strictly
  increasing and spread over hours (never more than a quarter of a day), distinct accounts:
  each is a match of ``layering_ring``;
- *pass-throughs*: ``a -> b`` then, at the next position, ``b -> c`` of at least 95% of its
  amount, both at their arrival time (no delay): each is a match of ``pass_through``.

Background transfers make matches of both queries too (hubs pass money on all the time), so
the counts are at least the planted ones. :func:`csv_lines` writes the stream for Flink,
:func:`json_lines` for ``subgraph-monitor run``; both build the text with array operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.records import EventUpdates, UpdateBatch

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Texts:
    """A column of texts of a few kinds for :func:`format_rows`: row ``i`` is
    ``choices[codes[i]]``."""

    codes: I64
    choices: tuple[bytes, ...]


#: A piece of a row of text (:func:`format_rows`).
Part = bytes | I64 | tuple[I64, int] | Texts
#: 2026-01-01T00:00:00Z: the stream's first moment, in milliseconds since the epoch.
START_MS = 1_767_225_600_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class TimedStream:
    """The transfers in stream order, and the positions of the planted patterns."""

    src: I64
    dst: I64
    cents: I64
    ts: I64
    #: Positions of the planted rings' three transfers, one row per ring (t1, t2, t3).
    rings: I64
    #: Positions of the planted pass-throughs' two transfers, one row each (t1, t2).
    passes: I64

    def __len__(self) -> int:
        return int(self.src.shape[0])

    @property
    def amount(self) -> npt.NDArray[np.float64]:
        return self.cents / 100.0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.src, self.dst, self.cents, self.ts))


def timed_payments(
    n: int,
    days: float,
    accounts: int,
    seed: int,
    lateness_ms: int = 5_000,
    plant_every: int = 2_000,
) -> TimedStream:
    """``n`` transfers over ``days`` days; one ring and one pass-through per ``plant_every``."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, accounts + 1) ** 0.8
    weights /= weights.sum()
    src = rng.choice(accounts, n, p=weights)
    dst = rng.choice(accounts, n, p=weights)
    cents = np.round(rng.lognormal(5.5, 1.6, n) * 100).astype(np.int64)
    arrival = np.sort(rng.integers(0, int(days * DAY_MS), n)) + START_MS
    late = rng.random(n) < 0.1  # one in ten arrives up to lateness_ms after its time
    ts = arrival - late * rng.integers(0, max(lateness_ms, 1), n)
    planted = max(n // plant_every, 1) if n >= 8 * plant_every else 0
    rings, passes = _positions(rng, n, planted, int(n / days / 4))
    _plant_rings(rng, rings, src, dst, cents, accounts)
    _plant_passes(rng, passes, src, dst, cents, accounts)
    ts[rings] = arrival[rings]
    ts[passes] = arrival[passes]
    at = ts[rings]  # keep the patterns that match (a rare ring may span too long a time)
    rings = rings[(at[:, 0] < at[:, 1]) & (at[:, 1] < at[:, 2]) & (at[:, 2] - at[:, 0] <= DAY_MS)]
    passes = passes[ts[passes[:, 1]] - ts[passes[:, 0]] <= 10 * 60_000]
    return TimedStream(src, dst, cents, ts, rings, passes)


def _positions(rng: np.random.Generator, n: int, planted: int, span: int) -> tuple[I64, I64]:
    """Rows of positions of ``planted`` rings and pass-throughs. Every planted event sits at its
    own even position (a pass-through also at the odd one after it); a ring's three transfers
    are ``k`` planted positions apart, rings interleaved so that one spans about ``span``
    positions."""
    if planted == 0:
        empty = np.empty((0, 3), np.int64)
        return empty, empty[:, :2]
    slots = np.sort(rng.choice(n // 2, 4 * planted, replace=False)) * 2
    is_ring = np.zeros(4 * planted, np.bool_)
    is_ring[rng.choice(4 * planted, 3 * planted, replace=False)] = True
    ring_slots, pass_slots = slots[is_ring], slots[~is_ring]
    k = max(1, min(planted, 3 * span * planted // (2 * n)))
    whole = planted // k * k
    rings = ring_slots[: 3 * whole].reshape(-1, 3, k).transpose(0, 2, 1).reshape(-1, 3)
    passes = np.stack([pass_slots, pass_slots + 1], axis=1)
    return rings.astype(np.int64), passes.astype(np.int64)


def _three_accounts(rng: np.random.Generator, m: int, accounts: int) -> tuple[I64, I64, I64]:
    """``m`` triples of pairwise different accounts."""
    a = rng.integers(0, accounts, m)
    first = rng.integers(1, accounts // 2, m)
    b = (a + first) % accounts
    c = (b + rng.integers(1, accounts // 2, m)) % accounts
    return a, b, c


def _plant_rings(
    rng: np.random.Generator, rows: I64, src: I64, dst: I64, cents: I64, accounts: int
) -> None:
    a, b, c = _three_accounts(rng, rows.shape[0], accounts)
    src[rows] = np.stack([a, b, c], axis=1)
    dst[rows] = np.stack([b, c, a], axis=1)
    big = rng.integers(100_000, 1_000_000, rows.shape[0])  # 1,000.00 to 10,000.00
    cents[rows] = np.stack([big, big * 9 // 10, big * 8 // 10], axis=1).clip(min=100_000)


def _plant_passes(
    rng: np.random.Generator, rows: I64, src: I64, dst: I64, cents: I64, accounts: int
) -> None:
    a, b, c = _three_accounts(rng, rows.shape[0], accounts)
    src[rows] = np.stack([a, b], axis=1)
    dst[rows] = np.stack([b, c], axis=1)
    first = cents[rows[:, 0]]
    cents[rows[:, 1]] = -(-first * 95 // 100)  # 95% of it, rounded up: at least 0.9 of it


def batch(stream: TimedStream, lo: int, hi: int) -> UpdateBatch:
    """Positions ``lo..hi`` as one batch of inserted events with ids ``tx-N``, amounts and ts."""
    n = hi - lo
    ids = np.char.add("tx-", np.arange(lo, hi).astype(str)).astype(object)
    fields = {"amount": stream.cents[lo:hi] / 100.0, "ts": stream.ts[lo:hi].astype(np.float64)}
    events = EventUpdates(
        ids,
        np.ones(n, np.int8),
        np.arange(lo, hi, dtype=np.int64),
        stream.src[lo:hi],
        stream.dst[lo:hi],
        fields,
    )
    return UpdateBatch({}, lo, n, None, {"transfer": events})


def csv_lines(stream: TimedStream, lo: int = 0, hi: int | None = None) -> bytes:
    """``id,src,dst,amount,ts`` per transfer (``7,12,40,1234.56,1767225600000``; no header)."""
    s = slice(lo, hi)
    ids = np.arange(len(stream))[s]
    cents = stream.cents[s]
    return format_rows(
        *(ids, b",", stream.src[s], b",", stream.dst[s], b",", cents // 100, b"."),
        *((cents % 100, 2), b",", stream.ts[s], b"\n"),
    )


def json_lines(stream: TimedStream, lo: int = 0, hi: int | None = None) -> bytes:
    """One event record per transfer, as ``subgraph-monitor run`` reads them."""
    s = slice(lo, hi)
    ids = np.arange(len(stream))[s]
    cents = stream.cents[s]
    return format_rows(
        *(b'{"op":"insert","relation":"transfer","id":"tx-', ids, b'","src":', stream.src[s]),
        *(b',"dst":', stream.dst[s], b',"amount":', cents // 100, b".", (cents % 100, 2)),
        *(b',"ts":', stream.ts[s], b"}\n"),
    )


def format_rows(*parts: Part) -> bytes:
    """Rows of text, each the concatenation of ``parts``: literal bytes, a column of
    non-negative integers in decimal, ``(column, width)`` zero-padded to ``width`` digits, or
    :class:`Texts`. A few passes over the columns per digit or letter, in numpy (no Python loop
    per row)."""
    rows = next(_column(p).shape[0] for p in parts if not isinstance(p, bytes))
    widths: list[I64] = []
    for part in parts:
        if isinstance(part, bytes):
            widths.append(np.full(rows, len(part), np.int64))
        elif isinstance(part, Texts):
            widths.append(np.array([len(c) for c in part.choices], np.int64)[part.codes])
        else:
            values, least = part if isinstance(part, tuple) else (part, 1)
            widths.append(np.maximum(_digits(values), least))
    ends = np.cumsum(np.sum(widths, axis=0))
    out = np.empty(int(ends[-1]) if rows else 0, np.uint8)
    at = ends - np.sum(widths, axis=0)
    for part, width in zip(parts, widths, strict=True):
        if isinstance(part, bytes):
            for k, byte in enumerate(part):
                out[at + k] = byte
        elif isinstance(part, Texts):
            longest = max((len(c) for c in part.choices), default=0)
            letters = np.zeros((len(part.choices), longest), np.uint8)
            for code, text in enumerate(part.choices):
                letters[code, : len(text)] = np.frombuffer(text, np.uint8)
            for k in range(letters.shape[1]):
                write = width > k
                out[at[write] + k] = letters[part.codes[write], k]
        else:
            values = part[0] if isinstance(part, tuple) else part
            for k in range(int(width.max(initial=0))):
                place = width - 1 - k  # the power of ten written at offset k
                write = place >= 0
                digit = values[write] // 10 ** place[write] % 10
                out[at[write] + k] = 48 + digit
        at = at + width
    return out.tobytes()


def _column(part: I64 | tuple[I64, int] | Texts) -> I64:
    """The column of a part of :func:`format_rows` that is not literal bytes."""
    return part.codes if isinstance(part, Texts) else part[0] if isinstance(part, tuple) else part


def _digits(values: I64) -> I64:
    """The number of decimal digits of each value (0 has one)."""
    digits = np.ones(values.shape[0], np.int64)
    for power in range(1, 19):
        digits += values >= 10**power
    return digits
