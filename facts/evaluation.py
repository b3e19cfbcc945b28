"""The eval's estimator, the frozen subset's canonical form, the shared initial evaluation's key, what makes
a shared evaluation sound and which statistics no evaluation can have, stated once: the trainer computes
them (and checks a shared evaluation before it reuses one), the evidence recomputes them (re-scoring every
response against the subset's label with the run's reward, ``facts.reward``) and holds every stored summary to
the rules of possible statistics."""

from __future__ import annotations

import hashlib
import json
import math
from math import comb

from facts.files import INITIAL_EVAL_RESPONSES
from facts.reward import DEFAULT_REWARD, Reward
from facts.reward import reward as reward_named

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


def subset_bytes(rows) -> bytes:
    """The frozen evaluation subset's canonical bytes: the compact JSON of ``[[index, question, label], ...]``
    (non-ASCII kept) in evaluation order; a workload whose reward is a user's function of the row adds the row's
    fields as a fourth element (``[index, question, label, row]``), what the function is handed. Its SHA256 is the
    ``subset_sha256`` every eval summary records, so the file the trainer writes (``EVAL_SUBSET``) is pinned by the
    summaries that name it."""
    return json.dumps([[int(r[0]), r[1], r[2], *r[3:]] for r in rows], ensure_ascii=False,
                      separators=(",", ":")).encode()


def _subset(data: bytes) -> list[list]:
    rows = json.loads(data)
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) in (3, 4) and isinstance(r[0], int)
                                             and not isinstance(r[0], bool) and all(isinstance(v, str) for v in r[1:3])
                                             and (len(r) == 3 or isinstance(r[3], dict)) for r in rows):
        raise ValueError("not a list of [index, question, label] rows")
    if len({r[0] for r in rows}) != len(rows):
        raise ValueError("a row index appears twice")
    return rows


def subset_labels(data: bytes) -> dict[int, str]:
    """The labels by row index of a subset file's bytes (``subset_bytes``' form); ``ValueError`` if it is not."""
    return {r[0]: r[2] for r in _subset(data)}


def subset_rows(data: bytes) -> dict[int, dict]:
    """The rows by row index a subset file carries for a user's reward (``subset_bytes``' fourth element)."""
    return {r[0]: r[3] for r in _subset(data) if len(r) == 4}


def rescore(response: dict, labels: dict[int, str], scorer: Reward | None = None,
            rows: dict[int, dict] | None = None) -> float:
    """A response record's reward as the evaluation must have scored it: the run's reward (``scorer``; default the
    embedded default's, ``gsm8k_hash``) of the response with the frozen subset's label of its row, or its row for a
    user's function (never the record's own label or reward)."""
    scorer = scorer or reward_named(DEFAULT_REWARD)
    index = response["index"]
    return scorer.score(response["response"], labels[index], (rows or {}).get(index), f"row {index}")


def sample_problems(pairs, rows, k: int) -> list[tuple[int | None, int, object, str]]:
    """Where an evaluation's responses are not each row's samples ``0..k-1`` exactly once: ``pairs`` are the
    (line, row, sample) of its response records in file order, ``rows`` the rows it evaluated. Returns (line or
    None, row, sample, reason) per record whose sample is not one of ``0..k-1`` or repeats one of its row (a row
    with k + 1 records has one of these), and per (row, sample) of ``rows`` no record holds. Counting records
    per row is not enough: a row's one correct sample copied over its others keeps the count and lifts pass@k."""
    first: dict[tuple[int, int], int | None] = {}
    found = []
    for line, row, sample in pairs:
        if not isinstance(sample, int) or isinstance(sample, bool) or not 0 <= sample < k:
            found.append((line, row, sample, f"sample {sample!r} is not one of the row's samples 0..{k - 1}"))
        elif (row, sample) in first:
            on = first[(row, sample)]
            found.append((line, row, sample, "a second record of this (row, sample)"
                          + (f", first on line {on}" if on is not None else "")))
        else:
            first[(row, sample)] = line
    for row in sorted(rows):
        found += [(None, row, sample, f"missing: no record of this (row, sample); each row has samples 0..{k - 1} "
                                      "once each") for sample in range(k) if (row, sample) not in first]
    return found


def model_files(inputs: dict[str, str], model_path: str) -> dict[str, str]:
    """The pinned inputs (``{path: sha256}``) that lie in the model directory ``model_path``: what an
    evaluation's identity names as its model, and what the evidence holds it to."""
    model_dir = str(model_path).rstrip("/") + "/"
    return {path: digest for path, digest in sorted(inputs.items()) if path.startswith(model_dir)}


def prompt_counts(responses: list[dict], rewards: list[float] | None = None) -> dict[int, tuple[int, int]]:
    """Per prompt (its row ``index``), in first-seen order: (correct responses, responses), a response correct
    when its reward is > 0; ``rewards``: the responses' re-scored rewards in their order, else the records' own."""
    rewards = [r["reward"] for r in responses] if rewards is None else rewards
    counts: dict[int, tuple[int, int]] = {}
    for r, reward in zip(responses, rewards):
        c, n = counts.get(r["index"], (0, 0))
        counts[r["index"]] = (c + int(reward > 0), n + 1)
    return counts


def recompute_eval(responses: list[dict], k: int, rewards: list[float] | None = None) -> dict:
    """An eval summary's statistics from its response records: pass@j per prompt (unbiased, c =
    responses with reward > 0) averaged over prompts, mean reward, mean length, truncated share;
    ``k`` is the samples per prompt (-1 when prompts differ); ``rewards``: the responses' re-scored
    rewards (``rescore``) in their order, else the records' own."""
    rewards = [r["reward"] for r in responses] if rewards is None else rewards
    counts = prompt_counts(responses, rewards)
    correct = {index: c for index, (c, _) in counts.items()}
    samples = {index: n for index, (_, n) in counts.items()}
    n = len(responses)
    per_prompt = set(samples.values())
    stats = {"n_responses": n, "n_prompts": len(correct), "k": per_prompt.pop() if len(per_prompt) == 1 else -1,
             "mean_reward": sum(rewards) / n,
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
        records = [json.loads(line) for line in responses.splitlines() if line.strip()]
        recomputed = recompute_eval(records, int(summary["k"]))
        misplaced = sample_problems([(None, r["index"], r.get("sample")) for r in records],
                                    {r["index"] for r in records}, int(summary["k"]))
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
        return None, (f"unreadable shared evaluation ({type(exc).__name__})",)
    problems = tuple(f"{name} {summary.get(name)!r} does not recompute from its responses ({value!r})"
                     for name, value in recomputed.items()
                     if not (_finite_number(summary.get(name))
                             and math.isclose(summary[name], value, rel_tol=1e-12, abs_tol=1e-12)))
    if misplaced:  # one line: the responses file's own findings name each (row, sample)
        _, row, sample, reason = misplaced[0]
        more = f" (+{len(misplaced) - 1} more)" if len(misplaced) > 1 else ""
        problems += (f"{INITIAL_EVAL_RESPONSES}: row {row}, sample {sample!r}: {reason}{more}",)
    return summary, problems


# Impossible statistics: what no evaluation of n_prompts prompts x k samples (rewards 0 or 1, lengths in
# tokens) can report, whatever its responses. One short function per rule, each returning the reason or None.
LATTICE_TOLERANCE = 1e-6  # a count recovered from a float rate: float rounding stays far below this


def _off_lattice(value: float, cells: int) -> bool:
    return abs(value * cells - round(value * cells)) > LATTICE_TOLERANCE


def responses_are_prompts_times_k(s: dict) -> str | None:
    """``n_responses = n_prompts x k``: every prompt is sampled k times."""
    if s["n_responses"] != s["n_prompts"] * s["k"]:
        return f"n_responses {s['n_responses']} is not n_prompts {s['n_prompts']} x k {s['k']}"
    return None


def pass_at_is_on_its_lattice(s: dict) -> str | None:
    """pass@j x n_prompts x C(k, j) is an integer: pass@j = 1 - sum_i C(k - c_i, j) / (n_prompts C(k, j)) with
    integer c_i (the unbiased estimator averaged over prompts), so for j = 1 pass@1 x n_prompts x k is the
    number of correct responses."""
    for j in _pass_levels(s):
        cells = s["n_prompts"] * comb(s["k"], j)
        if _off_lattice(s[f"pass@{j}"], cells):
            return (f"pass@{j} {s[f'pass@{j}']!r} is not a whole multiple of 1/{cells} (1 / (n_prompts x C(k, {j}))): "
                    f"no {s['n_prompts']} prompts x {s['k']} samples give it")
    return None


def pass_at_does_not_decrease(s: dict) -> str | None:
    """pass@j <= pass@j' for j < j': one more draw of a prompt's samples cannot lower the chance one is correct."""
    levels = _pass_levels(s)
    for a, b in zip(levels, levels[1:]):
        if s[f"pass@{b}"] < s[f"pass@{a}"] - LATTICE_TOLERANCE:
            return f"pass@{b} {s[f'pass@{b}']!r} < pass@{a} {s[f'pass@{a}']!r}: pass@j cannot decrease with j"
    return None


def pass_at_within_union_bound(s: dict) -> str | None:
    """pass@j <= min(1, j x pass@1): j draws find a correct sample at most j times as often as one draw
    (a union bound, per prompt and so on the mean)."""
    for j in _pass_levels(s)[1:]:
        bound = min(1.0, j * s["pass@1"])
        if s[f"pass@{j}"] > bound + LATTICE_TOLERANCE:
            return f"pass@{j} {s[f'pass@{j}']!r} > min(1, {j} x pass@1) = {bound!r}"
    return None


def shares_are_whole_responses(s: dict) -> str | None:
    """truncation x n_responses, mean_reward x n_responses and mean_length x n_responses are integers: a share
    of responses, of 0/1 rewards (every built-in reward's; a user's reward may be graded, and its evaluations say
    ``graded_reward``) and of token counts."""
    for name in ("truncation", "mean_reward", "mean_length"):
        if name == "mean_reward" and s.get("graded_reward") is True:
            continue
        if name in s and _off_lattice(s[name], s["n_responses"]):
            return f"{name} {s[name]!r} is not a whole multiple of 1/{s['n_responses']} (1 / n_responses)"
    return None


def _pass_levels(s: dict) -> list[int]:
    return [j for j in PASS_AT if j <= s["k"] and f"pass@{j}" in s]


STATISTIC_RULES = (responses_are_prompts_times_k, pass_at_is_on_its_lattice, pass_at_does_not_decrease,
                   pass_at_within_union_bound, shares_are_whole_responses)


# The statistics that are shares of an evaluation's responses (or of its prompts' draws), so in [0, 1].
SHARE_STATISTICS = (*(f"pass@{j}" for j in PASS_AT), "truncation", "mean_reward")


def impossible_value(name: str, value, n_prompts: int, k: int) -> list[str]:
    """What no evaluation of ``n_prompts`` prompts x ``k`` samples can report as its statistic ``name`` (a pass@j,
    truncation, mean reward or length) when it is stored alone, as a verdict stores a run's value: a share outside
    [0, 1], and the ``STATISTIC_RULES`` that one value is held to (its lattice). [] for another name, or counts
    and a value the rules cannot be applied to (the recomputation reports those)."""
    if not (name in SHARE_STATISTICS or name == "mean_length") or not _finite_number(value):
        return []
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (n_prompts, k)):
        return []
    if name in SHARE_STATISTICS and not 0 <= value <= 1:
        return [f"{name} {value!r} is outside [0, 1]: it is a share of the responses"]
    summary = {"n_prompts": n_prompts, "k": k, "n_responses": n_prompts * k, name: value}
    return [reason for rule in STATISTIC_RULES if (reason := rule(summary)) is not None]


def impossible_statistics(summary: dict) -> list[str]:
    """What in an eval summary no evaluation can report (``STATISTIC_RULES``); [] when every rule holds or the
    summary lacks positive integer counts and finite rates to apply them to (the field checks report that)."""
    summary = {name: value for name, value in summary.items() if value is not None}  # a CSV's pass@j with j > k
    counts = [summary.get(name) for name in ("n_prompts", "k", "n_responses")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in counts):
        return []
    rates = {name: value for name, value in summary.items()
             if name in ("truncation", "mean_reward", "mean_length") or name.startswith("pass@")}
    if not all(_finite_number(v) for v in rates.values()) or "pass@1" not in summary:
        return []
    return [reason for rule in STATISTIC_RULES if (reason := rule(summary)) is not None]
