"""The Helm chart: lint, render, validate against the Kubernetes types, and check what renders.

``helm`` is built from the Go module proxy and cached (tests/deploy/conftest.py); the rendered
manifests go through ``tools/k8s-validate`` (strict decoding into the ``k8s.io/api`` and
prometheus-operator types); the alert rules through ``promtool check rules`` and ``promtool
test rules`` (Debian's prometheus package). Every case renders twice at most: the defaults and
a values file with every optional feature on (``values-all-on.yaml`` beside this file).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.service.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "subgraph-monitor"
ALL_ON = Path(__file__).with_name("values-all-on.yaml")
KUBE_VERSION = "1.31.0"

#: Settings the chart sets itself rather than taking from ``config``.
CHART_SETS = {
    "state_dir",
    "http_port",
    "queries",
    "kafka_secrets_dir",
    "schema_registry_secrets_dir",
    "instance_id",
    "transactional_id",
}

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="module")
def render(helm_bin: Path) -> Render:
    """``render(*extra_args)`` -> the manifests ``helm template`` renders."""

    def run(*args: str) -> list[dict[str, Any]]:
        out = helm(helm_bin, "template", "sgm", str(CHART), "--namespace", "streams", *args)
        return [d for d in yaml.safe_load_all(out) if d]

    return run


def helm(helm_bin: Path, *args: str, ok: bool = True) -> str:
    proc = subprocess.run(
        [str(helm_bin), *args, "--kube-version", KUBE_VERSION]
        if args[0] in ("template",)
        else [str(helm_bin), *args],
        capture_output=True,
        text=True,
    )
    if ok:
        assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stderr}"
    return proc.stdout if ok else proc.stderr + proc.stdout


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    sts = one(docs, "StatefulSet")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    return dict(c)


def test_lint_strict(helm_bin: Path) -> None:
    helm(helm_bin, "lint", "--strict", str(CHART))
    helm(helm_bin, "lint", "--strict", str(CHART), "--values", str(ALL_ON))


@pytest.mark.parametrize("values", ["defaults", "all-on"])
def test_rendered_manifests_validate_against_the_kubernetes_types(
    render: Render, k8s_validate_bin: Path, tmp_path: Path, values: str
) -> None:
    args = [] if values == "defaults" else ["--values", str(ALL_ON)]
    docs = render(*args)
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    proc = subprocess.run(
        [str(k8s_validate_bin), str(manifest)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    validated = sorted(line.split()[1].split("/")[0] for line in proc.stdout.splitlines())
    kinds = sorted(d["kind"] for d in docs)
    assert validated == kinds, "every document was validated"
    expected = {"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "ServiceAccount"}
    if values == "all-on":
        expected |= {"ServiceMonitor", "PrometheusRule"}
    assert expected <= set(kinds)
    assert ("ServiceMonitor" in kinds) == (values == "all-on")


def test_statefulset_shape_and_hardening(render: Render) -> None:
    docs = render()
    sts = one(docs, "StatefulSet")
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == one(docs, "Service", "-headless")["metadata"]["name"]
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in claim["spec"], "the cluster default unless set"
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(docs)
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/var/lib/subgraph-monitor"] == "state" == claim["metadata"]["name"]
    assert "/tmp" in mounts, "a writable /tmp under a read-only root"
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["args"][:2] == ["serve", "--config"]
    env = {e["name"]: e for e in c["env"]}
    assert env["SGM_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["SGM_TRANSACTIONAL_ID"]["value"] == "subgraph-monitor-$(SGM_INSTANCE_ID)"
    assert c["resources"]["limits"]["memory"] == "4Gi"
    assert one(docs, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": spec["selector"],
    }


def test_probes_resources_and_placement_are_overridable(render: Render) -> None:
    docs = render("--values", str(ALL_ON))
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    c = container(docs)
    assert c["startupProbe"]["failureThreshold"] == 120
    assert c["livenessProbe"]["periodSeconds"] == 30
    assert c["image"].endswith("@sha256:" + "a" * 64)
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert "podAntiAffinity" in pod["affinity"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    claim = one(docs, "StatefulSet")["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def rendered_settings(docs: list[dict[str, Any]], tmp_path: Path) -> Settings:
    """The service's settings from the rendered ConfigMap, read as ``serve --config`` would."""
    config = one(docs, "ConfigMap", "-config")["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(config)
    data = yaml.safe_load(config)
    for setting, key in (
        ("kafka_secrets_dir", "sasl.password"),
        ("schema_registry_secrets_dir", "basic.auth.user.info"),
    ):
        if setting in data:  # the Secret's mount; stand in a directory for it
            secrets = tmp_path / setting
            secrets.mkdir(exist_ok=True)
            (secrets / key).write_text("pw")
            data[setting] = str(secrets)
            path.write_text(yaml.safe_dump(data))
    return load_settings(str(path))


def test_rendered_config_is_what_the_service_reads(render: Render, tmp_path: Path) -> None:
    settings = rendered_settings(render(), tmp_path)
    assert settings.state_dir == "/var/lib/subgraph-monitor/state"
    assert settings.bootstrap_servers == "kafka:9092"
    assert settings.queries == "triangle"
    on = rendered_settings(render("--values", str(ALL_ON)), tmp_path)
    assert on.batch_size == 500
    assert on.input_topics == ["transfers", "logins", "accounts"]
    assert on.topic_relations == {"transfers": "pays", "logins": "uses", "accounts": "account"}
    assert on.tables == ["account"]
    assert on.kafka_config()["security.protocol"] == "SASL_SSL"
    assert on.kafka_config()["sasl.password"] == "pw"
    assert on.queries == "/etc/subgraph-monitor/queries/queries.q"
    assert on.retention == {"pays": 86_400_000.0, "uses": math.inf}
    assert on.allowed_lateness == 10_000.0
    assert on.watermark_outliers == 2
    assert on.emit == "appearances"
    assert on.output_format == "batches"
    assert on.batch_encoding == "arrow"
    assert on.output_fields == ["amount"]


def test_event_time_values_render_to_the_service_settings(render: Render, tmp_path: Path) -> None:
    """``config.retention`` is a map rendered as SGM_RETENTION's string; the lateness is ms or a
    duration; empty and null leave the service's defaults."""
    docs = render(
        "--set",
        "config.retention.transfer=90m",
        "--set",
        "config.retention.logins=forever",
        "--set",
        "config.allowed_lateness=2500",
        "--set",
        "config.watermark_outliers=0",
    )
    config = yaml.safe_load(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert config["retention"] == "logins=forever,transfer=90m"
    settings = rendered_settings(docs, tmp_path)
    assert settings.retention == {"transfer": 5_400_000.0, "logins": math.inf}
    assert settings.allowed_lateness == 2_500.0
    assert settings.watermark_outliers == 0
    for args in [(), ("--set", "config.retention=null", "--set", "config.allowed_lateness=null")]:
        settings = rendered_settings(render(*args), tmp_path)
        assert settings.retention == {}
        assert settings.allowed_lateness == 5_000.0
        assert settings.watermark_outliers == 1


def test_every_setting_is_a_value_with_the_service_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    fields = set(Settings.model_fields)
    assert set(values["config"]) == fields - CHART_SETS, "config lists every other setting"
    defaults = Settings.model_construct()
    for name, value in values["config"].items():
        if name == "bootstrap_servers":
            continue  # in a cluster the broker is a Service, not localhost
        assert value == getattr(defaults, name), f"config.{name}: chart and service disagree"


def test_queries_from_inline_text_or_an_existing_configmap(render: Render, tmp_path: Path) -> None:
    query = tmp_path / "tri.q"
    query.write_text("tri(a, b, c) := e(a, b), e(b, c), e(a, c).\n")
    docs = render("--set-file", f"queries.inline={query}")
    queries = one(docs, "ConfigMap", "-queries")
    assert queries["data"]["queries.q"].startswith("tri(a, b, c)")
    vols = {v["name"]: v for v in one(docs, "StatefulSet")["spec"]["template"]["spec"]["volumes"]}
    assert vols["queries"]["configMap"]["name"] == queries["metadata"]["name"]
    docs = render("--set", "queries.existingConfigMap=my-queries", "--set", "queries.key=fraud.q")
    assert not [d for d in docs if d["metadata"]["name"].endswith("-queries")]
    vols = {v["name"]: v for v in one(docs, "StatefulSet")["spec"]["template"]["spec"]["volumes"]}
    assert vols["queries"]["configMap"] == {
        "name": "my-queries",
        "items": [{"key": "fraud.q", "path": "fraud.q"}],
    }
    config = yaml.safe_load(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert config["queries"] == "/etc/subgraph-monitor/queries/fraud.q"


def test_kafka_credentials_come_from_an_existing_secret(render: Render) -> None:
    assert "kafka-secrets" not in json.dumps(render())
    docs = render("--set", "kafka.existingSecret=kafka-creds")
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["kafka-secrets"]["secret"]["secretName"] == "kafka-creds"
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["kafka-secrets"]["readOnly"] is True
    config = yaml.safe_load(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert config["kafka_secrets_dir"] == mounts["kafka-secrets"]["mountPath"]
    assert not [d for d in docs if d["kind"] == "Secret"], "the chart never holds credentials"


def test_schema_registry_credentials_come_from_an_existing_secret(
    render: Render, tmp_path: Path
) -> None:
    assert "schema-registry-secrets" not in json.dumps(render())
    docs = render(
        "--set",
        "schemaRegistry.existingSecret=registry-creds",
        "--set",
        "config.input_format=avro",
        "--set",
        "config.schema_registry_url=http://registry:8081",
        "--set",
        "config.field_map.src=from_account",
    )
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["schema-registry-secrets"]["secret"]["secretName"] == "registry-creds"
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["schema-registry-secrets"]["readOnly"] is True
    config = yaml.safe_load(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert config["schema_registry_secrets_dir"] == mounts["schema-registry-secrets"]["mountPath"]
    settings = rendered_settings(docs, tmp_path)
    assert settings.input_format == "avro" and settings.field_map == {"src": "from_account"}
    assert settings.registry_config() == {"basic.auth.user.info": "pw"}
    assert settings.printable()["schema_registry"] == {"basic.auth.user.info": "***"}
    assert not [d for d in docs if d["kind"] == "Secret"], "the chart never holds credentials"


def checksum(docs: list[dict[str, Any]]) -> str:
    meta = one(docs, "StatefulSet")["spec"]["template"]["metadata"]
    return str(meta["annotations"]["checksum/config"])


def test_checksum_rolls_pods_on_a_changed_setting_or_query(render: Render, tmp_path: Path) -> None:
    query = tmp_path / "loop.q"
    query.write_text("loop(a) := e(a, a).\n")
    base = checksum(render())
    assert checksum(render()) == base
    assert checksum(render("--set", "config.batch_size=20")) != base
    assert checksum(render("--set-file", f"queries.inline={query}")) != base
    assert checksum(render("--set", "replicas=1")) == base


def test_bad_values_are_refused_with_a_message(helm_bin: Path) -> None:
    cases = {
        "config.batch_size=0": "batch_size",
        "config.bacth_size=5": "bacth_size",
        "config.kafka.sasl\\.password=x": "/config/kafka",
        "replicas=0": "replicas",
        "config.log_level=LOUD": "log_level",
        "image.pullPolicy=Sometimes": "pullPolicy",
        "podDisruptionBudget.minAvailable=1": "not both",
        "config.retention.transfer=1day": "/config/retention/transfer",
        "config.allowed_lateness=soon": "allowed_lateness",
        "config.watermark_outliers=-1": "watermark_outliers",
        "prometheusRule.lateShare=5": "lateShare",
    }
    for setting, message in cases.items():
        err = helm(
            helm_bin,
            "template",
            "sgm",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "--set",
            setting,
            ok=False,
        )
        assert message in err, f"--set {setting}: {err}"


def schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        paths.add(path)
        if "object" in sub.get("type", "") and sub.get("properties") is not None:
            paths |= schema_paths(sub, path + ".")
    return paths


def value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Key paths of ``values``, descending only where the schema describes the object."""
    paths = set()
    props = schema.get("properties") or {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths.add(path)
        sub = props.get(key, {})
        if isinstance(value, dict) and sub.get("properties") is not None:
            paths |= value_paths(value, sub, path + ".")
    return paths


def test_schema_describes_every_value_and_closes_every_object() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    described = schema_paths(schema)
    assert value_paths(values, schema) - described == set(), "values the schema does not know"
    assert set(schema["properties"]) == set(values), "top-level schema keys without a default"

    def closed(node: dict[str, Any], where: str) -> None:
        if node.get("properties") is not None:
            assert node.get("additionalProperties") is False, f"{where} accepts unknown keys"
            for key, sub in node["properties"].items():
                closed(sub, f"{where}.{key}")

    closed(schema, "values")


def docs_chart_section() -> str:
    text = (ROOT / "docs" / "helm.md").read_text()
    match = re.search(r"^## Helm chart\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, "docs/helm.md has a 'Helm chart' section"
    return match.group(1)


def test_the_docs_list_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    section = docs_chart_section()
    listed = set(re.findall(r"^\| `([^`]+)` \|", section, re.M))
    paths = value_paths(values, schema)
    leaves = {p for p in paths if not any(q.startswith(p + ".") for q in paths)}
    unlisted = {
        leaf
        for leaf in leaves
        if not any(leaf == row or leaf.startswith(row + ".") for row in listed)
    }
    assert unlisted == set(), "values missing from the table in docs/helm.md"
    assert listed - paths == set(), "docs/helm.md lists values the chart does not have"


def test_dashboard_configmap_carries_the_dashboard_and_the_sidecar_label(render: Render) -> None:
    shipped = json.loads((CHART / "dashboards" / "subgraph-monitor.json").read_text())
    cm = one(render(), "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["subgraph-monitor.json"]) == shipped
    cm = one(
        render(
            "--set",
            "dashboards.label=grafana_dashboard_v2",
            "--set",
            "dashboards.namespace=monitoring",
        ),
        "ConfigMap",
        "-dashboard",
    )
    assert cm["metadata"]["labels"]["grafana_dashboard_v2"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert not [d for d in render("--set", "dashboards.enabled=false") if "dashboard" in str(d)]


def test_service_monitor_scrapes_only_the_metrics_service(render: Render) -> None:
    docs = render("--values", str(ALL_ON))
    sm = one(docs, "ServiceMonitor")
    selector = sm["spec"]["selector"]["matchLabels"]
    services = [d for d in docs if d["kind"] == "Service"]
    matched = [
        s["metadata"]["name"]
        for s in services
        if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())
    ]
    assert matched == [one(docs, "Service", "-monitor")["metadata"]["name"]], matched
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"


def rules_file(docs: list[dict[str, Any]], tmp_path: Path) -> Path:
    rule = one(docs, "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_promtool_checks_the_alert_rules(
    render: Render, promtool_bin: Path, tmp_path: Path
) -> None:
    path = rules_file(render("--values", str(ALL_ON)), tmp_path)
    proc = subprocess.run(
        [str(promtool_bin), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [r["alert"] for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]
    assert {
        "SubgraphMonitorConsumerLagGrowing",
        "SubgraphMonitorNoEpochCommitted",
        "SubgraphMonitorDeadLetters",
        "SubgraphMonitorTransactionsAborting",
        "SubgraphMonitorRestarting",
        "SubgraphMonitorNotReady",
        "SubgraphMonitorWatermarkStalled",
        "SubgraphMonitorLateEvents",
    } <= set(names)
    exprs = {
        r["alert"]: r["expr"]
        for g in yaml.safe_load(path.read_text())["groups"]
        for r in g["rules"]
    }
    assert "offset 30m" in exprs["SubgraphMonitorWatermarkStalled"], "watermarkStalledMinutes"
    assert exprs["SubgraphMonitorLateEvents"].endswith("> 0.01"), "lateShare"


def test_alerts_fire_on_their_condition_and_stay_quiet_otherwise(
    render: Render, promtool_bin: Path, tmp_path: Path
) -> None:
    """``promtool test rules``: synthetic series in, exactly the expected alerts out."""
    docs = render("--set", "prometheusRule.enabled=true")
    # The firing conditions are under test here; the annotation templates are checked by
    # `promtool check rules` above (promtool would otherwise compare their rendered text).
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    sel = 'namespace="streams", job="sgm-subgraph-monitor", pod="sgm-subgraph-monitor-0"'
    late = f"subgraph_monitor_dead_letters_total{{{sel}, reason='late'}}"
    healthy = {
        f"subgraph_monitor_consumer_lag{{{sel}, topic='edges', partition='0'}}": "10+0x60",
        f"subgraph_monitor_last_committed_epoch_timestamp_seconds{{{sel}}}": "0+60x60",
        f"subgraph_monitor_dead_letters_total{{{sel}, reason='json'}}": "0+0x60",
        late: "0+0x60",
        f"subgraph_monitor_updates_consumed_total{{{sel}, topic='edges'}}": "0+600x60",
        f"subgraph_monitor_watermark_seconds{{{sel}}}": "0+60x60",
        f"subgraph_monitor_transactions_aborted_total{{{sel}}}": "0+0x60",
        f"process_start_time_seconds{{{sel}}}": "0+0x60",
        f"subgraph_monitor_ready{{{sel}}}": "1+0x60",
        f"subgraph_monitor_shard_waiting_seconds{{{sel}, shard='0'}}": "0+0x60",
        f"subgraph_monitor_engine_reloads_total{{{sel}}}": "0+0x60",
    }

    def case(overrides: dict[str, str], fire: str | None, at: str = "59m") -> dict[str, Any]:
        series = {**healthy}
        for metric, values in overrides.items():
            key = (
                metric
                if metric in series
                else next(k for k in series if k.startswith(metric + "{"))
            )
            series[key] = values
        alerts: list[dict[str, Any]] = [
            {
                "eval_time": at,
                "alertname": name,
                "exp_alerts": [{"exp_labels": {}}] if name == fire else [],
            }
            for name in (
                "SubgraphMonitorConsumerLagGrowing",
                "SubgraphMonitorNoEpochCommitted",
                "SubgraphMonitorDeadLetters",
                "SubgraphMonitorTransactionsAborting",
                "SubgraphMonitorRestarting",
                "SubgraphMonitorNotReady",
                "SubgraphMonitorWatermarkStalled",
                "SubgraphMonitorLateEvents",
                "SubgraphMonitorShardStalled",
                "SubgraphMonitorShardsReloading",
            )
        ]
        return {
            "interval": "1m",
            "input_series": [
                {"series": k.replace("'", '"'), "values": v} for k, v in series.items()
            ],
            "alert_rule_test": alerts,
        }

    tests: dict[str, Any] = {
        "rule_files": [str(path)],
        "evaluation_interval": "1m",
        "tests": [
            case({}, None),
            case(
                {"subgraph_monitor_consumer_lag": "0+1000x60"}, "SubgraphMonitorConsumerLagGrowing"
            ),
            case(
                {"subgraph_monitor_last_committed_epoch_timestamp_seconds": "0+60x30 1800+0x30"},
                "SubgraphMonitorNoEpochCommitted",
            ),
            case(
                {"subgraph_monitor_dead_letters_total": "0+0x57 3 5 9"},
                "SubgraphMonitorDeadLetters",
            ),
            case(
                {"subgraph_monitor_transactions_aborted_total": "0+0x50 1+1x9"},
                "SubgraphMonitorTransactionsAborting",
            ),
            case(
                {"process_start_time_seconds": "0+0x40 2400 2400 2700 2700 3000+0x15"},
                "SubgraphMonitorRestarting",
            ),
            case({"subgraph_monitor_ready": "1+0x30 0+0x30"}, "SubgraphMonitorNotReady"),
            # The watermark stops at minute 30 while updates keep coming.
            case(
                {"subgraph_monitor_watermark_seconds": "0+60x30 1800+0x30"},
                "SubgraphMonitorWatermarkStalled",
            ),
            # ... not while the input is idle too, nor before any event with a ts arrived.
            case(
                {
                    "subgraph_monitor_watermark_seconds": "0+60x30 1800+0x30",
                    "subgraph_monitor_updates_consumed_total": "0+600x30 18000+0x30",
                },
                None,
            ),
            case({"subgraph_monitor_watermark_seconds": "_x60"}, None),
            # A watermark that advanced 10 minutes ago is not stalled for 15.
            case(
                {"subgraph_monitor_watermark_seconds": "0+0x40 2400+60x9 2940+0x10"},
                None,
            ),
            # 100 of 600 updates a minute late from minute 40 (also no DeadLetters for them) ...
            case({late: "0+0x40 100+100x19"}, "SubgraphMonitorLateEvents"),
            # ... but 10 of 600 is within the share.
            case({late: "0+10x60"}, None),
            # Shard 0 answers nothing from minute 45 on: past 300 s, and for 2 minutes.
            case(
                {"subgraph_monitor_shard_waiting_seconds": "0+0x45 0+60x14"},
                "SubgraphMonitorShardStalled",
            ),
            # ... a shard busy for a minute within every round is not stalled.
            case({"subgraph_monitor_shard_waiting_seconds": "0 60 0 60 0 60 0+0x53"}, None),
            case(
                {"subgraph_monitor_engine_reloads_total": "0+0x50 1 2 2+0x7"},
                "SubgraphMonitorShardsReloading",
            ),
            case({"subgraph_monitor_engine_reloads_total": "0+0x30 1+0x29"}, None),
        ],
    }
    # promtool compares labels exactly: fill each expected alert's labels from the rule.
    rules = {r["alert"]: r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]}
    by = {
        "SubgraphMonitorDeadLetters": {"reason": "json"},
        "SubgraphMonitorRestarting": {"job": "sgm-subgraph-monitor"},
        "SubgraphMonitorShardStalled": {"shard": "0"},
    }
    for t in tests["tests"]:
        for a in t["alert_rule_test"]:
            for exp in a["exp_alerts"]:
                exp["exp_labels"] = {
                    **rules[a["alertname"]]["labels"],
                    "namespace": "streams",
                    "pod": "sgm-subgraph-monitor-0",
                    **by.get(a["alertname"], {}),
                }
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(yaml.safe_dump(tests))
    proc = subprocess.run(
        [str(promtool_bin), "test", "rules", str(test_file)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def rendered_notes(helm_bin: Path, tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it. `helm install --dry-run` wants a cluster here and
    `helm template` skips NOTES.txt, so a copy of the chart renders it through `tpl`."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n'
    )
    out = helm(
        helm_bin,
        "template",
        "sgm",
        str(chart),
        "--namespace",
        "streams",
        "--show-only",
        "templates/zz-notes.yaml",
        *args,
    )
    return str(yaml.safe_load(out)["data"]["notes"])


def test_notes_tell_how_to_reach_metrics_and_health(helm_bin: Path, tmp_path: Path) -> None:
    notes = rendered_notes(helm_bin, tmp_path)
    assert "port-forward svc/sgm-subgraph-monitor 8080:8080" in notes
    for path in ("/readyz", "/healthz", "/metrics"):
        assert f"localhost:8080{path}" in notes
    assert "set serviceMonitor.enabled=true" in notes
    assert "reads edges from kafka:9092" in notes
    assert "Output format: records, one record per match delta" in notes
    on = rendered_notes(helm_bin, tmp_path / "on", "--values", str(ALL_ON))
    assert "through ServiceMonitor sgm-subgraph-monitor" in on
    assert "PrometheusRule sgm-subgraph-monitor" in on
    assert "Output format: batches" in on and "connectors.batches.read_message" in on
    assert "Apache Arrow IPC" in on and "format=arrow" in on
    jsonl = rendered_notes(helm_bin, tmp_path / "jsonl", "--set", "config.output_format=batches")
    assert "format=jsonl" in jsonl and "Arrow" not in jsonl


def test_replicas_above_one_work_out_of_the_box(render: Render, tmp_path: Path) -> None:
    """Every pod is a scale-out worker (control topic set), with its own transactional id and
    volume; the PodDisruptionBudget lets one pod go at a time whatever the replica count."""
    docs = render("--set", "replicas=3")
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    settings = rendered_settings(docs, tmp_path)
    assert settings.control_topic == "subgraph-monitor-control"
    env = {e["name"]: e for e in container(docs)["env"]}
    assert "$(SGM_INSTANCE_ID)" in env["SGM_TRANSACTIONAL_ID"]["value"]
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and "minAvailable" not in pdb
    custom = rendered_settings(
        render("--set", "config.group_id=fraud", "--set", "config.changelog_topic=fraud-graph"),
        tmp_path,
    )
    assert custom.control_topic == "fraud-control"
    assert custom.changelog_topic == "fraud-graph"


#: ``helm template`` as on a cluster where KubeRay's operator is installed.
WITH_KUBERAY = ("--api-versions", "ray.io/v1/RayCluster")


def test_distributed_is_refused_where_kuberay_is_not_installed(helm_bin: Path) -> None:
    err = helm(
        helm_bin, "template", "sgm", str(CHART), "--set", "config.engine=distributed", ok=False
    )
    assert "no RayCluster resource" in err and "kuberay-operator" in err, err
    err = helm(
        helm_bin,
        "template",
        "sgm",
        str(CHART),
        *WITH_KUBERAY,
        "--set",
        "config.engine=distributed",
        "--set",
        "replicas=2",
        ok=False,
    )
    assert "keep replicas: 1" in err, err


def test_distributed_renders_a_raycluster_that_the_driver_joins(
    render: Render, k8s_validate_bin: Path, tmp_path: Path
) -> None:
    docs = render(
        *WITH_KUBERAY,
        "--set",
        "config.engine=distributed",
        "--set",
        "ray.workers.replicas=3",
        "--set",
        "ray.workers.storage.storageClass=fast",
    )
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    proc = subprocess.run(
        [str(k8s_validate_bin), str(manifest)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok RayCluster/sgm-subgraph-monitor-ray" in proc.stdout
    ray = one(docs, "RayCluster")
    head = ray["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0", "no shards on the head"
    (group,) = ray["spec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    (worker,) = group["template"]["spec"]["containers"]
    assert worker["image"] == container(docs)["image"], "the shards run the service's image"
    (mount,) = worker["volumeMounts"]
    assert mount["mountPath"] == "/var/lib/subgraph-monitor"
    (volume,) = group["template"]["spec"]["volumes"]
    claim = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "fast" and claim["resources"]["requests"]["storage"]
    assert one(docs, "StatefulSet")["spec"]["replicas"] == 1
    settings = rendered_settings(docs, tmp_path)
    assert settings.engine == "distributed" and settings.control_topic is None
    # The driver joins as a Ray node of its own, at the head's GCS port, with its object store
    # in a memory volume at /dev/shm of that size and Ray's session in a larger /tmp.
    assert settings.ray_address == "sgm-subgraph-monitor-ray-head-svc.streams.svc:6379"
    assert settings.ray_join and settings.ray_object_store_memory == 1024 * 2**20
    assert {
        p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]
    }["gcs"] == 6379
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1088Mi"}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "1Gi"
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["dshm"] == "/dev/shm" and mounts["tmp"] == "/tmp"
    assert settings.state_dir == "/var/lib/subgraph-monitor/state"
    assert settings.shard_changelog
    # The embedded default renders no RayCluster, and keeps its control topic.
    embedded = render(*WITH_KUBERAY)
    assert not [d for d in embedded if d["kind"] == "RayCluster"]
    assert rendered_settings(embedded, tmp_path).control_topic == "subgraph-monitor-control"
    assert not rendered_settings(embedded, tmp_path).ray_join
    embedded_pod = one(embedded, "StatefulSet")["spec"]["template"]["spec"]
    assert "dshm" not in {v["name"] for v in embedded_pod["volumes"]}
