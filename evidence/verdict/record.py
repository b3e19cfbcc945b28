"""``verdict.json``: an experiment's verdict and every number it used, from its confirm-stage evidence.

The sweep's arms are matched to the spec's by their overrides (and each arm's selected tuning value);
the values are paired by training seed and given to the rule (``evidence.verdict.rule.decide``).
Values in the record are in the criterion's units (points for ``*_points``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from evidence.dataset import BundleData
from evidence.fileio import dumps_json, write_text
from evidence.measures import arm_values, trajectory
from evidence.problems import VerdictError
from evidence.statistics import MDE_POWER, claims, descriptive
from evidence.statistics.family import holm, paired_t_p_value
from evidence.tables import pair_design
from evidence.verdict.rule import (
    FAILED,
    INCONCLUSIVE,
    VALIDATED,
    Outcome,
    decide,
    holm_test,
    mean_curve,
    under_powered,
)
from evidence.verdict.selection import Selection, select_settings
from evidence.verdict.sizing import WAVE_PENDING, WAVE_WITHOUT_TEST, Look, sized_look
from evidence.verdict.stages import TUNING_STAGE, earlier_stage
from facts.files import VERDICT_FILE
from study.measure import EVAL_PREFIX
from study.spec import MIN_SEEDS, Experiment, arm_owner, parse_experiment, same_overrides

SCHEMA = 1
ROLES = ("baseline", "treatment")
FAMILY_RULE = "holm-family"  # the rule of a family's verdict (several treatments against one baseline)


def resolve_arm(experiment: Experiment, name: str, data: BundleData, selected: Mapping[str, str] | None = None) -> str:
    """The sweep's arm label that runs spec arm ``name``: the one arm whose overrides it owns
    (``arm_owner``) carrying its selected tuning value too; never found by label (a label can be any
    arm's name)."""
    wanted = {**experiment.arms[name], **(selected or {})}
    matches = [label for label, (_, overrides) in data.arms.items()
               if arm_owner(experiment.arms, overrides) == name and same_overrides(wanted, overrides)]
    if len(matches) != 1:
        shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
        raise VerdictError(f"spec arm {name} ({shown}) matches {len(matches)} arms of the sweep "
                           f"({', '.join(data.arms)}); it must match exactly one")
    return matches[0]


def _role_values(experiment: Experiment, data: BundleData, labels: dict[str, str]) -> dict[str, dict[int, float]]:
    """Per role, the criterion's value of every accepted seed of its arm (refused when neither arm logs it)."""
    measure = experiment.criterion.measure
    values = {role: arm_values(data, measure, label) for role, label in labels.items()}
    if not values["baseline"] and not values["treatment"]:
        raise VerdictError(f"criterion metric {measure.metric} is logged by no accepted run of "
                           f"{labels['baseline']} or {labels['treatment']}")
    return values


def wave_cost(data: BundleData, labels: list[str], seeds: list[int]) -> dict:
    """What a wave's jobs cost (every job of those seeds in ``labels``' arms that ``index.csv`` lists, accepted or
    not): CPU-hours = Σ elapsed_s × workload.cpus_per_job / 3600 and GPU-hours = Σ elapsed_s × workload.gpus_per_job /
    3600, elapsed_s the scheduler's (``index.csv``), the resources the job's ``run.json`` config; ``unmeasured``: jobs
    listed without either."""
    jobs, unmeasured, cpu_s, gpu_s = 0, 0, 0.0, 0.0
    for label in labels:
        for seed in seeds:
            try:
                row = data.index_row(label, seed)
            except KeyError:
                continue
            jobs += 1
            workload = ((data.runs.get((label, seed)) or {}).get("config") or {}).get("workload") or {}
            cpus, gpus = workload.get("cpus_per_job"), workload.get("gpus_per_job", 0)
            try:
                elapsed = float(row.get("elapsed_s") or "nan")
            except ValueError:
                elapsed = float("nan")
            if elapsed != elapsed or not isinstance(cpus, int) or not isinstance(gpus, int):
                unmeasured += 1
                continue
            cpu_s, gpu_s = cpu_s + elapsed * cpus, gpu_s + elapsed * gpus
    return {"jobs": jobs, "unmeasured": unmeasured, "cpu_hours": cpu_s / 3600, "gpu_hours": gpu_s / 3600}


def _tuning_record(experiment: Experiment, selections: dict[str, Selection], tuning_data: BundleData | None):
    tuning = experiment.tuning
    if tuning is None:
        return None
    return {"setting": tuning.setting, "metric": tuning.measure.metric, "goal": tuning.goal, "on_edge": tuning.on_edge,
            "scores": {name: s.scores for name, s in selections.items()},
            "evidence": "tuning stage" if tuning_data is not None else "not in this bundle"}


def _collapse_record(experiment: Experiment, outcome: Outcome):
    drop = experiment.criterion.collapse_drop
    return None if drop is None else {"drop": drop, **{role: vars(check) for role, check in outcome.collapse.items()}}


def _comparison(experiment: Experiment, data: BundleData, treatment: str, selected: dict[str, dict[str, str]]):
    """One treatment against the baseline: (criterion narrowed to it, role -> sweep arm label, role -> values by
    seed, the paired seeds)."""
    criterion = replace(experiment.criterion, treatments=(treatment,))
    names = {"baseline": criterion.baseline, "treatment": treatment}
    labels = {role: resolve_arm(experiment, name, data, selected.get(name)) for role, name in names.items()}
    values = _role_values(experiment, data, labels)
    paired = [s for s in values["baseline"] if s in values["treatment"]]
    return criterion, labels, values, paired


def evaluation_design(data: BundleData, criterion, labels: dict[str, str], paired: list[int]) -> claims.PairedDesign:
    """What the evaluation says of treatment − baseline beside the seeds, in the criterion's units (no differences
    yet: ``decide`` adds them): for an eval metric its prompts and, where the responses give it per prompt (pass@j,
    a binary reward's mean), its grid and its evaluation-noise intervals over the paired seeds
    (``evidence.tables.pair_design``)."""
    measure = criterion.measure
    name = measure.metric.removeprefix(EVAL_PREFIX) if measure.is_eval else None
    design = pair_design(data, name, labels["treatment"], labels["baseline"], dict.fromkeys(paired, 0.0))
    return replace(design.scaled(criterion.scale), differences=())


def claim_record(claim: claims.PairClaim, design: claims.PairedDesign, margin: float | None) -> dict:
    """What the design may claim (``claims.paired_claim``), as ``verdict.json`` holds it: the rules' findings
    with the sentence that says them, the evaluation's grid, prompts and noise intervals the rules read, and TOST's
    equivalence against the spec's margin (withheld, with why, when the design may claim nothing)."""
    equivalence = None
    if margin is not None:
        e = claim.equivalence
        equivalence = {"margin": margin, "test": "TOST, two one-sided paired t-tests",
                       **({"withheld": claims.missing_sentence(claim.missing, "no equivalence test")} if e is None else
                          {"alpha": e.alpha, "level": e.level, "p_value": e.p_value, "interval": list(e.interval),
                           "equivalent": e.equivalent})}
    return {"kind": claim.kind,
            "missing": [{"rule": m.rule, "what": m.what, "remedy": m.remedy} for m in claim.missing],
            "sentence": claims.missing_sentence(claim.missing) if claim.missing else None,
            "step": design.step, "n_prompts": design.n_prompts,
            "noise": [{"name": name, "interval": list(interval)} for name, interval in design.noise],
            "equivalence": equivalence}


def listed_seeds(data: BundleData, labels: list[str]) -> list[int]:
    """The seeds of which ``index.csv`` lists a job in any of ``labels``' arms, accepted or not: the waves that ran."""
    seeds = {int(row["seed"]) for row in data.index if str(row.get("seed", "")).lstrip("-").isdigit()}
    listed = set()
    for seed in seeds:
        for label in labels:
            try:
                data.index_row(label, seed)
            except KeyError:
                continue
            listed.add(seed)
    return sorted(listed)


PENDING_CLAIM = "pending"  # the claim's kind at a look of seeds in waves that has not decided: no fixed-sample claim


def sequential_claim(look: Look, fixed: dict) -> dict:
    """The claim of a design in waves that has not decided (``claim_record``'s fields, its kind replaced): no look of
    a sequential design makes a fixed-sample claim before the design decides (its interval, MDE and equivalence
    are unadjusted for the looks still to come).

    At a pending look (``WAVE_PENDING``) the kind is ``PENDING_CLAIM`` and ``pending`` says where the design stands:
    the look, of how many, its combined Z and boundary, and the next wave's seeds; ``sentence`` says so in words. A
    design whose wave gave no test (``WAVE_WITHOUT_TEST``) claims nothing (``claims.NO_CLAIM``), the wave's lack its
    ``missing`` entry."""
    sizing, equivalence = look.record, fixed["equivalence"]
    if equivalence is not None:
        equivalence = {k: equivalence[k] for k in ("margin", "test")}
    if look.without is not None:
        last = sizing["looks"][-1]
        remedy = ("more evaluation prompts" if len(last["seeds"]) >= 2 else
                  "a new design, the jobs of each wave accepted")
        found = (claims.Shortfall(WAVE_WITHOUT_TEST, f"wave {last['look']} without a test of its own", remedy),)
        sentence = claims.missing_sentence(found)
        return {**fixed, "kind": claims.NO_CLAIM, "sentence": sentence,
                "missing": [{"rule": m.rule, "what": m.what, "remedy": m.remedy} for m in found],
                "equivalence": equivalence and {**equivalence, "withheld": claims.missing_sentence(
                    found, "no equivalence test")}}
    last = sizing["looks"][-1]
    z = "—" if last["z"] is None else f"{last['z']:.3g}"
    first, through = sizing["next_wave"]
    sentence = (f"not decided at look {last['look']} of {len(sizing['waves'])} (Z = {z}, boundary "
                f"±{last['boundary']:.4g}): no interval until the design decides; wave {last['look'] + 1}, seeds "
                f"{first}..{through}, runs next")
    return {**fixed, "kind": PENDING_CLAIM, "sentence": sentence, "missing": [],
            "pending": {"look": last["look"], "looks": len(sizing["waves"]), "z": last["z"],
                        "boundary": last["boundary"], "next_wave": [first, through]},
            "equivalence": equivalence and {**equivalence, "withheld": sentence}}


def _comparison_record(experiment: Experiment, data: BundleData, treatment: str, selections: dict[str, Selection],
                       tuning_data: BundleData | None, holm: tuple[float, float] | None = None) -> dict:
    """The ``verdict.json`` record of one treatment against the baseline (a two-arm spec's whole record)."""
    selected = {name: {s.setting: s.value} for name, s in selections.items()}
    criterion, labels, values, paired = _comparison(experiment, data, treatment, selected)
    names = {"baseline": criterion.baseline, "treatment": treatment}
    look, design = None, list(experiment.seeds)
    if experiment.sizing is not None:  # the current look's seeds, and its test of 0
        scaled = {s: criterion.scale * (values["treatment"][s] - values["baseline"][s]) for s in paired}

        def missing(seeds: list[int]) -> tuple[claims.Shortfall, ...]:
            evaluation = evaluation_design(data, criterion, labels, seeds)
            return claims.shortfalls(replace(evaluation, differences=tuple(scaled[s] for s in seeds)), data.ci_level)

        look = sized_look(experiment.sizing, criterion, scaled, 1 - data.ci_level, missing,
                          lambda seeds: wave_cost(data, list(labels.values()), seeds),
                          listed_seeds(data, list(labels.values())))
        values = {role: {s: v for s, v in by_seed.items() if s in look.seeds} for role, by_seed in values.items()}
        paired, design = [s for s in paired if s in look.seeds], look.design
    curves = {role: mean_curve([trajectory(data, criterion.measure, labels[role], s) for s in paired])
              if paired else [] for role in labels}
    evaluation = evaluation_design(data, criterion, labels, paired)
    test = None
    if holm is not None:
        diffs = [criterion.scale * (values["treatment"][s] - values["baseline"][s]) for s in paired]
        test = holm_test(holm[0], holm[1], descriptive.mean(diffs) if diffs else None)
    outcome = decide(criterion, values["baseline"], values["treatment"], curves["baseline"], curves["treatment"],
                     data.ci_level, min_seeds=2 if experiment.exploratory else MIN_SEEDS,
                     test=look.test if look is not None else test, evaluation=evaluation)
    judged = replace(evaluation, differences=tuple(d for _, _, d in outcome.by_seed.values()))
    claim = claims.paired_claim(judged, data.ci_level, margin=experiment.equivalence_margin)
    if look is not None and look.pending is not None and outcome.rule != "too-few-seeds":
        outcome.verdict, outcome.rule, outcome.reason = INCONCLUSIVE, WAVE_PENDING, look.pending
    if look is not None and look.without is not None:
        outcome.verdict, outcome.rule, outcome.reason = INCONCLUSIVE, WAVE_WITHOUT_TEST, look.without
    recorded_claim = claim_record(claim, judged, experiment.equivalence_margin)
    if look is not None and (look.pending is not None or look.without is not None):
        recorded_claim = sequential_claim(look, recorded_claim)
    edges = [{"arm": s.arm, "setting": s.setting, "value": s.value, "side": s.edge}
             for s in selections.values() if s.edge]

    def summary(role: str) -> dict:
        found = descriptive.across_seeds([criterion.scale * v for s, v in values[role].items() if s in paired])
        return {"n": found.n, "mean": found.mean, "sd": found.sd}

    return {
        "schema": SCHEMA, "verdict": outcome.verdict, "rule": outcome.rule, "reason": outcome.reason,
        "provisional": bool(edges),
        "metric": {"name": criterion.measure.metric, "at": criterion.measure.at,
                   "last_k": criterion.measure.window(data) if not criterion.measure.is_eval else None,
                   "units": criterion.units},
        "arms": {role: {"name": name, "arm": labels[role], "overrides": {**experiment.arms[name], **selected.get(name, {})}}
                 for role, name in names.items()},
        "seeds": paired,
        "seeds_missing": [s for s in design if s not in paired],  # pre-registered (at this look), not paired here
        "per_seed": [{"seed": s, "baseline": b, "treatment": t, "difference": d}
                     for s, (b, t, d) in outcome.by_seed.items()],
        "baseline": summary("baseline"), "treatment": summary("treatment"),
        "difference_mean": outcome.summary.mean, "difference_sd": outcome.summary.sd,
        "difference_ci95": list(outcome.interval) if outcome.interval else None,
        "ci_level": data.ci_level, "threshold": criterion.threshold,
        "mde": {"power": MDE_POWER, "alpha": 1 - data.ci_level,
                "value": claim.mde if recorded_claim["kind"] == claim.kind else None},
        "claim": recorded_claim,
        "under_powered": under_powered(outcome, criterion),
        "inconclusive_below": criterion.inconclusive_below, "ci_excludes_zero": criterion.ci_excludes_zero,
        "collapse": _collapse_record(experiment, outcome),
        "edge_of_grid": edges,
        "selected": selected,
        "tuning": _tuning_record(experiment, selections, tuning_data),
        "exploratory": experiment.exploratory,
        **({"sizing": look.record} if look is not None else {}),
    }


def family_verdict(verdicts: list[str]) -> str:
    """A family's verdict from its treatments' (each Holm-corrected): VALIDATED when any treatment is (Holm holds
    the chance of any false one at α), FAILED when every one failed, else INCONCLUSIVE."""
    if VALIDATED in verdicts:
        return VALIDATED
    return FAILED if all(v == FAILED for v in verdicts) else INCONCLUSIVE


def _family_record(experiment: Experiment, data: BundleData, selections: dict[str, Selection],
                   tuning_data: BundleData | None) -> dict:
    """Several treatments against one baseline: each comparison's paired t p-value, Holm's adjusted p-values
    across them at family-wise α = 1 − CI level, each treatment's verdict with the adjusted p in place of its
    interval's test of 0, and the family's verdict (``family_verdict``)."""
    criterion, alpha = experiment.criterion, 1 - data.ci_level
    selected = {name: {s.setting: s.value} for name, s in selections.items()}
    p_values, family_p = [], []
    for name in criterion.treatments:
        crit, labels, values, paired = _comparison(experiment, data, name, selected)
        diffs = tuple(crit.scale * (values["treatment"][s] - values["baseline"][s]) for s in paired)
        design = replace(evaluation_design(data, crit, labels, paired), differences=diffs)
        family_p.append(claims.family_p_value(design, data.ci_level))  # 1: no p, or a design that may claim nothing
        p_values.append(paired_t_p_value(diffs) if not claims.shortfalls(design, data.ci_level) else None)
    adjusted = holm(family_p)
    comparisons = [{**_comparison_record(experiment, data, name, selections, tuning_data, (p_adj, alpha)),
                    "holm": {"p_value": p, "adjusted_p_value": p_adj}}
                   for name, p, p_adj in zip(criterion.treatments, p_values, adjusted)]
    verdict = family_verdict([c["verdict"] for c in comparisons])
    return {
        "schema": SCHEMA, "verdict": verdict, "rule": FAMILY_RULE,
        "reason": "; ".join(f"{c['arms']['treatment']['name']} {c['verdict']} ({c['rule']}, "
                            + (c["claim"]["sentence"] if c["claim"]["sentence"] else "Holm-adjusted p "
                               + ("—" if c["holm"]["p_value"] is None else f"{c['holm']['adjusted_p_value']:.3g}"))
                            + ")" for c in comparisons)
        + f"; Holm's correction across {len(comparisons)} treatments against {criterion.baseline} at family-wise "
          f"α = {alpha:.2g}",
        "provisional": any(c["provisional"] for c in comparisons),
        "metric": comparisons[0]["metric"],
        "family": {"correction": "holm", "alpha": alpha, "metric": criterion.measure.metric,
                   "baseline": criterion.baseline, "treatments": list(criterion.treatments),
                   "p_values": p_values, "adjusted_p_values": adjusted,
                   "verdicts": [c["verdict"] for c in comparisons]},
        "comparisons": comparisons,
        "exploratory": experiment.exploratory,
    }


def experiment_verdict(experiment: Experiment, data: BundleData, tuning_data: BundleData | None = None) -> dict:
    """The ``verdict.json`` record of an experiment, from its confirm-stage evidence (and its tuning stage's):
    one comparison's record for one treatment, a family's (``_family_record``) for several."""
    selections: dict[str, Selection] = {}
    if experiment.tuning is not None and tuning_data is not None:
        selections = select_settings(experiment.tuning, experiment.arms, tuning_data)
    if experiment.criterion.family:
        return _family_record(experiment, data, selections, tuning_data)
    return _comparison_record(experiment, data, experiment.criterion.treatments[0], selections, tuning_data)


def bundle_verdict(data: BundleData) -> dict | None:
    """The verdict a bundle's own files give (its tuning stage's under ``data/stages/tuning/``);
    None when it carries no experiment spec."""
    if data.experiment is None or earlier_stage(data.sweep):  # an earlier stage's bundle: the spec, no verdict
        return None
    return experiment_verdict(parse_experiment(data.experiment), data, data.stages.get(TUNING_STAGE))


def write_verdict(data_dir: Path, data: BundleData) -> None:
    """Build hook, after the data is loaded: write ``data/verdict.json`` when the bundle carries a spec."""
    record = bundle_verdict(data)
    if record is not None:
        write_text(Path(data_dir) / VERDICT_FILE, dumps_json(record))
