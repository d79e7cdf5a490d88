"""``subgraph-monitor``: the command line.

Commands: ``run`` (the embedded main job: edges from a file or stdin, match deltas on stdout or
exactly once into a file), ``count`` (current matches of each query), ``explain`` (print every
plan of a query), ``state inspect`` (what a state directory holds), ``serve`` (the Kafka
service).

Exit codes: 0 success; 2 bad usage or an invalid query; 3 bad input under ``--strict``; 4 bad
stored state; 1 any other error.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import click
import orjson

from connectors.events import FieldTypes
from connectors.files import EdgeFileSource
from core.errors import (
    ConfigError,
    InputError,
    MonitorError,
    PlanError,
    QueryError,
    StateError,
)
from core.records import Checkpoint, UpdateBatch
from monitor.cli.options import (
    edges_option,
    format_option,
    output_limit_option,
    prefixes_option,
    query_option,
    ray_address_option,
    relation_option,
    shards_option,
    strict_option,
    table_option,
    undirected_option,
    workers_option,
)
from monitor.cli.partitioned import count_on_shards, inspect_shards, run_on_shards
from monitor.cli.reports import (
    dead_letter_reporter,
    print_plans,
    print_progress,
    print_state,
    print_summary,
)
from monitor.plan.events import event_relations, rewrite
from monitor.plan.planner import delta_queries, static_plan
from monitor.query.ast import Query
from monitor.query.load import load_queries_many
from monitor.service.epochs import EpochProcessor
from monitor.service.event_plan import event_field_types
from monitor.service.filejob import FileJob, run_file_job
from monitor.service.settings import Settings, load_settings
from monitor.service.stop import Stop, stop_on_signals

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_STATE = 4

_EXIT_CODES: tuple[tuple[type[MonitorError], int], ...] = (
    (QueryError, EXIT_USAGE),
    (PlanError, EXIT_USAGE),
    (ConfigError, EXIT_USAGE),
    (InputError, EXIT_INPUT),
    (StateError, EXIT_STATE),
)


def _fail(error: MonitorError) -> NoReturn:
    click.echo(f"subgraph-monitor: error: {error}", err=True)
    code = next((c for kind, c in _EXIT_CODES if isinstance(error, kind)), EXIT_ERROR)
    sys.exit(code)


def _queries(specs: tuple[str, ...]) -> tuple[Query, ...]:
    queries = load_queries_many(specs)
    events = event_relations(queries)
    for query in queries:
        internal = rewrite(query, events, bounds=True).internal
        delta_queries(internal)
        static_plan(internal)
    return queries


def _settings(**flags: Any) -> Settings:
    try:
        return Settings(**{k: v for k, v in flags.items() if v is not None})
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _source(
    path: str,
    settings: Settings,
    fmt: str,
    strict: bool,
    quiet: bool,
    events: FieldTypes | None = None,
    arities: Mapping[str, int] | None = None,
    start: Checkpoint | None = None,
    skip_to: int = 0,
) -> EdgeFileSource:
    return EdgeFileSource(
        path,
        default_relation=settings.default_relation,
        format=fmt,
        strict=strict,
        on_dead_letter=dead_letter_reporter(quiet),
        start=start,
        skip_to=skip_to,
        events=events,
        arities=arities,
    )


def _batches(source: EdgeFileSource, size: int) -> Iterator[UpdateBatch]:
    yield from source.batches(size)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="subgraph-monitor")
def main() -> None:
    """Continuously maintained subgraph-pattern queries over a stream of edge changes."""


@main.command()
@query_option
@edges_option
@undirected_option
@click.option(
    "--batch-size", "-b", type=int, default=None, help="Updates per epoch [default: 10000]."
)
@click.option("--preload", type=str, default=None, help="Load this edge file first (no deltas).")
@click.option(
    "--initial", is_flag=True, help="First emit the matches present after --preload (epoch 0)."
)
@click.option(
    "--state-dir",
    type=str,
    default=None,
    help="Keep the index in this RocksDB directory; a rerun continues where it stopped.",
)
@click.option(
    "--output",
    "-o",
    type=str,
    default=None,
    help="Write the deltas to this file, exactly once across crashes (with --state-dir).",
)
@format_option
@relation_option
@strict_option
@prefixes_option
@click.option(
    "--output-fields",
    type=str,
    default=None,
    help="Fields of matched events in the output, comma separated (id, src, dst always) "
    "[default: every field].",
)
@output_limit_option
@click.option(
    "--emit",
    type=click.Choice(["changes", "appearances"]),
    default=None,
    help="changes: every +1 and -1; appearances: only +1 (alerting) [default: changes].",
)
@click.option(
    "--retention",
    type=str,
    default=None,
    help="How long events live after their ts, per relation: transfer=24h,logins=1h "
    "('none': until deleted) [default: the longest span of the queries reading it].",
)
@table_option
@click.option(
    "--allowed-lateness",
    type=str,
    default=None,
    help="How far the watermark stays behind the latest event time (500ms, 10s, 1m) [default: 5s].",
)
@click.option("--quiet", is_flag=True, help="No progress and no summary on stderr.")
@workers_option
@shards_option
@ray_address_option
def run(
    query_specs: tuple[str, ...],
    edges: str,
    undirected: bool | None,
    batch_size: int | None,
    preload: str | None,
    initial: bool,
    state_dir: str | None,
    output: str | None,
    fmt: str,
    default_relation: str | None,
    strict: bool,
    max_prefixes: int | None,
    output_fields: str | None,
    output_limit: int | None,
    emit: str | None,
    retention: str | None,
    tables: tuple[str, ...],
    allowed_lateness: str | None,
    quiet: bool,
    workers: int | None,
    shards: int | None,
    ray_address: str | None,
) -> None:
    """Stream edge updates and print one JSON line per match delta, epochs in order (with
    ``--workers``, on the partitioned engine)."""
    try:
        settings = _settings(
            undirected=undirected,
            batch_size=batch_size,
            default_relation=default_relation,
            max_prefixes=max_prefixes,
            state_dir=state_dir,
            output_fields=output_fields,
            output_limit=output_limit,
            emit=emit,
            retention=retention,
            tables=",".join(tables) or None,
            allowed_lateness=allowed_lateness,
        )
        if output is not None and settings.state_dir is None:
            raise ConfigError("--output needs --state-dir: exactly-once output needs stored state")
        if initial and preload is None:
            raise ConfigError("--initial emits the matches of the --preload graph; give --preload")
        queries = _queries(query_specs)
        if workers is not None:
            types = event_field_types(queries, event_relations(queries))

            def open_source(path: str, start: Checkpoint | None, skip: int) -> EdgeFileSource:
                return _source(path, settings, fmt, strict, quiet, types, {}, start, skip)

            partitioned = (workers, shards, ray_address)
            run_on_shards(
                queries, settings, edges, open_source, quiet, partitioned, preload, initial, output
            )
            return
        with stop_on_signals():  # from here on, SIGTERM stops after the epoch in flight
            _run_job(queries, settings, edges, fmt, strict, quiet, preload, initial, output)
    except MonitorError as error:
        _fail(error)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(EXIT_OK)


def _run_job(
    queries: tuple[Query, ...],
    settings: Settings,
    edges: str,
    fmt: str,
    strict: bool,
    quiet: bool,
    preload: str | None,
    initial: bool,
    output: str | None,
) -> None:
    """The file job of ``run``, from the processor's start to the summary."""
    processor = EpochProcessor(queries, settings)
    types = processor.field_types
    started = time.perf_counter()

    def open_source(path: str, start: Checkpoint | None, skip_to: int) -> EdgeFileSource:
        # The processor's arities are its index's, restored or preloaded before reading.
        arities = processor.arities
        return _source(path, settings, fmt, strict, quiet, types, arities, start, skip_to)

    job = FileJob(
        edges=edges,
        open_source=open_source,
        preload=preload,
        initial=initial,
        state_dir=settings.state_dir,
        output=output,
        progress=None if quiet else print_progress,
        progress_seconds=settings.progress_seconds,
    )
    totals = run_file_job(processor, job)
    if not quiet:
        bad = sum(s.dead_letters for s in job.sources)
        print_summary(totals, bad, time.perf_counter() - started)
        if Stop.requested:
            click.echo(
                f"subgraph-monitor: stopped after epoch {processor.epoch}; run again with "
                "the same arguments to continue",
                err=True,
            )


@main.command()
@query_option
@edges_option
@undirected_option
@format_option
@relation_option
@strict_option
@prefixes_option
@workers_option
@shards_option
@ray_address_option
def count(
    query_specs: tuple[str, ...],
    edges: str,
    undirected: bool | None,
    fmt: str,
    default_relation: str | None,
    strict: bool,
    max_prefixes: int | None,
    workers: int | None,
    shards: int | None,
    ray_address: str | None,
) -> None:
    """Load the edges and print ``name<TAB>count`` for every query (with ``--workers``, on the
    partitioned engine)."""
    try:
        settings = _settings(
            undirected=undirected, default_relation=default_relation, max_prefixes=max_prefixes
        )
        queries = _queries(query_specs)
        if workers is not None:
            types = event_field_types(queries, event_relations(queries))
            source = _source(edges, settings, fmt, strict, quiet=False, events=types, arities={})
            count_on_shards(queries, settings, source, (workers, shards, ray_address))
            return
        processor = EpochProcessor(queries, settings)
        source = _source(
            edges,
            settings,
            fmt,
            strict,
            quiet=False,
            events=processor.field_types,
            arities=processor.arities,
        )
        for batch in _batches(source, 1 << 20):
            processor.preload(batch)
        for name, matches in processor.counts().items():
            click.echo(f"{name}\t{matches}")
    except MonitorError as error:
        _fail(error)


@main.command()
@click.argument("query_specs", nargs=-1, required=True)
def explain(query_specs: tuple[str, ...]) -> None:
    """Print every plan of the queries: the delta queries, then the static plan."""
    try:
        print_plans(_queries(query_specs))
    except MonitorError as error:
        _fail(error)


@main.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="A YAML file of settings (SGM_ environment variables win).",
)
@click.option("--print-config", is_flag=True, help="Print the effective settings and exit.")
def serve(config_file: str | None, print_config: bool) -> None:
    """The Kafka service: edge topics in, match deltas out, exactly once (settings: SGM_*)."""
    try:
        try:
            settings = load_settings(config_file)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if print_config:
            click.echo(orjson.dumps(settings.printable(), option=orjson.OPT_INDENT_2).decode())
            return
        from monitor.service.logs import configure_logging
        from monitor.service.serve import serve as run_service

        configure_logging(settings.log_level)
        if settings.engine == "distributed":
            from monitor.distributed.service import distributed

            sys.exit(run_service(settings, distributed))
        sys.exit(run_service(settings))
    except MonitorError as error:
        _fail(error)


@main.group()
def state() -> None:
    """Look at a state directory."""


@state.command()
@click.argument("directory", type=click.Path(file_okay=False))
def inspect(directory: str) -> None:
    """Print a state directory's epoch, input position, queries, relations and size on disk
    (of the partitioned engine's: of each shard)."""
    try:
        if (Path(directory) / "driver").is_dir():  # the partitioned engine's
            inspect_shards(directory)
        else:
            print_state(directory)
    except MonitorError as error:
        _fail(error)
