"""MkDocs hook: the settings tables, generated from the settings model
(``monitor.service.settings.Settings``), so that they cannot drift from the code.

A page writes ``<!-- settings -->`` for every setting, or ``<!-- settings: NAME NAME ... -->``
for those named (the model's field names); the hook puts a table there: the environment
variable, its default and the setting's description.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic_core import PydanticUndefined

from monitor.service.settings import Settings

MARKER = re.compile(r"<!-- settings(?::(?P<names>[^>]*))? -->")
#: Defaults computed where the service runs, said in words (not the build machine's value).
COMPUTED = {"instance_id": "the host name"}


def default_text(name: str) -> str:
    """A setting's default as a reader writes it (a computed one: its description says)."""
    if name in COMPUTED:
        return COMPUTED[name]
    field = Settings.model_fields[name]
    value: Any = field.default
    if value is PydanticUndefined:
        value = field.default_factory() if field.default_factory is not None else None  # type: ignore[call-arg]
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return json.dumps(value) if value else "none"
    return str(value)


def table(names: list[str]) -> str:
    """The settings ``names`` (all: empty) as a Markdown table."""
    fields = Settings.model_fields
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise ValueError(f"no such setting: {', '.join(unknown)}")
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name in names or list(fields):
        description = (fields[name].description or "").replace("|", "\\|")
        rows.append(f"| `SGM_{name.upper()}` | {default_text(name)} | {description} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda m: table((m.group("names") or "").split()), markdown)
