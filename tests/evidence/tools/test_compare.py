"""``python -m evidence compare A B`` on synthetic sweeps, against ratios and intervals computed by hand."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from benchmarks.synthetic_sweep import WORKLOAD, make_sweep, write_eval
from evidence import build_bundle
from evidence.tools.compare import CompareError, compare_paths
from facts.repo import REPO_ROOT
from tests.evidence_cli import evidence_in_process, evidence_process
from tests.sweeps import reseal_bag

REPO = REPO_ROOT
T_975_DF2 = 4.302652729911275  # Student t, two-sided 95 %, 2 degrees of freedom
PASS1_A = {("grpo", 1): 0.40, ("grpo", 2): 0.50, ("grpo", 3): 0.45, ("rpp", 1): 0.30, ("rpp", 2): 0.35, ("rpp", 3): 0.40}
PASS1_B = {("grpo", 1): 0.38, ("grpo", 2): 0.44, ("grpo", 3): 0.42, ("rpp", 1): 0.31, ("rpp", 2): 0.36, ("rpp", 3): 0.41,
           ("grpo", 4): 0.40, ("grpo", 5): 0.50}


def before_after(tmp_path: Path, seeds_b=(1, 2, 3), workload_b="toy", arms_b=None):
    a = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2, 3), name="before",
                   final_pass1=lambda arm, seed: PASS1_A[(arm, seed)],
                   reward=lambda arm, seed, step: 0.5 + 0.01 * seed)
    b = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=seeds_b, name="after", workload=workload_b, arms=arms_b,
                   final_pass1=lambda arm, seed: PASS1_B.get((arm, seed), 0.5),
                   reward=lambda arm, seed, step: 0.6 + 0.02 * seed)
    # seed 002's regression: the loss about 80x and the gradient norm about 130x larger after the change
    for log in (b / "jobs").glob("*/run/metrics.jsonl"):
        records = [json.loads(line) for line in log.read_text().splitlines()]
        for r in records:
            r["train/loss"] *= 80
            r["train/grad_norm"] *= 130
        log.write_text("".join(json.dumps(r) + "\n" for r in records))
    return a, b


def cli(*args) -> subprocess.CompletedProcess:
    """``python -m evidence compare <args>`` in this process (tests/evidence_cli.py); the first test below runs it as
    a process."""
    return evidence_in_process("compare", *args)


def csv_rows(path: Path) -> dict[tuple[str, str], dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {(r["metric"], r["arm"]): r for r in csv.DictReader(handle)}


def last_k_mean_from_logs(sweep: Path, job: str, key: str, k: int = 10) -> float:
    records = [json.loads(line) for line in (sweep / "jobs" / job / "run" / "metrics.jsonl").read_text().splitlines()]
    values = [r[key] for r in records][-k:]
    return sum(values) / len(values)


def test_compare_pairs_by_seed_with_hand_computed_ratio_change_and_interval(tmp_path):
    a, b = before_after(tmp_path)
    result = evidence_process("compare", a, b, "--csv", tmp_path / "cmp.csv", "--metric", "train/clip_frac")
    assert result.returncode == 0, result.stderr
    assert not (a / "bundle").exists() and not (b / "bundle").exists()  # compare writes nothing into a sweep
    rows = csv_rows(tmp_path / "cmp.csv")
    assert {m for m, _ in rows} == {"train/loss", "train/grad_norm", "rollout/raw_reward", "eval/pass@1",
                                    "train/clip_frac"}
    assert {arm for _, arm in rows} == {"grpo", "rpp"}

    row = rows[("eval/pass@1", "grpo")]
    mean_a, mean_b = (0.40 + 0.50 + 0.45) / 3, (0.38 + 0.44 + 0.42) / 3
    assert math.isclose(float(row["a_mean"]), mean_a, rel_tol=1e-12)
    assert math.isclose(float(row["ratio_b_over_a"]), mean_b / mean_a, rel_tol=1e-12)  # 0.91852
    assert math.isclose(float(row["change_pct"]), (mean_b - mean_a) / mean_a * 100, rel_tol=1e-9)  # -8.15 %
    assert math.isclose(float(row["change_points"]), -11 / 3, rel_tol=1e-9)
    # paired by seed, in points: d = (-2, -6, -3), mean -11/3, SD sqrt(((5/3)^2 + (7/3)^2 + (2/3)^2) / 2)
    sd = math.sqrt(((5 / 3) ** 2 + (7 / 3) ** 2 + (2 / 3) ** 2) / 2)
    assert row["pairing"] == "paired" and row["n_pairs"] == "3" and row["diff_units"] == "points"
    assert math.isclose(float(row["diff_mean"]), -11 / 3, rel_tol=1e-9)
    assert math.isclose(float(row["diff_sd"]), sd, rel_tol=1e-9)
    assert math.isclose(float(row["ci_low"]), -11 / 3 - T_975_DF2 * sd / math.sqrt(3), rel_tol=1e-9)
    assert math.isclose(float(row["ci_high"]), -11 / 3 + T_975_DF2 * sd / math.sqrt(3), rel_tol=1e-9)

    reward = rows[("rollout/raw_reward", "rpp")]
    # constant per run: A 0.5 + 0.01 s, B 0.6 + 0.02 s for s = 1, 2, 3: means 0.52 and 0.64,
    # d = 10 + s points = (11, 12, 13): mean 12, SD 1
    assert math.isclose(float(reward["ratio_b_over_a"]), 0.64 / 0.52, rel_tol=1e-9)
    assert math.isclose(float(reward["diff_mean"]), 12.0, rel_tol=1e-9)
    assert math.isclose(float(reward["diff_sd"]), 1.0, rel_tol=1e-9)

    loss = rows[("train/loss", "grpo")]
    runs_a = [last_k_mean_from_logs(a, f"grpo-{s}", "train/loss") for s in (1, 2, 3)]
    runs_b = [last_k_mean_from_logs(b, f"grpo-{s}", "train/loss") for s in (1, 2, 3)]
    mean_a, mean_b = sum(runs_a) / 3, sum(runs_b) / 3
    assert mean_a < 0 and mean_b < 0  # negative losses: no B/A (80x would read against the change)
    assert loss["ratio_b_over_a"] == ""
    assert math.isclose(float(loss["change_pct"]), (mean_b - mean_a) / abs(mean_a) * 100, rel_tol=1e-9)  # -7,900 %
    grad = rows[("train/grad_norm", "rpp")]
    assert math.isclose(float(grad["change_pct"]), 12900, rel_tol=1e-9)  # 130x = +12,900 %
    assert loss["diff_units"] == "units" and loss["change_points"] == ""
    diffs = [rb - ra for ra, rb in zip(runs_a, runs_b)]
    assert math.isclose(float(loss["diff_mean"]), sum(diffs) / 3, rel_tol=1e-9, abs_tol=1e-15)

    lines = result.stdout.splitlines()
    assert lines[0] == "# Compare A = before -> B = after"
    shown = next(line for line in lines if line.startswith("| eval/pass@1 (final) | grpo |"))
    assert "| 0.45 | 0.4133 | 0.919x | -8.1% (-3.67 points) | -3.667 ± 2.082 points |" in shown


def test_compare_reads_bundle_archives_and_directories_like_the_sweeps(tmp_path):
    a, b = before_after(tmp_path)
    from_sweeps = compare_paths(a, b)
    build_bundle(a, figures=False)
    build_bundle(b, figures=False)
    from_bundles = compare_paths(a / "bundle.tar.gz", b / "bundle").split("\n")
    assert from_bundles[0] == "# Compare A = before/bundle.tar.gz -> B = after/bundle"
    assert from_bundles[4:] == from_sweeps.split("\n")[4:]


def test_different_seeds_compare_unpaired_with_a_welch_interval_and_a_note(tmp_path):
    a, b = before_after(tmp_path, seeds_b=(4, 5, 6))
    result = cli(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    row = csv_rows(tmp_path / "cmp.csv")[("eval/pass@1", "grpo")]
    assert row["pairing"] == "unpaired" and "seeds differ (A 1, 2, 3; B 4, 5, 6)" in row["note"]
    group_a, group_b = [40.0, 50.0, 45.0], [40.0, 50.0, 50.0]  # points
    ma, mb = sum(group_a) / 3, sum(group_b) / 3
    va = sum((x - ma) ** 2 for x in group_a) / 2 / 3
    vb = sum((x - mb) ** 2 for x in group_b) / 2 / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    half = scipy_stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert math.isclose(float(row["diff_mean"]), mb - ma, abs_tol=1e-12)
    assert math.isclose(float(row["ci_low"]), mb - ma - half, rel_tol=1e-9)
    assert math.isclose(float(row["ci_high"]), mb - ma + half, rel_tol=1e-9)


def test_compare_refuses_different_workloads_and_no_common_arm_unless_forced(tmp_path):
    a, b = before_after(tmp_path, workload_b="gsm8k_qwen3_0p6b")
    refused = cli(a, b)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == ("python -m evidence: error: A and B differ in workload (A 'toy'; B 'gsm8k_qwen3_0p6b'): "
                              "not comparable (--force compares them anyway)\n")
    forced = cli(a, b, "--force")
    assert forced.returncode == 0
    assert "- compared with --force although they differ in workload (A 'toy'; B 'gsm8k_qwen3_0p6b')" in forced.stdout

    other = make_sweep(tmp_path, seeds=(1, 2, 3), name="lr", arms={"rpp-lr3e-4": {"algo": "rpp", "workload.lr": "3e-4"},
                                                                  "rpp-lr1e-4": {"algo": "rpp", "workload.lr": "1e-4"}})
    refused = cli(a, other)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "no arm in both (A: grpo, rpp; B: rpp-lr1e-4, rpp-lr3e-4)" in refused.stderr
    forced = cli(a, other, "--force")
    assert forced.returncode == 0 and "_No arm in both inputs: nothing to compare._" in forced.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("missing-a", "missing-b"), "missing-a: no such file or directory"),
    (("{a}", "{a}", "--metric", "eval/pass@3"), "--metric: unknown eval metric eval/pass@3"),
    (("{a}", "{a}", "--last-k", "0"), "--last-k must be at least 1"),
])
def test_compare_bad_input_is_one_line(tmp_path, args, message):
    a = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2))
    result = cli(*(x.format(a=a) for x in args))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr


def test_compare_refuses_an_unknown_input_kind(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CompareError, match="not a sweep directory"):
        compare_paths(tmp_path, tmp_path / "notes.txt")


def set_metric(sweep: Path, key: str, value) -> None:
    """Every step of every job logs ``value(arm, seed)`` as ``key``."""
    for log in (sweep / "jobs").glob("*/run/metrics.jsonl"):
        arm, seed = log.parent.parent.name.rsplit("-", 1)
        records = [json.loads(line) for line in log.read_text().splitlines()]
        log.write_text("".join(json.dumps({**r, key: value(arm, int(seed))}) + "\n" for r in records))


def table_line(stdout: str, metric: str, arm: str) -> list[str]:
    line = next(x for x in stdout.splitlines() if x.startswith(f"| {metric} ") and f" | {arm} | " in x)
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_negative_and_sign_crossing_means_have_no_ratio_and_a_change_that_reads_with_b_minus_a(tmp_path):
    # issue 23: a loss -0.1 -> -0.18 showed "B/A 1.8x" beside "Change -80 %"
    a, b = before_after(tmp_path)
    set_metric(a, "train/loss", lambda arm, seed: -0.1)
    set_metric(b, "train/loss", lambda arm, seed: -0.18 if arm == "grpo" else 0.05)
    result = cli(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    rows = csv_rows(tmp_path / "cmp.csv")
    both_negative, crossing = rows[("train/loss", "grpo")], rows[("train/loss", "rpp")]
    assert both_negative["ratio_b_over_a"] == "" and crossing["ratio_b_over_a"] == ""
    assert math.isclose(float(both_negative["change_pct"]), (-0.18 + 0.1) / 0.1 * 100, rel_tol=1e-9)  # -80 %
    assert math.isclose(float(both_negative["diff_mean"]), -0.08, rel_tol=1e-9)  # the same direction
    assert crossing["change_pct"] == "" and math.isclose(float(crossing["diff_mean"]), 0.15, rel_tol=1e-9)
    # each pair's differences tie exactly (a constant loss per arm): the claims rules withhold their interval, and only
    # the crossing pair's note says the signs differ
    assert "differ in sign" in crossing["note"] and "differ in sign" not in both_negative["note"]

    grpo = table_line(result.stdout, "train/loss", "grpo")
    assert grpo[2:6] == ["-0.1", "-0.18", "—", "-80.0%"]
    rpp = table_line(result.stdout, "train/loss", "rpp")
    assert rpp[2:6] == ["-0.1", "0.05", "—", "—"] and rpp[10].startswith("paired (n=3) [")
    sign_notes = [line.split("]")[0] + "]" for line in result.stdout.splitlines()
                  if line.endswith("] A and B differ in sign: no B/A or %; read B − A")]
    assert len(sign_notes) == 1 and sign_notes[0] in rpp[10] and sign_notes[0] not in grpo[10]
    assert any(line.startswith("B/A: ratio of the across-seed means, shown when both are positive.")
               for line in result.stdout.splitlines())
    # a positive pair keeps its ratio
    assert math.isclose(float(rows[("eval/pass@1", "grpo")]["ratio_b_over_a"]), (1.24 / 3) / (1.35 / 3), rel_tol=1e-9)


def test_the_unpaired_note_is_said_once_under_the_table(tmp_path):
    a, b = before_after(tmp_path, seeds_b=(4, 5, 6))
    result = cli(a, b)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("seeds differ") == 1
    assert "[1] seeds differ (A 1, 2, 3; B 4, 5, 6): unpaired, Welch interval" in result.stdout.splitlines()
    pairings = [cells[10] for cells in (table_line(result.stdout, m, arm)
                                       for m in ("train/grad_norm", "eval/pass@1") for arm in ("grpo", "rpp"))]
    assert pairings == ["unpaired [1]"] * 4


def test_compare_across_three_sweeps_gives_each_its_column_and_its_difference_from_the_first(tmp_path):
    passes = {"first": 0.40, "second": 0.46, "third": 0.31}
    sweeps = [make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2), name=name,
                         final_pass1=lambda arm, seed, p=p: p + 0.02 * seed + (0.1 if arm == "rpp" else 0.0))
              for name, p in passes.items()]
    result = cli(*sweeps, "--csv", tmp_path / "many.csv")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# Compare 3 inputs (differences from input 1)"
    assert lines[2].startswith("- 1: first: workload toy") and lines[4].startswith("- 3: third: workload toy")
    with open(tmp_path / "many.csv", newline="", encoding="utf-8") as handle:
        rows = {(r["metric"], r["arm"], r["name"]): r for r in csv.DictReader(handle)}
    for name, p in passes.items():
        row = rows[("eval/pass@1", "grpo", name)]
        mean = p + 0.03  # seeds 1 and 2: p + 0.02 and p + 0.04
        assert math.isclose(float(row["mean"]), mean, rel_tol=1e-9)
        assert math.isclose(float(row["sd"]), math.sqrt(2 * 0.01**2), rel_tol=1e-6)
        if name == "first":
            assert row["diff_vs_first"] == "" and row["input"] == "1"
        else:
            assert math.isclose(float(row["diff_vs_first"]), (p - 0.40) * 100, rel_tol=1e-9)  # points
            assert math.isclose(float(row["change_pct_vs_first"]), (p - 0.40) / 0.43 * 100, rel_tol=1e-9)
    cells = table_line(result.stdout, "eval/pass@1", "grpo")
    assert cells[2] == "0.43 ± 0.01414 (n=2)"
    assert cells[3] == "0.49 ± 0.01414 (n=2); +6 points, +14.0%"
    assert cells[4] == "0.34 ± 0.01414 (n=2); -9 points, -20.9%"


def test_compare_across_sweeps_refuses_different_workloads_in_one_line(tmp_path):
    sweeps = [make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2), name=name, workload=workload)
              for name, workload in (("x", "toy"), ("y", "toy"), ("z", "gsm8k_qwen3_0p6b"))]
    refused = cli(*sweeps)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "the inputs differ in workload (x 'toy'; y 'toy'; z 'gsm8k_qwen3_0p6b'): not comparable" in refused.stderr


# ---- held to the audit's standards (issue 21, section 4) ----------------------------------------------

def one_line_refusal(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr[-3000:]
    return result.stderr


def test_an_archive_with_a_member_beyond_the_audits_limit_is_refused_before_anything_is_extracted(tmp_path):
    import io
    import resource
    import tarfile

    from evidence.audit.archive import MAX_MEMBER_BYTES

    a = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2), name="a")
    archive = tmp_path / "big" / "bundle.tar.gz"
    archive.parent.mkdir()

    class Zeros:  # the member's bytes, streamed: nothing this size is held or written here
        def __init__(self, n):
            self.left = n

        def read(self, size=-1):
            n = self.left if size < 0 else min(size, self.left)
            self.left -= n
            return bytes(n)

    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        index = tarfile.TarInfo("bundle/data/index.csv")
        index.size = 4
        tar.addfile(index, io.BytesIO(b"job\n"))
        big = tarfile.TarInfo("bundle/data/big.bin")
        big.size = MAX_MEMBER_BYTES + 1
        tar.addfile(big, Zeros(big.size))

    def small_files():  # extracting the member would need a file far bigger than this allows
        resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 2**20, 32 * 2**20))

    result = subprocess.run([sys.executable, "-m", "evidence", "compare", str(a), str(archive)], cwd=REPO,
                            capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    message = one_line_refusal(result)
    assert f"B: {archive}: not extracted: bundle.tar.gz:bundle/data/big.bin: member of {MAX_MEMBER_BYTES + 1} bytes" \
        in message and f"audit it with `python -m evidence audit {archive}`" in message


def _tamper(bundle: Path) -> None:
    """One digit of a sealed pass@1 changed, the size kept: only the manifest's digest can tell."""
    eval_csv = bundle / "data" / "eval.csv"
    text = eval_csv.read_text()
    at = text.index(",0.", text.index("\n")) + 3
    eval_csv.write_text(text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1:])


def test_a_bundle_whose_manifest_does_not_verify_is_refused_naming_the_file(tmp_path):
    import tarfile

    a, b = before_after(tmp_path)
    build_bundle(b, figures=False)
    _tamper(b / "bundle")
    retarred = tmp_path / "tampered" / "bundle.tar.gz"
    retarred.parent.mkdir()
    with tarfile.open(retarred, "w:gz") as tar:
        tar.add(b / "bundle", arcname="bundle")
    for given in (b / "bundle", b, retarred):  # the bundle, the sweep it was built in, an archive of it
        message = one_line_refusal(cli(a, given))
        assert "the bundle does not verify: data/eval.csv: SHA256 differs from manifest-sha256.txt" in message, given
        assert message.startswith("python -m evidence: error: B: ") and "python -m evidence audit" in message


def _steps(sweep, n):
    return make_sweep(sweep, algos=("grpo", "rpp"), seeds=(1, 2, 3), name="after", n_steps=n)


def _edit_jobs(sweep: Path, name: str, edit) -> None:
    for path in sorted((sweep / "jobs").glob(f"*/run/{name}")):
        record = json.loads(path.read_text())
        edit(record)
        path.write_text(json.dumps(record))


def _eval_settings(after: Path, **changed) -> None:
    """Both inputs' runs record the evaluation settings of a real run (run.json's config.workload.eval), the
    after's with ``changed``."""
    for sweep, values in ((after.parent / "before", {}), (after, changed)):
        _edit_jobs(sweep, "run.json", lambda r, values=values: r["config"].setdefault("workload", {}).update(
            eval={**WORKLOAD["eval"], **values}))


@pytest.mark.parametrize(("fact", "change", "named"), [
    ("steps", lambda b: None, "steps (A 10; B 12)"),
    ("eval subset", lambda b: _edit_jobs(b, "eval.json", lambda r: [e.update(subset_sha256="cd" * 32) for e in r.values()]),
     "eval subset (A subset_sha256 "),
    ("eval sampling", lambda b: _edit_jobs(b, "eval.json", lambda r: [e.update(eval_seed=31) for e in r.values()]),
     "eval sampling (A eval_seed 29; B eval_seed 31)"),
    ("eval sampling", lambda b: _eval_settings(b, temperature=0.2, top_k=5),
     "eval sampling (A temperature 1.0, top_k 0; B temperature 0.2, top_k 5)"),
    ("eval sampling", lambda b: _eval_settings(b, top_p=0.9, max_response_len=16),
     "eval sampling (A max_response_len 48, top_p 1.0; B max_response_len 16, top_p 0.9)"),
    ("trainer", lambda b: _edit_jobs(b, "run.json", lambda r: r.update(algorithm={"short": r["algo"], "trainer": "trl"})),
     "the trainer of grpo, rpp (A proofgrid; B trl)"),
])
def test_inputs_that_ran_differently_are_refused_naming_what_differs_unless_forced(tmp_path, fact, change, named):
    a = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2, 3), name="before")
    b = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2, 3), name="after", n_steps=12 if fact == "steps" else 10)
    change(b)
    message = one_line_refusal(cli(a, b))
    assert f"A and B differ in {named}" in message and "(--force compares them anyway)" in message
    assert message.count(" differ in ") == 1 and " and the " not in message.replace("A and B", "")  # only that fact
    forced = cli(a, b, "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"- compared with --force although they differ in {named}" in forced.stdout
    # built bundles are held to the same facts as the sweeps they came from
    build_bundle(a, figures=False)
    build_bundle(b, figures=False)
    assert f"A and B differ in {named}" in one_line_refusal(cli(a / "bundle.tar.gz", b / "bundle"))


def test_comparable_inputs_say_nothing_about_differences(tmp_path):
    a, b = before_after(tmp_path)
    result = cli(a, b)
    assert result.returncode == 0 and "--force" not in result.stdout


@pytest.mark.parametrize(("where", "message"), [
    ("dir", "--csv {tmp}: is a directory; name the file to write (such as {tmp}/compare.csv)"),
    ("missing parent", "--csv {tmp}/nowhere/cmp.csv: no directory {tmp}/nowhere to write it in"),
])
def test_a_csv_target_that_cannot_be_written_is_one_line_before_anything_is_read(tmp_path, where, message):
    target = tmp_path if where == "dir" else tmp_path / "nowhere" / "cmp.csv"
    refused = one_line_refusal(cli(tmp_path / "missing-a", tmp_path / "missing-b", "--csv", target))
    assert message.format(tmp=tmp_path) in refused and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(("file", "text", "message"), [
    ("sweep.json", "{not json", "data/sweep.json: not valid JSON"),
    ("sweep.json", "[]", "data/sweep.json: not a JSON object"),
    ("sweep.json", "null", "data/sweep.json: not a JSON object"),
    ("sweep.json", '{"workload": "toy"}', "data/sweep.json: 'algos' must be a non-empty list of names"),
    ("sweep.json", '{"workload": "toy", "algos": ["grpo", "rpp"], "seeds": "1", "n_updates": 10}',
     "data/sweep.json: 'seeds' must be a non-empty list of integers"),
    ("evidence.json", '{"last_k": 10, "n_updates": 10}', "data/evidence.json: 'ci_level' must be a number in (0, 1), not None"),
    ("evidence.json", '[1]', "data/evidence.json: not a JSON object"),
])
def test_a_resealed_bundle_whose_records_are_malformed_is_one_line_naming_the_input(tmp_path, file, text, message):
    a, b = before_after(tmp_path)
    build_bundle(b, figures=False)
    (b / "bundle" / "data" / file).write_text(text)
    reseal_bag(b / "bundle")
    refused = one_line_refusal(cli(a, b / "bundle"))
    assert refused.startswith(f"python -m evidence: error: B: {b / 'bundle'}") and message in refused


def test_a_malformed_sweep_json_of_a_sweep_is_one_line_naming_the_input(tmp_path):
    a, b = before_after(tmp_path)
    (b / "sweep.json").write_text("{not json")
    assert "B: sweep.json: not valid JSON" in one_line_refusal(cli(a, b))


def test_an_unknown_metric_is_named_with_the_known_ones_and_one_only_a_logs_is_said_of_b(tmp_path):
    a, b = before_after(tmp_path)
    refused = one_line_refusal(cli(a, b, "--metric", "train/no_such_metric"))
    assert "--metric train/no_such_metric: no input logs it; known: eval/pass@1, eval/pass@2" in refused
    assert "train/grad_norm" in refused and "rollout/raw_reward" in refused and "no accepted run" not in refused
    set_metric(a, "train/only_in_a", lambda arm, seed: 0.5)
    result = cli(a, b, "--metric", "train/only_in_a")
    assert result.returncode == 0, result.stderr
    assert "B does not log train/only_in_a" in result.stdout and "no accepted run in" not in result.stdout


def test_an_arm_only_one_input_ran_is_named_and_a_tiny_interval_keeps_its_figures(tmp_path):
    """A ran grpo and rpp, B grpo only: B's missing rpp is said above the table. Losses of order 1e-6 (a
    GRPO loss at a zero-variance group) print their interval in significant figures, not [0.0000, 0.0000]."""
    a = make_sweep(tmp_path, algos=("grpo", "rpp"), seeds=(1, 2, 3), name="before")
    b = make_sweep(tmp_path, algos=("grpo",), seeds=(1, 2, 3), name="after",
                   reward=lambda arm, seed, step: 0.6 + 0.02 * seed)
    for sweep, scale in ((a, 1e-6), (b, 3e-6)):
        for log in (sweep / "jobs").glob("*/run/metrics.jsonl"):
            records = [json.loads(line) for line in log.read_text().splitlines()]
            for r in records:
                r["train/loss"] = scale * (1 + 0.1 * r["step"] + 0.05 * int(log.parent.parent.name.split("-")[1]))
            log.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    assert "- not compared (only in A): rpp" in result.stdout.splitlines()
    row = csv_rows(tmp_path / "cmp.csv")[("train/loss", "grpo")]
    low, high = float(row["ci_low"]), float(row["ci_high"])
    assert 0 < low < high < 1e-5
    cell = table_line(result.stdout, "train/loss", "grpo")[7]
    shown = [float(x) for x in cell.strip("[]").split(", ")]
    assert math.isclose(shown[0], low, rel_tol=1e-3) and math.isclose(shown[1], high, rel_tol=1e-3), cell


def reference_mde(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The paired t-test's power from scipy.stats' noncentral t, solved for δ by bisection in float64."""
    critical = scipy_stats.t.ppf(1 - alpha / 2, n - 1)

    def power_at(delta: float) -> float:
        lam = delta * math.sqrt(n) / sd
        return scipy_stats.nct.sf(critical, n - 1, lam) + scipy_stats.nct.cdf(-critical, n - 1, lam)

    low, high = 0.0, 100 * sd
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if power_at(mid) < power else (low, mid)
    return (low + high) / 2


def final_pass1_points(sweep: Path, arm: str, seed: int) -> float:
    return 100 * json.loads((sweep / "jobs" / f"{arm}-{seed}" / "run" / "eval.json").read_text())["final"]["pass@1"]


def test_compare_gives_the_mde_and_the_paired_bootstrap_interval_beside_the_t_interval(tmp_path):
    a, b = before_after(tmp_path)
    result = cli(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    row = csv_rows(tmp_path / "cmp.csv")[("eval/pass@1", "grpo")]
    d = [final_pass1_points(b, "grpo", s) - final_pass1_points(a, "grpo", s) for s in (1, 2, 3)]  # (-2, -6, -3)
    sd = math.sqrt(sum((x - sum(d) / 3) ** 2 for x in d) / 2)
    assert math.isclose(float(row["mde"]), reference_mde(sd, 3), rel_tol=1e-9)
    boot = scipy_stats.bootstrap((np.array(d),), np.mean, n_resamples=int(row["boot_resamples"]), confidence_level=0.95,
                                 method=row["boot_method"], rng=np.random.default_rng(int(row["boot_seed"])))
    assert math.isclose(float(row["boot_low"]), boot.confidence_interval.low, rel_tol=1e-9)
    assert math.isclose(float(row["boot_high"]), boot.confidence_interval.high, rel_tol=1e-9)
    assert min(d) <= float(row["boot_low"]) < float(row["boot_high"]) <= max(d)  # it can only span what it saw
    cells = table_line(result.stdout, "eval/pass@1", "grpo")
    assert cells[8] == f"{float(row['mde']):.4g}"
    assert cells[9] == f"[{float(row['boot_low']):.4g}, {float(row['boot_high']):.4g}]"
    assert "| MDE (80% power) | Bootstrap 95% interval | Pairing |" in result.stdout
    assert any("(9999 resamples, percentile, seed 22), in B − A's units." in line
               for line in result.stdout.splitlines())


TIED = {(side, seed): 0.5 for side, seeds in (("before", (1, 2, 3)), ("after", (4, 5, 6))) for seed in seeds}


@pytest.mark.parametrize(("seeds_b", "pass1", "said"), [
    ((4, 5), {}, "B has 2 seeds: no interval; run ≥ 3 seeds in each"),  # a Welch df of about 1
    ((4, 5, 6), TIED, "tied values in both arms: no interval; run more evaluation prompts"),  # se 0: a point
])
def test_an_unpaired_interval_the_claims_rules_refuse_is_withheld_and_the_note_says_why(tmp_path, seeds_b, pass1, said):
    a, b = before_after(tmp_path, seeds_b=seeds_b)
    for (side, seed), value in pass1.items():  # every grpo evaluation of both sides at 0.5
        run = tmp_path / side / "jobs" / f"grpo-{seed}" / "run"
        write_eval(run, json.loads((run / "eval.json").read_text())["final"]["checkpoint"], value)
    compare_paths(a, b, csv_path=tmp_path / "cmp.csv")
    row = csv_rows(tmp_path / "cmp.csv")[("eval/pass@1", "grpo")]
    assert row["pairing"] == "unpaired" and row["ci_low"] == row["ci_high"] == ""
    assert row["note"].endswith(f"): unpaired; {said}"), row["note"]


@pytest.mark.parametrize("seeds_b", [(3, 4, 5), (0, 1, 2)])  # unpaired, paired
def test_no_interval_of_a_one_prompt_evaluation_in_either_pairing(tmp_path, seeds_b):
    # claims.single_prompt: an evaluation of one prompt has no noise of its own to check a seed interval against
    values = {0: 0.25, 1: 0.5, 2: 0.75, 3: 0.5, 4: 0.75, 5: 1.0}
    a = make_sweep(tmp_path, algos=("grpo",), seeds=(0, 1, 2), name="a", n_prompts=1, final_pass1=lambda _, s: values[s])
    b = make_sweep(tmp_path, algos=("grpo",), seeds=seeds_b, name="b", n_prompts=1,
                   final_pass1=lambda _, s: values[s] + (0.25 if seeds_b[0] == 0 and s == 1 else 0))
    compare_paths(a, b, csv_path=tmp_path / "cmp.csv")
    row = csv_rows(tmp_path / "cmp.csv")[("eval/pass@1", "grpo")]
    assert row["ci_low"] == row["ci_high"] == "" and "1 evaluation prompt: no interval" in row["note"], row["note"]


def test_an_unpaired_comparison_has_no_mde_or_bootstrap_interval(tmp_path):
    a, b = before_after(tmp_path, seeds_b=(4, 5))
    result = cli(a, b, "--csv", tmp_path / "cmp.csv")
    assert result.returncode == 0, result.stderr
    row = csv_rows(tmp_path / "cmp.csv")[("eval/pass@1", "grpo")]
    assert row["pairing"] == "unpaired" and row["mde"] == row["boot_low"] == row["boot_high"] == ""
    assert table_line(result.stdout, "eval/pass@1", "grpo")[8:10] == ["—", "—"]


@pytest.fixture(scope="module")
def built_pair(tmp_path_factory):
    """Two built sweeps (bundle directory and archive each), shared by the tests that only read them."""
    root = tmp_path_factory.mktemp("built")
    a, b = before_after(root)
    build_bundle(a, figures=False)
    build_bundle(b, figures=False)
    return a, b


@pytest.mark.parametrize(("inputs", "target", "said"), [
    (("a/bundle.tar.gz", "b/bundle"), "a/bundle.tar.gz", "is the input"),
    (("a/bundle.tar.gz", "b/bundle"), "a/bundle.tar.gz.sha256", "the evidence of the input"),
    (("a/bundle", "b/bundle"), "a/bundle/data/index.csv", "the evidence of the input"),
    (("a/bundle", "b/bundle"), "a/bundle.tar.gz", "the evidence of the input"),
    (("a/bundle", "b"), "b/report.md", "the evidence of the input"),
    (("a/bundle.tar.gz", "b/bundle"), "a/sweep.json", "the evidence of the input"),
    (("a/bundle", "b/bundle"), "b/new.csv", "the evidence of the input"),
])
def test_a_csv_target_in_an_inputs_evidence_is_refused_even_with_force_and_nothing_is_overwritten(
        built_pair, inputs, target, said):
    a, b = built_pair
    where = {"a": a, "b": b}
    path = lambda rel: where[rel.split("/")[0]].joinpath(*rel.split("/")[1:])  # noqa: E731
    before = {p: p.read_bytes() for p in [*a.rglob("*"), *b.rglob("*")] if p.is_file()}
    with pytest.raises(CompareError, match="the comparison never overwrites evidence") as refused:
        compare_paths(path(inputs[0]), path(inputs[1]), force=True, csv_path=path(target))
    assert said in str(refused.value)
    assert {p: p.read_bytes() for p in [*a.rglob("*"), *b.rglob("*")] if p.is_file()} == before


def test_compare_csv_over_the_input_archive_or_an_existing_file_is_one_line_and_keeps_it(built_pair, tmp_path):
    a, b = built_pair
    archive = a / "bundle.tar.gz"
    kept = archive.read_bytes()
    refused = one_line_refusal(cli(archive, b / "bundle", "--csv", archive))
    assert f"--csv {archive}: is the input {archive}; the comparison never overwrites evidence" in refused
    assert archive.read_bytes() == kept
    existing = tmp_path / "old.csv"
    existing.write_text("mine\n")
    refused = one_line_refusal(cli(archive, b / "bundle", "--csv", existing))
    assert f"--csv {existing}: the file exists; name a new file, or --force to replace it" in refused
    assert existing.read_text() == "mine\n"
    assert cli(archive, b / "bundle", "--csv", existing, "--force").returncode == 0
    assert existing.read_text().startswith("metric,")


def _forged(built: Path, into: Path) -> Path:
    """A copy of a built sweep whose bundle states pass@1 = 1.0 for rpp-1's final evaluation, resealed
    (crate and manifests restated): the bag verifies, only the audit's re-scoring can tell."""
    import shutil

    sweep = into / built.name
    shutil.copytree(built, sweep)
    (sweep / "bundle.tar.gz").unlink()
    run_eval = next((sweep / "bundle" / "data" / "runs").glob("rpp-*1/eval.json"))
    record = json.loads(run_eval.read_text())
    record["final"]["pass@1"] = 1.0
    run_eval.write_text(json.dumps(record))
    reseal_bag(sweep / "bundle")
    return sweep


@pytest.mark.parametrize("given", ["bundle", "sweep", "archive"])
def test_a_resealed_bundle_the_audit_rejects_is_refused_naming_its_findings_unless_forced(built_pair, tmp_path, given):
    import tarfile

    a, b = built_pair
    sweep = _forged(b, tmp_path)
    path = {"bundle": sweep / "bundle", "sweep": sweep, "archive": tmp_path / "forged.tar.gz"}[given]
    if given == "archive":
        with tarfile.open(path, "w:gz") as tar:
            tar.add(sweep / "bundle", arcname="bundle")
    with pytest.raises(CompareError) as refused:
        compare_paths(a / "bundle.tar.gz", path, metrics=["eval/pass@1"])
    message = str(refused.value)
    assert message.startswith("B: ") and "fails its audit" in message and "run python -m evidence audit" in message
    assert "data/runs/rpp-1/eval.json" in message and "pass@1" in message, message
    assert "A: " not in message  # the honest input is not named
    forced = compare_paths(a / "bundle.tar.gz", path, metrics=["eval/pass@1"], force=True)
    assert "compared with --force although its audit has" in forced


def test_compare_refuses_a_resealed_forgery_in_one_line_through_the_cli(built_pair, tmp_path):
    a, b = built_pair
    sweep = _forged(b, tmp_path)
    message = one_line_refusal(cli(a / "bundle.tar.gz", sweep / "bundle", "--metric", "eval/pass@1"))
    assert f"B: {sweep / 'bundle'} fails its audit (" in message
    assert "rpp-1 final pass@1 differs from data/runs/rpp-1/eval.json" in message
    assert f"run python -m evidence audit {sweep / 'bundle'}" in message
