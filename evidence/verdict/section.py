"""The report's verdict section: the verdict, the rule that decided it and every number it used, from ``verdict.json``."""

from __future__ import annotations


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}"


def _plain(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _where(metric: dict) -> str:
    return "at the final checkpoint" if metric["at"] == "final" else f"as the last-{metric['last_k']} mean"


def verdict_section(record: dict) -> str:
    """The report's opening section: the verdict, the rule that decided it and every number it used (a family's:
    its table, then each treatment's comparison)."""
    if "family" in record:
        return family_section(record)
    return comparison_section(record, "## Verdict: ")


def family_section(record: dict) -> str:
    """Several treatments against one baseline: the family named (arms, metric, correction), one row per
    treatment (mean difference, t-interval, p, Holm-adjusted p, verdict), then each comparison in full."""
    family, metric = record["family"], record["metric"]
    unit = " points" if metric["units"] == "points" else ""
    provisional = " (provisional: a tuning winner sits on the edge of its grid)" if record["provisional"] else ""
    names = ", ".join(f"`{t}`" for t in family["treatments"])
    out = [f"## Verdict: {record['verdict']}{provisional}\n",
           f"Pre-registered family (`data/experiment.yaml`): treatments {names}, each against baseline "
           f"`{family['baseline']}` on `{family['metric']}` {_where(metric)}, paired by training seed; Holm's "
           f"step-down correction across the {len(family['treatments'])} comparisons at family-wise "
           f"α = {family['alpha']:.2g}: a treatment's difference is told from 0 when its Holm-adjusted p is below α. "
           f"The family is VALIDATED when any treatment is, FAILED when every one failed, else INCONCLUSIVE.\n",
           f"Decided by rule `{record['rule']}`: {record['reason']}.\n",
           f"| Treatment | Treatment − baseline{unit} | 95% t-interval | p (paired t) | Holm-adjusted p | Verdict |",
           "|---|---|---|---|---|---|"]
    for c in record["comparisons"]:
        ci, h, missing = c["difference_ci95"], c["holm"], _missing(c)
        if missing:  # nothing inferential from a design that lacks what a test of 0 needs
            cells = f"none ({missing}) | — | —"
        else:
            cells = ((f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "—") + " | "
                     + ("—" if h["p_value"] is None else f"{h['p_value']:.3g}") + f" | {h['adjusted_p_value']:.3g}")
        out.append(f"| {c['arms']['treatment']['name']} | {_signed(c['difference_mean'])} | {cells} | "
                   + c["verdict"] + (" (under-powered)" if c["under_powered"] else "") + " |")
    out.append("")
    for c in record["comparisons"]:
        out.append(comparison_section(c, f"### {c['arms']['treatment']['name']} against {family['baseline']}: "))
    return "\n".join(out)


def comparison_section(record: dict, heading: str) -> str:
    """One treatment against the baseline: the verdict under ``heading``, the rule and every number it used."""
    arms, metric = record["arms"], record["metric"]
    unit = " points" if metric["units"] == "points" else ""
    base, treat = arms["baseline"], arms["treatment"]
    where = _where(metric)
    provisional = " (provisional: a tuning winner sits on the edge of its grid)" if record["provisional"] else ""
    marked = " (under-powered)" if record["under_powered"] else ""
    test = "its Holm-adjusted p must be below the family-wise α" if "holm" in record else \
        "the 95% t-interval must exclude 0"
    out = [f"{heading}{record['verdict']}{marked}{provisional}\n",
           f"Pre-registered criterion (`data/experiment.yaml`): treatment `{treat['name']}` (arm {treat['arm']}) − "
           f"baseline `{base['name']}` (arm {base['arm']}) on `{metric['name']}` {where}, paired by training seed, "
           f"must reach {record['threshold']:g}{unit}"
           + (f"; below {record['inconclusive_below']:g}{unit} it failed, in between it is inconclusive"
              if record["inconclusive_below"] is not None else "")
           + (f"; {test}" if record["ci_excludes_zero"] else "")
           + (f"; also validated when the baseline drops more than {record['collapse']['drop']:g}{unit} from its "
              f"own peak while the treatment does not" if record["collapse"] else "") + ".\n",
           f"Decided by rule `{record['rule']}`: {record['reason']}.\n"]
    if record.get("exploratory"):
        out.append("The spec declares this experiment exploratory.\n")
    if record["seeds_missing"]:
        out.append("Pre-registered seeds without an accepted run in both arms: "
                   + ", ".join(map(str, record["seeds_missing"])) + ".\n")
    if record["tuning"] and record["tuning"]["evidence"] != "tuning stage":
        out.append("The spec declares tuning, but this bundle carries no tuning-stage evidence (data/stages/tuning/): "
                   "the selection is not checked here.\n")
    out.append(f"| Seed | Baseline {base['name']} | Treatment {treat['name']} | Treatment − baseline |")
    out.append("|---|---|---|---|")
    out += [f"| {r['seed']} | {_plain(r['baseline'])} | {_plain(r['treatment'])} | {_signed(r['difference'])} |"
            for r in record["per_seed"]]
    sd = record["difference_sd"]
    ci = record["difference_ci95"]
    missing = _missing(record)
    out.append(f"| mean ± SD | {_plain(record['baseline']['mean'])} | {_plain(record['treatment']['mean'])} | "
               f"{_signed(record['difference_mean'])}" + (f" ± {sd:.2f}" if sd is not None else " (n<2)")
               + (f", no interval ({missing})" if missing else f", 95% t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}]"
                  if ci else "") + " |\n")
    out.append(_power_sentence(record, unit))
    equivalence = _equivalence_sentence(record, unit)
    if equivalence:
        out.append(equivalence)
    if "sizing" in record:
        out.append(_sizing_sentence(record["sizing"]))
    collapse = record["collapse"]
    if collapse and "baseline" in collapse:
        out.append("Collapse check (mean curve over the paired seeds): " + "; ".join(
            f"{role} peak {_plain(collapse[role]['peak'])}, final {_plain(collapse[role]['final'])}, drop "
            f"{_plain(collapse[role]['drop'])}{unit}" + (" (collapsed)" if collapse[role]["collapsed"] else "")
            for role in ("baseline", "treatment")) + ".\n")
    if record["selected"]:
        out.append("Tuning selected: " + "; ".join(
            f"{name}: " + ", ".join(f"{k}={v}" for k, v in chosen.items()) for name, chosen in record["selected"].items())
                   + f" (on {record['tuning']['metric']}, never the verdict metric).\n")
    for edge in record["edge_of_grid"]:
        out.append(f"- Edge of grid: {edge['arm']}'s best {edge['setting']}={edge['value']} is the {edge['side']} "
                   f"end of its grid.")
    if record["edge_of_grid"]:
        out.append("")
    return "\n".join(out)


def _missing(record: dict) -> str | None:
    """What a comparison's design lacks for any inferential statement (``claims.shortfalls``), in words; None
    when it lacks nothing."""
    claim = record.get("claim") or {}
    if claim.get("kind") == "pending":  # a look of seeds in waves that has not decided: no fixed-sample interval
        return claim["sentence"]
    return ", ".join(m["what"] for m in claim.get("missing", [])) or None


def _equivalence_sentence(record: dict, unit: str) -> str | None:
    """TOST against the spec's equivalence margin: its interval, p and decision, or why it is withheld; None
    when the spec declares no margin."""
    e = (record.get("claim") or {}).get("equivalence")
    if e is None:
        return None
    said = f"Equivalence within ±{e['margin']:g}{unit} (the spec's equivalence margin), by {e['test']}"
    if "withheld" in e:
        return f"{said}: {e['withheld']}.\n"
    low, high = e["interval"]
    verdict = "equivalent" if e["equivalent"] else "not shown equivalent"
    return (f"{said} at α = {e['alpha']:.2g}: {verdict} (p = {e['p_value']:.3g}; {e['level'] * 100:g}% t-interval "
            f"[{low:+.2f}, {high:+.2f}]{unit}, " + ("inside" if e["equivalent"] else "not inside")
            + f" ±{e['margin']:g}).\n")


def _power_sentence(record: dict, unit: str) -> str:
    """What the design could detect (its minimum detectable effect at 80 % power), and the under-powered mark's
    reason; what the design lacks when it may state neither."""
    mde = record["mde"]
    claim = record.get("claim") or {}
    if mde["value"] is None and claim.get("sentence"):
        return f"Minimum detectable effect: not stated ({claim['sentence']}).\n"
    if mde["value"] is None:
        return "Minimum detectable effect: none (fewer than two paired seeds).\n"
    text = (f"Minimum detectable effect: {mde['value']:.2f}{unit} (the smallest true difference this design, "
            f"{len(record['seeds'])} paired seeds with the observed SD of their differences, detects with "
            f"{mde['power'] * 100:g}% power in a two-sided paired t-test at α = {mde['alpha']:.2g}).")
    if record["under_powered"]:
        text += (f" Under-powered: the verdict FAILED, yet its interval still reaches the threshold "
                 f"{record['threshold']:g}{unit}; the design cannot tell a difference of the threshold's size "
                 f"from the one observed. The pre-registered rule's verdict stands.")
    return text + "\n"


def _z(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _hours(cost: dict | None) -> str:
    """A wave's measured cost in words: GPU-hours where its jobs held GPUs, else CPU-hours."""
    if not cost:
        return "cost not measured"
    text = (f"{cost['gpu_hours']:.3g} GPU-h" if cost["gpu_hours"] else f"{cost['cpu_hours']:.3g} CPU-h") \
        + f" ({cost['jobs']} jobs"
    return text + (f", {cost['unmeasured']} unmeasured)" if cost["unmeasured"] else ")")


def _sizing_sentence(sizing: dict) -> str:
    """A design in waves: the rule, the boundaries, what the design claims, and each look's statistic, decision and
    what the decision cost (its wave's hours, and the total up to it)."""
    waves, bounds, looks = sizing["waves"], sizing["boundaries"], sizing["looks"]
    written = (f"min: {sizing['min']}, max: {sizing['max']}" if sizing["resized"] else
               f"waves: [{', '.join(map(str, waves))}]") + ("" if sizing["futility"] is None else
                                                             f", futility: {sizing['futility']:g}")
    claimed = sizing["claims"]
    text = (f"Seeds in waves (`seeds: {{n: auto, {written}}}`), registered before any seed ran: {len(waves)} looks "
            f"spending α = {sizing['alpha']:.2g} by the {sizing['rule']} rule (Lan-DeMets) at information fractions "
            f"{', '.join(f'{t:.3g}' for t in sizing['information_fractions'])}; boundaries |Z| ≥ "
            f"{', '.join(f'{c:.3f}' for c in bounds)} (nominal p {', '.join(f'{a:.3g}' for a in sizing['nominal_alpha'])})"
            f"; each wave's paired t statistic is mapped to a standard normal and look k combines waves 1..k with the "
            f"fixed weights {', '.join(f'{w:.3f}' for w in sizing['weights'])}. The design rejects a true null with "
            f"probability {claimed['type_i_error']:.3g}"
            + ("" if claimed["detectable_effect_sd"] is None else
               f" and tells a true difference of {claimed['detectable_effect_sd']:.3g} SDs of the seeds' differences "
               f"from 0 with {sizing['power'] * 100:g}% power") + ".")
    spent = {"cpu_hours": 0.0, "gpu_hours": 0.0}
    for look in looks:
        cost = look.get("cost")
        for key in spent:
            spent[key] += (cost or {}).get(key, 0.0)
        total = "GPU" if spent["gpu_hours"] else "CPU"
        text += (f" Look {look['look']}: seeds {', '.join(map(str, look['seeds']))}, SD "
                 + ("—" if look["sd"] is None else f"{look['sd']:.2f}") + f", stage Z = {_z(look['z_stage'])}, "
                 f"Z = {_z(look['z'])} against {look['boundary']:.3f}" + (" (crossed)" if look["crossed"] else "")
                 + (" (below the futility bound)" if look["futile"] else "")
                 + (f"; the threshold needs {look['required_seeds']} seeds at {sizing['power'] * 100:g}% power"
                    if "required_seeds" in look else "") + (f" ({look['why']})" if look.get("why") else "")
                 + f"; {_DECISIONS[look['decision']]}; its wave {_hours(cost)}, "
                 f"{spent[total.lower() + '_hours']:.3g} {total}-h in all.")
    if sizing["next_wave"] is not None:
        text += f" The next wave, seeds {sizing['next_wave'][0]}..{sizing['next_wave'][1]}, has not run."
    if sizing["seeds_outside_design"]:
        text += (" Seeds outside the design, not read: " + ", ".join(map(str, sizing["seeds_outside_design"])) + ".")
    if sizing.get("seeds_ahead"):
        text += (" Seeds of later waves that ran before the next wave, read at their own look: "
                 + ", ".join(map(str, sizing["seeds_ahead"])) + ".")
    return text + "\n"


_DECISIONS = {"continue": "the design went on", "stop-efficacy": "the design stopped: told from 0 with the mean "
              "difference at the threshold", "stop-worse": "the design stopped: the treatment is worse",
              "stop-futility": "the design stopped for futility", "final": "the last look decides",
              "stop-no-test": "the design cannot decide"}
