"""The partitioned engine (issue #33): each relation's index split by key over shards.

A binary relation's forward adjacency (``src -> dst``) is partitioned by ``src``, its reverse
one by ``dst``: the pair ``(key, value)`` of position ``q`` lives on shard ``key % S`` under the
local key ``key // S``, so every shard's CSR spans ``1/S`` of the keys and holds ``1/S`` of the
pairs (:mod:`monitor.distributed.shard`). The engine does not change: the stage runners of
:mod:`monitor.engine` read a :class:`~monitor.distributed.sharded.ShardedIndex`, whose views
route every count, proposal and intersection to the shards of the keys and gather what comes
back, one call per shard at a time (:mod:`monitor.distributed.sharded`). Shards are plain objects
in one process (the tests' and the embedded mode's) or Ray actors.

This is the first part of the issue: the static count (``count --workers N``) over binary
relations with integer vertex ids. What the partitioned engine cannot run yet is refused at
start, by name (:func:`~monitor.distributed.count.unsupported`).
"""
