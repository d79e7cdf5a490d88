"""Tuple records of one relation with different lengths in one poll, against the per-record
decoding (``kafka_reference.py``).

A relation has one arity; a tuple of another length is a dead letter (reason ``relation 'r' has
2 ids per tuple, got 3``, category ``invalid_record``) and the rest of the poll is decoded as
usual. The arity is the one the caller gives (the queries' and the index's), else the
relation's first tuple's, which it learns for the polls after. The batch decoder used to build
a relation's columns from its first tuple's length: a longer tuple was cut to it, a shorter one
raised IndexError, which stopped ``serve`` on the same poll at every restart. Records that are
not tuples of the right kind (``tuple`` not an array, events without ``src``, ids of the wrong
type) are mixed in: they stay the per-record decoder's dead letters.
"""

from __future__ import annotations

from typing import Any, cast

import orjson
from confluent_kafka import Message

from connectors.events import FieldTypes
from connectors.kafka_records import Polled, decode_messages, merge_polled, message_columns
from monitor.service.cluster.epoch_input import decode_epoch
from monitor.service.settings import Settings
from tests.connectors.kafka_reference import reference_epoch, reference_poll
from tests.connectors.test_kafka_records import DEFAULT, TOPIC_RELATIONS, kafka_message, same_batch


def messages(records: list[dict[str, Any] | bytes], partition: int = 0) -> list[Message]:
    """The records as messages of topic ``t1`` (relation ``e`` by default)."""
    values = [r if isinstance(r, bytes) else orjson.dumps(r) for r in records]
    stamp = (1, 1_700_000_000_000)
    return cast(
        list[Message],
        [kafka_message("t1", partition, offset, v, stamp) for offset, v in enumerate(values)],
    )


def decoded(
    records: list[dict[str, Any] | bytes],
    events: dict[str, Any] | None = None,
    arities: dict[str, int] | None = None,
) -> Polled:
    """The poll of ``records``, held to the per-record decoding of the same records (the
    arities learned too); ``arities``: the relations' known arities, which it learns."""
    batch = messages(records)
    ref_types = None if events is None else FieldTypes.of(events)
    learned = {} if arities is None else dict(arities)
    expected = reference_poll(batch, 0, DEFAULT, TOPIC_RELATIONS, ref_types, learned)
    types = None if events is None else FieldTypes.of(events)
    arities = {} if arities is None else arities
    polled = decode_messages(message_columns(batch), 0, DEFAULT, TOPIC_RELATIONS, types, arities)
    same_batch(expected.batch, polled.batch)
    assert polled.dead_letters == expected.dead_letters
    assert (polled.next_offsets, polled.records) == (expected.next_offsets, expected.records)
    assert arities == learned
    return polled


def tuples(polled: Polled) -> dict[str, list[tuple[Any, ...]]]:
    """Each relation's tuples, in stream order."""
    return {
        name: list(zip(*(c.tolist() for c in part.columns), strict=True))
        for name, part in polled.batch.parts.items()
    }


def letters(polled: Polled) -> list[tuple[int, str, str]]:
    return [(d.offset, d.category, d.reason) for d in polled.dead_letters]


def test_a_longer_tuple_after_the_first_is_a_dead_letter_not_cut() -> None:
    polled = decoded(
        [
            {"op": "insert", "relation": "edge", "tuple": [1, 2]},
            {"op": "insert", "relation": "edge", "tuple": [1, 2, 3]},
            {"op": "delete", "relation": "edge", "tuple": [4, 5]},
        ]
    )
    assert tuples(polled) == {"edge": [(1, 2), (4, 5)]}
    assert polled.batch.parts["edge"].diff.tolist() == [1, -1]
    assert polled.batch.parts["edge"].seq.tolist() == [0, 1]
    assert letters(polled) == [(1, "invalid_record", "relation 'edge' has 2 ids per tuple, got 3")]


def test_a_shorter_tuple_after_the_first_is_a_dead_letter_not_a_crash() -> None:
    polled = decoded(
        [
            {"relation": "edge", "tuple": ["a", "b", "c"]},
            {"relation": "edge", "tuple": ["a", "b"]},
            {"relation": "edge", "tuple": ["d"]},
            {"relation": "edge", "tuple": ["d", "e", "f"]},
        ]
    )
    assert tuples(polled) == {"edge": [("a", "b", "c"), ("d", "e", "f")]}
    assert letters(polled) == [
        (1, "invalid_record", "relation 'edge' has 3 ids per tuple, got 2"),
        (2, "invalid_record", "relation 'edge' has 3 ids per tuple, got 1"),
    ]


def test_the_first_tuple_decides_when_it_is_the_odd_one() -> None:
    """Without a known arity the first tuple of the relation fixes it, as in a file."""
    polled = decoded(
        [
            {"relation": "edge", "tuple": [1, 2, 3]},
            {"relation": "edge", "tuple": [1, 2]},
            {"relation": "edge", "tuple": [3, 4]},
        ]
    )
    assert tuples(polled) == {"edge": [(1, 2, 3)]}
    assert [offset for offset, _, _ in letters(polled)] == [1, 2]


def test_edge_records_and_tuples_of_one_relation() -> None:
    """``src``/``dst`` records are tuples of two: taken on the fast path, checked all the same."""
    polled = decoded(
        [
            {"src": 1, "dst": 2},
            {"tuple": [7]},
            {"tuple": [1, 2, 3]},
            {"tuple": [5, "x"]},
            {"op": "delete", "src": 1, "dst": 2},
        ]
    )
    assert tuples(polled) == {"e": [(1, 2), (5, "x"), (1, 2)]}
    assert [offset for offset, _, _ in letters(polled)] == [1, 2]
    polled = decoded([{"tuple": [1, 2, 3]}, {"src": 1, "dst": 2}, {"tuple": [4, 5, 6]}])
    assert tuples(polled) == {"e": [(1, 2, 3), (4, 5, 6)]}
    assert letters(polled) == [(1, "invalid_record", "relation 'e' has 3 ids per tuple, got 2")]


def test_each_relation_has_its_own_arity() -> None:
    polled = decoded(
        [
            {"relation": "a", "tuple": [1]},
            {"relation": "b", "tuple": [1, 2, 3]},
            {"relation": "a", "tuple": [1, 2]},
            {"relation": "b", "tuple": [1, 2]},
            {"relation": "a", "tuple": [2]},
            {"relation": "b", "tuple": [4, 5, 6]},
            {"relation": "c", "src": 1, "dst": 2},
        ]
    )
    assert tuples(polled) == {"a": [(1,), (2,)], "b": [(1, 2, 3), (4, 5, 6)], "c": [(1, 2)]}
    assert [offset for offset, _, _ in letters(polled)] == [2, 3]


def test_tuples_that_are_not_arrays_of_ids_among_mixed_lengths() -> None:
    """Every other kind of bad ``tuple`` keeps its own reason; they fix no arity."""
    polled = decoded(
        [
            {"tuple": 5},
            {"tuple": "ab"},
            {"tuple": None},
            {"tuple": {"a": 1}},
            {"tuple": []},
            {"tuple": [[1], 2]},
            {"tuple": [1, 2], "src": 1},
            {"tuple": [1, 2, 3]},
            {"tuple": [1, 2]},
            {"tuple": [True, 2, 3]},
            {"tuple": [4, 5, 6]},
        ]
    )
    assert tuples(polled) == {"e": [(1, 2, 3), (4, 5, 6)]}
    reasons = [reason for _, _, reason in letters(polled)]
    assert reasons[:7] == [
        "tuple must be a non-empty array of ids, got the integer 5",
        "tuple must be a non-empty array of ids, got the string 'ab'",
        "tuple must be a non-empty array of ids, got null",
        "tuple must be a non-empty array of ids, got an object",
        "tuple must be a non-empty array of ids, got an empty array",
        "tuple[0] must be a JSON string or an integer within int64, got an array",
        "give either 'tuple' or 'src' and 'dst', not both",
    ]
    assert reasons[7:] == [
        "relation 'e' has 3 ids per tuple, got 2",
        "tuple[0] must be a JSON string or an integer within int64, got the boolean true",
    ]


def test_events_with_missing_or_odd_ends_among_tuples() -> None:
    """Events carry ``src`` and ``dst`` (no arity); ends missing or of the wrong type, mixed
    within the poll and with tuple records of other lengths, are the per-record dead letters."""
    polled = decoded(
        [
            {"relation": "transfer", "src": 1, "dst": 2, "id": "a", "amount": 5},
            {"relation": "transfer", "dst": 2, "id": "b"},
            {"relation": "transfer", "src": "x", "dst": [1], "id": "c"},
            {"relation": "transfer", "src": True, "dst": 2},
            {"relation": "transfer", "tuple": [1, 2], "id": "d"},
            {"relation": "transfer", "src": "p", "dst": "q", "id": "e", "amount": 1.5},
            {"op": "delete", "relation": "transfer", "id": "a"},
            {"tuple": [1, 2, 3]},
            {"relation": "f", "src": 1, "dst": 2},
            {"relation": "transfer", "src": 2**64 - 1, "dst": 2, "id": "f"},
        ],
        events={"transfer": {}},
    )
    assert polled.batch.events["transfer"].ids.tolist() == ["a", "e", "a"]
    assert tuples(polled) == {"e": [(1, 2, 3)], "f": [(1, 2)]}
    assert [offset for offset, _, _ in letters(polled)] == [1, 2, 3, 4, 9]


# Arities known from the queries, and learned across polls ---------------------------------------


def test_the_known_arity_decides_even_when_the_first_tuple_is_the_odd_one() -> None:
    """The queries read ``edge`` with two ids: a first tuple of three is the dead letter."""
    arities = {"edge": 2}
    polled = decoded(
        [
            {"relation": "edge", "tuple": [1, 2, 3]},
            {"relation": "edge", "tuple": [1, 2]},
            {"relation": "edge", "tuple": [3]},
            {"relation": "edge", "src": 3, "dst": 4},
        ],
        arities=arities,
    )
    assert tuples(polled) == {"edge": [(1, 2), (3, 4)]}
    assert letters(polled) == [
        (0, "invalid_record", "relation 'edge' has 2 ids per tuple, got 3"),
        (2, "invalid_record", "relation 'edge' has 2 ids per tuple, got 1"),
    ]
    assert polled.batch.parts["edge"].seq.tolist() == [0, 1]
    assert arities == {"edge": 2}


def test_a_poll_all_of_another_arity_than_the_known_one() -> None:
    """Every record dead: no update, the positions still move on."""
    polled = decoded(
        [{"src": 1, "dst": 2}, {"src": "a", "dst": "b", "op": "delete"}],
        arities={"e": 3, "edge": 2},
    )
    assert polled.batch.count == 0 and not polled.batch.parts
    assert [reason for _, _, reason in letters(polled)] == [
        "relation 'e' has 3 ids per tuple, got 2"
    ] * 2
    assert polled.next_offsets == {("t1", 0): 2}


def test_a_relation_the_queries_do_not_read_keeps_its_first_arity_across_polls() -> None:
    """The source holds the arities from poll to poll: a later poll's odd tuple is dead."""
    arities = {"e": 2}
    decoded([{"relation": "seen", "tuple": [1, 2, 3]}], arities=arities)
    assert arities == {"e": 2, "seen": 3}
    polled = decoded(
        [{"relation": "seen", "tuple": [4, 5]}, {"relation": "seen", "tuple": [4, 5, 6]}],
        arities=arities,
    )
    assert tuples(polled) == {"seen": [(4, 5, 6)]}
    assert [offset for offset, _, _ in letters(polled)] == [0]


def test_chunks_of_one_poll_and_partitions_of_one_epoch_agree_on_the_arity() -> None:
    """Batches that are concatenated (a poll's chunks, an epoch's partitions, catch-up polls)
    share the arities: the later ones' odd tuples are dead letters, nothing is cut or fails."""
    first = [{"relation": "r", "tuple": [1, 2, 3]}, {"relation": "r", "tuple": [1, 2, 4]}]
    second = [{"relation": "r", "tuple": [1, 2]}, {"relation": "r", "tuple": [5, 6, 7]}]
    arities: dict[str, int] = {}
    head = decode_messages(message_columns(messages(first)), 0, DEFAULT, {}, None, arities)
    tail = decode_messages(message_columns(messages(second, 1)), 2, DEFAULT, {}, None, arities)
    merged = merge_polled([head, tail], 0)
    assert tuples(merged) == {"r": [(1, 2, 3), (1, 2, 4), (5, 6, 7)]}
    assert merged.batch.parts["r"].seq.tolist() == [0, 1, 2]
    assert [(d.partition, d.offset) for d in merged.dead_letters] == [(1, 0)]

    by_partition = {("t1", 0): messages(first), ("t1", 1): messages(second, 1)}
    expected, bounds, polled = reference_epoch(by_partition, DEFAULT, {}, None)
    epoch = decode_epoch(by_partition, Settings(default_relation=DEFAULT))
    same_batch(expected, epoch.batch)
    assert epoch.bounds.tolist() == bounds == [0, 2]
    assert epoch.polled[("t1", 1)].dead_letters == polled[("t1", 1)].dead_letters
    assert len(polled[("t1", 1)].dead_letters) == 1
