"""Free ports, and the broker's readiness probe: a Metadata request in Kafka's wire protocol,
standard library only (the broker script must run before any package is installed).

:func:`fetch_metadata` opens a socket, sends ApiVersions then a Metadata request and reads
which brokers and controller the cluster reports; :class:`ProtocolError` says the answer was
not one.
"""

from __future__ import annotations

import io
import socket
import struct
from dataclasses import dataclass


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


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server can listen on host:port (SO_REUSEADDR, as the JVM binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True
