"""The tests' experiment spec (study/: what ``experiment=<name>`` runs): one toy design, baseline isp (grpo) against
treatment sc (rppb) on seeds 1-3, VALIDATED at 4 points of final eval pass@1, and a test's changes to it.

``experiment_spec(**changes)`` is the spec as a dict: a change replaces a top-level key (``budget=...``, ``arms=...``,
``seeds=...``) or, for ``criterion``, the criterion's entries it names; a change to None removes the key.
``experiment_yaml(**changes)`` is the same spec as the text a study file holds (``experiment.yaml``), one line per
key, arms and criterion entries one line each (``  sc: {algo: rppb}``, ``  threshold_points: 4``), the form a test
edits with ``str.replace`` and whose SHA256 the launcher registers.
"""

from __future__ import annotations

import copy

import yaml

EXPERIMENT = {
    "title": "toy score centering vs importance sampling",
    "hypothesis": "sc reaches at least 4 points higher pass@1 than isp",
    "arms": {"isp": {"algo": "grpo"}, "sc": {"algo": "rppb"}},
    "seeds": [1, 2, 3],
    "criterion": {"metric": "eval/pass@1", "at": "final", "baseline": "isp", "treatment": "sc",
                  "threshold_points": 4},
}
BLOCKS = ("arms", "criterion")  # written one entry a line; every other value on its key's line


def experiment_spec(**changes) -> dict:
    """The spec with ``changes`` (the criterion last, as a study file states it)."""
    spec = copy.deepcopy(EXPERIMENT)
    criterion = {**spec.pop("criterion"), **changes.pop("criterion", {})}
    spec.update(changes)
    spec["criterion"] = criterion
    return {key: {k: v for k, v in value.items() if v is not None} if key == "criterion" else value
            for key, value in spec.items() if value is not None}


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20, sort_keys=False).removesuffix("...\n").strip()


def experiment_yaml(**changes) -> str:
    """The spec with ``changes`` as a study file's text."""
    lines = []
    for key, value in experiment_spec(**changes).items():
        if key in BLOCKS:
            lines += [f"{key}:", *(f"  {k}: {_flow(v)}" for k, v in value.items())]
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"
