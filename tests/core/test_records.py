"""UpdateBatch built from updates and joined from runs: a relation has one arity in a batch.

Building from the first tuple's (or the first run's) arity would cut the longer tuples or fail
on the shorter ones deep inside; both refuse with the relation and the lengths instead.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.records import RelationUpdates, Update, UpdateBatch, exact_batches


def tuples(batch: UpdateBatch) -> dict[str, list[tuple[object, ...]]]:
    return {
        name: list(zip(*[c.tolist() for c in part.columns], strict=True))
        for name, part in batch.parts.items()
    }


def run(first_seq: int, **relations: list[tuple[int, ...]]) -> UpdateBatch:
    """A run of inserts, relation by relation in the given order, numbered from ``first_seq``."""
    updates = [Update(name, values, 1) for name, rows in relations.items() for values in rows]
    return UpdateBatch.from_updates(updates, first_seq)


def test_from_updates_groups_by_relation_in_stream_order() -> None:
    batch = UpdateBatch.from_updates(
        [Update("e", (1, 2), 1), Update("f", (3,), 1), Update("e", (2, "x"), -1)], 5
    )
    assert tuples(batch) == {"e": [(1, 2), (2, "x")], "f": [(3,)]}
    assert batch.parts["e"].seq.tolist() == [5, 7] and batch.parts["e"].diff.tolist() == [1, -1]
    assert (batch.first_seq, batch.count) == (5, 3)


@pytest.mark.parametrize(
    ("lengths", "named"),
    [([2, 3], "2 and 3"), ([3, 2], "2 and 3"), ([2, 1, 2, 4], "1, 2 and 4")],
)
def test_from_updates_refuses_a_relation_of_several_arities(lengths: list[int], named: str) -> None:
    updates = [Update("f", (0,), 1)] + [Update("e", tuple(range(n)), 1) for n in lengths]
    with pytest.raises(ValueError, match=rf"^relation 'e' has tuples of {named} ids in one batch"):
        UpdateBatch.from_updates(updates)


def test_concat_joins_runs_of_the_same_arities() -> None:
    batch = UpdateBatch.concat([run(0, e=[(1, 2)], p=[(1, 2, 3)]), run(2, e=[(3, 4)], f=[(5,)])])
    assert tuples(batch) == {"e": [(1, 2), (3, 4)], "p": [(1, 2, 3)], "f": [(5,)]}
    assert batch.parts["e"].seq.tolist() == [0, 2] and (batch.first_seq, batch.count) == (0, 4)


@pytest.mark.parametrize(("first", "second"), [(2, 3), (3, 2)])
def test_concat_refuses_runs_of_one_relation_with_other_arities(first: int, second: int) -> None:
    head = run(0, e=[tuple(range(first))], f=[(1,)])
    tail = run(2, f=[(2,)], e=[tuple(range(second))])
    with pytest.raises(ValueError, match=r"^relation 'e' has tuples of 2 and 3 ids in one batch"):
        UpdateBatch.concat([head, tail])


def test_exact_batches_refuse_them_too() -> None:
    """Re-cutting into epochs joins the source's batches: the same refusal, not a cut tuple."""
    long = RelationUpdates([np.arange(2, dtype=np.int64)] * 3, np.ones(2, np.int8), np.arange(2))
    batches = [run(0, e=[(1, 2)]), UpdateBatch({"e": long}, 1, 2)]
    with pytest.raises(ValueError, match="relation 'e' has tuples of 2 and 3 ids"):
        list(exact_batches(batches, 3))
