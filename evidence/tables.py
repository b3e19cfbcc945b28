"""Every table of the report, computed from ``BundleData`` only, one row group per arm.

Each table carries its machine-readable form (CSV columns at full precision, written to
``tables/<name>.csv``) and its display form (markdown cells rounded as seed 000 rounds them).
The statistics themselves are defined in ``evidence.stats``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

from evidence import headline, stats
from evidence.dataset import BundleData, csv_text
from evidence.statistics import MDE_POWER, family, hierarchical, minimum_detectable_effect, noise, robust
from evidence.statistics.resampling import (
    BOOTSTRAP_METHOD,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    paired_bootstrap_interval,
)
from evidence.sweep import algo_name, algo_sort_key, arm_name
from facts import ALGORITHM_FIELD, ALGORITHMS, KL_IN_REWARD
from facts.certify import RESUME
from facts.trainers import PROOFGRID_TRAINER

# |adv_norm_std - 1| below this counts as "exactly 1" in the normalisation diagnostics.
NORM_STD_TOL = 1e-6
CONTRACT_COLUMNS = ("advantage", "normalization", "kl_regularization")


@dataclass
class Table:
    """One report table: CSV form (full precision) and markdown form (rounded)."""

    name: str
    csv_columns: tuple[str, ...]
    csv_rows: list[list]
    md_columns: tuple[str, ...]
    md_rows: list[list[str]]

    def csv(self) -> str:
        return csv_text(self.csv_columns, self.csv_rows)

    def markdown(self) -> str:
        if not self.md_rows:
            return "_No rows: no accepted run contributes to this table._\n"

        def esc(text: str) -> str:
            return str(text).replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(esc(c) for c in self.md_columns) + " |",
                 "|" + "|".join("---" for _ in self.md_columns) + "|"]
        lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in self.md_rows]
        return "\n".join(lines) + "\n"


# ---- formatting (display only; CSV keeps full precision) -------------------------------------

def no_negative_zero(text: str) -> str:
    """A number that rounds to zero is written without a sign: ``0.000``, never ``-0.000``."""
    return text[1:] if text[:1] in ("-", "+") and not any(c in "123456789" for c in text) else text


def fmt(value: float | None, digits: int, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{no_negative_zero(f'{value:.{digits}f}')}{unit}"


def fmt_signed(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else no_negative_zero(f"{value:+.{digits}f}")


def fmt_summary(summary: stats.Summary, digits: int, unit: str = "", signed: bool = False) -> str:
    """``mean ± SD``; ``mean (n<2)`` for one seed; ``—`` for none. Never NaN."""
    if summary.n == 0 or summary.mean is None:
        return "—"
    shown = fmt_signed(summary.mean, digits) if signed else fmt(summary.mean, digits)
    if summary.sd is None:
        return f"{shown}{unit} (n<2)"
    return f"{shown} ± {summary.sd:.{digits}f}{unit}"


def fmt_interval(interval: tuple[float, float] | None, digits: int = 4) -> str:
    return "n<2" if interval is None else f"[{fmt(interval[0], digits)}, {fmt(interval[1], digits)}]"


# ---- selection ------------------------------------------------------------------------------

def algos(data: BundleData) -> list[str]:
    return sorted(data.sweep["algos"], key=algo_sort_key)


def arms(data: BundleData) -> list[str]:
    """Arm labels in report order (one per algorithm for a sweep that varies only the algorithm)."""
    return list(data.arms)


def display(data: BundleData, arm: str) -> str:
    """An arm's name in the report: ``GRPO`` for the plain ``grpo`` arm, else its label."""
    return arm_name(arm, data.arm_algo(arm))


def arm_header(data: BundleData) -> str:
    """The first column's title: "Algorithm" while every arm is just its algorithm, else "Arm"."""
    return "Algorithm" if all(a == data.arm_algo(a) for a in arms(data)) else "Arm"


def declared_algorithm(data: BundleData, arm: str) -> dict:
    """What an arm's runs declare they ran (``run.json``'s ``algorithm``: contract, KL placement,
    normalisation): the first accepted run that declares it, else the algorithm's own record (a run
    written before runs declared it, or an arm without an accepted run), else nothing."""
    for s in seeds(data):
        declared = data.runs.get((arm, s), {}).get(ALGORITHM_FIELD)
        if isinstance(declared, dict):
            return declared
    record = ALGORITHMS.get(data.arm_algo(arm))
    return record.declaration() if record is not None else {}


def kl_in_reward(data: BundleData, arm: str) -> bool:
    """Whether the arm's algorithm puts its reference KL inside the shaped reward (k1), not in a loss."""
    return declared_algorithm(data, arm).get("kl_placement") == KL_IN_REWARD


def seeds(data: BundleData) -> list[int]:
    return list(data.sweep["seeds"])


def accepted_runs(data: BundleData, arm: str) -> list[int]:
    """Seeds of the accepted runs of ``arm`` that have step records, in grid order."""
    return [s for s in seeds(data) if (arm, s) in data.steps]


def series(data: BundleData, arm: str, seed: int, key: str) -> list[float] | None:
    """One metric over the steps of one accepted run; None if the run does not log it."""
    values = [r.get(key) for r in data.steps[(arm, seed)]]
    return None if not values or any(v is None for v in values) else values


def job_id(data: BundleData, arm: str, seed: int) -> str:
    return data.index_row(arm, seed)["job_id"]


def window_label(data: BundleData) -> str:
    """``40..49``: the last-K window of the runs (all accepted runs have n_updates steps)."""
    n = data.n_updates
    k = min(data.last_k, n)
    return f"{n - k}..{n - 1}"


# ---- per-run summaries ------------------------------------------------------------------------

STABILITY = (  # (metric key, CSV stem, display name, digits)
    ("rollout/raw_reward", "raw_reward", "raw reward", 4),
    ("train/pg_loss", "pg_loss", "PG loss", 6),
    ("train/kl_loss", "kl_loss", "independent KL loss", 6),
    ("train/grad_norm", "grad_norm", "grad norm", 4),
)
EFFICIENCY = (  # (metric key, CSV stem, display name, digits, unit)
    ("rollout/raw_reward", "raw_reward", "Raw reward", 4, ""),
    ("rollout/response_len", "response_len", "Mean response length", 1, ""),
    ("rollout/truncated", "truncated", "Truncation", 4, ""),
    ("perf/response_tok_per_s", "response_tok_per_s", "Response tok/s", 1, ""),
    ("perf/peak_mem_gib", "peak_mem_gib", "Peak memory", 2, " GiB"),
)
EVAL_METRICS = (("pass@1", 4), ("pass@2", 4), ("pass@4", 4), ("truncation", 4), ("mean_length", 1))


def run_last_k(data: BundleData, arm: str, seed: int, key: str) -> float | None:
    values = series(data, arm, seed, key)
    return None if values is None else stats.last_k_mean(values, data.last_k)


def run_all_steps(data: BundleData, arm: str, seed: int, key: str) -> float | None:
    values = series(data, arm, seed, key)
    return None if values is None else stats.all_steps_mean(values)


def run_elapsed_min(data: BundleData, arm: str, seed: int) -> float | None:
    text = data.index_row(arm, seed)["elapsed_s"]
    return None if text == "" else float(text) / 60


def _summarise(values: list[float | None]) -> stats.Summary:
    return stats.across_seeds([v for v in values if v is not None])


def kl_not_applicable(data: BundleData, arm: str) -> str:
    """The KL-loss cell of an arm that logs no KL loss: its KL is k1 reward shaping, or it has none."""
    return "N/A (k1 reward shaping)" if kl_in_reward(data, arm) else "N/A (no KL-loss term)"


# ---- tables -------------------------------------------------------------------------------------

def jobs_table(data: BundleData) -> Table:
    cols = ("job", "arm", "algo", "seed", "job_id", "scheduler_state", "exit_code", "elapsed_s",
            "steps_accepted", "steps_expected", "eval_responses_initial", "eval_responses_final", "accepted", "reason")
    rows = [[r.get(c, r["algo"] if c == "arm" else None) for c in cols] for r in data.index]
    md = [[arm_name(r.get("arm") or r["algo"], r["algo"]), r["seed"], r["job_id"] or "—", r["scheduler_state"] or "—", r["exit_code"] or "—",
           fmt(float(r["elapsed_s"]) / 60, 1) if r["elapsed_s"] else "—",
           f"{r['steps_accepted']}/{r['steps_expected']}",
           f"{_initial_responses(data, r)} / {r['eval_responses_final'] or '—'}",
           r["accepted"], r["reason"] or "—"] for r in data.index]
    return Table("jobs", cols, rows,
                 (arm_header(data), "Seed", "Job", "Scheduler state", "Exit", "Elapsed (min)", "Steps",
                  "Eval responses (initial / final)", "Accepted", "Reason"), md)


def _initial_responses(data: BundleData, row: dict) -> str:
    """A job's initial-control response count, or ``shared`` when the sweep evaluated it once for
    every job (its count is in the ``eval_initial`` table, once)."""
    initial = data.evals.get((row.get("arm") or row["algo"], int(row["seed"])), {}).get("initial", {})
    return "shared" if initial.get("initial_eval") else (row["eval_responses_initial"] or "—")


def _contract_row(data: BundleData, algo: str) -> list[str]:
    """An algorithm's contract cells as its runs declare them (the first arm running it)."""
    contract = next((declared_algorithm(data, a).get("contract") for a in arms(data) if data.arm_algo(a) == algo), None)
    if not isinstance(contract, dict):
        return ["see configuration"] * len(CONTRACT_COLUMNS)
    return [str(contract.get(column, "see configuration")) for column in CONTRACT_COLUMNS]


def trainer_of(data: BundleData, arm: str) -> str | None:
    """The trainer an arm's runs declare (a trainer that is not proofgrid's names itself in its run's
    ``algorithm`` declaration), else None: proofgrid's own."""
    trainer = declared_algorithm(data, arm).get("trainer")
    return str(trainer) if trainer else None


def algorithm_contract_table(data: BundleData) -> Table:
    """One row per algorithm; one per arm, with its trainer and policy loss, when some arm ran on a trainer
    that is not proofgrid's (the same algorithm then ran differently on each trainer)."""
    if not any(trainer_of(data, a) for a in arms(data)):
        rows = [[a, algo_name(a), *_contract_row(data, a)] for a in algos(data)]
        return Table("algorithm_contract", ("algo", "algorithm", "advantage", "normalization", "kl_regularization"),
                     rows, ("Algorithm", "Advantage", "Normalization", "KL regularization"), [r[1:] for r in rows])
    rows = []
    for arm in arms(data):
        contract = declared_algorithm(data, arm).get("contract")
        contract = contract if isinstance(contract, dict) else {}
        cells = [str(contract.get(c, "see configuration")) for c in (*CONTRACT_COLUMNS, "loss")]
        rows.append([arm, trainer_of(data, arm) or PROOFGRID_TRAINER, data.arm_algo(arm),
                     algo_name(data.arm_algo(arm)), *cells])
    return Table("algorithm_contract", ("arm", "trainer", "algo", "algorithm", "advantage", "normalization",
                                        "kl_regularization", "loss"),
                 rows, ("Arm", "Trainer", "Algorithm", "Advantage", "Normalization", "KL regularization", "Loss"),
                 [[r[0], r[1], *r[3:]] for r in rows])


def flatten(value, prefix: str = "") -> dict[str, str]:
    """Nested settings as dotted keys and text values: ``{"algo": {"kl_coef": 0.0}}`` -> ``{"algo.kl_coef": "0.0"}``."""
    if isinstance(value, dict):
        out = {}
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}{key}."))
        return out
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return {prefix[:-1]: text}


def _configs(data: BundleData) -> dict[tuple[str, int], dict[str, str]]:
    return {run: flatten(data.runs.get(run, {}).get("config") or {}) for run in data.accepted}


def _distinct(values) -> str:
    return " / ".join(sorted({str(v) for v in values if v is not None and v != ""})) or "—"


# Settings that name or place a run without changing its numbers: never "a setting that differs".
LABEL_SETTINGS = ("name", "short", "display_name", "output_dir", "dry_run", "wait", "formal", "resume")


def changes_the_numbers(key: str) -> bool:
    """Whether a resolved setting can change a run's numbers (not a name, a path, a launcher flag, debug)."""
    return key.rsplit(".", 1)[-1] not in LABEL_SETTINGS and not key.startswith(("debug.", "hydra."))


def algorithm_config_table(data: BundleData) -> Table:
    """Configuration keys that differ between arms but not between seeds of one arm, and that can change
    the numbers (names, paths and launcher flags are left to the resolved_config appendix)."""
    configs = _configs(data)
    present = [a for a in arms(data) if any(run[0] == a for run in configs)]
    keys = sorted({k for c in configs.values() for k in c if changes_the_numbers(k)})
    rows = []
    for key in keys:
        per_algo = {}
        for a in present:
            values = {configs[run].get(key) for run in configs if run[0] == a}
            if len(values) != 1:
                break
            per_algo[a] = values.pop()
        else:
            if len(set(per_algo.values())) > 1:
                rows.append([key] + [per_algo[a] if per_algo[a] is not None else "—" for a in present])
    return Table("algorithm_config", ("setting", *present), rows,
                 ("Setting", *(display(data, a) for a in present)), rows)


# The environment rows whose value is a digest: the report shows them in its appendix.
SOURCE_COMMIT_ITEM, SUBSET_DIGEST_ITEM, INPUT_ITEM_PREFIX = "Source commit", "Eval subset SHA256", "Input: "


def is_digest_item(item: str) -> bool:
    """An environment row whose value is a digest (the commit, an input's or the subset's SHA256): the
    report's appendix, not its environment section."""
    return item in (SOURCE_COMMIT_ITEM, SUBSET_DIGEST_ITEM) or item.startswith(INPUT_ITEM_PREFIX)


def environment_table(data: BundleData) -> Table:
    sweep = data.sweep
    runs = [data.runs.get(run, {}) for run in data.accepted]
    rows: list[list[str]] = [
        ["Workload", str(sweep.get("workload", "—"))],
        [SOURCE_COMMIT_ITEM, str(sweep.get("source_commit") or "—")],
        ["Algorithms", ", ".join(algo_name(a) for a in algos(data))],
        *([["Arms", "; ".join(f"{a}: " + ", ".join(f"{k}={v}" for k, v in o.items()) for a, (_, o) in data.arms.items())]]
          if arm_header(data) == "Arm" else []),
        ["Seeds", ", ".join(str(s) for s in seeds(data))],
        ["Updates per run", str(data.n_updates)],
    ]
    cluster = sweep.get("cluster")
    if cluster is not None:
        rows.append(["Cluster", cluster if isinstance(cluster, str) else json.dumps(cluster, sort_keys=True)])
    for name in sorted({k for r in runs for k in (r.get("versions") or {})}):
        rows.append([f"Version: {name}", _distinct((r.get("versions") or {}).get(name) for r in runs)])
    for path in sorted({k for r in runs for k in (r.get("inputs") or {})}):
        rows.append([f"{INPUT_ITEM_PREFIX}{path}", _distinct((r.get("inputs") or {}).get(path) for r in runs)])
    finals = [e["final"] for e in data.evals.values() if "final" in e]
    if finals:
        rows.append([SUBSET_DIGEST_ITEM, _distinct(e["subset_sha256"] for e in finals)])
        rows.append(["Eval prompts x samples = responses per checkpoint",
                     _distinct(f"{e['n_prompts']} x {e['k']} = {e['n_responses']}" for e in finals)])
        rows.append(["Eval seed", _distinct(e["eval_seed"] for e in finals)])
    rows.append(["Resolved configuration", "every setting of every run: tables/resolved_config.csv (appendix)"])
    return Table("environment", ("item", "value"), rows, ("Item", "Frozen value"), rows)


def resolved_config_table(data: BundleData) -> Table:
    """The appendix: every resolved setting of every accepted run, one row per (setting, arm), with its
    distinct values across seeds. The report shows only the settings that differ between arms."""
    configs = _configs(data)
    rows = []
    for key in sorted({k for c in configs.values() for k in c}):
        for a in arms(data):
            values = [c.get(key) for run, c in configs.items() if run[0] == a]
            if values:
                rows.append([key, a, _distinct(values)])
    return Table("resolved_config", ("setting", "arm", "value"), rows, ("Setting", "Arm", "Value"), rows)


def stability_tables(data: BundleData) -> tuple[Table, Table]:
    k_label = f"Last-{data.last_k}"
    agg_rows, agg_md, run_rows, run_md = [], [], [], []
    for a in arms(data):
        algo = data.arm_algo(a)
        run_seeds = accepted_runs(data, a)
        per_metric = {key: [run_last_k(data, a, s, key) for s in run_seeds] for key, *_ in STABILITY}
        row = [a, algo, algo_name(algo), len(run_seeds), data.last_k]
        md = [display(data, a), str(len(run_seeds))]
        for key, _, _, digits in STABILITY:
            summary = _summarise(per_metric[key])
            row += [summary.mean, summary.sd]
            md.append(kl_not_applicable(data, a) if key == "train/kl_loss" and summary.n == 0 and run_seeds
                      else fmt_summary(summary, digits))
        agg_rows.append(row)
        agg_md.append(md)
        for i, s in enumerate(run_seeds):
            run_rows.append([a, algo, s, job_id(data, a, s)] + [per_metric[key][i] for key, *_ in STABILITY])
            run_md.append([display(data, a), str(s), job_id(data, a, s) or "—"] + [
                kl_not_applicable(data, a) if per_metric[key][i] is None else fmt(per_metric[key][i], d)
                for key, _, _, d in STABILITY])
    cols = ("arm", "algo", "algorithm", "n_runs", "last_k")
    for _, stem, _, _ in STABILITY:
        cols += (f"{stem}_mean", f"{stem}_sd")
    md_cols = (arm_header(data), "n") + tuple(f"{k_label} {name}" for _, _, name, _ in STABILITY)
    per_run_cols = ("arm", "algo", "seed", "job_id") + tuple(f"last_k_{stem}" for _, stem, _, _ in STABILITY)
    per_run_md = (arm_header(data), "Seed", "Job") + tuple(f"{k_label} {name}" for _, _, name, _ in STABILITY)
    return (Table("stability", cols, agg_rows, md_cols, agg_md),
            Table("stability_per_run", per_run_cols, run_rows, per_run_md, run_md))


def normalisation_table(data: BundleData) -> Table:
    """Step counts behind seed 000's remarks on advantage normalisation and degenerate steps."""
    rows, md = [], []
    for a in arms(data):
        records = [r for s in accepted_runs(data, a) for r in data.steps[(a, s)]]

        def count(predicate: Callable[[dict], bool], recs=records) -> int:
            return sum(1 for r in recs if predicate(r))

        counts = [
            len(records),
            count(lambda r: r.get("rollout/adv_norm_std") is not None and abs(r["rollout/adv_norm_std"] - 1) <= NORM_STD_TOL),
            count(lambda r: r.get("rollout/zero_variance") == 1),
            count(lambda r: r.get("rollout/all_zero_reward") == 1),
            count(lambda r: r.get("train/ppo_kl") not in (None, 0.0)),
        ]
        rows.append([a, data.arm_algo(a), algo_name(data.arm_algo(a)), *counts])
        md.append([display(data, a), *(str(c) for c in counts)])
    return Table("normalisation",
                 ("arm", "algo", "algorithm", "steps", "adv_norm_std_one_steps", "zero_variance_steps",
                  "all_zero_reward_steps", "ppo_kl_nonzero_steps"), rows,
                 (arm_header(data), "Steps", "Normalised-advantage SD = 1", "Zero-variance steps (finite zeros)",
                  "All-zero-reward steps", "Steps with ppo_kl ≠ 0"), md)


def efficiency_tables(data: BundleData) -> tuple[Table, Table]:
    agg_rows, agg_md, run_rows, run_md = [], [], [], []
    for a in arms(data):
        algo = data.arm_algo(a)
        run_seeds = accepted_runs(data, a)
        per_metric = {key: [run_all_steps(data, a, s, key) for s in run_seeds] for key, *_ in EFFICIENCY}
        elapsed = [run_elapsed_min(data, a, s) for s in run_seeds]
        row, md = [a, algo, algo_name(algo), len(run_seeds)], [display(data, a), str(len(run_seeds))]
        for key, _, _, digits, unit in EFFICIENCY:
            summary = _summarise(per_metric[key])
            row += [summary.mean, summary.sd]
            md.append(fmt_summary(summary, digits, unit))
        summary = _summarise(elapsed)
        row += [summary.mean, summary.sd]
        md.append(fmt_summary(summary, 1))
        agg_rows.append(row)
        agg_md.append(md)
        for i, s in enumerate(run_seeds):
            values = [per_metric[key][i] for key, *_ in EFFICIENCY] + [elapsed[i]]
            run_rows.append([a, algo, s, job_id(data, a, s), *values])
            digits = [d for _, _, _, d, _ in EFFICIENCY] + [1]
            run_md.append([display(data, a), str(s), job_id(data, a, s) or "—"] +
                          [fmt(v, d) for v, d in zip(values, digits)])
    stems = [stem for _, stem, *_ in EFFICIENCY] + ["elapsed_min"]
    names = [name + (" (GiB)" if unit else "") for _, _, name, _, unit in EFFICIENCY] + ["Elapsed (min)"]
    cols = ("arm", "algo", "algorithm", "n_runs") + tuple(c for s in stems for c in (f"{s}_mean", f"{s}_sd"))
    header = arm_header(data)
    return (Table("efficiency", cols, agg_rows, (header, "n", *names[:-2], "Peak memory", names[-1]), agg_md),
            Table("efficiency_per_run",
                  ("arm", "algo", "seed", "job_id", *(f"all_steps_{s}" for s in stems[:-1]), "elapsed_min"),
                  run_rows, (header, "Seed", "Job", *names), run_md))


def eval_runs(data: BundleData, arm: str) -> list[int]:
    """Seeds of accepted runs of ``arm`` with both an initial and a final evaluation."""
    return [s for s in seeds(data) if {"initial", "final"} <= set(data.evals.get((arm, s), {}))]


def eval_gain(data: BundleData, arm: str, seed: int, metric: str) -> float | None:
    """Final-checkpoint metric minus the same run's initial-checkpoint (control) metric."""
    final, initial = data.evals[(arm, seed)]["final"][metric], data.evals[(arm, seed)]["initial"][metric]
    return None if final is None or initial is None else final - initial


def eval_per_run_table(data: BundleData) -> Table:
    rows, md = [], []
    for a in arms(data):
        for s in eval_runs(data, a):
            final, initial = data.evals[(a, s)]["final"], data.evals[(a, s)]["initial"]
            gain = eval_gain(data, a, s, "pass@1")
            rows.append([a, data.arm_algo(a), s, job_id(data, a, s), final["checkpoint"]] + [final[m] for m, _ in EVAL_METRICS]
                        + [initial[m] for m, _ in EVAL_METRICS] + [gain])
            md.append([display(data, a), str(s)] + [fmt(final[m], d) for m, d in EVAL_METRICS]
                      + [fmt_signed(gain)])  # fmt shows a missing pass@j as —; the initial is in eval_initial
    cols = ("arm", "algo", "seed", "job_id", "final_checkpoint") + tuple(f"final_{m}" for m, _ in EVAL_METRICS) \
        + tuple(f"initial_{m}" for m, _ in EVAL_METRICS) + ("gain_pass@1",)
    return Table("eval_per_run", cols, rows,
                 (arm_header(data), "Seed", "Reward / pass@1", "pass@2", "pass@4", "Truncation", "Mean length",
                  "Δ pass@1 vs initial"), md)


def eval_aggregate_table(data: BundleData) -> Table:
    rows, md = [], []
    for a in arms(data):
        run_seeds = eval_runs(data, a)
        for kind, label in (("final", "final"), ("gain", "final − initial")):  # the initial: eval_initial
            row = [a, data.arm_algo(a), algo_name(data.arm_algo(a)), kind, len(run_seeds)]
            cells = [display(data, a), label, str(len(run_seeds))]
            for metric, digits in EVAL_METRICS:
                if kind == "gain":
                    values = [eval_gain(data, a, s, metric) for s in run_seeds]
                else:
                    values = [data.evals[(a, s)][kind][metric] for s in run_seeds]
                summary = _summarise(values)
                row += [summary.mean, summary.sd]
                cells.append(fmt_summary(summary, digits, signed=kind == "gain"))
            rows.append(row)
            md.append(cells)
    cols = ("arm", "algo", "algorithm", "checkpoint", "n_runs") + tuple(
        c for m, _ in EVAL_METRICS for c in (f"{m}_mean", f"{m}_sd"))
    return Table("eval_aggregate", cols, rows,
                 (arm_header(data), "Checkpoint", "n", "Reward / pass@1", "pass@2", "pass@4", "Truncation", "Mean length"), md)


def _contract_rank(data: BundleData, arm: str) -> tuple[bool, bool]:
    """How far an arm's contract is from the conventional one, lowest first: a separate KL loss before
    KL in the reward, per-group before global normalisation."""
    return kl_in_reward(data, arm), bool(declared_algorithm(data, arm).get("global_normalization"))


def arm_pairs(data: BundleData) -> list[tuple[str, str]]:
    """(a, b) arm pairs compared as a − b. Between arms that are just their algorithm and differ in
    contract, b is the more conventional one (``_contract_rank``), ordered by b, then a: seed 000's
    REINFORCE++ − GRPO, REINFORCE++-baseline − GRPO, REINFORCE++ − REINFORCE++-baseline. Every other
    pair follows in grid order, the later arm minus the earlier."""
    present = arms(data)
    rank = {a: (_contract_rank(data, a), i) for i, a in enumerate(present) if a == data.arm_algo(a)}
    pairs = sorted(((a, b) for a in rank for b in rank if rank[a][0] > rank[b][0]),
                   key=lambda p: (rank[p[1]], rank[p[0]][1]))
    for first, second in combinations(present, 2):
        if (first, second) not in pairs and (second, first) not in pairs:
            pairs.append((second, first))
    return pairs


PAIRED_METRICS = (  # (CSV name, display name)
    ("eval_final_pass@1", "Eval reward / pass@1 (final)"),
    ("eval_final_pass@4", "Eval pass@4 (final)"),
    ("train_last_k_raw_reward", "Last-K training raw reward"),
)


def paired_values(data: BundleData, metric: str, arm: str) -> dict[int, float]:
    """The run-level value compared between arms, by seed (accepted runs only)."""
    if metric == "train_last_k_raw_reward":
        return {s: run_last_k(data, arm, s, "rollout/raw_reward") for s in accepted_runs(data, arm)}
    kind, _, name = metric.removeprefix("eval_").partition("_")
    if kind == "gain":
        values = {s: eval_gain(data, arm, s, name) for s in eval_runs(data, arm)}
    else:
        values = {s: data.evals[(arm, s)]["final"][name] for s in eval_runs(data, arm)}
    return {s: v for s, v in values.items() if v is not None}


def paired_mde(data: BundleData, diff: stats.PairedDifference) -> float | None:
    """The smallest difference the pair's design detects at 80 % power, at the interval's α = 1 − CI level."""
    return minimum_detectable_effect(diff.summary.sd, diff.summary.n, 1 - data.ci_level, MDE_POWER)


@dataclass(frozen=True)
class Comparison:
    """One pair of arms compared on one metric: d = a − b by seed."""

    metric: str
    label: str
    a: str
    b: str
    diff: stats.PairedDifference


def paired_comparisons(data: BundleData) -> list[Comparison]:
    """Every pair of arms on every paired metric, in the paired table's order."""
    out = []
    for metric, label in PAIRED_METRICS:
        label = label.replace("Last-K", f"Last-{data.last_k}")
        for a, b in arm_pairs(data):
            diff = stats.paired_difference(paired_values(data, metric, a), paired_values(data, metric, b), data.ci_level)
            out.append(Comparison(metric, label, a, b, diff))
    return out


def paired_table(data: BundleData) -> Table:
    all_seeds = seeds(data)
    rows, md = [], []
    for c in paired_comparisons(data):
        diff = c.diff
        lo, hi = diff.interval if diff.interval else (None, None)
        mde = paired_mde(data, diff)
        boot = paired_bootstrap_interval(list(diff.by_seed.values()), data.ci_level)
        boot_lo, boot_hi = boot if boot else (None, None)
        rows.append([c.metric, c.a, c.b] + [diff.by_seed.get(s) for s in all_seeds]
                    + [diff.summary.n, diff.summary.mean, diff.summary.sd, lo, hi, mde, boot_lo, boot_hi,
                       BOOTSTRAP_METHOD, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED])
        md.append([c.label, f"{display(data, c.a)} − {display(data, c.b)}"]
                  + [fmt_signed(diff.by_seed.get(s)) for s in all_seeds]
                  + [fmt_summary(diff.summary, 4, signed=True), fmt_interval(diff.interval), fmt_interval(boot),
                     "n<2" if mde is None else fmt(mde, 4)])
    level = f"{data.ci_level * 100:g}%"
    return Table("paired_differences",
                 ("metric", "a", "b") + tuple(f"seed_{s}" for s in all_seeds)
                 + ("n", "mean", "sd", "ci_low", "ci_high", "mde", "boot_low", "boot_high", "boot_method",
                    "boot_resamples", "boot_seed"),
                 rows, ("Metric", "Comparison (a − b)") + tuple(f"Seed {s}" for s in all_seeds)
                 + ("Mean ± sample SD", f"Exploratory {level} t-CI", f"Bootstrap {level} CI",
                    f"MDE ({MDE_POWER * 100:g}% power)"), md)


def headline_table(data: BundleData) -> Table:
    """The report's first sentence (``evidence.headline``), from the headline metric's paired comparisons; one row."""
    adjusted = {}
    for metric, members in families(data).items():
        p = family.holm([family.paired_t_p_value(list(c.diff.by_seed.values())) for c in members])
        adjusted.update({(metric, c.a, c.b): q for c, q in zip(members, p)})
    pairs = [headline.Pair(display(data, c.a), display(data, c.b), c.diff.summary.n, c.diff.summary.mean,
                           c.diff.interval, paired_mde(data, c.diff), adjusted.get((c.metric, c.a, c.b)))
             for c in paired_comparisons(data) if c.metric == headline.HEADLINE_METRIC]
    sentence = headline.headline_sentence([display(data, a) for a in arms(data)], pairs, data.ci_level,
                                          1 - data.ci_level)
    return Table("headline", ("metric", "sentence"), [[headline.HEADLINE_METRIC, sentence]],
                 ("Metric", "Result"), [[headline.HEADLINE_WORDS, sentence]])


def robust_table(data: BundleData) -> Table:
    """rliable's measures per paired metric: each arm's interquartile mean, each pair's probability of
    improvement (a over b); a cell below the minimum number of runs is refused and says why."""
    rows, md = [], []
    for metric, label in PAIRED_METRICS:
        label = label.replace("Last-K", f"Last-{data.last_k}")
        values = {a: list(paired_values(data, metric, a).values()) for a in arms(data)}
        for a in arms(data):
            iqm = robust.interquartile_mean(values[a])
            refused = "" if iqm is not None else f"n={len(values[a])} < {robust.MIN_RUNS}"
            rows.append([metric, "iqm", a, "", len(values[a]), "", iqm, refused])
            md.append([label, "IQM", display(data, a), str(len(values[a])),
                       fmt(iqm, 4) if iqm is not None else f"refused ({refused})"])
        for a, b in arm_pairs(data):
            poi = robust.probability_of_improvement(values[a], values[b])
            refused = "" if poi is not None else f"n={min(len(values[a]), len(values[b]))} < {robust.MIN_RUNS}"
            rows.append([metric, "probability_of_improvement", a, b, len(values[a]), len(values[b]), poi, refused])
            md.append([label, "P(a > b)", f"{display(data, a)} over {display(data, b)}",
                       f"{len(values[a])} / {len(values[b])}", fmt(poi, 4) if poi is not None else f"refused ({refused})"])
    return Table("robust_measures", ("metric", "measure", "a", "b", "n_a", "n_b", "value", "refused"), rows,
                 ("Metric", "Measure", "Arm(s)", "Runs", "Value"), md)


# ---- the evaluation's own noise (evidence.statistics.noise, .hierarchical) -------------------------

def prompt_rates(data: BundleData, arm: str, seed: int) -> dict[int, float] | None:
    """A run's final evaluation per prompt: {row index: correct / responses}, from its responses; None without them."""
    counts = data.final_prompts.get((arm, seed))
    return None if not counts else {index: c / n for index, (c, n) in counts.items()}


def _rate_rows(data: BundleData, arm: str, seeds_: list[int]) -> tuple[list[int], list[list[float]]] | None:
    """The seeds' per-prompt rates as rows over the same prompts (by row index, ascending); None when a seed has
    no responses or the seeds' evaluations cover different prompts."""
    rates = [prompt_rates(data, arm, s) for s in seeds_]
    if not rates or any(r is None for r in rates) or len({frozenset(r) for r in rates}) != 1:
        return None
    prompts = sorted(rates[0])
    return prompts, [[r[i] for i in prompts] for r in rates]


def eval_se_table(data: BundleData) -> Table:
    """Per accepted run, its final evaluation's own sampling error: pass@1 from its responses (the mean of its
    prompts' pass rates) and its standard error clustered by prompt (``noise.eval_standard_error``)."""
    rows, md = [], []
    for a in arms(data):
        for s in eval_runs(data, a):
            rates = prompt_rates(data, a, s)
            values = list(rates.values()) if rates else []
            k = {n for _, n in data.final_prompts[(a, s)].values()} if rates else set()
            pass1 = stats.mean(values) if values else None
            se = noise.eval_standard_error(values)
            rows.append([a, data.arm_algo(a), s, job_id(data, a, s), len(values), k.pop() if len(k) == 1 else None,
                         pass1, se])
            md.append([display(data, a), str(s), str(len(values)), fmt(pass1, 4), fmt(se, 4)])
    return Table("eval_se", ("arm", "algo", "seed", "job_id", "n_prompts", "k", "pass@1", "se"), rows,
                 (arm_header(data), "Seed", "Prompts", "pass@1 (from responses)", "SE (clustered by prompt)"), md)


@dataclass(frozen=True)
class NoiseRow:
    """Final eval pass@1 of one arm (b empty) or one pair (a − b): per-seed values, their evaluation SEs and
    the per-prompt rates (or differences) the hierarchical bootstrap resamples."""

    a: str
    b: str
    values: list[float]
    ses: list[float]
    rates: list[list[float]] | None


def noise_rows(data: BundleData) -> list[NoiseRow]:
    """Each arm, then each pair of the paired table, on final eval pass@1: the seeds with an SE (both arms'
    for a pair, its SE that of the per-prompt differences, the prompts the same in both)."""
    metric = headline.HEADLINE_METRIC
    out = []
    for a in arms(data):
        values = paired_values(data, metric, a)
        seeds_ = [s for s in values if (rates := prompt_rates(data, a, s)) and len(rates) >= 2]
        block = _rate_rows(data, a, seeds_)
        out.append(NoiseRow(a, "", [values[s] for s in seeds_],
                            [noise.eval_standard_error(list(prompt_rates(data, a, s).values())) for s in seeds_],
                            block[1] if block else None))
    for a, b in arm_pairs(data):
        va, vb = paired_values(data, metric, a), paired_values(data, metric, b)
        seeds_, ses, diffs = [], [], []
        for s in (s for s in va if s in vb):
            ra, rb = prompt_rates(data, a, s), prompt_rates(data, b, s)
            if ra and rb and set(ra) == set(rb) and len(ra) >= 2:
                prompts = sorted(ra)
                seeds_.append(s)
                diffs.append([ra[i] - rb[i] for i in prompts])
                ses.append(noise.eval_standard_error(diffs[-1]))
        same = len({len(d) for d in diffs}) == 1 and len({frozenset(prompt_rates(data, a, s)) for s in seeds_}) == 1
        out.append(NoiseRow(a, b, [va[s] - vb[s] for s in seeds_], ses, diffs if same else None))
    return out


def eval_noise_table(data: BundleData) -> Table:
    """Per arm and per pair on final eval pass@1: the seeds' variance against the evaluation's noise (the rule
    of ``noise.spread_source``) and the hierarchical bootstrap interval over seeds, then prompts."""
    rows, md = [], []
    level = data.ci_level
    for r in noise_rows(data):
        seed_var, eval_var = noise.seed_variance(r.values), noise.eval_noise_variance(r.ses)
        ratio = seed_var / eval_var if seed_var is not None and eval_var else None
        spread = noise.spread_source(seed_var, eval_var)
        interval = hierarchical.hierarchical_interval(r.rates, level) if r.rates else None
        low, high = interval if interval else (None, None)
        n_prompts = len(r.rates[0]) if r.rates else None
        mean = stats.mean(r.values) if r.values else None
        rows.append([headline.HEADLINE_METRIC, r.a, r.b, len(r.values), n_prompts, mean, seed_var, eval_var, ratio,
                     spread, low, high, hierarchical.HIERARCHICAL_METHOD, hierarchical.HIERARCHICAL_RESAMPLES,
                     hierarchical.HIERARCHICAL_SEED])
        who = display(data, r.a) if not r.b else f"{display(data, r.a)} − {display(data, r.b)}"
        md.append([who, str(len(r.values)), "—" if n_prompts is None else str(n_prompts),
                   fmt_signed(mean) if r.b else fmt(mean, 4),
                   fmt(None if seed_var is None else seed_var ** 0.5, 4),
                   fmt(None if eval_var is None else eval_var ** 0.5, 4), fmt(ratio, 2), SPREAD_WORDS[spread],
                   "—" if interval is None else fmt_interval(interval)])
    return Table("eval_noise",
                 ("metric", "a", "b", "n_seeds", "n_prompts", "mean", "seed_var", "eval_var", "ratio", "spread",
                  "hb_low", "hb_high", "hb_method", "hb_resamples", "hb_seed"), rows,
                 (f"{arm_header(data)} or comparison (a − b)", "Seeds", "Prompts", "Mean", "Seed SD s",
                  "Eval SE (RMS) σ_eval", "s²/σ²_eval", "Spread", f"Hierarchical {level * 100:g}% interval"), md)


SPREAD_WORDS = {noise.SEEDS_EXCEED: "seeds exceed the eval's noise", noise.WITHIN_NOISE: "within the eval's noise",
                noise.NO_SPREAD: "none", noise.TOO_FEW: "n<2"}


# A family needs this many arms: with two there is one pair and nothing to correct.
FAMILY_MIN_ARMS = 3


def families(data: BundleData) -> dict[str, list[Comparison]]:
    """Per paired metric, its family: every pair of the sweep's arms with two or more paired seeds (its
    p-value exists), when the sweep has at least three arms; else no family."""
    if len(arms(data)) < FAMILY_MIN_ARMS:
        return {}
    out: dict[str, list[Comparison]] = {}
    for c in paired_comparisons(data):
        if c.diff.summary.sd is not None:
            out.setdefault(c.metric, []).append(c)
    return out


def family_table(data: BundleData) -> Table:
    """Each metric's pairs as one family: paired t p-values, Holm-adjusted, and Bonferroni simultaneous intervals."""
    rows, md = [], []
    named = ",".join(arms(data))
    for metric, members in families(data).items():
        m = len(members)
        values = [list(c.diff.by_seed.values()) for c in members]
        p = [family.paired_t_p_value(v) for v in values]
        adjusted = family.holm(p)
        level = family.family_level(data.ci_level, m)
        for c, v, p_raw, p_holm in zip(members, values, p, adjusted):
            lo, hi = family.family_interval(v, data.ci_level, m)
            rows.append([metric, named, m, c.a, c.b, c.diff.summary.n, c.diff.summary.mean, p_raw, p_holm, level, lo, hi])
            md.append([c.label, f"{display(data, c.a)} − {display(data, c.b)}", str(c.diff.summary.n),
                       fmt(p_raw, 4), fmt(p_holm, 4), fmt_interval((lo, hi))])
    return Table("paired_family",
                 ("metric", "family_arms", "m", "a", "b", "n", "mean", "p_value", "p_holm", "pair_level",
                  "family_ci_low", "family_ci_high"), rows,
                 ("Metric", "Comparison (a − b)", "n", "p (paired t)", "Holm-adjusted p",
                  f"Simultaneous {data.ci_level * 100:g}% interval (Bonferroni)"), md)


def k1_table(data: BundleData) -> Table:
    """Seed 000's k1 check for every arm whose KL is k1 inside the reward (REINFORCE++), one row per accepted run."""
    rows, md = [], []
    k1_arms = [a for a in arms(data) if kl_in_reward(data, a)]
    only_plain_arm = len(k1_arms) == 1 and k1_arms[0] == data.arm_algo(k1_arms[0])
    for a in k1_arms:
        for s in accepted_runs(data, a):
            returns, raw = series(data, a, s, "rollout/returns"), series(data, a, s, "rollout/raw_reward")
            if returns is None or raw is None:
                continue
            check = stats.k1_activation(returns, raw, data.last_k)
            rows.append([a, s, job_id(data, a, s), check.all_steps, check.last_k, check.final_step])
            shown = f"{s} / {job_id(data, a, s) or '—'}" if only_plain_arm else f"{a} {s} / {job_id(data, a, s) or '—'}"
            md.append([shown, fmt(check.all_steps, 6), fmt(check.last_k, 6), fmt(check.final_step, 6)])
    n = data.n_updates
    return Table("k1_activation", ("arm", "seed", "job_id", "all_steps_mean_diff", "last_k_mean_diff", "final_step_diff"),
                 rows, ("Seed / job", f"All-{n} mean difference", f"Last-{data.last_k} mean difference",
                        "Final-step difference"), md)


def incidents_table(data: BundleData) -> Table:
    cols = ("id", "job", "job_id", "kind", "title", "evidence_boundary", "action", "resolution")
    rows = [[r[c] for c in cols] for r in data.incidents]
    md = [[r["id"], r["job"] or "—", r["title"], r["evidence_boundary"], r["action"], r["resolution"]]
          for r in data.incidents]
    return Table("incidents", cols, rows,
                 ("ID", "Job", "Incident", "Evidence boundary", "Action", "Resolution"), md)


def certificates_table(data: BundleData) -> Table:
    """One row per reproducibility certificate (certify=true): each check's outcome and the first difference."""
    cols = ("certificate_job", "job", "arm", "kind", "stop_at_step", "run", "metrics", "checkpoint", "responses",
            "reproduced", "first_difference")
    rows, md = [], []
    for c in (data.certificates or {}).get("certificates", []):
        checks = ["yes" if c["checks"][k]["ok"] else "no" for k in ("run", "metrics", "checkpoint", "responses")]
        stop = "" if c["stop_at_step"] is None else c["stop_at_step"]
        rows.append([c["certificate_job"], c["job"], c["arm"], c["kind"], stop, *checks,
                     "yes" if c["reproduced"] else "no", c["first_difference"]])
        what = f"resume at step {stop}" if c["kind"] == RESUME else "rerun from scratch"
        md.append([c["job"], what, *checks, "**yes**" if c["reproduced"] else "**NO**", c["first_difference"] or "—"])
    return Table("certificates", cols, rows, ("Job", "Certificate job", "Ran as planned", "Metrics", "Final checkpoint",
                                              "Eval responses", "Reproduced", "First difference"), md)


def initial_evaluations(data: BundleData) -> dict[str, list[tuple[str, int]]]:
    """Each distinct initial-checkpoint evaluation -> the accepted runs that use it, in report order:
    a shared one by its directory (``initial_eval/<key12>``), a run's own by the run's name."""
    groups: dict[str, list[tuple[str, int]]] = {}
    for a in arms(data):
        for s in eval_runs(data, a):
            name = data.evals[(a, s)]["initial"].get("initial_eval") or f"{a}-{s}"
            groups.setdefault(name, []).append((a, s))
    return groups


def eval_initial_table(data: BundleData) -> Table:
    rows, md = [], []
    for name, runs in initial_evaluations(data).items():
        entry = data.evals[runs[0]]["initial"]
        rows.append([name, len(runs), entry["n_responses"]] + [entry[m] for m, _ in EVAL_METRICS])
        md.append([name, str(len(runs)), str(entry["n_responses"])] + [fmt(entry[m], d) for m, d in EVAL_METRICS])
    cols = ("initial_eval", "n_runs", "n_responses") + tuple(m for m, _ in EVAL_METRICS)
    return Table("eval_initial", cols, rows,
                 ("Initial evaluation", "Runs using it", "Responses", "pass@1", "pass@2", "pass@4", "Truncation",
                  "Mean length"), md)


# ---- resource samples (runs/<job>/resources.jsonl, launcher.runtime.resources) -------------------

GIB = 2**30


def peak_cpu_percent(samples: list[dict]) -> float | None:
    """``max_s cpu_percent(s)``: the busiest sample of the job's process tree (100 = one core)."""
    return max((float(s["cpu_percent"]) for s in samples), default=None)


def peak_rss_gib(samples: list[dict]) -> float | None:
    """``max_s rss_bytes(s) / 2^30``: the tree's largest summed resident memory, in GiB."""
    return max((s["rss_bytes"] / GIB for s in samples), default=None)


def peak_gpu_util_percent(samples: list[dict]) -> float | None:
    """``max_s max_g util_percent(s, g)`` over the visible GPUs; None when no GPU was sampled."""
    return max((float(g["util_percent"]) for s in samples for g in s.get("gpus") or []), default=None)


def peak_gpu_mem_gib(samples: list[dict]) -> float | None:
    """``max_s sum_g mem_used_bytes(s, g) / 2^30``: the visible GPUs' memory in use, in GiB; None when no
    GPU was sampled."""
    return max((sum(g["mem_used_bytes"] for g in s["gpus"]) / GIB for s in samples if s.get("gpus")), default=None)


RESOURCE_PEAKS = (  # (CSV stem, markdown header, formula, digits)
    ("peak_cpu_percent", "Peak CPU (% of one core)", peak_cpu_percent, 0),
    ("peak_rss_gib", "Peak RSS (GiB)", peak_rss_gib, 2),
    ("peak_gpu_util_percent", "Peak GPU util (%)", peak_gpu_util_percent, 0),
    ("peak_gpu_mem_gib", "Peak GPU memory (GiB)", peak_gpu_mem_gib, 2),
)


def sampled_runs(data: BundleData, arm: str) -> list[int]:
    """Seeds of the accepted runs of ``arm`` with at least one resource sample, in grid order."""
    return [s for s in seeds(data) if data.resources.get((arm, s))]


def gpu_sampling(data: BundleData, arm: str, seed: int) -> str:
    """What the run's job.json says of its GPU samples (sampled through NVML, or why skipped)."""
    return str(data.resource_sampling.get((arm, seed), {}).get("gpu") or "not recorded")


def resource_tables(data: BundleData) -> tuple[Table, Table]:
    """Peaks of the resource samples per arm (over all its accepted runs' samples) and per run."""
    agg_rows, agg_md, run_rows, run_md = [], [], [], []
    header = arm_header(data)
    for a in arms(data):
        algo, runs = data.arm_algo(a), sampled_runs(data, a)
        pooled = [sample for s in runs for sample in data.resources[(a, s)]]
        peaks = [formula(pooled) for _, _, formula, _ in RESOURCE_PEAKS]
        agg_rows.append([a, algo, len(runs), len(pooled), *peaks])
        agg_md.append([display(data, a), str(len(runs)), str(len(pooled)),
                       *(fmt(v, d) for v, (*_, d) in zip(peaks, RESOURCE_PEAKS))])
        for s in runs:
            samples = data.resources[(a, s)]
            peaks = [formula(samples) for _, _, formula, _ in RESOURCE_PEAKS]
            span = float(samples[-1]["t"]) - float(samples[0]["t"])
            run_rows.append([a, algo, s, job_id(data, a, s), len(samples), span, *peaks, gpu_sampling(data, a, s)])
            run_md.append([display(data, a), str(s), job_id(data, a, s) or "—", str(len(samples)), fmt(span, 0),
                           *(fmt(v, d) for v, (*_, d) in zip(peaks, RESOURCE_PEAKS))])
    stems = tuple(stem for stem, *_ in RESOURCE_PEAKS)
    names = tuple(name for _, name, *_ in RESOURCE_PEAKS)
    return (Table("resource_peaks", ("arm", "algo", "n_runs", "n_samples", *stems), agg_rows,
                  (header, "Runs sampled", "Samples", *names), agg_md),
            Table("resource_peaks_per_run", ("arm", "algo", "seed", "job_id", "n_samples", "sampled_s", *stems, "gpu"),
                  run_rows, (header, "Seed", "Job", "Samples", "Sampled (s)", *names), run_md))


def compute_tables(data: BundleData) -> dict[str, Table]:
    """Every table of the report, by name (the CSV file stem under tables/)."""
    tables = [jobs_table(data), algorithm_contract_table(data), algorithm_config_table(data),
              environment_table(data), *stability_tables(data), normalisation_table(data),
              *efficiency_tables(data), eval_per_run_table(data), eval_initial_table(data),
              eval_aggregate_table(data),
              paired_table(data), family_table(data), robust_table(data), eval_se_table(data), eval_noise_table(data),
              headline_table(data), k1_table(data), incidents_table(data), resolved_config_table(data),
              *resource_tables(data)]
    if data.certificates is not None:  # certify=true only: other sweeps' tables stay as they were
        tables.append(certificates_table(data))
    return {t.name: t for t in tables}
