"""``python -m monitor`` is ``subgraph-monitor``."""

from monitor.cli.program import entry

entry()
