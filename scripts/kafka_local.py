"""A single-node Apache Kafka broker (KRaft, combined broker + controller) from Maven Central jars.

One implementation for both users: ``scripts/kafka-local`` (``up``, ``down``, ``status``,
``fetch``) is a thin command line over :func:`main`, and the tests use :class:`KafkaBroker` through
``tests/kafka_broker.py``. Python 3.11 standard library only; needs ``java`` (17 or newer) and, the
first time, ``mvn`` (the jars are then cached).

Layout:

* jars: ``${SGM_KAFKA_CACHE:-~/.cache/subgraph-monitor/kafka-VERSION}/libs``, fetched once by
  ``mvn dependency:copy-dependencies`` over ``scripts/kafka/pom.xml`` (which names the version);
* one broker's run directory (``config/``, ``data/``, ``logs/server.log``, ``state.json``): for the
  command line ``${SGM_KAFKA_RUN:-<repo>/.cache/kafka-local}``, for the tests a temporary one.

The broker listens on 127.0.0.1 only, on free ports chosen at the first start and kept in the run
directory, so that a stopped broker starts again on the same port with the same data.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
POM = HERE / "kafka" / "pom.xml"
HOST = "127.0.0.1"
NODE_ID = 1
MIN_JAVA = 17
DEFAULT_HEAP = "512m"
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_STOP_TIMEOUT = 30.0
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"

# Exactly-once on one node: the internal topics must be creatable with one replica, and a
# consumer group must not wait for more members. Topics are created explicitly by the tests.
BROKER_SETTINGS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "min.insync.replicas": "1",
    "default.replication.factor": "1",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # After a SIGKILL the restarted broker must wait for its old registration to expire
    # (DUPLICATE_BROKER_REGISTRATION): 4 s instead of 9 s.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    "auto.create.topics.enable": "false",
    "delete.topic.enable": "true",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.retention.hours": "-1",
}

LOG4J2_PROPERTIES = """\
# Written by scripts/kafka_local.py: everything to stdout, which is logs/server.log.
status = warn
name = kafka-local
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


class KafkaLocalError(RuntimeError):
    """Anything that keeps the local broker from being fetched, started or stopped."""


# --------------------------------------------------------------------------------------------
# versions, tools, jars


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
            output = _tail_text(done.stdout + done.stderr, 40)
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


# --------------------------------------------------------------------------------------------
# ports and the wire protocol (enough of it to ask a broker for its metadata)


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server can listen on host:port (SO_REUSEADDR, as the JVM binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


class ProtocolError(Exception):
    pass


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[tuple[int, str, int], ...]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.buf = io.BytesIO(data)

    def take(self, n: int) -> bytes:
        out = self.buf.read(n)
        if len(out) != n:
            raise ProtocolError("short response")
        return out

    def i8(self) -> int:
        return int(struct.unpack(">b", self.take(1))[0])

    def i16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n).decode()

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def _request(
    sock: socket.socket, api_key: int, version: int, corr: int, body: bytes, flexible: bool
) -> _Reader:
    client = b"kafka-local"
    header = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    if flexible:
        header += b"\x00"  # no tagged fields
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    reader = _Reader(_recv_exact(sock, size))
    if reader.i32() != corr:
        raise ProtocolError("correlation id mismatch")
    if flexible and api_key != 18:  # ApiVersions responses always use header v0
        reader.tagged_fields()
    return reader


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ProtocolError("connection closed by the broker")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def fetch_metadata(host: str, port: int, timeout: float = 5.0) -> ClusterMetadata:
    """ApiVersions, then a Metadata request (no topics): what a client does first."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        reader = _request(sock, 18, 0, 1, b"", flexible=False)
        error = reader.i16()
        if error != 0:
            raise ProtocolError(f"ApiVersions error code {error}")
        ranges = {}
        for _ in range(reader.i32()):
            key, low, high = reader.i16(), reader.i16(), reader.i16()
            ranges[key] = (low, high)
        if 3 not in ranges:
            raise ProtocolError("the broker offers no Metadata API")
        low, high = ranges[3]
        version = min(high, 12)
        if version < max(low, 4):
            raise ProtocolError(f"no usable Metadata version in {low}..{high}")
        flexible = version >= 9
        if flexible:
            body = b"\x01" + b"\x00"  # topics: empty compact array; allow_auto_topic_creation
            if version <= 10:
                body += b"\x00"  # include_cluster_authorized_operations
            body += b"\x00" + b"\x00"  # include_topic_authorized_operations; tagged fields
        else:
            body = struct.pack(">i", 0) + b"\x00"
            if version >= 8:
                body += b"\x00\x00"
        reader = _request(sock, 3, version, 2, body, flexible=flexible)
        reader.i32()  # throttle_time_ms
        brokers = []
        count = reader.uvarint() - 1 if flexible else reader.i32()
        for _ in range(max(count, 0)):
            node = reader.i32()
            bhost = reader.compact_string() if flexible else reader.string()
            bport = reader.i32()
            _rack = reader.compact_string() if flexible else reader.string()
            if flexible:
                reader.tagged_fields()
            brokers.append((node, bhost or "", bport))
        cluster_id = reader.compact_string() if flexible else reader.string()
        controller = reader.i32()
        return ClusterMetadata(cluster_id, controller, tuple(brokers))


# --------------------------------------------------------------------------------------------
# the broker


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _tail_text(text: str, lines: int) -> str:
    return "\n".join("  | " + line for line in text.splitlines()[-lines:])


def _tail_file(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_bytes()[-64_000:].decode(errors="replace")
    except OSError:
        return f"  (no log at {path})"
    return _tail_text(data, lines) or f"  ({path} is empty)"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not a running broker
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _set_parent_death_signal() -> None:
    """In the child before exec: SIGKILL it when its parent dies (Linux), so no orphan survives."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class KafkaBroker:
    """One single-node KRaft broker in ``run_dir``.

    ``start()`` fetches the jars if needed, formats the storage the first time, starts the JVM in
    the background and returns once a Metadata request lists the broker. ``stop()`` (SIGTERM, then
    SIGKILL after ``stop_timeout``) and ``kill()`` (SIGKILL) keep the run directory, so ``start()``
    brings back the same broker, on the same port, with its data. ``close()`` stops and deletes.

    ``die_with_parent`` (for tests) makes the kernel kill the broker if the Python process that
    started it dies, even by SIGKILL; start it from a thread that lives as long as the broker.
    """

    def __init__(
        self,
        run_dir: Path | str | None = None,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        cache_dir: Path | None = None,
        heap: str | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        die_with_parent: bool = False,
        settings: Mapping[str, str] | None = None,
        log: IO[str] | None = None,
    ) -> None:
        self.run_dir = (
            Path(tempfile.mkdtemp(prefix="sgm-kafka-")) if run_dir is None else Path(run_dir)
        ).absolute()
        self.cache_dir = cache_dir
        self.heap = heap or os.environ.get("SGM_KAFKA_HEAP") or DEFAULT_HEAP
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.die_with_parent = die_with_parent
        self.settings = dict(settings or {})
        self.log = log if log is not None else sys.stderr
        self._process: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self.started_in: float | None = None  # seconds the last start() took
        state = self._read_state()
        self.port: int | None = port if port is not None else state.get("port")
        self.controller_port: int | None = (
            controller_port if controller_port is not None else state.get("controller_port")
        )
        self.cluster_id: str | None = state.get("cluster_id")
        pid = state.get("pid")
        if isinstance(pid, int) and self._is_our_broker(pid):
            self._pid = pid  # a broker started by another process (the command line)

    # paths ----------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.run_dir / "config" / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.run_dir / "logs" / "server.log"

    @property
    def state_path(self) -> Path:
        return self.run_dir / "state.json"

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise KafkaLocalError("the broker has no port yet: start() it first")
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._pid if self.running else None

    @property
    def running(self) -> bool:
        return self._alive()

    def _alive(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self._pid is not None and self._is_our_broker(self._pid)

    def _is_our_broker(self, pid: int) -> bool:
        if not _pid_alive(pid):
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.config_path).encode() in cmdline

    # state ----------------------------------------------------------------------------------
    def _read_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self) -> None:
        state = {
            "kafka_version": kafka_version(),
            "pid": self.pid,
            "bootstrap": self.bootstrap if self.port else None,
            "port": self.port,
            "controller_port": self.controller_port,
            "cluster_id": self.cluster_id,
            "run_dir": str(self.run_dir),
            "config": str(self.config_path),
            "data_dir": str(self.data_dir),
            "log": str(self.log_path),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_path)

    # configuration --------------------------------------------------------------------------
    def _formatted(self) -> bool:
        return (self.data_dir / "meta.properties").is_file()

    def _write_config(self) -> None:
        assert self.port is not None and self.controller_port is not None
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **BROKER_SETTINGS,
            **self.settings,
        }
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        lines = ["# Written by scripts/kafka_local.py: a single-node KRaft broker on loopback."]
        lines += [f"{key}={value}" for key, value in settings.items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        (self.config_path.parent / "log4j2.properties").write_text(LOG4J2_PROPERTIES)

    def _ports_from_config(self) -> None:
        """The ports of a formatted run directory whose state.json is gone."""
        try:
            text = self.config_path.read_text()
        except OSError as exc:
            raise KafkaLocalError(
                f"{self.run_dir} holds data but neither state.json nor config: remove it"
            ) from exc
        for name, port in re.findall(r"(PLAINTEXT|CONTROLLER)://[^:,]+:(\d+)", text):
            if name == "PLAINTEXT" and self.port is None:
                self.port = int(port)
            elif name == "CONTROLLER" and self.controller_port is None:
                self.controller_port = int(port)

    def _java_command(self, java: str, libs: Path, main: str) -> list[str]:
        extra = os.environ.get("SGM_KAFKA_JAVA_OPTS", "").split()
        return [
            java,
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExplicitGCInvokesConcurrent",
            # C1 only: starts in ~3 s instead of ~5 s and uses less CPU; a test broker never runs
            # long enough to gain from C2 (SGM_KAFKA_JAVA_OPTS=-XX:TieredStopAtLevel=4 undoes it).
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.config_path.parent / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.log_path.parent}",
            *extra,
            "-cp",
            f"{libs}/*",
            main,
        ]

    def _format(self, java: str, libs: Path) -> None:
        self.cluster_id = self.cluster_id or new_cluster_id()
        cmd = self._java_command(java, libs, STORAGE_TOOL_MAIN)
        cmd += ["format", "-t", self.cluster_id, "-c", str(self.config_path)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0 or not self._formatted():
            raise KafkaLocalError(
                f"kafka-storage format failed (exit {done.returncode}):\n"
                + _tail_text(done.stdout + done.stderr, 40)
            )

    # lifecycle ------------------------------------------------------------------------------
    def start(self) -> str:
        """Start (or restart) the broker; returns its bootstrap address once it serves metadata."""
        if self.running:
            return self.bootstrap
        began = time.monotonic()
        java = find_java()
        libs = fetch_jars(self.cache_dir, log=self.log)
        formatted = self._formatted()
        if formatted and (self.port is None or self.controller_port is None):
            self._ports_from_config()
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        for what, port in (("broker", self.port), ("controller", self.controller_port)):
            if not port_is_free(port):
                raise KafkaLocalError(
                    f"{HOST}:{port} (the {what} port of {self.run_dir}) is already in use by "
                    "another process: stop that process, or use other ports (a new run "
                    "directory picks free ones)"
                )
        self._write_config()
        if not formatted:
            self._format(java, libs)
        self._write_state()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"\n===== kafka-local start {time.ctime()} =====\n".encode())
            out.flush()
            self._process = subprocess.Popen(
                [*self._java_command(java, libs, BROKER_MAIN), str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal if self.die_with_parent else None,
            )
        self._pid = self._process.pid
        self._write_state()
        try:
            self._wait_ready(began)
        except BaseException:
            self._terminate(signal.SIGKILL, 10.0)
            raise
        self.started_in = time.monotonic() - began
        return self.bootstrap

    def _wait_ready(self, began: float) -> None:
        assert self.port is not None
        deadline = began + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running:
                code = self._process.returncode if self._process is not None else None
                raise KafkaLocalError(
                    f"the Kafka broker exited during start (exit {code}); "
                    f"the end of {self.log_path}:\n{_tail_file(self.log_path)}"
                )
            try:
                meta = fetch_metadata(HOST, self.port, timeout=2.0)
            except (OSError, ProtocolError) as exc:
                last = exc
            else:
                if any(node == NODE_ID and p == self.port for node, _, p in meta.brokers):
                    return
                last = ProtocolError(f"metadata does not list the broker yet: {meta}")
            time.sleep(0.2)
        raise KafkaLocalError(
            f"the Kafka broker was not ready within {self.start_timeout:g}s "
            f"(last probe: {last}); the end of {self.log_path}:\n{_tail_file(self.log_path)}"
        )

    def _terminate(self, sig: signal.Signals, timeout: float) -> bool:
        """Send sig and wait up to timeout for the exit; True if it exited."""
        pid = self._pid
        if pid is None or not self._alive():
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._alive():
                return True
            time.sleep(0.1)
        return not self._alive()

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after stop_timeout; the data stays."""
        if not self._terminate(signal.SIGTERM, self.stop_timeout):
            print(
                f"kafka-local: the broker did not stop within {self.stop_timeout:.0f}s "
                "of SIGTERM; killing it",
                file=self.log,
            )
            self._terminate(signal.SIGKILL, 30.0)
        self._finish()

    def kill(self) -> None:
        """SIGKILL (a crash); the data stays and start() recovers it."""
        self._terminate(signal.SIGKILL, 30.0)
        self._finish()

    def _finish(self) -> None:
        if self.running:
            raise KafkaLocalError(f"the broker (pid {self._pid}) would not stop")
        if self._process is not None:
            self._process.wait()
        self._process = None
        self._pid = None
        if self.run_dir.is_dir():
            self._write_state()

    def close(self) -> None:
        """Stop and delete the run directory (data, logs, config)."""
        self.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"running pid {self.pid}" if self.running else "stopped"
        return f"KafkaBroker({self.run_dir}, port={self.port}, {state})"


# --------------------------------------------------------------------------------------------
# command line


def _say(*parts: object, file: IO[str] | None = None) -> None:
    """The command line's output: the bootstrap address on stdout, everything else on stderr."""
    (file or sys.stdout).write(" ".join(map(str, parts)) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafka-local",
        description="A single-node Apache Kafka broker (KRaft) on 127.0.0.1 for development "
        "and tests, from Maven Central jars. `up` prints the bootstrap address on stdout.",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="config, data, logs and state (default $SGM_KAFKA_RUN or <repo>/.cache/kafka-local)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the broker (or report the running one)")
    up.add_argument("--port", type=int, default=None, help="broker port (default: a free one)")
    up.add_argument("--controller-port", type=int, default=None)
    up.add_argument("--heap", default=None, help=f"JVM -Xmx (default {DEFAULT_HEAP})")
    up.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT)
    down = sub.add_parser("down", help="stop the broker and delete its run directory")
    down.add_argument("--keep", action="store_true", help="keep the data (a later up restarts)")
    down.add_argument("--timeout", type=float, default=DEFAULT_STOP_TIMEOUT)
    sub.add_parser("status", help="whether it runs, and its address (exit 3 if not)")
    sub.add_parser("fetch", help="only fetch the jars; print their directory")
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir or default_run_dir()
    try:
        if args.command == "fetch":
            _say(fetch_jars())
            return 0
        if args.command == "up":
            broker = KafkaBroker(
                run_dir,
                port=args.port,
                controller_port=args.controller_port,
                heap=args.heap,
                start_timeout=args.timeout,
            )
            if broker.running:
                _say(f"kafka-local: already running (pid {broker.pid})", file=sys.stderr)
            else:
                broker.start()
                _say(
                    f"kafka-local: Kafka {kafka_version()} up in {broker.started_in or 0:.1f}s "
                    f"(pid {broker.pid}, log {broker.log_path})",
                    file=sys.stderr,
                )
            _say(broker.bootstrap)
            return 0
        broker = KafkaBroker(run_dir)
        if args.command == "status":
            if broker.running:
                _say(f"running {broker.bootstrap} pid {broker.pid} ({run_dir})")
                return 0
            _say(f"not running ({run_dir})")
            return 3
        # down
        broker.stop_timeout = args.timeout
        was_running = broker.running
        broker.stop()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
        _say(
            f"kafka-local: {'stopped' if was_running else 'not running'}"
            f"{'' if args.keep else f'; removed {run_dir}'}",
            file=sys.stderr,
        )
        return 0
    except KafkaLocalError as exc:
        _say(f"kafka-local: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
