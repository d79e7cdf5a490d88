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
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
