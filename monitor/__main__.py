"""``python -m monitor`` is ``subgraph-monitor``."""

from monitor.cli import main

main()
