"""A state directory whose creation was cut short: RocksDB's first files and nothing else.

RocksDB creates a database in steps (its lock and info log, an identity, a first manifest
written as a temporary file, then ``CURRENT`` naming it; rocksdict writes its config first). A
process killed between them leaves a directory that is not empty and not a database, which the
next run would refuse as "not a state directory". Nothing was stored in it yet, so the run that
follows starts anew, as the killed one did.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)

#: What RocksDB (and rocksdict) write while a new database is created, before its ``CURRENT``.
_CREATION_FILES = re.compile(
    r"LOCK|LOG(\.old\.\d+)?|IDENTITY|MANIFEST-\d+|OPTIONS-\d+(\.dbtmp)?|\d+\.dbtmp"
    r"|rocksdict-config\.json"
)


def cleared(directory: Path) -> bool:
    """Whether ``directory`` held only a database whose creation was cut short (a process killed
    while RocksDB created it: no ``CURRENT`` yet, no data), now removed, so that the run starts
    anew as it would have; anything else there is left alone (the caller refuses it)."""
    if not directory.is_dir() or (directory / "CURRENT").exists():
        return False
    entries = list(directory.iterdir())
    if not entries or not all(e.is_file() and _CREATION_FILES.fullmatch(e.name) for e in entries):
        return False
    log.warning(
        "the state directory's creation was cut short (a kill before its first write): "
        "starting anew",
        extra={"state_dir": str(directory), "files": sorted(e.name for e in entries)},
    )
    for entry in entries:
        entry.unlink()
    return True
