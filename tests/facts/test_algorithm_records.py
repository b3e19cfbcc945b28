"""An algorithm is one record (``facts/algorithms.py``): its formulas resolve by name, its config
group file is written from it, and no other module names an algorithm."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys

import pytest

from facts.algorithms import ALGO_ORDER, COMMON_CONFIG, DISPLAY_NAMES, KL_LOSS_BY_ALGO, RECORDS, algorithm
from tests.sweeps import REPO

NAMES = {name for record in RECORDS for name in (record.name, record.short)}
# Where an algorithm may be named: its record. Tests, docs and conf/ are outside the scan.
SCANNED = ("trainer", "evidence", "facts", "launcher", "hydra_plugins")
RECORD_MODULE = REPO / "facts" / "algorithms.py"


def test_every_record_names_registered_formulas_and_every_registered_formula_has_a_record():
    from trainer.algorithms import ESTIMATORS, POLICY_LOSSES, RAW_ADVANTAGES

    for record in RECORDS:
        assert record.raw_advantage in RAW_ADVANTAGES, record.name
        assert record.policy_loss in POLICY_LOSSES, record.name
        est = ESTIMATORS[record.short]
        assert ESTIMATORS[record.name] is est
        assert est.raw_advantage_fn is RAW_ADVANTAGES[record.raw_advantage]
        assert est.policy_loss_fn is POLICY_LOSSES[record.policy_loss]
        assert all(getattr(est, f.name) == getattr(record, f.name) for f in dataclasses.fields(record))
    assert set(RAW_ADVANTAGES) == {r.raw_advantage for r in RECORDS}
    assert set(POLICY_LOSSES) == {r.policy_loss for r in RECORDS}


def test_a_record_naming_an_unregistered_formula_is_refused_with_the_fix():
    from trainer.algorithms.registry import _resolve

    typo = dataclasses.replace(algorithm("grpo"), policy_loss="ppo_clipped")
    with pytest.raises(LookupError, match="algorithm grpo: policy loss 'ppo_clipped' is not registered; register it"):
        _resolve(typo)


def test_a_formula_name_registers_once():
    import trainer.algorithms.policy_loss  # noqa: F401 (registers the policy losses: the test must not rely on another test's imports)
    from trainer.algorithms import register_policy_loss

    with pytest.raises(ValueError, match="policy loss 'ppo_clip' is already registered"):
        register_policy_loss("ppo_clip")(lambda x, cfg: (x.logp, None))


def test_the_config_group_files_are_the_records():
    from trainer.algorithms.config_group import ALGO_DIR, drifted, render

    assert drifted() == []
    assert sorted(p.stem for p in ALGO_DIR.glob("*.yaml")) == sorted(r.short for r in RECORDS)
    proc = subprocess.run([sys.executable, "-m", "trainer.algorithms.config_group", "--check"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = render(algorithm("rppb")).splitlines()
    assert all(line.startswith("# ") for line in lines[:2]) and lines[2:] == [
        "short: rppb", "display_name: REINFORCE++-baseline", "estimator: reinforce_plus_plus_baseline",
        "kl_coef: 0.0", "use_kl_loss: true", "kl_loss_type: k2", "kl_loss_coef: 0.01",
        "loss_reduction: response_mean", "clip_low: 0.2", "clip_high: 0.2",
        "tis_cap: null", "mis_bound: null", "mis_level: token"]  # every algorithm's (facts.algorithms.COMMON_CONFIG)


def test_a_drifted_or_unrecorded_config_file_is_named(tmp_path):
    from trainer.algorithms.config_group import drifted, render, write

    write(tmp_path)
    assert drifted(tmp_path) == []
    (tmp_path / "grpo.yaml").write_text(render(algorithm("grpo")).replace("kl_loss_coef: 0.01", "kl_loss_coef: 0.02"))
    (tmp_path / "ppo.yaml").write_text("short: ppo\n")
    (tmp_path / "sapo.yaml").unlink()
    assert drifted(tmp_path) == ["grpo.yaml", "ppo.yaml", "sapo.yaml"]


def test_a_rendered_config_node_reads_back_as_the_record():
    import yaml

    from trainer.algorithms.config_group import render, yaml_scalar

    for record in RECORDS:
        node = yaml.safe_load(render(record))
        assert node == {"short": record.short, "display_name": record.display_name, "estimator": record.name,
                        **record.config, **COMMON_CONFIG}
    for value in (1e-05, 0.0003, 2.5e10, None, True, "top_k", "Score centering", "yes", "a: b", 3):
        assert yaml.safe_load(f"v: {yaml_scalar(value)}")["v"] == value


def test_every_record_setting_and_config_key_is_an_algo_config_field():
    from trainer.algorithms import AlgoConfig
    from trainer.algorithms.algo_config import ALGORITHM_SETTINGS

    fields = {f.name for f in dataclasses.fields(AlgoConfig)}
    for record in RECORDS:
        assert set(record.settings) <= fields and set(record.config) <= fields, record.name
    defaults = {f.name: f.default for f in dataclasses.fields(AlgoConfig)}
    assert all(defaults[key] == value for key, value in COMMON_CONFIG.items())  # shipped = AlgoConfig's defaults
    assert set(ALGORITHM_SETTINGS) == {s for r in RECORDS for s in r.settings}


def test_the_shared_views_are_derived_from_the_records():
    assert tuple(r.short for r in RECORDS) == ALGO_ORDER
    assert {r.short: r.display_name for r in RECORDS} == DISPLAY_NAMES
    assert len(set(DISPLAY_NAMES.values())) == len(RECORDS)
    assert {r.short: r.config.get("use_kl_loss", False) for r in RECORDS} == KL_LOSS_BY_ALGO


def test_the_records_load_without_the_tensor_library():
    code = "import sys, facts.algorithms, trainer.algorithms.algo_config; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


# Another project's vocabulary that happens to spell some of our names: TRL's loss types ("grpo", "dapo",
# "sapo") are GRPOConfig.loss_type values, not proofgrid algorithms. Only these module-level assignments
# may hold such strings; a rule keyed on our algorithm's name anywhere else still fails.
FOREIGN_VOCABULARY = {"trainer/adapters/trl_grpo.py": {"TRL_LOSS_TYPES", "TRL_POLICY_LOSSES", "LOSS_TYPE_REDUCTIONS"}}


def _name_literals(path) -> list[tuple[int, str]]:
    """String constants of ``path`` that are exactly an algorithm's full or short name (outside the
    module's declared foreign vocabulary)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    foreign = FOREIGN_VOCABULARY.get(path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else "", set())
    skipped = {id(n) for stmt in tree.body if isinstance(stmt, ast.Assign)
               and {t.id for t in stmt.targets if isinstance(t, ast.Name)} & foreign for n in ast.walk(stmt.value)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES
            and id(node) not in skipped]


def test_no_module_but_the_records_names_an_algorithm():
    """A rule or a report section keyed on an algorithm's name instead of its traits fails here."""
    found = [f"{path.relative_to(REPO)}:{line}: {value!r}"
             for package in SCANNED for path in sorted((REPO / package).rglob("*.py"))
             if path != RECORD_MODULE for line, value in _name_literals(path)]
    assert found == [], "algorithm names outside facts/algorithms.py (key the rule on a trait): " + "; ".join(found)


def test_the_name_literal_scan_sees_a_name(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('if algo == "rpp":\n    pass\nLABEL = "rpp-lr3e-4"\n')
    assert _name_literals(probe) == [(1, "rpp")]
