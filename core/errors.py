"""Every error the product raises on purpose derives from :class:`MonitorError`.

One subclass per phase of the pipeline (query text, planning, input records, stored state,
configuration). Messages say what was wrong, where, and what is allowed; errors about stored
state also say what the operator should do.
"""

from __future__ import annotations


class MonitorError(Exception):
    """Root of all errors raised by subgraph-monitor."""


def arity_message(relation: str, arity: int, got: int, since: str = "") -> str:
    """Why a tuple of ``got`` ids is refused for ``relation`` (``since``: where its arity was
    first seen, as `` (since path:line)``)."""
    ids = "id" if arity == 1 else "ids"
    return f"relation {relation!r} has {arity} {ids} per tuple{since}, got {got}"


class QueryError(MonitorError):
    """A query text that cannot be parsed or is not a valid query.

    ``line`` and ``column`` are 1-based positions in the query text; ``name`` is the offending
    identifier (variable, relation or query name) when there is one.
    """

    def __init__(
        self, message: str, *, line: int = 0, column: int = 0, name: str | None = None
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.name = name
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(f"{where}{message}")


class PlanError(MonitorError):
    """A valid query for which no plan can be built (an unsupported shape)."""


class InputError(MonitorError):
    """An input record that cannot be decoded into an update.

    ``position`` says where the record came from (``file:line`` or ``topic[partition]@offset``).
    """

    def __init__(self, message: str, *, position: str = "") -> None:
        self.message = message
        self.position = position
        super().__init__(f"{position}: {message}" if position else message)


class StateError(MonitorError):
    """Stored state that is missing, incompatible, corrupted or in use."""


class ConfigError(MonitorError):
    """A setting with a value that is not allowed."""


class WorkerLost(MonitorError):
    """A process holding part of the state died (a shard's actor, its node): what it held since
    the last committed epoch is gone, and the state is loaded again from there."""
