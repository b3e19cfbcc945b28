"""Every table of the report, computed from ``BundleData`` only, one row group per arm.

Each table carries its machine-readable form (CSV columns at full precision, written to
``tables/<name>.csv``) and its display form (markdown cells rounded as seed 000 rounds them).
The statistics themselves are defined in ``evidence.statistics.descriptive``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

from evidence.dataset import BundleData, csv_text
from evidence.gates.certificate_jobs import CHECKS as CERTIFICATE_CHECKS
from evidence.statistics import (
    MDE_POWER,
    claims,
    crossed,
    descriptive,
    family,
    headline,
    minimum_detectable_effect,
    noise,
    robust,
)
from evidence.statistics.resampling import (
    BOOTSTRAP_METHOD,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    paired_bootstrap_interval,
)
from evidence.sweep import algo_name, algo_sort_key, job_name
from facts import ALGORITHM_FIELD, ALGORITHMS, KL_IN_REWARD
from facts.certify import RESUME
from facts.containers import IMAGE_DIGEST_FIELD, IMAGE_DIGEST_ITEM
from facts.evaluation import pass_at_k
from facts.metrics import (
    ADV_NORM_STD_KEY,
    ALL_ZERO_REWARD_KEY,
    GRAD_NORM_KEY,
    KL_LOSS_KEY,
    PEAK_MEM_GIB_KEY,
    PG_LOSS_KEY,
    PPO_KL_KEY,
    RAW_REWARD_KEY,
    RESPONSE_LEN_KEY,
    RESPONSE_TOK_PER_S_KEY,
    RETURNS_KEY,
    TRUNCATED_KEY,
    ZERO_VARIANCE_KEY,
    eval_tag,
)
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


def fmt_summary(summary: descriptive.Summary, digits: int, unit: str = "", signed: bool = False) -> str:
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


@functools.lru_cache(maxsize=8)
def _experiment(text: str):
    # The spec's parser reads run values through evidence.measures, which reads these tables (and the verdict
    # package's __init__ reads them too): imported on use, the one place the tables read the spec.
    from study.spec import VerdictError, parse_experiment

    try:
        return parse_experiment(text)
    except VerdictError:
        return None


def experiment_spec(data: BundleData):
    """The bundle's experiment spec, parsed (``study.spec.Experiment``); None for a plain sweep, and for a
    spec that does not parse (the build refuses it in its verdict; the audit's verdict check names it)."""
    return None if data.experiment is None else _experiment(data.experiment)


def spec_arm(data: BundleData, arm: str) -> str | None:
    """The experiment spec's name of the arm (``per_example``) when the bundle carries a spec and exactly this
    sweep arm runs that spec arm (its overrides own it: ``arm_owner``, never the label); else None."""
    spec = experiment_spec(data)
    if spec is None or arm not in data.arms:
        return None
    from study.spec import arm_owner  # as _experiment: the spec's module is above the tables

    owners = {label: arm_owner(spec.arms, overrides) for label, (_, overrides) in data.arms.items()}
    owner = owners[arm]
    return owner if owner is not None and list(owners.values()).count(owner) == 1 else None


def _once(data: BundleData, kind: str, arm: str, compute: Callable[[], str]) -> str:
    """``compute()`` for (kind, arm), once per loaded bundle (``BundleData.derived``): a name every row asks for."""
    key = (kind, arm)
    if key not in data.derived:
        data.derived[key] = compute()
    return data.derived[key]


def algorithm_name(data: BundleData, arm: str) -> str:
    """The algorithm an arm ran, by name: what its runs declare (a trainer that declares its own algorithm,
    ``trainer.algorithm``, is described by it: ``REINFORCE``, not the configured ``GRPO``), else the name of
    the algorithm it was configured with."""
    def name() -> str:
        declared = declared_algorithm(data, arm).get("display_name")
        return str(declared) if declared else algo_name(data.arm_algo(arm))

    return _once(data, "algorithm", arm, name)


def algorithm_names(data: BundleData) -> str:
    """Every algorithm the arms ran, by name, once each in report order ("Algorithms: GRPO, REINFORCE")."""
    return ", ".join(dict.fromkeys(algorithm_name(data, a) for a in arms(data))) or "—"


def display(data: BundleData, arm: str) -> str:
    """An arm's name in every table, figure and sentence of the report: the experiment spec's name of it
    (``spec_arm``); else the algorithm's name (``algorithm_name``) for an arm that is just its algorithm
    (``GRPO`` for the plain ``grpo`` arm); else its label."""
    def name() -> str:
        named = spec_arm(data, arm)
        if named is not None:
            return named
        return algorithm_name(data, arm) if arm == data.arm_algo(arm) else arm

    return _once(data, "display", arm, name)


def arm_header(data: BundleData) -> str:
    """The first column's title: "Algorithm" while every arm is just its algorithm (and no experiment spec names
    the arms), else "Arm"."""
    plain = all(a == data.arm_algo(a) and spec_arm(data, a) is None for a in arms(data))
    return "Algorithm" if plain else "Arm"


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
    """The scheduler's id of the run's job (``local-0``, ``1234_5``): the CSVs' ``job_id``."""
    return data.index_row(arm, seed)["job_id"]


def job_name_of(data: BundleData, arm: str, seed: int) -> str:
    """The job's name (``grpo-42``, its directory under jobs/): what a reader knows it by, the report's "Job"."""
    return data.index_row(arm, seed)["job"]


def window_label(data: BundleData) -> str:
    """``40..49``: the last-K window of the runs (all accepted runs have n_updates steps)."""
    n = data.n_updates
    k = min(data.last_k, n)
    return f"{n - k}..{n - 1}"


# ---- per-run summaries ------------------------------------------------------------------------

STABILITY = (  # (metric key, CSV stem, display name, digits)
    (RAW_REWARD_KEY, "raw_reward", "raw reward", 4),
    (PG_LOSS_KEY, "pg_loss", "PG loss", 6),
    (KL_LOSS_KEY, "kl_loss", "independent KL loss", 6),
    (GRAD_NORM_KEY, "grad_norm", "grad norm", 4),
)
EFFICIENCY = (  # (metric key, CSV stem, display name, digits, unit)
    (RAW_REWARD_KEY, "raw_reward", "Raw reward", 4, ""),
    (RESPONSE_LEN_KEY, "response_len", "Mean response length", 1, ""),
    (TRUNCATED_KEY, "truncated", "Truncation", 4, ""),
    (RESPONSE_TOK_PER_S_KEY, "response_tok_per_s", "Response tok/s", 1, ""),
    (PEAK_MEM_GIB_KEY, "peak_mem_gib", "Peak memory", 2, " GiB"),
)
EVAL_METRICS = (("pass@1", 4), ("pass@2", 4), ("pass@4", 4), ("truncation", 4), ("mean_length", 1))


def run_last_k(data: BundleData, arm: str, seed: int, key: str) -> float | None:
    values = series(data, arm, seed, key)
    return None if values is None else descriptive.last_k_mean(values, data.last_k)


def run_all_steps(data: BundleData, arm: str, seed: int, key: str) -> float | None:
    values = series(data, arm, seed, key)
    return None if values is None else descriptive.all_steps_mean(values)


def run_elapsed_min(data: BundleData, arm: str, seed: int) -> float | None:
    text = data.index_row(arm, seed)["elapsed_s"]
    return None if text == "" else float(text) / 60


def _summarise(values: list[float | None]) -> descriptive.Summary:
    return descriptive.across_seeds([v for v in values if v is not None])


def kl_not_applicable(data: BundleData, arm: str) -> str:
    """The KL-loss cell of an arm that logs no KL loss: its KL is k1 reward shaping, or it has none."""
    return "N/A (k1 reward shaping)" if kl_in_reward(data, arm) else "N/A (no KL-loss term)"


# ---- tables -------------------------------------------------------------------------------------

def jobs_table(data: BundleData) -> Table:
    cols = ("job", "arm", "algo", "seed", "job_id", "scheduler_state", "exit_code", "elapsed_s",
            "steps_accepted", "steps_expected", "eval_responses_initial", "eval_responses_final", "accepted", "reason")
    rows = [[r.get(c, r["algo"] if c == "arm" else None) for c in cols] for r in data.index]
    md = [[display(data, r.get("arm") or r["algo"]), r["seed"], r["job"], r["job_id"] or "—",
           r["scheduler_state"] or "—", r["exit_code"] or "—",
           fmt(float(r["elapsed_s"]) / 60, 1) if r["elapsed_s"] else "—",
           f"{r['steps_accepted']}/{r['steps_expected']}",
           f"{_initial_responses(data, r)} / {r['eval_responses_final'] or '—'}",
           r["accepted"], r["reason"] or "—"] for r in data.index]
    return Table("jobs", cols, rows,
                 (arm_header(data), "Seed", "Job", "Scheduler job", "Scheduler state", "Exit", "Elapsed (min)", "Steps",
                  "Eval responses (initial / final)", "Accepted", "Reason"), md)


def _initial_responses(data: BundleData, row: dict) -> str:
    """A job's initial-control response count, or ``shared`` when the sweep evaluated it once for
    every job (its count is in the ``eval_initial`` table, once)."""
    initial = data.evals.get((row.get("arm") or row["algo"], int(row["seed"])), {}).get("initial", {})
    return "shared" if initial.get("initial_eval") else (row["eval_responses_initial"] or "—")


def _first_arm(data: BundleData, algo: str) -> str:
    """The first arm (report order) that runs ``algo``; the algo itself when none does."""
    return next((a for a in arms(data) if data.arm_algo(a) == algo), algo)


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
        rows = [[a, algorithm_name(data, _first_arm(data, a)), *_contract_row(data, a)] for a in algos(data)]
        return Table("algorithm_contract", ("algo", "algorithm", "advantage", "normalization", "kl_regularization"),
                     rows, ("Algorithm", "Advantage", "Normalization", "KL regularization"), [r[1:] for r in rows])
    rows = []
    for arm in arms(data):
        contract = declared_algorithm(data, arm).get("contract")
        contract = contract if isinstance(contract, dict) else {}
        cells = [str(contract.get(c, "see configuration")) for c in (*CONTRACT_COLUMNS, "loss")]
        rows.append([arm, trainer_of(data, arm) or PROOFGRID_TRAINER, data.arm_algo(arm),
                     algorithm_name(data, arm), *cells])
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
        ["Algorithms", algorithm_names(data)],
        *([["Arms", "; ".join(f"{a}: " + ", ".join(f"{k}={v}" for k, v in o.items()) for a, (_, o) in data.arms.items())]]
          if arm_header(data) == "Arm" else []),
        ["Seeds", ", ".join(str(s) for s in seeds(data))],
        ["Updates per run", str(data.n_updates)],
    ]
    images = [r.get(IMAGE_DIGEST_FIELD) for r in runs]
    if any(images):  # seed 000's row: the container image every run ran in (the audit checks it is one)
        rows.append([IMAGE_DIGEST_ITEM, _distinct(d or "— (on the host)" for d in images)])
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
    rows, md = [], []
    for key in sorted({k for c in configs.values() for k in c}):
        for a in arms(data):
            values = [c.get(key) for run, c in configs.items() if run[0] == a]
            if values:
                rows.append([key, a, _distinct(values)])
                md.append([key, display(data, a), _distinct(values)])
    return Table("resolved_config", ("setting", "arm", "value"), rows, ("Setting", "Arm", "Value"), md)


def stability_tables(data: BundleData) -> tuple[Table, Table]:
    k_label = f"Last-{data.last_k}"
    agg_rows, agg_md, run_rows, run_md = [], [], [], []
    for a in arms(data):
        algo = data.arm_algo(a)
        run_seeds = accepted_runs(data, a)
        per_metric = {key: [run_last_k(data, a, s, key) for s in run_seeds] for key, *_ in STABILITY}
        row = [a, algo, algorithm_name(data, a), len(run_seeds), data.last_k]
        md = [display(data, a), str(len(run_seeds))]
        for key, _, _, digits in STABILITY:
            summary = _summarise(per_metric[key])
            row += [summary.mean, summary.sd]
            md.append(kl_not_applicable(data, a) if key == KL_LOSS_KEY and summary.n == 0 and run_seeds
                      else fmt_summary(summary, digits))
        agg_rows.append(row)
        agg_md.append(md)
        for i, s in enumerate(run_seeds):
            run_rows.append([a, algo, s, job_id(data, a, s)] + [per_metric[key][i] for key, *_ in STABILITY])
            run_md.append([display(data, a), str(s), job_name_of(data, a, s)] + [
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
            count(lambda r: r.get(ADV_NORM_STD_KEY) is not None and abs(r[ADV_NORM_STD_KEY] - 1) <= NORM_STD_TOL),
            count(lambda r: r.get(ZERO_VARIANCE_KEY) == 1),
            count(lambda r: r.get(ALL_ZERO_REWARD_KEY) == 1),
            count(lambda r: r.get(PPO_KL_KEY) not in (None, 0.0)),
        ]
        rows.append([a, data.arm_algo(a), algorithm_name(data, a), *counts])
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
        row, md = [a, algo, algorithm_name(data, a), len(run_seeds)], [display(data, a), str(len(run_seeds))]
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
            run_md.append([display(data, a), str(s), job_name_of(data, a, s)] +
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
            row = [a, data.arm_algo(a), algorithm_name(data, a), kind, len(run_seeds)]
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
        return {s: run_last_k(data, arm, s, RAW_REWARD_KEY) for s in accepted_runs(data, arm)}
    kind, _, name = metric.removeprefix("eval_").partition("_")
    if kind == "gain":
        values = {s: eval_gain(data, arm, s, name) for s in eval_runs(data, arm)}
    else:
        values = {s: data.evals[(arm, s)]["final"][name] for s in eval_runs(data, arm)}
    return {s: v for s, v in values.items() if v is not None}


def paired_mde(data: BundleData, diff: descriptive.PairedDifference) -> float | None:
    """The smallest difference the pair's design detects at 80 % power, at the interval's α = 1 − CI level."""
    return minimum_detectable_effect(diff.summary.sd, diff.summary.n, 1 - data.ci_level, MDE_POWER)


@dataclass(frozen=True)
class Comparison:
    """One pair of arms compared on one metric: d = a − b by seed."""

    metric: str
    label: str
    a: str
    b: str
    diff: descriptive.PairedDifference


def paired_comparisons(data: BundleData) -> list[Comparison]:
    """Every pair of arms on every paired metric, in the paired table's order."""
    out = []
    for metric, label in PAIRED_METRICS:
        label = label.replace("Last-K", f"Last-{data.last_k}")
        for a, b in arm_pairs(data):
            diff = descriptive.paired_difference(paired_values(data, metric, a), paired_values(data, metric, b), data.ci_level)
            out.append(Comparison(metric, label, a, b, diff))
    return out


PASS_AT_1 = "pass@1"  # the headline's evaluation column
MEAN_REWARD = "mean_reward"
# A mean reward within this of the same evaluation's pass@1 is a binary reward's (every response 0 or 1).
BINARY_SLACK = 1e-12


def final_evaluations(data: BundleData, runs) -> list[dict]:
    """The final evaluation entries of ``runs`` ((arm, seed) pairs) that have one."""
    return [data.evals[r]["final"] for r in runs if "final" in data.evals.get(r, {})]


def pass_at_j(name: str) -> int | None:
    """j of an evaluation column ``pass@j``; None for any other column."""
    head, _, j = name.partition("@")
    return int(j) if head == "pass" and j.isdigit() and int(j) >= 1 else None


def binary_reward(entries: list[dict]) -> bool:
    """Every evaluation's mean reward is its pass@1 (the share of responses with reward > 0): with rewards in
    [0, 1] that holds exactly when every reward is 0 or 1 (a graded reward's mean is below its pass@1)."""
    return bool(entries) and all(e.get(MEAN_REWARD) is not None and e.get(PASS_AT_1) is not None
                                 and abs(e[MEAN_REWARD] - e[PASS_AT_1]) <= BINARY_SLACK for e in entries)


def per_prompt_j(data: BundleData, eval_name: str, runs) -> int | None:
    """The j whose per-prompt pass@j the evaluation column ``eval_name`` is, over ``runs``' final evaluations:
    pass@j itself, a binary reward's mean as pass@1; None for a column the responses' counts cannot give per prompt
    (a graded reward's mean, the truncated share, the mean length)."""
    if eval_name == MEAN_REWARD:
        return 1 if binary_reward(final_evaluations(data, runs)) else None
    return pass_at_j(eval_name)


def prompt_values(data: BundleData, arm: str, seed: int, j: int = 1) -> dict[int, float] | None:
    """A run's final evaluation per prompt: {row index: unbiased pass@j = 1 − C(n − c, j)/C(n, j)} from its
    responses (pass@1: c/n); None without them or with a prompt of fewer than j responses."""
    counts = data.final_prompts.get((arm, seed))
    if not counts or any(n < j for _, n in counts.values()):
        return None
    return {index: pass_at_k(n, c, j) for index, (c, n) in counts.items()}


def prompt_rates(data: BundleData, arm: str, seed: int) -> dict[int, float] | None:
    """A run's final evaluation per prompt: {row index: correct / responses}, from its responses; None without them."""
    return prompt_values(data, arm, seed, 1)


def pair_block(data: BundleData, a: str, b: str, seeds_: list[int], j: int = 1) -> list[list[float]] | None:
    """The per-prompt pass@j differences a − b of ``seeds_`` as rows (prompts by row index, ascending): the block
    the crossed intervals read; None unless every seed has them in both arms, over the same two or more prompts."""
    rows, prompts = [], None
    for s in seeds_:
        va, vb = prompt_values(data, a, s, j), prompt_values(data, b, s, j)
        if not va or not vb or set(va) != set(vb) or (prompts is not None and set(va) != prompts):
            return None
        prompts = set(va)
        rows.append([va[i] - vb[i] for i in sorted(va)])
    return rows if rows and len(prompts) >= 2 else None


def block_noise(block: list[list[float]] | None, level: float) -> tuple[tuple[str, tuple[float, float]], ...]:
    """The evaluation-noise intervals of a block's grand mean by name: the crossed bootstrap's and the
    question-clustered t-interval (``evidence.statistics.crossed``); none for no block. What the claims' rules read:
    a tied block's intervals are kept as the points they are (``withhold_tied=False``; the seeds' own tie is
    ``claims.tied_evaluations``'), while the tables show none for them."""
    if block is None:
        return ()
    found = ((crossed.CROSSED_NOISE, crossed.crossed_interval(block, level, withhold_tied=False)),
             (crossed.QUESTION_NOISE, crossed.question_interval(block, level, withhold_tied=False)))
    return tuple((name, interval) for name, interval in found if interval is not None)


def pair_design(data: BundleData, eval_name: str | None, a: str, b: str,
                differences: dict[int, float]) -> claims.PairedDesign:
    """A comparison a − b as ``claims`` reads it (in the metric's own units): its paired differences by seed and,
    for an evaluation's ``eval_name`` (None: a training metric), the prompts its evaluations scored (the fewest);
    for a column the responses give per prompt (``per_prompt_j``: pass@j, a binary reward's mean) also its grid
    (the coarsest step 1/(P·C(k, j)) of its runs, ``claims.evaluation_step``) and its evaluation noise over the
    seeds of ``differences`` (``block_noise``). Any other evaluation column has no noise check
    (``claims.unchecked_noise``)."""
    values = tuple(differences.values())
    if eval_name is None:
        return claims.PairedDesign(values)
    runs = [(arm, s) for s in differences for arm in (a, b)]
    finals = final_evaluations(data, runs)
    n_prompts = min((int(e["n_prompts"]) for e in finals), default=None)
    j = per_prompt_j(data, eval_name, runs)
    if j is None or any(int(e["k"]) < j for e in finals):
        return claims.PairedDesign(values, n_prompts=n_prompts)
    step = max((claims.evaluation_step(int(e["n_prompts"]), int(e["k"]), j) for e in finals), default=None)
    return claims.PairedDesign(values, step, n_prompts, block_noise(pair_block(data, a, b, list(differences), j),
                                                                    data.ci_level))


def declared_margin(data: BundleData) -> float | None:
    """The equivalence margin on the headline metric (a rate) that the bundle's experiment spec declares
    (``equivalence_margin``, in its criterion's units) when its criterion is final eval pass@1; else None."""
    experiment = experiment_spec(data)
    if experiment is None or experiment.equivalence_margin is None or experiment.criterion.measure.metric != eval_tag(PASS_AT_1):
        return None
    return experiment.equivalence_margin / experiment.criterion.scale


def paired_metric(measure, data: BundleData) -> str | None:
    """The paired table's metric (``PAIRED_METRICS``) that is an experiment criterion's measure, or None."""
    if measure.is_eval and measure.at == "final":
        return f"eval_final_{measure.metric.split('/', 1)[1]}"
    if measure.metric == RAW_REWARD_KEY and measure.last_k in (None, data.last_k):
        return "train_last_k_raw_reward"
    return None


def sequential_claim(claim: claims.PairClaim, comparison: Comparison,
                     state: tuple[claims.SequentialLook, tuple[str, str, str] | None] | None) -> claims.PairClaim:
    """``claims.sequential_design`` for one comparison of the tables (a − b), with the design's look turned to it."""
    if state is None:
        return claim
    look, tested = state
    if tested is None or comparison.metric != tested[0] or {comparison.a, comparison.b} != set(tested[1:]):
        return claims.sequential_design(claim, look, False)
    return claims.sequential_design(claim, look.oriented(1 if comparison.a == tested[1] else -1), True)


@dataclass(frozen=True)
class Judged:
    """A comparison with what it may claim (``claims.paired_claim``), the size of its Holm family (0: none), how
    many of the family's pairs may claim nothing (each counted as p = 1, ``claims.family_p_value``), and its
    Holm-adjusted p-value there (None outside a family)."""

    comparison: Comparison
    design: claims.PairedDesign
    claim: claims.PairClaim
    family: int
    untested: int = 0
    p_holm: float | None = None


def eval_column(metric: str) -> str | None:
    """The evaluation column of a paired metric (``eval_final_pass@4``: ``pass@4``); None for a training metric."""
    return metric.removeprefix("eval_final_") if metric.startswith("eval_final_") else None


def judge_comparisons(data: BundleData, sequential=None) -> list[Judged]:
    """Every paired comparison judged by ``claims``: its design (``pair_design``), Holm's adjusted p-value in its
    family (each pair's ``claims.family_p_value``: 1 for a pair that may claim nothing), the declared
    equivalence margin on the headline metric, and an experiment's design in waves (``sequential_claim``; ``sequential``:
    where that design stands, ``evidence.computed.sequential_state``, None without one)."""
    designs = {(c.metric, c.a, c.b): pair_design(data, eval_column(c.metric), c.a, c.b, c.diff.by_seed)
               for c in paired_comparisons(data)}
    adjusted: dict[tuple[str, str, str], tuple[float, int, int]] = {}
    for metric, members in families(data).items():
        found = [claims.shortfalls(designs[(metric, c.a, c.b)], data.ci_level) for c in members]
        p = family.holm([claims.family_p_value(designs[(metric, c.a, c.b)], data.ci_level) for c in members])
        untested = sum(1 for f in found if f)
        adjusted.update({(metric, c.a, c.b): (q, len(members), untested) for c, q in zip(members, p)})
    margin = declared_margin(data)
    state = sequential
    out = []
    for c in paired_comparisons(data):
        design = designs[(c.metric, c.a, c.b)]
        p_holm, size, untested = adjusted.get((c.metric, c.a, c.b), (None, 0, 0))
        claim = sequential_claim(claims.paired_claim(design, data.ci_level, p_holm,
                                                     margin if c.metric == headline.HEADLINE_METRIC else None),
                                 c, state)
        out.append(Judged(c, design, claim, size, untested, p_holm))
    return out


def _claim_cells(claim: claims.PairClaim) -> tuple[str, str]:
    """The CSV's ``claim`` and ``missing`` cells of a pair: what it may claim, and what it misses (or "")."""
    return claim.kind, claims.missing_sentence(claim.missing) if claim.missing else ""


def _withheld(claim: claims.PairClaim) -> str:
    """A markdown cell in place of an inferential number the pair may not state: what it misses, in short."""
    return "none (" + "; ".join(s.what.split(" (")[0] for s in claim.missing) + ")"


def paired_table(data: BundleData, judged: list[Judged]) -> Table:
    """Each pair on each paired metric: the per-seed differences, mean ± SD, the t-interval and MDE (the CSV
    keeps every formula's value; the markdown shows an interval (t or bootstrap) or an MDE only where ``claims``
    allows a claim, else what is missing), the bootstrap interval."""
    all_seeds = seeds(data)
    rows, md = [], []
    for j in judged:
        c, diff, claim = j.comparison, j.comparison.diff, j.claim
        lo, hi = diff.interval if diff.interval else (None, None)
        mde = paired_mde(data, diff)
        boot = paired_bootstrap_interval(list(diff.by_seed.values()), data.ci_level)
        boot_lo, boot_hi = boot if boot else (None, None)
        rows.append([c.metric, c.a, c.b] + [diff.by_seed.get(s) for s in all_seeds]
                    + [diff.summary.n, diff.summary.mean, diff.summary.sd, lo, hi, mde, boot_lo, boot_hi,
                       BOOTSTRAP_METHOD, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, *_claim_cells(claim)])
        said = claim.kind != claims.NO_CLAIM
        md.append([c.label, f"{display(data, c.a)} − {display(data, c.b)}"]
                  + [fmt_signed(diff.by_seed.get(s)) for s in all_seeds]
                  + [fmt_summary(diff.summary, 4, signed=True),
                     fmt_interval(diff.interval) if said else _withheld(claim), fmt_interval(boot) if said else "—",
                     fmt(claim.mde, 4) if said else "—"])
    level = f"{data.ci_level * 100:g}%"
    return Table("paired_differences",
                 ("metric", "a", "b") + tuple(f"seed_{s}" for s in all_seeds)
                 + ("n", "mean", "sd", "ci_low", "ci_high", "mde", "boot_low", "boot_high", "boot_method",
                    "boot_resamples", "boot_seed", "claim", "missing"),
                 rows, ("Metric", "Comparison (a − b)") + tuple(f"Seed {s}" for s in all_seeds)
                 + ("Mean ± sample SD", f"Exploratory {level} t-CI", f"Bootstrap {level} CI",
                    f"MDE ({MDE_POWER * 100:g}% power)"), md)


def headline_table(data: BundleData, judged: list[Judged]) -> Table:
    """The report's first sentence (``evidence.statistics.headline``), from the claims of the headline metric's pairs; one row."""
    pairs = [headline.Pair(display(data, j.comparison.a), display(data, j.comparison.b), j.claim, j.family, j.untested)
             for j in judged if j.comparison.metric == headline.HEADLINE_METRIC]
    sentence = headline.headline_sentence([display(data, a) for a in arms(data)], pairs, data.ci_level)
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


# ---- the evaluation's own noise (evidence.statistics.noise, .crossed) -------------------------

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
            pass1 = descriptive.mean(values) if values else None
            se = noise.eval_standard_error(values)
            rows.append([a, data.arm_algo(a), s, job_id(data, a, s), len(values), k.pop() if len(k) == 1 else None,
                         pass1, se])
            md.append([display(data, a), str(s), str(len(values)), fmt(pass1, 4), fmt(se, 4)])
    return Table("eval_se", ("arm", "algo", "seed", "job_id", "n_prompts", "k", "pass@1", "se"), rows,
                 (arm_header(data), "Seed", "Prompts", "pass@1 (from responses)", "SE (clustered by prompt)"), md)


@dataclass(frozen=True)
class NoiseRow:
    """Final eval pass@1 of one arm (b empty) or one pair (a − b): per-seed values, their evaluation SEs and
    the per-prompt rates (or differences) the crossed intervals read (None: not over the same prompts)."""

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
        rates = [prompt_rates(data, a, s) for s in seeds_]
        same = len({frozenset(r) for r in rates}) == 1
        out.append(NoiseRow(a, "", [values[s] for s in seeds_], [noise.eval_standard_error(list(r.values())) for r in rates],
                            [[r[i] for i in sorted(r)] for r in rates] if same else None))
    for a, b in arm_pairs(data):
        va, vb = paired_values(data, metric, a), paired_values(data, metric, b)
        seeds_ = [s for s in va if s in vb and pair_block(data, a, b, [s]) is not None]
        diffs = [pair_block(data, a, b, [s])[0] for s in seeds_]
        out.append(NoiseRow(a, b, [va[s] - vb[s] for s in seeds_], [noise.eval_standard_error(d) for d in diffs],
                            pair_block(data, a, b, seeds_)))
    return out


def eval_noise_table(data: BundleData) -> Table:
    """Per arm and per pair on final eval pass@1: the seeds' variance against the evaluation's noise (the rule
    of ``noise.spread_source``), the crossed bootstrap interval over seeds and prompts and the question-clustered
    t-interval (``evidence.statistics.crossed``)."""
    rows, md = [], []
    level = data.ci_level
    for r in noise_rows(data):
        seed_var, eval_var = noise.seed_variance(r.values), noise.eval_noise_variance(r.ses)
        ratio = seed_var / eval_var if seed_var is not None and eval_var else None
        spread = noise.spread_source(seed_var, eval_var)
        interval = crossed.crossed_interval(r.rates, level) if r.rates else None
        question = crossed.question_interval(r.rates, level) if r.rates else None
        low, high = interval if interval else (None, None)
        q_low, q_high = question if question else (None, None)
        # tied values: no interval (claims' rule through ``crossed``), and the cell says so
        cb_none = crossed.no_interval_words(crossed.crossed_shortfall(r.rates)) if r.rates else ""
        q_none = crossed.no_interval_words(crossed.question_shortfall(r.rates)) if r.rates else ""
        n_prompts = len(r.rates[0]) if r.rates else None
        mean = descriptive.mean(r.values) if r.values else None
        rows.append([headline.HEADLINE_METRIC, r.a, r.b, len(r.values), n_prompts, mean, seed_var, eval_var, ratio,
                     spread, low, high, crossed.CROSSED_METHOD, crossed.CROSSED_RESAMPLES, crossed.CROSSED_SEED,
                     q_low, q_high, cb_none, q_none])
        who = display(data, r.a) if not r.b else f"{display(data, r.a)} − {display(data, r.b)}"
        md.append([who, str(len(r.values)), "—" if n_prompts is None else str(n_prompts),
                   fmt_signed(mean) if r.b else fmt(mean, 4),
                   fmt(None if seed_var is None else seed_var ** 0.5, 4),
                   fmt(None if eval_var is None else eval_var ** 0.5, 4), fmt(ratio, 2), SPREAD_WORDS[spread],
                   cb_none or ("—" if interval is None else fmt_interval(interval)),
                   q_none or ("—" if question is None else fmt_interval(question))])
    return Table("eval_noise",
                 ("metric", "a", "b", "n_seeds", "n_prompts", "mean", "seed_var", "eval_var", "ratio", "spread",
                  "cb_low", "cb_high", "cb_method", "cb_resamples", "cb_seed", "q_low", "q_high", "cb_no_interval",
                  "q_no_interval"), rows,
                 (f"{arm_header(data)} or comparison (a − b)", "Seeds", "Prompts", "Mean", "Seed SD s",
                  "Eval SE (RMS) σ_eval", "s²/σ²_eval", "Spread", f"Crossed bootstrap {level * 100:g}% interval",
                  f"Question-clustered {level * 100:g}% t-interval"), md)


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


def family_table(data: BundleData, judged: list[Judged]) -> Table:
    """Each metric's pairs as one family: paired t p-values, Holm-adjusted, and Bonferroni simultaneous intervals
    (the markdown shows a p-value or an interval only where ``claims`` allows the pair a claim; a pair that may
    claim nothing has no p-value, and counts as 1 in the step-down: ``claims.family_p_value``)."""
    rows, md = [], []
    named = ",".join(arms(data))
    judged_of = {(j.comparison.metric, j.comparison.a, j.comparison.b): j for j in judged}
    for metric, members in families(data).items():
        m = len(members)
        level = family.family_level(data.ci_level, m)
        for c in members:
            j = judged_of[(c.metric, c.a, c.b)]
            v, claim, said = list(c.diff.by_seed.values()), j.claim, j.claim.kind != claims.NO_CLAIM
            p_raw = family.paired_t_p_value(v) if said else None  # undefined for a pair that may claim nothing
            lo, hi = family.family_interval(v, data.ci_level, m)
            rows.append([metric, named, m, c.a, c.b, c.diff.summary.n, c.diff.summary.mean, p_raw,
                         j.p_holm if said else None, level, lo, hi, *_claim_cells(claim)])
            md.append([c.label, f"{display(data, c.a)} − {display(data, c.b)}", str(c.diff.summary.n),
                       fmt(p_raw, 4) if said else _withheld(claim), fmt(j.p_holm, 4) if said else "—",
                       fmt_interval((lo, hi)) if said else "—"])
    return Table("paired_family",
                 ("metric", "family_arms", "m", "a", "b", "n", "mean", "p_value", "p_holm", "pair_level",
                  "family_ci_low", "family_ci_high", "claim", "missing"), rows,
                 ("Metric", "Comparison (a − b)", "n", "p (paired t)", "Holm-adjusted p",
                  f"Simultaneous {data.ci_level * 100:g}% interval (Bonferroni)"), md)


def k1_table(data: BundleData) -> Table:
    """Seed 000's k1 check for every arm whose KL is k1 inside the reward (REINFORCE++), one row per accepted run."""
    rows, md = [], []
    k1_arms = [a for a in arms(data) if kl_in_reward(data, a)]
    only_plain_arm = len(k1_arms) == 1 and k1_arms[0] == data.arm_algo(k1_arms[0])
    for a in k1_arms:
        for s in accepted_runs(data, a):
            returns, raw = series(data, a, s, RETURNS_KEY), series(data, a, s, RAW_REWARD_KEY)
            if returns is None or raw is None:
                continue
            check = descriptive.k1_activation(returns, raw, data.last_k)
            rows.append([a, s, job_id(data, a, s), check.all_steps, check.last_k, check.final_step])
            shown = f"{s} / {job_name_of(data, a, s)}" if only_plain_arm else \
                f"{display(data, a)} {s} / {job_name_of(data, a, s)}"
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
    cols = ("certificate_job", "job", "arm", "kind", "stop_at_step", *CERTIFICATE_CHECKS, "reproduced", "first_difference")
    rows, md = [], []
    for c in (data.certificates or {}).get("certificates", []):
        checks = ["yes" if c["checks"][k]["ok"] else "no" for k in CERTIFICATE_CHECKS]
        stop = "" if c["stop_at_step"] is None else c["stop_at_step"]
        rows.append([c["certificate_job"], c["job"], c["arm"], c["kind"], stop, *checks,
                     "yes" if c["reproduced"] else "no", c["first_difference"]])
        what = f"resume at step {stop}" if c["kind"] == RESUME else "rerun from scratch"
        md.append([c["job"], what, *checks, "**yes**" if c["reproduced"] else "**NO**", c["first_difference"] or "—"])
    return Table("certificates", cols, rows, ("Job", "Certificate job", "Ran as planned", "Its own job", "Metrics",
                                              "Final checkpoint", "Eval responses", "Reproduced", "First difference"), md)


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
        shown = name if len(runs) > 1 or name != job_name(*runs[0]) else f"{display(data, runs[0][0])} seed {runs[0][1]}"
        md.append([shown, str(len(runs)), str(entry["n_responses"])] + [fmt(entry[m], d) for m, d in EVAL_METRICS])
    cols = ("initial_eval", "n_runs", "n_responses") + tuple(m for m, _ in EVAL_METRICS)
    return Table("eval_initial", cols, rows,
                 ("Initial evaluation", "Runs using it", "Responses", "pass@1", "pass@2", "pass@4", "Truncation",
                  "Mean length"), md)


# ---- resource samples (runs/<job>/resources.jsonl, launcher.runtime.resource_sampler) -------------------

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
            run_md.append([display(data, a), str(s), job_name_of(data, a, s), str(len(samples)), fmt(span, 0),
                           *(fmt(v, d) for v, (*_, d) in zip(peaks, RESOURCE_PEAKS))])
    stems = tuple(stem for stem, *_ in RESOURCE_PEAKS)
    names = tuple(name for _, name, *_ in RESOURCE_PEAKS)
    return (Table("resource_peaks", ("arm", "algo", "n_runs", "n_samples", *stems), agg_rows,
                  (header, "Runs sampled", "Samples", *names), agg_md),
            Table("resource_peaks_per_run", ("arm", "algo", "seed", "job_id", "n_samples", "sampled_s", *stems, "gpu"),
                  run_rows, (header, "Seed", "Job", "Samples", "Sampled (s)", *names), run_md))


def seed_tables(data: BundleData, sequential=None) -> list[Table]:
    """The tables of the runs and their seeds, in the report's order (``evidence.computed`` adds the questions',
    and gives ``sequential``: where an experiment's design in waves stands)."""
    noise_table = eval_noise_table(data)
    judged = judge_comparisons(data, sequential)
    return [jobs_table(data), algorithm_contract_table(data), algorithm_config_table(data),
            environment_table(data), *stability_tables(data), normalisation_table(data),
            *efficiency_tables(data), eval_per_run_table(data), eval_initial_table(data),
            eval_aggregate_table(data),
            paired_table(data, judged), family_table(data, judged), robust_table(data), eval_se_table(data),
            noise_table, headline_table(data, judged), k1_table(data), incidents_table(data), resolved_config_table(data),
            *resource_tables(data)]
