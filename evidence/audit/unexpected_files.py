"""No unexpected files: every payload file is one the build writes (``facts.bundle_layout``), and a job's
copy (``runs/<job>/``) is of a job its index lists; anything else is one finding, naming the file."""

from __future__ import annotations

from pathlib import Path

from evidence.dataset import BundleData
from evidence.problems import Problem
from evidence.seal.layout import unexpected_files
from facts.files import BUNDLE_PAYLOAD


def check_layout(bag: Path, data: BundleData | None) -> list[Problem]:
    """One finding per payload file the build never writes, named by its bag-relative path."""
    data_dir = bag / BUNDLE_PAYLOAD
    if not data_dir.is_dir():
        return []
    return [Problem(f"{BUNDLE_PAYLOAD}/{rel}", why) for rel, why in unexpected_files(data_dir, data)]
