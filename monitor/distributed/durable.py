"""The partitioned engine's state directory: the driver's record of committed epochs, and each
shard's part in a RocksDB of its own.

Layout of ``--state-dir DIR``::

    DIR/driver/          RocksDB, one key: the last committed epoch, the input position it
                         includes, the output file's length after it, queries, settings
    DIR/shard-0000/ ...  one per shard (:mod:`monitor.distributed.shard_store`)

An epoch commits in two phases, the driver's record being the commit point:

1. the shards stage the epoch, the queries' changes are evaluated, written and synced;
2. every shard *prepares* the epoch: writes its changes, synced;
3. the driver writes its record of the epoch, synced: the epoch is committed;
4. every shard folds the epoch into its adjacencies.

A death before 3 leaves shards that may hold the epoch prepared and a driver that never
recorded it: on restart every shard drops what it holds after the driver's epoch, the output
file is cut back to the recorded length and the input is read on from the recorded position, so
the rerun writes what an uninterrupted run writes. A death after 3 leaves every shard holding
the epoch, which the restart loads.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import rocksdict

from core.errors import StateError
from monitor.index.creation import cleared
from monitor.index.store import connect, rocks_options

META_KEY = b"\x00meta"
#: The driver's directory inside the state directory.
DRIVER = "driver"

log = logging.getLogger(__name__)


def shard_directory(state_dir: str | Path, shard: int) -> str:
    """Shard ``shard``'s directory inside the state directory."""
    return str(Path(state_dir) / f"shard-{shard:04d}")


def is_partitioned(state_dir: str | Path) -> bool:
    """Whether ``state_dir`` holds the partitioned engine's state."""
    return (Path(state_dir) / DRIVER).is_dir()


def _only_shards(directory: Path) -> bool:
    """Whether ``directory`` holds shards' directories and nothing else (no driver's)."""
    return all(p.is_dir() and p.name.startswith("shard-") for p in directory.iterdir())


@dataclass(frozen=True)
class DriverMeta:
    """What the driver records with every committed epoch."""

    epoch: int = 0
    #: ``input``, ``seq`` (updates consumed) and ``checkpoint`` (where to read on).
    position: dict[str, Any] = field(default_factory=dict)
    output_bytes: int | None = None
    queries: tuple[str, ...] = ()
    #: What must not change between runs: batch size, direction, default relation, shards.
    settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: bytes) -> DriverMeta:
        body = orjson.loads(raw)
        return cls(**{**body, "queries": tuple(body["queries"])})


class DriverStore:
    """The driver's directory: :attr:`meta` (None for a new one), :meth:`commit` per epoch."""

    def __init__(self, path: Path, db: Any, meta: DriverMeta | None) -> None:
        self.path = path
        self._db = db
        self.meta = meta
        self._write = rocksdict.WriteOptions()
        self._write.sync = True

    @classmethod
    def open(cls, state_dir: str | Path, read_only: bool = False) -> DriverStore:
        directory = Path(state_dir)
        if directory.exists() and not directory.is_dir():
            raise StateError(f"state directory {directory} is a file; give a directory")
        if not read_only:
            cleared(directory / DRIVER)  # (its creation cut short: nothing recorded there yet)
        fresh = not directory.exists() or not any(directory.iterdir())
        if not fresh and not read_only and _only_shards(directory):
            # The driver's directory is lost, the shards' are not: they hold epochs nobody
            # records. The driver starts anew; the shards drop every epoch it does not record,
            # and the service rebuilds the state from its input (Kafka's committed offsets).
            log.warning(
                "the driver's record is missing: the shards' epochs are dropped and the state is "
                "rebuilt from the input",
                extra={"state_dir": str(directory)},
            )
            fresh = True
        if not fresh and not is_partitioned(directory):
            raise StateError(
                f"{directory} does not hold the partitioned engine's state (a single-process "
                "state directory, or something else); run it without --workers, or give a new "
                "--state-dir"
            )
        if read_only and fresh:
            raise StateError(f"{directory} holds no subgraph-monitor state")
        path = directory / DRIVER
        if not read_only:
            path.mkdir(parents=True, exist_ok=True)
        db = connect(path, rocks_options(1 << 20)[0], read_only=read_only, named=directory)
        raw = db.get(META_KEY)
        try:
            meta = None if raw is None else DriverMeta.from_json(bytes(raw))
        except (ValueError, TypeError, KeyError) as error:
            db.close()
            raise StateError(
                f"state in {directory} is corrupted (unreadable metadata: {error}); restore it "
                "from a backup, or delete it to rebuild the state from the input"
            ) from error
        return cls(directory, db, meta)

    def commit(self, meta: DriverMeta) -> None:
        """Record ``meta`` (synced): its epoch is committed."""
        self._db.put(META_KEY, orjson.dumps(asdict(meta)), self._write)
        self.meta = meta

    def close(self) -> None:
        self._db.close()
