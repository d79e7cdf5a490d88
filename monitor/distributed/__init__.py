"""The partitioned engine (issue #33): each relation's index split by key over shards.

A binary relation's forward adjacency (``src -> dst``) is partitioned by ``src``, its reverse
one by ``dst``: the pair ``(key, value)`` of position ``q`` lives on shard ``key % S`` under the
local key ``key // S``, so every shard's CSR spans ``1/S`` of the keys and holds ``1/S`` of the
pairs (:mod:`monitor.distributed.shard`). The engine does not change: the stage runners of
:mod:`monitor.engine` read a :class:`~monitor.distributed.sharded.ShardedIndex`, whose views
route every count, proposal and intersection to the shards of the keys and gather what comes
back, one call per shard at a time (:mod:`monitor.distributed.sharded`). Shards are plain objects
in one process (the tests' and the embedded mode's) or Ray actors.

It runs every query the single process runs: the static count (:mod:`.count`), the epochs of
delta queries (:mod:`.delta`) with the file job on them (:mod:`.filejob`), over relations of one
to eight ids with vertex ids of any kind (:mod:`.vertices`) and events with fields and event
time (:mod:`.shard_events`, :mod:`.sharded_events`), durable per shard (:mod:`.shard_store`).
"""
