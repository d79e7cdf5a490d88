"""The reference implementation's build: the paper authors' ``motif`` example, cached.

The source is ``../shared/peers`` beside the repository (frankmcsherry/dataflow-join and the
graph-map crate it names by path; ``../shared/peers/README.md`` lists what was patched and
why). It is never built in place and never part of the product: :func:`ensure_motif` copies it
to ``CACHE/src`` and runs ``cargo build --release --locked --example motif`` there, with
``CARGO_TARGET_DIR=CACHE/target``, so that ``CACHE/target/release/examples/motif`` is the
binary. ``CACHE`` is ``.cache/peers`` by default (git-ignored).

It rebuilds only when the binary is missing or the source changed: ``CACHE/stamp`` holds a
SHA-256 over every source file's relative path and bytes, plus ``cargo --version``, as of the
last successful build. Without ``cargo`` on the PATH or without ``../shared/peers`` there is
nothing to build; the result says why, and the harness skips the reference.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT.parent / "shared" / "peers"
CACHE = ROOT / ".cache" / "peers"

#: The crate whose example is built, inside the peers folder.
CRATE = "dataflow-join"
EXAMPLE = "motif"


@dataclass(frozen=True)
class Build:
    """The built ``motif`` binary, or why there is none.

    ``seconds`` is the time the build took in this call (0 when the cached binary was used);
    ``cached`` says whether it was.
    """

    motif: Path | None
    why_not: str | None = None
    seconds: float = 0.0
    cached: bool = False


def missing(peers: Path = PEERS) -> str | None:
    """Why the reference cannot be built here (no cargo, no source), or None if it can."""
    if not (peers / CRATE / "Cargo.toml").is_file():
        return f"the reference source is absent: no {peers / CRATE / 'Cargo.toml'}"
    if shutil.which("cargo") is None:
        return "cargo is not on the PATH (install Rust to build the reference)"
    return None


def binary(cache: Path = CACHE) -> Path:
    """Where the ``motif`` binary is once built."""
    return cache / "target" / "release" / "examples" / EXAMPLE


def is_cached(peers: Path = PEERS, cache: Path = CACHE) -> bool:
    """True when the binary exists and was built from the source as it is now."""
    stamp = cache / "stamp"
    return (
        missing(peers) is None
        and binary(cache).is_file()
        and stamp.is_file()
        and stamp.read_text().strip() == source_hash(peers)
    )


def source_hash(peers: Path = PEERS) -> str:
    """SHA-256 over every file of ``peers`` (relative path and bytes) and ``cargo --version``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in peers.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(peers)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(_cargo_version().encode())
    return digest.hexdigest()


def _cargo_version() -> str:
    done = subprocess.run(["cargo", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def ensure_motif(peers: Path = PEERS, cache: Path = CACHE) -> Build:
    """The ``motif`` binary, built first if it is missing or its source changed.

    Progress (and cargo's own output) goes to stderr. A failed build raises
    ``RuntimeError`` with the end of cargo's output: a reference that should build and does
    not is an error, not a skip.
    """
    why_not = missing(peers)
    if why_not is not None:
        return Build(None, why_not)
    wanted = source_hash(peers)
    stamp = cache / "stamp"
    if binary(cache).is_file() and stamp.is_file() and stamp.read_text().strip() == wanted:
        _say(f"reference: cached build {binary(cache)}")
        return Build(binary(cache), cached=True)
    _say(f"reference: copying {peers} to {cache / 'src'}")
    _copy_tree(peers, cache / "src")
    command = ["cargo", "build", "--release", "--locked", "--example", EXAMPLE]
    _say(f"reference: building ({' '.join(command)}; a few minutes the first time)")
    began = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=cache / "src" / CRATE,
        env={**os.environ, "CARGO_TARGET_DIR": str(cache / "target")},
        check=False,
    )
    seconds = time.perf_counter() - began
    if done.returncode != 0 or not binary(cache).is_file():
        raise RuntimeError(
            f"building the reference failed (exit {done.returncode}) in {cache / 'src' / CRATE}; "
            f"cargo's output is above"
        )
    stamp.write_text(wanted + "\n")
    _say(f"reference: built {binary(cache)} in {seconds:.0f} s")
    return Build(binary(cache), seconds=seconds)


def _copy_tree(source: Path, target: Path) -> None:
    """A writable copy of ``source`` at ``target`` (the shared source is read-only), replacing
    whatever was there."""
    fresh = target.with_name(target.name + ".tmp")
    for old in (fresh, target):
        if old.exists():
            shutil.rmtree(old)
    for path in sorted(source.rglob("*")):
        copy = fresh / path.relative_to(source)
        if path.is_dir():
            copy.mkdir(parents=True, exist_ok=True)
        else:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
    fresh.rename(target)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    built = ensure_motif()
    print(built.motif or f"not built: {built.why_not}")
