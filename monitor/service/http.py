"""The operations HTTP server: ``/metrics``, ``/healthz`` and ``/readyz``.

A ``ThreadingHTTPServer`` on a daemon thread, so a slow scrape never blocks the loop and the
process never waits for the server to exit:

- ``GET /metrics``: :meth:`Metrics.render` in the text exposition format 0.0.4; the ``ready``
  gauge is refreshed from :class:`Health` first, so it always agrees with ``/readyz``;
- ``GET /healthz``: ``200 ok`` while the loop beats within its liveness timeout, else ``503``
  with how long it has been silent (Kubernetes restarts the pod);
- ``GET /readyz``: ``200 {"ready": true, ...}`` when partitions are assigned, the state is
  recovered and the broker is reachable, else ``503 {"ready": false, "missing": [...]}``;
- anything else: ``404``. ``HEAD`` answers as ``GET`` without a body.

Requests are logged at DEBUG through :mod:`logging`, never on stderr by themselves.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from core.errors import ConfigError
from monitor.service.health import Health
from monitor.service.metrics import Metrics

CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_TEXT = "text/plain; charset=utf-8"
CONTENT_TYPE_JSON = "application/json"
ENDPOINTS = ("/metrics", "/healthz", "/readyz")

_log = logging.getLogger(__name__)


class HealthServer:
    """Serves the metrics and health endpoints on ``host:port`` (port 0: any free port).

    ``start()`` binds and serves on a daemon thread; ``stop()`` shuts it down (idempotent).
    Also a context manager.
    """

    def __init__(
        self, port: int, metrics: Metrics, health: Health, *, host: str = "0.0.0.0"
    ) -> None:
        self.host = host
        self._port = port
        self.metrics = metrics
        self.health = health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port served on: the bound one once started (useful with port 0)."""
        return self._server.server_address[1] if self._server else self._port

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> HealthServer:
        """Bind and serve in the background; a port in use is a :class:`ConfigError`."""
        if self._server is not None:
            return self
        try:
            server = _Server((self.host, self._port), self.metrics, self.health)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve HTTP on {self.host}:{self._port}: {exc.strerror or exc}; "
                "set SGM_HTTP_PORT to a free port"
            ) from exc
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="sgm-http", daemon=True
        )
        self._thread.start()
        _log.info("serving %s", ", ".join(ENDPOINTS), extra={"host": self.host, "port": self.port})
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], metrics: Metrics, health: Health) -> None:
        self.metrics = metrics
        self.health = health
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "subgraph-monitor"

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s %s", self.address_string(), format % args)

    def _respond(self, *, send_body: bool) -> None:
        path = urlsplit(self.path).path
        try:
            status, content_type, body = self._route(path)
        except Exception:
            _log.exception("HTTP %s failed", path)
            status, content_type, body = (
                HTTPStatus.INTERNAL_SERVER_ERROR,
                CONTENT_TYPE_TEXT,
                b"internal error; see the service log\n",
            )
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _route(self, path: str) -> tuple[HTTPStatus, str, bytes]:
        health, metrics = self.server.health, self.server.metrics
        if path == "/metrics":
            metrics.set_ready(health.readiness().ready)
            return HTTPStatus.OK, CONTENT_TYPE_METRICS, metrics.render()
        if path == "/healthz":
            live = health.liveness()
            if live.alive:
                return HTTPStatus.OK, CONTENT_TYPE_TEXT, b"ok\n"
            return HTTPStatus.SERVICE_UNAVAILABLE, CONTENT_TYPE_TEXT, f"{live.reason}\n".encode()
        if path == "/readyz":
            ready = health.readiness()
            document: dict[str, Any] = {"ready": ready.ready}
            if not ready.ready:
                document["missing"] = ready.missing
            document.update(ready.conditions)
            status = HTTPStatus.OK if ready.ready else HTTPStatus.SERVICE_UNAVAILABLE
            return status, CONTENT_TYPE_JSON, json.dumps(document).encode() + b"\n"
        message = f"not found: {path}; endpoints: {', '.join(ENDPOINTS)}\n"
        return HTTPStatus.NOT_FOUND, CONTENT_TYPE_TEXT, message.encode()
