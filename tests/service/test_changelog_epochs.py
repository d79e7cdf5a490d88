"""A changelog record's epoch as the rebuild reads it: a tombstone's from its header, an insert's
from its value (inserts carry no header since the header made each produce two to three times
slower), a record of an earlier version from its header."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from connectors.changelog_json import clock_record, event_records, tuple_records
from monitor.service.cluster.changelog import NO_EPOCH, _epoch
from tests.connectors.test_changelog_json import event_changes, tuple_changes


def header(epoch: int) -> list[tuple[str, str | bytes | None]]:
    return [("epoch", str(epoch).encode())]


@settings(max_examples=200, deadline=None)
@given(tuple_changes(), event_changes())
def test_every_record_says_its_epoch_as_the_sink_writes_it(
    tuples: dict[str, Any], events: dict[str, Any]
) -> None:
    written = [
        *((r, tuples["epoch"]) for r in tuple_records(**tuples)),
        *((r, events["epoch"]) for r in event_records(**events)),
    ]
    for (_, value), epoch in written:
        # what KafkaSink._produce_changelog sends: a header on tombstones only
        headers = header(epoch) if value is None else None
        assert _epoch(headers, value) == str(epoch).encode()
        assert _epoch(header(epoch), value) == str(epoch).encode(), "earlier versions"
    _, clock = clock_record(12, "payments:3", [5.0, 7.5])
    assert _epoch(None, clock) == b"12"


def test_a_record_without_an_epoch_is_kept_by_no_rebuild() -> None:
    assert _epoch(None, None) == NO_EPOCH
    assert _epoch([("other", b"1")], b'{"event":{"epoch":3}}') == NO_EPOCH
    assert _epoch({"epoch": "9"}, None) == b"9"
