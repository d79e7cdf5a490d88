"""What the local broker runs on: the Kafka version ``scripts/kafka/pom.xml`` names, a Java 17+
runtime, and the broker's jars, fetched once with Maven into a cache directory (under a lock,
so concurrent test sessions fetch them once). Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
POM = HERE / "kafka" / "pom.xml"
MIN_JAVA = 17


class KafkaLocalError(RuntimeError):
    """Anything that keeps the local broker from being fetched, started or stopped."""


def kafka_version(pom: Path = POM) -> str:
    """The Kafka version that ``scripts/kafka/pom.xml`` fetches (its ``kafka.version``)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(pom).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not (node.text or "").strip():
        raise KafkaLocalError(f"{pom} has no <kafka.version> property")
    return (node.text or "").strip()


def default_cache_dir(version: str | None = None) -> Path:
    env = os.environ.get("SGM_KAFKA_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "subgraph-monitor" / f"kafka-{version or kafka_version()}"


def default_run_dir() -> Path:
    env = os.environ.get("SGM_KAFKA_RUN")
    return Path(env).expanduser() if env else REPO / ".cache" / "kafka-local"


def find_java() -> str:
    """The ``java`` to run the broker with ($JAVA_HOME first), checked to be 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    candidates = [str(Path(java_home) / "bin" / "java")] if java_home else []
    candidates.append(shutil.which("java") or "")
    java = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if java is None:
        raise KafkaLocalError(
            "java not found (neither $JAVA_HOME/bin/java nor java on PATH): the local Kafka broker "
            f"needs a Java {MIN_JAVA}+ runtime, e.g. `apt-get install openjdk-17-jre-headless`"
        )
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KafkaLocalError(f"{java} -version failed: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise KafkaLocalError(f"cannot read the Java version from `{java} -version`: {out.stderr}")
    major = int(match.group(1))
    if major == 1:  # "1.8.0_..."
        major = int(match.group(2) or 0)
    if major < MIN_JAVA:
        raise KafkaLocalError(
            f"{java} is Java {major}; the Kafka {kafka_version()} broker needs Java {MIN_JAVA}+ "
            f"(set JAVA_HOME to a newer JDK)"
        )
    return java


def find_mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaLocalError(
            "mvn not found on PATH: the Kafka jars are fetched from Maven Central once with "
            "Maven (e.g. `apt-get install maven`), or point SGM_KAFKA_CACHE at a directory whose "
            "libs/ already holds them"
        )
    return mvn


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch_jars(
    cache_dir: Path | None = None, *, pom: Path = POM, log: IO[str] | None = None
) -> Path:
    """The directory of broker jars, fetched with Maven the first time (then reused).

    The jars are complete when ``libs/.complete`` holds the digest of the pom that fetched them; a
    changed pom fetches again. A lock makes concurrent callers wait for one fetch.
    """
    log = log if log is not None else sys.stderr
    version = kafka_version(pom)
    cache = cache_dir if cache_dir is not None else default_cache_dir(version)
    libs = cache / "libs"
    marker = libs / ".complete"
    digest = _pom_digest(pom)
    if marker.is_file() and marker.read_text().strip() == digest:
        return libs
    with _locked(cache / ".lock"):
        if marker.is_file() and marker.read_text().strip() == digest:
            return libs
        mvn = find_mvn()
        staging = cache / f"libs.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        print(f"kafka-local: fetching the Kafka {version} jars with Maven into {libs}", file=log)
        started = time.monotonic()
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        except subprocess.TimeoutExpired as exc:
            raise KafkaLocalError(
                f"Maven did not fetch the Kafka jars in 30 minutes: {cmd}"
            ) from exc
        if done.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
            shutil.rmtree(staging, ignore_errors=True)
            output = tail_text(done.stdout + done.stderr, 40)
            raise KafkaLocalError(
                f"Maven could not fetch the Kafka {version} jars (exit {done.returncode}):\n"
                f"  {' '.join(cmd)}\n{output}"
            )
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        marker.write_text(digest + "\n")
        count = sum(1 for _ in libs.glob("*.jar"))
        print(f"kafka-local: {count} jars fetched in {time.monotonic() - started:.1f}s", file=log)
    return libs


def tail_text(text: str, lines: int) -> str:
    """The last ``lines`` lines of a tool's output, indented for an error message."""
    return "\n".join("  | " + line for line in text.splitlines()[-lines:])
