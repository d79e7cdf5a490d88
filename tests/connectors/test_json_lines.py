"""A JSON Lines file decoded a block at a time against the same file decoded line by line.

Random files of event and edge records (the adversarial records of ``test_json_arrow.py``:
types changing mid-stream, missing keys, explicit nulls, huge numbers, NULs, times with and
without zones, arrays and objects, bad JSON), with blank and comment lines, read through
:class:`~connectors.files.EdgeFileSource` with the block decoder (``fast_path=True``) and with
the per-line decoder it replaced (``fast_path=False``), in blocks of several sizes, in lenient
and strict mode: the same batches (updates, events, fields, sequence numbers, column types),
the same dead letters (positions, reasons, raw lines), the same counters, the same field kinds
and arities learned, and in strict mode the same failure after the same batches.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.events import FieldTypes
from connectors.files import EdgeFileSource
from core.errors import InputError
from core.records import DeadLetter, UpdateBatch
from tests.connectors.test_json_arrow import edge, event, learned
from tests.connectors.test_kafka_records import same_batch

ODD_LINES = [
    b"",
    b"   ",
    b"# a comment",
    b"% another",
    b"{",
    b"[1, 2]",
    b'{"src": 1}',
    b'{"src": 1, "dst": 2, "op": null}',
    b'{"src": 1, "dst": NaN}',
    b'  {"src": 1, "dst": 2}',
    b'{"src": 1, "dst": 2}{"src": 3, "dst": 4}',
    b'{"relation": "r3", "tuple": [1, 2, 3]}',
    b'{"relation": "transfer", "src": 1, "dst": 2, "amount": "text now"}',
    b'{"relation": "transfer", "src": 1, "dst": 2, "ts": "2026-12-02T10:15:00"}',
]


@st.composite
def jsonl(draw: st.DrawFn) -> list[bytes]:
    clean = draw(st.booleans())
    one = st.one_of(event(clean), edge(clean))
    lines = []
    for record in draw(st.lists(one, max_size=40)):
        lines.append(json.dumps(record, ensure_ascii=draw(st.booleans())).encode())
        if not clean and not draw(st.integers(0, 6)):
            lines.append(draw(st.sampled_from(ODD_LINES)))
    return lines


def read(
    path: Path, spec: Any, known: dict[str, int], strict: bool, **options: Any
) -> tuple[list[UpdateBatch], list[DeadLetter], Any, EdgeFileSource, FieldTypes | None]:
    letters: list[DeadLetter] = []
    types = None if spec is None else FieldTypes.of(spec)
    source = EdgeFileSource(
        str(path),
        format="json",
        events=types,
        arities=known,
        strict=strict,
        on_dead_letter=letters.append,
        **options,
    )
    batches: list[UpdateBatch] = []
    failure: Any = None
    try:
        batches.extend(source.batches(7))
    except InputError as error:
        failure = (error.message, error.position)
    return batches, letters, failure, source, types


SPECS = st.sampled_from(
    [
        None,
        {"transfer": {}, "login": {}},
        {"transfer": {"amount": "number", "channel": "string"}, "login": {}},
    ]
)


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=jsonl(),
    spec=SPECS,
    known=st.sampled_from([{}, {"e": 2}, {"e": 3, "r3": 3}]),
    block_size=st.sampled_from([1, 64, 512, 1 << 20]),
    strict=st.booleans(),
)
def test_blocks_decode_as_lines(
    tmp_path: Path,
    lines: list[bytes],
    spec: Any,
    known: dict[str, int],
    block_size: int,
    strict: bool,
) -> None:
    path = tmp_path / "input.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    slow = read(path, spec, known, strict, fast_path=False, block_size=block_size)
    fast = read(path, spec, known, strict, fast_path=True, block_size=block_size)
    assert len(fast[0]) == len(slow[0])
    for a, b in zip(slow[0], fast[0], strict=True):
        same_batch(a, b)
    assert fast[1] == slow[1]
    assert fast[2] == slow[2]
    for counter in ("lines_read", "updates_read", "dead_letters", "bytes_read"):
        assert getattr(fast[3], counter) == getattr(slow[3], counter), counter
    assert learned(fast[4]) == learned(slow[4])
    assert fast[3]._arity == slow[3]._arity


def test_a_stream_of_plain_records_takes_the_block_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clean blocks never reach the batch decoder's slow path (the point of the change)."""
    import connectors.json_lines as json_lines

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a clean block went the slow way")

    monkeypatch.setattr(json_lines, "decode_records", refuse)
    records = [
        orjson.dumps({"relation": "transfer", "id": f"t{i}", "src": i % 7, "dst": i % 5, "ts": i})
        for i in range(2000)
    ]
    path = tmp_path / "plain.jsonl"
    path.write_bytes(b"\n".join(records) + b"\n\n")
    types = FieldTypes.of({"transfer": {}})
    source = EdgeFileSource(str(path), events=types, block_size=4096)
    batches = list(source.batches(500))
    assert sum(b.count for b in batches) == 2000
    assert source.lines_read == 2001
    assert types.types == {"transfer": {"ts": "number"}}
