"""Event time: the ``ts`` field of an event, and durations.

A time is read into one type, milliseconds since the Unix epoch as a number: an integer (or a
number) of milliseconds, or an ISO-8601 string with a zone offset (``2026-12-02T10:15:00Z``,
``2026-12-02T10:15:00.250+01:00``). A string without an offset is refused: its instant would
depend on the machine's zone. Durations are written ``500ms``, ``30s``, ``10m``, ``24h``,
``7d`` (a number, a fraction allowed, and a unit), and are milliseconds too, so a predicate
``t2.ts <= t1.ts + 10m`` compares numbers.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from core.errors import InputError

#: The field that holds an event's time.
TIME_FIELD = "ts"
#: Milliseconds per duration unit.
UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
#: Times beyond +-10,000 years of 1970 are refused (a mistyped unit, seconds for ms, is not).
_LIMIT_MS = 10_000 * 365.25 * 86_400_000


def parse_duration(text: str) -> float:
    """The milliseconds of a duration like ``10m``; :class:`ValueError` if it is not one."""
    match = DURATION.fullmatch(text)
    if match is None:
        raise ValueError(
            f"'{text}' is not a duration; write a number and a unit, one of "
            f"{', '.join(UNITS)}, like 500ms, 30s, 10m, 24h or 7d"
        )
    return float(match.group(1)) * UNITS[match.group(2)]


def format_duration(ms: float) -> str:
    """The shortest exact spelling of ``ms`` milliseconds as a duration (``86400000``: ``1d``)."""
    for unit, size in sorted(UNITS.items(), key=lambda item: -item[1]):
        if ms % size == 0:
            return f"{int(ms // size)}{unit}"
    return f"{ms:g}ms"


def parse_time(value: object, name: str = TIME_FIELD) -> float:
    """Milliseconds since the epoch of a ``ts`` value (a number of milliseconds or an ISO-8601
    string with a zone offset); :class:`InputError` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InputError(
            f"field {name!r} must be milliseconds since the epoch or an ISO-8601 string with a "
            f"zone offset, got {type(value).__name__}"
        )
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InputError(
                f"field {name!r} {value[:40]!r} is not an ISO-8601 time (like "
                f"2026-12-02T10:15:00Z) nor milliseconds since the epoch"
            ) from None
        if moment.tzinfo is None:
            raise InputError(
                f"field {name!r} {value[:40]!r} has no zone offset; add one (Z or +01:00) so the "
                f"time is the same on every machine"
            )
        ms = moment.timestamp() * 1000.0
    else:
        ms = float(value)
    if not math.isfinite(ms) or abs(ms) > _LIMIT_MS:
        raise InputError(f"field {name!r} {value!r} is not a time within 10,000 years of 1970")
    return ms


#: A retention that keeps events until they are deleted.
FOREVER = math.inf


def parse_retention(text: str) -> dict[str, float]:
    """Retentions per relation, ``transfer=24h,logins=1h`` (``none`` or ``forever``: events
    live until deleted), as milliseconds; :class:`ValueError` naming the bad item."""
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        relation, sep, duration = (p.strip() for p in item.partition("="))
        if not sep or not relation or not duration:
            raise ValueError(f"expected relation=duration pairs like transfer=24h, got {item!r}")
        if duration in ("none", "forever"):
            out[relation] = FOREVER
        else:
            out[relation] = parse_duration(duration)
    return out


def format_time(ms: float) -> str:
    """``ms`` since the epoch as ISO-8601 in UTC (``2026-12-02T10:15:00Z``, milliseconds when
    there are any)."""
    moment = datetime.fromtimestamp(ms / 1000.0, tz=UTC)
    text = moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")
    return text.replace("+00:00", "Z")
