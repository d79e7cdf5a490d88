"""The module map holds: every import of the product points down (DESIGN.md, docs/how-it-works.md).

Each package may import itself and the layers listed for it, nothing else; a new import that
points up, or sideways between ``connectors`` and the engine, fails here with the line that
made it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What the layers that wire the engine to the outside (the service to Kafka and files, the
#: partitioned engine to its shards) may import.
WIRING = (
    "monitor.engine",
    "monitor.index",
    "monitor.plan",
    "monitor.query",
    "monitor.failpoints",
    "connectors",
    "core",
)

#: Top to bottom. A layer may import the prefixes listed for it (and itself).
ALLOWED: dict[str, tuple[str, ...]] = {
    "monitor.cli": ("monitor", "connectors", "core"),
    "monitor.__main__": ("monitor.cli",),
    "monitor.service": WIRING,
    # The partitioned engine wires the engine to its shards as the service wires it to Kafka,
    # and reuses the service's pieces (settings, match ids): above `service`, below the CLI.
    "monitor.distributed": (*WIRING, "monitor.service"),
    "connectors": ("core",),
    "monitor.engine": ("monitor.index", "monitor.plan", "monitor.query", "core"),
    "monitor.index": ("monitor.plan.cut", "monitor.failpoints", "core"),
    "monitor.plan": ("monitor.query", "core"),
    "monitor.query": ("core",),
    "monitor.failpoints": (),
    "monitor": (),  # the package's __init__
    "core": (),
}
PRODUCT = ("monitor", "connectors", "core")


def _layer(module: str) -> str:
    matches = [k for k in ALLOWED if module == k or module.startswith(k + ".")]
    if module != "monitor":
        matches = [k for k in matches if k != "monitor"]
    assert matches, f"{module} is in no layer of the module map: add it to ALLOWED"
    return max(matches, key=len)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return [(line, name) for line, name in found if name.split(".")[0] in PRODUCT]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _admits(allowed: str, imported: str) -> bool:
    return imported == allowed or imported.startswith(allowed + ".")


def test_every_import_points_down() -> None:
    wrong = []
    files = [p for top in PRODUCT for p in sorted((ROOT / top).rglob("*.py"))]
    assert len(files) > 40, "the product's modules were not found"
    for path in files:
        module = _module(path)
        layer = _layer(module)
        for line, imported in _imports(path):
            if _admits(layer, imported):
                continue
            if not any(_admits(a, imported) for a in ALLOWED[layer]):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {layer} imports {imported}")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: an index module importing the engine is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from monitor.engine.extend import IndexReader\nimport numpy\n")
    ((line, imported),) = _imports(bad)
    assert line == 1
    assert not any(_admits(a, imported) for a in ALLOWED[_layer("monitor.index.graph")])
