"""Scale-out epochs follow one another: the guard a worker applies to every control record."""

from __future__ import annotations

import pytest

from core.errors import StateError
from monitor.index.stored_meta import StoredMeta
from monitor.service.cluster.control import EpochSpec, ends_json
from monitor.service.cluster.worker import check_continues, stored_spec

A, B = ("in", 0), ("in", 1)


def test_an_epoch_that_starts_where_the_applied_one_ended_is_accepted() -> None:
    applied = EpochSpec(5, {A: 0, B: 0}, {A: 40, B: 7})
    check_continues(applied, EpochSpec(6, {A: 40, B: 7}, {A: 90, B: 7}))
    check_continues(None, EpochSpec(1, {A: 0}, {A: 10}))


def test_an_epoch_numbered_on_from_other_offsets_is_refused() -> None:
    applied = EpochSpec(5, {A: 0, B: 0}, {A: 40, B: 7})
    with pytest.raises(StateError, match=r"epoch 6 .* does not start where epoch 5 ended"):
        check_continues(applied, EpochSpec(6, {A: 0, B: 7}, {A: 50, B: 7}, "w1", 12))


def test_a_partition_new_to_the_epoch_is_not_a_gap() -> None:
    applied = EpochSpec(5, {A: 0}, {A: 40})
    check_continues(applied, EpochSpec(6, {A: 40, B: 0}, {A: 41, B: 3}))


def test_the_stored_state_names_the_epoch_it_applied_last() -> None:
    assert stored_spec(StoredMeta()) is None
    meta = StoredMeta(epoch=9, position={"cluster": {"control": 18, **ends_json({A: 40})}})
    spec = stored_spec(meta)
    assert spec is not None
    assert (spec.epoch, spec.ends, spec.offset) == (9, {A: 40}, 17)
