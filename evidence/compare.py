"""``python -m evidence compare A B``: seed 002's before/after table for two sweeps or bundles.

A and B are sweep directories (their built ``bundle/`` when present, else the jobs evaluated in
memory; nothing is written), bundle directories, or bundle archives. Per measure and per arm
present in both: A, B, B/A, the change in % (and in points for rates), and B − A paired by
training seed when both ran the same seeds (mean ± SD, t-interval), else unpaired (Welch) with a
note. Only accepted runs count, as in every other table.
"""

from __future__ import annotations

import tarfile
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from evidence import stats
from evidence.dataset import SETTINGS_FILE, BundleData, cell, csv_text, load_bundle_data
from evidence.incidents import load_user_incidents
from evidence.index import evaluate_sweep, index_row
from evidence.measures import LAST_K, POINTS_PER_UNIT, Measure, arm_values, parse_measure
from evidence.problems import CompareError, IncidentsFileError, SweepError
from evidence.sweep import job_name, read_sweep
from evidence.tables import arms as arm_order
from evidence.tables import fmt_interval
from facts.files import INDEX_TABLE, SWEEP_RECORD, bundle_payload_dir, sweep_bundle_payload

DEFAULT_METRICS = ("train/loss", "train/grad_norm", "rollout/raw_reward", "eval/pass@1")
COLUMNS = ("metric", "at", "last_k", "arm", "n_a", "n_b", "a_mean", "a_sd", "b_mean", "b_sd", "ratio_b_over_a",
           "change_pct", "change_points", "pairing", "n_pairs", "diff_mean", "diff_sd", "ci_low", "ci_high",
           "diff_units", "note")


@dataclass
class Side:
    """One input: a short name for the table and its evidence."""

    name: str
    data: BundleData


# ---- loading ---------------------------------------------------------------------------------

def _safe_members(tar: tarfile.TarFile, name: str) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for member in members:
        parts = PurePosixPath(member.name).parts
        if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
            raise CompareError(f"{name}: archive member {member.name!r} is unsafe; audit it with "
                               f"`python -m evidence audit {name}`")
    return members


def _from_archive(path: Path, stack: ExitStack) -> BundleData:
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evidence-compare-")))
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            tar.extractall(tmp, members=_safe_members(tar, path.name), filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise CompareError(f"{path}: not a readable bundle archive ({exc.__class__.__name__})") from None
    roots = [p for p in tmp.iterdir() if p.is_dir()]
    if len(roots) != 1 or not (bundle_payload_dir(roots[0]) / INDEX_TABLE).is_file():
        raise CompareError(f"{path}: no bundle (data/index.csv) inside the archive")
    return load_bundle_data(bundle_payload_dir(roots[0]))


def _from_sweep(path: Path, last_k: int) -> BundleData:
    """The sweep's accepted runs as ``BundleData``, evaluated in memory from its job directories."""
    sweep = read_sweep(path)
    user = load_user_incidents(path, {job_name(a, s) for a, s in sweep.jobs})
    evidences = evaluate_sweep(sweep, user.excluded_jobs)
    data = BundleData(sweep=sweep.record, settings={"last_k": last_k, "ci_level": stats.CI_LEVEL,
                                                    "n_updates": sweep.n_updates},
                      index=[{k: cell(v) for k, v in index_row(e).items()} for e in evidences], incidents=[])
    for e in evidences:
        if e.accepted:
            data.steps[(e.arm, e.seed)] = sorted(e.metrics.records, key=lambda r: r["step"])
            data.evals[(e.arm, e.seed)] = {k: v for k, v in (e.eval_summary or {}).items() if isinstance(v, dict)}
    return data


def load_side(path: str | Path, last_k: int, stack: ExitStack) -> Side:
    """Evidence of a sweep directory, a bundle directory or a bundle archive."""
    path = Path(path)
    # bundle/ and bundle.tar.gz say little on their own: name them with their sweep's directory
    name = f"{path.resolve().parent.name}/{path.name}" if path.name.startswith("bundle") else path.name
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        return Side(name, _from_archive(path, stack))
    if path.is_dir() and (bundle_payload_dir(path) / SETTINGS_FILE).is_file():
        return Side(name, load_bundle_data(bundle_payload_dir(path)))
    if path.is_dir() and (path / SWEEP_RECORD).is_file():
        built = sweep_bundle_payload(path)
        if (built / SETTINGS_FILE).is_file():
            return Side(path.name, load_bundle_data(built))
        return Side(path.name, _from_sweep(path, last_k))
    if not path.exists():
        raise CompareError(f"{path}: no such file or directory")
    raise CompareError(f"{path}: not a sweep directory (sweep.json), a bundle directory or a .tar.gz bundle")


# ---- the comparison ------------------------------------------------------------------------------

def ratio(a: float | None, b: float | None) -> float | None:
    """B/A of the across-seed means; None when A is 0 or missing."""
    return None if a is None or b is None or a == 0 else b / a


def change_pct(a: float | None, b: float | None) -> float | None:
    """Relative change (B − A) / |A| · 100 (002: pass@1 0.444 -> 0.386 is −13 %)."""
    return None if a is None or b is None or a == 0 else (b - a) / abs(a) * 100


def compare_arm(measure: Measure, arm: str, a: BundleData, b: BundleData) -> dict:
    """One table row: the measure of ``arm`` in A and in B, and B − A by seed where the seeds match."""
    values_a, values_b = arm_values(a, measure, arm), arm_values(b, measure, arm)
    sum_a, sum_b = stats.across_seeds(list(values_a.values())), stats.across_seeds(list(values_b.values()))
    scale = POINTS_PER_UNIT if measure.is_rate else 1.0
    row = {"metric": measure.metric, "at": measure.at, "last_k": measure.last_k if measure.at == LAST_K else None,
           "arm": arm, "n_a": sum_a.n, "n_b": sum_b.n, "a_mean": sum_a.mean, "a_sd": sum_a.sd,
           "b_mean": sum_b.mean, "b_sd": sum_b.sd, "ratio_b_over_a": ratio(sum_a.mean, sum_b.mean),
           "change_pct": change_pct(sum_a.mean, sum_b.mean),
           "change_points": None if not measure.is_rate or sum_a.n == 0 or sum_b.n == 0
           else (sum_b.mean - sum_a.mean) * POINTS_PER_UNIT,
           "diff_units": "points" if measure.is_rate else "units", "pairing": "", "n_pairs": 0,
           "diff_mean": None, "diff_sd": None, "ci_low": None, "ci_high": None, "note": ""}
    if not values_a or not values_b:
        row["note"] = f"no accepted run in {'A' if not values_a else 'B'}"
        return row
    if set(values_a) == set(values_b):
        paired = stats.paired_difference({s: scale * v for s, v in values_b.items()},
                                         {s: scale * v for s, v in values_a.items()}, a.ci_level)
        row.update(pairing="paired", n_pairs=paired.summary.n, diff_mean=paired.summary.mean,
                   diff_sd=paired.summary.sd)
        if paired.interval:
            row["ci_low"], row["ci_high"] = paired.interval
        else:
            row["note"] = "one seed: no SD or interval"
        return row
    welch = stats.welch_difference([scale * v for v in values_a.values()], [scale * v for v in values_b.values()],
                                   a.ci_level)
    row.update(pairing="unpaired", diff_mean=welch.mean)
    if welch.interval:
        row["ci_low"], row["ci_high"] = welch.interval
    row["note"] = (f"seeds differ (A {', '.join(map(str, values_a))}; B {', '.join(map(str, values_b))}): "
                   f"unpaired, Welch interval" + ("" if welch.interval else ", none with n<2"))
    return row


def compare(a: Side, b: Side, measures: list[Measure], force: bool = False) -> list[dict]:
    """Every (measure, common arm) row; refuses different workloads or no common arm unless ``force``."""
    workloads = (a.data.sweep.get("workload"), b.data.sweep.get("workload"))
    if workloads[0] != workloads[1] and not force:
        raise CompareError(f"A ran workload {workloads[0]!r} and B {workloads[1]!r}: not comparable "
                           f"(--force compares them anyway)")
    common = [arm for arm in arm_order(a.data) if arm in b.data.arms]
    if not common and not force:
        raise CompareError(f"no arm in both (A: {', '.join(a.data.arms)}; B: {', '.join(b.data.arms)}); "
                           f"--force prints the empty comparison")
    return [compare_arm(m, arm, a.data, b.data) for m in measures for arm in common]


# ---- output ----------------------------------------------------------------------------------------

def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4g}"


def markdown(a: Side, b: Side, rows: list[dict], level: float) -> str:
    """The table as markdown: one line per (measure, arm)."""
    out = [f"# Compare A = {a.name} -> B = {b.name}\n"]
    for label, side in (("A", a), ("B", b)):
        sweep = side.data.sweep
        out.append(f"- {label}: {side.name}: workload {sweep.get('workload', '—')}, commit "
                   f"{str(sweep.get('source_commit') or '—')[:12]}, seeds {', '.join(map(str, sweep.get('seeds', [])))}, "
                   f"{len(side.data.accepted)} accepted run(s)")
    out.append("")
    if not rows:
        out.append("_No arm in both inputs: nothing to compare._")
        return "\n".join(out) + "\n"
    out.append(f"| Metric | Arm | A | B | B/A | Change | B − A (mean ± SD) | {level * 100:g}% t-interval | Pairing |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        metric = f"{r['metric']} (final)" if r["at"] == "final" else f"{r['metric']} (last-{r['last_k']} mean)"
        change = "—" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        if r["change_points"] is not None:
            change += f" ({r['change_points']:+.2f} points)"
        units = " points" if r["diff_units"] == "points" else ""
        diff = "—" if r["diff_mean"] is None else _signed(r["diff_mean"]) + (
            f" ± {r['diff_sd']:.4g}" if r["diff_sd"] is not None else "") + units
        interval = fmt_interval((r["ci_low"], r["ci_high"]), 4) if r["ci_low"] is not None else "—"
        pairing = f"{r['pairing']} (n={r['n_pairs']})" if r["pairing"] == "paired" else r["pairing"] or "—"
        if r["note"]:
            pairing += f"; {r['note']}"
        cells = [metric, r["arm"], _num(r["a_mean"]), _num(r["b_mean"]),
                 "—" if r["ratio_b_over_a"] is None else f"{r['ratio_b_over_a']:.3g}x", change, diff, interval, pairing]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"


def compare_paths(path_a, path_b, metrics: list[str] | None = None, last_k: int = stats.DEFAULT_LAST_K, force: bool = False,
        csv_path: str | Path | None = None) -> str:
    """Load, compare, write the CSV if asked; returns the markdown. Raises ``CompareError`` (one line)."""
    names = list(dict.fromkeys(list(DEFAULT_METRICS) + list(metrics or [])))
    try:
        measures = [parse_measure(name, None, None if name.startswith("eval/") else last_k) for name in names]
    except ValueError as exc:
        raise CompareError(f"--metric: {exc}") from None
    with ExitStack() as stack:
        try:
            a, b = load_side(path_a, last_k, stack), load_side(path_b, last_k, stack)
        except (SweepError, IncidentsFileError) as exc:
            raise CompareError(str(exc)) from None
        except (OSError, ValueError, KeyError) as exc:
            raise CompareError(f"cannot read the evidence ({exc.__class__.__name__}: {exc})") from None
        rows = compare(a, b, measures, force)
        if csv_path is not None:
            Path(csv_path).write_text(csv_text(COLUMNS, rows), encoding="utf-8")
        return markdown(a, b, rows, a.data.ci_level)
