"""One shard of the partitioned index: the pairs of every binary relation whose key it owns.

Shard ``s`` of ``S`` owns the keys ``k`` with ``k % S == s`` and stores them under the local
key ``k // S``, so its adjacencies' offsets cover ``1/S`` of the key space. Each position of a
relation (1: forward, keyed by ``src``; 0: reverse, keyed by ``dst``) is an ordinary
:class:`~monitor.index.adjacency.Adjacency` with its levels and compaction: the extension code
of one process runs here on this shard's part. Updates are netted per position with set
semantics (:func:`~monitor.index.netting.net`); both copies of a tuple see the same updates in
the same order, so they agree without talking to each other.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from monitor.distributed.shard_store import Pairs, Part, ShardStore
from monitor.failpoints import failpoint
from monitor.index import warmup as index_kernels
from monitor.index.adjacency import Adjacency
from monitor.index.graph import Change
from monitor.index.levels import I32, I64, pack, unpack
from monitor.index.netting import net
from monitor.plan.cut import Cut

#: A binary relation's positions: the value at ``q`` keyed by the other one.
POSITIONS = (0, 1)


class ShardIndex:
    """Shard ``shard`` of ``shards``: an adjacency per relation and position over its keys."""

    def __init__(self, shard: int, shards: int) -> None:
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} of {shards}")
        self.shard = shard
        self.shards = shards
        # The index's compiled loops loaded now (in a new actor's process), not in the first
        # epoch, as the single process's EpochProcessor does when it is made.
        index_kernels.warm()
        self.relations: dict[str, list[Adjacency]] = {}
        #: The work done: keys counted, values proposed, pairs intersected.
        self.work: Counter[str] = Counter()
        #: The staged epoch's changes per part (relation, position), in global ids.
        self.staged: dict[Part, Change] = {}
        #: Its directory (``--state-dir``), and the last epoch prepared there.
        self.store: ShardStore | None = None
        self.epoch = 0

    def restore(self, directory: str, committed: int) -> int:
        """Keep this shard's part in ``directory`` from now on, after loading what it holds at
        the driver's ``committed`` epoch (dropping an epoch prepared after it); its pairs."""
        self.store = ShardStore.open(directory, self.shard, self.shards, committed)
        self.epoch = committed
        loaded = self.store.load()
        for (relation, position), (keys, values) in loaded.items():
            adjacency = self._adjacency(relation, position)
            local = self._local(keys, adjacency)
            adjacency.load(pack(local, values))  # (sorted by key, then value: so packed)
        return sum(int(keys.shape[0]) for keys, _ in loaded.values())

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def _adjacency(self, relation: str, position: int) -> Adjacency:
        if relation not in self.relations:
            self.relations[relation] = [Adjacency() for _ in POSITIONS]
        return self.relations[relation][position]

    def _local(self, keys: npt.NDArray[np.integer], adjacency: Adjacency) -> I64:
        local = keys.astype(np.int64) // self.shards
        if local.shape[0]:
            adjacency.ensure_keys(int(local.max()) + 1)
        return local

    def stage(
        self,
        relation: str,
        position: int,
        keys: I64,
        values: I32,
        insert: npt.NDArray[np.bool_],
        seq: I64,
    ) -> tuple[I64, I32, npt.NDArray[np.int8], I64, dict[str, int]]:
        """Stage updates of the pairs ``(keys[i], values[i])`` this shard owns at ``position``,
        in stream order (``seq``), as the uncommitted epoch: their effective changes (global
        key, value, diff, the deciding update's ``seq``) and what was ignored, by reason."""
        adjacency = self._adjacency(relation, position)
        local = self._local(keys, adjacency)
        view = adjacency.view(Cut.OLD)
        ignored: Counter[str] = Counter()
        netted = net(pack(local, values), insert, seq, lambda k: view.contains(*unpack(k)), ignored)
        order = np.argsort(netted.keys, kind="stable")
        changed, diff = netted.keys[order], netted.diff[order]
        adjacency.stage(changed, diff)
        local_keys, changed_values = unpack(changed)
        global_keys = local_keys.astype(np.int64) * self.shards + self.shard
        self.staged[(relation, position)] = Change(
            [global_keys.astype(np.int32), changed_values], diff
        )
        return global_keys, changed_values, diff, netted.seq[order], dict(ignored)

    def stage_many(
        self, requests: list[tuple[str, int, I64, I32, npt.NDArray[np.bool_], I64]]
    ) -> list[tuple[I64, I32, npt.NDArray[np.int8], I64, dict[str, int]] | None]:
        """:meth:`stage` each request; the changes of the forward copies (position 1) only:
        the reverse copies' are the same changes, and would only cross the wire again."""
        staged = [self.stage(*request) for request in requests]
        return [s if r[1] == 1 else None for s, r in zip(staged, requests, strict=True)]

    def prepare(self, epoch: int) -> None:
        """Make the staged epoch durable as ``epoch`` (synced), before the driver commits it."""
        failpoint("shard_before_prepare")
        if self.store is not None:
            self.store.prepare(epoch, self.staged)
        self.epoch = epoch
        failpoint("shard_after_prepare")

    def checkpoint(self, epoch: int) -> None:
        """Write everything committed as a snapshot at ``epoch`` (after a preload)."""
        if self.store is not None:
            self.store.snapshot(epoch, self.parts())
        self.epoch = epoch

    def commit(self) -> None:
        """Fold the staged epoch into every adjacency (compacting where it has grown); with a
        directory, rewrite its snapshot when the log has outgrown it."""
        failpoint("shard_before_fold")
        for positions in self.relations.values():
            for adjacency in positions:
                adjacency.commit()
        self.staged = {}
        if self.store is not None and self.store.wants_snapshot():
            self.store.snapshot(self.epoch, self.parts())

    def abort(self) -> None:
        for positions in self.relations.values():
            for adjacency in positions:
                adjacency.abort()
        self.staged = {}

    def parts(self) -> dict[Part, Pairs]:
        """Every part's committed pairs in global ids, sorted."""
        parts: dict[Part, Pairs] = {}
        for relation, positions in self.relations.items():
            for position, adjacency in enumerate(positions):
                local, values = unpack(adjacency.pairs(Cut.OLD))
                keys = (local.astype(np.int64) * self.shards + self.shard).astype(np.int32)
                parts[(relation, position)] = (keys, values)
        return parts

    def count(self, relation: str, position: int, cut: Cut, keys: I64) -> I64:
        adjacency = self._adjacency(relation, position)
        self.work["counted"] += int(keys.shape[0])
        local = self._local(keys, adjacency)  # (first: the view's offsets then cover them)
        return adjacency.view(cut).count(local)

    def propose(self, relation: str, position: int, cut: Cut, keys: I64) -> tuple[I32, I32]:
        """Every value of every key, each key's values together in the keys' order: how many
        each key has, and the values (4 bytes a value cross back, not 12 with an owner's
        index beside each)."""
        adjacency = self._adjacency(relation, position)
        local = self._local(keys, adjacency)
        owner, values = adjacency.view(cut).propose(local)
        self.work["proposed"] += int(values.shape[0])
        return np.bincount(owner, minlength=keys.shape[0]).astype(np.int32), values

    def contains(
        self, relation: str, position: int, cut: Cut, keys: I64, values: I32
    ) -> npt.NDArray[np.bool_]:
        adjacency = self._adjacency(relation, position)
        self.work["intersected"] += int(keys.shape[0])
        local = self._local(keys, adjacency)
        return adjacency.view(cut).contains(local, values)

    # One call a round for every request of a stage (:func:`~monitor.distributed.sharded.exchange`).

    def count_many(self, requests: list[tuple[str, int, Cut, I64]]) -> list[I64]:
        return [self.count(*request) for request in requests]

    def propose_many(self, requests: list[tuple[str, int, Cut, I64]]) -> list[tuple[I32, I32]]:
        return [self.propose(*request) for request in requests]

    def contains_many(
        self, requests: list[tuple[str, int, Cut, I64, I32]]
    ) -> list[npt.NDArray[np.bool_]]:
        return [self.contains(*request) for request in requests]

    def tuples(self, relation: str, cut: Cut) -> tuple[I64, I32]:
        """The ``(src, dst)`` of every tuple whose ``src`` this shard owns (global ids)."""
        if relation not in self.relations:
            return np.empty(0, np.int64), np.empty(0, np.int32)
        local, values = unpack(self.relations[relation][1].pairs(cut))
        return local.astype(np.int64) * self.shards + self.shard, values

    def stats(self) -> dict[str, int]:
        """Its pairs, index bytes and work (and bytes on disk, with a directory)."""
        adjacencies = [a for positions in self.relations.values() for a in positions]
        disk = {} if self.store is None else {"disk": self.store.disk_bytes()}
        return {
            "pairs": sum(len(a) for a in adjacencies),
            "bytes": sum(a.nbytes for a in adjacencies),
            **self.work,
            **disk,
        }
