"""The job's resource samples: its process tree's CPU and memory (and, where a GPU is visible, each
GPU's utilisation and memory through NVML) every ``cluster.resource_sample_s`` seconds, one JSON line
each in the job directory's ``resources.jsonl`` (``facts.files.RESOURCE_SAMPLES``).

The runtime samples, not the trainer, so every trainer is covered (proofgrid's own, trainer=trl, any
command). The tree is the runtime's process and everything under it (the trainer, its ranks, its
reward workers). Each line: ``t`` (Unix time, increasing), ``cpu_percent`` (summed over the tree's
processes: 100 is one core busy), ``rss_bytes`` (summed resident memory; shared pages count once per
process), ``processes``, and ``gpus`` (per visible device: ``index``, ``util_percent``,
``mem_used_bytes``, ``mem_total_bytes``; null where no GPU is sampled). What was sampled, and why the
GPU part was skipped, is ``job.json``'s ``resource_sampling`` (``facts.files.RESOURCE_SAMPLING_FIELD``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

import psutil

from facts.files import RESOURCE_SAMPLES


class GpuProbe:
    """The visible GPUs through NVML (``nvidia-ml-py``, the ``gpu`` extra), or why none is sampled."""

    def __init__(self) -> None:
        self.handles: list = []
        self.nvml = None
        self.skipped: str | None = None
        try:
            import pynvml
        except ImportError:
            self.skipped = "skipped: nvidia-ml-py is not installed (pip install -e '.[gpu]')"
            return
        try:
            pynvml.nvmlInit()
            self.handles = self._visible(pynvml)
        except pynvml.NVMLError as exc:
            self.skipped = f"skipped: NVML sees no GPU ({exc})"
            return
        if not self.handles:
            self.skipped = "skipped: no GPU visible to the job"
            return
        self.nvml = pynvml

    @staticmethod
    def _visible(pynvml) -> list:
        """The devices ``CUDA_VISIBLE_DEVICES`` leaves the job (indices or UUIDs), else all of them."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        handles = []
        for entry in (e.strip() for e in visible.split(",") if e.strip()):
            if entry.isdigit():
                handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(entry)))
            elif entry.startswith(("GPU-", "MIG-")):
                handles.append(pynvml.nvmlDeviceGetHandleByUUID(entry))
            else:
                break  # CUDA stops at the first entry it cannot read
        return handles

    @property
    def description(self) -> str:
        return self.skipped or f"sampled through NVML: {len(self.handles)} visible GPU(s)"

    def sample(self) -> list[dict] | None:
        """Each visible GPU now; None when none is sampled. A device that refuses a query (a MIG slice
        has no utilisation counter) stops the GPU part, and the description says so."""
        if self.nvml is None:
            return None
        out = []
        try:
            for index, handle in enumerate(self.handles):
                util = self.nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
                out.append({"index": index, "util_percent": float(util.gpu), "mem_used_bytes": int(memory.used),
                            "mem_total_bytes": int(memory.total)})
        except self.nvml.NVMLError as exc:
            self.skipped = f"stopped: NVML refused a query of GPU {len(out)} ({exc}); earlier samples kept"
            self.close()
            return None
        return out

    def close(self) -> None:
        if self.nvml is not None:
            nvml, self.nvml = self.nvml, None
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()


class ResourceSampler:
    """Samples the tree under ``root_pid`` into ``<record_dir>/resources.jsonl`` on a thread of its own,
    from ``start()`` to ``stop()`` (one sample at each end, so even a short job has two)."""

    def __init__(self, record_dir: Path, interval_s: float, root_pid: int | None = None) -> None:
        self.path = Path(record_dir) / RESOURCE_SAMPLES
        self.interval_s = float(interval_s)
        self.root = psutil.Process(root_pid or os.getpid())
        self._known: dict[int, psutil.Process] = {}  # cpu_percent measures since the previous call per process
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_t = 0.0
        self.samples = 0
        self.error: str | None = None
        self.gpu = GpuProbe()

    def _tree(self) -> list[psutil.Process]:
        try:
            members = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return []
        tree = [self._known.setdefault(p.pid, p) for p in members]
        alive = {p.pid for p in tree}
        self._known = {pid: p for pid, p in self._known.items() if pid in alive}
        return tree

    def sample(self) -> dict:
        """One sample of the tree now (a process that exits meanwhile is left out)."""
        cpu, rss, count = 0.0, 0, 0
        for process in self._tree():
            try:
                with process.oneshot():
                    cpu += process.cpu_percent(None)
                    rss += process.memory_info().rss
                count += 1
            except psutil.Error:
                continue
        # Strictly increasing even if the clock steps back: the audit relies on the order.
        t = max(time.time(), self._last_t + 1e-3)
        self._last_t = t
        return {"t": round(t, 3), "cpu_percent": round(cpu, 1), "rss_bytes": rss, "processes": count,
                "gpus": self.gpu.sample()}

    def _write(self, handle) -> None:
        handle.write(json.dumps(self.sample(), sort_keys=True) + "\n")
        handle.flush()
        self.samples += 1

    def _loop(self) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as handle:
                self._write(handle)
                while not self._stop.wait(self.interval_s):
                    self._write(handle)
                self._write(handle)
        except (OSError, psutil.Error) as exc:  # the job goes on; its record says the samples stopped
            self.error = f"sampling stopped: {exc.__class__.__name__}: {exc}"

    def start(self) -> ResourceSampler:
        self.path.unlink(missing_ok=True)  # this attempt's samples only (an earlier one's moved to attempts/)
        self._tree()  # the first cpu_percent of each process is measured from here
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop sampling (after one last sample); returns what ``job.json`` records about it."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=max(5.0, 2 * self.interval_s))
        self.gpu.close()
        return {"file": RESOURCE_SAMPLES, "interval_s": self.interval_s, "samples": self.samples,
                "gpu": self.gpu.description, **({"error": self.error} if self.error else {})}
