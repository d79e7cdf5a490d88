"""The binaries the deployment and site tests need: helm, k8s-validate, promtool, prometheus and
chromium.

One implementation for every user: ``scripts/deploy-tools ensure`` (builds or installs them all
and prints their paths) is a thin command line over :func:`main`, ``tests/deploy/conftest.py``
calls :func:`helm`, :func:`k8s_validate`, :func:`promtool` and :func:`prometheus`, and
``tests/docs/test_browser.py`` calls :func:`chromium` (the documentation site in a headless
browser). Python 3.11 standard library only.

Layout, under ``${SGM_TOOLS_CACHE:-~/.cache/subgraph-monitor/tools}``:

* ``helm-vVERSION/helm``: built once by ``go install helm.sh/helm/v3/cmd/helm@vVERSION`` (needs
  ``go``; about 2 minutes with a cold Go module cache);
* ``k8s-validate-HASH/k8s-validate``: built by ``go build`` from ``tools/k8s-validate``, keyed by a
  hash of its ``go.mod``, ``go.sum`` and ``*.go``, so that an edit rebuilds it.

``promtool`` and ``prometheus`` are taken from ``PATH`` (Debian/Ubuntu package ``prometheus``), and
``chromium`` likewise (Debian package ``chromium``, which runs headless: ``--headless=new``); when
missing they are installed with ``apt-get install -y prometheus`` (or ``chromium``) if running as
root, otherwise the error says what to install. Builds and installs hold a file lock, so that
concurrent pytest processes do not build the same tool at once.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from scripts.file_lock import locked

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VALIDATOR_SRC = REPO / "tools" / "k8s-validate"
HELM_VERSION = "v3.22.0"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
GO_FALLBACKS = (Path("/usr/local/go/bin/go"), Path.home() / "go" / "bin" / "go")
APT_PACKAGE = "prometheus"
CHROMIUM_PACKAGE = "chromium"
PROMETHEUS_HINT = (
    "install the Prometheus tools, e.g. `sudo apt-get install {package}` (Debian/Ubuntu) or a "
    "release from https://prometheus.io/download/ with {name} on PATH"
)
CHROMIUM_HINT = (
    "install Chromium, e.g. `sudo apt-get install {package}` (Debian) or `sudo snap install "
    "chromium` (Ubuntu), with {name} on PATH"
)


class DeployToolsError(RuntimeError):
    """A tool could not be found, built or installed; the message says what to do."""


def cache_dir() -> Path:
    env = os.environ.get("SGM_TOOLS_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "subgraph-monitor" / "tools"


def _log(log: IO[str] | None, message: str) -> None:
    stream = log if log is not None else sys.stderr
    stream.write(f"deploy-tools: {message}\n")
    stream.flush()


def find_go() -> Path:
    """``go`` from ``$GO``, ``PATH`` or a usual install location."""
    env = os.environ.get("GO")
    candidates = [Path(env)] if env else []
    found = shutil.which("go")
    if found:
        candidates.append(Path(found))
    candidates.extend(GO_FALLBACKS)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise DeployToolsError(
        "building helm and k8s-validate needs Go (https://go.dev/dl/, 1.26 or newer) on PATH "
        "or in $GO"
    )


def _run_go(args: Sequence[str], *, cwd: Path | None, env: dict[str, str], what: str) -> None:
    go = find_go()
    result = subprocess.run(
        [str(go), *args], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise DeployToolsError(
            f"{what} failed ({go} {' '.join(args)}, exit {result.returncode}):\n"
            f"{result.stderr.strip() or result.stdout.strip()}"
        )


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def helm(log: IO[str] | None = None) -> Path:
    """The ``helm`` binary of :data:`HELM_VERSION`, built with ``go install`` the first time."""
    target_dir = cache_dir() / f"helm-{HELM_VERSION}"
    binary = target_dir / "helm"
    if _executable(binary):
        return binary
    with locked(cache_dir() / ".helm.lock"):
        if _executable(binary):  # built by another process while we waited
            return binary
        _log(log, f"building helm {HELM_VERSION} with go install (first time only, ~2 min)")
        staging = cache_dir() / f"helm-{HELM_VERSION}.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            _run_go(
                ["install", f"{HELM_PACKAGE}@{HELM_VERSION}"],
                cwd=None,
                env={"GOBIN": str(staging), "CGO_ENABLED": "0"},
                what=f"building helm {HELM_VERSION}",
            )
            shutil.rmtree(target_dir, ignore_errors=True)
            staging.rename(target_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not _executable(binary):
        raise DeployToolsError(f"go install did not produce {binary}")
    return binary


def validator_digest(src: Path = VALIDATOR_SRC) -> str:
    """A hash of the validator's sources: ``go.mod``, ``go.sum`` and every ``*.go``."""
    files = [src / "go.mod", src / "go.sum", *sorted(src.rglob("*.go"))]
    digest = hashlib.sha256()
    for path in files:
        if not path.is_file():
            raise DeployToolsError(f"{path} is missing (the k8s-validate sources)")
        digest.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def k8s_validate(log: IO[str] | None = None, *, src: Path = VALIDATOR_SRC) -> Path:
    """The ``k8s-validate`` binary built from ``tools/k8s-validate``, rebuilt when it changes."""
    target_dir = cache_dir() / f"k8s-validate-{validator_digest(src)}"
    binary = target_dir / "k8s-validate"
    if _executable(binary):
        return binary
    with locked(cache_dir() / ".k8s-validate.lock"):
        if _executable(binary):
            return binary
        _log(log, f"building k8s-validate from {src} with go build")
        target_dir.mkdir(parents=True, exist_ok=True)
        partial = target_dir / f"k8s-validate.partial-{os.getpid()}"
        try:
            _run_go(
                ["build", "-trimpath", "-o", str(partial), "."],
                cwd=src,
                env={"CGO_ENABLED": "0"},
                what="building k8s-validate",
            )
            partial.replace(binary)
        finally:
            partial.unlink(missing_ok=True)
    return binary


def _from_path_or_apt(
    name: str,
    log: IO[str] | None,
    *,
    package: str = APT_PACKAGE,
    hint: str = PROMETHEUS_HINT,
) -> Path:
    """``name`` from ``PATH``, else the Debian ``package`` installed with apt-get when running as
    root, else an error with ``hint`` (formatted with ``name`` and ``package``)."""
    found = shutil.which(name)
    if found:
        return Path(found)
    apt_get = shutil.which("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        raise DeployToolsError(f"{name} is not on PATH: {hint.format(name=name, package=package)}")
    with locked(cache_dir() / ".apt.lock"):
        found = shutil.which(name)
        if found:
            return Path(found)
        _log(log, f"{name} is missing: installing the Debian package {package} with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for args in (["update"], ["install", "-y", "--no-install-recommends", package]):
            result = subprocess.run(
                [apt_get, *args], env=env, capture_output=True, text=True, check=False
            )
            if result.returncode != 0:
                raise DeployToolsError(
                    f"apt-get {' '.join(args)} failed (exit {result.returncode}):\n"
                    f"{result.stderr.strip()[-2000:]}"
                )
    found = shutil.which(name)
    if not found:
        raise DeployToolsError(f"apt-get installed {package} but {name} is still not on PATH")
    return Path(found)


def promtool(log: IO[str] | None = None) -> Path:
    """``promtool`` from ``PATH``, installed with apt-get (as root) when missing."""
    return _from_path_or_apt("promtool", log)


def prometheus(log: IO[str] | None = None) -> Path:
    """``prometheus`` from ``PATH``, installed with apt-get (as root) when missing."""
    return _from_path_or_apt("prometheus", log)


def chromium(log: IO[str] | None = None) -> Path:
    """``chromium`` (headless-capable) from ``PATH``, installed with apt-get (as root) when
    missing."""
    return _from_path_or_apt("chromium", log, package=CHROMIUM_PACKAGE, hint=CHROMIUM_HINT)


def ensure_all(log: IO[str] | None = None) -> dict[str, Path]:
    """Every tool, built or installed as needed: name -> path."""
    return {
        "helm": helm(log),
        "k8s-validate": k8s_validate(log),
        "promtool": promtool(log),
        "prometheus": prometheus(log),
        "chromium": chromium(log),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="deploy-tools",
        description="Build or install the tools the Helm chart's and the site's tests use "
        f"(cache: $SGM_TOOLS_CACHE or {Path('~/.cache/subgraph-monitor/tools')}).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "ensure", help="build/install helm, k8s-validate, promtool, prometheus, chromium"
    )
    args = parser.parse_args(argv)
    if args.command == "ensure":
        try:
            tools = ensure_all()
        except DeployToolsError as exc:
            sys.stderr.write(f"deploy-tools: {exc}\n")
            return 1
        for name, path in tools.items():
            sys.stdout.write(f"{name}\t{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
