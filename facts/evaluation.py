"""The eval's estimator, the shared initial evaluation's key and what makes a shared evaluation
sound, stated once: the trainer computes them (and checks a shared evaluation before it reuses one),
the evidence recomputes them (and checks it before it accepts a job that references one)."""

from __future__ import annotations

import hashlib
import json
import math
from math import comb

PASS_AT = (1, 2, 4)  # the pass@j an eval reports, each only when j <= k samples were drawn per prompt
# The fields an evaluation's identity and its summary must agree on: the key names what the summary reports.
IDENTITY_SUMMARY_FIELDS = ("subset_sha256", "n_prompts", "k", "eval_seed")


def identity_key(identity: dict) -> str:
    """SHA256 of the canonical JSON of everything that determines an evaluation's bits."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt with n samples, c correct: ``1 - C(n-c, k) / C(n, k)``."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def model_files(inputs: dict[str, str], model_path: str) -> dict[str, str]:
    """The pinned inputs (``{path: sha256}``) that lie in the model directory ``model_path``: what an
    evaluation's identity names as its model, and what the evidence holds it to."""
    model_dir = str(model_path).rstrip("/") + "/"
    return {path: digest for path, digest in sorted(inputs.items()) if path.startswith(model_dir)}


def recompute_eval(responses: list[dict], k: int) -> dict:
    """An eval summary's statistics from its response records: pass@j per prompt (unbiased, c =
    responses with reward > 0) averaged over prompts, mean reward, mean length, truncated share;
    ``k`` is the samples per prompt (-1 when prompts differ)."""
    correct: dict = {}
    samples: dict = {}
    for r in responses:
        correct[r["index"]] = correct.get(r["index"], 0) + int(r["reward"] > 0)
        samples[r["index"]] = samples.get(r["index"], 0) + 1
    n = len(responses)
    per_prompt = set(samples.values())
    stats = {"n_responses": n, "n_prompts": len(correct), "k": per_prompt.pop() if len(per_prompt) == 1 else -1,
             "mean_reward": sum(r["reward"] for r in responses) / n,
             "mean_length": sum(r["length"] for r in responses) / n,
             "truncation": sum(not r["finished"] for r in responses) / n}
    for j in PASS_AT:
        if j <= k:
            stats[f"pass@{j}"] = sum(pass_at_k(k, c, j) for c in correct.values()) / len(correct)
    return stats


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def shared_evaluation_problems(record, responses: bytes) -> tuple[dict | None, tuple[str, ...]]:
    """What is wrong with a shared initial evaluation: its parsed ``eval.json`` record and its
    responses file's bytes. Sound means: the identity hashes to the key, names the evaluation the
    summary reports, the responses carry the recorded SHA256, and the summary's statistics recompute
    from them. Returns the summary (None when there is nothing sound to compare with) and the
    problems; the trainer reuses only an evaluation without problems, the evidence reports them."""
    try:
        summary = record["initial"]
        if not isinstance(summary, dict) or not isinstance(record["key"], str):
            raise TypeError("an initial summary and a key")
        if identity_key(record["identity"]) != record["key"]:  # the key names what determined the bits
            return None, ("its identity does not hash to its key",)
        differing = [name for name in IDENTITY_SUMMARY_FIELDS if record["identity"].get(name) != summary.get(name)]
        if differing:
            return None, (f"its identity and its summary differ in {', '.join(differing)}",)
        if hashlib.sha256(responses).hexdigest() != record["responses_sha256"]:
            return summary, ("responses.jsonl differs from its recorded SHA256",)
        recomputed = recompute_eval([json.loads(line) for line in responses.splitlines() if line.strip()],
                                    int(summary["k"]))
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
        return None, (f"unreadable shared evaluation ({type(exc).__name__})",)
    return summary, tuple(f"{name} {summary.get(name)!r} does not recompute from its responses ({value!r})"
                          for name, value in recomputed.items()
                          if not (_finite_number(summary.get(name))
                                  and math.isclose(summary[name], value, rel_tol=1e-12, abs_tol=1e-12)))
