"""Shared test configuration: deterministic hypothesis runs in CI, the datasets folder, and the
tests that start Ray clusters kept on one xdist worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def datasets() -> Path:
    """The SNAP datasets shipped beside the repository (tests skip when they are absent)."""
    if not DATASETS.is_dir():
        pytest.skip(f"datasets not found at {DATASETS}")
    return DATASETS


#: The tests that start Ray clusters. Under xdist (``make test``: ``--dist loadgroup``) they run
#: on one worker, one after another: Ray clusters started at once on one machine share its
#: network, and Ray picks some of its ports by finding one free and handing it over, so two
#: starting together can take the same port (a run saw a driver's node answered by another
#: cluster's raylet). In production each Ray pod has its own network.
RAY_TESTS = (
    "tests/distributed/",
    "tests/kafka/test_serve_distributed.py",
    "tests/kafka/test_dashboard.py",
    "tests/bench/test_distributed",
)


def pytest_itemcollected(item: pytest.Item) -> None:
    """(as each test is collected: xdist reads the groups before other hooks see the items)"""
    if item.nodeid.startswith(RAY_TESTS):
        item.add_marker(pytest.mark.xdist_group("ray"))
