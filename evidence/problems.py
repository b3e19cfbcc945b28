"""The evidence's one problem shape and its one error family: what every check returns, and what stops a command.

Every check (a job's gates, the metrics validator's violations as they reach a job or a bundle, the
audit, the leak scan, the verdict's recomputation) returns ``Problem`` records; the index, the
incidents, the report, the audit's printout and the launcher's one-line errors read them. A problem
prints as ``file: reason`` (``file: where: reason`` when it names a record or field in the file), as
bagit-python's ``BagError`` details name a path and what is wrong with it.

The exceptions below stop a command before it gives a result (one line each, naming the problem and
the fix); they are raised by several modules of ``evidence`` and caught by its CLI and the launcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from study import spec

# Reported per file before the rest are summarised, so one broken table does not bury the others.
MAX_PER_FILE = 20


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on or cannot show (control characters, line
    breaks, undecodable bytes of a file name) written as its Python escape, so a finding that quotes a
    file's content or name stays one line of plain text: ``\\x00``, ``\\n``, ``\\udcff``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


@dataclass(frozen=True)
class Problem:
    """One problem a check found: the file it is in (relative to the job directory, the bag, or the
    archive's name), the record or field where that applies (``line 4, step 3, key train/loss``),
    why, and which check or gate found it (``kind``: a job's incidents group by it; a leak's kind)."""

    file: str
    reason: str
    where: str = ""
    kind: str = ""

    def detail(self) -> str:
        """Where and why, without the file name."""
        return f"{self.where}: {self.reason}" if self.where else self.reason

    def __str__(self) -> str:
        return printable(f"{self.file}: {self.detail()}")


def capped(problems: Sequence[Problem], limit: int = MAX_PER_FILE) -> list[Problem]:
    """The first ``limit`` problems, then one line counting the rest (under the first one's file)."""
    if len(problems) <= limit:
        return list(problems)
    return [*problems[:limit], Problem(problems[0].file, f"(+{len(problems) - limit} more differences)")]


# ---- the error family -----------------------------------------------------------------------------

class EvidenceError(Exception):
    """An input the evidence cannot give a result for; the message is one line naming the fix."""


class UsageError(EvidenceError):
    """The path given to the audit is neither a bag directory nor a .tar.gz archive."""


class SweepError(EvidenceError, ValueError):
    """A sweep directory (or a bundle's sweep.json) that cannot be read as one (one-line message)."""


class IncidentsFileError(EvidenceError):
    """``incidents.yaml`` does not follow the schema (one-line message)."""


# An experiment spec or its evidence that cannot give a verdict (one-line message): stated with the spec, in
# ``study.spec``, which the launcher reads too; a ValueError, not an EvidenceError.
VerdictError = spec.VerdictError


class LoadError(EvidenceError):
    """A path that is not a sweep directory, a bundle directory or a bundle archive (one-line message)."""


class ExportError(EvidenceError):
    """An export that cannot be written: its library missing, its output directory taken (one line)."""


class CompareError(EvidenceError):
    """Inputs that cannot be compared (one-line message; exit 2)."""


class SigningError(EvidenceError):
    """A key file or an archive that cannot be signed or verified with: missing, not a key of a supported
    type, a private key given where the public one belongs (one-line message; exit 2)."""


class LeakError(EvidenceError):
    """The leak scan found something in the staged bag: the bundle is not sealed."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__(f"refusing to seal: {len(self.problems)} leak(s), first {self.problems[0]}")
