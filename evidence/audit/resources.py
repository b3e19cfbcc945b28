"""Resource samples: every accepted run's ``runs/<job>/resources.jsonl`` is there, each line a sample,
its times strictly increasing (the peaks the report states are recomputed from them by ``recomputation``)."""

from __future__ import annotations

from pathlib import Path

from evidence.dataset import BundleData, read_resource_samples
from evidence.problems import Problem, capped
from facts.files import RESOURCE_SAMPLES, bundle_run_dir, bundle_run_relpath


def check_resources(data_dir: Path, data: BundleData) -> list[Problem]:
    """Each accepted run has resource samples, every line well formed, and time moving forward."""
    findings: list[Problem] = []
    for arm, seed in data.accepted:
        job = f"{arm}-{seed}"
        rel = bundle_run_relpath(job, RESOURCE_SAMPLES)
        samples, problems = read_resource_samples(bundle_run_dir(data_dir, job) / RESOURCE_SAMPLES)
        if problems == ["missing"]:
            findings.append(Problem(rel, "missing: an accepted job must carry its runtime's resource samples"))
            continue
        findings += capped([Problem(rel, problem) for problem in problems])
        if not samples and not problems:
            findings.append(Problem(rel, "holds no sample"))
        times = [float(s["t"]) for s in samples]
        back = [i for i in range(1, len(times)) if times[i] <= times[i - 1]]
        if back:
            findings.append(Problem(rel, f"sample times do not increase: sample {back[0] + 1} (t={times[back[0]]}) is "
                                         f"not after sample {back[0]} (t={times[back[0] - 1]})"
                                         f"{f' (and {len(back) - 1} more)' if len(back) > 1 else ''}"))
    return findings
