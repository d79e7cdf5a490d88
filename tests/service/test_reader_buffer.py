"""A scale-out worker's read-ahead buffer of one partition: an epoch takes exactly the records
of its offset range, in order, and every record below the range's end leaves the buffer, across
fetches that arrive in pieces (transaction markers leave gaps in the offsets)."""

from __future__ import annotations

from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.service.cluster.reader import _Buffer


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 3), min_size=1, max_size=60),
    pieces=st.lists(st.integers(1, 20), min_size=1, max_size=10),
    cuts=st.lists(st.integers(0, 200), min_size=1, max_size=8),
)
def test_epochs_take_their_offset_ranges_in_order(
    gaps: list[int], pieces: list[int], cuts: list[int]
) -> None:
    offsets = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    messages = [Message(topic="t", partition=0, offset=o, value=b"%d" % o) for o in offsets]
    buffer = _Buffer()
    model: list[int] = []  # the offsets still buffered
    at = 0
    bounds = sorted(cuts)
    for k, end in enumerate(bounds):
        size = pieces[k % len(pieces)]  # a fetch arrives before each epoch
        buffer.extend(messages[at : at + size], offsets[at : at + size])
        model += offsets[at : at + size]
        at += size
        start = bounds[k - 1] if k else 0
        start += k % 2  # sometimes the epoch starts past records left below it
        start = min(start, end)
        taken = buffer.take(start, end)
        assert [m.offset() for m in taken] == [o for o in model if start <= o < end]
        assert [m.value() for m in taken] == [b"%d" % o for o in model if start <= o < end]
        model = [o for o in model if o >= end]
        assert len(buffer) == len(model)
