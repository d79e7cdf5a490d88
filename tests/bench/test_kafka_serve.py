"""The end-to-end rate read from a service's log: epochs over the time from the first assignment
to the last commit, a smaller last epoch (idle, waiting out the batch delay at the stream's end)
left out."""

from __future__ import annotations

from typing import Any

import pytest

from bench.kafka_serve import throughput


def line(second: float, message: str, **fields: Any) -> dict[str, Any]:
    whole, millis = int(second), round((second % 1) * 1000)
    return {
        "timestamp": f"2026-12-03T10:00:{whole:02d}.{millis:03d}Z",
        "message": message,
        **fields,
    }


def test_a_smaller_last_epoch_is_left_out() -> None:
    lines = [
        line(1.0, "partition assigned"),
        line(2.0, "epoch committed", updates=100, deltas=10),
        line(3.0, "epoch committed", updates=100, deltas=30),
        line(5.0, "epoch committed", updates=40, deltas=5),  # waited for more, then closed
    ]
    assert throughput(lines) == pytest.approx((100.0, 20.0, 2))


def test_full_epochs_are_all_counted() -> None:
    lines = [
        line(1.0, "partition assigned"),
        line(2.0, "epoch committed", updates=100, deltas=10),
        line(5.0, "epoch committed", updates=100, deltas=30),
    ]
    assert throughput(lines) == pytest.approx((50.0, 10.0, 2))
