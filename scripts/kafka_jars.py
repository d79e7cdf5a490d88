"""What the local broker runs on: the Kafka version ``scripts/kafka/pom.xml`` names, a Java 17+
runtime, and the broker's jars, fetched once with Maven into a cache directory (under a lock,
so concurrent test sessions fetch them once: ``scripts/local_jvm.py``). Standard library only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import IO

from scripts.local_jvm import fetch_once, java_major, pom_property, user_cache_dir

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
POM = HERE / "kafka" / "pom.xml"
MIN_JAVA = 17
MVN_HINT = (
    "the Kafka jars are fetched from Maven Central once with Maven (e.g. `apt-get install "
    "maven`), or point SGM_KAFKA_CACHE at a directory whose libs/ already holds them"
)


class KafkaLocalError(RuntimeError):
    """Anything that keeps the local broker from being fetched, started or stopped."""


def kafka_version(pom: Path = POM) -> str:
    """The Kafka version that ``scripts/kafka/pom.xml`` fetches (its ``kafka.version``)."""
    return pom_property(pom, "kafka.version", KafkaLocalError)


def default_cache_dir(version: str | None = None) -> Path:
    """``$SGM_KAFKA_CACHE``, else ``~/.cache/subgraph-monitor/kafka-VERSION``."""
    return user_cache_dir("SGM_KAFKA_CACHE", lambda: f"kafka-{version or kafka_version()}")


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
    major = java_major(java, KafkaLocalError)
    if major < MIN_JAVA:
        raise KafkaLocalError(
            f"{java} is Java {major}; the Kafka {kafka_version()} broker needs Java {MIN_JAVA}+ "
            f"(set JAVA_HOME to a newer JDK)"
        )
    return java


def fetch_jars(
    cache_dir: Path | None = None, *, pom: Path = POM, log: IO[str] | None = None
) -> Path:
    """The directory of broker jars, fetched with Maven the first time (then reused).

    The jars are complete when ``libs/.complete`` holds the digest of the pom that fetched them; a
    changed pom fetches again. A lock makes concurrent callers wait for one fetch.
    """
    version = kafka_version(pom)
    return fetch_once(
        pom,
        ["dependency:copy-dependencies"],
        cache_dir if cache_dir is not None else default_cache_dir(version),
        "libs",
        complete=lambda staging: any(staging.glob("kafka_2.13-*.jar")),
        what=f"the Kafka {version} jars",
        error=KafkaLocalError,
        tool="kafka-local",
        mvn_hint=MVN_HINT,
        log=log,
    )
