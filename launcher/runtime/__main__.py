"""``python -m launcher.runtime <job_dir>``: run the job prepared in ``job_dir`` here, without a
scheduler (how the local back end starts each job)."""

from __future__ import annotations

import sys
from pathlib import Path

from facts.files import JOB_SPEC
from launcher.errors import JobFailed
from launcher.job_spec import JobSpec
from launcher.runtime.job import run_job


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m launcher.runtime <job_dir>", file=sys.stderr)
        return 2
    spec = JobSpec.from_json((Path(args[0]) / JOB_SPEC).read_text())
    try:
        run_job(spec)
    except JobFailed as exc:
        print(f"proofgrid job: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
