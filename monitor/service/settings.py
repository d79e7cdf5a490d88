"""The one settings model: every option has a default and an ``SGM_`` environment variable.

Sources, strongest first: command-line flags, ``SGM_`` environment variables, a YAML file given
with ``--config`` (:func:`load_settings`), the defaults. A flag, an environment variable and a
Helm value of the same name all mean the same thing. Lists (``SGM_INPUT_TOPICS``) are comma
separated; maps (``SGM_TOPIC_RELATIONS``) are ``key=value`` pairs separated by commas;
``SGM_KAFKA`` (librdkafka settings passed through, e.g. SASL/SSL) is a JSON object. Secret
values are :class:`~pydantic.SecretStr` and never printed or logged.
"""

from __future__ import annotations

import math
import socket
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from core.times import format_duration, parse_duration, parse_retention
from monitor.service.masked import is_secret, secrets_dir


class Settings(BaseSettings):
    """Effective settings of a run."""

    model_config = SettingsConfigDict(env_prefix="SGM_", frozen=True, extra="forbid")

    batch_size: int = Field(10_000, ge=1, description="updates per epoch (an epoch closes here)")
    max_prefixes: int = Field(
        1 << 20, ge=1024, description="prefixes alive at once during evaluation (memory bound)"
    )
    live_matches: int = Field(
        1 << 18,
        ge=0,
        description="per query whose events in windows close a cycle, live matches kept so "
        "that expiries and deletes retract them by lookup instead of running the joins again "
        "(4 bytes per variable each; a query with more evaluates them again; 0: none)",
    )
    undirected: bool = Field(False, description="insert/delete every binary edge both ways")
    default_relation: str = Field("e", description="relation of input records that name none")
    compaction_ratio: float = Field(
        0.125, gt=0, le=1, description="merge committed changes past this fraction of an index"
    )
    compaction_min: int = Field(4096, ge=0, description="never compact below this many changes")
    event_compaction_min: int = Field(
        65_536,
        ge=0,
        description="compact an event store once its dead events outnumber the live ones and "
        "are at least this many (and the string pool once it has grown by as many strings)",
    )
    progress_seconds: float = Field(5.0, gt=0, description="seconds between progress lines")
    state_dir: str | None = Field(None, description="RocksDB state directory (None: in memory)")
    snapshot_ratio: float = Field(
        1.0, gt=0, description="rewrite the stored snapshot once the log reaches this fraction"
    )
    snapshot_min_bytes: int = Field(1 << 20, ge=0, description="never snapshot a smaller log")
    rocksdb_cache_bytes: int = Field(
        64 << 20, ge=1 << 20, description="RocksDB block cache, one for the process"
    )
    malloc_keep_bytes: int = Field(
        0,
        ge=0,
        description="glibc: allocations below this many bytes come from the heap, and up to "
        "this much freed memory is kept for the next epoch instead of returned (0: glibc's "
        "defaults; 268435456 is a good value, bench/NOTES.md)",
    )

    emit: Literal["changes", "appearances"] = Field(
        "changes",
        description="changes: every +1 and -1; appearances: only +1 records (alerting)",
    )
    output_format: Literal["records", "batches", "avro"] = Field(
        "records",
        description="Kafka output: records, one record per match delta; batches, one record per "
        "query and epoch holding its deltas as JSON lines; avro, one Avro record per match "
        "delta, its schema registered under the output topic's subject (docs/kafka.md, "
        "Reading the output)",
    )
    batch_encoding: Literal["jsonl", "arrow"] = Field(
        "jsonl",
        description="batches only: jsonl, each batch's deltas as JSON lines (the records' "
        "values); arrow, as an Apache Arrow IPC stream, a third of the bytes and a fraction "
        "of the encoding time (docs/kafka.md, Reading the output)",
    )
    output_limit: int = Field(
        100,
        ge=0,
        description="aggregate rows: at most this many ids of the events that contribute to "
        "the group, listed as 'events' (0: none)",
    )
    output_fields: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="fields of matched events copied into the output (comma list; id, src and "
        "dst always are); null: every field",
    )

    tables: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="relations that are tables of vertex attributes, read as account(a) as x "
        "(comma list): one record per key, the latest winning; the queries' unary 'as' atoms "
        "make a relation one too, this declares it (and fails if a query reads it otherwise)",
    )

    # -- event time (monitor.plan.windows, monitor.service.clock) ------------------------------
    retention: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict,
        description="per event relation, how long its events live after their ts "
        "(transfer=24h,logins=1h); default: the longest span of the queries reading it",
    )
    allowed_lateness: float = Field(
        5_000.0,
        ge=0,
        description="how far behind the latest event time the watermark stays (5s, 1m; ms)",
    )
    watermark_outliers: int = Field(
        1,
        ge=0,
        le=1000,
        description="the watermark ignores this many largest event times per partition, so "
        "that as many events with wrong clocks cannot expire the window",
    )

    # -- the Kafka service (serve) -------------------------------------------------------------
    bootstrap_servers: str = Field("localhost:9092", description="Kafka bootstrap servers")
    input_topics: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["edges"], description="edge topics to consume (comma list)"
    )
    output_topic: str = Field("match-deltas", description="topic of the match deltas")
    dead_letter_topic: str = Field("edges-dead-letters", description="topic of bad records")
    group_id: str = Field("subgraph-monitor", description="consumer group of the input topics")
    instance_id: str = Field(
        default_factory=socket.gethostname,
        description="stable id of this instance in the group (static membership); default host",
    )
    transactional_id: str | None = Field(
        None, description="producer transactional id (default: derived from the group id)"
    )
    control_topic: str | None = Field(
        None,
        description="scale-out: the one-partition topic of global epochs; set it (the same on "
        "every worker) to run several workers in the group",
    )
    changelog_topic: str | None = Field(
        None,
        description="scale-out: the compacted graph changelog a new worker rebuilds from "
        "(default: GROUP-changelog)",
    )
    transaction_timeout_ms: int = Field(
        30_000,
        ge=1_000,
        le=900_000,
        description="how long the broker keeps a dead worker's open transaction before it aborts "
        "it; read_committed consumers wait that long on the partitions it wrote, unless a "
        "worker with the same instance id starts first (a transaction.timeout.ms in SGM_KAFKA "
        "wins over it)",
    )
    watchdog_seconds: float = Field(
        90.0,
        ge=5.0,
        le=3600.0,
        description="how long one epoch's Kafka transaction may block before the service exits "
        "(code 75) to be restarted and recover exactly, a way out of librdkafka calls that "
        "block past their time-out; never less than the transaction time-out and 10 s",
    )
    consolidate_across_workers: bool = Field(
        True,
        description="scale-out: publish each changed binding once per epoch, by one worker, so "
        "that every record is a real transition; false publishes each worker's own sum (a "
        "binding may get +1 and -1 from two workers in one epoch)",
    )
    engine: Literal["embedded", "distributed"] = Field(
        "embedded",
        description="embedded: the index in this process (scale out with control_topic); "
        "distributed: the index partitioned over shards on Ray, whose capacity grows with "
        "the workers (docs/scale-out.md)",
    )
    workers: int = Field(
        2, ge=1, description="distributed: CPUs of the local Ray cluster (without ray_address)"
    )
    shards: int | None = Field(
        None, ge=1, description="distributed: shards of the index (default: 2 per worker)"
    )
    ray_address: str | None = Field(
        None,
        description="distributed: the Ray cluster to run the shards on (ray://host:10001, "
        "host:6379, auto); empty: a local cluster of `workers` CPUs in this process",
    )
    ray_join: bool = Field(
        False,
        description="distributed: first start a Ray node in this container that joins "
        "ray_address (host:6379) with no CPUs, for the driver's objects (a driver must run on "
        "a node of the cluster; the chart's service pod does this)",
    )
    ray_object_store_memory: int | None = Field(
        None,
        ge=75 * 1024 * 1024,
        description="distributed, with ray_join: the joining node's object store in bytes "
        "(Ray's --object-store-memory; default: Ray's, 30 percent of the memory)",
    )
    shard_changelog: bool = Field(
        True,
        description="distributed: mirror every shard's state into a Kafka topic, from which a "
        "shard whose disk was lost with its node is rebuilt",
    )
    shard_changelog_topic: str | None = Field(
        None, description="distributed: the shard changelog's topic (default: GROUP-shards)"
    )
    queries: str = Field("triangle", description="a built-in name, a query file, or query text")
    topic_relations: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="topic=relation pairs: records of a topic name none"
    )
    input_format: Literal["json", "avro", "protobuf", "jsonschema"] = Field(
        "json",
        description="format of the input topics' values: json, or avro, protobuf, jsonschema "
        "framed for a schema registry (SGM_SCHEMA_REGISTRY_URL; docs/kafka.md, Schema registry "
        "formats)",
    )
    topic_formats: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="topic=format pairs where topics differ (payments=avro,accounts=json); the "
        "others are SGM_INPUT_FORMAT",
    )
    field_map: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="registry formats: name=path pairs telling where op, relation, id, key, "
        "src, dst, ts and event fields are (src=from_account,ts=booked_at,amount=payment."
        "amount); a name not given is the field of the same name",
    )
    avro_decoding: Literal["columns", "records"] = Field(
        "columns",
        description="avro input: columns (a poll of one schema read whole into columns by "
        "polars, about 1 µs a record) or records (the library's deserializer, one call each)",
    )
    schema_registry_url: str | None = Field(
        None, description="the schema registry (Confluent-compatible API; a comma list for several)"
    )
    schema_registry: dict[str, str | SecretStr] = Field(
        default_factory=dict,
        description="schema registry client settings passed through (JSON object: "
        "basic.auth.user.info, ssl.ca.location, ...); secrets are masked",
    )
    schema_registry_secrets_dir: str | None = Field(
        None,
        description="directory of schema registry client settings, one file each (a mounted "
        "Secret: basic.auth.user.info, ...); they win over SGM_SCHEMA_REGISTRY and are always "
        "treated as secret",
    )
    max_batch_delay_ms: int = Field(1000, ge=1, description="an epoch closes after this delay")
    http_port: int = Field(8080, ge=0, le=65535, description="port of /metrics, /healthz, /readyz")
    liveness_timeout_s: float = Field(120.0, gt=0, description="/healthz fails after this stall")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    kafka: dict[str, str | SecretStr] = Field(
        default_factory=dict, description="librdkafka settings passed through (JSON object)"
    )
    kafka_secrets_dir: str | None = Field(
        None,
        description="directory of librdkafka settings, one file each (a mounted Secret); "
        "they win over SGM_KAFKA and are always treated as secret",
    )

    @field_validator("ray_address", "control_topic", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("input_topics", "output_fields", "tables", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @field_validator("retention", mode="before")
    @classmethod
    def _retention(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_retention(value)
        if isinstance(value, dict):  # a YAML map: relation -> duration, ms or none
            return {
                k: parse_retention(f"{k}={v}")[k] if isinstance(v, str) else v
                for k, v in value.items()
            }
        return value

    @field_validator("allowed_lateness", mode="before")
    @classmethod
    def _lateness(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) and value[-1:].isalpha() else value

    @field_validator("topic_relations", "topic_formats", "field_map", mode="before")
    @classmethod
    def _pairs(cls, value: Any, info: ValidationInfo) -> Any:
        what = {"topic_relations": "topic=relation", "topic_formats": "topic=format"}
        if isinstance(value, str):
            pairs = {}
            for item in filter(None, (p.strip() for p in value.split(","))):
                topic, sep, relation = item.partition("=")
                if not sep or not topic.strip() or not relation.strip():
                    expected = what.get(info.field_name or "", "name=path")
                    raise ValueError(f"expected {expected} pairs, got {item!r}")
                pairs[topic.strip()] = relation.strip()
            return pairs
        return value

    @field_validator("topic_formats")
    @classmethod
    def _formats(cls, value: dict[str, str]) -> dict[str, str]:
        formats = ("json", "avro", "protobuf", "jsonschema")
        for topic, name in value.items():
            if name not in formats:
                raise ValueError(f"topic {topic}: format {name!r} is not one of {formats}")
        return value

    @field_validator("kafka", "schema_registry", mode="before")
    @classmethod
    def _secrets(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                str(k): SecretStr(str(v)) if is_secret(str(k)) else str(v) for k, v in value.items()
            }
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError(f"log_level must be DEBUG, INFO, WARNING or ERROR, got {value!r}")
        return level

    @model_validator(mode="after")
    def _secrets_dir_readable(self) -> Settings:
        self.kafka_secrets()  # a missing or unreadable directory is a settings error at start
        self.registry_config()
        return self

    @model_validator(mode="after")
    def _registry_given(self) -> Settings:
        uses = {self.input_format, *self.topic_formats.values()} - {"json"}
        if self.output_format == "avro":
            uses.add("avro output")
        if uses and not self.schema_registry_url:
            raise ValueError(
                f"{', '.join(sorted(uses))} needs a schema registry: set SGM_SCHEMA_REGISTRY_URL"
            )
        return self

    def registry_config(self) -> dict[str, str]:
        """The schema registry client's settings with their secret values revealed:
        ``schema_registry``, then one per file of ``schema_registry_secrets_dir``."""
        config = {
            k: v.get_secret_value() if isinstance(v, SecretStr) else v
            for k, v in self.schema_registry.items()
        }
        config.update(secrets_dir(self.schema_registry_secrets_dir, "schema_registry_secrets_dir"))
        return config

    @model_validator(mode="after")
    def _one_scale_out(self) -> Settings:
        if self.engine == "distributed" and self.control_topic:
            raise ValueError(
                "engine=distributed partitions the index over shards; control_topic replicates "
                "it over workers: set one of them"
            )
        if self.ray_join and (not self.ray_address or self.ray_address.startswith("ray://")):
            raise ValueError(
                "ray_join starts a Ray node that joins the cluster at ray_address: give the "
                "head's GCS address (host:6379)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls))

    def kafka_config(self) -> dict[str, str]:
        """The librdkafka pass-through settings with their secret values revealed: ``kafka``,
        then one per file of ``kafka_secrets_dir`` (file name = setting, content = value)."""
        config = {
            k: v.get_secret_value() if isinstance(v, SecretStr) else v
            for k, v in self.kafka.items()
        }
        config.update(self.kafka_secrets())
        return config

    def transaction_timeout_s(self) -> float:
        """The producers' effective ``transaction.timeout.ms``, in seconds."""
        value = self.kafka_config().get("transaction.timeout.ms", self.transaction_timeout_ms)
        return int(value) / 1000.0

    def watchdog_s(self) -> float:
        """The watchdog's effective seconds: past the transaction time-out the broker has
        aborted the epoch, so a call still blocked 10 s later is librdkafka stuck, not a slow
        epoch."""
        return max(self.watchdog_seconds, self.transaction_timeout_s() + 10.0)

    def kafka_secrets(self) -> dict[str, str]:
        """The settings of ``kafka_secrets_dir``; hidden files (a mounted Secret's ``..data``
        links) are skipped, a trailing newline is dropped."""
        return secrets_dir(self.kafka_secrets_dir, "kafka_secrets_dir")

    def printable(self) -> dict[str, Any]:
        """Every setting, secrets masked: what ``serve --print-config`` shows."""
        data = self.model_dump(mode="json")
        data["kafka"] = {k: "***" if is_secret(k) else v for k, v in data["kafka"].items()}
        data["kafka"].update(dict.fromkeys(self.kafka_secrets(), "***"))
        data["schema_registry"] = {
            k: "***" if is_secret(k) else v for k, v in data["schema_registry"].items()
        }
        secrets = secrets_dir(self.schema_registry_secrets_dir, "schema_registry_secrets_dir")
        data["schema_registry"].update(dict.fromkeys(secrets, "***"))
        data["retention"] = {  # as it is written: a duration, or none (JSON has no infinity)
            k: "none" if math.isinf(v) else format_duration(v) for k, v in self.retention.items()
        }
        return data


def load_settings(config_file: str | None = None, **flags: Any) -> Settings:
    """Settings from flags (given ones only), the environment and an optional YAML file."""
    given = {k: v for k, v in flags.items() if v is not None}
    if config_file is None:
        return Settings(**given)

    class FromFile(Settings):
        model_config = SettingsConfigDict(
            env_prefix="SGM_", frozen=True, extra="forbid", yaml_file=config_file
        )

    return FromFile(**given)
