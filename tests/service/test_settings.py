"""Settings: flags > environment > YAML file > defaults; lists and maps; secrets never shown."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.service.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]


def print_config(
    tmp: Path, yaml_text: str, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    config = tmp / "config.yaml"
    config.write_text(yaml_text)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SGM_")}
    return subprocess.run(
        [sys.executable, "-m", "monitor", "serve", "--config", str(config), "--print-config"],
        cwd=ROOT,
        capture_output=True,
        env={**clean, **env},
        timeout=60,
    )


def test_print_config_merges_sources_and_masks_secrets(tmp_path: Path) -> None:
    yaml_text = (
        "batch_size: 500\n"
        "input_topics: [transfers, devices]\n"
        "kafka:\n  security.protocol: SASL_SSL\n  sasl.password: hunter2\n"
    )
    done = print_config(
        tmp_path, yaml_text, {"SGM_BATCH_SIZE": "250", "SGM_TOPIC_RELATIONS": "transfers=transfer"}
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["batch_size"] == 250  # the environment wins over the file
    assert shown["input_topics"] == ["transfers", "devices"]
    assert shown["topic_relations"] == {"transfers": "transfer"}
    assert shown["kafka"] == {"security.protocol": "SASL_SSL", "sasl.password": "***"}
    assert b"hunter2" not in done.stdout + done.stderr


def test_comma_lists_and_secret_values_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SGM_INPUT_TOPICS", "a, b ,c")
    monkeypatch.setenv("SGM_KAFKA", json.dumps({"sasl.password": "pw", "client.rack": "r1"}))
    settings = load_settings()
    assert settings.input_topics == ["a", "b", "c"]
    assert settings.kafka_config() == {"sasl.password": "pw", "client.rack": "r1"}
    assert "pw" not in repr(settings) and "pw" not in json.dumps(settings.printable())


def test_bad_values_are_refused_with_the_setting_named(tmp_path: Path) -> None:
    done = print_config(tmp_path, "batch_size: 0\n", {})
    assert done.returncode == 2 and b"batch_size" in done.stderr
    done = print_config(tmp_path, "", {"SGM_TOPIC_RELATIONS": "nonsense"})
    assert done.returncode == 2 and b"topic=relation" in done.stderr
    done = print_config(tmp_path, "", {"SGM_OUTPUT_FORMAT": "columns"})
    assert done.returncode == 2 and b"output_format" in done.stderr
    assert b"'records', 'batches' or 'avro'" in done.stderr


def test_the_engines_scale_out_settings_are_checked_together() -> None:
    """One scale-out at a time, and a joining node needs the head's own address."""
    with pytest.raises(ValueError, match="set one of them"):
        Settings(engine="distributed", control_topic="c")
    with pytest.raises(ValueError, match=r"ray_join.*host:6379"):
        Settings(engine="distributed", ray_join=True)
    with pytest.raises(ValueError, match=r"ray_join.*host:6379"):
        Settings(engine="distributed", ray_join=True, ray_address="ray://head:10001")
    joined = Settings(engine="distributed", ray_join=True, ray_address="head:6379")
    assert joined.ray_join and joined.ray_address == "head:6379"


def test_the_output_format_defaults_to_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGM_OUTPUT_FORMAT", raising=False)
    assert load_settings().output_format == "records"
    monkeypatch.setenv("SGM_OUTPUT_FORMAT", "batches")
    assert load_settings().output_format == "batches"


def test_kafka_secrets_dir_is_merged_and_masked(tmp_path: Path) -> None:
    secrets = tmp_path / "kafka"
    secrets.mkdir()
    (secrets / "sasl.username").write_text("alice\n")
    (secrets / "sasl.password").write_text("s3cret\n")
    (secrets / "..data").mkdir()  # what a mounted Secret carries beside its keys
    settings = Settings(
        kafka={"sasl.mechanism": "PLAIN", "sasl.username": "bob"}, kafka_secrets_dir=str(secrets)
    )
    assert settings.kafka_config() == {
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "s3cret",
    }
    printed = json.dumps(settings.printable())
    assert "s3cret" not in printed and "alice" not in printed
    assert settings.printable()["kafka"]["sasl.password"] == "***"


def test_missing_kafka_secrets_dir_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kafka_secrets_dir"):
        Settings(kafka_secrets_dir=str(tmp_path / "absent"))


def test_event_time_settings_from_a_file_the_environment_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("retention:\n  transfer: 24h\n  logins: none\n  x: 1500\n")
    assert load_settings(str(config)).retention == {
        "transfer": 86_400_000,
        "logins": math.inf,
        "x": 1500,
    }
    monkeypatch.setenv("SGM_RETENTION", "transfer=1h")
    monkeypatch.setenv("SGM_ALLOWED_LATENESS", "10s")
    settings = load_settings(str(config))
    assert settings.retention == {"transfer": 3_600_000} and settings.allowed_lateness == 10_000
    assert load_settings(allowed_lateness="250").allowed_lateness == 250
    with pytest.raises(ValueError, match="transfer=24h"):
        load_settings(retention="transfer")


def test_the_watchdog_never_fires_before_the_transaction_time_out() -> None:
    assert Settings().watchdog_s() == 90.0
    assert Settings(watchdog_seconds=20.0, transaction_timeout_ms=5_000).watchdog_s() == 20.0
    assert Settings(watchdog_seconds=20.0, transaction_timeout_ms=60_000).watchdog_s() == 70.0
    # (a transaction.timeout.ms in SGM_KAFKA wins over the setting, and so here too)
    lifted = Settings(watchdog_seconds=20.0, kafka={"transaction.timeout.ms": "120000"})
    assert lifted.watchdog_s() == 130.0
