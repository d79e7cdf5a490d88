"""A Confluent-compatible schema registry on 127.0.0.1: Apicurio Registry from Maven Central.

:class:`SchemaRegistry` runs Apicurio Registry (the version ``scripts/registry/pom.xml`` names)
in a JVM with in-memory storage (SQL on an in-memory H2 database) and no authentication, and
serves the Confluent Schema Registry API at ``http://127.0.0.1:PORT/apis/ccompat/v7`` (the
:attr:`~SchemaRegistry.url` to give ``confluent_kafka``'s ``SchemaRegistryClient``). Python 3.11
standard library only; needs ``java`` 21 or newer and, the first time, ``mvn``.

Layout:

* the application: ``${SGM_REGISTRY_CACHE:-~/.cache/subgraph-monitor/apicurio-registry-VERSION}/
  quarkus-app`` (Quarkus fast-jar: ``quarkus-run.jar``, ``lib/``, ...), unpacked once by
  ``mvn dependency:unpack`` over ``scripts/registry/pom.xml`` from the ready-made archive Apicurio
  publishes to Maven Central (nothing is compiled);
* one registry's run directory (``registry.log``, ``tmp/``): ``run_dir``, by default a temporary
  one that :meth:`SchemaRegistry.close` deletes.

Environment: ``SGM_REGISTRY_JAVA`` (a ``java`` executable to use), ``SGM_REGISTRY_HEAP``
(``-Xmx``, default 256m), ``SGM_REGISTRY_JAVA_OPTS`` (more JVM options, e.g. ``-Dkey=value``
Quarkus/Apicurio settings), ``SGM_REGISTRY_CACHE``.

Run ``python -m scripts.registry_local [fetch | run [--port N]]`` for a registry by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from scripts.kafka_protocol import free_port, port_is_free
from scripts.local_jvm import (
    fetch_once,
    pom_property,
    set_parent_death_signal,
    stop_process,
    tail_text,
    terminate,
    user_cache_dir,
)
from scripts.local_jvm import java_major as _java_major

HERE = Path(__file__).resolve().parent
POM = HERE / "registry" / "pom.xml"
MIN_JAVA = 21  # Apicurio Registry 3.x is compiled for Java 21 (class file version 65)
HOST = "127.0.0.1"
CCOMPAT_PATH = "/apis/ccompat/v7"
DEFAULT_HEAP = "256m"
DEFAULT_START_TIMEOUT = 180.0
DEFAULT_STOP_TIMEOUT = 30.0
JVM_DIRS = (Path("/usr/lib/jvm"), Path("/usr/local/lib/jvm"), Path("/opt/java"))
MVN_HINT = (
    "Apicurio Registry is fetched from Maven Central once with Maven (e.g. `apt-get install "
    "maven`), or point SGM_REGISTRY_CACHE at a directory whose quarkus-app/ already holds it"
)


class RegistryLocalError(RuntimeError):
    """Anything that keeps the local schema registry from being fetched, started or stopped."""


# --------------------------------------------------------------------------------------------
# the application


def apicurio_version(pom: Path = POM) -> str:
    """The Apicurio Registry version that ``scripts/registry/pom.xml`` fetches."""
    return pom_property(pom, "apicurio.version", RegistryLocalError)


def default_cache_dir(version: str | None = None) -> Path:
    """``$SGM_REGISTRY_CACHE``, else ``~/.cache/subgraph-monitor/apicurio-registry-VERSION``."""
    return user_cache_dir(
        "SGM_REGISTRY_CACHE", lambda: f"apicurio-registry-{version or apicurio_version()}"
    )


def java_major(java: str) -> int | None:
    """The major version of a ``java`` executable (None if it does not run)."""
    try:
        return _java_major(java, RegistryLocalError)
    except RegistryLocalError:
        return None


def find_java(min_major: int = MIN_JAVA) -> str:
    """A ``java`` of version ``min_major`` or newer.

    Tried in order: $SGM_REGISTRY_JAVA, $JAVA_HOME/bin/java, ``java`` on PATH, then the JDKs
    installed under /usr/lib/jvm (and the like), newest first: the default ``java`` of a machine
    is often 17, too old for Apicurio Registry 3.
    """
    candidates: list[str] = []
    if os.environ.get("SGM_REGISTRY_JAVA"):
        candidates.append(os.environ["SGM_REGISTRY_JAVA"])
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    candidates.append(shutil.which("java") or "")
    installed = [java for base in JVM_DIRS if base.is_dir() for java in base.glob("*/bin/java")]
    candidates += [str(java) for java in sorted(installed, reverse=True)]
    seen: dict[str, int | None] = {}
    for java in candidates:
        if not java or not os.access(java, os.X_OK) or java in seen:
            continue
        seen[java] = java_major(java)
        major = seen[java]
        if major is not None and major >= min_major:
            return java
    found = ", ".join(f"{java} ({major or '?'})" for java, major in seen.items()) or "none"
    raise RegistryLocalError(
        f"no Java {min_major}+ found (tried $SGM_REGISTRY_JAVA, $JAVA_HOME, java on PATH and "
        f"{', '.join(map(str, JVM_DIRS))}; found: {found}): Apicurio Registry "
        f"{apicurio_version()} needs Java {min_major}+, e.g. `apt-get install "
        f"openjdk-21-jre-headless`, then set JAVA_HOME or SGM_REGISTRY_JAVA"
    )


def fetch_registry(
    cache_dir: Path | None = None, *, pom: Path = POM, log: IO[str] | None = None
) -> Path:
    """The ``quarkus-app`` directory of Apicurio Registry, unpacked the first time (then reused).

    It is complete when ``quarkus-app/.complete`` holds the digest of the pom that fetched it; a
    changed pom fetches again. A lock makes concurrent callers wait for one fetch.
    """
    version = apicurio_version(pom)
    return fetch_once(
        pom,
        ["dependency:unpack"],
        cache_dir if cache_dir is not None else default_cache_dir(version),
        "quarkus-app",
        complete=lambda staging: (staging / "quarkus-run.jar").is_file(),
        what=f"Apicurio Registry {version}",
        error=RegistryLocalError,
        tool="registry-local",
        mvn_hint=MVN_HINT,
        log=log,
    )


# --------------------------------------------------------------------------------------------
# the registry

START_BANNER = "===== registry-local start"


def log_excerpt(path: Path, lines: int = 25) -> str:
    """What an error message quotes of the registry's log (of its last start): its ERROR and
    ``Caused by:`` lines (a Java stack trace buries the cause), then its last lines."""
    try:
        text = path.read_bytes()[-256_000:].decode(errors="replace")
    except OSError:
        return f"  (no log at {path})"
    text = text[text.rfind(START_BANNER) :] if START_BANNER in text else text
    errors = [
        line
        for line in text.splitlines()
        if re.search(r"\b(ERROR|FATAL|SEVERE)\b", line) or line.startswith("Caused by:")
    ]
    parts = []
    if errors:
        parts.append(f"  the errors in {path}:\n" + tail_text("\n".join(errors), 10))
    parts.append(f"  the end of {path}:\n{tail_text(text, lines) or '  (empty)'}")
    return "\n".join(parts)


class SchemaRegistry:
    """One Apicurio Registry JVM on ``127.0.0.1:port``, with in-memory storage and no auth.

    ``start()`` fetches the application if needed, starts the JVM (its output goes to
    ``run_dir/registry.log``) and returns the ccompat URL once ``GET /subjects`` answers 200.
    ``stop()`` (SIGTERM, then SIGKILL after ``stop_timeout``) ends it, and every schema with it;
    ``close()`` also deletes the run directory if this object made it. As a context manager it
    starts and closes.

    ``port`` None picks a free one at ``start()``. ``compatibility`` is the global compatibility
    level the registry starts with: Confluent's default, BACKWARD (Apicurio's own default is
    NONE); None keeps Apicurio's. ``settings`` are more Quarkus/Apicurio properties (-D).

    ``die_with_parent`` makes the kernel kill the JVM when the thread that started it dies (the
    whole process included, even by SIGKILL), so no registry outlives a test session.
    """

    def __init__(
        self,
        port: int | None = None,
        run_dir: Path | None = None,
        *,
        cache_dir: Path | None = None,
        heap: str | None = None,
        compatibility: str | None = "BACKWARD",
        settings: Mapping[str, str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        die_with_parent: bool = True,
        log: IO[str] | None = None,
    ) -> None:
        self._own_run_dir = run_dir is None
        self.run_dir = (
            Path(tempfile.mkdtemp(prefix="sgm-registry-")) if run_dir is None else Path(run_dir)
        ).absolute()
        self.port = port
        self.cache_dir = cache_dir
        self.heap = heap or os.environ.get("SGM_REGISTRY_HEAP") or DEFAULT_HEAP
        self.compatibility = compatibility
        self.settings = dict(settings or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.die_with_parent = die_with_parent
        self.log = log if log is not None else sys.stderr
        self._process: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None  # seconds the last start() took

    # addresses ------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: Apicurio's own APIs are under it too (/apis/registry/v3)."""
        if self.port is None:
            raise RegistryLocalError("the schema registry has no port yet: start() it first")
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API, ``http://127.0.0.1:PORT/apis/ccompat/v7``."""
        return self.base_url + CCOMPAT_PATH

    @property
    def log_path(self) -> Path:
        return self.run_dir / "registry.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # lifecycle ------------------------------------------------------------------------------
    def properties(self) -> dict[str, str]:
        """The Quarkus/Apicurio settings the JVM gets as system properties (they win over the
        environment's QUARKUS_*/APICURIO_* variables and the application's defaults)."""
        assert self.port is not None
        tmp = self.run_dir / "tmp"
        props = {
            "quarkus.http.host": HOST,
            "quarkus.http.port": str(self.port),
            # The management interface (health, metrics) is on by default on port 9000: keep it
            # on loopback, on a port of its own choosing, so that registries never collide.
            "quarkus.management.host": HOST,
            "quarkus.management.port": "0",
            # In-memory storage (Apicurio's default, stated so the environment cannot change it).
            "apicurio.storage.kind": "sql",
            "apicurio.storage.sql.kind": "h2",
            "apicurio.datasource.url": "jdbc:h2:mem:registry",
            "apicurio.datasource.jdbc.initial-size": "2",
            "apicurio.datasource.jdbc.min-size": "2",
            "apicurio.datasource.jdbc.max-size": "20",
            # No authentication, no authorization (the defaults, likewise).
            "quarkus.oidc.tenant-enabled": "false",
            "apicurio.authn.basic-client-credentials.enabled": "false",
            "apicurio.auth.role-based-authorization": "false",
            "apicurio.auth.owner-only-authorization": "false",
            "apicurio.storage.snapshot.location": str(tmp),
            "apicurio.import.work-dir": str(tmp),
            "quarkus.log.console.format": "%d{HH:mm:ss,SSS} %-5p [%c{3.}] (%t) %s%e%n",
        }
        if self.compatibility:
            props["apicurio.rules.global.compatibility"] = self.compatibility
        props.update(self.settings)
        return props

    def command(self, java: str, app: Path) -> list[str]:
        extra = os.environ.get("SGM_REGISTRY_JAVA_OPTS", "").split()
        return [
            java,
            f"-Xmx{self.heap}",
            "-Xms32m",
            # Serial GC and C1 only: the smallest footprint and the quickest start (about 4 s)
            # for a registry that holds a few schemas for a test session.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            "-Djava.util.logging.manager=org.jboss.logmanager.LogManager",
            f"-Djava.io.tmpdir={self.run_dir / 'tmp'}",
            *(f"-D{key}={value}" for key, value in self.properties().items()),
            *extra,
            "-jar",
            str(app / "quarkus-run.jar"),
        ]

    def start(self) -> str:
        """Start the registry; returns :attr:`url` once ``GET /subjects`` answers 200."""
        if self.running:
            return self.url
        began = time.monotonic()
        java = find_java()
        app = fetch_registry(self.cache_dir, log=self.log)
        self.port = self.port or free_port()
        if not port_is_free(self.port):
            raise RegistryLocalError(
                f"{HOST}:{self.port} (the schema registry's port) is already in use by another "
                "process: stop that process, or leave the port out to get a free one"
            )
        (self.run_dir / "tmp").mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"\n{START_BANNER} {time.ctime()} =====\n".encode())
            out.flush()
            self._process = subprocess.Popen(
                self.command(java, app),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                start_new_session=True,
                preexec_fn=set_parent_death_signal if self.die_with_parent else None,
            )
        try:
            self._wait_ready(began)
        except BaseException:
            terminate(self.pid, signal.SIGKILL, 10.0, lambda: self.running)
            self._finish()
            raise
        self.started_in = time.monotonic() - began
        return self.url

    def _wait_ready(self, began: float) -> None:
        deadline = began + self.start_timeout
        probe = self.url + "/subjects"
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.running:
                code = self._process.returncode if self._process is not None else None
                raise RegistryLocalError(
                    f"the schema registry exited during start (exit {code}):\n"
                    + log_excerpt(self.log_path)
                )
            try:
                with urllib.request.urlopen(probe, timeout=2.0) as response:
                    if response.status == 200:
                        return
                    last = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise RegistryLocalError(
            f"the schema registry did not answer GET {probe} with 200 within "
            f"{self.start_timeout:g}s (last probe: {last}):\n{log_excerpt(self.log_path)}"
        )

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after stop_timeout. The schemas are gone."""
        who = "registry-local: the registry"
        stop_process(self.pid, lambda: self.running, self.stop_timeout, who=who, log=self.log)
        self._finish()

    def _finish(self) -> None:
        if self.running:
            pid = self._process.pid if self._process is not None else None
            raise RegistryLocalError(f"the schema registry (pid {pid}) would not stop")
        self._process = None

    def close(self) -> None:
        """Stop, and delete the run directory if this object made it (a temporary one)."""
        self.stop()
        if self._own_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> SchemaRegistry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"running pid {self.pid}" if self.running else "stopped"
        return f"SchemaRegistry({self.run_dir}, port={self.port}, {state})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.registry_local",
        description="Apicurio Registry (Confluent-compatible API) on 127.0.0.1, in memory.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="fetch the application into the cache and print its path")
    run = sub.add_parser("run", help="run a registry until interrupted; prints its URL")
    run.add_argument("--port", type=int, default=None, help="default: a free one")
    run.add_argument("--run-dir", type=Path, default=None, help="default: a temporary one")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            sys.stdout.write(f"{fetch_registry()}\n")
            return 0
        with SchemaRegistry(args.port, args.run_dir) as registry:
            sys.stdout.write(registry.url + "\n")
            sys.stdout.flush()
            sys.stderr.write(
                f"registry-local: started in {registry.started_in:.1f}s, "
                f"log {registry.log_path}; Ctrl-C stops it\n"
            )
            with contextlib.suppress(KeyboardInterrupt):
                while registry.running:
                    time.sleep(1.0)
    except RegistryLocalError as exc:
        sys.stderr.write(f"registry-local: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
