"""Arms: the grid expanded from any overrides, each cell's arm and its label (the arm contract),
planned in-process through the public planning API (no shell, no trainer)."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from launcher.errors import PreflightError
from launcher.grid import GridError, arm_labels, classify, expand_grid

SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _labels(*grid: str) -> dict[str, str]:
    """Job overrides -> arm label, as the planner computes them (algo short name = the algo choice)."""
    cells = classify(expand_grid(list(grid)))
    arms = {c.arm_key: dict(c.canonical).get("algo", "grpo") for c in cells}
    labels = arm_labels(arms)
    return {" ".join(f"{k}={v}" for k, v in c.arm): labels[c.arm_key] for c in cells}


def test_the_grid_is_the_product_of_every_override_with_values_as_written():
    cells = expand_grid(["algo=grpo,rpp", "seed=1,2", "workload.lr=1e-4,3e-4", "dry_run=true"])
    assert len(cells) == 8
    assert cells[0] == ["algo=grpo", "seed=1", "workload.lr=1e-4", "dry_run=true"]
    assert {c[2] for c in cells} == {"workload.lr=1e-4", "workload.lr=3e-4"}  # not Hydra's 0.0001
    assert [c[0] for c in expand_grid(["seed=range(2,5)"])] == ["seed=2", "seed=3", "seed=4"]
    assert expand_grid(["x=[1,2],'a,b'"]) == [["x=[1,2]"], ["x='a,b'"]]


def test_an_interval_sweep_is_refused_with_one_line():
    with pytest.raises(GridError, match="interval sweep has no finite grid"):
        expand_grid(["workload.lr=interval(0.1,0.2)"])


def test_the_label_is_the_algo_short_name_when_only_the_algo_varies():
    assert set(_labels("algo=grpo,rpp,rppb", "seed=1,2").values()) == {"grpo", "rpp", "rppb"}
    assert set(_labels("algo=rpp", "seed=1,2", "workload.lr=0.001").values()) == {"rpp"}


def test_the_label_names_the_algo_and_every_varying_setting():
    labels = _labels("algo=grpo,rpp", "seed=1", "workload.lr=1e-4,3e-4", "workload.eval.k=4")
    assert labels == {"algo=grpo workload.eval.k=4 workload.lr=1e-4": "grpo-lr1e-4",
                      "algo=grpo workload.eval.k=4 workload.lr=3e-4": "grpo-lr3e-4",
                      "algo=rpp workload.eval.k=4 workload.lr=1e-4": "rpp-lr1e-4",
                      "algo=rpp workload.eval.k=4 workload.lr=3e-4": "rpp-lr3e-4"}


@pytest.mark.parametrize(("override", "expected"), [
    ("workload.lr=0.0003,1e-4", {"grpo-lr3e-4", "grpo-lr1e-4"}),  # a float's label is its value, not its text
    ("workload.lr=0.5,2.5e-7", {"grpo-lr0.5", "grpo-lr2.5e-7"}),
    ("algo.kl_coef=-1,-0.25,0", {"grpo-kl_coef-1", "grpo-kl_coef-0.25", "grpo-kl_coef0"}),
    ("workload.name=a/b,c", {"grpo-name_a_b", "grpo-name_c"}),
    ("workload.tags=[1,2],[3]", {"grpo-tags1_2", "grpo-tags3"}),
    ("workload.prompt='x y',\"../z\"", {"grpo-prompt_x_y", "grpo-prompt_z"}),
])
def test_labels_of_odd_values_are_readable_and_filesystem_safe(override, expected):
    assert set(_labels("seed=1", override).values()) == expected


@pytest.mark.parametrize("override", [
    "workload.name=a/b,a_b,a b,'a b'",  # readable labels collide: each gets a digest
    "workload.lr=1e-4,1e-04,-1e-4,-0.0001,1",
    "workload.x=[1,2],[1 ,2],'[1,2]',12",
    "workload.x=" + ",".join(f"'{'v' * 80}{i}'" for i in range(3)),  # over the length cap
])
def test_labels_are_collision_free_safe_and_short_for_the_whole_class(override):
    cells = classify(expand_grid(["seed=1", "algo=grpo,rpp", override]))
    arms = {c.arm_key: dict(c.canonical)["algo"] for c in cells}  # equal values are one arm (refused twice)
    labels = arm_labels(arms)
    values = list(labels.values())
    assert len(values) == len(arms) and len(set(values)) == len(values), labels
    assert all(SAFE.fullmatch(v) and len(v) <= 64 and "/" not in v for v in values), values


def test_labels_are_deterministic_whatever_the_order_of_the_grid():
    grid = ("algo=grpo,rpp", "seed=1", "workload.lr=1e-4,3e-4", "workload.name=a/b,a_b")
    reference = _labels(*grid)
    for order in itertools.permutations(grid):
        assert _labels(*order) == reference
    shuffled = [g.split("=")[0] + "=" + ",".join(reversed(g.split("=")[1].split(","))) for g in grid]
    assert _labels(*shuffled) == reference


def test_a_cell_records_its_arm_without_the_seed_and_the_launcher_and_hydra_settings():
    (cell,) = classify([["algo=rpp", "seed=3", "workload.lr=3e-4", "dry_run=true", "cluster=slurm",
                         "hydra.sweep.dir=/x", "+workload.extra=1"]])
    assert dict(cell.arm) == {"algo": "rpp", "workload.lr": "3e-4", "+workload.extra": "1"}
    assert cell.seed == 3 and cell.launcher == ("cluster=slurm", "dry_run=true")


@pytest.mark.parametrize("seed", ["seed=abc", "seed=1.5", "seed=true", "seed=[1]"])
def test_a_seed_that_is_not_an_integer_is_refused(seed):
    with pytest.raises(GridError, match="a seed is an integer"):
        classify(expand_grid([seed]))


# --- the planning API, in-process (what an experiment runner calls per stage) -----------------

@pytest.fixture(scope="module")
def planner():
    from launcher.planning import plan_grid

    return lambda sweep_dir, *grid: plan_grid([*grid, "dry_run=true"], sweep_dir)


def test_planning_an_lr_x_algo_x_seed_grid_gives_eight_jobs_of_four_arms(planner, tmp_path):
    from launcher.planning import write_plan

    sweep = planner(tmp_path, "algo=grpo,rpp", "seed=1,2", "workload.lr=1e-4,3e-4")
    assert [s.name for s in sweep.specs] == [
        "grpo-lr1e-4-1", "grpo-lr1e-4-2", "grpo-lr3e-4-1", "grpo-lr3e-4-2",
        "rpp-lr1e-4-1", "rpp-lr1e-4-2", "rpp-lr3e-4-1", "rpp-lr3e-4-2"]
    spec = sweep.specs[6]
    assert (spec.arm, spec.algo, spec.seed) == ("rpp-lr3e-4", "rpp", 1)
    assert spec.arm_overrides == {"algo": "rpp", "workload.lr": "3e-4"}
    assert spec.trainer_overrides == ("algo=rpp", "seed=1", "workload.lr=3e-4")
    assert spec.identity() == {"algo": "rpp", "seed": 1, "arm": "rpp-lr3e-4",
                               "arm_overrides": {"algo": "rpp", "workload.lr": "3e-4"}}
    assert json.loads(spec.to_json())["arm"] == "rpp-lr3e-4"
    write_plan(sweep)
    record = json.loads((tmp_path / "sweep.json").read_text())
    assert record["arms"] == {f"{a}-lr{lr}": {"algo": a, "workload.lr": lr}
                              for a in ("grpo", "rpp") for lr in ("1e-4", "3e-4")}
    assert record["algos"] == ["grpo", "rpp"] and record["seeds"] == [1, 2] and len(record["jobs"]) == 8


@pytest.mark.parametrize(("grid", "needle"), [
    (("algo=grpo", "seed=1", "workload.lr=1e-4,0.0001"), "are equal values"),
    (("algo=grpo", "seed=1,1"), "repeats the cell"),
    (("algo=grpo", "seed=1", "workload.n_updates=2,3"), "run length"),
    (("algo=grpo", "seed=1", "cluster=local,slurm"), "cannot vary within a sweep"),
])
def test_a_grid_that_is_not_one_comparison_is_refused_before_anything_runs(planner, tmp_path, grid, needle):
    with pytest.raises(PreflightError, match=needle):
        planner(tmp_path, *grid)
    assert not any(tmp_path.iterdir())


def test_an_older_spec_without_an_arm_reads_as_its_algo(tmp_path):
    from launcher.job_spec import JobSpec

    old = {"name": "grpo-1", "algo": "grpo", "seed": 1, "sweep_dir": str(tmp_path), "trainer_overrides": ["algo=grpo"],
           "cpus": 1, "ray_cpus": 0, "n_updates": 2, "source_commit": None, "gpu_model": None}
    spec = JobSpec.from_json(json.dumps(old))
    assert spec.arm_label == "grpo" and spec.identity()["arm"] == "grpo"


def test_an_experiment_runner_plans_and_dry_runs_a_stage_in_process(tmp_path, capsys):
    from launcher.planning import plan_grid
    from launcher.sweep_runner import run_sweep

    sweep = plan_grid(["algo=grpo,rpp", "seed=1", "workload.lr=1e-4,3e-4", "dry_run=true"], tmp_path / "stage")
    assert run_sweep(sweep) == 0
    lines = (tmp_path / "stage" / "commands.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["[0] grpo-lr1e-4-1", "[1] grpo-lr3e-4-1", "[2] rpp-lr1e-4-1",
                                                       "[3] rpp-lr3e-4-1"]
    assert lines[1].endswith("-m trainer algo=grpo seed=1 workload.lr=3e-4 output_dir=<JOB_DIR>/run sweep_dir=<SWEEP_DIR>")
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]  # the environment once
    assert [(p.split(":")[0], p.split(" -m ")[-1]) for p in printed] == [(c.split(":")[0], c.split(" -m ")[-1]) for c in lines]
    assert not (tmp_path / "stage" / "jobs").exists()
    with pytest.raises(PreflightError, match="bad grid: .*interval sweep"):
        plan_grid(["workload.lr=interval(0,1)"], tmp_path / "bad")
