"""Fixed-subset evaluation with the unbiased pass@k estimator, and the sweep's shared initial eval.

The same frozen subset (first ``n_prompts`` test rows), the same ``k`` and the same per-sample
sampling keys (derived from the eval seed, the row index and the sample index) are used for every
checkpoint, so the final checkpoint and the initial-checkpoint control are a paired comparison.

Every job of a sweep starts from the same initial checkpoint, so its evaluation is computed once
per distinct evaluation identity (``identity_key``) under ``<sweep>/initial_eval/<key[:12]>/`` by
the first job that needs it, and read by the others (``shared_initial_eval``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from facts import (
    EVAL_RECORD,
    INITIAL_EVAL_RESPONSES,
    atomic_write_json,
    initial_eval_relpath,
    loads_strict,
    read_with_sha256,
    sha256_file,
)
from facts.evaluation import PASS_AT, identity_key, pass_at_k, shared_evaluation_problems
from facts.files import EVAL_SUBSET, json_record_bytes, linked_part
from facts.reward import DEFAULT_REWARD, Reward, reward
from trainer.data import Example, mix_seed, subset_digest, subset_rows_bytes
from trainer.rollout import RolloutEngine, SamplingParams
from trainer.trainer_errors import TrainerError


def evaluate(engine: RolloutEngine, tokenizer, examples: list[Example], k: int, eval_seed: int,
             sampling: SamplingParams, checkpoint: str, responses_path: Path, scorer: Reward | None = None) -> dict:
    """Sample ``k`` responses per example with keyed draws, score each with the workload's reward (``scorer``;
    default the embedded default's) and summarise; the responses and the frozen subset go beside ``responses_path``."""
    scorer = scorer or reward(DEFAULT_REWARD)
    prompts, keys, owners = [], [], []
    for ex in examples:
        ids = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
        for j in range(k):
            prompts.append(ids)
            keys.append(mix_seed(eval_seed, ex.index, j))
            owners.append((ex, j))
    batch = engine.generate(prompts, keys, sampling)
    correct_per_prompt: dict[int, int] = {}
    rewards, lengths, truncated = [], [], 0
    responses_path.parent.mkdir(parents=True, exist_ok=True)
    write_subset(responses_path.parent / EVAL_SUBSET, examples)
    with open(responses_path, "w", encoding="utf-8") as f:
        for (ex, j), gen in zip(owners, batch.generations):
            text = tokenizer.decode(gen.response_ids, skip_special_tokens=True)
            r = scorer.score(text, ex.label, ex.row, f"row {ex.index} of the test split, sample {j} ({checkpoint})")
            rewards.append(r)
            lengths.append(len(gen.response_ids))
            truncated += not gen.finished
            correct_per_prompt[ex.index] = correct_per_prompt.get(ex.index, 0) + int(r > 0)
            f.write(json.dumps({"index": ex.index, "sample": j, "response": text, "label": ex.label,
                                "reward": r, "length": len(gen.response_ids), "finished": gen.finished}) + "\n")
    n = len(rewards)
    summary = {
        "checkpoint": checkpoint,
        "n_prompts": len(examples),
        "k": k,
        "n_responses": n,
        "eval_seed": eval_seed,
        "subset_sha256": subset_digest(examples),
        "truncation": truncated / n,
        "mean_length": sum(lengths) / n,
        "mean_reward": sum(rewards) / n,
        "all_zero_reward": not any(rewards),
        "engine": engine.profile()["engine"],  # which rollout engine evaluated (workload.engine)
        **({"graded_reward": True} if scorer.takes_row else {}),  # a user's reward may be any value in [0, 1]
    }
    for kk in PASS_AT:
        if kk <= k:
            summary[f"pass@{kk}"] = sum(pass_at_k(k, c, kk) for c in correct_per_prompt.values()) / len(examples)
    return summary


def write_subset(path: Path, examples: list[Example]) -> None:
    """The frozen subset beside the responses (``EVAL_SUBSET``): the labels the evidence re-scores them against,
    pinned by the summary's ``subset_sha256``. Renamed into place: a reader never sees a torn one."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_bytes(subset_rows_bytes(examples))
    os.replace(partial, path)


class SharedEvaluationLinkError(TrainerError, RuntimeError):
    """A symbolic link where the sweep's shared initial evaluation lives (one line: the link and the fix)."""


@dataclass(frozen=True)
class SharedInitial:
    """The sweep's initial-checkpoint evaluation as one job sees it."""

    summary: dict  # what ``evaluate`` returned when it was computed
    reference: dict  # what the job's eval.json records: path (relative to the sweep), key, sha256
    computed: bool  # this job computed it (else it reused another job's)


def read_shared_initial(directory: Path, key: str) -> tuple[dict, str] | None:
    """The shared evaluation's record and the SHA256 of the ``eval.json`` bytes it was parsed from,
    if it is this key's and sound by ``shared_evaluation_problems`` (the rules the evidence checks
    it by), else None: never trust a half-written one (a job killed while computing it leaves no
    valid ``eval.json``), nor one the evidence would reject (it is computed again instead). Each
    file is read once and its digest taken from the bytes checked, so the reference a job records
    names the file it used."""
    try:
        data, digest = read_with_sha256(directory / EVAL_RECORD)
        record = loads_strict(data)  # as the evidence reads it
        responses = (directory / INITIAL_EVAL_RESPONSES).read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key:
        return None
    _, problems = shared_evaluation_problems(record, responses)
    return None if problems else (record, digest)


def shared_initial_eval(sweep_dir: Path, identity: dict, compute: Callable[[Path], dict],
                        computed_log: Path | None = None) -> SharedInitial | None:
    """The initial evaluation with this ``identity``, computed at most once per sweep.

    Holds an exclusive ``flock`` on ``<sweep>/initial_eval/<key12>.lock`` while it reads or
    computes (Linux clients take it on NFS as a cluster-wide lock, so array tasks on several nodes
    exclude each other); ``compute(responses_path)`` runs only when no valid evaluation is there.
    The responses are renamed into place before ``eval.json`` is written atomically, so ``eval.json``
    marks a complete evaluation. When this job computes it, its reference (path, key and the SHA256 of the
    ``eval.json`` about to be written) is appended to ``computed_log`` (``INITIAL_EVAL_COMPUTED`` in the run
    directory) first: the evidence trusts a shared evaluation only when a job of the sweep so recorded it.
    Returns None when the file system refuses the lock (the caller then evaluates into its own run directory).
    """
    key = identity_key(identity)
    relpath = initial_eval_relpath(key)
    directory = sweep_dir / relpath
    directory.parent.mkdir(parents=True, exist_ok=True)
    link = linked_part(sweep_dir, relpath, (EVAL_RECORD, INITIAL_EVAL_RESPONSES, f"../{directory.name}.lock"))
    if link is not None:  # never read (nor written) through a link: the evaluation would not be the sweep's
        raise SharedEvaluationLinkError(f"{sweep_dir / link} is a symbolic link: a sweep's shared initial evaluation "
                                        f"lives inside the sweep; remove the link and run the job again")
    with open(directory.parent / f"{directory.name}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:
            return None
        found = read_shared_initial(directory, key)
        computed = found is None
        if computed:
            directory.mkdir(exist_ok=True)
            (directory / EVAL_RECORD).unlink(missing_ok=True)
            partial = directory / f"{INITIAL_EVAL_RESPONSES}.tmp"
            summary = compute(partial)
            os.replace(partial, directory / INITIAL_EVAL_RESPONSES)
            record = {"key": key, "identity": identity, "initial": summary,
                      "responses_sha256": sha256_file(directory / INITIAL_EVAL_RESPONSES)}
            if computed_log is not None:  # before eval.json: no reader ever finds it unrecorded
                written = {"path": f"{relpath}/{EVAL_RECORD}", "key": key,
                           "sha256": hashlib.sha256(json_record_bytes(record)).hexdigest()}
                computed_log.parent.mkdir(parents=True, exist_ok=True)
                with open(computed_log, "a", encoding="utf-8") as log:
                    log.write(json.dumps(written, sort_keys=True) + "\n")
            digest = atomic_write_json(directory / EVAL_RECORD, record)
        else:
            record, digest = found
        reference = {"path": f"{relpath}/{EVAL_RECORD}", "key": key, "sha256": digest}
    return SharedInitial(record["initial"], reference, computed)
