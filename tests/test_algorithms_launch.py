"""Every new algorithm through the command users type (`launch.py -m algo=...`), with a stale
sampler (k = 4), accepted by the evidence and audited clean. (A job whose gradient norm turns
non-finite is rejected with that cause: tests/test_what_a_person_sees.py, on its diverging sweep.)"""

from __future__ import annotations

import json

import pytest

from tests.sweeps import index_rows, job_records, launch

pytestmark = pytest.mark.slow

NEW_ALGOS = ("gspo", "sapo", "dapo", "is_pg", "score_centering")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("algos") / "sweep"
    # A small eval (8 prompts, not 64): these tests pin the training logs and the evidence, not pass@k.
    proc = launch(sweep_dir, f"algo={','.join(NEW_ALGOS)}", "seed=1", "workload.n_updates=8",
                  "workload.sampler_refresh_every=4", "workload.eval.n_prompts=8", env={"PROOFGRID_PORT_BASE": "24000"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_dir, proc


def test_every_new_algorithm_is_accepted_by_the_evidence_and_the_bundle_audits_clean(sweep):
    sweep_dir, proc = sweep
    assert sorted(job_records(sweep_dir)) == sorted(f"{a}-1" for a in NEW_ALGOS)
    rows = index_rows(sweep_dir)
    assert {name: row["accepted"] for name, row in rows.items()} == {f"{a}-1": "yes" for a in NEW_ALGOS}
    assert "audit: clean" in proc.stdout


@pytest.mark.parametrize("algo", NEW_ALGOS)
def test_a_stale_sampler_shows_in_every_algorithms_log(sweep, algo):
    sweep_dir, _ = sweep
    run = sweep_dir / "jobs" / f"{algo}-1" / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/staleness"] for r in records] == [0, 1, 2, 3] * 2
    assert all(r["train/sampler_logp_gap"] > 0 for r in records if r["train/staleness"] > 0)
    declared = json.loads((run / "run.json").read_text())["metric_keys"]
    assert all(set(r) - {"step"} == set(declared) for r in records)
    assert ("rollout/dynamic_sampling_refilled" in declared) == (algo == "dapo")
