"""Event records as bytes: every column comes back as it went, whatever it holds."""

from __future__ import annotations

import numpy as np

from monitor.index.event_state import EventRecord, pack_record, unpack_records


def record(channel: list[object], diff: list[int]) -> EventRecord:
    n = len(diff)
    column = np.empty(n, dtype=object)
    column[:] = channel
    eids = np.arange(n, dtype=np.int32)
    return EventRecord(
        3, n + 5, eids, np.array(diff, np.int8), eids, eids, eids, {"channel": column}
    )


def test_a_string_column_without_strings_comes_back() -> None:
    """An epoch of deletes only (their fields are not stored: absent), or of inserts whose
    string field is absent or an integer in every one of them."""
    for channel, diff in [
        ([None, None], [-1, -1]),
        ([None, 7, None], [1, 1, -1]),
        (["wire", None, 7], [1, 1, 1]),
        ([], []),
    ]:
        (back,) = unpack_records(pack_record(record(channel, diff)))
        assert back.fields["channel"].tolist() == channel
        assert back.diff.tolist() == diff and back.size == len(diff) + 5
