"""The delta queries of a query sharing their rounds of calls: the same deltas as one after the
other, in fewer rounds; a failure in a shared round reaches every delta query, none left
waiting."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from core.records import RelationUpdates, UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.rounds import SharedRounds
from monitor.distributed.shard_calls import LocalShards
from tests.distributed.test_sharded_count import QUERIES
from tests.distributed.test_sharded_epochs import mine


def epochs(seed: int, n: int = 3, size: int = 400) -> list[UpdateBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        src, dst = rng.integers(0, 60, size), rng.integers(0, 60, size)
        diff = np.where(rng.random(size) < 0.2, -1, 1).astype(np.int8)
        seq = np.arange(i * size, (i + 1) * size, dtype=np.int64)
        out.append(UpdateBatch({"e": RelationUpdates([src, dst], diff, seq)}, i * size, size))
    return out


def test_shared_rounds_give_the_same_deltas_in_fewer_rounds() -> None:
    batches = epochs(3)
    alone = ShardedEpochs(QUERIES[:4], LocalShards(3), 1 << 20)  # (in process: one by one)
    shared = ShardedEpochs(QUERIES[:4], LocalShards(3), 1 << 20, shared_rounds=True)
    for batch in batches:
        assert mine(shared.process(batch)) == mine(alone.process(batch))
    # A triangle's three delta queries, a 4-clique's six: their stages' rounds made together.
    assert shared.index.shards.traffic.rounds < 0.6 * alone.index.shards.traffic.rounds


class Failing(LocalShards):
    """Shards whose ``calls`` fail from the ``n``-th call on."""

    def __init__(self, shards: int, n: int) -> None:
        super().__init__(shards)
        self.n = n

    def call(self, method: str, arguments: Any) -> list[Any]:
        if method == "calls":
            self.n -= 1
            if self.n <= 0:
                raise RuntimeError("shard 1 stopped")
        return super().call(method, arguments)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_failed_shared_round_reaches_every_delta_query(n: int) -> None:
    shards = Failing(2, 10**9)
    run = ShardedEpochs(QUERIES[:4], shards, 1 << 20, shared_rounds=True)
    run.process(epochs(4, n=1)[0])
    shards.n = n
    failed: list[BaseException] = []

    def evaluate() -> None:
        try:
            run.evaluate(epochs(5, n=1)[0])
        except RuntimeError as error:
            failed.append(error)

    worker = threading.Thread(target=evaluate)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "a delta query was left waiting for a round"
    assert [str(e) for e in failed] == ["shard 1 stopped"]


def test_a_party_that_leaves_lets_the_others_go_on() -> None:
    shards = LocalShards(2)
    shared = SharedRounds(shards, 2)
    answers: list[Any] = []
    asking = threading.Thread(target=lambda: answers.append(shared.call("stats", [(), None])))
    asking.start()
    asking.join(timeout=0.2)
    assert asking.is_alive()  # (waiting for the other party's call)
    shared.leave()
    asking.join(timeout=10)
    assert not asking.is_alive()
    assert answers[0][0]["pairs"] == 0 and answers[0][1] is None
    assert shards.traffic.rounds == 1
