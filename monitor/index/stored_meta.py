"""The metadata stored with every committed epoch (the state directory's ``meta`` key)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

#: Bumped whenever the store's layout changes; a store of another version is refused.
#: 2: the event log is keyed by relation, then epoch (a compacted relation's records go alone).
FORMAT_VERSION = 2
#: The versions read: a store of version 1 is rewritten as a snapshot at its next commit.
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class StoredMeta:
    """The metadata of the last committed epoch."""

    epoch: int = 0
    position: dict[str, Any] = field(default_factory=dict)
    output_bytes: int | None = None
    queries: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    relations: dict[str, tuple[int, int]] = field(default_factory=dict)
    vertices: int = 0
    snapshot_epoch: int = 0
    snapshot_bytes: int = 0
    log_bytes: int = 0
    format_version: int = FORMAT_VERSION
    #: The relations stored as events (their ids are in ``relations``).
    events: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        body = {
            "format_version": self.format_version,
            "epoch": self.epoch,
            "position": self.position,
            "output_bytes": self.output_bytes,
            "queries": list(self.queries),
            "settings": self.settings,
            "relations": {k: list(v) for k, v in self.relations.items()},
            "vertices": self.vertices,
            "snapshot_epoch": self.snapshot_epoch,
            "snapshot_bytes": self.snapshot_bytes,
            "log_bytes": self.log_bytes,
            "events": list(self.events),
        }
        return orjson.dumps(body)

    @classmethod
    def from_json(cls, raw: bytes) -> StoredMeta:
        body = orjson.loads(raw)
        return cls(
            epoch=int(body["epoch"]),
            position=dict(body["position"]),
            output_bytes=body["output_bytes"],
            queries=tuple(body["queries"]),
            settings=dict(body["settings"]),
            relations={k: (int(v[0]), int(v[1])) for k, v in body["relations"].items()},
            vertices=int(body["vertices"]),
            snapshot_epoch=int(body["snapshot_epoch"]),
            snapshot_bytes=int(body["snapshot_bytes"]),
            log_bytes=int(body["log_bytes"]),
            format_version=int(body["format_version"]),
            events=tuple(body.get("events", ())),
        )
