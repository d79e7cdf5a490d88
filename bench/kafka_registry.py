"""Avro beside JSON through ``serve`` (issue #36): ``python -m bench.kafka_registry`` writes
``bench/kafka_registry.md``.

One local broker (``scripts/kafka_local``) and one local schema registry
(``scripts/registry_local``: Apicurio, the Confluent-compatible API). The payments stream of
:mod:`bench.kafka_input` (``big_ring``, the selective fraud query, with 5% deletes by id) is
produced twice, the same records with the same keys on the same partitions: as the JSON the
service reads today, and as Avro written by ``confluent_kafka``'s ``AvroSerializer`` (the
writer's schema registered under the topic's subject, as any producer does). In each of
``--repeat`` rounds, ``serve`` reads each topic from its start in a new group, in four runs
(order turning from round to round):

- JSON in, JSON records out (the baseline);
- Avro in, JSON records out, a poll read as columns (``SGM_AVRO_DECODING=columns``, the
  default: :mod:`connectors.avro_columns`);
- the same, record by record by the library's deserializer (``SGM_AVRO_DECODING=records``);
- JSON in, Avro out (``SGM_OUTPUT_FORMAT=avro``);
- Avro in as columns, Avro out;

each measured as :mod:`bench.kafka` measures (updates/s and match deltas/s over the time from
the first partition assignment to the last committed epoch, from the service's log). The
figures are the medians over the rounds.

Then, in this process, on the same records, where the time goes per record: the JSON batch
decoder (:func:`connectors.kafka_records.decode_messages`) on the JSON values; the Avro poll
read as columns (framing cut, polars' reader, the field map, the table checks), and polars'
reader alone; the library's ``AvroDeserializer`` alone on the Avro values (one call per
record, what the library offers); and the whole record-by-record path (deserializer, field
map, JSON record, batch decoder). And for the
output, the JSON deltas (:mod:`connectors.delta_json`) beside their Avro encoding
(:class:`connectors.avro_output.AvroDeltas`, one serializer call per delta).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bench.kafka_input import BATCH, ring_records
from bench.kafka_serve import drop_topics, log_lines, produce_records, serve, throughput, topics
from bench.kafka_serve import wait as wait_consumed
from bench.machine import machine_info
from bench.payments import QUERIES
from connectors.avro_columns import columnar_avro
from connectors.avro_output import AvroDeltas
from connectors.delta_json import chunks, keys_and_values
from connectors.events import FieldTypes
from connectors.kafka_records import Records, decode_messages
from connectors.registry_decoders import decoders, registry_client
from connectors.registry_records import FieldMap, RecordFormats
from scripts.kafka_local import KafkaBroker
from scripts.registry_local import SchemaRegistry

OUT = Path(__file__).resolve().parent / "kafka_registry.md"
PARTITIONS = 3
#: The runs: (name, input format, output format, Avro decoding).
RUNS = [
    ("JSON in, records out", "json", "records", "columns"),
    ("Avro in as columns, records out", "avro", "records", "columns"),
    ("Avro in record by record (the library), records out", "avro", "records", "records"),
    ("JSON in, Avro out", "json", "avro", "columns"),
    ("Avro in as columns, Avro out", "avro", "avro", "columns"),
]
#: The payments' schema: what a producer of the JSON records would write in Avro.
PAYMENT = {
    "type": "record",
    "name": "Transfer",
    "namespace": "bank",
    "fields": [
        {"name": "op", "type": "string", "default": "insert"},
        {"name": "relation", "type": "string", "default": "transfer"},
        {"name": "id", "type": "string"},
        {"name": "src", "type": ["null", "long"], "default": None},
        {"name": "dst", "type": ["null", "long"], "default": None},
        {"name": "amount", "type": ["null", "double"], "default": None},
        {"name": "channel", "type": ["null", "string"], "default": None},
    ],
}
FIELDS = {"transfer": {"amount": "number", "channel": "string"}}


def say(text: str, started: float = time.monotonic()) -> None:
    print(f"[{time.monotonic() - started:6.0f} s] {text}", flush=True)


def avro_records(
    records: list[tuple[bytes, bytes]], registry_url: str, topic: str
) -> list[tuple[bytes, bytes]]:
    """The same records in Avro, keyed as they were (their schema registered for ``topic``)."""
    client = SchemaRegistryClient({"url": registry_url, "timeout": 30})
    writer = AvroSerializer(
        client, orjson.dumps(PAYMENT).decode(), conf={"subject.name.strategy.type": "TOPIC"}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    out = []
    for key, value in records:
        encoded = writer(orjson.loads(value), ctx)
        assert encoded is not None
        out.append((key, encoded))
    return out


def run_serve(
    bootstrap: str,
    tmp: Path,
    topic: str,
    registry_url: str,
    input_format: str,
    output: str,
    decoding: str,
) -> tuple[float, float]:
    """``serve`` over ``topic`` from its start: updates/s, match deltas/s."""
    out = f"{topic}-{output}-{time.monotonic_ns() % 10**9}"
    topics(bootstrap, (out, 1), (f"{out}-dlq", 1))
    env = {
        "SGM_OUTPUT_TOPIC": out,
        "SGM_DEAD_LETTER_TOPIC": f"{out}-dlq",
        "SGM_INPUT_FORMAT": input_format,
        "SGM_OUTPUT_FORMAT": output,
        "SGM_SCHEMA_REGISTRY_URL": registry_url,
        "SGM_AVRO_DECODING": decoding,
    }
    proc, log, group = serve(
        bootstrap, tmp, topic, query=QUERIES["big_ring"], undirected=False, **env
    )
    try:
        wait_consumed(bootstrap, group, topic, proc)
    finally:
        proc.terminate()
        proc.wait(60)
    lines = log_lines(log)
    dead = sum(
        int(x.get("dead_letters", 0)) for x in lines if x.get("message") == "epoch committed"
    )
    if dead:
        raise RuntimeError(f"{dead} dead letters in {input_format} -> {output}: {log}")
    drop_topics(bootstrap, out, f"{out}-dlq")
    updates, deltas, _ = throughput(lines)
    return updates, deltas


def per_record(seconds: float, count: int) -> float:
    return seconds / count * 1e6


def timed(work: Callable[[], Any], repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``work``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def decode_costs(
    json_values: list[bytes], avro_values: list[bytes], registry_url: str, repeat: int
) -> dict[str, float]:
    """Microseconds per record of each decoding, in batches of an epoch."""
    n = len(json_values)

    def records(values: list[bytes]) -> list[Records]:
        return [
            Records(
                ["payments"] * len(chunk),
                [0] * len(chunk),
                list(range(len(chunk))),
                chunk,
                [(1, 0)] * len(chunk),
            )
            for chunk in (values[i : i + BATCH] for i in range(0, len(values), BATCH))
        ]

    client = registry_client(registry_url, {})
    formats = RecordFormats("avro", {}, decoders(client, {"avro"}), FieldMap())
    columnar = columnar_avro(client, FieldMap(), {})
    assert columnar is not None
    as_columns = RecordFormats(
        "avro", {}, decoders(client, {"avro"}), FieldMap(), columns={"avro": columnar}
    )
    deserializer = AvroDeserializer(client)
    json_batches, avro_batches = records(json_values), records(avro_values)

    def json_path() -> None:
        for batch in json_batches:
            decode_messages(batch, 0, "transfer", {}, FieldTypes.of(FIELDS))

    def avro_path() -> None:
        for batch in avro_batches:
            decode_messages(batch, 0, "transfer", {}, FieldTypes.of(FIELDS), formats=formats)

    def columns_path() -> None:
        for batch in avro_batches:
            decode_messages(batch, 0, "transfer", {}, FieldTypes.of(FIELDS), formats=as_columns)

    def reader_alone() -> None:
        for batch in avro_batches:
            columnar.table(batch.values, 1 << 20)

    def library_alone() -> None:
        for value in avro_values:
            deserializer(value, None)

    avro_path()  # (the schema fetched once, as the service does at its first record)
    columns_path()
    assert all(columnar.table(b.values, 1 << 20) is not None for b in avro_batches)
    return {
        "JSON batch decoder": per_record(timed(json_path, repeat), n),
        "Avro poll as columns: framing cut, polars' reader, field map, table checks": per_record(
            timed(columns_path, repeat), n
        ),
        "polars' Avro reader alone (with the framing cut)": per_record(
            timed(reader_alone, repeat), n
        ),
        "AvroDeserializer alone (the library, a call per record)": per_record(
            timed(library_alone, repeat), n
        ),
        "Avro record by record: deserializer, field map, JSON record, batch decoder": per_record(
            timed(avro_path, repeat), n
        ),
    }


def encode_costs(registry_url: str, topic: str, count: int, repeat: int) -> dict[str, float]:
    """Microseconds per delta of the JSON output and of its Avro encoding, in big_ring's shape:
    three vertices, three events with their amount and channel."""
    rng = np.random.default_rng(1)
    columns = [rng.integers(0, 10**6, count) for _ in range(3)]
    edges = {
        f"t{i}": {
            "id": np.array([f"tx-{j}" for j in rng.integers(0, 10**7, count)], object),
            "src": columns[i - 1],
            "dst": columns[i % 3],
            "amount": rng.uniform(1000, 9000, count).round(2),
            "channel": np.array(["web", "app", "branch"], object)[rng.integers(0, 3, count)],
        }
        for i in (1, 2, 3)
    }
    part = next(chunks(columns, np.ones(count, np.int64), edges, None, count))
    variables = ["a", "b", "c"]
    encoder = AvroDeltas(registry_client(registry_url, {}), topic)
    encoder.encode(keys_and_values("big_ring", 1, variables, part)[1][:10])

    def json_only() -> None:
        keys_and_values("big_ring", 1, variables, part)

    def avro() -> None:
        encoder.encode(keys_and_values("big_ring", 1, variables, part)[1])

    return {
        "JSON deltas (connectors.delta_json)": per_record(timed(json_only, repeat), count),
        "Avro deltas (the JSON read back, AvroSerializer per delta)": per_record(
            timed(avro, repeat), count
        ),
    }


def report(
    events: int,
    records: int,
    json_bytes: float,
    avro_bytes: float,
    figures: dict[str, list[tuple[float, float]]],
    decode: dict[str, float],
    encode: dict[str, float],
    repeat: int,
) -> str:
    machine = machine_info()
    base = statistics.median(u for u, _ in figures[RUNS[0][0]])
    lines = [
        "# Avro beside JSON through the service (`python -m bench.kafka_registry`)",
        "",
        f"Measured {machine['date']} on {machine['CPU']} ({machine['cores available to the run']} "
        "cores available); a local broker and a local Apicurio Registry. "
        f"`big_ring` over {events:,} payments as {records:,} records (5% deletes by id), "
        f"{PARTITIONS} partitions, epochs of {BATCH:,}; medians of {repeat} round(s). A record "
        f"is {json_bytes:.0f} bytes as JSON and {avro_bytes:.0f} bytes as Avro (with its 5-byte "
        "frame).",
        "",
        "| run | updates/s | match deltas/s | updates/s vs JSON in, records out |",
        "|---|---:|---:|---:|",
    ]
    for name, *_ in RUNS:
        updates = statistics.median(u for u, _ in figures[name])
        deltas = statistics.median(d for _, d in figures[name])
        lines.append(f"| {name} | {updates:,.0f} | {deltas:,.0f} | {updates / base:.2f}x |")
    lines += [
        "",
        "Where the time goes, per record, in this process on the same records (the fastest "
        f"of {repeat} passes, in batches of an epoch):",
        "",
        "| decoding | µs per record |",
        "|---|---:|",
        *(f"| {name} | {us:.2f} |" for name, us in decode.items()),
        "",
        "| encoding the output | µs per delta |",
        "|---|---:|",
        *(f"| {name} | {us:.2f} |" for name, us in encode.items()),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000, help="payments [300000]")
    parser.add_argument("--repeat", type=int, default=3, help="rounds [3]")
    parser.add_argument("--quick", action="store_true", help="a smoke run (20000 payments)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.quick:
        args.events, args.repeat = 20_000, 1
    records = ring_records(args.events, 1)
    with tempfile.TemporaryDirectory(prefix="sgm-bench-registry-") as scratch:
        tmp = Path(scratch)
        with (
            KafkaBroker(run_dir=tmp / "kafka") as broker,
            SchemaRegistry(run_dir=tmp / "registry") as registry,
        ):
            bootstrap, url = broker.bootstrap, registry.url
            name = f"payments-{time.monotonic_ns() % 10**9}"
            json_topic, avro_topic = f"{name}-json", f"{name}-avro"
            topics(bootstrap, (json_topic, PARTITIONS), (avro_topic, PARTITIONS))
            avro = avro_records(records, url, avro_topic)
            produce_records(bootstrap, json_topic, records)
            produce_records(bootstrap, avro_topic, avro)
            say(f"{len(records):,} records produced as JSON and as Avro")
            figures: dict[str, list[tuple[float, float]]] = {r[0]: [] for r in RUNS}
            for k in range(args.repeat):
                turn = k % len(RUNS)
                for run, input_format, output, decoding in RUNS[turn:] + RUNS[:turn]:
                    topic = avro_topic if input_format == "avro" else json_topic
                    got = run_serve(bootstrap, tmp, topic, url, input_format, output, decoding)
                    figures[run].append(got)
                    say(f"round {k + 1}: {run}: {got[0]:,.0f} updates/s, {got[1]:,.0f} deltas/s")
            decode = decode_costs([v for _, v in records], [v for _, v in avro], url, 3)
            encode = encode_costs(url, f"{name}-encoded", 100_000, 3)
            say(f"decoding {decode}; encoding {encode}")
    json_bytes = statistics.mean(len(v) for _, v in records)
    avro_bytes = statistics.mean(len(v) for _, v in avro)
    text = report(
        args.events, len(records), json_bytes, avro_bytes, figures, decode, encode, args.repeat
    )
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
