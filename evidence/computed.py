"""Every table a bundle carries, by name (the CSV file stem under ``tables/``): the runs' and seeds' tables
(``evidence.tables``), the question-level ones (``evidence.questions``) and, for a certified sweep, the
certificates'. The build writes them, the report shows them, the audit recomputes them, ``evidence.load`` gives them.
"""

from __future__ import annotations

from evidence.dataset import BundleData
from evidence.questions import question_tables
from evidence.tables import Table, certificates_table, seed_tables


def compute_tables(data: BundleData) -> dict[str, Table]:
    """Every table of the report, by name."""
    tables = seed_tables(data) + question_tables(data)
    if data.certificates is not None:  # certify=true only: other sweeps' tables stay as they were
        tables.append(certificates_table(data))
    return {t.name: t for t in tables}
