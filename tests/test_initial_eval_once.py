"""The initial checkpoint is evaluated once per sweep (per evaluation identity), not once per job.

Through ``launch.py -m`` (a 2-arm x 2-seed sweep, 2 updates): one shared evaluation under
``<sweep>/initial_eval/<key12>/``, computed by one job and reused by the others, referenced by every
job's eval.json, carried once in the bundle, reported once, audited (and a tampered copy is a
finding); bit-identical to what a job run alone computes into its own run directory. Underneath:
real processes racing for the lock compute it once; a partial or corrupt one is recomputed; the
key changes with what changes the bits and not with what the arms vary.
"""

from __future__ import annotations

import csv
import hashlib
import json
import multiprocessing
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import (
    COMMIT,
    N_PROMPTS,
    SUBSET_SHA,
    K,
    correct_counts,
    eval_responses,
    summary_of,
)
from evidence import audit_bundle
from facts import sha256_file
from facts.evaluation import recompute_eval
from facts.files import INITIAL_EVAL_COMPUTED
from facts.reward import math_reward
from tests.sweeps import REPO, launch, reseal_bag
from trainer.evaluate import identity_key, read_shared_initial, shared_initial_eval

SMALL = ("workload.n_updates=2", "workload.checkpoint_every=2")


def _initial_eval_lines(sweep_dir: Path, word: str) -> list[str]:
    """The trainer's "initial eval: <word>" lines in every job's log, earlier attempts' included."""
    return [line for log in sorted(sweep_dir.glob("jobs/**/trainer.log"))
            for line in log.read_text().splitlines() if f"initial eval: {word}" in line]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    sweep_dir = tmp_path_factory.mktemp("initial-once") / "sweep"
    result = launch(sweep_dir, "algo=grpo,rpp", "seed=1,2", *SMALL)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "audit: clean" in result.stdout
    (sweep_dir.parent / "launch.out").write_text(result.stdout)
    return sweep_dir


def _shared_dir(sweep_dir: Path) -> Path:
    (directory,) = [p for p in (sweep_dir / "initial_eval").iterdir() if p.is_dir()]
    return directory


def test_a_two_by_two_sweep_evaluates_the_initial_checkpoint_once(sweep):
    directory = _shared_dir(sweep)
    assert sorted(p.name for p in directory.iterdir()) == ["eval.json", "responses.jsonl", "subset.json"]
    assert [p.relative_to(sweep) for p in sweep.rglob("*.jsonl")
            if ("initial" in p.name and p.name != INITIAL_EVAL_COMPUTED) or p.parent == directory] \
        == [directory.relative_to(sweep) / "responses.jsonl"]  # no run/eval/initial.jsonl anywhere
    # one job computed it and recorded so (the evidence trusts only a recorded one); the others reused it
    computed = [p.relative_to(sweep) for p in (sweep / "jobs").rglob(INITIAL_EVAL_COMPUTED)]
    assert len(computed) == 1, computed
    assert len(_initial_eval_lines(sweep, "computed")) == 1
    assert len(_initial_eval_lines(sweep, "reused")) == 3
    record = json.loads((directory / "eval.json").read_text())
    assert directory.name == record["key"][:12] and identity_key(record["identity"]) == record["key"]
    lines = (directory / "responses.jsonl").read_text().splitlines()
    assert len(lines) == record["initial"]["n_responses"] == 64 * 4


def test_the_summary_shows_the_shared_initial_control_beside_every_arm(sweep):
    record = json.loads((_shared_dir(sweep) / "eval.json").read_text())
    summary = (sweep.parent / "launch.out").read_text().split("vs the initial checkpoint")[1]
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in summary.splitlines() if line.startswith("│")]
    assert [r[0] for r in rows] == ["GRPO", "REINFORCE++"]
    assert all(r[2] == f"{record['initial']['pass@1']:.3f} (shared)" for r in rows), rows


def test_a_one_job_sweep_shows_its_own_initial_control_not_a_shared_one(tmp_path):
    result = launch(tmp_path / "one", "algo=grpo", "seed=1", *SMALL)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    own = json.loads((tmp_path / "one" / "jobs" / "grpo-1" / "run" / "eval.json").read_text())["initial"]
    assert "shared" not in own
    summary = result.stdout.split("vs the initial checkpoint")[1]
    (row,) = [[c.strip() for c in line.strip("│").split("│")] for line in summary.splitlines() if line.startswith("│")]
    assert row[2] == f"{own['pass@1']:.3f}", row


def test_every_job_references_the_shared_evaluation_by_path_key_and_sha256(sweep):
    directory = _shared_dir(sweep)
    record = json.loads((directory / "eval.json").read_text())
    jobs = sorted((sweep / "jobs").iterdir())
    assert [j.name for j in jobs] == ["grpo-1", "grpo-2", "rpp-1", "rpp-2"]
    for job in jobs:
        initial = json.loads((job / "run" / "eval.json").read_text())["initial"]
        shared = initial.pop("shared")
        assert shared == {"path": f"initial_eval/{directory.name}/eval.json", "key": record["key"],
                          "sha256": sha256_file(directory / "eval.json")}
        assert initial == record["initial"]  # the job stays self-describing: the numbers are in its eval.json
        assert "sweep_dir" not in json.loads((job / "run" / "run.json").read_text())["config"]  # a machine path


def test_the_trainer_log_and_tensorboard_of_every_job_carry_the_initial_pass_at_k(sweep):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    record = json.loads((_shared_dir(sweep) / "eval.json").read_text())["initial"]
    for job in sorted((sweep / "jobs").iterdir()):
        log = (job / "trainer.log").read_text()
        assert f"initial control: pass@1={record['pass@1']:.4f}" in log
        values = []
        for events in sorted((job / "run" / "tensorboard").glob("events.out.tfevents.*")):
            acc = EventAccumulator(str(events))
            acc.Reload()
            if "eval/pass@1" in acc.Tags()["scalars"]:  # step 0: the initial checkpoint, shared or not
                values += [e.value for e in acc.Scalars("eval/pass@1") if e.step == 0]
        assert values == [pytest.approx(record["pass@1"])]


def test_the_shared_evaluation_is_bit_identical_to_one_a_job_computes_alone(sweep, tmp_path):
    """``python -m trainer`` without a sweep evaluates the initial checkpoint into its own run dir; the
    result is the shared one, byte for byte (the key leaves out nothing that changes the bits here)."""
    out = tmp_path / "alone"
    result = subprocess.run([sys.executable, "-m", "trainer", "algo=rppb", "seed=7", *SMALL, f"output_dir={out}"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    directory = _shared_dir(sweep)
    alone = json.loads((out / "eval.json").read_text())["initial"]
    assert "shared" not in alone and not (out.parent / "initial_eval").exists()
    assert alone == json.loads((directory / "eval.json").read_text())["initial"]
    assert (out / "eval" / "initial.jsonl").read_bytes() == (directory / "responses.jsonl").read_bytes()


def test_the_bundle_holds_the_shared_evaluation_once_and_reports_it_once(sweep):
    data = sweep / "bundle" / "data"
    directory = _shared_dir(sweep)
    bundled = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()
                     and ("initial" in p.name or p.name == "responses.jsonl") and p.name != INITIAL_EVAL_COMPUTED)
    assert bundled == [f"initial_eval/{directory.name}/responses.jsonl", "tables/eval_initial.csv"]
    assert (data / "initial_eval" / directory.name / "eval.json").read_bytes() == (directory / "eval.json").read_bytes()
    with open(data / "tables" / "eval_initial.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["initial_eval"] == f"initial_eval/{directory.name}" and row["n_runs"] == "4" and row["n_responses"] == "256"
    report = (data / "report.md").read_text()
    assert report.count(f"| initial_eval/{directory.name} | 4 | 256 |") == 1
    assert "was evaluated once for 4 accepted run(s)" in report
    assert "| initial (control) |" not in report and "Initial pass@1" not in report
    jobs_rows = [line for line in report.splitlines() if line.startswith("| GRPO | 1 |") and "shared / 256" in line]
    assert len(jobs_rows) == 1  # the jobs table says "shared" rather than repeating the count per job
    with open(data / "eval.csv", newline="") as f:
        kinds = [(r["kind"], r["initial_eval"]) for r in csv.DictReader(f)]
    assert kinds.count(("initial", f"initial_eval/{directory.name}")) == 4 and kinds.count(("final", "")) == 4


def test_python_m_evidence_audit_of_the_bundle_is_clean(sweep):
    result = subprocess.run([sys.executable, "-m", "evidence", "audit", str(sweep / "bundle.tar.gz")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "clean", result.stdout + result.stderr


def _relabel_everything(sweep_dir: Path, row: int) -> tuple[str, str]:
    """A consistent forgery of the ground truth (issue 21, B1): row ``row``'s label moved by one in every
    subset file, every response re-scored against it, every summary recomputed, every digest and the shared
    evaluation's key rewritten, as a forger who retrains nothing would; returns (old, new) label."""
    def records(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    subsets = sorted(sweep_dir.rglob("subset.json"))
    rows = json.loads(subsets[0].read_bytes())
    old, new = rows[row][2], str(int(rows[row][2]) + 1)
    rows[row][2] = new
    forged = json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode()
    for path in subsets:
        path.write_bytes(forged)
    digest = hashlib.sha256(forged).hexdigest()
    labels = {r[0]: r[2] for r in rows}

    def relabel(path: Path, summary: dict) -> None:
        responses = records(path)
        for r in responses:
            r["label"], r["reward"] = labels[r["index"]], math_reward(r["response"], labels[r["index"]])
        path.write_text("".join(json.dumps(r) + "\n" for r in responses))
        summary.update(recompute_eval(responses, summary["k"]), subset_sha256=digest)
        summary["all_zero_reward"] = not any(r["reward"] for r in responses)

    shared = _shared_dir(sweep_dir)
    record = json.loads((shared / "eval.json").read_text())
    relabel(shared / "responses.jsonl", record["initial"])
    record["identity"]["subset_sha256"] = digest
    record["key"] = identity_key(record["identity"])
    record["responses_sha256"] = sha256_file(shared / "responses.jsonl")
    rekeyed = shared.parent / record["key"][:12]
    shared.rename(rekeyed)
    (rekeyed / "eval.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    for run in sorted(sweep_dir.glob("jobs/*/run")):
        summary = json.loads((run / "eval.json").read_text())
        relabel(run / "eval" / "final.jsonl", summary["final"])
        summary["initial"] = {**record["initial"], "shared": {"path": f"initial_eval/{rekeyed.name}/eval.json",
                                                              "key": record["key"],
                                                              "sha256": sha256_file(rekeyed / "eval.json")}}
        (run / "eval.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        job = json.loads((run.parent / "job.json").read_text())  # and the runtime's digests of the run's records
        job["run_outputs_sha256"] = {name: hashlib.sha256((run / name).read_bytes()).hexdigest()
                                     for name in job["run_outputs_sha256"]}
        (run.parent / "job.json").write_text(json.dumps(job, indent=1, sort_keys=True) + "\n")
    return old, new


def test_a_relabelled_subset_with_every_digest_rewritten_rejects_every_job_through_evidence_build(sweep, tmp_path):
    """The subset is cut again from the pinned test split (run.json's inputs): no digest the forger rewrites
    vouches for a label."""
    forged = tmp_path / "sweep"
    shutil.copytree(sweep, forged, ignore=shutil.ignore_patterns("bundle", "bundle.tar.gz*", "*.lock"))
    old, new = _relabel_everything(forged, row=2)
    result = subprocess.run([sys.executable, "-m", "evidence", "build", str(forged)], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert "accepted 0/4 jobs" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    incidents = list(csv.DictReader((forged / "bundle" / "data" / "incidents.csv").open()))
    assert len(incidents) == 4 and all(
        f"run/eval/subset.json: row 2: label '{new}' is not the pinned test split's '{old}': "
        "trainer/assets/toy/data/test.parquet (sha256 f538276ac534…, first 64 rows)" in i["title"] for i in incidents)


def test_an_edited_label_in_the_bundles_subset_is_named_against_the_pinned_split(sweep, tmp_path):
    bag = tmp_path / "bundle"
    shutil.copytree(sweep / "bundle", bag)
    (subset,) = (bag / "data" / "eval_subset").glob("*.json")
    rows = json.loads(subset.read_bytes())
    rows[5][2] = str(int(rows[5][2]) + 7)
    subset.write_bytes(json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode())
    _reseal(bag)
    result = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bag)], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 1
    assert (f"data/eval_subset/{subset.name}: run grpo-1: row 5: label '{rows[5][2]}' is not the pinned test "
            "split's '" in result.stdout), result.stdout
    assert "not re-derived" not in result.stdout  # the embedded data set is in every checkout


def _reseal(bag: Path) -> None:
    reseal_bag(bag)  # so that only the shared-eval checks can notice the edit


def _flip_first_reward(path: Path) -> None:
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["reward"] = 0.0 if first["reward"] > 0 else 1.0
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")


@pytest.mark.parametrize("tamper", ["responses", "responses-and-their-digest", "summary", "identity", "removed"])
def test_a_tampered_shared_evaluation_in_the_bundle_is_an_audit_finding(sweep, tmp_path, tamper):
    bag = tmp_path / "bundle"
    shutil.copytree(sweep / "bundle", bag)
    directory = next((bag / "data" / "initial_eval").iterdir())
    record_path = directory / "eval.json"
    record = json.loads(record_path.read_text())
    file = f"data/initial_eval/{directory.name}/eval.json"  # whose problem it is
    changed = f"initial.shared.sha256 is not the SHA256 of initial_eval/{directory.name}/eval.json"
    if tamper == "responses":
        _flip_first_reward(directory / "responses.jsonl")
        expected = "responses.jsonl differs from its recorded SHA256"
    elif tamper == "responses-and-their-digest":  # a consistent forgery of the shared files themselves
        _flip_first_reward(directory / "responses.jsonl")
        record["responses_sha256"] = sha256_file(directory / "responses.jsonl")
        record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        file, expected = "data/runs/grpo-1/eval.json", changed  # every run's reference names other bytes
    elif tamper == "summary":
        record["initial"]["pass@1"] += 0.25
        record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        file, expected = "data/runs/grpo-1/eval.json", changed
    elif tamper == "identity":  # a consistent forgery: the key no longer names what made the bits
        record["identity"]["num_threads"] += 1
        record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        for run_eval in (bag / "data" / "runs").glob("*/eval.json"):
            entry = json.loads(run_eval.read_text())
            entry["initial"]["shared"]["sha256"] = sha256_file(record_path)
            run_eval.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
        expected = "its identity does not hash to its key"
    else:
        shutil.rmtree(directory)
        expected = "missing (the shared initial evaluation)"
    _reseal(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert not any("SHA256 differs from manifest" in r for r in reasons)
    assert f"{file}: {expected}" in reasons, reasons


def test_a_shared_evaluation_sampled_unlike_the_runs_final_eval_is_an_audit_finding(sweep, tmp_path):
    bag = tmp_path / "bundle"
    shutil.copytree(sweep / "bundle", bag)
    run_json = bag / "data" / "runs" / "rpp-2" / "run.json"
    record = json.loads(run_json.read_text())
    record["config"]["workload"]["eval"]["top_p"] = 0.5  # as if rpp-2's final eval had sampled otherwise
    run_json.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    _reseal(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert "data/runs/rpp-2/eval.json: the shared initial evaluation was not made with this run's top_p" in reasons, reasons
    assert not any(r.startswith("data/runs/grpo-1/eval.json") for r in reasons)


def test_a_shared_evaluation_whose_statistics_do_not_recompute_is_an_audit_finding(sweep, tmp_path):
    """A forgery that keeps every digest consistent (eval.json, the jobs' references) still fails:
    the audit recomputes pass@k, reward, length and truncation from the responses."""
    bag = tmp_path / "bundle"
    shutil.copytree(sweep / "bundle", bag)
    directory = next((bag / "data" / "initial_eval").iterdir())
    _flip_first_reward(directory / "responses.jsonl")
    record = json.loads((directory / "eval.json").read_text())
    record["responses_sha256"] = sha256_file(directory / "responses.jsonl")
    (directory / "eval.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    digest = sha256_file(directory / "eval.json")
    for path in (bag / "data" / "runs").glob("*/eval.json"):
        run_eval = json.loads(path.read_text())
        run_eval["initial"]["shared"]["sha256"] = digest
        path.write_text(json.dumps(run_eval, indent=1, sort_keys=True) + "\n")
    _reseal(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    assert any(r.startswith(f"data/initial_eval/{directory.name}/eval.json: mean_reward ")
               and "does not recompute from its responses" in r for r in reasons), reasons


# ---- underneath: the hand-over, the lock, the validation on read, the key ---------------------------

@pytest.mark.parametrize(("seeds", "shared"), [("seed=1", False), ("seed=1,2", True)])
def test_the_launcher_hands_the_sweep_dir_to_the_trainer_only_when_jobs_can_share(tmp_path, seeds, shared):
    """A one-job sweep (``launch.py`` without -m is one) evaluates its initial checkpoint itself."""
    from launcher.isolation import JobRoots
    from launcher.planning import plan_grid

    sweep = plan_grid(["algo=grpo", seeds, "dry_run=true"], tmp_path / "sweep")
    for spec in sweep.specs:
        argv = spec.trainer_argv(JobRoots(spec.job_dir).output)
        assert (f"sweep_dir={tmp_path / 'sweep'}" in argv) is shared
        assert spec.share_initial_eval is shared



SAMPLING = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 48}
# What the trainer's identity names (trainer.loop.initial_eval_identity), as the synthetic runs record it
# (benchmarks/synthetic_sweep.py: run.json's inputs, versions and source commit; the workload below).
SYNTHETIC_IDENTITY = {"model_files": {"model/model.safetensors": "ab" * 32}, "subset_sha256": SUBSET_SHA,
                      "n_prompts": N_PROMPTS, "k": K, "eval_seed": 29, "sampling": SAMPLING, "engine": "torch",
                      "dtype": "float32", "device": "cpu", "num_threads": 1,
                      "versions": {"python": "3.11.7", "torch": "2.13.0"}, "source_commit": COMMIT}
SYNTHETIC_WORKLOAD = {"model_path": "model", "engine": "torch", "dtype": "float32", "device": "cpu",
                      "eval": {"k": K, "seed": 29, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_response_len": 48}}
SYNTHETIC_JOBS = ("grpo-42", "rpp-42")
SYNTHETIC_PASS1 = 0.25  # the shared control's pass@1: every prompt answered once in four


def _synthetic_responses(path: Path) -> dict:
    """The synthetic sweep's real evaluation (benchmarks/synthetic_sweep.py: its 25 frozen prompts x 4 samples,
    one correct per prompt, scored against the subset's labels), written as the trainer writes one; the summary
    derived from the counts in float64."""
    counts = correct_counts(SYNTHETIC_PASS1, N_PROMPTS, K)
    records = eval_responses(counts, K)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return summary_of(records, counts, "initial", K)


def _race(sweep_dir: str, counter: str, barrier, results) -> None:
    def compute(path: Path) -> dict:
        with open(counter, "a") as handle:
            handle.write("computed\n")
        time.sleep(0.5)  # long enough that the others are waiting on the lock meanwhile
        return _synthetic_responses(path)

    barrier.wait()
    shared = shared_initial_eval(Path(sweep_dir), SYNTHETIC_IDENTITY, compute)
    results.put((shared.computed, shared.reference, shared.summary))


@pytest.mark.slow  # three spawned interpreters importing torch: ~10 s on two busy cores
def test_processes_racing_for_the_lock_compute_the_shared_evaluation_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    counter = tmp_path / "computations.txt"
    workers = [ctx.Process(target=_race, args=(str(tmp_path), str(counter), barrier, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert counter.read_text() == "computed\n"
    assert sorted(computed for computed, _, _ in outcomes) == [False, False, True]
    assert len({json.dumps(ref, sort_keys=True) for _, ref, _ in outcomes}) == 1
    assert len({json.dumps(summary, sort_keys=True) for _, _, summary in outcomes}) == 1


@pytest.mark.parametrize("damage", ["truncated-responses", "no-eval-json", "torn-eval-json", "other-key", "edited-responses",
                                    "truncated-responses-with-their-digest", "another-identity",
                                    "statistics-not-its-responses", "not-strict-json"])
def test_a_partial_or_corrupt_shared_evaluation_is_recomputed_never_used(tmp_path, damage):
    first = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, _synthetic_responses)
    directory = tmp_path / first.reference["path"].rpartition("/")[0]
    assert first.computed and read_shared_initial(directory, first.reference["key"]) is not None
    if damage == "truncated-responses":  # a crash while the responses were being replaced
        lines = (directory / "responses.jsonl").read_text().splitlines()
        (directory / "responses.jsonl").write_text("\n".join(lines[:-2]) + "\n")
    elif damage == "no-eval-json":  # a crash after the responses, before eval.json
        (directory / "eval.json").unlink()
    elif damage == "torn-eval-json":
        text = (directory / "eval.json").read_text()
        (directory / "eval.json").write_text(text[: len(text) // 2])
    elif damage == "other-key":
        record = json.loads((directory / "eval.json").read_text())
        record["key"] = "0" * 64
        (directory / "eval.json").write_text(json.dumps(record))
    elif damage == "edited-responses":  # as many lines as the summary says, not the bytes recorded
        _flip_first_reward(directory / "responses.jsonl")
    elif damage == "truncated-responses-with-their-digest":  # fewer lines than the summary's n_responses
        lines = (directory / "responses.jsonl").read_text().splitlines()
        (directory / "responses.jsonl").write_text("\n".join(lines[:-2]) + "\n")
        record = json.loads((directory / "eval.json").read_text())
        record["responses_sha256"] = sha256_file(directory / "responses.jsonl")
        (directory / "eval.json").write_text(json.dumps(record))
    elif damage == "statistics-not-its-responses":  # what the evidence would reject: computed again instead
        record = json.loads((directory / "eval.json").read_text())
        record["initial"]["pass@1"] += 0.25
        (directory / "eval.json").write_text(json.dumps(record))
    elif damage == "not-strict-json":
        record = json.loads((directory / "eval.json").read_text())
        record["initial"]["mean_length"] = float("nan")
        (directory / "eval.json").write_text(json.dumps(record))  # NaN: Python writes it, strict JSON has none
    else:  # a sound evaluation of another identity whose key shares the directory's 12 characters
        record = json.loads((directory / "eval.json").read_text())
        record["identity"] = {**record["identity"], "eval_seed": 4}
        record["key"] = identity_key(record["identity"])
        (directory / "eval.json").write_text(json.dumps(record))
    assert read_shared_initial(directory, first.reference["key"]) is None
    again = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, _synthetic_responses)
    assert again.computed and again.summary == first.summary
    assert read_shared_initial(directory, first.reference["key"]) is not None
    third = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, lambda path: pytest.fail("recomputed a valid evaluation"))
    assert not third.computed and third.reference == again.reference


def test_the_job_that_computes_the_shared_evaluation_records_it_and_a_job_that_reuses_it_does_not(tmp_path):
    """adv B2: the computing job's record (its run's initial_eval_computed.jsonl) names the path, key and the SHA256
    of the eval.json it wrote, before that file is in place; a reader's record stays empty; a recomputation (the
    evaluation found unsound) is recorded again by the job that recomputed it."""
    logs = [tmp_path / "jobs" / job / "run" / INITIAL_EVAL_COMPUTED for job in ("a-1", "b-1", "c-1")]
    first = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, _synthetic_responses, computed_log=logs[0])
    second = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, _synthetic_responses, computed_log=logs[1])
    assert first.computed and not second.computed and not logs[1].exists()
    assert [json.loads(line) for line in logs[0].read_text().splitlines()] == [first.reference]
    assert first.reference["sha256"] == sha256_file(tmp_path / first.reference["path"])
    (tmp_path / first.reference["path"]).unlink()
    third = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, _synthetic_responses, computed_log=logs[2])
    assert third.computed and [json.loads(line) for line in logs[2].read_text().splitlines()] == [third.reference]


def test_the_key_changes_with_what_changes_the_bits_and_not_with_what_the_arms_vary():
    import torch
    from omegaconf import OmegaConf

    from trainer.data import load_split
    from trainer.inputs import resolve, verify_inputs
    from trainer.loop import initial_eval_identity
    from trainer.run_config import compose

    def key(*overrides: str, threads: int = 1) -> str:
        cfg = compose(list(overrides))
        w = cfg.workload
        inputs = verify_inputs(w.manifest, required=[w.model_path, w.train_path, w.test_path])
        examples = load_split(resolve(w.test_path))[: int(w.eval.n_prompts)]
        saved = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return identity_key(initial_eval_identity(cfg, examples, torch.device("cpu"), inputs))
        finally:
            torch.set_num_threads(saved)

    base = key()
    # What arms and seeds vary leaves the initial checkpoint's evaluation unchanged: shared.
    for same in (("algo=rpp",), ("seed=5",), ("workload.lr=3e-4",), ("workload.n_updates=7",), ("dp_size=2",)):
        assert key(*same) == base, same
    # What changes its bits gives another key: evaluated separately.
    for other in (("workload.eval.seed=30",), ("workload.eval.k=2",), ("workload.eval.n_prompts=32",),
                  ("workload.eval.temperature=0.5",), ("workload.eval.top_k=5",), ("workload.eval.top_p=0.9",),
                  ("workload.eval.max_response_len=40",), ("workload.dtype=bfloat16",)):
        assert key(*other) != base, other
    assert key(threads=2) != base
    assert OmegaConf.select(compose([]), "sweep_dir") is None  # a run of its own shares nothing


def test_a_rerun_reuses_the_shared_evaluation_and_a_missing_one_is_recomputed(tmp_path):
    sweep_dir = tmp_path / "sweep"
    grid = ("algo=grpo", "seed=1,2", "workload.n_updates=1", "workload.checkpoint_every=1")
    first = launch(sweep_dir, *grid)
    assert first.returncode == 0 and "audit: clean" in first.stdout, first.stdout[-2000:] + first.stderr[-2000:]
    directory = _shared_dir(sweep_dir)
    digest = sha256_file(directory / "eval.json")
    assert len(_initial_eval_lines(sweep_dir, "computed")) == 1

    (sweep_dir / "jobs" / "grpo-2" / "run" / "eval.json").unlink()  # grpo-2 is rejected: a rerun repeats it
    second = launch(sweep_dir, *grid)
    assert second.returncode == 0 and "audit: clean" in second.stdout, second.stdout[-2000:] + second.stderr[-2000:]
    assert len(_initial_eval_lines(sweep_dir, "computed")) == 1  # the re-run job reused it
    assert "initial eval: reused" in (sweep_dir / "jobs" / "grpo-2" / "trainer.log").read_text()
    assert sha256_file(directory / "eval.json") == digest

    shutil.rmtree(sweep_dir / "initial_eval")  # every job's reference now dangles: all are rejected
    from evidence import evaluate_job

    evidence = evaluate_job(sweep_dir / "jobs" / "grpo-1")
    assert f"initial_eval/{directory.name}/eval.json: missing (the shared initial evaluation)" in evidence.reason()
    third = launch(sweep_dir, *grid)
    assert third.returncode == 0 and "audit: clean" in third.stdout, third.stdout[-2000:] + third.stderr[-2000:]
    assert len(_initial_eval_lines(sweep_dir, "computed")) == 2  # recomputed once for both jobs
    assert sha256_file(_shared_dir(sweep_dir) / "eval.json") == digest  # the same bits again


# ---- the shared-reference checks on a synthetic sweep: job validation and the bundle audit alike ------

def _synthetic_shared_sweep(root: Path) -> Path:
    """A synthetic two-job sweep whose jobs reference one shared initial evaluation, written by the
    trainer's own ``shared_initial_eval``, as a sweep of ``launch.py -m`` does."""
    from benchmarks.synthetic_sweep import make_sweep

    sweep_dir = make_sweep(root, algos=("grpo", "rpp"), seeds=(42,), n_steps=3)
    shared = shared_initial_eval(sweep_dir, SYNTHETIC_IDENTITY, _synthetic_responses,
                                 computed_log=sweep_dir / "jobs" / SYNTHETIC_JOBS[0] / "run" / INITIAL_EVAL_COMPUTED)
    for job in SYNTHETIC_JOBS:
        run = sweep_dir / "jobs" / job / "run"
        record = json.loads((run / "eval.json").read_text())
        record["initial"] = {**shared.summary, "shared": shared.reference}
        (run / "eval.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        (run / "eval" / "initial.jsonl").unlink()
        summary = json.loads((run / "run.json").read_text())
        summary["config"]["workload"] = json.loads(json.dumps(SYNTHETIC_WORKLOAD))
        summary["source_commit"] = COMMIT
        (run / "run.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return sweep_dir


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, Path]:
    """The synthetic sharing sweep and its bundle directory, built once (no figures)."""
    from evidence.seal.bundle import build_bundle

    sweep_dir = _synthetic_shared_sweep(tmp_path_factory.mktemp("synthetic-shared"))
    result = build_bundle(sweep_dir, figures=False)
    assert result.accepted == 2, result
    return sweep_dir, result.bundle_dir


def _rewrite_json(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _point_runs_at(run_evals: list[Path], **fields) -> None:
    """Set the shared reference of every run's eval.json: a forgery that keeps them consistent."""
    for path in run_evals:
        _rewrite_json(path, lambda record: record["initial"]["shared"].update(fields))


def _tamper(case: str, shared_dir: Path, run_evals: list[Path], run_json: Path) -> tuple[str, str]:
    """Damage a sweep's (or a bag payload's) shared evaluation or the first run's reference to it, the
    way ``case`` names; returns the file the problem belongs to and the reason: "shared" (the shared
    evaluation's eval.json) or "run" (the first run's eval.json: its reference, numbers or sampling)."""
    record_path, responses = shared_dir / "eval.json", shared_dir / "responses.jsonl"
    if case == "missing":
        shutil.rmtree(shared_dir)
        return "shared", "missing (the shared initial evaluation)"
    if case == "record-edited":
        _rewrite_json(record_path, lambda record: record["initial"].update({"pass@1": 0.5}))
        return "run", f"initial.shared.sha256 is not the SHA256 of initial_eval/{shared_dir.name}/eval.json"
    if case == "responses-edited":
        _flip_first_reward(responses)
        return "shared", "responses.jsonl differs from its recorded SHA256"
    if case == "statistics":  # every digest kept consistent: only the recomputation notices
        _flip_first_reward(responses)
        _rewrite_json(record_path, lambda record: record.update({"responses_sha256": sha256_file(responses)}))
        _point_runs_at(run_evals, sha256=sha256_file(record_path))
        n = N_PROMPTS * K  # the first response is a correct one (sample 0 of every prompt is): one fewer
        return "shared", (f"mean_reward {SYNTHETIC_PASS1 * n / n!r} does not recompute from its responses "
                          f"({(SYNTHETIC_PASS1 * n - 1) / n!r})")
    if case == "identity":
        _rewrite_json(record_path, lambda record: record["identity"].update({"eval_seed": 30}))
        _point_runs_at(run_evals, sha256=sha256_file(record_path))
        return "shared", "its identity does not hash to its key"
    if case == "other-key":
        _rewrite_json(record_path, lambda record: record.update({"key": "0" * 64}))
        _point_runs_at(run_evals, sha256=sha256_file(record_path))
        return "run", f"initial.shared.key is not the key initial_eval/{shared_dir.name}/eval.json records"
    if case == "torn-record":
        record_path.write_text(record_path.read_text()[:40])
        _point_runs_at(run_evals, sha256=sha256_file(record_path))
        return "shared", "unreadable shared evaluation (JSONError)"
    if case == "no-digest":
        _rewrite_json(run_evals[0], lambda record: record["initial"]["shared"].pop("sha256"))
        return "run", "initial.shared needs path, key and sha256"
    if case == "key-escapes":
        _point_runs_at(run_evals[:1], key="../../../etc", path="initial_eval/../../../etc/eval.json")
        return "run", "initial.shared.key is not a SHA256 hex digest"
    if case == "other-path":
        _point_runs_at(run_evals[:1], path=f"{shared_dir.name}/eval.json")
        return "run", f"initial.shared.path '{shared_dir.name}/eval.json' is not initial_eval/<key12>/eval.json"
    if case == "numbers-differ":
        _rewrite_json(run_evals[0], lambda record: record["initial"].update({"pass@1": 0.5}))
        return "run", "initial differs from the shared initial evaluation it references"
    if case in ("another-model", "identity-not-its-summary"):  # re-keyed, moved and re-pointed: consistent
        def forge(identity):
            if case == "another-model":  # a control evaluated on other weights (a weaker base model)
                identity["model_files"] = {path: "ef" * 32 for path in identity["model_files"]}
            else:
                identity["eval_seed"] = 999
        record = json.loads(record_path.read_text())
        forge(record["identity"])
        record["key"] = identity_key(record["identity"])
        moved = shared_dir.parent / record["key"][:12]
        shutil.move(shared_dir, moved)
        (moved / "eval.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        _point_runs_at(run_evals, key=record["key"], path=f"initial_eval/{moved.name}/eval.json",
                       sha256=sha256_file(moved / "eval.json"))
        if case == "another-model":
            return "run", "the shared initial evaluation was not made with this run's model files"
        return "shared", "its identity and its summary differ in eval_seed"
    if case == "run-not-recorded":
        _rewrite_json(run_json, lambda record: record.pop("config"))
        return "run", ("run.json does not record how this run was set up (config.workload, inputs, versions, "
                       "source_commit), so its shared initial control cannot be checked against it")
    assert case == "sampled-otherwise"
    _rewrite_json(run_json, lambda record: record["config"]["workload"]["eval"].update({"top_p": 0.5}))
    return "run", "the shared initial evaluation was not made with this run's top_p"


SHARED_TAMPERS = ("missing", "record-edited", "responses-edited", "statistics", "identity", "other-key", "torn-record",
                  "no-digest", "key-escapes", "other-path", "numbers-differ", "sampled-otherwise", "another-model",
                  "identity-not-its-summary", "run-not-recorded")


def test_a_synthetic_sweep_sharing_its_initial_evaluation_validates_and_audits_clean(synthetic):
    sweep_dir, bag = synthetic
    from evidence import evaluate_job

    for job in SYNTHETIC_JOBS:
        assert evaluate_job(sweep_dir / "jobs" / job).failures == []
    assert audit_bundle(bag) == []


def _shared_dir_after(root: Path, before: Path) -> Path:
    """The shared evaluation's directory after a tamper (a re-keyed forgery moves it), else ``before``."""
    return next((p for p in (root / "initial_eval").glob("*") if p.is_dir()), before)


@pytest.mark.parametrize("case", SHARED_TAMPERS)
def test_python_m_evidence_validate_names_every_kind_of_broken_shared_reference(synthetic, tmp_path, case):
    """Job validation (what the launcher and ``evidence build`` decide acceptance by) through the
    command a person types: the job is invalid and the line names the file and the problem."""
    sweep_dir = Path(shutil.copytree(synthetic[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    shared_dir = _shared_dir(sweep_dir)
    runs = [sweep_dir / "jobs" / job / "run" for job in SYNTHETIC_JOBS]
    where, reason = _tamper(case, shared_dir, [run / "eval.json" for run in runs], runs[0] / "run.json")
    result = subprocess.run([sys.executable, "-m", "evidence", "validate", str(runs[0].parent)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    shared_dir = _shared_dir_after(sweep_dir, shared_dir)
    file = f"initial_eval/{shared_dir.name}/eval.json" if where == "shared" else "run/eval.json"
    assert result.returncode == 1 and f"{file}: {reason}" in result.stdout.splitlines(), result.stdout + result.stderr


@pytest.mark.parametrize("case", SHARED_TAMPERS)
def test_the_audit_names_every_kind_of_broken_shared_reference_in_a_bundle(synthetic, tmp_path, case):
    bag = Path(shutil.copytree(synthetic[1], tmp_path / "bundle"))
    data = bag / "data"
    shared_dir = _shared_dir(data)
    runs = [data / "runs" / job for job in SYNTHETIC_JOBS]
    where, reason = _tamper(case, shared_dir, [run / "eval.json" for run in runs], runs[0] / "run.json")
    _reseal(bag)
    reasons = [str(f) for f in audit_bundle(bag)]
    shared_dir = _shared_dir_after(data, shared_dir)
    file = f"data/initial_eval/{shared_dir.name}/eval.json" if where == "shared" else f"data/runs/{SYNTHETIC_JOBS[0]}/eval.json"
    assert f"{file}: {reason}" in reasons, reasons
    assert not any("SHA256 differs from manifest" in r for r in reasons)
    if where == "shared":
        assert reasons.count(f"{file}: {reason}") == 1  # once per bundle, not once per run referencing it


def test_a_sweeps_jobs_read_and_validate_their_shared_evaluation_once(synthetic, tmp_path):
    """The cache a sweep's validation keeps is keyed by the shared file: once the first job has read
    and validated it, the second job's check reads nothing (here: it no longer exists)."""
    from evidence.gates.index import evaluate_job

    sweep_dir = Path(shutil.copytree(synthetic[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    checked: dict = {}
    first = evaluate_job(sweep_dir / "jobs" / SYNTHETIC_JOBS[0], shared_checks=checked)
    # the shared summary checked and its responses re-scored, each once
    assert first.failures == [] and list(checked) == [_shared_dir(sweep_dir) / f for f in ("eval.json", "responses.jsonl")]
    shutil.rmtree(sweep_dir / "initial_eval")
    assert evaluate_job(sweep_dir / "jobs" / SYNTHETIC_JOBS[1], shared_checks=checked).failures == []
    alone = evaluate_job(sweep_dir / "jobs" / SYNTHETIC_JOBS[1])  # a fresh validation reads the disk again
    assert any("missing (the shared initial evaluation)" in str(f) for f in alone.failures)


def test_the_reference_a_job_records_is_the_sha256_of_the_record_it_read(tmp_path):
    """Computed or reused, the reference's SHA256 is that of the eval.json bytes the job holds, and
    ``read_shared_initial`` hands back the digest of exactly the bytes it parsed."""
    import hashlib

    computed = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, _synthetic_responses)
    reused = shared_initial_eval(tmp_path, SYNTHETIC_IDENTITY, lambda path: pytest.fail("recomputed"))
    record_path = tmp_path / computed.reference["path"]
    on_disk = hashlib.sha256(record_path.read_bytes()).hexdigest()
    assert computed.computed and not reused.computed
    assert computed.reference["sha256"] == reused.reference["sha256"] == on_disk
    record, digest = read_shared_initial(record_path.parent, computed.reference["key"])
    assert digest == on_disk and record == json.loads(record_path.read_text())



def test_a_reference_to_a_path_outside_the_sweep_rejects_the_job_and_the_bundle_still_seals(synthetic, tmp_path):
    """``python -m evidence build`` used to stop with SameFileError when a job's reference named an
    absolute directory: it copied that directory's eval.json onto itself. Now only
    ``initial_eval/<name>`` is ever copied, the job is rejected with the reason, and the audit is clean."""
    sweep_dir = Path(shutil.copytree(synthetic[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "eval.json").write_text("{}\n")
    run_eval = sweep_dir / "jobs" / SYNTHETIC_JOBS[0] / "run" / "eval.json"
    _point_runs_at([run_eval], path=str(elsewhere / "eval.json"))
    result = subprocess.run([sys.executable, "-m", "evidence", "build", "--no-figures", str(sweep_dir)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "accepted 1/2 jobs" in result.stdout
    with open(sweep_dir / "bundle" / "data" / "index.csv", newline="") as f:
        rows = {row["job"]: row for row in csv.DictReader(f)}
    assert rows[SYNTHETIC_JOBS[0]]["accepted"] == "no" and "initial.shared.path" in rows[SYNTHETIC_JOBS[0]]["reason"]
    assert (elsewhere / "eval.json").read_text() == "{}\n"
    assert audit_bundle(sweep_dir / "bundle.tar.gz") == []


@pytest.mark.parametrize("case", SHARED_TAMPERS)
def test_a_job_rejected_for_its_shared_reference_stays_rejected_in_the_audit(synthetic, tmp_path, case):
    """Damage found before the build rejects the job; the bundle carries the same damage, so the audit
    re-checks the reference and does not call the rejection cherry-picking (it used to, as the
    rejection re-check looked only at the run's own files)."""
    from evidence.seal.bundle import build_bundle

    sweep_dir = Path(shutil.copytree(synthetic[0], tmp_path / "sweep", ignore=shutil.ignore_patterns("bundle*")))
    runs = [sweep_dir / "jobs" / job / "run" for job in SYNTHETIC_JOBS]
    _tamper(case, _shared_dir(sweep_dir), [run / "eval.json" for run in runs], runs[0] / "run.json")
    result = build_bundle(sweep_dir, figures=False)
    rejected = {row["job"] for row in result.jobs if row["accepted"] != "yes"}
    assert SYNTHETIC_JOBS[0] in rejected
    assert not [f for f in audit_bundle(result.archive) if "a valid run left out" in f.reason]


def test_a_run_directory_copied_out_of_its_sweep_says_where_its_shared_evaluation_must_be(synthetic, tmp_path):
    """``python -m evidence validate`` on a run directory that is not ``<sweep>/jobs/<job>/run`` cannot
    find the shared evaluation: one line says so and how to validate it, rather than "missing"."""
    copy = Path(shutil.copytree(synthetic[0] / "jobs" / SYNTHETIC_JOBS[0] / "run", tmp_path / "grpo-run"))
    result = subprocess.run([sys.executable, "-m", "evidence", "validate", str(copy)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "run/eval.json: initial.shared: the run directory is not in a sweep (<sweep>/jobs/<job>/run), where its "
        "shared initial evaluation lives; validate the job inside its sweep"]
    inside = subprocess.run([sys.executable, "-m", "evidence", "validate", str(synthetic[0] / "jobs" / SYNTHETIC_JOBS[0] / "run")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert inside.returncode == 0 and inside.stdout == "", inside.stdout + inside.stderr
