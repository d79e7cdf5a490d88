"""The distributed tests' Ray: one local cluster for this package's tests (it takes seconds
to start), shut down before the rest of the suite runs."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tuples_renumbered_often() -> Iterator[None]:
    """Every commit renumbers the tuples of a wide relation's part whose keys outnumber twice
    its pairs (not only past thousands of keys), in process: the property tests cover it."""
    from monitor.distributed import shard

    was = shard.TUPLE_KEYS_MIN
    shard.TUPLE_KEYS_MIN = 0
    yield
    shard.TUPLE_KEYS_MIN = was
