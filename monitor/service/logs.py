"""Structured logs on stderr, and :func:`redact` so that secrets never reach them.

With ``json=True`` every record is one JSON object on one line::

    {"timestamp": "2024-05-01T12:00:00.123Z", "level": "INFO", "logger": "monitor.service",
     "message": "epoch committed", "epoch": 42, "topic": "edges", "partition": 3, "offset": 1017}

Fields passed with ``extra=`` (``topic``, ``partition``, ``offset``, ``epoch``, ...) become keys
of the object; numpy scalars and arrays serialize as numbers and lists. With ``json=False`` the
same fields follow the message as ``key=value``, for a developer's terminal.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson
from pydantic import SecretBytes, SecretStr
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.orjson import OrjsonFormatter

from core.errors import ConfigError

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MASK = "***"

#: Words that make a settings key secret wherever they appear in it.
_SECRET_WORDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "credential",
    "jaas",
    "oauthbearer.config",
)
#: A key that names key material (``ssl.key.pem``, ``api_key``, ``private-key``) rather than
#: where it lives or how keys are serialized.
_KEY_WORD = re.compile(r"(^|[._\-\s])(\w*key)([._\-\s]|$)")
_NOT_KEY_MATERIAL = ("location", "path", "file", "dir", "serializer", "deserializer", "field")
#: ``scheme://user:password@host`` inside any string value.
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.\-]*://[^\s:/@]+:)[^\s@/]+@")


def configure_logging(
    level: str = "INFO", json: bool = True, *, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record of the process at ``level`` and above to ``stream`` (stderr).

    Calling it again replaces the handler it installed before; handlers installed by others
    (pytest's, for one) are left alone. Returns the handler.
    """
    name = level.upper()
    if name not in LEVELS:
        raise ConfigError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    handler = _Handler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(name)
    logging.captureWarnings(True)
    return handler


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``settings`` with the value of every secret-looking key replaced by ``"***"``.

    Secret keys contain (in any case) password, secret, token, credential, jaas or
    oauthbearer.config (its text carries the client secret), or name key
    material (``ssl.key.pem``, ``api_key``; not ``ssl.key.location`` nor ``key.serializer``).
    Nested mappings and lists are redacted too; pydantic ``SecretStr`` values are masked
    under any key, and so are passwords in ``scheme://user:password@host`` strings. A secret
    key whose value is ``None`` stays ``None``, so that "not set" remains visible.
    """
    return {key: _redact_value(value, _is_secret(str(key))) for key, value in settings.items()}


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    if any(word in lowered for word in _SECRET_WORDS):
        return True
    tail = re.split(r"[._\-\s]+", lowered)[-1]
    return _KEY_WORD.search(lowered) is not None and tail not in _NOT_KEY_MATERIAL


def _redact_value(value: Any, secret: bool) -> Any:
    if value is None:
        return None
    if secret or isinstance(value, SecretStr | SecretBytes):
        return MASK
    if isinstance(value, Mapping):
        return redact(value)
    if isinstance(value, list | tuple):
        return type(value)(_redact_value(item, False) for item in value)
    if isinstance(value, str):
        return _URL_PASSWORD.sub(rf"\g<head>{MASK}@", value)
    return value


class _Handler(logging.StreamHandler[TextIO]):
    """The handler :func:`configure_logging` installs (and replaces on a second call)."""


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(OrjsonFormatter):
    """One JSON object per record: timestamp, level, logger, message, then the extras."""

    def __init__(self) -> None:
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
        )

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["timestamp"] = _timestamp(record)
        super().add_fields(log_data, record, message_dict)
        for key in [key for key in log_data if key.startswith("_")]:
            del log_data[key]  # (a library's own attribute on every record: Ray adds one)

    def jsonify_log_record(self, log_data: Any) -> str:
        options = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
        return orjson.dumps(log_data, default=self.json_default, option=options).decode()


class TextFormatter(logging.Formatter):
    """``timestamp LEVEL logger: message key=value ...`` for a terminal (private attributes,
    which libraries add to every record, left out)."""

    _standard = frozenset(RESERVED_ATTRS) | {"taskName"}

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(
            f"{key}={value}"
            for key, value in record.__dict__.items()
            if key not in self._standard and not key.startswith("_")
        )
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if extras:
            line = f"{line} {extras}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line
