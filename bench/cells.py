"""Table cells: figures formatted for the report, with the marks for bounds and partial runs."""

from __future__ import annotations

from collections.abc import Sequence

from bench.results import Rates, RecomputeRate, Record

MIB = 1 << 20


def rate(x: float | None) -> str:
    """A rate with 3 significant figures and a unit prefix: ``1.23M``, ``45.6k``, ``789``."""
    if x is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:.3g}"


def ms(x: float) -> str:
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def ratio(ours: float | None, other: float | None) -> str:
    if ours is None or not other:
        return "-"
    value = ours / other
    return f"{value:.3g}x" if value < 1000 else f"{value:,.0f}x"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def status_note(record: Record | None) -> str:
    """Why a configuration has no figures, or ``[timeout]`` when its figures are partial."""
    if record is None:
        return "not run"
    status = record.get("status", "")
    if status == "skipped":
        return f"skipped: {record.get('error', '')}"
    if status == "ok":
        return ""
    return f"{status}: {record.get('error', '')}".strip()


# -- sections ---------------------------------------------------------------------------------


def stopped_bound(record: Record | None, batch: int) -> float | None:
    """For a run stopped before its first epoch ended: the most updates/s it can have had."""
    if record is None or record.get("status") != "timeout" or record.get("updates"):
        return None
    return batch / float(record.get("limit") or record.get("wall_seconds") or 1.0)


def updates_cell(r: Rates | None, record: Record | None, batch: int) -> str:
    if r is not None:
        return rate(r.updates_per_s)
    bound = stopped_bound(record, batch)
    return f"< {rate(bound)}" if bound is not None else "-"


def speedup(
    ours: Rates | None,
    binary: Rates | None,
    ours_r: Record | None,
    binary_r: Record | None,
    batch: int,
) -> str:
    if ours is not None and binary is None and (bound := stopped_bound(binary_r, batch)):
        return "> " + ratio(ours.updates_per_s, bound)
    if binary is not None and ours is None and (bound := stopped_bound(ours_r, batch)):
        return "< " + ratio(bound, binary.updates_per_s)
    return ratio(ours.updates_per_s if ours else None, binary.updates_per_s if binary else None)


def streamed(ours: Rates | None, binary: Rates | None) -> str:
    a = f"{ours.updates:,}" if ours else "-"
    b = f"{binary.updates:,}" if binary else "-"
    return f"{a} / {b}"


def recompute_cell(again: RecomputeRate | None) -> str:
    if again is None:
        return "-"
    text = rate(again.updates_per_s)
    if again.lower_bound:
        return f"< {text}"
    return f"{text}*" if again.extrapolated else text


def epoch_cell(again: RecomputeRate | None) -> str:
    if again is None:
        return "-"
    text = f"{again.epoch_seconds:.3g}"
    return f"> {text}" if again.lower_bound else text


def latency(r: Rates | None) -> str:
    return f"{ms(r.p50_ms)} / {ms(r.p99_ms)}" if r else "-"


def rss(*records: Record | None) -> str:
    return " / ".join(
        f"{r['max_rss_bytes'] / MIB:,.0f}" if r and r.get("max_rss_bytes") else "-" for r in records
    )


def bytes_per_edge(record: Record | None) -> str:
    if not record or not record.get("stored_edges"):
        return "-"
    edges = record["stored_edges"]
    return f"{record['index_bytes'] / edges:.1f} / {record['compacted_bytes'] / edges:.1f}"


def recompute_speedup(ours: Rates | None, again: RecomputeRate | None) -> str:
    """Our updates/s over the recompute baseline's; ``>`` when the baseline's is a bound."""
    if ours is None or again is None:
        return "-"
    mark = "> " if again.lower_bound else ""
    return mark + ratio(ours.updates_per_s, again.updates_per_s)
