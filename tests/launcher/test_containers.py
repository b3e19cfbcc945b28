"""Jobs in a container image (``cluster.container``): the checks before submission, the runtimes' command lines (the
Apptainer and Pyxis dry-run goldens), the preflight inside the image, the audit's one-image check, and real
containerised sweeps through ``launch.py``: Podman (tests/containers.py) on this machine and on the throwaway Slurm
cluster, its digest recorded everywhere, a tampered image refused before submission and by the job itself.

Cost: the test image is built once per session (~25 s: the interpreter and the libraries the venv loads, imported
and saved by Podman); each containerised job adds ~10 s to a job on the host (the archive loaded, the preflight).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evidence.audit import audit_bundle
from evidence.audit.images import check_images
from facts.containers import CONTAINER_PREFLIGHT, IMAGE_DIGEST_ITEM, contained_command
from facts.files import JOB_SPEC, RAY_START_LOG
from facts.repo import REPO_ROOT
from launcher.container import (
    Contained,
    check_image,
    container_literals,
    git_dirs,
    plan_container,
    runtime_problem,
)
from launcher.errors import PreflightError
from launcher.job_records import sweep_sanitizer
from launcher.job_spec import JobSpec
from launcher.planning import plan_grid, write_plan
from launcher.runtime.inside import preflight
from tests.containers import build_image, podman_env, podman_missing
from tests.launch_in_process import launch_in_process
from tests.sweeps import REPO, index_rows, job_records, launch

GOLDEN_APPTAINER = REPO / "tests" / "golden" / "dry_run_apptainer.txt"
GOLDEN_PYXIS = REPO / "tests" / "golden" / "dry_run_pyxis_slurm.txt"
SIF_HEAD = b"#!/usr/bin/env run-singularity\n" + b"SIF_MAGIC_0100"  # what apptainer build writes first
PINNED_REF = "nvcr.io#nvidia/pytorch:24.01-py3@sha256:" + "ab" * 32
TINY = ("algo=grpo", "workload.n_updates=2", "workload.eval.n_prompts=8")


def digest_of(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def container_setting(**values) -> str:
    """``cluster.container={...}`` as a Hydra override (values quoted)."""
    inner = ", ".join(f"{k}: {json.dumps(v)}" for k, v in values.items())
    return f"cluster.container={{{inner}}}"


def profile(kind: str = "local", **container) -> OmegaConf:
    return OmegaConf.create({"kind": kind, "container": {"mounts": [], "allowed_roots": [], "python": "python3",
                                                         "runtime_args": [], **container}})


@pytest.fixture
def sif(tmp_path) -> Path:
    image = tmp_path / "images" / "stack.sif"
    image.parent.mkdir()
    image.write_bytes(SIF_HEAD + b"\0" * 64 + b"the image's squashfs")
    return image


# --- before submission: one line each ---------------------------------------------------------------------


def test_the_pinned_image_passes_and_its_record_carries_the_checked_mounts(sif, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    record = plan_container(profile(runtime="apptainer", image=str(sif), digest=digest_of(sif), mounts=[str(data)],
                                    allowed_roots=[str(tmp_path)]), "local", dry_run=True)
    assert record["digest"] == digest_of(sif) and record["mounts"] == [str(data.resolve())]


def test_a_digest_mismatch_is_refused_naming_both_digests(sif):
    pinned = "sha256:" + "0" * 64
    with pytest.raises(PreflightError) as refused:
        plan_container(profile(runtime="apptainer", image=str(sif), digest=pinned), "local", dry_run=True)
    message = str(refused.value)
    assert "\n" not in message and digest_of(sif) in message and pinned in message


def test_an_image_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(PreflightError, match=r"no such image file; build it there.*name@sha256"):
        plan_container(profile(runtime="apptainer", image=str(tmp_path / "gone.sif"), digest="sha256:" + "1" * 64),
                       "local", dry_run=True)


def test_a_registry_reference_must_pin_the_digest_it_is_given():
    assert plan_container(profile(kind="slurm", runtime="pyxis", image=PINNED_REF, digest="sha256:" + "ab" * 32),
                          "slurm", dry_run=True)["image"] == PINNED_REF
    with pytest.raises(PreflightError, match="has digest sha256:abab.* but cluster.container.digest pins sha256:cdcd"):
        plan_container(profile(kind="slurm", runtime="pyxis", image=PINNED_REF, digest="sha256:" + "cd" * 32),
                       "slurm", dry_run=True)


def test_an_image_of_another_kind_is_refused(tmp_path):
    text = tmp_path / "notes.sif"
    text.write_text("not an image")
    for runtime, kind, why in (("apptainer", "local", "is not a SIF image"), ("pyxis", "slurm", "is not a squashfs"),
                               ("podman", "local", "is not an OCI or Docker archive")):
        with pytest.raises(PreflightError, match=why):
            plan_container(profile(kind=kind, runtime=runtime, image=str(text), digest=digest_of(text)), kind, True)


def test_a_mount_outside_what_the_profile_allows_is_refused(sif, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    allowed = tmp_path / "datasets"
    allowed.mkdir()
    for roots, shown in (([], "none"), ([str(allowed)], str(allowed))):
        with pytest.raises(PreflightError, match=rf"mounts: {outside} is outside what the profile allows "
                                                 rf"\(cluster.container.allowed_roots: {shown}\)"):
            plan_container(profile(runtime="apptainer", image=str(sif), digest=digest_of(sif), mounts=[str(outside)],
                                   allowed_roots=roots), "local", dry_run=True)
    sneaky = allowed / "link"  # a symlink below an allowed root that leads out of it
    sneaky.symlink_to(outside)
    with pytest.raises(PreflightError, match="is outside what the profile allows"):
        plan_container(profile(runtime="apptainer", image=str(sif), digest=digest_of(sif), mounts=[str(sneaky)],
                               allowed_roots=[str(allowed)]), "local", dry_run=True)


def test_a_runtime_not_installed_is_refused_before_submission_but_not_in_a_dry_run(sif, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no apptainer, no srun
    cluster = profile(runtime="apptainer", image=str(sif), digest=digest_of(sif))
    assert plan_container(cluster, "local", dry_run=True) is not None
    with pytest.raises(PreflightError, match="runtime=apptainer: apptainer is not installed here"):
        plan_container(cluster, "local", dry_run=False)
    assert "srun is not installed" in runtime_problem("pyxis")


def test_pyxis_runs_under_slurm_only(sif):
    with pytest.raises(PreflightError, match="runtime=pyxis runs under cluster=slurm only"):
        plan_container(profile(runtime="pyxis", image=PINNED_REF, digest="sha256:" + "ab" * 32), "local", True)


def test_the_schema_refuses_an_unknown_runtime_and_a_malformed_digest(tmp_path):
    for setting, said in (("runtime: docker", "cluster.container.runtime"), ("digest: abc", "cluster.container.digest")):
        values = {"runtime": "podman", "image": "/x.tar", "digest": "sha256:" + "0" * 64}
        key, value = setting.split(": ")
        proc = launch_in_process(tmp_path / key, "algo=grpo", "seed=1", "dry_run=true",
                                 container_setting(**{**values, key: value}))
        assert proc.returncode != 0 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# --- the command lines -----------------------------------------------------------------------------------


def contained(runtime: str, gpus: int, tmp_path: Path, ray: bool = False) -> Contained:
    spec = JobSpec(name="grpo-1", algo="grpo", seed=1, sweep_dir=str(tmp_path / "sweep"), trainer_overrides=(),
                   cpus=1, ray_cpus=1 if ray else 0, n_updates=2, source_commit=None, share_initial_eval=True,
                   container={"runtime": runtime, "image": PINNED_REF, "digest": "sha256:" + "ab" * 32, "mounts": [],
                              "python": "python3", "runtime_args": [], "gpus": gpus, "inputs": {}})
    return Contained.of(spec, spec.job_dir, ["TMPDIR"], tmp_path / "pgray-x" if ray else None)


def test_apptainer_binds_the_job_writable_over_the_read_only_sweep_and_asks_for_gpus_with_nv(tmp_path):
    argv = contained("apptainer", 1, tmp_path).wrap([sys.executable, "-m", "trainer", "seed=1"], preflight=True)
    sweep, job = tmp_path / "sweep", tmp_path / "sweep" / "jobs" / "grpo-1"
    assert argv[:5] == ["apptainer", "exec", "--no-home", "--pwd", str(REPO_ROOT)] and "--nv" in argv
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert binds.index(f"{sweep}:{sweep}:ro") < binds.index(str(job))  # the job's directory over the sweep's
    assert str(sweep / "initial_eval") in binds and f"{REPO_ROOT}:{REPO_ROOT}:ro" in binds
    image = argv.index(PINNED_REF)
    assert argv[image + 1:image + 4] == ["python3", "-m", "launcher.runtime.inside"]
    assert argv[-4:] == ["python3", "-m", "trainer", "seed=1"] and "--preflight" in argv
    assert "--nv" not in contained("apptainer", 0, tmp_path).prefix()


def test_podman_passes_the_job_s_variables_by_name_on_the_host_network_and_runs_ray_in_the_image(tmp_path):
    argv = contained("podman", 1, tmp_path, ray=True).wrap([str(Path(sys.executable).with_name("ray")), "start"],
                                                         preflight=False)
    assert argv[:3] == ["podman", "run", "--rm"] and "--read-only" in argv and "--network=host" in argv
    assert argv[argv.index("--device"):argv.index("--device") + 2] == ["--device", "nvidia.com/gpu=all"]
    assert {argv[i + 1] for i, a in enumerate(argv) if a == "--env"} == {"TMPDIR", "PROOFGRID_RUN_LOCK_FD"}
    alias = tmp_path / "pgray-x"  # the job's Ray alias: the image's /tmp is its own
    assert f"{alias}:{alias}" in argv and argv[argv.index(str(alias)) - 1] == "--write"
    assert argv[-4:] == ["python3", "-m", "ray.scripts.scripts", "start"] and "--preflight" not in argv


def test_pyxis_needs_no_prefix_the_step_already_runs_in_the_image(tmp_path):
    argv = contained("pyxis", 1, tmp_path).wrap([sys.executable, "-m", "trainer"], preflight=True)
    assert argv[:3] == [sys.executable, "-m", "launcher.runtime.inside"] and argv[-3:] == [sys.executable, "-m", "trainer"]


def test_the_evidence_reads_the_command_the_image_runs():
    words = ["podman", "run", "img", "py", "-m", "launcher.runtime.inside", "--job-dir", "J", "--", "py", "-m",
             "trainer", "seed=1"]
    assert contained_command(words) == ["py", "-m", "trainer", "seed=1"]
    assert contained_command(["py", "-m", "trainer"]) == ["py", "-m", "trainer"]


def _without_git_dirs(lines: list[str], sweep_dir: Path) -> list[str]:
    """A worktree's git directories lie outside its checkout and are bound too; a clone's are inside it."""
    names = sweep_sanitizer(sweep_dir, REPO_ROOT, container_literals({"image": PINNED_REF, "mounts": []}))
    for path in git_dirs():
        shown = names.clean(str(path))
        lines = [line.replace(f" --bind {shown}:{shown}:ro", "").replace(f",{shown}:{shown}:ro", "") for line in lines]
    return lines


def _dry_run_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """The golden's lines: the sbatch script, the estimate, the environment every job shares and each job's own."""
    return [line for line in proc.stdout.splitlines() if line.startswith(("[", "# sbatch", "# estimate", "# env"))]


def test_the_apptainer_dry_run_matches_its_golden_file(sif, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = launch_in_process(tmp_path / "sweep", "algo=grpo", "seed=1", "dry_run=true",
                             container_setting(runtime="apptainer", image=str(sif), digest=digest_of(sif),
                                               mounts=[str(data)], allowed_roots=[str(tmp_path)]))
    assert proc.returncode == 0, proc.stderr
    lines = _without_git_dirs(_dry_run_lines(proc), tmp_path / "sweep")
    assert all(str(tmp_path) not in line for line in lines)
    assert lines == GOLDEN_APPTAINER.read_text().splitlines(), "update tests/golden/dry_run_apptainer.txt if intended"


def test_the_pyxis_dry_run_matches_its_golden_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = launch_in_process(tmp_path / "sweep", "algo=grpo", "seed=1", "dry_run=true", "cluster=slurm",
                             "cluster.partition=gpu",
                             container_setting(runtime="pyxis", image=PINNED_REF, digest="sha256:" + "ab" * 32,
                                               mounts=[str(data)], allowed_roots=[str(tmp_path)]))
    assert proc.returncode == 0, proc.stderr
    lines = _without_git_dirs(_dry_run_lines(proc), tmp_path / "sweep")
    srun = next(line for line in lines if " srun " in line)
    assert f"--container-image={PINNED_REF}" in srun and "--container-mounts=<REPO>:<REPO>:ro" in srun
    assert "<MOUNT>:<MOUNT>:ro" in srun and "<SWEEP_DIR>:<SWEEP_DIR>" in srun and "--no-container-mount-home" in srun
    assert all(str(tmp_path) not in line for line in lines)
    assert lines == GOLDEN_PYXIS.read_text().splitlines(), "update tests/golden/dry_run_pyxis_slurm.txt if intended"


# --- inside the image ------------------------------------------------------------------------------------


def test_the_preflight_records_python_and_modules_and_refuses_another_commit_or_changed_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    monkeypatch.setattr("site.ENABLE_USER_SITE", False)
    pin = "trainer/assets/toy/data/test.parquet"
    good = hashlib.sha256((REPO_ROOT / pin).read_bytes()).hexdigest()
    spec = JobSpec(name="grpo-1", algo="grpo", seed=1, sweep_dir=str(tmp_path), trainer_overrides=(), cpus=1,
                   ray_cpus=0, n_updates=2, source_commit=None,
                   container={"runtime": "podman", "image": PINNED_REF, "inputs": {pin: good}})
    record, failure = preflight(spec)
    assert failure is None, failure
    assert record["modules"]["trainer"] == "<REPO>/trainer/__init__.py" and record["inputs"] == {pin: good}
    assert record["python"]["user_site"] is False and record["python"]["version"] == sys.version.split()[0]
    assert str(REPO_ROOT) not in json.dumps(record)  # path-free
    other = JobSpec(**{**spec.__dict__, "source_commit": "f" * 40})
    assert "the launcher planned " + "f" * 40 in preflight(other)[1]
    changed = JobSpec(**{**spec.__dict__, "container": {**spec.container, "inputs": {pin: "0" * 64}}})
    assert f"input {pin} is SHA256 {good} in the image, pinned {'0' * 64}" in preflight(changed)[1]
    monkeypatch.setenv("PYTHONNOUSERSITE", "")
    assert "the user site is on" in preflight(spec)[1]


def test_the_audit_finds_a_run_of_another_image(tmp_path):
    pinned, other = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    sweep = {"cluster": {"kind": "local", "container": {"digest": pinned}}}
    for job, digest in (("grpo-1", pinned), ("grpo-2", other)):
        copy = tmp_path / "runs" / job
        copy.mkdir(parents=True)
        (copy / "job.json").write_text(json.dumps({"container": {"image_digest": digest}}))
        (copy / "run.json").write_text(json.dumps({"image_digest": digest}))
    found = check_images(tmp_path, sweep)
    assert [p.file for p in found] == ["data/runs/grpo-2/job.json", "data/runs/grpo-2/run.json"]
    assert all(f"ran in image {other}, not the image {pinned}" in p.reason for p in found)
    assert len(check_images(tmp_path, {"cluster": {"kind": "local", "container": None}})) == 4


def test_check_image_names_both_digests(sif):
    with pytest.raises(PreflightError, match=f"has digest {digest_of(sif)} but cluster.container.digest pins sha256:0"):
        check_image(str(sif), "sha256:" + "0" * 64)


# --- real containers: Podman on this machine and on the throwaway Slurm cluster ---------------------------------


@pytest.fixture(scope="session")
def podman_image(tmp_path_factory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The test image (an OCI archive) and the Podman configuration that runs it here (tests/containers.py)."""
    if why := podman_missing():
        pytest.fail(why, pytrace=False)
    root = tmp_path_factory.mktemp("podman")
    env = podman_env(root / "podman")
    yield build_image(root, env), env
    # Podman's overlay mounts outlive its containers: unmounted here, or pytest cannot remove the storage later
    # ("Device or resource busy", a warning per directory at the end of every run).
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if str(root) in line]
    for mount in sorted(mounts, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


def podman_setting(image: Path) -> str:
    return container_setting(runtime="podman", image=str(image), digest=digest_of(image), python=".venv/bin/python")


@pytest.fixture(scope="module")
def contained_sweep(podman_image, tmp_path_factory):
    """Two jobs (they share the sweep's initial evaluation) run in the image by the local back end, each with its
    reward worker on its own Ray, which runs in the image too."""
    image, env = podman_image
    sweep_dir = tmp_path_factory.mktemp("contained") / "sweep"
    proc = launch(sweep_dir, *TINY, "seed=1,2", "workload.reward_workers=1", "workload.cpus_per_job=2",
                  podman_setting(image), env={**env, "PROOFGRID_PORT_BASE": "23400"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sweep_dir, image


def test_a_contained_sweep_runs_in_the_image_and_records_its_digest_everywhere(contained_sweep):
    sweep_dir, image = contained_sweep
    digest = digest_of(image)
    records = job_records(sweep_dir)
    assert sorted(records) == ["grpo-1", "grpo-2"]
    for name, record in records.items():
        assert record["state"] == "COMPLETED" and record["cleanup"] == [], name
        assert record["container"]["image_digest"] == digest and record["container"]["image"] == image.name
        found = record["container"]["preflight"]
        assert found["failure"] is None and found["modules"]["trainer"] == "<REPO>/trainer/__init__.py"
        assert found["python"]["executable"] == "<REPO>/.venv/bin/python" and found["python"]["PYTHONNOUSERSITE"] == "1"
        assert record["guard"]["writes"].startswith("podman container: landlock ABI"), record["guard"]
        assert "<SWEEP_DIR>/initial_eval" in record["guard"]["writes"]  # the shared evaluation stays writable
        run = json.loads((sweep_dir / "jobs" / name / "run" / "run.json").read_text())
        assert run["image_digest"] == digest
        argv = json.loads((sweep_dir / "jobs" / name / "command.json").read_text())["argv"]
        assert argv[:2] == ["podman", "run"] and f"oci-archive:{image}" in argv
        ray_log = (sweep_dir / "jobs" / name / RAY_START_LOG).read_text()  # Ray's head ran in the image
        assert "Ray runtime started" in ray_log and "ERR" not in ray_log, ray_log[-2000:]
        assert not (sweep_dir / "jobs" / name / CONTAINER_PREFLIGHT).read_text().count(str(REPO_ROOT))
    assert all(row["accepted"] == "yes" for row in index_rows(sweep_dir).values())
    report = (sweep_dir / "bundle" / "data" / "report.md").read_text()
    assert f"| {IMAGE_DIGEST_ITEM} | {digest} |" in report
    crate = json.loads((sweep_dir / "bundle" / "data" / "ro-crate-metadata.json").read_text())
    images = [e for e in crate["@graph"] if e.get("@type") == "ContainerImage"]
    assert [e["sha256"] for e in images] == [digest.split(":")[1]]
    actions = [e for e in crate["@graph"] if e["@id"].startswith("#run-")]
    assert len(actions) == 2 and all(a["containerImage"] == {"@id": images[0]["@id"]} for a in actions)
    assert audit_bundle(sweep_dir / "bundle.tar.gz") == []


def test_the_image_s_writes_stay_in_the_job_s_roots(contained_sweep, podman_image, tmp_path):
    """Landlock inside the image: the entry a job's command starts with holds what it runs to the job's roots."""
    sweep_dir, image = contained_sweep
    _, env = podman_image
    job = sweep_dir / "jobs" / "grpo-1"
    outside = sweep_dir / "outside.txt"
    probe = ("import pathlib, sys\nfor p in sys.argv[1:]:\n    try:\n        pathlib.Path(p).write_text('x'); print('wrote', p)"
             "\n    except OSError as e:\n        print('refused', p, e.errno)")
    spec = JobSpec.from_json((job / "spec.json").read_text())
    argv = Contained.of(spec, job, [], None).wrap(
        [sys.executable, "-c", probe, str(job / "roots" / "tmp" / "probe"), str(outside)], preflight=False)
    out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env}, cwd=REPO_ROOT, timeout=300)
    assert f"wrote {job / 'roots' / 'tmp' / 'probe'}" in out.stdout, out.stdout + out.stderr
    assert f"refused {outside}" in out.stdout and not outside.exists()


def test_a_tampered_image_is_refused_before_submission_and_by_a_job_about_to_start(podman_image, tmp_path):
    image, env = podman_image
    tampered = tmp_path / "image.tar"
    tampered.write_bytes(image.read_bytes())
    setting = podman_setting(tampered)
    with tampered.open("ab") as handle:  # after it was pinned
        handle.write(b"\0" * 512)
    refused = launch(tmp_path / "refused", *TINY, "seed=1", setting, env=env)
    assert refused.returncode != 0 and f"has digest {digest_of(tampered)} but" in refused.stderr
    assert not (tmp_path / "refused" / "jobs").exists()
    # planned with the pinned image, then changed before its job starts: the job fails naming both digests
    tampered.write_bytes(image.read_bytes())
    sweep = plan_grid([*TINY, "seed=1", setting], tmp_path / "job")
    write_plan(sweep)
    for spec in sweep.specs:  # what a back end prepares before it starts the job
        spec.job_dir.mkdir(parents=True)
        (spec.job_dir / JOB_SPEC).write_text(spec.to_json())
    with tampered.open("ab") as handle:
        handle.write(b"\0")
    job_dir = tmp_path / "job" / "jobs" / "grpo-1"
    run = subprocess.run([sys.executable, "-m", "launcher.runtime", str(job_dir)], capture_output=True, text=True,
                         cwd=REPO_ROOT, env={**os.environ, **env}, timeout=300)
    record = json.loads((job_dir / "job.json").read_text())
    assert run.returncode != 0 and record["state"] == "FAILED"
    assert f"has digest {digest_of(tampered)} but cluster.container.digest pins {digest_of(image)}" in record["failure"]
    assert not (job_dir / "run" / "run.json").exists()  # the trainer never started


@pytest.mark.slow
def test_a_contained_sweep_on_the_throwaway_slurm_cluster(podman_image, slurm_cluster, tmp_path):
    image, env = podman_image
    sweep_dir = tmp_path / "slurm"
    proc = launch(sweep_dir, *TINY, "seed=1", "cluster=slurm", podman_setting(image), env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (record,) = job_records(sweep_dir).values()
    assert record["scheduler"] == "slurm" and record["state"] == "COMPLETED"
    assert record["container"]["image_digest"] == digest_of(image) and record["container"]["preflight"]["failure"] is None
    assert json.loads((sweep_dir / "jobs" / "grpo-1" / "run" / "run.json").read_text())["image_digest"] == digest_of(image)
    assert audit_bundle(sweep_dir / "bundle.tar.gz") == []
