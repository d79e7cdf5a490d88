"""The one settings model: every option has a default and an ``SGM_`` environment variable.

The CLI builds :class:`Settings` from its flags on top of the environment, so a flag, an
environment variable and (later) a Helm value of the same name all mean the same thing.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Effective settings of a run."""

    model_config = SettingsConfigDict(env_prefix="SGM_", frozen=True, extra="forbid")

    batch_size: int = Field(10_000, ge=1, description="updates per epoch (an epoch closes here)")
    max_prefixes: int = Field(
        1 << 20, ge=1024, description="prefixes alive at once during evaluation (memory bound)"
    )
    undirected: bool = Field(False, description="insert/delete every binary edge both ways")
    default_relation: str = Field("e", description="relation of input records that name none")
    compaction_ratio: float = Field(
        0.125, gt=0, le=1, description="merge committed changes past this fraction of an index"
    )
    compaction_min: int = Field(4096, ge=0, description="never compact below this many changes")
    progress_seconds: float = Field(5.0, gt=0, description="seconds between progress lines")
    state_dir: str | None = Field(None, description="RocksDB state directory (None: in memory)")
    snapshot_ratio: float = Field(
        1.0, gt=0, description="rewrite the stored snapshot once the log reaches this fraction"
    )
    snapshot_min_bytes: int = Field(1 << 20, ge=0, description="never snapshot a smaller log")
    rocksdb_cache_bytes: int = Field(
        64 << 20, ge=1 << 20, description="RocksDB block cache, one for the process"
    )
