"""A shard that does not answer is said in the log, with which shards and for how long: a
service whose shards cannot be placed (no node with a free CPU joined) would otherwise wait in
silence. Ray's ``wait`` is stood in for here (the waiting logic is what is tested; the service
tests run it on a real cluster)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from monitor.distributed import shard_calls
from monitor.distributed.shard_calls import RayShards


class _Ray:
    """``ray.wait`` answering the call's refs one round later per shard, ``ray.get`` them."""

    def __init__(self, rounds_unanswered: dict[str, int]) -> None:
        self.rounds_unanswered = rounds_unanswered

    def wait(
        self, refs: list[str], num_returns: int, timeout: float
    ) -> tuple[list[str], list[str]]:
        for ref in refs:
            self.rounds_unanswered[ref] -= 1
        ready = [r for r in refs if self.rounds_unanswered[r] < 0]
        return ready, [r for r in refs if r not in ready]

    def get(self, refs: list[str]) -> list[str]:
        return [f"answer of {r}" for r in refs]


def _shards(ray: _Ray) -> RayShards:
    shards = RayShards.__new__(RayShards)
    shards._ray = ray  # type: ignore[assignment]
    shards._asked = {}
    return shards


def test_shards_unanswered_are_logged_with_their_numbers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(shard_calls, "SLOW_ANSWER_SECONDS", 0.0)
    shards = _shards(_Ray({"a": 0, "b": 2, "c": 1}))
    with caplog.at_level(logging.WARNING, logger=shard_calls.__name__):
        shards._wait_watched("report", {0: "a", 1: "b", 2: "c"})
    said: list[Any] = [
        (r.method, r.shards)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "shards have not answered"
    ]
    assert said[0] == ("report", [1, 2])
    assert all(method == "report" and 0 not in which for method, which in said)
    assert shards._asked == {}


def test_shards_that_answer_in_time_are_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shards = _shards(_Ray({"a": 0, "b": 1}))
    with caplog.at_level(logging.WARNING, logger=shard_calls.__name__):
        shards._wait_watched("report", {0: "a", 1: "b"})
    assert not [r for r in caplog.records if r.getMessage() == "shards have not answered"]
