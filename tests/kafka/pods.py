"""Pods on one machine, for the chart's topologies: a command in PID and mount namespaces of its
own (``unshare``), so that, as in a container, it sees only its own processes and its own
``/tmp/ray``, and every process it starts ends with it (the kernel kills a namespace's processes
when its first one exits). The network and the rest of the file system are the machine's."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

#: Make the pod's /tmp/ray private (its own directory, kept for the test's output), then run the
#: command as the namespace's first process.
_SETUP = 'mkdir -p /tmp/ray "$POD_RAY_DIR" && mount --bind "$POD_RAY_DIR" /tmp/ray && exec "$@"'


def unavailable(tmp: Path) -> str | None:
    """Why pods cannot be made here (None: they can)."""
    if shutil.which("unshare") is None:
        return "no unshare (util-linux)"
    done = subprocess.run(
        in_pod(["true"]), env=pod_env(tmp / "probe"), capture_output=True, check=False
    )
    if done.returncode != 0:
        return f"unshare cannot make PID and mount namespaces here: {done.stderr.decode()[-200:]}"
    return None


def pod_env(ray_dir: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a pod whose /tmp/ray is ``ray_dir``."""
    return {**(env if env is not None else os.environ), "POD_RAY_DIR": str(ray_dir)}


def in_pod(command: list[str]) -> list[str]:
    """``command`` run as the first process of a pod of its own (its environment from
    :func:`pod_env`)."""
    namespaces = ["unshare", "--pid", "--fork", "--mount-proc", "--mount"]
    return [*namespaces, "sh", "-c", _SETUP, "pod", *command]


def first_process(unshare: subprocess.Popen[bytes]) -> int:
    """The pod's first process (the command; ``unshare`` waits for it and forwards no signal)."""
    children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children")
    for _ in range(200):
        found = children.read_text().split() if children.exists() else []
        if found:
            return int(found[0])
        if unshare.poll() is not None:
            break
        os.sched_yield()
    raise RuntimeError("the pod's process did not start")


def ray_command(*args: str) -> list[str]:
    """Ray's command line from this Python."""
    return [sys.executable, "-c", "from ray.scripts.scripts import main; main()", *args]


#: A RayCluster without ``authOptions`` (the chart's): no token (Ray's default for ``ray start``
#: where no ~/.ray/auth_token exists, as in a new pod; this machine may have one). Every pod's
#: environment sets it, the service's too: a test that started Ray in the pytest process left
#: ``RAY_AUTH_MODE=token`` in its environment, which subprocesses would inherit.
RAY_ENV = {"RAY_AUTH_MODE": "disabled"}


class RayPod:
    """A Ray node in a pod, started as KubeRay starts one (``ray start --block``)."""

    def __init__(self, directory: Path, *args: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.proc = subprocess.Popen(
            in_pod(ray_command("start", "--block", "--disable-usage-stats", *args)),
            env=pod_env(directory / "ray", {**os.environ, **RAY_ENV}),
            stdout=subprocess.DEVNULL,
            stderr=(directory / "ray-start.log").open("wb"),
        )

    def exited(self) -> str | None:
        """None while the node runs; else its exit code and the end of its log."""
        if self.proc.poll() is None:
            return None
        log = (self.directory / "ray-start.log").read_text(errors="replace")[-2000:]
        return f"{self.directory.name}'s ray start exited with {self.proc.returncode}:\n{log}"

    def delete(self) -> None:
        """The pod deleted: its first process killed, and with it the node's processes."""
        if self.proc.poll() is None:
            os.kill(first_process(self.proc), signal.SIGKILL)
            self.proc.wait(timeout=30)


def worker_ports(seed: int) -> list[str]:
    """Ray's flags for a range of 200 worker ports of its own, picked by ``seed``: pods here
    share the machine's network. The ranges lie in 20000-29999, above Ray's default range
    (10002-19999) and below the kernel's ephemeral ports (32768 and up), away from the ports
    every Ray node takes (the dashboard's 8265, its agent's 52365: a range holding one makes
    ``ray start`` refuse to start)."""
    low = 20000 + (seed % 50) * 200
    return [f"--min-worker-port={low}", f"--max-worker-port={low + 199}"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
