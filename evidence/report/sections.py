"""``report.md``: seed 000's sections, every number taken from the computed tables or the data.

``render_report`` is a pure function of ``BundleData``; the build writes its output and the
audit calls it again on the bundle's own files and compares line by line.
"""

from __future__ import annotations

from dataclasses import replace

from evidence.computed import compute_tables
from evidence.dataset import EXPERIMENT_FILE, BundleData
from evidence.questions import questions_section
from evidence.report.figures import FIGURES, RESOURCE_FIGURE, RESOURCE_TITLE, left_out
from evidence.statistics import MDE_POWER, claims, noise, robust
from evidence.statistics.crossed import CROSSED_METHOD, CROSSED_RESAMPLES, CROSSED_SEED
from evidence.statistics.family import family_level
from evidence.statistics.resampling import BOOTSTRAP_METHOD, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
from evidence.tables import (
    Table,
    accepted_runs,
    algorithm_names,
    arm_header,
    arms,
    display,
    eval_runs,
    families,
    fmt,
    gpu_sampling,
    initial_evaluations,
    is_digest_item,
    kl_in_reward,
    window_label,
)
from evidence.verdict.record import VERDICT_FILE, bundle_verdict
from evidence.verdict.section import verdict_section
from evidence.verdict.stages import earlier_stage
from facts import INITIAL_EVAL_DIR
from facts.files import (
    BUNDLE_RUNS_DIR,
    EVAL_TABLE,
    FIGURES_DIR,
    FIGURES_DRAWN_BY,
    INCIDENTS_TABLE,
    INDEX_TABLE,
    RESOURCE_SAMPLES,
    STEPS_TABLE,
    TABLES_DIR,
)
from facts.metrics import CLIP_FRAC_KEY, PG_LOSS_KEY, TRUNCATED_KEY
from facts.states import COMPLETED
from facts.task import TASK_FIELD

BUNDLE_FILES = (
    (INDEX_TABLE, "the evidence index: one row per job with scheduler state, counts, decision and reason"),
    (INCIDENTS_TABLE, "every incident with its evidence boundary and resolution"),
    (STEPS_TABLE, "every training-step record of every accepted run"),
    (EVAL_TABLE, "one row per accepted run and checkpoint kind (initial control, final)"),
    ("artifacts.csv", "size and SHA256 of each retained primary artifact that stays with the sweep"),
    (f"{TABLES_DIR}/*.csv", "every table of this report at full precision"),
    (f"{TABLES_DIR}/resolved_config.csv", "appendix: every resolved setting of every run, per arm"),
    (f"{FIGURES_DIR}/*.svg", "the figures below, each also as a PNG beside it (`<figure>.png`, for slides)"),
    (f"{BUNDLE_RUNS_DIR}/<arm>-<seed>/", "metrics log, eval summary, run summary, path-free command, job record and "
     f"resource samples ({RESOURCE_SAMPLES})"),
    (f"{INITIAL_EVAL_DIR}/<key12>/", "the initial checkpoint's evaluation (summary and responses), once for the runs sharing it"),
)


NOT_DRAWN_NOTE = ("the bundle was built without figures (`figures=false` at launch, or `python -m evidence build "
                  "--no-figures`; `python -m evidence build --figures <sweep>` draws them)")


def drawn(data: BundleData) -> bool:
    """Whether the build drew the figures (``evidence.json`` names the matplotlib that drew them)."""
    return FIGURES_DRAWN_BY in data.settings


def _figure(data: BundleData, name: str) -> str:
    """The figure's link, or why it is left out of the bundle (nothing to draw, or no figures drawn at all)."""
    title, _ = FIGURES[name]
    if not drawn(data):
        return f"No figure *{title}*: {NOT_DRAWN_NOTE}.\n"
    why = left_out(data, name)
    if why is not None:
        return f"No figure *{title}*: nothing to draw ({why}).\n"
    return f"![{title}](figures/{name}.svg)\n"


def _range(values: list[float], digits: int) -> str:
    if not values:
        return "—"
    low, high = min(values), max(values)
    return fmt(low, digits) if fmt(low, digits) == fmt(high, digits) else f"{fmt(low, digits)}–{fmt(high, digits)}"


# |train/pg_loss| at most this is 0 up to the trainer's float32 rounding of a mean of centred advantages.
PG_ZERO = 1e-5


def _flat_pg_loss(data: BundleData) -> list[str]:
    """The arms whose policy-gradient loss is 0 (up to ``PG_ZERO``) at every step of every accepted run while
    nothing is clipped (``train/clip_frac`` 0 throughout: on-policy, the ratio is 1)."""
    flat = []
    for arm in arms(data):
        steps = [r for s in accepted_runs(data, arm) for r in data.steps[(arm, s)]]
        pg = [r.get(PG_LOSS_KEY) for r in steps]
        clip = [r.get(CLIP_FRAC_KEY) for r in steps]
        if steps and all(v is not None and abs(float(v)) <= PG_ZERO for v in pg) \
                and all(c is not None and float(c) == 0.0 for c in clip):
            flat.append(display(data, arm))
    return flat


def arm_workloads(data: BundleData) -> dict[str, str]:
    """Each arm's workload as its accepted runs recorded it (run.json's ``workload`` and ``task``): its name, prompt
    SHA256 and reward, in words; an arm whose runs recorded several shows each."""
    found: dict[str, set[str]] = {}
    for (arm, _), run in data.runs.items():
        task = run.get(TASK_FIELD) if isinstance(run, dict) else None
        task = task if isinstance(task, dict) else {}
        reward = task.get("reward") if isinstance(task.get("reward"), dict) else {}
        found.setdefault(arm, set()).add(
            f"{run.get('workload', '—') if isinstance(run, dict) else '—'} (prompt sha256 "
            f"{str(task.get('prompt_sha256') or 'not recorded')[:12]}…, reward {reward.get('name', 'gsm8k_hash')})")
    return {arm: " / ".join(sorted(found[arm])) for arm in arms(data) if arm in found}


def _workloads_differ(data: BundleData) -> str | None:
    """The sentence that says the arms ran different workloads (data, prompt or reward), or None when they did not."""
    workloads = arm_workloads(data)
    if len(set(workloads.values())) < 2:
        return None
    return ("The arms ran different workloads: " + "; ".join(f"{display(data, a)}: {w}" for a, w in workloads.items())
            + ". A difference between arms of different workloads is a difference of task (data, prompt or reward) "
              "as well as of method: two prompt templates are two workloads.")


def _read_with_care(data: BundleData) -> list[str]:
    """What a reviewer must not read into the numbers: machine effects and metrics zero by construction."""
    notes = []
    differ = _workloads_differ(data)
    if differ is not None:
        notes.append(differ)
    local = [r for r in data.index if str(r.get("job_id") or "").startswith("local-")]
    if len(local) > 1:
        notes.append("Throughput (tok/s, step time, elapsed) was measured with several jobs sharing one machine's "
                     "CPUs: it reflects contention and scheduling, not the algorithm. Compare it only between "
                     "runs made alone on identical hardware.")
    clip = [r.get(CLIP_FRAC_KEY) for v in data.steps.values() for r in v if r.get(CLIP_FRAC_KEY) is not None]
    if clip and all(float(c) == 0.0 for c in clip):
        notes.append(f"`{CLIP_FRAC_KEY}` is 0 by construction here: each rollout batch gets one update on fresh "
                     "samples (workload.ppo_epochs = ppo_mini_batches = sampler_refresh_every = 1), so the "
                     "probability ratio is exactly 1 and nothing is clipped. It becomes informative with more "
                     "epochs or mini-batches, or stale samplers.")
    flat = _flat_pg_loss(data)
    if flat:
        notes.append(f"`{PG_LOSS_KEY}` of {_names(flat)} is 0 at every step by construction here (|value| ≤ {PG_ZERO:g}, "
                     "float32 rounding): each batch is used once, on policy, so the probability ratio is 1 and the "
                     "loss is minus the mean advantage; the advantages are centred within each prompt's group (they "
                     "sum to 0 over it) and each response counts once, so that mean is 0. Its gradient is not 0: "
                     "the policy still moves (the reward and gradient-norm curves show it).")
    return notes


def _initial_shared(data: BundleData) -> bool:
    """Whether every accepted run's initial control is a sweep-level shared evaluation."""
    groups = initial_evaluations(data)
    return bool(groups) and all(name.startswith(f"{INITIAL_EVAL_DIR}/") for name in groups)


def _initial_sentence(data: BundleData) -> str:
    """How the initial checkpoint (the control) was evaluated: once per evaluation identity, or per run."""
    groups = initial_evaluations(data)
    runs = sum(len(v) for v in groups.values())
    if _initial_shared(data):
        times = "once" if len(groups) == 1 else f"{len(groups)} times"
        return (f"The initial checkpoint (the control) was evaluated {times} for {runs} accepted run(s): once "
                f"per evaluation identity, shared by every run with it (`{', '.join(groups)}`).\n")
    return (f"The initial checkpoint (the control) was evaluated by each run itself ({len(groups)} evaluation(s) for "
            f"{runs} accepted run(s); table `eval_initial` under the fixed-subset evaluation).\n")


def _varying_settings(data: BundleData) -> set[str]:
    """The settings other than the algorithm whose value differs between the arms."""
    settings = [data.arms.get(arm, ("", {}))[1] for arm in arms(data)]
    return {k for one in settings for k in one if k != "algo" and len({str(s.get(k)) for s in settings}) > 1}


def _compared(data: BundleData) -> str:
    """What the report compares: "arms" when they differ by a setting other than the algorithm, else "algorithms"."""
    return "arms" if _varying_settings(data) else "algorithms"


def _at_a_glance(data: BundleData, tables: dict[str, Table]) -> str:
    """The first screen: the arms compared, the key result table and figure, and what not to read into it."""
    lines = ["## At a glance\n"]
    settings = [data.arms.get(arm, ("", {}))[1] for arm in arms(data)]
    varying = _varying_settings(data)
    for arm, overrides in zip(arms(data), settings):
        overrides = {k: v for k, v in overrides.items() if k in varying}  # what tells the arms apart
        setting = f" ({', '.join(f'{k}={v}' for k, v in overrides.items())})" if overrides else ""
        lines.append(f"- {display(data, arm)}{setting}: {len(accepted_runs(data, arm))} accepted seed(s)")
    lines.append("\nFinal eval against the initial checkpoint (mean ± sample SD across seeds):\n")
    lines.append(tables["eval_aggregate"].markdown())
    lines.append(_initial_sentence(data))
    if _initial_shared(data):  # a few rows (one per evaluation identity); a per-run list goes below
        lines.append(tables["eval_initial"].markdown())
    lines.append(_figure(data, "eval_passk"))
    notes = _read_with_care(data)
    if notes:
        lines.append("Read with care:\n")
        lines += [f"- {note}" for note in notes]
        lines.append("")
    return "\n".join(lines)


def _title(data: BundleData, tables: dict[str, Table]) -> str:
    return f"# {data.sweep.get('workload', 'Sweep')}: {', '.join(display(data, a) for a in arms(data))}\n"


def _headline(data: BundleData, tables: dict[str, Table]) -> str:
    """The answer in one sentence, from the intervals (table ``headline``): the report's first line after its title."""
    return tables["headline"].csv_rows[0][1] + "\n"


def _verdict(data: BundleData, tables: dict[str, Table]) -> str | None:
    """An experiment's verdict opens the report (None: the bundle carries no experiment spec)."""
    verdict = bundle_verdict(data)
    return None if verdict is None else verdict_section(verdict)


def _provenance(data: BundleData, tables: dict[str, Table]) -> str:
    return ("This report was generated by `python -m evidence build` from the sweep's files alone. "
            "`python -m evidence audit` recomputes every table and every number in it from `steps.csv`, "
            "`eval.csv` and the evaluations' responses in this bundle. It is a stability and "
            "implementation-validation comparison, not a claim that one algorithm is statistically superior.\n")


def _bundle_files(data: BundleData) -> list[str]:
    """What the bundle contains, one line per file (an experiment's spec and verdict too)."""
    spec = ((EXPERIMENT_FILE, "the pre-registered experiment spec as run"),)
    verdict = ((VERDICT_FILE, "the verdict and every number it used; the audit recomputes it from the CSVs and the spec"),)
    files = BUNDLE_FILES if data.experiment is None else BUNDLE_FILES + spec + (
        () if earlier_stage(data.sweep) else verdict)
    if not drawn(data):
        files = tuple(f for f in files if not f[0].startswith(FIGURES_DIR))
    return [f"- `{path}`: {what}" for path, what in files]


def _scope(data: BundleData, tables: dict[str, Table]) -> str:
    """What ran and what was accepted, how acceptance is decided, and what the bundle holds."""
    sweep = data.sweep
    total, accepted = len(data.index), len(data.accepted)
    out = ["## Scope and evidence boundary\n",
           f"- Source commit: {sweep.get('source_commit') or 'not recorded'}",
           f"- Workload: {sweep.get('workload', '—')}; {data.n_updates} updates per run",
           f"- Algorithms: {algorithm_names(data)}"]
    workloads = arm_workloads(data)
    if len(set(workloads.values())) > 1:  # the same task throughout: the Workload line above says it
        out.append("- Workload of each arm (name, prompt SHA256, reward; run.json's task): " + "; ".join(
            f"{display(data, a)}: {w}" for a, w in workloads.items()))
    if arm_header(data) == "Arm":
        out.append("- Arms (each the overrides of its grid cell): " + "; ".join(
            f"{a} ({', '.join(f'{k}={v}' for k, v in overrides.items())})" for a, (_, overrides) in data.arms.items()))
    out.append(f"- Training repetitions: seeds {', '.join(str(s) for s in sweep['seeds'])}")
    out.append(f"- Jobs: {accepted} of {total} accepted from their evidence; {total - accepted} rejected and kept out "
               f"of every aggregate")
    mismatched = [r for r in data.index if r["accepted"] == "yes" and (r["scheduler_state"] != COMPLETED or r["exit_code"] != "0")]
    if mismatched:
        out.append("- Accepted although the scheduler reported otherwise (state shown as reported): " + ", ".join(
            f"{r['job']} (job {r['job_id'] or '—'}: {r['scheduler_state'] or '—'}, exit {r['exit_code'] or '—'})"
            for r in mismatched))
    out.append(f"- Training-step records: {sum(len(v) for v in data.steps.values())}; evaluation rows: "
               f"{sum(len(v) for v in data.evals.values())}\n")
    out.append("Acceptance is decided from the evidence: a structurally valid, finite metrics log with every step, "
               "a final checkpoint, non-empty TensorBoard events, the initial-control and final evaluations with "
               "the expected number of responses, and an empty cleanup list. The scheduler state is reported "
               "beside the decision, never instead of it. The bundle contains:\n")
    out += [*_bundle_files(data), ""]
    out.append("Checkpoints and TensorBoard event files stay with the sweep; none is needed to recompute the "
               "tables. Each accepted run's evaluated responses are in the bundle "
               f"(`{BUNDLE_RUNS_DIR}/<arm>-<seed>/eval/`): the audit re-scores them, and the evaluation's noise "
               "(tables `eval_se`, `eval_noise`) is recomputed from them.\n")
    out.append(tables["jobs"].markdown())
    return "\n".join(out)


def _algorithm_contract(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join([
        "## Algorithm contract\n",
        ("Some arms run on a trainer that is not proofgrid's, with the workload and the evaluation held fixed; "
         "each row is what the arm's runs declare they ran (a trainer that is not proofgrid's declares its own "
         "loss, normalisation and KL).\n" if "trainer" in tables["algorithm_contract"].csv_columns else
         "The comparison changes the advantage and KL contracts while holding the workload fixed.\n"),
        tables["algorithm_contract"].markdown(),
        f"Settings that differ between {_compared(data)} (from each run's recorded configuration):\n",
        tables["algorithm_config"].markdown()])


def _environment_rows(tables: dict[str, Table], digests: bool) -> Table:
    """The environment table's rows that are digests (``digests``), or the others."""
    table = tables["environment"]
    return replace(table, md_rows=[row for row in table.md_rows if is_digest_item(row[0]) == digests])


def _environment(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join(["## Environment and frozen workload\n", _environment_rows(tables, digests=False).markdown(),
                      "The source commit and the SHA256 of every pinned input and of the evaluation subset are in "
                      "the appendix.\n"])


def _appendix(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join(["## Appendix: environment digests\n",
                      "What the accepted runs recorded (table `environment`, with the rows above):\n",
                      _environment_rows(tables, digests=True).markdown()])


def _training_stability(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join([
        "## Training stability\n",
        f"Across-seed dispersion is the sample standard deviation (ddof=1). Each run is first averaged over "
        f"its last {data.last_k} steps (steps {window_label(data)}); the table gives the mean ± SD of those run-level "
        f"values across seeds. With fewer than two accepted seeds no SD exists and the cell says n<2.\n",
        tables["stability"].markdown(),
        "Per run:\n",
        tables["stability_per_run"].markdown(),
        "`train/ppo_kl` is the response-reduced old-policy/current-policy log-prob difference inside a step, "
        f"not a reference-policy KL.{_kl_placements(data)} Normalisation diagnostics, counted over all accepted "
        "steps:\n",
        tables["normalisation"].markdown(),
        *(_figure(data, name) for name in ("reward", "pg_loss", "kl_loss", "grad_norm"))])


def _efficiency(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join([
        "## Length, truncation, and efficiency\n",
        f"All-{data.n_updates}-step means per run, then mean ± SD across seeds; elapsed time is the scheduler's.\n",
        tables["efficiency"].markdown(),
        "Per run:\n",
        tables["efficiency_per_run"].markdown(),
        *(_figure(data, name) for name in ("response_len", "truncated"))])


def _resources(data: BundleData, tables: dict[str, Table]) -> str:
    """The jobs' resource samples: how they were taken, the peaks per arm and per run, and the figure."""
    runs = sorted(data.resource_sampling)
    intervals = sorted({str(data.resource_sampling[r].get("interval_s")) for r in runs
                        if data.resource_sampling[r].get("interval_s") is not None})
    gpus = sorted({gpu_sampling(data, *r) for r in runs})
    every = f"every {' / '.join(intervals)} s" if intervals else "every few seconds"
    return "\n".join([
        "## Resources\n",
        f"Each job's runtime sampled its process tree (itself, the trainer and everything under it) {every}: CPU "
        f"summed over its processes (100 % is one core busy), resident memory summed over them (a shared page "
        f"counts once per process) and, where NVML saw a GPU, each visible GPU's utilisation and memory in use "
        f"(`{BUNDLE_RUNS_DIR}/<arm>-<seed>/{RESOURCE_SAMPLES}`). Peaks per arm, over every sample of its accepted "
        f"runs:\n",
        tables["resource_peaks"].markdown(),
        "Per run:\n",
        tables["resource_peaks_per_run"].markdown(),
        f"GPU samples: {'; '.join(gpus) if gpus else 'not recorded'}.\n",
        f"![{RESOURCE_TITLE}](figures/{RESOURCE_FIGURE}.svg)\n" if drawn(data)
        else f"No figure *{RESOURCE_TITLE}*: {NOT_DRAWN_NOTE}.\n"])


def _finals(data: BundleData) -> list[dict]:
    """Every accepted run's final-checkpoint evaluation row."""
    return [e["final"] for e in data.evals.values() if "final" in e]


def _evaluation(data: BundleData, tables: dict[str, Table]) -> str:
    out = ["## Fixed-subset evaluation with the initial-checkpoint control\n"]
    finals = _finals(data)
    if finals:
        first = finals[0]
        out.append(f"Each accepted run's final checkpoint and the initial checkpoint were evaluated on the same frozen "
                   f"subset: {first['n_prompts']} prompts x {first['k']} samples = {first['n_responses']} responses per "
                   f"checkpoint, eval seed {first['eval_seed']}, subset SHA256 {first['subset_sha256']}. pass@k is the "
                   f"unbiased estimator averaged over prompts.\n")
    out.append(tables["eval_per_run"].markdown())
    if _initial_shared(data):
        out.append("The initial checkpoint's evaluation is reported once, under At a glance (table `eval_initial`).\n")
    else:
        out += ["The initial checkpoint, as each run evaluated it:\n", tables["eval_initial"].markdown()]
    out += ["Aggregate results (mean ± sample SD across seeds):\n", tables["eval_aggregate"].markdown(),
            _figure(data, "eval_passk")]
    return "\n".join(out)


def _paired_differences(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join([
        "## Paired differences by training seed\n",
        f"For each pair of {_compared(data)}, d = a − b per training seed (seeds both have accepted), then mean ± "
        f"sample SD and an exploratory {data.ci_level * 100:g}% t-interval with df = n − 1. Few seeds make these "
        f"intervals wide; they support a repeatability check, not a significance claim.\n",
        f"MDE is the minimum detectable effect: the smallest true mean difference this design (n paired seeds, "
        f"the observed SD of their differences) detects with {MDE_POWER * 100:g}% power in a two-sided paired t-test "
        f"at α = {1 - data.ci_level:.2g} (the interval's level), from the noncentral t distribution. A difference "
        f"below it may be real and still go unseen: more seeds lower it. The bootstrap interval resamples the "
        f"seeds with their pairs ({BOOTSTRAP_RESAMPLES} resamples, {BOOTSTRAP_METHOD} method, "
        f"the draws `scipy.stats.bootstrap` makes from `numpy.random.default_rng({BOOTSTRAP_SEED})`, recorded in each row of "
        f"`tables/paired_differences.csv`): "
        f"it assumes no normality, but with a handful of seeds it can only span the observed differences and is "
        f"narrower than the t-interval, not more trustworthy.\n",
        f"What a comparison may claim follows one set of rules (`evidence/statistics/claims.py`), the same for the "
        f"first line of this report, these tables and an experiment's verdict: no interval, p-value, Holm verdict "
        f"or equivalence from fewer than {claims.MIN_INFERENCE_SEEDS} paired seeds, from tied evaluations (the "
        f"differences' SD is 0, or within the rounding of the evaluation's grid of 1/(prompts × responses per "
        f"prompt), or of 1/(prompts × C(responses, j)) for pass@j), from an evaluation of a single prompt, on an "
        f"evaluation metric whose per-prompt values (and so its evaluation noise) the responses do not give, or "
        f"where the seeds' interval excludes 0 while an evaluation-noise interval of the same metric (the crossed "
        f"bootstrap or the question-clustered t-interval below) includes it; a pair that may claim nothing counts as "
        f"p = 1 in its Holm family, "
        f"which keeps its size; such a cell says what is missing instead "
        f"(column `missing` of the CSV). An interval that includes 0 means no difference was detected, never that "
        f"there is none: the MDE says what could still hide. Equivalence is claimed only by two one-sided tests "
        f"(TOST) against the margin an experiment spec declares (`equivalence_margin_points`), with its "
        f"{100 - 2 * (100 - data.ci_level * 100):g}% interval.\n",
        tables["paired_differences"].markdown()])


def _family(data: BundleData, tables: dict[str, Table]) -> str | None:
    """Several pairs on one metric as one family (three arms or more): Holm's p-values and simultaneous intervals."""
    found = families(data)
    if not found:
        return None
    names = ", ".join(display(data, a) for a in arms(data))
    sizes = sorted({len(members) for members in found.values()})
    m = "/".join(str(n) for n in sizes)
    level = data.ci_level * 100
    return "\n".join([
        "## The family of comparisons\n",
        f"With {len(arms(data))} arms ({names}) the paired table compares {m} pairs per metric, and some interval "
        f"excludes 0 by chance more often than one alone would. Each metric's pairs (those with two or more paired "
        f"seeds) are one family: the family is (these arms, that metric). Per pair, the two-sided paired t-test's "
        f"p-value and Holm's step-down adjustment (sorted p_(1) ≤ … ≤ p_(m): p̃_(i) = max over j ≤ i of "
        f"min(1, (m − j + 1)·p_(j))), which holds the family-wise error at α = {1 - data.ci_level:.2g}; beside it "
        f"Bonferroni's simultaneous intervals, each a t-interval at level 1 − α/m "
        f"({', '.join(f'{family_level(data.ci_level, n) * 100:.4g}% for m = {n}' for n in sizes)}), which cover "
        f"all m differences together with probability at least {level:g}%. An interval excluding 0 implies Holm "
        f"rejects that pair; Holm may reject a pair whose interval still includes 0.\n",
        tables["paired_family"].markdown()])


def _robust(data: BundleData, tables: dict[str, Table]) -> str:
    """rliable's interquartile mean and probability of improvement; the cells refused for too few runs are one
    sentence, not a row each (table ``robust_measures`` keeps every row)."""
    table = tables["robust_measures"]
    refused = [r for r in table.csv_rows if r[7]]
    short = sorted({n for r in refused for n in (r[4], r[5]) if n != "" and n < robust.MIN_RUNS})
    out = ["## Robust measures (rliable)\n",
           f"rliable's aggregate measures of runs (Agarwal et al. 2021): the interquartile mean (IQM, the mean of "
           f"the runs left after dropping the lowest and the highest quarter, floor(n/4) each) per arm, and the "
           f"probability of improvement of a over b (P(X_a > X_b) + ½·P(X_a = X_b) over every pair of their runs, "
           f"unpaired). Both need at least {robust.MIN_RUNS} accepted runs per arm: with fewer, the IQM trims "
           f"nothing and is the plain mean, and neither measure says more than the table above."]
    if refused:
        which = "every measure" if len(refused) == len(table.csv_rows) else f"{len(refused)} of the " \
            f"{len(table.csv_rows)} measures"
        out.append(f"Refused here for {which}: an arm has {'/'.join(map(str, short))} accepted run(s); run at least "
                   f"{robust.MIN_RUNS} seeds per arm to have them (table `robust_measures` lists each).")
    kept = [md for md, row in zip(table.md_rows, table.csv_rows) if not row[7]]
    shown = [table.markdown()] if len(kept) == len(table.md_rows) else \
        [replace(table, md_rows=kept).markdown()] if kept else []
    return "\n".join([out[0], " ".join(out[1:]) + "\n", *shown])


def _spread_line(data: BundleData, row: list) -> str:
    """What one row of ``eval_noise`` says of its comparison, from its numbers (``noise.spread_source``'s rule)."""
    _, a, b, n, _, _, seed_var, eval_var, _, spread, *_ = row
    who = display(data, a) if not b else f"{display(data, a)} − {display(data, b)}"
    if spread == noise.TOO_FEW:
        return f"- {who}: fewer than two seeds with responses ({n}): no seed variance to set against the evaluation's."
    numbers = f"s² = {seed_var:.3g} against σ²_eval = {eval_var:.3g}"
    if spread == noise.NO_SPREAD:
        return f"- {who}: neither the seeds nor the evaluation vary ({numbers})."
    what = "this comparison" if b else "this arm's pass@1"
    if spread == noise.SEEDS_EXCEED:
        return (f"- {who}: the seed-to-seed spread exceeds the evaluation's noise ({numbers}): the training seeds, "
                f"not the evaluation, hold the precision of {what}.")
    return (f"- {who}: the seed-to-seed spread does not exceed the evaluation's noise ({numbers}): more evaluation "
            f"prompts, not more seeds, is what {what} needs.")


def _eval_noise(data: BundleData, tables: dict[str, Table]) -> str:
    """The evaluation's own sampling error per run, against the seeds' spread per arm and per pair."""
    level = f"{data.ci_level * 100:g}%"
    return "\n".join([
        "## Evaluation noise and seed variance\n",
        "Each run's final pass@1 is itself an estimate from a sample of prompts and of responses. Its standard "
        "error is clustered by prompt: with p_i the share of prompt i's k responses that are correct, pass@1 = "
        "mean of p_i and SE = s_p/√P (s_p the sample SD of the P prompts' p_i), since one prompt's responses "
        "share its difficulty and are not independent draws from the population of prompts (table `eval_se`, "
        "from each run's responses in this bundle):\n",
        tables["eval_se"].markdown(),
        f"Per arm and per pair (the paired differences above) on final eval pass@1: the seeds' variance s² (ddof=1) "
        f"of the per-seed value against the evaluation's noise σ²_eval, the mean over the seeds of their squared "
        f"SE (for a pair, the SE of the per-prompt differences of its two runs on the same prompts). The rule: "
        f"the seed-to-seed spread exceeds the evaluation's noise when s² > σ²_eval. When it does not, the seeds "
        f"differ no more than evaluating one checkpoint again on fresh prompts would make them, and more "
        f"evaluation prompts (σ²_eval shrinks as 1/P), not more seeds, sharpen the comparison. Every seed is "
        f"evaluated on the same frozen prompts (seeds crossed with prompts), so two intervals count both sources "
        f"as the design drew them: the crossed bootstrap resamples the seeds and, once for all of them, the prompts "
        f"({CROSSED_RESAMPLES} resamples, {CROSSED_METHOD}, `numpy.random.default_rng({CROSSED_SEED})`, recorded in "
        f"each row of `tables/eval_noise.csv`), and the question-clustered {level} t-interval takes each prompt's "
        f"mean over the seeds as one observation (df = prompts − 1).\n",
        tables["eval_noise"].markdown(),
        *(_spread_line(data, row) for row in tables["eval_noise"].csv_rows),
        ""])


def _k1_arms(data: BundleData) -> list[str]:
    """The report names of the arms whose reference KL is k1 inside the reward (a trait, not a name)."""
    return [display(data, a) for a in arms(data) if kl_in_reward(data, a)]


def _names(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def _kl_placements(data: BundleData) -> str:
    """Where each arm's reference KL is, by its algorithm's declared KL placement."""
    k1 = _k1_arms(data)
    loss = [display(data, a) for a in arms(data) if not kl_in_reward(data, a)]
    parts = []
    if k1:
        parts.append(f"{_names(k1)} {'folds its' if len(k1) == 1 else 'fold their'} k1 reference term into the return")
    if loss:
        parts.append(f"{_names(loss)} {'reports' if len(loss) == 1 else 'report'} an independent k2 term as "
                     "`train/kl_loss`")
    return f" {'; '.join(parts)}." if parts else ""


def _k1_activation(data: BundleData, tables: dict[str, Table]) -> str | None:
    if not _k1_arms(data):
        return None  # no arm shapes its reward with k1: nothing to check
    return "\n".join([
        f"## k1 activation check ({', '.join(_k1_arms(data))})\n",
        f"Same-step `rollout/returns` − `rollout/raw_reward`, averaged over all {data.n_updates} steps, over the last "
        f"{data.last_k} steps, and at the final step. Non-zero differences show that k1 reference shaping reached the "
        f"return rather than remaining a recipe-only setting.\n",
        tables["k1_activation"].markdown()])


def _incidents(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join([
        "## Incidents and resolutions\n",
        "Automatic incidents come from the evidence; resolutions, manual exclusions and incidents no job "
        "file records come from `incidents.yaml`. No rejected or excluded job enters any aggregate.\n",
        tables["incidents"].markdown() if data.incidents else "No incidents.\n"])


def _certificates(data: BundleData, tables: dict[str, Table]) -> str | None:
    """certify=true: whether each certified run reproduced, under which tolerance, and the first difference."""
    if data.certificates is None:
        return None
    rule = data.certificates["tolerance"]
    return "\n".join([
        "## Reproducibility certificates\n",
        f"{data.certificates['reproduced']} certificate job(s) reproduced their original. Per arm, one seed's job ran "
        "again from scratch and one was stopped before a step chosen from its seed and resumed from its checkpoint by "
        "a new trainer process, each a job of its own outside the grid (not in any statistic). Each is compared with "
        "its original: every step's metrics, the final checkpoint's content digest and the final evaluation's "
        f"responses. Tolerance: {'exact, 0' if rule['exact'] else rule['metrics_rel_tol']} ({rule['why']}); "
        f"not compared: {rule['not_compared']}. The audit recomputes `certificates.json` from the copies in "
        "`certify/` and the runs in `runs/`.\n",
        tables["certificates"].markdown()])


def _limits(data: BundleData) -> list[str]:
    """The report's numbered limitations: seeds, evaluation size, the control, seeding, truncation, rejections."""
    per_arm = {display(data, a): len(accepted_runs(data, a)) for a in arms(data)}
    unit = arm_header(data).lower()
    limits = [f"Accepted training seeds per {unit}: "
              + ", ".join(f"{n} {c}" for n, c in per_arm.items())
              + ". A few seeds give a repeatability check, not a strong significance claim."]
    if any(c < 2 for c in per_arm.values()):
        limits.append(("Some algorithms" if unit == "algorithm" else "Some arms") + " have fewer than two accepted "
                      "seeds: their dispersion and intervals are reported as n<2.")
    finals = _finals(data)
    if finals:
        limits.append(f"Evaluation covers one frozen subset of {finals[0]['n_prompts']} prompts with {finals[0]['k']} "
                      f"samples each and one decoding seed; it is not a full benchmark.")
    n_control = sum(len(eval_runs(data, a)) for a in arms(data))
    limits.append(f"The initial-checkpoint control ({len(initial_evaluations(data))} evaluation(s), table "
                  f"`eval_initial`) was evaluated identically to the final checkpoints of {n_control} accepted runs; "
                  f"improvement claims rest on final − initial on the same subset.")
    limits.append("Rollout generation is seeded, but equal seeds fix inputs and random-source configuration, not "
                  "token-for-token identity across different policies.")
    train_trunc = [r[TRUNCATED_KEY] for v in data.steps.values() for r in v if r.get(TRUNCATED_KEY) is not None]
    eval_trunc = [e["truncation"] for e in finals]
    if train_trunc or eval_trunc:
        limits.append(f"Truncation at the response cap: training steps {_range(train_trunc, 4)}, final-checkpoint "
                      f"evaluations {_range(eval_trunc, 4)}. Length behaviour may affect the quality ordering.")
    rejected = len(data.index) - len(data.accepted)
    if rejected:
        limits.append(f"{rejected} of {len(data.index)} jobs were rejected or excluded; see the incidents above.")
    return limits


def _limitations(data: BundleData, tables: dict[str, Table]) -> str:
    return "\n".join(["## Limitations\n",
                      "\n".join(f"{i}. {text}" for i, text in enumerate(_limits(data), start=1)) + "\n"])


# The report, section by section in reading order: each a pure function of the data and its tables
# that returns its markdown (None: the section does not apply to this bundle).
SECTIONS = (_title, _headline, _verdict, _at_a_glance, _provenance, _scope, _algorithm_contract, _environment,
            _training_stability, _efficiency, _resources, _evaluation, _paired_differences, _family, _robust,
            _eval_noise, questions_section, _k1_activation, _certificates, _incidents, _limitations, _appendix)


def render_report(data: BundleData, tables: dict[str, Table] | None = None) -> str:
    """The whole report as markdown text: every section that applies, in order."""
    tables = tables if tables is not None else compute_tables(data)
    return "\n".join(text for section in SECTIONS if (text := section(data, tables)) is not None)
