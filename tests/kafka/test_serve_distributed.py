"""``serve`` with ``SGM_ENGINE=distributed`` against a real broker: the partitioned engine's
output is the single process's, epoch for epoch, through deaths of the driver (which owns the
Kafka clients) and of shards.

The verifier reads the output topic to its end with ``read_committed``. On a one-partition topic
with epochs cut by count, each epoch holds the same records in every run, so the output is
compared epoch for epoch with the single process's file job on the same epochs (a delta's
record is the same; within an epoch the partitioned engine orders rows by its own ids); the
replay checks also that every running sum stays in {0, 1}.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kafka import (
    pods,
    test_serve,
    test_serve_arities,
    test_serve_events,
    test_serve_windows,
)
from tests.kafka.test_serve import (
    QUERIES,
    ROOT,
    Service,
    check_exactly_once,
    committed_metadata,
    expected_matches,
    log_records,
    produce,
    read_topic,
    settled_metrics,
    stream_records,
    wait_consumed,
    wait_ready,
)
from tests.kafka_broker import KafkaCluster

pytest.importorskip("ray", reason="the partitioned engine needs Ray")

pytestmark = pytest.mark.kafka

#: Two workers, three shards (so that no shard count divides another's keys evenly).
DISTRIBUTED = {
    "SGM_ENGINE": "distributed",
    "SGM_WORKERS": "2",
    "SGM_SHARDS": "3",
    "SGM_BATCH_SIZE": "200",
    "SGM_MAX_BATCH_DELAY_MS": "10000",
}


def by_epoch(lines: list[bytes]) -> dict[int, list[bytes]]:
    """Output lines grouped by epoch, each epoch's sorted."""
    epochs: dict[int, list[bytes]] = defaultdict(list)
    for line in lines:
        epochs[int(json.loads(line)["epoch"])].append(line)
    return {epoch: sorted(rows) for epoch, rows in epochs.items()}


def file_job_lines(records: list[dict[str, object]], tmp: Path) -> list[bytes]:
    """The single process's file job on the same records, in epochs of 200: its output lines."""
    path = tmp / "records.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    queries = tmp / "q.q"
    queries.write_text(QUERIES)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "monitor", "run", "-q", str(queries)),
            *("--edges", str(path), "--undirected", "--quiet", "-b", "200"),
        ],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return done.stdout.splitlines()


def assert_single_process_output(svc: Service, records: list[dict[str, object]], tmp: Path) -> None:
    """The committed output, epoch for epoch, is the single process's on the same epochs."""
    got = [value for _, value, _ in read_topic(svc.bootstrap, svc.output)]
    check_exactly_once([json.loads(line) for line in got])
    expected = by_epoch(file_job_lines(records, tmp))
    assert by_epoch(got) == expected
    assert expected, "the workload made no matches: the comparison would be empty"


def run_to_the_end(svc: Service) -> None:
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=240, svc=svc)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()


def test_the_distributed_service_outputs_the_single_process_epochs(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = service(partitions=1, **DISTRIBUTED)
    records = stream_records(3000, seed=41)
    produce(svc.bootstrap, svc.input, records)
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=240, svc=svc)
    wait_ready(svc)
    metrics = scrape(svc)
    assert svc.stop() == 0, svc.log_text()
    assert_single_process_output(svc, records, tmp_path)
    # The driver's /metrics: the index as the shards hold it, and each shard's figures.
    assert metrics["subgraph_monitor_last_committed_epoch"] == {(): 15}
    tuples = metrics["subgraph_monitor_index_edges"]
    assert tuples == {(("relation", r),): n for r, n in final_tuples(records).items()}
    shards = metrics["subgraph_monitor_shard_tuples"]
    assert set(shards) == {(("shard", str(s)),) for s in range(3)}
    assert all(n > 0 for n in shards.values()), shards
    for family in ("shard_work_total", "shard_sent_bytes_total", "shard_received_bytes_total"):
        values = metrics[f"subgraph_monitor_{family}"]
        assert len(values) == 3 and all(v > 0 for v in values.values()), (family, values)
    assert set(metrics["subgraph_monitor_shard_committed_epoch"].values()) == {15}
    assert metrics["subgraph_monitor_exchange_rounds_total"][()] > 15
    assert metrics["subgraph_monitor_engine_reloads_total"] == {(): 0}
    started = log_records(svc, "shard started")
    assert sorted(r["shard"] for r in started) == [0, 1, 2], started
    # Kafka alone knows the last epoch: the offsets carry it.
    assert committed_metadata(svc.bootstrap, svc.group, svc.input, [0]) == {0: "epoch=15"}


@pytest.mark.parametrize(
    "failpoint",
    [
        "serve_before_kafka_commit",
        # (right after the Kafka commit is this one with less to drop: the embedded service's
        # test has it, and the recovery is the same catch-up)
        "driver_after_shards_prepare",
        "driver_after_epoch_record",
    ],
)
def test_the_driver_killed_at_each_step_of_the_commit(
    service: Callable[..., Service], tmp_path: Path, failpoint: str
) -> None:
    """SIGKILL of the Kafka owner before the transaction commits, after it and after the shards
    prepared (they drop the epoch, which is caught up from the input), after the driver's
    record: the restart continues from the record and its output is the single process's."""
    svc = service(partitions=1, **DISTRIBUTED, SGM_FAILPOINT=failpoint, SGM_FAILPOINT_HIT="5")
    records = stream_records(3000, seed=42)
    produce(svc.bootstrap, svc.input, records)
    killed = svc.start()
    assert killed.wait(timeout=180) == -signal.SIGKILL, svc.log_text()
    svc.env.pop("SGM_FAILPOINT")
    svc.start()
    run_to_the_end(svc)
    assert_single_process_output(svc, records, tmp_path)
    caught_up = "caught up without emitting" in svc.log_text()
    assert caught_up == (failpoint in ("serve_after_kafka_commit", "driver_after_shards_prepare"))
    # Not ready until the shards are loaded and hold what Kafka committed.
    restart = [json.loads(x) for x in svc.logs[-1].read_text().splitlines() if x.startswith("{")]
    messages = [r["message"] for r in restart]
    ready_at = next(
        i
        for i, r in enumerate(restart)
        if r["message"] == "readiness condition changed" and r["ready"]
    )
    assert messages.index("state loaded") < ready_at
    if caught_up:
        assert (
            messages.index(
                "caught up without emitting: the output of these records was already committed"
            )
            < ready_at
        )


def test_the_drivers_directory_lost_is_rebuilt_from_the_input(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """The driver's volume lost between runs, the shards' directories kept (they hold epochs the
    driver no longer records): the driver starts anew, the shards drop what it does not record,
    and what Kafka committed is caught up from the input without emitting; the output holds
    every match once and nothing twice."""
    svc = service(partitions=1, **DISTRIBUTED)
    records = stream_records(3000, seed=48)
    produce(svc.bootstrap, svc.input, records[:1600])
    svc.start()
    run_to_the_end(svc)
    shutil.rmtree(svc.tmp / "state" / "driver")
    produce(svc.bootstrap, svc.input, records[1600:])
    svc.start()
    run_to_the_end(svc)
    assert "caught up without emitting" in svc.logs[-1].read_text(), svc.log_text()
    rows = [json.loads(v) for _, v, _ in read_topic(svc.bootstrap, svc.output)]
    assert check_exactly_once(rows) == expected_matches(records, tmp_path)


@pytest.mark.parametrize("failpoint", ["shard_stage", "shard_before_prepare", "shard_before_fold"])
def test_a_shard_process_killed_is_replaced_and_loaded_again(
    service: Callable[..., Service], tmp_path: Path, failpoint: str
) -> None:
    """A shard's worker process dies by SIGKILL (armed in every shard process: each new
    actor dies again at its own fourth pass, so the run loses shards several times): while an
    epoch is staged (before its Kafka transaction), before it prepares an epoch whose output is
    committed, and after the driver recorded it, before it folds. The driver makes the shards
    anew, loads them at its record and goes on."""
    svc = service(partitions=1, **DISTRIBUTED, SGM_FAILPOINT=failpoint, SGM_FAILPOINT_HIT="4")
    records = stream_records(3000, seed=43)
    produce(svc.bootstrap, svc.input, records)
    svc.start()
    run_to_the_end(svc)
    reloads = log_records(svc, "state loaded again")
    assert reloads, svc.log_text()
    assert_single_process_output(svc, records, tmp_path)


def test_a_shard_actor_killed_with_ray_kill(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """``ray.kill`` of a shard actor, from another Ray client, while the stream runs."""
    svc = service(partitions=1, **DISTRIBUTED)
    records = stream_records(3000, seed=44)
    produce(svc.bootstrap, svc.input, records[:1500])
    svc.start()
    wait_ready(svc)
    cluster = wait_for(lambda: log_records(svc, "ray cluster"), svc)[-1]
    ray_kill(cluster, 1)
    produce(svc.bootstrap, svc.input, records[1500:])
    run_to_the_end(svc)
    assert log_records(svc, "state loaded again"), svc.log_text()
    assert_single_process_output(svc, records, tmp_path)


def scrape(svc: Service) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The service's /metrics: per sample name, per label set, the value."""
    text = settled_metrics(svc)
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return found


def final_tuples(records: list[dict[str, object]]) -> dict[str, int]:
    """Per relation, the tuples of the final graph with set semantics, each edge both ways
    (``SGM_UNDIRECTED``): what ``index_edges`` counts."""
    alive: dict[str, set[tuple[object, object]]] = defaultdict(set)
    for r in records:
        relation = str(r.get("relation", "e"))
        pair = {(r["src"], r["dst"]), (r["dst"], r["src"])}
        if r["op"] == "insert":
            alive[relation] |= pair
        else:
            alive[relation] -= pair
    return {relation: len(pairs) for relation, pairs in alive.items()}


def ray_kill(cluster: dict[str, object], shard: int) -> None:
    """``ray.kill`` of the service's shard actor from another driver on its cluster (a new
    local cluster enables Ray's token authentication: its token is in ~/.ray, which this client
    reads in token mode)."""
    kill = (
        "import ray, sys; ray.init(address=sys.argv[1], namespace=sys.argv[2]); "
        "ray.kill(ray.get_actor(sys.argv[3]), no_restart=True)"
    )
    actor = f"{cluster['actors']}-shard-{shard:04d}"
    subprocess.run(
        [sys.executable, "-c", kill, str(cluster["address"]), str(cluster["namespace"]), actor],
        env={**os.environ, "RAY_AUTH_MODE": "token"},
        check=True,
        capture_output=True,
        timeout=120,
    )


def wait_for(found: Callable[[], list[dict[str, object]]], svc: Service) -> list[dict[str, object]]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if records := found():
            return records
        time.sleep(0.2)
    raise AssertionError(svc.log_text())


def parent_pid(pid: int) -> int:
    """The parent of process ``pid`` (Linux: its ``/proc`` stat, after the command's name)."""
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_node_lost_with_its_disk_is_rebuilt_from_the_shard_changelog(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """A Ray cluster of a head and two worker nodes (``ray.cluster_utils.Cluster``); the
    service joins it. A worker node is removed while the service waits for input, and the
    directories of the shards it ran are deleted (its disk is gone with it); a new node joins.
    The next epoch finds the shards lost: they are made anew, the lost ones rebuilt from the
    shard changelog, and the output is the single process's."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        nodes = [cluster.add_node(num_cpus=2) for _ in range(2)]
        cluster.wait_for_nodes()
        svc = service(partitions=1, **DISTRIBUTED, SGM_RAY_ADDRESS=cluster.address)
        records = stream_records(3000, seed=45)
        produce(svc.bootstrap, svc.input, records[:1600])
        svc.start()
        wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=240, svc=svc)
        pids = {int(r["shard"]): int(r["pid"]) for r in log_records(svc, "shard started")}
        # (the node of shard 0: Ray may place every shard on one node; a shard's process is a
        # child of its node's raylet)
        raylets = {node.all_processes["raylet"][0].process.pid: node for node in nodes}
        hosts = {s: raylets[parent_pid(pid)] for s, pid in pids.items()}
        cluster.remove_node(hosts[0])
        on_it = sorted(s for s, node in hosts.items() if node is hosts[0])
        deadline = time.monotonic() + 60
        while any(alive(pids[s]) for s in on_it) and time.monotonic() < deadline:
            time.sleep(0.1)
        lost = sorted(s for s, pid in pids.items() if not alive(pid))
        assert lost == on_it, (lost, on_it)
        for s in lost:
            shutil.rmtree(svc.tmp / "state" / f"shard-{s:04d}")
        cluster.add_node(num_cpus=2)
        produce(svc.bootstrap, svc.input, records[1600:])
        run_to_the_end(svc)
        rebuilt = log_records(svc, "shard rebuilt from the changelog")
        assert sorted(r["shard"] for r in rebuilt) == lost, svc.log_text()
        assert all(r["bytes"] > 0 for r in rebuilt), rebuilt
        assert_single_process_output(svc, records, tmp_path)
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]


def test_the_charts_driver_joins_its_ray_cluster_as_a_node(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """The chart's topology, each pod a PID and mount namespace of its own (tests.kafka.pods):
    a Ray head with no CPUs and a worker node started by ``ray start``, as KubeRay starts them,
    and the service with the chart's settings (``SGM_RAY_ADDRESS=HEAD:6379``,
    ``SGM_RAY_JOIN=true``). The service starts first, before the head answers: it waits for
    the head, then starts a Ray node of its own, with no CPUs, and connects through it. The
    shards run on the worker node, none in the driver's pod; the output is the single
    process's; SIGTERM ends the service and its node with it."""
    if (reason := pods.unavailable(tmp_path)) is not None:
        pytest.skip(reason)
    port = pods.free_port()
    address = f"127.0.0.1:{port}"
    svc = service(
        partitions=1, **DISTRIBUTED, **pods.RAY_ENV, SGM_RAY_ADDRESS=address, SGM_RAY_JOIN="true"
    )
    svc.pod = True
    records = stream_records(2000, seed=47)
    produce(svc.bootstrap, svc.input, records)
    made: list[pods.RayPod] = []
    try:
        svc.start()
        time.sleep(2)  # (the service's first attempt finds no head)
        # (pods share the machine's network here: the worker's processes get ports of their
        # own, away from the range every Ray node takes by default)
        made.append(pods.RayPod(tmp_path / "head", "--head", f"--port={port}", "--num-cpus=0"))
        made.append(
            pods.RayPod(
                tmp_path / "worker",
                f"--address={address}",
                "--num-cpus=2",
                *pods.worker_ports(port),
            )
        )
        try:
            run_to_the_end(svc)
        except AssertionError as error:
            raise AssertionError(
                "\n".join(filter(None, [str(error), *map(pods.RayPod.exited, made)]))
            ) from error
        assert [pod.exited() for pod in made] == [None, None]
    finally:
        for pod in made:
            pod.delete()
    assert_single_process_output(svc, records, tmp_path)
    joined = log_records(svc, "joined the ray cluster as a node")
    assert [r["address"] for r in joined] == [address], svc.log_text()
    (cluster,) = log_records(svc, "ray cluster")
    nodes = {r["shard"]: r["node"] for r in log_records(svc, "shard started")}
    assert sorted(nodes) == [0, 1, 2] and None not in nodes.values(), nodes
    assert cluster["node"] not in nodes.values(), (cluster, nodes)  # no shard in the driver's pod
    assert len(set(nodes.values())) == 1  # the worker node, the only one with CPUs


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- the embedded service's tests, on the partitioned engine ----------------------------------

#: The engine's settings alone, for tests whose epochs are their own.
ENGINE = {"SGM_ENGINE": "distributed", "SGM_WORKERS": "2", "SGM_SHARDS": "3"}


def on_shards(service: Callable[..., Service]) -> Callable[..., Service]:
    """``service`` with :data:`ENGINE` (the test's own settings win)."""

    def make(partitions: int = 3, **env: str) -> Service:
        return service(partitions, **{**ENGINE, **env})

    return make


def test_odd_tuples_are_dead_letters_on_shards(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """Tuples of another arity than the shards hold go to the dead-letter topic with their
    reason and position, and the rest is applied (the arities are the engine's: the source
    reads them from the shards' index). Undecodable records and bad fields are the source's
    alone, the same for both engines (tests/kafka/test_serve.py, test_serve_events.py)."""
    test_serve_arities.test_odd_tuples_are_dead_letters_and_the_rest_is_applied(
        on_shards(service), tmp_path
    )


def test_late_events_are_dead_letters_on_shards(service: Callable[..., Service]) -> None:
    test_serve_windows.test_the_slowest_partition_holds_the_window_and_late_events_are_dead_letters(
        on_shards(service)
    )


def test_events_survive_sigkills_on_shards(service: Callable[..., Service]) -> None:
    test_serve_events.test_events_survive_sigkills_exactly_once_with_their_fields(
        on_shards(service)
    )


def test_broker_restart_mid_epoch_on_shards(
    kafka: KafkaCluster, service: Callable[..., Service], tmp_path: Path
) -> None:
    test_serve.test_broker_restart_mid_stream_loses_and_duplicates_nothing(
        kafka, on_shards(service), tmp_path
    )


def test_the_whole_ray_cluster_restarted_continues_from_the_durable_state(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """The service joins a Ray cluster (``SGM_RAY_ADDRESS``); midway the whole cluster goes
    down with the nodes' disks (the shards' directories deleted, as a RayCluster's pods lose
    their volumes) and the driver with it (its pod restarted); a new cluster comes up. The
    driver continues from its record, the shards rebuilt from the changelog: the input is read
    on from the recorded offsets, never from the beginning, and the output is the single
    process's."""
    from ray.cluster_utils import Cluster

    records = stream_records(3000, seed=46)
    first = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        svc = service(partitions=1, **DISTRIBUTED, SGM_RAY_ADDRESS=first.address)
        produce(svc.bootstrap, svc.input, records[:1600])
        svc.start()
        wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=240, svc=svc)
    finally:
        first.shutdown()  # type: ignore[no-untyped-call]
    svc.stop(signal.SIGKILL)
    recorded = max(r["epoch"] for r in log_records(svc, "epoch committed"))
    for shard in (svc.tmp / "state").glob("shard-*"):
        shutil.rmtree(shard)
    second = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        svc.env["SGM_RAY_ADDRESS"] = second.address
        svc.start()
        produce(svc.bootstrap, svc.input, records[1600:])
        run_to_the_end(svc)
    finally:
        second.shutdown()  # type: ignore[no-untyped-call]
    restart = [json.loads(x) for x in svc.logs[-1].read_text().splitlines() if x.startswith("{")]
    loaded = next(r for r in restart if r["message"] == "state loaded")
    assert loaded["epoch"] == recorded, loaded
    rebuilt = [r for r in restart if r["message"] == "shard rebuilt from the changelog"]
    assert sorted(r["shard"] for r in rebuilt) == [0, 1, 2], rebuilt
    assigned = [r for r in restart if r["message"] == "partition assigned"]
    assert assigned and all(r["offset"] == 1600 for r in assigned), assigned
    assert not any(r["message"].startswith("caught up") for r in restart)
    assert_single_process_output(svc, records, tmp_path)


def test_a_shard_lost_in_the_first_epoch_of_a_new_group_reading_from_latest(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    """A new group that starts at the end of the topic (``auto.offset.reset=latest``) loses a
    shard in its first epoch: neither the state nor the group has an offset for the partition,
    so the epoch is read again from its first record, not from the end again."""
    svc = service(
        partitions=1, **DISTRIBUTED, SGM_KAFKA=json.dumps({"auto.offset.reset": "latest"})
    )
    svc.start()
    wait_ready(svc)
    cluster = wait_for(lambda: log_records(svc, "ray cluster"), svc)[-1]
    ray_kill(cluster, 0)
    records = stream_records(2000, seed=48)
    produce(svc.bootstrap, svc.input, records)
    run_to_the_end(svc)
    assert log_records(svc, "state loaded again"), svc.log_text()
    assert_single_process_output(svc, records, tmp_path)
