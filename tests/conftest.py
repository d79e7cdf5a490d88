"""Shared test configuration: deterministic hypothesis runs in CI, the datasets folder, a real
schema registry (one per test process, started on first use)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from scripts.registry_local import RegistryLocalError, SchemaRegistry

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


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    """Apicurio Registry (Confluent-compatible API, in memory) run by ``scripts/registry_local``;
    tests use subjects of their own. Never skipped: without one (no Java 21+, no Maven the
    first time) a test that needs it fails with the reason."""
    registry = SchemaRegistry(run_dir=tmp_path_factory.mktemp("registry"))
    try:
        registry.start()
    except RegistryLocalError as exc:
        pytest.fail(f"no schema registry for the tests: {exc}", pytrace=False)
    try:
        yield registry
    finally:
        registry.close()
