"""Machine paths, names and e-mail addresses as a class (evidence/seal/sanitize.py's docstring), through
``python -m evidence build`` and ``audit``: cluster layouts no rule names, a user and host name the
sanitiser learns from the environment it runs in, and ordinary content left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from benchmarks.synthetic_sweep import job_dir, make_sweep
from facts.repo import REPO_ROOT

REPO = REPO_ROOT
# A user and a host no test machine has: the sanitiser learns them from $USER/$LOGNAME and $HOSTNAME.
USER, HOST = "tmarlow", "gx17-b09"
# A scheduler's per-job temporary directory under a root no rule lists (it need not exist).
JOB_TMP = "/local_ssd/job4242"

# Layouts invented for this test: no rule lists them (machine paths are a class), and the name
# sits in several places (a whole component, inside one, in another case; a host instead of a user).
LAYOUTS = [
    f"/pscratch/sd/t/{USER}/proofgrid/ckpt/step_000010",
    f"/fsx/{USER}/runs/grpo-42/run",
    f"/export/home/{USER}/.cache/huggingface/hub",
    f"/workspace/{USER}/data/gsm8k.parquet",
    f"/vast/projects/rl_{USER}_2026/ckpt",
    f"/efs/team/{USER.upper()}/out.log",
    f"/nvme/{HOST}/cache/triton",
    f"/raid0/scratch-{HOST}/run",
    f"/cephfs/{USER}.lab/x",
]
# A colleague's paths (a name the builder does not know) in layouts and syntaxes no rule was written for,
# and credentials in netrc form and a bare AWS secret beside its key id.
OTHERS = ["/projappl/project_123/kvoss/run", "/afs/cern.ch/user/k/kvoss/run", "/Volumes/kvoss-ssd/run",
          "/var/spool/slurmd/job12345/slurm_script", r"D:\data\kvoss\run", r"\\fileserver\share\kvoss\run",
          "%2Fpscratch%2Fsd%2Fk%2Fkvoss%2Frun"]
CREDENTIALS = ["machine api.wandb.ai login kvoss password 0123456789abcdef0123456789abcdef01234567",
               "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]
EMAILS = ["first.last@example.edu", "t.marlow+slurm@lab.example.org"]
# Lines a bundle may hold that no rule must touch.
ORDINARY = [
    "wrote data/runs/grpo-42/metrics.jsonl and conf/algo/grpo.yaml",
    "remote git@github.com:proofgrid/proofgrid.git (https://github.com/proofgrid/proofgrid)",
    "eval pass@1 0.5 pass@4.mean 0.7 train/kl_loss 0.01 eval/pass@2",
    "throughput 3/4 of peak, 812 tokens/s, and/or @dataclass +workload.x@pkg.sub=1",
    "closing </s> tag, Nancy nan inf",
]


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    env.update(USER=USER, LOGNAME=USER, HOSTNAME=HOST, HOME=str(home), SLURM_TMPDIR=JOB_TMP)
    return env


def _evidence(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evidence", *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def _members(archive: Path) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read().decode("utf-8", errors="replace") for m in tar if m.isfile()}


@pytest.fixture
def home(tmp_path) -> tuple[Path, Path]:
    """A home given as a symlink (what $HOME says) to its real directory (what a resolved path says)."""
    real = tmp_path / "real-home"
    real.mkdir()
    link = tmp_path / "home-link"
    link.symlink_to(real)
    return link, real


def test_paths_names_and_addresses_of_layouts_no_rule_lists_are_sealed_out(tmp_path, home):
    link, real = home
    sweep = make_sweep(tmp_path)
    prefix = Path(sys.prefix)
    machine = [f"{link}/.netrc", f"{real}/.ssh/config", f"{REPO}/trainer/loop.py", f"{prefix}/lib/site.py",
               f"{JOB_TMP}/ray/session_1", f"file://{LAYOUTS[0]}", f"PATH=/usr/bin:{LAYOUTS[1]}/bin"]
    log = job_dir(sweep, "rpp", 42) / "runtime.log"
    log.write_text(log.read_text() + "".join(f"saving to {p}, done\n" for p in LAYOUTS + machine)
                   + "".join(f"other {p}, done\n" for p in OTHERS) + "".join(f"cred {c}\n" for c in CREDENTIALS)
                   + "".join(f"#SBATCH --mail-user={e}\n" for e in EMAILS) + "".join(f"{o}\n" for o in ORDINARY))
    run_json = job_dir(sweep, "grpo", 1234) / "run" / "run.json"
    record = json.loads(run_json.read_text())
    record["config"]["notes"] = {"paths": LAYOUTS, "contact": EMAILS[0], "cache": f"{JOB_TMP}/hf"}
    run_json.write_text(json.dumps(record))

    env = _environment(link)
    built = _evidence("build", str(sweep), "--no-figures", env=env)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    members = _members(sweep / "bundle.tar.gz")
    everything = "\n".join([*members, *members.values()])
    for leaked in (*LAYOUTS, *EMAILS, USER, HOST, "example.edu", "example.org", JOB_TMP, str(link), str(real),
                   str(REPO), str(prefix), "pscratch", "/fsx/", "/export/home", "/workspace/", "/vast/", "/nvme/",
                   "/raid0/", "/cephfs/", *OTHERS, "kvoss", "0123456789abcdef", "wJalrXUtnFEMI"):
        assert leaked.lower() not in everything.lower(), leaked

    bundled = next(text for name, text in members.items() if name.endswith("runs/rpp-42/logs/runtime.log"))
    lines = bundled.splitlines()
    assert [line for line in lines if line.startswith("saving to ")] == [
        *(["saving to <PATH>, done"] * len(LAYOUTS)),
        "saving to <HOME>/.netrc, done", "saving to <HOME>/.ssh/config, done",  # $HOME as given and resolved
        "saving to <REPO>/trainer/loop.py, done", "saving to <PYTHON>/lib/site.py, done",
        "saving to <PATH>, done", "saving to file://<PATH>, done", "saving to PATH=<PATH>, done"]
    assert lines.count("#SBATCH --mail-user=<EMAIL>") == len(EMAILS)
    assert [line for line in lines if line.startswith("other ")] == ["other <PATH>, done"] * len(OTHERS)
    assert [line for line in lines if line.startswith("cred ")] == [
        "cred machine api.wandb.ai login <SECRET> password <SECRET>", "cred <SECRET> <SECRET>"]
    for line in ORDINARY:  # no false positive: relative paths, a git remote, pass@k, fractions
        assert line in lines, line
    notes = json.loads(next(text for name, text in members.items() if name.endswith("runs/grpo-1234/run.json")))
    assert notes["config"]["notes"] == {"paths": ["<PATH>"] * len(LAYOUTS), "contact": "<EMAIL>", "cache": "<PATH>"}

    # The audit, run where the bundle was built, finds none of them left.
    audited = _evidence("audit", str(sweep / "bundle.tar.gz"), env=env)
    assert audited.returncode == 0, audited.stdout[-3000:]


def test_the_machines_names_and_directories_change_nothing_in_ordinary_content(tmp_path, home):
    """A sweep without machine paths seals byte for byte alike whoever builds it where, and every run's
    metrics log is the sweep's own: the rules that know this machine rewrite nothing ordinary."""
    sweep = make_sweep(tmp_path)
    plain = _evidence("build", str(sweep), "--no-figures", env={**os.environ})
    assert plain.returncode == 0, plain.stderr[-2000:]
    first = (sweep / "bundle.tar.gz").read_bytes()
    members = _members(sweep / "bundle.tar.gz")
    for run in ("grpo-42", "rpp-1234", "rppb-2026"):
        bundled = next(text for name, text in members.items() if name.endswith(f"runs/{run}/metrics.jsonl"))
        assert bundled == (sweep / "jobs" / run / "run" / "metrics.jsonl").read_text(), run
    # The same sweep built as another user on another host with another home: the same bytes.
    again = _evidence("build", str(sweep), "--no-figures", env=_environment(home[0]))
    assert again.returncode == 0, again.stderr[-2000:]
    assert (sweep / "bundle.tar.gz").read_bytes() == first
