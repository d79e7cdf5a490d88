"""The Flink SQL baseline: ``layering_ring`` and ``pass_through`` as interval joins, counted.

``python -m bench.flink_sql STREAM.csv QUERY`` runs one query (or ``scan``, the source alone)
in Flink's streaming mode at parallelism 1 and prints one JSON line: the number of join
results, the seconds from submitting the job to its last result, and the peak RSS of the
Flink JVM. It runs under a Python with ``apache-flink`` (the ``flink`` extra), which is not the
project's venv: apache-flink pins numpy, pandas and pyarrow versions of its own, so ``make
flink`` installs it into ``.venv-flink``; :func:`flink_python` finds that interpreter and
:func:`run_flink` calls it, so this module imports pyflink only in :func:`main`.

The stream is the CSV of :func:`bench.timed_stream.csv_lines` (``id,src,dst,amount,ts``); its
event time is ``ts`` with a watermark ``lateness`` behind the largest seen. Each query counts
its matches per day of event time (a window aggregate: one row per day reaches the client);
the count is their sum. ``distinct`` is written out: the vertices
pairwise different; the events are then different too (they join different account pairs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = """
CREATE TABLE transfers (
    id BIGINT, src BIGINT, dst BIGINT, amount DOUBLE, ts BIGINT,
    rt AS TO_TIMESTAMP_LTZ(ts, 3),
    WATERMARK FOR rt AS rt - INTERVAL '{lateness}' SECOND(3)
) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')
"""
#: Each query's matches as a view with one time attribute ``rt`` (the latest event's time),
#: written as interval joins (both sides' event times bounded by each other).
MATCHES = {
    "scan": "SELECT rt FROM transfers",
    # t1 < t2 < t3 and within 24h: t3 - t1 <= 24h. The second join is bounded by t2's time
    # (t2 < t3 <= t2 + 24h) and checks t1's on the plain ts column, which is no time attribute.
    "layering_ring": """
        SELECT t3.rt AS rt FROM (
            SELECT t1.src AS a, t2.dst AS c, t1.ts AS ts1, t2.rt AS rt2
            FROM transfers t1, transfers t2
            WHERE t1.dst = t2.src
              AND t1.amount >= 1000 AND t2.amount >= 1000
              AND t2.rt > t1.rt AND t2.rt <= t1.rt + INTERVAL '24' HOUR
              AND t1.src <> t1.dst AND t2.src <> t2.dst AND t2.dst <> t1.src
        ) p, transfers t3
        WHERE t3.src = p.c AND t3.dst = p.a
          AND t3.amount >= 1000
          AND t3.rt > p.rt2 AND t3.rt <= p.rt2 + INTERVAL '24' HOUR
          AND t3.ts <= p.ts1 + 86400000
    """,
    "pass_through": """
        SELECT t2.rt AS rt
        FROM transfers t1, transfers t2
        WHERE t1.dst = t2.src
          AND t2.rt >= t1.rt AND t2.rt <= t1.rt + INTERVAL '10' MINUTE
          AND t2.amount >= CAST(0.9 AS DOUBLE) * t1.amount
          AND t1.src <> t1.dst AND t2.src <> t2.dst AND t2.dst <> t1.src
    """,
    # issue #35's aggregates: a row per (group, HOP window) holding the condition, at the
    # window's time (window_time, a time attribute, so the count per day can window it again)
    "fan_in": """
        SELECT window_time AS rt
        FROM TABLE(HOP(TABLE transfers, DESCRIPTOR(rt), INTERVAL '5' MINUTE, INTERVAL '1' HOUR))
        WHERE amount < 10000
        GROUP BY dst, window_start, window_end, window_time
        HAVING COUNT(DISTINCT src) >= 10
    """,
    "outflow": """
        SELECT window_time AS rt
        FROM TABLE(HOP(TABLE transfers, DESCRIPTOR(rt), INTERVAL '1' HOUR, INTERVAL '24' HOUR))
        GROUP BY src, window_start, window_end, window_time
        HAVING SUM(amount) > 50000
    """,
    # (over the view `chains`, VIEWS: a window TVF takes a table's name, not a subquery)
    "scatter_gather": """
        SELECT window_time AS rt
        FROM TABLE(HOP(TABLE chains, DESCRIPTOR(rt), INTERVAL '1' HOUR, INTERVAL '24' HOUR))
        GROUP BY a, c, window_start, window_end, window_time
        HAVING COUNT(DISTINCT b) >= 5
    """,
}
#: Views a query of MATCHES reads, made before it (name, SELECT).
VIEWS = {
    "scatter_gather": [
        (
            "chains",
            """
            SELECT t1.src AS a, t1.dst AS b, t2.dst AS c, t2.rt AS rt
            FROM transfers t1, transfers t2
            WHERE t1.dst = t2.src
              AND t2.rt >= t1.rt AND t2.rt <= t1.rt + INTERVAL '24' HOUR
              AND t1.src <> t1.dst AND t2.src <> t2.dst AND t2.dst <> t1.src
            """,
        )
    ]
}


def round_trip_sql(low: int = 2, high: int = 4) -> str:
    """``round_trip`` (issue #35) for paths of ``low`` to ``high`` hops as a ``UNION ALL`` of
    chains of interval joins: each hop after the previous one (by at most 7 days), at least
    1,000 and at least 80% of the one before, the last within 7 days of the first (on the plain
    ``ts`` column, no time attribute), back to the first hop's source, no account twice."""
    parts = []
    for k in range(low, high + 1):
        chain = """SELECT t1.src AS v0, t1.dst AS v1, t1.ts AS ts1, t1.amount AS m1, t1.rt AS rt1
            FROM transfers t1 WHERE t1.amount >= 1000 AND t1.src <> t1.dst"""
        for i in range(2, k + 1):
            seen = " AND ".join(f"t{i}.dst <> p.v{j}" for j in range(1, i))
            closes = f"t{i}.dst = p.v0" if i == k else f"t{i}.dst <> p.v0 AND {seen}"
            keep = ", ".join(f"p.v{j} AS v{j}" for j in range(i))
            chain = f"""SELECT {keep}, t{i}.dst AS v{i}, p.ts1 AS ts1, t{i}.amount AS m{i},
                    t{i}.rt AS rt{i}
                FROM ({chain}) p, transfers t{i}
                WHERE t{i}.src = p.v{i - 1} AND {closes}
                  AND t{i}.amount >= 1000 AND t{i}.amount >= CAST(0.8 AS DOUBLE) * p.m{i - 1}
                  AND t{i}.rt > p.rt{i - 1} AND t{i}.rt <= p.rt{i - 1} + INTERVAL '7' DAY
                  AND t{i}.ts <= p.ts1 + 604800000"""
        parts.append(f"SELECT rt{k} AS rt FROM ({chain})")
    return "\nUNION ALL\n".join(parts)


#: (``round_trip``'s 5 and 6 hops are not written: Flink runs the lengths up to 4 only)
MATCHES["round_trip_4"] = round_trip_sql(2, 4)
#: The matches counted per day of event time: an append-only window aggregate, so the job
#: sends a row per day to the client, not one per match, and holds no watermark back.
COUNT = """
    SELECT window_start, COUNT(*) AS n
    FROM TABLE(TUMBLE(TABLE found, DESCRIPTOR(rt), INTERVAL '1' DAY))
    GROUP BY window_start, window_end
"""


def flink_python() -> str | None:
    """A Python that can import pyflink: ``$FLINK_PYTHON``, ``.venv-flink`` of this checkout,
    or this interpreter; None if there is none."""
    given = os.environ.get("FLINK_PYTHON")
    if given:
        return given
    local = ROOT / ".venv-flink" / "bin" / "python"
    if local.exists():
        return str(local)
    return sys.executable if importlib.util.find_spec("pyflink") else None


def missing() -> str | None:
    """Why the baseline cannot run here, or None if it can."""
    if shutil.which("java") is None:
        return "java is not on PATH (Flink needs a JVM, 11 or 17)"
    if flink_python() is None:
        return "no Python with pyflink: run `make flink` (creates .venv-flink) or set FLINK_PYTHON"
    return None


def run_flink(
    csv: Path, query: str, lateness_ms: int, heap: str = "8g", timeout: float = 7200
) -> dict[str, Any]:
    """One query over ``csv`` in a Flink of its own, its JVM's heap at most ``heap``:
    ``matches``, ``seconds``, ``jvm_rss_mib``; past ``timeout`` seconds, the job is killed and
    ``matches`` is None; a job that fails has ``matches`` None and the first ``error`` line."""
    python = flink_python()
    if python is None:
        raise RuntimeError(missing())
    command = [python, "-m", "bench.flink_sql", str(csv), query, "--lateness-ms", str(lateness_ms)]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "JVM_ARGS": f"-Xmx{heap}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the JVM joins its group, and goes with it
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return {"query": query, "matches": None, "seconds": timeout, "jvm_rss_mib": None}
    finally:
        with contextlib.suppress(ProcessLookupError):  # a JVM left behind, if any
            os.killpg(process.pid, signal.SIGKILL)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        error = failure_reason(stderr, process.returncode)
        return {"query": query, "matches": None, "seconds": None, "error": error[:300]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def failure_reason(stderr: str, code: int) -> str:
    """Why a Flink job failed, from its stderr: the root cause of the Java exception (its last
    ``Caused by:``, else the first line naming an exception), not the first line that says
    "Error" (PyFlink warns of file systems it cannot load before anything fails)."""
    lines = [line.strip() for line in stderr.splitlines()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    if causes:
        return causes[-1]
    java = re.compile(r"(org|java|py4j)\.[\w.$]+(Exception|Error)\b")
    return next(
        (line for line in lines if java.match(line)),
        next((line for line in lines if "Error" in line or "Exception" in line), f"exit {code}"),
    )


def count(csv: Path, query: str, lateness_ms: int) -> dict[str, Any]:
    """Run ``query`` here (pyflink imported) and return its figures."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    env.execute_sql(SOURCE.format(path=csv.resolve(), lateness=lateness_ms / 1000))
    for name, view in VIEWS.get(query, []):
        env.create_temporary_view(name, env.sql_query(view))
    env.create_temporary_view("found", env.sql_query(MATCHES[query]))
    sampler = _RssSampler()
    started = time.perf_counter()
    result = env.execute_sql(COUNT)
    matches = days = 0
    with result.collect() as rows:
        for row in rows:
            matches += int(row[1])
            days += 1
    seconds = time.perf_counter() - started
    sampler.stop()
    plan = env.explain_sql(COUNT).split("== Optimized Execution Plan ==")[-1]
    return {
        "query": query,
        "matches": matches,
        "seconds": seconds,
        "jvm_rss_mib": sampler.peak / 1024,
        "days": days,
        "interval_joins": plan.count("IntervalJoin("),
        "other_joins": plan.count("Join(") - plan.count("IntervalJoin("),
    }


class _RssSampler:
    """Peak RSS (KiB) of this process's descendants (the Flink JVM), sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.2):
            self.peak = max(self.peak, sum(_rss_kib(p) for p in _descendants(os.getpid())))

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("csv", type=Path)
    parser.add_argument("query", choices=sorted(MATCHES))
    parser.add_argument("--lateness-ms", type=int, default=5_000)
    args = parser.parse_args()
    print(json.dumps(count(args.csv, args.query, args.lateness_ms)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
