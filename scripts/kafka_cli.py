"""``kafka-local up | down | status | fetch``: the command line over :class:`KafkaBroker`
(``scripts/kafka-local`` runs :func:`main`). Standard library only."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import IO

from scripts.kafka_jars import KafkaLocalError, default_run_dir, fetch_jars, kafka_version
from scripts.kafka_local import (
    DEFAULT_HEAP,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    KafkaBroker,
)


def _say(*parts: object, file: IO[str] | None = None) -> None:
    """The command line's output: the bootstrap address on stdout, everything else on stderr."""
    (file or sys.stdout).write(" ".join(map(str, parts)) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafka-local",
        description="A single-node Apache Kafka broker (KRaft) on 127.0.0.1 for development "
        "and tests, from Maven Central jars. `up` prints the bootstrap address on stdout.",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="config, data, logs and state (default $SGM_KAFKA_RUN or <repo>/.cache/kafka-local)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the broker (or report the running one)")
    up.add_argument("--port", type=int, default=None, help="broker port (default: a free one)")
    up.add_argument("--controller-port", type=int, default=None)
    up.add_argument("--heap", default=None, help=f"JVM -Xmx (default {DEFAULT_HEAP})")
    up.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT)
    down = sub.add_parser("down", help="stop the broker and delete its run directory")
    down.add_argument("--keep", action="store_true", help="keep the data (a later up restarts)")
    down.add_argument("--timeout", type=float, default=DEFAULT_STOP_TIMEOUT)
    sub.add_parser("status", help="whether it runs, and its address (exit 3 if not)")
    sub.add_parser("fetch", help="only fetch the jars; print their directory")
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir or default_run_dir()
    try:
        if args.command == "fetch":
            _say(fetch_jars())
            return 0
        if args.command == "up":
            broker = KafkaBroker(
                run_dir,
                port=args.port,
                controller_port=args.controller_port,
                heap=args.heap,
                start_timeout=args.timeout,
            )
            if broker.running:
                _say(f"kafka-local: already running (pid {broker.pid})", file=sys.stderr)
            else:
                broker.start()
                _say(
                    f"kafka-local: Kafka {kafka_version()} up in {broker.started_in or 0:.1f}s "
                    f"(pid {broker.pid}, log {broker.log_path})",
                    file=sys.stderr,
                )
            _say(broker.bootstrap)
            return 0
        broker = KafkaBroker(run_dir)
        if args.command == "status":
            if broker.running:
                _say(f"running {broker.bootstrap} pid {broker.pid} ({run_dir})")
                return 0
            _say(f"not running ({run_dir})")
            return 3
        # down
        broker.stop_timeout = args.timeout
        was_running = broker.running
        broker.stop()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
        _say(
            f"kafka-local: {'stopped' if was_running else 'not running'}"
            f"{'' if args.keep else f'; removed {run_dir}'}",
            file=sys.stderr,
        )
        return 0
    except KafkaLocalError as exc:
        _say(f"kafka-local: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
