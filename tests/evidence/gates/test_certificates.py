"""Reproducibility certificates (certify=true): the comparisons against hand-written cases (first differing step
and key, response line and field, checkpoint file), the stop step chosen from the seed, the tolerance record, and a
synthetic certified sweep built and audited: a copy that differs is a not-reproduced incident, an edited certificate
or a dropped incident is named by the audit."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import shutil
import struct
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import make_sweep, write_json, write_ledger
from evidence import audit_bundle
from evidence.gates.certificate_jobs import (
    checkpoint_digest,
    content_sha256,
    differences,
    first_checkpoint_difference,
    first_metrics_difference,
    first_response_difference,
    tolerance,
)
from evidence.seal.bundle import build_bundle
from facts.certify import stop_step
from tests.sweeps import reseal_bag

# ---- the comparisons, against hand-written cases ------------------------------------------------------------------

A = [{"step": 0, "train/loss": 0.5, "rollout/raw_reward": 0.25, "perf/step_s": 1.0},
     {"step": 1, "train/loss": 0.4, "rollout/raw_reward": 0.5, "perf/step_s": 1.1},
     {"step": 2, "train/loss": 0.3, "rollout/raw_reward": 0.75, "perf/step_s": 0.9}]


def _with(records, step, **changes):
    return [{**r, **changes} if r["step"] == step else dict(r) for r in records]


def test_identical_logs_and_logs_that_differ_only_in_perf_keys_have_no_difference():
    assert first_metrics_difference(A, [dict(r) for r in A]) is None
    assert first_metrics_difference(A, _with(A, 1, **{"perf/step_s": 99.0, "perf/peak_mem_gib": 3.0})) is None


def test_the_first_difference_is_the_earliest_step_then_the_first_key_in_sorted_order():
    copy = _with(_with(A, 2, **{"rollout/raw_reward": 0.0}), 1, **{"train/loss": 0.41, "rollout/raw_reward": 0.51})
    # step 1 comes before step 2; at step 1 "rollout/raw_reward" sorts before "train/loss"
    assert first_metrics_difference(A, copy) == {"step": 1, "key": "rollout/raw_reward", "original": 0.5, "copy": 0.51}
    assert first_metrics_difference(A, _with(A, 2, **{"train/loss": 0.31})) == {
        "step": 2, "key": "train/loss", "original": 0.3, "copy": 0.31}


def test_one_ulp_int_for_float_a_missing_key_and_a_missing_step_are_differences():
    ulp = math.nextafter(0.4, 1.0)
    assert first_metrics_difference(A, _with(A, 1, **{"train/loss": ulp})) == {
        "step": 1, "key": "train/loss", "original": 0.4, "copy": ulp}
    assert first_metrics_difference(A, _with(A, 1, **{"train/loss": ulp}), rel_tol=1e-9) is None  # a GPU tolerance
    ints = [{"step": 0, "rollout/valid_tokens": 10}]
    assert first_metrics_difference(ints, [{"step": 0, "rollout/valid_tokens": 10.0}])["key"] == "rollout/valid_tokens"
    dropped = [dict(r) for r in A]
    del dropped[1]["train/loss"]
    assert first_metrics_difference(A, dropped) == {"step": 1, "key": "train/loss", "original": 0.4, "copy": None}
    assert first_metrics_difference(A, A[:2]) == {"step": 2, "key": "step", "original": 2, "copy": None}
    assert first_metrics_difference(A[:1], A) == {"step": 1, "key": "step", "original": None, "copy": 1}
    assert first_metrics_difference(A, [A[0], A[2], A[1]]) == {"step": 1, "key": "step", "original": 1, "copy": 2}


def test_the_first_response_difference_is_its_line_and_field():
    a = [{"index": 0, "sample": 0, "response": "#### 7", "reward": 1.0},
         {"index": 0, "sample": 1, "response": "#### 8", "reward": 0.0}]
    assert first_response_difference(a, [dict(r) for r in a]) is None
    b = [dict(a[0]), {**a[1], "response": "#### 9"}]
    assert first_response_difference(a, b) == {"line": 2, "field": "response", "original": "#### 8", "copy": "#### 9"}
    assert first_response_difference(a, a[:1]) == {"line": 2, "field": "line", "original": True, "copy": False}


def _safetensors(header: dict, data: bytes) -> bytes:
    """A safetensors file written by hand: 8-byte little-endian header length, the JSON header, the tensor bytes."""
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def test_a_checkpoint_s_content_digest_ignores_the_order_of_safetensors_metadata_but_not_its_tensors(tmp_path):
    tensor = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    data = struct.pack("<2f", 1.0, 2.0)
    first = {"__metadata__": {"format": "pt", "embed.weight": "lm_head.weight"}, "lm_head.weight": tensor}
    second = {"__metadata__": {"embed.weight": "lm_head.weight", "format": "pt"}, "lm_head.weight": tensor}
    (tmp_path / "a.safetensors").write_bytes(_safetensors(first, data))
    (tmp_path / "b.safetensors").write_bytes(_safetensors(second, data))
    (tmp_path / "c.safetensors").write_bytes(_safetensors(first, struct.pack("<2f", 1.0, 2.5)))
    raw = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.safetensors", "b.safetensors")]
    assert raw[0] != raw[1]  # the files' bytes differ (safetensors writes the metadata in hash-seed order) ...
    assert content_sha256(tmp_path / "a.safetensors") == content_sha256(tmp_path / "b.safetensors")  # ... not the content
    assert content_sha256(tmp_path / "a.safetensors") != content_sha256(tmp_path / "c.safetensors")
    (tmp_path / "optimizer.pt").write_bytes(b"state")
    assert content_sha256(tmp_path / "optimizer.pt") == hashlib.sha256(b"state").hexdigest()


def test_the_checkpoint_difference_names_the_first_differing_file_and_the_digest_covers_every_file():
    a = {"model.safetensors": "1" * 64, "optimizer.pt": "2" * 64, "rng.pt": "3" * 64}
    assert first_checkpoint_difference(a, dict(a)) is None
    assert first_checkpoint_difference(a, {**a, "rng.pt": "4" * 64, "optimizer.pt": "5" * 64}) == {
        "file": "optimizer.pt", "original": "2" * 64, "copy": "5" * 64}
    assert first_checkpoint_difference(a, {"model.safetensors": "1" * 64})["file"] == "optimizer.pt"
    lines = f"model.safetensors {'1' * 64}\noptimizer.pt {'2' * 64}\nrng.pt {'3' * 64}\n"
    assert checkpoint_digest(a) == hashlib.sha256(lines.encode()).hexdigest()
    assert checkpoint_digest({}) is None


def test_the_audit_s_json_comparison_names_every_differing_leaf_by_its_path():
    recomputed = {"reproduced": "1/2", "certificates": [{"reproduced": False, "checks": {"metrics": {"step": 3}}}]}
    assert differences(json.loads(json.dumps(recomputed)), recomputed) == []
    edited = {"reproduced": "2/2", "extra": 1,
              "certificates": [{"reproduced": True, "checks": {"metrics": {"step": 3.0}}}]}
    assert differences(edited, recomputed) == [
        ("certificates[0].checks.metrics.step", 3.0, 3),  # 3.0 is not the integer step 3
        ("certificates[0].reproduced", True, False), ("extra", 1, "<absent>"), ("reproduced", "2/2", "1/2")]
    assert differences({"certificates": []}, recomputed) == [("certificates", [], recomputed["certificates"]),
                                                             ("reproduced", "<absent>", "1/2")]


def test_the_stop_step_is_chosen_from_the_seed_strictly_inside_the_run():
    assert stop_step(7, 3) == 2 and stop_step(42, 10) == 7 and stop_step(0, 2) == 1 and stop_step(2026, 50) == 18  # 1 + 2026 mod 49
    assert all(1 <= stop_step(seed, n) <= n - 1 for seed in range(200) for n in (2, 3, 7, 50))
    with pytest.raises(ValueError, match="at least 2"):
        stop_step(7, 1)


def test_on_cpu_the_tolerance_is_exact_zero_and_says_why():
    rule = tolerance({"cpu"})
    assert rule["exact"] is True and rule["metrics_rel_tol"] == 0.0 and rule["devices"] == ["cpu"]
    assert "CPU" in rule["why"] and "tolerance 0" in rule["why"] and "perf/*" in rule["not_compared"]
    gpu = tolerance({"cuda:0"})
    assert gpu["devices"] == ["cuda"] and "use_deterministic_algorithms" in gpu["why"]


# ---- a certified synthetic sweep, built and audited -----------------------------------------------------------------

N_STEPS = 4


def _certify(sweep: Path, job: str, kind: str, stop: int | None = None) -> Path:
    """``certify/<job>.<kind>/``: the grid job's files, as a certificate job that reproduces it leaves them, with its
    own records: its job.json names what it certifies, with its own nonce and start time, and its ledger was written by
    its own processes (a resume's two; its run.json says where it resumed)."""
    name = f"{job}.{kind}"
    copy = Path(shutil.copytree(sweep / "jobs" / job, sweep / "certify" / name))
    run = json.loads((copy / "run" / "run.json").read_text())
    run["resumed_from"] = None if stop is None else {"checkpoint": f"step_{stop:06d}", "step": stop}
    write_json(copy / "run" / "run.json", run)
    record = json.loads((copy / "job.json").read_text())
    record.update(certify={"of": job, "kind": kind, **({"stop_at_step": stop} if stop is not None else {})},
                  started_at=1700000100.0 + len(name))
    write_json(copy / "job.json", record)
    write_ledger(copy, nonce=hashlib.sha256(name.encode()).hexdigest()[:32], resumed_at=stop)
    record = json.loads((sweep / "sweep.json").read_text())
    entry = {"of": job, "kind": kind, "arm": job.rsplit("-", 1)[0], "seed": int(job.rsplit("-", 1)[1]),
             **({"stop_at_step": stop} if stop is not None else {})}
    record.setdefault("certify", {"jobs": {}})["jobs"][name] = entry
    write_json(sweep / "sweep.json", record)
    with open(sweep / "commands.txt", "a", encoding="utf-8") as f:
        f.write(f"[9] {name}: (certificate) python -m trainer algo=grpo seed=1\n")
    return copy


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """grpo x 2 seeds; grpo-1 rerun reproduces, grpo-2 resume differs at step 3 in train/loss. Built once."""
    sweep = make_sweep(tmp_path_factory.mktemp("certified"), algos=("grpo",), seeds=(1, 2), n_steps=N_STEPS)
    for job in ("grpo-1", "grpo-2"):
        write_ledger(sweep / "jobs" / job, nonce=hashlib.sha256(job.encode()).hexdigest()[:32])
    _certify(sweep, "grpo-1", "rerun")
    resumed = _certify(sweep, "grpo-2", "resume", stop=2)
    log = resumed / "run" / "metrics.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    lines[3]["train/loss"] = lines[3]["train/loss"] + 1e-3
    log.write_text("".join(json.dumps(r) + "\n" for r in lines))
    write_ledger(resumed, nonce=hashlib.sha256(b"grpo-2.resume").hexdigest()[:32], resumed_at=2)  # what it logged
    return sweep, build_bundle(sweep, figures=False)


def test_a_certified_sweep_s_bundle_certifies_each_copy_and_a_difference_is_an_incident(certified):
    sweep, result = certified
    data = result.bundle_dir / "data"
    certs = json.loads((data / "certificates.json").read_text())
    by_job = {c["certificate_job"]: c for c in certs["certificates"]}
    assert certs["reproduced"] == "1/2" and certs["tolerance"]["exact"] is True
    assert by_job["grpo-1.rerun"]["reproduced"] is True
    bad = by_job["grpo-2.resume"]
    assert bad["reproduced"] is False and bad["checks"]["run"]["ok"] is True
    assert bad["checks"]["metrics"]["first_difference"]["step"] == 3
    assert bad["checks"]["metrics"]["first_difference"]["key"] == "train/loss"
    assert bad["checks"]["checkpoint"]["ok"] and bad["checks"]["responses"]["ok"]  # only the metrics were changed
    with open(data / "incidents.csv", newline="") as f:
        incidents = [r for r in csv.DictReader(f) if r["kind"] == "not-reproduced"]
    assert [(r["job"], r["title"].split(":")[0]) for r in incidents] == [("grpo-2", "grpo-2.resume does not reproduce grpo-2")]
    assert "step 3, key train/loss" in incidents[0]["title"]
    report = (data / "report.md").read_text()
    assert "## Reproducibility certificates" in report and "1/2 certificate job(s) reproduced" in report
    assert "exact, 0" in report
    with open(data / "index.csv", newline="") as f:  # the copies are outside the grid: no index row, no statistic
        assert sorted(r["job"] for r in csv.DictReader(f)) == ["grpo-1", "grpo-2"]
    assert (data / "certify" / "grpo-2.resume" / "metrics.jsonl").is_file()
    assert audit_bundle(result.archive) == []


def _audit_edited(certified, tmp_path, edit) -> list[str]:
    _, result = certified
    bag = Path(shutil.copytree(result.bundle_dir, tmp_path / "bundle"))
    edit(bag / "data")
    reseal_bag(bag)
    return [f"{p.file}: {p.detail()}" for p in audit_bundle(bag)]


def test_the_audit_names_an_edited_certificate_s_file_record_and_value(certified, tmp_path):
    def forge(data: Path) -> None:
        certs = json.loads((data / "certificates.json").read_text())
        bad = next(c for c in certs["certificates"] if c["certificate_job"] == "grpo-2.resume")
        bad["reproduced"] = True
        bad["checks"]["metrics"]["first_difference"]["step"] = 2
        (data / "certificates.json").write_text(json.dumps(certs, indent=1, sort_keys=True) + "\n")

    found = _audit_edited(certified, tmp_path, forge)
    assert any(f.startswith("data/certificates.json: certificates[1] (grpo-2.resume).reproduced: recorded True, "
                            "recomputed False") for f in found), found
    assert any("certificates[1] (grpo-2.resume).checks.metrics.first_difference.step: recorded 2, recomputed 3" in f
               for f in found), found


def test_the_audit_flags_a_dropped_not_reproduced_incident_and_a_copy_sweep_json_does_not_name(certified, tmp_path):
    def forge(data: Path) -> None:
        with open(data / "incidents.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        with open(data / "incidents.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(r for r in rows if r["kind"] != "not-reproduced")
        shutil.copytree(data / "certify" / "grpo-1.rerun", data / "certify" / "grpo-1.resume")

    found = _audit_edited(certified, tmp_path, forge)
    assert any(f.startswith("data/incidents.csv: no not-reproduced incident records 'grpo-2.resume does not "
                            "reproduce grpo-2") for f in found), found
    assert any(f.startswith("data/certify/grpo-1.resume/metrics.jsonl: the copy of certificate job 'grpo-1.resume'")
               for f in found), found


# ---- a certificate job made by copying the original's files is refused as a copy ------------------------------------

def _copy_files(sweep: Path, names: tuple[str, ...], cert: str = "grpo-2.resume", of: str = "grpo-2") -> None:
    """The original's files ``names`` (relative to its job directory) copied over the certificate job's."""
    for name in names:
        source, target = sweep / "jobs" / of / name, sweep / "certify" / cert / name
        shutil.copyfile(source, target)


def _nonce_of(sweep: Path, job: str) -> str:
    folder = "certify" if "." in job else "jobs"
    return json.loads((sweep / folder / job / "job.json").read_text())["job_nonce"]


def _restamp(sweep: Path, cert: str, nonce: str) -> None:
    """The forger's next step: the copied ledger's start lines restated with the certificate job's own nonce."""
    path = sweep / "certify" / cert / "run" / "data_ledger.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if "start" in line:
            line["start"]["job_nonce"] = nonce
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))


RESUME, RERUN = "grpo-2.resume", "grpo-1.rerun"


def _set_job(sweep: Path, job: str, **fields) -> None:
    path = sweep / ("certify" if "." in job else "jobs") / job / "job.json"
    write_json(path, {**json.loads(path.read_text()), **fields})


# variant -> (the certificate job it forges, the edit, what its first difference says)
COPIES = {
    # the attack as found: the original's metrics (and evaluation, responses) over the certificate job's
    "metrics only": (RESUME, lambda s: _copy_files(s, ("run/metrics.jsonl", "run/eval.json", "run/eval/final.jsonl")),
                     "its data ledger does not hold: certify/grpo-2.resume/data_ledger.jsonl: step 3: metrics.jsonl's "
                     "line is not the values this run's trainer logged"),
    "metrics and ledger": (RESUME, lambda s: _copy_files(s, ("run/metrics.jsonl", "run/data_ledger.jsonl")),
                           "its data_ledger.jsonl was written by another job (job nonce"),
    "the ledger restamped with the certificate's nonce": (
        RESUME, lambda s: (_copy_files(s, ("run/metrics.jsonl", "run/data_ledger.jsonl")),
                           _restamp(s, RESUME, _nonce_of(s, RESUME))),
        "its data_ledger.jsonl records a process of the original's (entropy draw"),
    "the job nonce set to the original's": (
        RESUME, lambda s: _set_job(s, RESUME, job_nonce=_nonce_of(s, "grpo-2")),
        "its job.json carries the original's job_nonce"),
    "the original's start time": (RESUME, lambda s: _set_job(s, RESUME, started_at=1700000000.5),
                                  "its job.json records the original's start time"),
    "a resume whose ledger shows no resumed process": (
        RESUME, lambda s: write_ledger(s / "certify" / RESUME, nonce=_nonce_of(s, RESUME)),
        "its data_ledger.jsonl records no process resumed at step 2"),
    # a rerun's run.json is the original's: only its own records tell it from a copy
    "every run file and the job record": (
        RERUN, lambda s: _copy_files(s, ("run/metrics.jsonl", "run/data_ledger.jsonl", "run/run.json", "job.json"),
                                     RERUN, "grpo-1"),
        "its job.json is not the certificate job's (it records certify None, not rerun of grpo-1): a copy"),
    "the rerun's ledger copied": (RERUN, lambda s: _copy_files(s, ("run/data_ledger.jsonl",), RERUN, "grpo-1"),
                                  "its data_ledger.jsonl was written by another job (job nonce"),
}


@pytest.mark.parametrize("variant", list(COPIES))
def test_a_certificate_job_made_of_the_original_s_files_is_refused_as_a_copy(certified, tmp_path, variant):
    """Each way of making a certificate job from the original's files: the certificate is not reproduced, its first
    difference names what gives the copy away, the audit recomputes the same (clean: the build told the truth)."""
    sweep = Path(shutil.copytree(certified[0], tmp_path / "sweep"))
    shutil.rmtree(sweep / "bundle")
    _set_job(sweep, "grpo-2", started_at=1700000000.5)  # a start time of the original's, which a copy would share
    copied, edit, said = COPIES[variant]
    edit(sweep)
    result = build_bundle(sweep, figures=False)
    certs = {c["certificate_job"]: c for c in json.loads((result.bundle_dir / "data" / "certificates.json").read_text())
             ["certificates"]}
    assert not certs[copied]["reproduced"], certs[copied]
    assert said in certs[copied]["first_difference"], certs[copied]["first_difference"]
    other = certs[RESUME if copied == RERUN else RERUN]
    assert other["checks"]["identity"]["ok"] and other["reproduced"] is (other["certificate_job"] == RERUN)
    if copied == RERUN:  # its metrics, checkpoint and responses agree with the original's: its identity gives it away
        assert not certs[copied]["checks"]["identity"]["ok"] and certs[copied]["checks"]["metrics"]["ok"]
    assert audit_bundle(result.archive) == []
