"""What the figures were measured on: cores, CPU model, memory, versions, commit, date."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np


def machine_info() -> dict[str, str]:
    """Cores, CPU model, memory, versions, date: what the figures were measured on."""
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "CPU": model,
        "logical cores": str(os.cpu_count()),
        "cores available to the run": str(len(os.sched_getaffinity(0))),
    }
    memory = _meminfo_gib()
    info["physical cores"] = str(_physical_cores())
    info["memory"] = f"{memory:.1f} GiB" if memory else "unknown"
    info["load average at the end (1/5/15 min)"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    info.update(
        {
            "OS": f"{platform.system()} {platform.release()}",
            "Python": platform.python_version(),
            "numpy": np.__version__,
            "git commit": _git_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
    )
    return info


def _physical_cores() -> int | str:
    """Distinct (physical id, core id) pairs of /proc/cpuinfo."""
    cores: set[tuple[str, str]] = set()
    physical = core = ""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "physical id":
                    physical = value
                elif key == "core id":
                    core = value
                    cores.add((physical, core))
    except OSError:
        return "unknown"
    return len(cores) or "unknown"


def _meminfo_gib() -> float:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return 0.0


def _git_commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit} (with uncommitted changes)" if dirty else commit
