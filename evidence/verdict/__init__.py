"""Pre-registered verdicts: an experiment spec's success criterion applied to a sweep's evidence.

The experiment spec is parsed by ``study.spec`` (below the launcher and the evidence); ``selection`` is the
tuning stage's choice per arm; ``rule`` is the criterion's decision (``decide``, pure); ``record``
writes ``verdict.json`` from a bundle's data; ``stages`` carries an experiment's earlier stages into
its confirm bundle; ``recompute`` is the audit's check of ``verdict.json``; ``section`` is the
report's verdict section. docs/verdict.md describes the spec, the rule and the files.
"""

from evidence.measures import check_logged
from evidence.problems import VerdictError
from evidence.verdict.recompute import check_verdict
from evidence.verdict.record import VERDICT_FILE, bundle_verdict, experiment_verdict, write_verdict
from evidence.verdict.rule import FAILED, INCONCLUSIVE, VALIDATED, Outcome, decide
from evidence.verdict.section import verdict_section
from evidence.verdict.selection import (
    Selection,
    extend_grid,
    select_from_bundle,
    select_setting,
    select_settings,
)
from evidence.verdict.stages import add_experiment
from study.spec import (
    Criterion,
    Experiment,
    Sizing,
    Study,
    Tuning,
    arm_owner,
    override_text,
    parse_experiment,
    parse_study,
    same_overrides,
)

__all__ = [
    "FAILED", "INCONCLUSIVE", "VALIDATED", "VERDICT_FILE", "Criterion", "Experiment", "Outcome", "Selection",
    "Sizing", "Study", "Tuning", "VerdictError", "add_experiment", "arm_owner", "bundle_verdict", "check_logged", "check_verdict",
    "decide", "experiment_verdict", "extend_grid", "override_text", "parse_experiment", "parse_study",
    "same_overrides", "select_from_bundle", "select_setting", "select_settings", "verdict_section",
    "write_verdict",
]
