"""Structured logs (one JSON object per line, extras as keys) and redaction of secrets."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr

from core.errors import ConfigError
from monitor.service.logs import MASK, configure_logging, redact


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Where the configured handler writes; the root logger is restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    yield out
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_standard_and_extra_fields(stream: io.StringIO) -> None:
    configure_logging("INFO", stream=stream)
    log = logging.getLogger("monitor.service.serve")
    before = datetime.now(UTC)
    log.info(
        "epoch %d committed",
        42,
        extra={"topic": "edges", "partition": 3, "offset": np.int64(1017), "epoch": 42},
    )
    log.debug("not shown at INFO")
    (record,) = lines(stream)
    assert list(record)[:4] == ["timestamp", "level", "logger", "message"]
    assert record["level"] == "INFO"
    assert record["logger"] == "monitor.service.serve"
    assert record["message"] == "epoch 42 committed"
    assert (record["topic"], record["partition"], record["offset"], record["epoch"]) == (
        "edges",
        3,
        1017,
        42,
    )
    assert record["timestamp"].endswith("Z")
    moment = datetime.fromisoformat(record["timestamp"])
    assert moment.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= moment <= datetime.now(UTC)


def test_exceptions_are_one_line_with_the_traceback(stream: io.StringIO) -> None:
    configure_logging("DEBUG", stream=stream)
    try:
        raise RuntimeError("broker gone")
    except RuntimeError:
        logging.getLogger("monitor").exception("commit failed", extra={"epoch": 7})
    assert len(stream.getvalue().splitlines()) == 1
    (record,) = lines(stream)
    assert record["level"] == "ERROR"
    assert record["epoch"] == 7
    assert "RuntimeError: broker gone" in record["exc_info"]


def test_configuring_twice_replaces_the_handler(stream: io.StringIO) -> None:
    configure_logging("INFO", stream=io.StringIO())
    configure_logging("warning", stream=stream)
    logging.getLogger("monitor").info("below the level")
    logging.getLogger("monitor").warning("once")
    assert [r["message"] for r in lines(stream)] == ["once"]


def test_text_format_for_a_terminal(stream: io.StringIO) -> None:
    configure_logging("INFO", json=False, stream=stream)
    logging.getLogger("monitor").info("assigned", extra={"topic": "edges", "partition": 0})
    line = stream.getvalue().strip()
    assert line.endswith(" INFO monitor: assigned topic=edges partition=0")


@pytest.mark.parametrize("json", [True, False])
def test_private_attributes_a_library_adds_to_records_are_left_out(
    stream: io.StringIO, json: bool
) -> None:
    """Ray, once imported, adds ``_ray_timestamp_ns`` to every log record of the process (and
    then refuses an ``extra`` of that name: the test's own attribute has another)."""
    configure_logging("INFO", json=json, stream=stream)
    extra = {"topic": "edges", "_stamp_ns": 1796464117961492549}
    logging.getLogger("monitor").info("assigned", extra=extra)
    text = stream.getvalue()
    assert "topic" in text and "edges" in text
    assert "_stamp_ns" not in text and "1796464117961492549" not in text
    assert "_ray_timestamp_ns" not in text


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ConfigError, match="'LOUD' is not one of DEBUG, INFO"):
        configure_logging("LOUD")


def test_redact_masks_nested_secrets_and_keeps_the_rest() -> None:
    settings = {
        "bootstrap_servers": "broker:9092",
        "group_id": "sgm",
        "batch_size": 10_000,
        "state_dir": None,
        "kafka": {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "monitor",
            "SASL.PASSWORD": "hunter2",
            "ssl.key.password": "k3y",
            "ssl.key.pem": "-----BEGIN PRIVATE KEY-----",
            "ssl.key.location": "/etc/tls/client.key",
            "ssl.keystore.location": "/etc/tls/client.p12",
            "ssl.ca.location": "/etc/tls/ca.pem",
            "sasl.oauthbearer.client.secret": "s3cret",
            "sasl.oauthbearer.config": "principal=sgm clientSecret=abc",
            "key.serializer": "string",
            "schema.registry.url": "https://reader:pa55@registry:8081/",
            "nested": {"Api_Key": "abcd", "access_token": "tok", "ssl.keystore.password": None},
        },
        "sinks": [{"name": "out", "password": "x"}],
        "secret_value": SecretStr("hidden"),
        "innocent": SecretStr("hidden too"),
    }
    original = json.dumps(settings, default=str)
    clean = redact(settings)
    kafka = clean["kafka"]
    assert kafka["SASL.PASSWORD"] == MASK
    assert kafka["ssl.key.password"] == MASK
    assert kafka["ssl.key.pem"] == MASK
    assert kafka["sasl.oauthbearer.client.secret"] == MASK
    assert kafka["sasl.oauthbearer.config"] == MASK
    assert kafka["nested"] == {"Api_Key": MASK, "access_token": MASK, "ssl.keystore.password": None}
    assert kafka["schema.registry.url"] == f"https://reader:{MASK}@registry:8081/"
    assert clean["sinks"] == [{"name": "out", "password": MASK}]
    assert clean["secret_value"] == MASK
    assert clean["innocent"] == MASK
    for kept in (
        "security.protocol",
        "sasl.mechanism",
        "sasl.username",
        "ssl.key.location",
        "ssl.keystore.location",
        "ssl.ca.location",
        "key.serializer",
    ):
        assert kafka[kept] == settings["kafka"][kept], kept  # type: ignore[index]
    for kept in ("bootstrap_servers", "group_id", "batch_size", "state_dir"):
        assert clean[kept] == settings[kept], kept
    assert json.dumps(settings, default=str) == original, "redact must not change its input"
    assert "hunter2" not in json.dumps(clean, default=str)
