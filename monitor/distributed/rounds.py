"""Delta queries sharing rounds: the calls of one query's delta queries made together.

A query of ``k`` atoms has ``k`` delta queries, independent until their bindings are
consolidated. Run one after the other, each stage of each costs its own rounds of calls (count,
propose, intersect), and over Ray a round costs milliseconds whatever it carries. Here they run
side by side, each in a thread of its own, and :class:`SharedRounds` makes their calls together:
a round is made when every delta query still running has asked for its next call, as one call
per shard carrying each one's request (:meth:`~monitor.distributed.shard.ShardIndex.calls`).
So a triangle epoch makes the rounds of one delta query, not of three, and the answers, and the
bindings, are those each delta query has alone. Shards in this process, whose rounds cost
nothing of their own, run them one after the other (threads and a halved budget would only
cost); ``shared=True`` shares them there too (the tests do).

Each delta query keeps the whole prefix budget, as it has when the single process runs it
alone: a round costs milliseconds over Ray whatever it carries, and a round is made per chunk
of the budget, so a budget split ``k`` ways made ``k`` times the rounds (a 4-clique epoch on
R-MAT 2M made 526 rounds at a sixth of the budget, 95 at all of it, and ran 1.7x faster on a
Ray shard). The driver so holds at most ``k * max_prefixes`` prefixes at once for a query of
``k`` atoms, and a shard receives at most that many keys in a round (see ``--max-prefixes``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from monitor.distributed.shard_calls import Shards, Traffic
from monitor.distributed.sharded import ShardedIndex
from monitor.engine.delta import DeltaEvaluator, EvaluationStats
from monitor.engine.extend import IndexReader
from monitor.engine.prefixes import Prefixes
from monitor.index.graph import Change
from monitor.query.ast import Query


class SharedRounds:
    """:class:`~monitor.distributed.shard_calls.Shards` for ``parties`` threads: each call waits
    until every party still running has made one (or left), then all are made in one round."""

    def __init__(self, shards: Shards, parties: int) -> None:
        self.shards = shards
        self.traffic: Traffic = shards.traffic
        self.in_process = shards.in_process
        self._parties = parties
        self._lock = threading.Condition()
        self._asked: dict[int, tuple[str, Sequence[tuple[Any, ...] | None]]] = {}
        self._answers: dict[int, Any] = {}
        self._tickets = 0

    @property
    def count(self) -> int:
        return self.shards.count

    def call(self, method: str, arguments: Sequence[tuple[Any, ...] | None]) -> list[Any]:
        with self._lock:
            ticket = self._tickets
            self._tickets += 1
            self._asked[ticket] = (method, arguments)
            self._round_if_all_asked()
            while ticket not in self._answers:
                self._lock.wait()
            answer = self._answers.pop(ticket)
        if isinstance(answer, BaseException):
            raise answer
        found: list[Any] = answer
        return found

    def leave(self) -> None:
        """A party is done: the others no longer wait for it."""
        with self._lock:
            self._parties -= 1
            self._round_if_all_asked()

    def _round_if_all_asked(self) -> None:
        """(Holding the lock.) One round for every call asked, once every party has asked."""
        if not self._asked or len(self._asked) < self._parties:
            return
        asked, self._asked = self._asked, {}
        requests: list[list[tuple[str, tuple[Any, ...]]]] = [[] for _ in range(self.count)]
        for method, arguments in asked.values():
            for s, given in enumerate(arguments):
                if given is not None:
                    requests[s].append((method, given))
        try:
            answers = self.shards.call("calls", [(r,) if r else None for r in requests])
        except BaseException as error:  # (every party waiting gets it: none is left waiting)
            self._answers.update(dict.fromkeys(asked, error))
        else:
            taken = [0] * self.count
            for ticket, (_, arguments) in asked.items():
                mine: list[Any] = []
                for s, given in enumerate(arguments):
                    mine.append(None if given is None else answers[s][taken[s]])
                    taken[s] += given is not None
                self._answers[ticket] = mine
        self._lock.notify_all()


class SharedRoundsEvaluator(DeltaEvaluator):
    """A :class:`~monitor.engine.delta.DeltaEvaluator` over a
    :class:`~monitor.distributed.sharded.ShardedIndex` whose delta queries of a query share
    their rounds of calls (``shared``; None: when the shards are not in this process)."""

    shares_stages = False  # (its plans run in threads of their own, each a query's)

    def __init__(
        self, queries: Sequence[Query], max_prefixes: int, shared: bool | None = None
    ) -> None:
        super().__init__(queries, max_prefixes)
        self.shared = shared

    def _produce(
        self, query: Query, index: IndexReader, changes: dict[str, Change]
    ) -> list[Prefixes]:
        runs = [
            (plan, changes[plan.seed.relation])
            for plan in self.plans[query.name]
            if plan.seed.relation in changes and len(changes[plan.seed.relation])
        ]
        if len(runs) < 2 or not isinstance(index, ShardedIndex):
            return super()._produce(query, index, changes)
        if not (self.shared if self.shared is not None else not index.shards.in_process):
            return super()._produce(query, index, changes)
        shared = SharedRounds(index.shards, len(runs))
        outputs: list[list[Prefixes]] = [[] for _ in runs]
        stats = [EvaluationStats() for _ in runs]
        failures: list[BaseException] = []

        def run(i: int) -> None:
            try:
                plan, change = runs[i]
                self._run(plan, index, change, outputs[i].append, stats[i])
            except BaseException as error:
                failures.append(error)
            finally:
                shared.leave()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(runs))]
        with index.calls_through(shared):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if failures:
            raise failures[0]
        for counted in stats:
            self.stats.seeds += counted.seeds
            self.stats.produced += counted.produced
            self.stats.peak_prefixes = max(self.stats.peak_prefixes, counted.peak_prefixes)
        return [p for out in outputs for p in out]
