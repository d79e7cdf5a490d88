"""The container image, checked without a Docker engine.

What can be read off ``docker/Dockerfile`` is checked statically: a pinned slim base, two
stages, a fixed non-root uid, the state volume, the entrypoint, OCI labels, no secret, every
``COPY`` source admitted by ``.dockerignore``, and a lock that pins every dependency of
``pyproject.toml`` with hashes. What cannot be read is rehearsed: the builder stage's install
steps run here, in a fresh virtual environment, from the build context ``.dockerignore``
leaves, and the installed command then runs the file job with bytecode writing off.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
LOCK = ROOT / "docker" / "requirements.lock"
BUILD_LOCK = ROOT / "docker" / "build-requirements.lock"
STATE_VOLUME = "/var/lib/subgraph-monitor"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    )
    out: list[Instruction] = []
    stage = -1
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, args = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        out.append(Instruction(keyword.upper(), " ".join(args.split()), stage))
    return out


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return instructions(DOCKERFILE.read_text())


def build_args(ins: list[Instruction]) -> dict[str, str]:
    return {
        name: value
        for i in ins
        if i.keyword == "ARG" and "=" in i.args
        for name, _, value in [i.args.partition("=")]
    }


def final_stage(ins: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in ins)
    return [i for i in ins if i.stage == last]


def test_base_image_is_a_pinned_slim_python(dockerfile: list[Instruction]) -> None:
    froms = [i for i in dockerfile if i.keyword == "FROM"]
    assert len(froms) >= 2, "multi-stage: a builder and a runtime stage"
    args = build_args(dockerfile)
    for f in froms:
        image = f.args.split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        name, _, tag = image.partition(":")
        assert name == "python", image
        assert re.fullmatch(r"3\.1[1-9]\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", tag), (
            f"{image}: the base must name an exact Python patch release and Debian suite"
        )
    lock_python = re.search(r"with Python (3\.\d+)", LOCK.read_text())
    assert lock_python is not None
    assert tag.startswith(lock_python.group(1) + "."), "the lock was compiled for another Python"


def test_runs_as_a_fixed_non_root_uid(dockerfile: list[Instruction]) -> None:
    runtime = final_stage(dockerfile)
    users = [i.args for i in runtime if i.keyword == "USER"]
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) >= 1000, "a numeric uid, so runAsNonRoot can verify it"
    assert gid.isdigit() and int(gid) >= 1000
    runs = " ".join(i.args for i in runtime if i.keyword == "RUN")
    assert f"--uid {uid}" in runs, "the user exists in /etc/passwd with that uid"
    last_user = max(n for n, i in enumerate(runtime) if i.keyword == "USER")
    assert all(i.keyword not in ("RUN", "COPY", "ADD") for i in runtime[last_user:]), (
        "nothing runs as root after USER"
    )


def test_state_directory_is_a_volume_and_the_default(dockerfile: list[Instruction]) -> None:
    runtime = final_stage(dockerfile)
    volumes = " ".join(i.args for i in runtime if i.keyword == "VOLUME")
    assert STATE_VOLUME in volumes
    env = " ".join(i.args for i in runtime if i.keyword == "ENV")
    state_dir = re.search(r"SGM_STATE_DIR=(\S+)", env)
    assert state_dir and state_dir.group(1).startswith(STATE_VOLUME + "/")
    assert "PYTHONDONTWRITEBYTECODE=1" in env, "a read-only root filesystem cannot take .pyc"
    workdirs = [i.args for i in runtime if i.keyword == "WORKDIR"]
    assert workdirs and workdirs[-1] == STATE_VOLUME


def test_entrypoint_and_default_command(dockerfile: list[Instruction]) -> None:
    runtime = final_stage(dockerfile)
    entry = [i.args for i in runtime if i.keyword == "ENTRYPOINT"]
    cmd = [i.args for i in runtime if i.keyword == "CMD"]
    assert entry == ['["subgraph-monitor"]'], "exec form, so signals reach the service"
    assert cmd == ['["serve"]']
    exposed = [i.args for i in runtime if i.keyword == "EXPOSE"]
    assert exposed == ["8080"]


def test_oci_labels(dockerfile: list[Instruction]) -> None:
    labels = " ".join(i.args for i in final_stage(dockerfile) if i.keyword == "LABEL")
    for key in ("title", "description", "version", "revision", "created", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels, key


SECRET_WORDS = re.compile(r"(PASSWORD|SECRET|TOKEN|API_?KEY|PRIVATE|sasl\.|ssl\.key)", re.I)


def test_no_secrets_and_nothing_fetched_from_the_network(dockerfile: list[Instruction]) -> None:
    for i in dockerfile:
        if i.keyword in ("ENV", "ARG", "LABEL"):
            assert not SECRET_WORDS.search(i.args), f"{i.keyword} {i.args}"
        assert i.keyword != "ADD", "COPY only: ADD fetches URLs and unpacks archives"
        if i.keyword == "RUN":
            assert not re.search(r"\b(curl|wget)\b", i.args), i.args
            if "pip install" in i.args and "/src" not in i.args:
                assert "--require-hashes" in i.args, f"dependencies come from the lock: {i.args}"


def dockerignore_admits(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents decides."""
    admitted = True
    parts = path.split("/")
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(
            fnmatch.fnmatchcase(p, pattern) or fnmatch.fnmatchcase(p, pattern.replace("**/", ""))
            for p in prefixes
        ):
            admitted = negate
    return admitted


def context_files() -> list[str]:
    """Every file of the repository that ``.dockerignore`` lets into the build context."""
    patterns = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f for f in tracked if dockerignore_admits(f, patterns)]


def test_build_context_is_only_what_the_image_needs(dockerfile: list[Instruction]) -> None:
    files = context_files()
    assert files, "nothing admitted"
    for f in files:
        assert f.split("/")[0] in (
            "core",
            "monitor",
            "connectors",
            "pyproject.toml",
            "README.md",
            "docker",
        ), f"{f} is in the build context"
        assert not re.search(r"(\.env|\.pem|\.key|secret|credentials)", f, re.I), f
    for i in dockerfile:
        if i.keyword == "COPY" and "--from=" not in i.args:
            *sources, _ = shlex.split(i.args)
            for source in sources:
                assert any(f == source or f.startswith(source.rstrip("/") + "/") for f in files), (
                    f"COPY {source}: excluded by .dockerignore"
                )


def lock_pins(path: Path) -> dict[str, str]:
    text = path.read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.M))
    entries = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", text)
    for entry in entries[1:]:
        assert "--hash=sha256:" in entry, f"no hash for {entry.splitlines()[0]}"
    return {name.lower().replace("_", "-"): version for name, version in pins.items()}


def test_lock_pins_every_dependency_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = lock_pins(LOCK)
    # The image has the columnar batch encoding too (SGM_BATCH_ENCODING=arrow), and Ray for
    # the partitioned engine (SGM_ENGINE=distributed: the driver and the RayCluster pods).
    extras = project["optional-dependencies"]
    for spec in [*project["dependencies"], *extras["arrow"], *extras["distributed"]]:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in docker/requirements.lock"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} breaks {spec}"
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    build_pins = lock_pins(BUILD_LOCK)
    for spec in build:
        req = Requirement(spec)
        assert req.specifier.contains(build_pins[req.name]), f"{spec} vs the build lock"


def test_builder_stage_rehearsal(tmp_path: Path) -> None:
    """The builder's install steps, from the admitted build context, in a fresh venv; then the
    installed command runs the file job as the image would (no bytecode written)."""
    context = tmp_path / "context"
    for f in context_files():
        (context / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, context / f)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    # (pip's cache is used: the wheels are checked against the lock's hashes either way, and the
    # suite's own install has most of them already; the image's build uses none)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for lock in ("docker/requirements.lock", "docker/build-requirements.lock"):
        subprocess.run(
            [*pip, "install", "--require-hashes", "--only-binary=:all:", "-r", lock],
            cwd=context,
            env=env,
            check=True,
        )
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-build-isolation", str(context)], env=env, check=True
    )
    exe = venv / "bin" / "subgraph-monitor"
    before = {f: f.stat().st_mtime_ns for f in venv.rglob("*") if f.is_file()}
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert "0.1.0" in version.stdout
    edges = "1 2\n2 3\n1 3\n3 4\n"
    state = tmp_path / "state"
    # As the image: numba caches its compiled kernels under /tmp, never beside the code.
    assert "NUMBA_CACHE_DIR=/tmp/" in DOCKERFILE.read_text()
    numba_cache = tmp_path / "numba"
    run = subprocess.run(
        [str(exe), "run", "--query", "triangle", "--state-dir", str(state), "--edges", "-"],
        input=edges,
        capture_output=True,
        text=True,
        env={**env, "HOME": str(tmp_path), "NUMBA_CACHE_DIR": str(numba_cache)},
        cwd=tmp_path,
        check=True,
    )
    assert run.stdout.splitlines() == [
        '{"query":"triangle","epoch":1,"diff":1,"match":{"a1":1,"a2":2,"a3":3},'
        '"match_id":"769ce55d4005dc3f"}'
    ], run.stderr
    # Every optional path the service takes is installed: the schema registry formats (the
    # lock once lacked their extras), Avro as columns, Arrow batches, the partitioned engine.
    readers = (
        "import connectors.avro_columns, connectors.registry_decoders, connectors.avro_output; "
        "import connectors.arrow_batch, polars, fastavro, ray; "
        "from confluent_kafka.schema_registry.avro import AvroDeserializer"
    )
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", readers],
        capture_output=True,
        text=True,
        env={**env, "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    after = {f: f.stat().st_mtime_ns for f in venv.rglob("*") if f.is_file()}
    assert after == before, "the run wrote into the image: a read-only root filesystem breaks it"
    assert any(numba_cache.rglob("*.nbi")), "the compiled kernel was not cached in NUMBA_CACHE_DIR"
