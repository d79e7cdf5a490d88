"""Sources and sinks: edge files and stdin, JSON Lines output; record formats.

Nothing here knows the engine: sources yield :class:`core.records.UpdateBatch` es of decoded
updates, sinks take match deltas as columns of external ids.
"""

from connectors.files import EdgeFileSource
from connectors.formats import decode_json_record, decode_text_line
from connectors.sinks import DeltaSink, JsonLinesSink, ListSink

__all__ = [
    "DeltaSink",
    "EdgeFileSource",
    "JsonLinesSink",
    "ListSink",
    "decode_json_record",
    "decode_text_line",
]
