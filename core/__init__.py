"""The vocabulary every layer shares: decoded updates and their batches, and the errors.

Both sides of the product import it, and it imports neither: ``connectors`` (sources and sinks)
decode records into :class:`~core.records.UpdateBatch` es, ``monitor.index`` applies them, and
every phase raises a subclass of :class:`~core.errors.MonitorError`.
"""
