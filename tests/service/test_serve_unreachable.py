"""A broker that cannot be reached at start: the service retries, stays live, is not ready."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_broker_is_retried_and_reported_not_ready(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    env = {
        **os.environ,
        "SGM_BOOTSTRAP_SERVERS": f"127.0.0.1:{closed_port()}",
        "SGM_STATE_DIR": str(tmp_path / "state"),
        "SGM_HTTP_PORT": "0",
        "SGM_QUERIES": "triangle",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    try:
        port = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and port is None:
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("{") and "serving /metrics" in line:
                    port = int(json.loads(line)["port"])
            time.sleep(0.2)
        assert port is not None, log.read_text()
        base = f"http://127.0.0.1:{port}"
        retried = False
        while time.monotonic() < deadline and not retried:
            retried = "Kafka is not reachable" in log.read_text(errors="replace")
            time.sleep(0.5)
        assert retried, log.read_text()
        assert urllib.request.urlopen(f"{base}/healthz", timeout=10).status == 200
        try:
            urllib.request.urlopen(f"{base}/readyz", timeout=10)
            raise AssertionError("/readyz should fail while the broker is unreachable")
        except urllib.error.HTTPError as error:
            assert error.code == 503
            body = json.loads(error.read())
            assert body["ready"] is False and "broker_reachable" in body["missing"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
