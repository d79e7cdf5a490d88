"""A single-node Apache Kafka broker (KRaft, combined broker + controller) from Maven Central jars.

One implementation for both users: ``scripts/kafka-local`` (``up``, ``down``, ``status``,
``fetch``) is a thin command line over it (``scripts/kafka_cli.py``), and the tests use
:class:`KafkaBroker` through ``tests/kafka_broker.py``. Python 3.11 standard library only;
needs ``java`` (17 or newer) and, the first time, ``mvn`` (the jars are then cached:
``scripts/kafka_jars.py``). Its settings are ``scripts/kafka_config.py``'s, its readiness probe
``scripts/kafka_protocol.py``'s.

Layout:

* jars: ``${SGM_KAFKA_CACHE:-~/.cache/subgraph-monitor/kafka-VERSION}/libs``, fetched once by
  ``mvn dependency:copy-dependencies`` over ``scripts/kafka/pom.xml`` (which names the version);
* one broker's run directory (``config/``, ``data/``, ``logs/server.log``, ``state.json``): for the
  command line ``${SGM_KAFKA_RUN:-<repo>/.cache/kafka-local}``, for the tests a temporary one.

The broker listens on 127.0.0.1 only, on free ports chosen at the first start and kept in the run
directory, so that a stopped broker starts again on the same port with the same data.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from scripts.kafka_config import BROKER_SETTINGS, LOG4J2_PROPERTIES
from scripts.kafka_jars import KafkaLocalError, fetch_jars, find_java, kafka_version
from scripts.kafka_protocol import ProtocolError, fetch_metadata, free_port, port_is_free
from scripts.local_jvm import set_parent_death_signal, stop_process, tail_text, terminate

HOST = "127.0.0.1"
NODE_ID = 1
DEFAULT_HEAP = "512m"
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_STOP_TIMEOUT = 30.0
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"

# --------------------------------------------------------------------------------------------
# the broker


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _tail_file(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_bytes()[-64_000:].decode(errors="replace")
    except OSError:
        return f"  (no log at {path})"
    return tail_text(data, lines) or f"  ({path} is empty)"


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
                + tail_text(done.stdout + done.stderr, 40)
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
                preexec_fn=set_parent_death_signal if self.die_with_parent else None,
            )
        self._pid = self._process.pid
        self._write_state()
        try:
            self._wait_ready(began)
        except BaseException:
            terminate(self._pid, signal.SIGKILL, 10.0, self._alive)
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

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after stop_timeout; the data stays."""
        who = "kafka-local: the broker"
        stop_process(self._pid, self._alive, self.stop_timeout, who=who, log=self.log)
        self._finish()

    def kill(self) -> None:
        """SIGKILL (a crash); the data stays and start() recovers it."""
        terminate(self._pid, signal.SIGKILL, 30.0, self._alive)
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
