"""A service that joins a Ray cluster as a node (``SGM_RAY_JOIN``) waits for a head that is
still starting, saying so at every attempt, and gives up with a clear error (the join itself,
against a real head in pods of their own, is in tests/kafka/test_serve_distributed.py)."""

from __future__ import annotations

import logging
import socket

import pytest

from core.errors import InputError
from monitor.distributed.cluster import join_as_node

pytest.importorskip("ray", reason="the partitioned engine needs Ray")


def test_a_head_that_never_answers_is_retried_then_a_clear_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    caplog.set_level(logging.WARNING, logger="monitor.distributed.cluster")
    with pytest.raises(InputError, match=r"as a node in 3 s \([2-9] attempts\)") as raised:
        join_as_node(address, seconds=3, attempt_seconds=2)
    assert address in str(raised.value)
    retries = [r for r in caplog.records if r.message == "could not join the ray cluster; retrying"]
    assert retries, caplog.text
    assert [r.__dict__["attempt"] for r in retries][:1] == [1]
    assert all(r.__dict__["address"] == address for r in retries)
