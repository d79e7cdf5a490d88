"""Bad state directories: each refused with a clear message and exit 4, nothing overwritten."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import rocksdict

from monitor.index.store import FORMAT_VERSION, META_KEY, StateStore

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path, Path]:
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{i} {i + 1}\n{i} {i + 2}\n" for i in range(300)))
    state, out = tmp_path / "state", tmp_path / "out.jsonl"
    done = run(
        "run",
        "-q",
        "triangle",
        "--edges",
        str(edges),
        "--state-dir",
        str(state),
        "--output",
        str(out),
        "-b",
        "50",
    )
    assert done.returncode == 0, done.stderr
    return edges, state, out


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(directory.rglob("*")):
        if f.is_file() and f.name != "LOCK" and not f.name.startswith("LOG"):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def rerun(edges: Path, state: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return run(
        "run",
        "-q",
        "triangle",
        "--edges",
        str(edges),
        "--state-dir",
        str(state),
        "--output",
        str(out),
        "-b",
        "50",
        *extra,
    )


def test_a_complete_run_reruns_as_a_no_op(built: tuple[Path, Path, Path]) -> None:
    edges, state, out = built
    before = out.read_bytes()
    done = rerun(edges, state, out)
    assert done.returncode == 0
    assert out.read_bytes() == before and len(before.splitlines()) == 299


def test_a_store_of_another_format_version_is_refused(built: tuple[Path, Path, Path]) -> None:
    edges, state, out = built
    db = rocksdict.Rdict(str(state), rocksdict.Options(raw_mode=True))
    meta = bytes(db[META_KEY]).replace(
        f'"format_version":{FORMAT_VERSION}'.encode(), b'"format_version":99'
    )
    db[META_KEY] = meta
    db.close()
    before, output = digest(state), out.read_bytes()
    done = rerun(edges, state, out)
    assert done.returncode == 4
    err = done.stderr.decode()
    assert str(state) in err and "format version 99" in err and "delete" in err
    assert digest(state) == before and out.read_bytes() == output


def test_corrupted_store_files_are_refused(built: tuple[Path, Path, Path]) -> None:
    edges, state, out = built
    tables = sorted(state.glob("*.sst")) + sorted(state.glob("*.log"))
    assert tables
    for table in tables:
        data = bytearray(table.read_bytes())
        for i in range(0, len(data), 97):
            data[i] ^= 0x5A
        table.write_bytes(bytes(data))
    output = out.read_bytes()
    done = rerun(edges, state, out)
    assert done.returncode == 4, done.stderr
    assert "corrupted" in done.stderr.decode() and str(state) in done.stderr.decode()
    assert out.read_bytes() == output


def test_a_missing_current_file_is_not_mistaken_for_a_new_state(
    built: tuple[Path, Path, Path],
) -> None:
    edges, state, out = built
    (state / "CURRENT").unlink()
    done = rerun(edges, state, out)
    assert done.returncode == 4
    assert "holds no subgraph-monitor state" in done.stderr.decode()


def test_a_directory_in_use_by_another_process_is_refused(
    built: tuple[Path, Path, Path],
) -> None:
    edges, state, out = built
    output = out.read_bytes()
    with StateStore.open(state):
        done = rerun(edges, state, out)
        assert done.returncode == 4
        assert "in use by another" in done.stderr.decode()
        inspect = run("state", "inspect", str(state))
        assert inspect.returncode == 0, inspect.stderr
        assert b"epoch            12" in inspect.stdout
    assert out.read_bytes() == output


def test_changed_settings_or_input_are_refused(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    edges, state, out = built
    done = run(
        "run",
        "-q",
        "triangle",
        "--edges",
        str(edges),
        "--state-dir",
        str(state),
        "--output",
        str(out),
        "-b",
        "60",
    )
    assert done.returncode == 4 and b"batch_size=50" in done.stderr
    other = tmp_path / "other.txt"
    other.write_text("1 2\n")
    done = rerun(other, state, out)
    assert done.returncode == 4 and b"was built from input" in done.stderr


def test_output_with_content_but_no_state_is_not_overwritten(tmp_path: Path) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\n1 3\n")
    out = tmp_path / "out.jsonl"
    out.write_text("precious\n")
    done = rerun(edges, tmp_path / "state", out)
    assert done.returncode == 4 and b"already has content" in done.stderr
    assert out.read_text() == "precious\n"


def test_a_non_state_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n")
    done = rerun(edges, tmp_path, tmp_path / "out.jsonl")
    assert done.returncode == 4 and b"holds no subgraph-monitor state" in done.stderr
    assert (tmp_path / "notes.txt").read_text() == "hello"


def test_an_added_query_gets_its_current_matches_and_a_changed_one_is_replaced(
    built: tuple[Path, Path, Path],
) -> None:
    edges, state, out = built
    before = out.read_bytes()
    old_triangles = [json.loads(line)["match"] for line in before.splitlines()]
    wedge = "wedge(a, b, c) := e(a, b), e(b, c), a < c."
    changed = "triangle(a1, a2, a3) := e(a1, a2), e(a2, a3), e(a1, a3), a1 != a3."
    done = run(
        "run",
        "-q",
        changed,
        "-q",
        wedge,
        "--edges",
        str(edges),
        "--state-dir",
        str(state),
        "--output",
        str(out),
        "-b",
        "50",
    )
    assert done.returncode == 0, done.stderr
    added = [json.loads(line) for line in out.read_bytes()[len(before) :].splitlines()]
    assert {r["epoch"] for r in added} == {12}
    arcs = {(i, i + d) for i in range(300) for d in (1, 2)}
    wedges = {(a, b, c) for a, b in arcs for b2, c in arcs if b2 == b and a < c}
    got = {
        (r["match"]["a"], r["match"]["b"], r["match"]["c"]) for r in added if r["query"] == "wedge"
    }
    assert got == wedges and all(r["diff"] == 1 for r in added if r["query"] == "wedge")
    replaced = [(r["diff"], r["match"]) for r in added if r["query"] == "triangle"]
    assert replaced == [(-1, m) for m in old_triangles] + [(1, m) for m in old_triangles]
    inspect = run("state", "inspect", str(state)).stdout.decode()
    assert wedge in inspect and changed in inspect
    again = run(
        "run",
        "-q",
        changed,
        "-q",
        wedge,
        "--edges",
        str(edges),
        "--state-dir",
        str(state),
        "--output",
        str(out),
        "-b",
        "50",
    )
    assert again.returncode == 0 and out.read_bytes()[len(before) :].count(b"\n") == len(added)


#: What RocksDB had written when a run was SIGKILLed inside its creation of a new state (both
#: seen: before and after its first manifest), with contents of their kind.
CUT_SHORT = [
    {
        "LOCK": b"",
        "LOG": b"RocksDB version: 9\n",
        "rocksdict-config.json": b"{}",
        "000000.dbtmp": b"",
    },
    {
        "LOCK": b"",
        "LOG": b"RocksDB version: 9\n",
        "rocksdict-config.json": b"{}",
        "IDENTITY": b"d1c5e8a0\n",
        "MANIFEST-000001": b"\x00\x01",
        "000001.dbtmp": b"MANIFEST-000001\n",
    },
]


@pytest.mark.parametrize("files", CUT_SHORT, ids=["before the manifest", "after it"])
def test_a_state_whose_creation_was_cut_short_starts_anew(
    tmp_path: Path, files: dict[str, bytes]
) -> None:
    """A run killed while RocksDB created its state leaves RocksDB's first files and no
    ``CURRENT``: the next run starts anew (nothing was stored) and says so; with any other file
    beside them the directory is still refused, and nothing in it touched."""
    state = tmp_path / "state"
    state.mkdir()
    for name, content in files.items():
        (state / name).write_bytes(content)
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\n1 3\n")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    for name, content in {**files, "notes.txt": b"mine"}.items():
        (foreign / name).write_bytes(content)
    refused = rerun(edges, foreign, tmp_path / "foreign.jsonl")
    assert refused.returncode == 4 and b"holds no subgraph-monitor state" in refused.stderr
    assert {p.name: p.read_bytes() for p in foreign.iterdir()} == {**files, "notes.txt": b"mine"}
    done = rerun(edges, state, tmp_path / "out.jsonl")
    assert done.returncode == 0, done.stderr
    assert b"creation was cut short" in done.stderr
    assert (tmp_path / "out.jsonl").read_text().count('"diff":1') == 1
    assert (state / "CURRENT").exists()
