"""The test tiers: which tests tests/conftest.py puts in the slow tier without being told."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import TESTS, _file_facts, _xdist_group

SAMPLE = '''
import subprocess, sys
import pytest
from tests.trainer_runs import run_trainer, train_in_process
from tests.sweeps import launch
from tests.launch_in_process import launch_in_process


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return run_trainer(tmp_path_factory.mktemp("r"), "algo=grpo")


def _sweep_twice(path):
    launch(path)
    launch(path)


def _via_helper(path):
    return _sweep_twice(path)


def test_uses_the_fixture(trained):
    assert trained


def test_spells_out_the_trainer(tmp_path):
    subprocess.run([sys.executable, "-m", "trainer", f"output_dir={tmp_path}"], check=True)


def test_spells_out_the_launcher(tmp_path):
    subprocess.run((sys.executable, "launch.py", "-m", "algo=grpo"), check=True)


def test_through_two_helpers(tmp_path):
    _via_helper(tmp_path)


def test_trains_in_process(tmp_path):
    train_in_process(tmp_path, "algo=grpo")


def test_dry_runs_the_launcher_in_process(tmp_path):
    launch_in_process(tmp_path, "algo=grpo", "dry_run=true")


def test_pure_unit():
    assert sorted([3, 1]) == [1, 3]


def test_runs_the_evidence_cli(tmp_path):
    subprocess.run([sys.executable, "-m", "evidence", "audit", str(tmp_path)])


def test_runs_python_for_something_else():
    subprocess.run([sys.executable, "-m", "json.tool", "--help"])
'''


def test_fixtures_helpers_and_spelled_out_commands_that_start_processes_are_found(tmp_path):
    path = tmp_path / "test_sample.py"
    path.write_text(textwrap.dedent(SAMPLE))
    assert set(_file_facts(path)["starters"]) == {"trained", "_sweep_twice", "_via_helper", "test_spells_out_the_trainer",
                                       "test_spells_out_the_launcher", "test_through_two_helpers",
                                       "test_trains_in_process", "test_dry_runs_the_launcher_in_process",
                                       "test_runs_the_evidence_cli"}


def test_the_module_scoped_runs_that_group_a_module_s_tests_are_found(tmp_path):
    path = tmp_path / "test_sample.py"
    path.write_text(textwrap.dedent(SAMPLE) + textwrap.dedent('''
        @pytest.fixture(scope="session")
        def everywhere():
            return 1


        @pytest.fixture()
        def each_test():
            return 1
        '''))
    assert set(_file_facts(path)["module_fixtures"]) == {"trained"}  # only module scope: a session fixture is per worker anyway


def _by_test(request) -> dict[str, pytest.Item]:
    """This session's tests by ``file::name`` (under ``--dist loadgroup`` pytest-xdist appends ``@group``
    to the node id of a grouped test)."""
    return {f"tests/{Path(item.path).relative_to(TESTS).as_posix()}::{item.name}": item
            for item in request.session.items}


def test_the_trainer_runs_of_this_suite_are_slow_and_its_unit_tests_are_not(request):
    collected = {name: item.get_closest_marker("slow") is not None for name, item in _by_test(request).items()}
    if "tests/trainer/test_trainer.py::test_same_algo_and_seed_give_bit_identical_metrics" not in collected:
        pytest.skip("needs tests/trainer/test_trainer.py collected in the same session")
    assert collected["tests/trainer/test_trainer.py::test_same_algo_and_seed_give_bit_identical_metrics"]
    assert collected["tests/trainer/test_trainer.py::test_run_writes_the_contract_files[grpo]"]  # through its fixture
    assert not collected["tests/trainer/test_trainer.py::test_a_changed_input_file_is_refused"]
    assert collected["tests/trainer/test_trainer.py::test_different_seeds_differ"]  # trains in this process


def _group(item: pytest.Item) -> str | None:
    """The group pytest-xdist schedules ``item`` by: its xdist_group marks, sorted and joined with "_"."""
    names = sorted({m.args[0] if m.args else m.kwargs.get("name", "default") for m in item.iter_markers("xdist_group")})
    return "_".join(names) or None


def test_the_slurm_tests_share_one_worker_and_a_module_run_is_made_once(request):
    # `make test` runs --dist loadgroup: the one cluster's tests on one worker, the tests of a module with a
    # module-scoped sweep on one worker (else each worker would launch it again), every other test anywhere.
    tests = _by_test(request)
    name = "tests/launcher/test_sweep_local.py::test_every_job_ran_isolated_and_was_accepted"
    if name not in tests or "tests/launcher/test_slurm.py::test_a_cancelled_job_is_rejected_with_its_scheduler_state_and_the_rest_are_unaffected" not in tests:
        pytest.skip("needs tests/launcher/test_sweep_local.py and tests/launcher/test_slurm.py collected in the same session")
    uses_cluster = {n for n, item in tests.items() if "slurm_cluster" in item.fixturenames}
    in_slurm_group = {n for n, item in tests.items() if _group(item) == "slurm"}
    assert len(uses_cluster) > 20 and in_slurm_group == uses_cluster
    assert {_group(tests[n]) for n in tests if n.startswith("tests/launcher/test_sweep_local.py::test_every")} == {"test_sweep_local"}
    assert _group(tests["tests/launcher/test_sweep_local.py::test_the_bundle_is_sealed_and_audits_clean"]) == "test_sweep_local"
    assert _group(tests["tests/launcher/test_sweep_local.py::test_two_cpu_jobs_on_two_pinned_cores_run_one_at_a_time"]) is None
    assert _group(tests["tests/test_tiers.py::test_the_slurm_tests_share_one_worker_and_a_module_run_is_made_once"]) is None


def test_the_multinode_cluster_s_tests_share_a_worker_of_their_own_beside_the_single_node_cluster_s(request):
    # Each throwaway cluster has a node that its tests take down, so its tests run one at a time on one
    # worker. The two clusters share nothing (own daemons, ports, SLURM_CONF given per command), so their
    # groups run side by side: the single-node group is the suite's longest.
    tests = _by_test(request)
    if "tests/launcher/test_multinode_cluster.py::test_a_gloo_all_reduce_through_srun_across_two_nodes_gives_the_sum_over_their_ranks" not in tests:
        pytest.skip("needs tests/launcher/test_multinode_cluster.py collected in the same session")
    uses_cluster = {n for n, item in tests.items() if "slurm_multinode_cluster" in item.fixturenames}
    assert len(uses_cluster) >= 3 and {n for n, item in tests.items() if _group(item) == "slurm-mn"} == uses_cluster
    assert all(tests[n].get_closest_marker("slow") is not None for n in uses_cluster)


def test_a_test_of_both_throwaway_clusters_is_refused_and_one_of_either_joins_its_cluster_s_group():
    def item(*fixtures):
        return SimpleNamespace(nodeid="tests/test_x.py::test_y", fixturenames=[*fixtures, "tmp_path"],
                               path=TESTS / "test_tiers.py")

    with pytest.raises(pytest.UsageError, match="uses both throwaway Slurm clusters"):
        _xdist_group(item("slurm_cluster", "slurm_multinode_cluster"))
    assert _xdist_group(item("slurm_multinode_cluster")) == "slurm-mn"
    assert _xdist_group(item("slurm_cluster")) == "slurm"
    assert _xdist_group(item()) is None


def test_dry_runs_and_process_groups_are_slow(request):
    collected = {name: item.get_closest_marker("slow") is not None for name, item in _by_test(request).items()}
    dry_run = "tests/launcher/test_launcher_dry_run.py::test_dry_run_expands_the_grid_deterministically_and_matches_the_golden_file"
    groups = [name for name in collected if name.startswith("tests/trainer/test_algorithms_distributed.py::")]
    if dry_run not in collected or not groups:
        pytest.skip("needs tests/launcher/test_launcher_dry_run.py and tests/trainer/test_algorithms_distributed.py collected")
    assert collected[dry_run] and all(collected[name] for name in groups)
