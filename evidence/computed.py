"""Every table a bundle carries, by name (the CSV file stem under ``tables/``): the runs' and seeds' tables
(``evidence.tables``), the question-level ones (``evidence.questions``) and, for a certified sweep, the
certificates'; the claims of an experiment whose seeds run in waves follow where its design stands
(``sequential_state``, from the verdict). The build writes them, the report shows them, the audit recomputes them, ``evidence.load`` gives them.
"""

from __future__ import annotations

from evidence import tables
from evidence.dataset import BundleData
from evidence.problems import VerdictError
from evidence.questions import question_tables
from evidence.statistics import claims
from evidence.tables import Table, certificates_table, seed_tables
from evidence.verdict.record import bundle_verdict
from evidence.verdict.sizing import current_look


def compute_tables(data: BundleData) -> dict[str, Table]:
    """Every table of the report, by name."""
    computed = seed_tables(data, sequential_state(data)) + question_tables(data)
    if data.certificates is not None:  # certify=true only: other sweeps' tables stay as they were
        computed.append(certificates_table(data))
    return {t.name: t for t in computed}


def sequential_state(data: BundleData) -> tuple[claims.SequentialLook, tuple[str, str, str] | None] | None:
    """Where the bundle's experiment design in waves stands (``evidence.verdict.sizing.current_look`` of the
    verdict's ``sizing`` record, recomputed from the bundle as ``verdict.json`` is), with the pair it tests:
    (paired metric, treatment arm, baseline arm), None when its metric is none of the paired table's. None: no
    design in waves (a plain sweep, a fixed-seed spec, an earlier stage's bundle). A verdict that does not compute
    (the build refuses it; the audit names it) reads as a design that has not decided."""
    experiment = tables.experiment_spec(data)
    if experiment is None or experiment.sizing is None:
        return None
    try:
        record = bundle_verdict(data)
    except (VerdictError, KeyError, ValueError, OSError):
        return claims.SequentialLook(0, len(experiment.sizing.waves), None, None, False), None
    if record is None or "sizing" not in record:
        return None
    metric = tables.paired_metric(experiment.criterion.measure, data)
    arms_ = record["arms"]
    return current_look(record["sizing"]), (None if metric is None else
                                             (metric, arms_["treatment"]["arm"], arms_["baseline"]["arm"]))
