"""A job-scoped Ray runtime: started with the job's own roots and ports, stopped at the end.

On one node it is a head on 127.0.0.1. A job of several tasks spans its allocation: a head on rank 0's
node, at that node's address, and one worker on each other node joined to it (``head=``), each with the
ports of the block its own runtime claimed and its own roots; each is stopped by the runtime that
started it, on its own node.

``ray start --head --block`` runs in its own session (process group); every Ray process of the job
descends from it and inherits ``PROOFGRID_JOB_DIR``, which is how ``leftover_processes`` finds
anything that outlives the job. ``ray stop`` is never used: it would kill every Ray on the node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from facts.files import RAY_START_LOG
from facts.processes import marked_processes
from launcher.isolation import JobRoots
from launcher.ports import PortBlock


def ray_start_command(roots: JobRoots, block: PortBlock, num_cpus: int, node_ip: str = "127.0.0.1",
                      head: str | None = None) -> list[str]:
    """``ray start --block`` of a head (``head`` None) or of a worker joining the head at ``head``
    (``address:port`` of its GCS), listening at ``node_ip`` on the ports of ``block``."""
    p = block.ports
    ray_bin = str(Path(sys.executable).with_name("ray"))
    role = ["--head", f"--port={p['ray_gcs']}", f"--ray-client-server-port={p['ray_client_server']}",
            "--include-dashboard=false", f"--dashboard-port={p['ray_dashboard']}"] if head is None \
        else [f"--address={head}"]
    return [
        ray_bin, "start", *role[:1], "--block", "--disable-usage-stats",
        f"--node-ip-address={node_ip}",
        *role[1:],
        f"--dashboard-agent-grpc-port={p['ray_dashboard_agent_grpc']}",
        f"--dashboard-agent-listen-port={p['ray_dashboard_agent_listen']}",
        f"--metrics-export-port={p['ray_metrics_export']}",
        f"--node-manager-port={p['ray_node_manager']}",
        f"--object-manager-port={p['ray_object_manager']}",
        f"--runtime-env-agent-port={p['ray_runtime_env_agent']}",
        f"--min-worker-port={block.worker_range[0]}",
        f"--max-worker-port={block.worker_range[1]}",
        f"--temp-dir={roots.ray_alias}",
        f"--num-cpus={num_cpus}",
    ]


class JobRay:
    """One node's part of the job's Ray: the head (``head`` None), or a worker joining ``head``."""

    def __init__(self, roots: JobRoots, block: PortBlock, num_cpus: int, env: dict[str, str],
                 node_ip: str = "127.0.0.1", head: str | None = None, confine: Callable[[], None] | None = None,
                 contain: Callable[[list[str]], list[str]] | None = None):
        self.confine = confine  # ``preexec_fn`` of ``ray start``: the job's write guard (its workers run the job's code)
        command = ray_start_command(roots, block, num_cpus, node_ip, head)
        self.command = contain(command) if contain is not None else command  # in the job's image, when it has one
        # The GCS every driver connects to; a worker is up once its raylet listens on this node.
        self.address = head or f"{node_ip}:{block.ports['ray_gcs']}"
        self.ready_at = f"{node_ip}:{block.ports['ray_node_manager']}" if head else self.address
        self.env = env
        self.log_path = roots.job_dir / RAY_START_LOG
        self.job_dir = roots.job_dir
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120.0) -> str:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=self.confine)
        host, port = self.ready_at.rsplit(":", 1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {self.proc.returncode}; see {self.log_path.name}")
            with socket.socket() as s:
                if s.connect_ex((host, int(port))) == 0:
                    return self.address
            time.sleep(0.2)
        self.stop()
        what = "worker did not open its raylet port" if self.ready_at != self.address else "head did not open its GCS port"
        raise RuntimeError(f"the job's Ray {what} within {timeout_s:.0f} s; see {self.log_path.name}")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the head's process group, then every other process carrying the job's marker
        (Ray starts its workers in sessions of their own, so the group alone is not enough).
        The job owns nothing worth draining once training has ended, hence the short grace."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        _signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            self.proc.wait()
        _signal_group(pgid, signal.SIGKILL)  # anything of the group that outlived the head
        reap_marked_processes(self.job_dir, grace_s)
        self.proc = None


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def reap_marked_processes(job_dir: Path, grace_s: float) -> None:
    """SIGTERM, then SIGKILL, every process of this job still alive (found by its env marker)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [p["pid"] for p in leftover_processes(job_dir)]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and leftover_processes(job_dir):
            time.sleep(0.1)


def leftover_processes(job_dir: Path) -> list[dict]:
    """Processes (other than the caller) whose environment carries this job's marker."""
    return marked_processes(job_dir)
