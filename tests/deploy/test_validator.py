"""The tools the chart's tests rely on catch what they are meant to catch.

``k8s-validate`` (``tools/k8s-validate``) is checked on a valid StatefulSet + Services + PDB +
ServiceMonitor + PrometheusRule set, then on one broken copy per rule, each of which must fail
with a message naming the problem; ``promtool check rules`` must reject bad PromQL. Without this
a validator that accepts everything would make the chart tests pass vacuously.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

Doc = dict[str, Any]
LABELS = {"app.kubernetes.io/name": "subgraph-monitor", "app.kubernetes.io/instance": "sgm"}


def valid_set() -> list[Doc]:
    container = {
        "name": "monitor",
        "image": "ghcr.io/example/subgraph-monitor:0.1.0",
        "ports": [{"name": "metrics", "containerPort": 9108, "protocol": "TCP"}],
        "env": [{"name": "SGM_STATE_DIR", "value": "/state"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 9108}},
        "volumeMounts": [
            {"name": "state", "mountPath": "/state"},
            {"name": "config", "mountPath": "/etc/sgm", "readOnly": True},
        ],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "sgm-subgraph-monitor", "labels": LABELS},
            "spec": {
                "replicas": 1,
                "serviceName": "sgm-subgraph-monitor-headless",
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": {**LABELS, "extra": "yes"}},
                    "spec": {
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": "sgm-config"}}],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "state"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "10Gi"}},
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "sgm-subgraph-monitor", "labels": LABELS},
            "spec": {
                "selector": LABELS,
                "ports": [{"name": "metrics", "port": 9108, "targetPort": "metrics"}],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "sgm-subgraph-monitor"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": LABELS}},
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "sgm-subgraph-monitor", "labels": LABELS},
            "spec": {
                "selector": {"matchLabels": LABELS},
                "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
            },
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {"name": "sgm-subgraph-monitor", "labels": LABELS},
            "spec": {
                "groups": [
                    {
                        "name": "subgraph-monitor",
                        "rules": [
                            {
                                "alert": "SubgraphMonitorDown",
                                "expr": 'up{job="sgm-subgraph-monitor"} == 0',
                                "for": "5m",
                                "labels": {"severity": "critical"},
                                "annotations": {"summary": "subgraph-monitor is down"},
                            },
                            {"record": "sgm:lag:max", "expr": "max(sgm_consumer_lag)"},
                        ],
                    }
                ]
            },
        },
    ]


def run_validator(binary: Path, tmp_path: Path, docs: list[Doc] | str) -> tuple[int, str]:
    text = docs if isinstance(docs, str) else yaml.safe_dump_all(docs, sort_keys=False)
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(text)
    result = subprocess.run(
        [str(binary), str(manifest)], capture_output=True, text=True, check=False
    )
    return result.returncode, result.stdout + result.stderr


def test_a_valid_set_passes(k8s_validate_bin: Path, tmp_path: Path) -> None:
    code, out = run_validator(k8s_validate_bin, tmp_path, valid_set())
    assert code == 0, out
    assert out.splitlines() == [
        "ok StatefulSet/sgm-subgraph-monitor",
        "ok Service/sgm-subgraph-monitor",
        "ok PodDisruptionBudget/sgm-subgraph-monitor",
        "ok ServiceMonitor/sgm-subgraph-monitor",
        "ok PrometheusRule/sgm-subgraph-monitor",
    ]


def test_helm_style_stream_on_stdin(k8s_validate_bin: Path) -> None:
    """`helm template` output: a leading `---`, `# Source:` comments, empty documents."""
    docs = valid_set()
    text = "".join(
        f"---\n# Source: subgraph-monitor/templates/{i}.yaml\n{yaml.safe_dump(doc)}"
        for i, doc in enumerate(docs)
    )
    text += "---\n# Source: subgraph-monitor/templates/disabled.yaml\n---\n"
    result = subprocess.run(
        [str(k8s_validate_bin), "-"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(result.stdout.splitlines()) == len(docs)


def test_usage_error_exits_2(k8s_validate_bin: Path, tmp_path: Path) -> None:
    no_args = subprocess.run([str(k8s_validate_bin)], capture_output=True)
    assert no_args.returncode == 2
    missing = subprocess.run([str(k8s_validate_bin), str(tmp_path / "no")], capture_output=True)
    assert missing.returncode == 2


def _sts(docs: list[Doc]) -> Doc:
    spec: Doc = docs[0]["spec"]
    return spec


def _ctr(docs: list[Doc]) -> Doc:
    container: Doc = _sts(docs)["template"]["spec"]["containers"][0]
    return container


def _unknown_spec_field(docs: list[Doc]) -> None:
    _sts(docs)["replica"] = 2


def _unknown_nested_field(docs: list[Doc]) -> None:
    _ctr(docs)["imagePullPolicyy"] = "Always"


def _wrong_case_field(docs: list[Doc]) -> None:
    _ctr(docs)["Image"] = _ctr(docs).pop("image")


def _wrong_type(docs: list[Doc]) -> None:
    _sts(docs)["replicas"] = "two"


def _unknown_kind(docs: list[Doc]) -> None:
    docs[0]["kind"] = "StatefulSets"


def _unknown_api_version(docs: list[Doc]) -> None:
    docs[0]["apiVersion"] = "apps/v1beta9"


def _selector_mismatch(docs: list[Doc]) -> None:
    _sts(docs)["template"]["metadata"]["labels"] = {"app.kubernetes.io/name": "other"}


def _empty_selector(docs: list[Doc]) -> None:
    _sts(docs)["selector"] = {}


def _port_name_too_long(docs: list[Doc]) -> None:
    _ctr(docs)["ports"][0]["name"] = "prometheus-metrics"
    _ctr(docs)["livenessProbe"]["httpGet"]["port"] = 9108


def _probe_on_missing_port(docs: list[Doc]) -> None:
    _ctr(docs)["readinessProbe"]["httpGet"]["port"] = "http"


def _undeclared_volume(docs: list[Doc]) -> None:
    _ctr(docs)["volumeMounts"].append({"name": "scratch", "mountPath": "/tmp"})


def _missing_image(docs: list[Doc]) -> None:
    del _ctr(docs)["image"]


def _bad_env_name(docs: list[Doc]) -> None:
    _ctr(docs)["env"][0]["name"] = "1SGM STATE"


def _pdb_both(docs: list[Doc]) -> None:
    docs[2]["spec"]["minAvailable"] = 1


def _pdb_neither(docs: list[Doc]) -> None:
    del docs[2]["spec"]["maxUnavailable"]


def _rule_unknown_field(docs: list[Doc]) -> None:
    docs[4]["spec"]["groups"][0]["rules"][0]["severity"] = "critical"


def _rule_bad_duration(docs: list[Doc]) -> None:
    docs[4]["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"


def _service_without_selector(docs: list[Doc]) -> None:
    del docs[1]["spec"]["selector"]


def _service_bad_target_port(docs: list[Doc]) -> None:
    docs[1]["spec"]["ports"][0]["targetPort"] = "metrics_port"


def _bad_name(docs: list[Doc]) -> None:
    docs[1]["metadata"]["name"] = "SGM.Monitor"


def _bad_label(docs: list[Doc]) -> None:
    docs[3]["metadata"]["labels"] = {"team": "streams and graphs"}


def _servicemonitor_unknown_field(docs: list[Doc]) -> None:
    docs[3]["spec"]["endpoints"][0]["scrapeInterval"] = "30s"


def _duplicate_object(docs: list[Doc]) -> None:
    docs.append(copy.deepcopy(docs[1]))


BROKEN: dict[str, tuple[Callable[[list[Doc]], None], str, str]] = {
    # id: (mutation, the failing document's kind/name, a fragment of the message)
    "unknown spec field": (_unknown_spec_field, "StatefulSet/", 'unknown field "spec.replica"'),
    "unknown nested field": (
        _unknown_nested_field,
        "StatefulSet/",
        'unknown field "spec.template.spec.containers[0].imagePullPolicyy"',
    ),
    "field in the wrong case": (_wrong_case_field, "StatefulSet/", 'unknown field "spec.templa'),
    "wrong type": (_wrong_type, "StatefulSet/", "spec.replicas of type int32"),
    "unknown kind": (_unknown_kind, "StatefulSets/", "unknown apiVersion/kind apps/v1 Stateful"),
    "unknown apiVersion": (_unknown_api_version, "StatefulSet/", "unknown apiVersion/kind"),
    "selector not matching template": (
        _selector_mismatch,
        "StatefulSet/",
        "does not match template labels",
    ),
    "empty selector": (_empty_selector, "StatefulSet/", "spec.selector: required"),
    "port name too long": (
        _port_name_too_long,
        "StatefulSet/",
        "containers[0].ports[0].name: must be no more than 15 characters",
    ),
    "probe on a missing named port": (
        _probe_on_missing_port,
        "StatefulSet/",
        'readinessProbe.httpGet.port: named port "http" is not a port of this container',
    ),
    "volumeMount of an undeclared volume": (
        _undeclared_volume,
        "StatefulSet/",
        'volumeMounts[2].name: volume "scratch" is not declared',
    ),
    "container without image": (_missing_image, "StatefulSet/", "containers[0].image: required"),
    "invalid env var name": (_bad_env_name, "StatefulSet/", "containers[0].env[0].name"),
    "PDB with minAvailable and maxUnavailable": (
        _pdb_both,
        "PodDisruptionBudget/",
        "exactly one of minAvailable and maxUnavailable",
    ),
    "PDB with neither": (_pdb_neither, "PodDisruptionBudget/", "exactly one of minAvailable"),
    "unknown field in a PrometheusRule rule": (
        _rule_unknown_field,
        "PrometheusRule/",
        'unknown field "spec.groups[0].rules[0].severity"',
    ),
    "bad rule duration": (_rule_bad_duration, "PrometheusRule/", "rules[0].for: invalid duration"),
    "unknown field in a ServiceMonitor": (
        _servicemonitor_unknown_field,
        "ServiceMonitor/",
        'unknown field "spec.endpoints[0].scrapeInterval"',
    ),
    "service without selector": (_service_without_selector, "Service/", "spec.selector: required"),
    "service with an invalid named targetPort": (
        _service_bad_target_port,
        "Service/",
        "spec.ports[0].targetPort",
    ),
    "invalid service name": (_bad_name, "Service/SGM.Monitor", "metadata.name"),
    "invalid label value": (_bad_label, "ServiceMonitor/", "metadata.labels[team]"),
    "duplicate object": (_duplicate_object, "document 6 (Service/", "duplicate object"),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_a_broken_document_fails_naming_the_problem(
    k8s_validate_bin: Path, tmp_path: Path, case: str
) -> None:
    mutate, where, message = BROKEN[case]
    docs = valid_set()
    mutate(docs)
    code, out = run_validator(k8s_validate_bin, tmp_path, docs)
    assert code == 1, out
    errors = [line for line in out.splitlines() if not line.startswith("ok ")]
    assert errors, out
    assert all(line.startswith(f"{tmp_path / 'manifest.yaml'}: document ") for line in errors)
    assert any(where in line and message in line for line in errors), out
    # Only the broken document fails: the others are still reported ok.
    assert sum(line.startswith("ok ") for line in out.splitlines()) == len(docs) - 1, out


def test_duplicate_keys_are_rejected(k8s_validate_bin: Path, tmp_path: Path) -> None:
    text = yaml.safe_dump(valid_set()[1], sort_keys=False)
    text = text.replace("kind: Service\n", "kind: Service\nkind: Service\n")
    code, out = run_validator(k8s_validate_bin, tmp_path, text)
    assert code == 1
    assert 'key "kind" already set in map' in out, out


GOOD_RULES = """\
groups:
  - name: sgm
    rules:
      - alert: SubgraphMonitorDown
        expr: up{job="sgm"} == 0
        for: 5m
      - record: sgm:lag:max
        expr: max(sgm_consumer_lag)
"""


def test_promtool_accepts_good_rules(promtool_bin: Path, tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD_RULES)
    result = subprocess.run(
        [str(promtool_bin), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rules found" in result.stdout


def test_promtool_rejects_bad_promql(promtool_bin: Path, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD_RULES.replace("max(sgm_consumer_lag)", "max(sgm_consumer_lag"))
    result = subprocess.run(
        [str(promtool_bin), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "could not parse expression" in result.stdout + result.stderr


def test_prometheus_binary_runs(prometheus_bin: Path) -> None:
    result = subprocess.run([str(prometheus_bin), "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "prometheus" in (result.stdout + result.stderr).lower()
