"""Session fixtures for the deployment tests: the paths of helm, k8s-validate, promtool, prometheus.

They come from ``scripts/deploy_tools.py`` (``scripts/deploy-tools ensure`` does the same from the
command line): helm and k8s-validate are built with Go into ``~/.cache/subgraph-monitor/tools`` the
first time, promtool and prometheus are taken from PATH. A tool that cannot be obtained fails the
tests that need it (never skips them): the chart must not go untested silently.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from scripts import deploy_tools


def _obtain(name: str, get: Callable[[], Path]) -> Path:
    try:
        return get()
    except deploy_tools.DeployToolsError as exc:
        pytest.fail(f"cannot obtain {name}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return _obtain("helm", deploy_tools.helm)


@pytest.fixture(scope="session")
def k8s_validate_bin() -> Path:
    return _obtain("k8s-validate", deploy_tools.k8s_validate)


@pytest.fixture(scope="session")
def promtool_bin() -> Path:
    return _obtain("promtool", deploy_tools.promtool)


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    return _obtain("prometheus", deploy_tools.prometheus)
