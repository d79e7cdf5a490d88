"""What the local JVM services share: ``scripts/kafka_local.py``'s broker and
``scripts/registry_local.py``'s schema registry.

* their application, fetched once with Maven into a cache directory (:func:`fetch_once`: under a
  lock, so that concurrent test sessions fetch it once, and marked complete with the digest of the
  pom that fetched it, so that a changed pom fetches again);
* the ``java`` to run it with (:func:`java_major`);
* the JVM as a child process: killed with its parent (:func:`set_parent_death_signal`), stopped
  with SIGTERM, then SIGKILL (:func:`stop_process`).

Each function raises the error class its caller passes (``KafkaLocalError``,
``RegistryLocalError``). Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from scripts.file_lock import locked

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
MAVEN_TIMEOUT = 1800.0  # seconds: "30 minutes" in the error message


# --------------------------------------------------------------------------------------------
# fetched once with Maven


def pom_property(pom: Path, name: str, error: type[Exception]) -> str:
    """The value of the property ``name`` (``<properties><name>``) of a Maven pom."""
    node = ET.parse(pom).getroot().find(f"m:properties/m:{name}", POM_NS)
    if node is None or not (node.text or "").strip():
        raise error(f"{pom} has no <{name}> property")
    return (node.text or "").strip()


def user_cache_dir(env: str, name: Callable[[], str]) -> Path:
    """``$env`` if set, else ``~/.cache/subgraph-monitor/<name()>`` (only then is name called)."""
    value = os.environ.get(env)
    if value:
        return Path(value).expanduser()
    return Path.home() / ".cache" / "subgraph-monitor" / name()


def find_mvn(error: type[Exception], hint: str) -> str:
    """``mvn`` on PATH; else ``error`` with ``hint`` (what it is for, what to do instead)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise error(f"mvn not found on PATH: {hint}")
    return mvn


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def fetch_once(
    pom: Path,
    goal: Sequence[str],
    cache: Path,
    target: str,
    *,
    complete: Callable[[Path], bool],
    what: str,
    error: type[Exception],
    tool: str,
    mvn_hint: str,
    log: IO[str] | None = None,
) -> Path:
    """``cache/target``, written by ``mvn -f pom GOAL -DoutputDirectory=...`` the first time.

    Maven writes into a staging directory, renamed to ``target`` once ``complete(staging)`` holds;
    ``target/.complete`` then holds the digest of ``pom``, and a changed pom fetches again. A lock
    (``cache/.lock``) makes concurrent callers wait for one fetch. ``what`` names the result in
    the messages (``error`` for a failure, ``tool: ...`` lines on ``log`` for progress).
    """
    log = log if log is not None else sys.stderr
    result = cache / target
    marker = result / ".complete"
    digest = _pom_digest(pom)
    if marker.is_file() and marker.read_text().strip() == digest:
        return result
    with locked(cache / ".lock"):
        if marker.is_file() and marker.read_text().strip() == digest:
            return result
        mvn = find_mvn(error, mvn_hint)
        staging = cache / f"{target}.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        print(f"{tool}: fetching {what} with Maven into {result}", file=log)
        started = time.monotonic()
        cmd = [mvn, "-B", "-q", "-f", str(pom), *goal, f"-DoutputDirectory={staging}"]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise error(f"Maven did not fetch {what} in 30 minutes: {' '.join(cmd)}") from exc
        if done.returncode != 0 or not complete(staging):
            shutil.rmtree(staging, ignore_errors=True)
            output = tail_text(done.stdout + done.stderr, 40)
            raise error(
                f"Maven could not fetch {what} (exit {done.returncode}):\n"
                f"  {' '.join(cmd)}\n{output}"
            )
        shutil.rmtree(result, ignore_errors=True)
        staging.rename(result)
        marker.write_text(digest + "\n")
        print(f"{tool}: {what} fetched in {time.monotonic() - started:.1f}s", file=log)
    return result


def tail_text(text: str, lines: int) -> str:
    """The last ``lines`` lines of a tool's output, indented for an error message."""
    return "\n".join("  | " + line for line in text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------------
# the JVM


def java_major(java: str, error: type[Exception]) -> int:
    """The major version ``java -version`` reports (8 for "1.8.0_..."); ``error`` if it does not
    run or names no version."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise error(f"{java} -version failed: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise error(f"cannot read the Java version from `{java} -version`: {out.stderr}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def set_parent_death_signal() -> None:
    """In the child before exec: SIGKILL it when its parent dies (Linux), so no orphan survives."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def terminate(
    pid: int | None, sig: signal.Signals, timeout: float, alive: Callable[[], bool]
) -> bool:
    """Send ``sig`` to ``pid`` and wait up to ``timeout`` for it to exit; True if it exited.

    ``alive()`` says whether it still runs (for a child of this process, ``Popen.poll``, which
    also reaps it).
    """
    if pid is None or not alive():
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return True
        time.sleep(0.1)
    return not alive()


def stop_process(
    pid: int | None, alive: Callable[[], bool], timeout: float, *, who: str, log: IO[str]
) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL if it has not exited within ``timeout``; says so
    on ``log`` as ``who`` ("tool: the service")."""
    if not terminate(pid, signal.SIGTERM, timeout, alive):
        print(f"{who} did not stop within {timeout:.0f}s of SIGTERM; killing it", file=log)
        terminate(pid, signal.SIGKILL, 30.0, alive)
