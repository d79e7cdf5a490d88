"""The relations' arities the processor gives its sources: the queries' from the start, the
stored relations' after a restore, a new relation's once an epoch holding it is committed;
always the same dict, which the Kafka sources hold and learn into (a file source reads it as
it begins reading)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.records import RelationUpdates, UpdateBatch
from monitor.index.store import StateStore
from monitor.index.stored_meta import StoredMeta
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

QUERIES = parse_queries(
    """
    tri(a, b, c) := e(a, b), e(b, c), e(a, c).
    paid(a, b, m) := e(a, b), pays(a, b, m).
    hot(a, b) := e(a, b), flagged(b).
    """
)


def test_the_processor_s_arities_follow_its_index(tmp_path: Path) -> None:
    processor = EpochProcessor(QUERIES, Settings())
    arities = processor.arities
    assert arities == {"e": 2, "pays": 3, "flagged": 1}
    other = RelationUpdates(
        [np.array([1], np.int64)] * 4, np.ones(1, np.int8), np.zeros(1, np.int64)
    )
    out = processor.process(UpdateBatch({"other": other}, 0, 1))
    processor.commit()
    assert processor.arities is arities and arities["other"] == 4
    with StateStore.open(tmp_path / "state") as store:
        store.commit_epoch(processor.index, StoredMeta(epoch=1), out.changes, 0)
        restored = EpochProcessor(QUERIES, Settings())
        same = restored.arities
        restored.restore(store)
    assert restored.arities is same
    assert same == {"e": 2, "pays": 3, "flagged": 1, "other": 4}
