"""Which client settings are secrets, and settings read from a directory of files (a mounted
Kubernetes Secret): the librdkafka pass-through (``SGM_KAFKA``, ``SGM_KAFKA_SECRETS_DIR``) and the
schema registry client's (``SGM_SCHEMA_REGISTRY``, ``SGM_SCHEMA_REGISTRY_SECRETS_DIR``)."""

from __future__ import annotations

from pathlib import Path

#: librdkafka settings whose values are secrets.
SECRET_KAFKA_KEYS = (
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "sasl.oauthbearer.client.secret",
    "ssl.key.pem",
    "ssl_key",
    # the schema registry client's (SGM_SCHEMA_REGISTRY)
    "basic.auth.user.info",
    "bearer.auth.token",
)


def secrets_dir(directory: str | None, setting: str) -> dict[str, str]:
    """The settings in a directory, one per file (file name = setting, content = value); hidden
    files (a mounted Secret's ``..data`` links) are skipped, a trailing newline is dropped."""
    if directory is None:
        return {}
    path = Path(directory)
    try:
        files = sorted(f for f in path.iterdir() if not f.name.startswith("."))
        return {f.name: f.read_text().rstrip("\r\n") for f in files if f.is_file()}
    except OSError as exc:
        raise ValueError(f"{setting} {path}: {exc.strerror or exc}") from exc


def is_secret(key: str) -> bool:
    """Whether a client setting's value is a secret (masked wherever settings are shown)."""
    lowered = key.lower()
    return lowered in SECRET_KAFKA_KEYS or any(w in lowered for w in ("password", "secret"))
