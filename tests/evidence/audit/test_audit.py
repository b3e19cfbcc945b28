"""The audit finds tampering, unsafe archives, numbers that do not recompute, and leaks."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import bagit
import pytest

from evidence import audit_bundle
from evidence.__main__ import main
from evidence.audit import archive as archive_checks
from evidence.seal.bundle import build_bundle, figures_library_version, write_archive
from tests.sweeps import reseal_bag


def reseal(bag: Path) -> None:
    """Recompute manifests after an edit, so that only the content checks can notice it."""
    reseal_bag(bag)
    assert bagit.Bag(str(bag)).is_valid()  # bagit's own check, not a second audit: the test's audit follows


def audit_reasons(path: Path, word: str = "") -> list[str]:
    return [str(f) for f in audit_bundle(path) if word in str(f)]


def test_tampered_payload_byte(bundle_copy):
    target = bundle_copy / "data" / "runs" / "grpo-42" / "metrics.jsonl"
    data = bytearray(target.read_bytes())
    data[100] ^= 0x01
    target.write_bytes(bytes(data))
    assert "data/runs/grpo-42/metrics.jsonl: SHA256 differs from manifest-sha256.txt" in audit_reasons(bundle_copy)


def test_extra_files_in_payload_and_beside_it(bundle_copy):
    (bundle_copy / "data" / "notes.txt").write_text("hello\n")
    (bundle_copy / "stray.txt").write_text("hello\n")
    reasons = audit_reasons(bundle_copy)
    assert "data/notes.txt: not listed in manifest-sha256.txt (extra file)" in reasons
    assert "stray.txt: extra entry outside the payload" in reasons
    assert any(r.startswith("bag-info.txt: Payload-Oxum") for r in reasons)


def test_deleted_file(figures_bundle_copy):
    (figures_bundle_copy / "data" / "figures" / "reward.svg").unlink()
    assert "data/figures/reward.svg: listed in manifest-sha256.txt but missing" in audit_reasons(figures_bundle_copy)


def test_dotdot_entry_in_manifest(bundle_copy):
    outside = bundle_copy.parent / "outside.txt"
    outside.write_text("x\n")
    with open(bundle_copy / "manifest-sha256.txt", "a") as handle:
        handle.write(f"{'0' * 64}  data/../../outside.txt\n")
    # bagit-python's own loader refuses the bag; the finding carries no machine path.
    assert audit_reasons(bundle_copy, "bagit") == [
        'bagit: not a loadable bag: Path "../outside.txt" in manifest "manifest-sha256.txt" is unsafe']


def test_bagit_validation_details_become_one_finding_per_file(figures_bundle_copy):
    """A changed size stops bagit at the Payload-Oxum: the files that differ are still named."""
    (figures_bundle_copy / "data" / "report.md").write_text("forged\n")
    (figures_bundle_copy / "data" / "figures" / "reward.svg").unlink()
    reasons = audit_reasons(figures_bundle_copy)
    assert "data/report.md: SHA256 differs from manifest-sha256.txt" in reasons
    assert "data/figures/reward.svg: listed in manifest-sha256.txt but missing" in reasons
    assert any(r.startswith("bag-info.txt: Payload-Oxum validation failed") for r in reasons)


def test_only_sha256_manifests(bundle_copy):
    (bundle_copy / "manifest-md5.txt").write_text("")
    assert "manifest-md5.txt: only sha256 manifests are allowed" in audit_reasons(bundle_copy)


def _archive_with(tmp_path: Path, bag: Path, extra: tarfile.TarInfo, payload: bytes = b"x") -> Path:
    archive = tmp_path / "evil.tar.gz"
    write_archive(bag, archive)
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
        if extra.isfile():
            extra.size = len(payload)
            tar.addfile(extra, io.BytesIO(payload))
        else:
            tar.addfile(extra)
    return archive


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("member,reason", [
    (_member("bundle/../../escaped.txt"), "member name escapes the archive (..)"),
    (_member("/tmp/absolute.txt"), "absolute member name"),
    (_member("bundle/data/passwd", tarfile.SYMTYPE, "/etc/passwd"), "link member"),
    (_member("bundle/data/hard", tarfile.LNKTYPE, "bundle/bagit.txt"), "link member"),
    (_member("bundle/data/dev", tarfile.CHRTYPE), "device or special-file member"),
    (_member("bundle/data/holes.bin", tarfile.GNUTYPE_SPARSE), "sparse member"),
    (_member("bundle/data/index.csv"), "duplicate member"),
    (_member("bundle/data/INDEX.csv"), "duplicate member"),  # one file on a case-insensitive file system
    # Alias spellings of a member the archive already holds: each is a duplicate under another name.
    (_member("./bundle/data/index.csv"), "alias spelling of member 'bundle/data/index.csv'"),
    (_member("bundle//data/index.csv"), "alias spelling of member 'bundle/data/index.csv'"),
    (_member("bundle/./data/index.csv"), "alias spelling of member 'bundle/data/index.csv'"),
    (_member("bundle/data/./index.csv"), "alias spelling of member 'bundle/data/index.csv'"),
    (_member("bundle/data/index.csv/"), "alias spelling of member 'bundle/data/index.csv'"),
    (_member("bundle\\data\\index.csv"), "alias spelling of member 'bundle/data/index.csv'"),
    (_member("bundle/data/cafe\u0301.txt"), "alias spelling of member 'bundle/data/caf\u00e9.txt'"),
])
def test_unsafe_archive_members_are_refused_before_extraction(bundle_copy, tmp_path, member, reason):
    archive = _archive_with(tmp_path, bundle_copy, member)
    findings = audit_bundle(archive)
    assert any(f.file == f"evil.tar.gz:{member.name}" and reason in f.reason for f in findings), findings
    # Nothing was extracted: the bag checks never ran.
    assert not any(f.file.startswith("data/") for f in findings)
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_unsafe_members_through_the_cli(bundle_copy, tmp_path):
    archive = _archive_with(tmp_path, bundle_copy, _member("./bundle/data/index.csv"), b"job\n")
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(archive)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert done.stdout.splitlines()[-2:] == [  # the findings, then their count (stdout: `audit > out.txt`)
        "evil.tar.gz:./bundle/data/index.csv: alias spelling of member 'bundle/data/index.csv' (refused as a duplicate)",
        "2 finding(s)"]


def test_a_member_bigger_than_any_bundle_file_is_refused_unread(tmp_path):
    member = _member("bundle/data/huge.bin")
    member.size = archive_checks.MAX_MEMBER_BYTES + 1
    assert "above the" in archive_checks.member_problem(member)
    # A header claiming more than any bundle holds, with no data behind it: refused before reading on.
    header = _member("bundle/data/bomb.bin")
    header.size = archive_checks.MAX_ARCHIVE_BYTES + 1
    archive = tmp_path / "bomb.tar.gz"
    with gzip.open(archive, "wb") as raw:
        raw.write(header.tobuf(tarfile.GNU_FORMAT))
    (finding,) = audit_bundle(archive)
    assert finding.file == "bomb.tar.gz" and "not a bundle; nothing extracted" in finding.reason
    assert main(["audit", str(archive)]) == 1


@pytest.mark.parametrize("planted,reason", [
    ("<script>alert(1)</script>", "active content in an SVG figure ('<script')"),
    ('<g onload="alert(1)"></g>', "active content in an SVG figure ('onload=')"),
    ("<foreignObject><p>x</p></foreignObject>", "active content in an SVG figure ('<foreignObject')"),
    ('<image xlink:href="https://tracker.example/p.png"/>', "external reference in an SVG figure ('https://tracker"),
    ('<use href="file:///etc/passwd#x"/>', "external reference in an SVG figure ('file:///etc/passwd#x')"),
    ('<rect style="fill: url(https://x.example/f.svg#p)"/>', "external reference in an SVG figure ('https://x.example"),
    ("<style>@import 'https://x.example/a.css';</style>", "active content in an SVG figure ('@import')"),
])
def test_figures_with_scripts_or_external_references_are_refused(figures_bundle_copy, capsys, planted, reason):
    figure = figures_bundle_copy / "data" / "figures" / "reward.svg"
    figure.write_text(figure.read_text().replace("</svg>", planted + "</svg>"))
    reseal(figures_bundle_copy)
    assert main(["audit", str(figures_bundle_copy)]) == 1
    out = capsys.readouterr().out
    assert f"data/figures/reward.svg: {reason}" in out, out


def test_an_integer_too_large_for_a_float_is_a_finding_not_a_crash(bundle_copy, capsys):
    log = bundle_copy / "data" / "runs" / "grpo-42" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"rollout/valid_tokens": ', '"rollout/valid_tokens": 1' + "0" * 400
                                           + ', "x": ', 1))
    steps = bundle_copy / "data" / "steps.csv"
    lines = steps.read_text().splitlines()
    column = lines[0].split(",").index("rollout/valid_tokens")
    cells = lines[1].split(",")
    cells[column] = "1" + "0" * 400
    lines[1] = ",".join(cells)
    steps.write_text("\n".join(lines) + "\n")
    reseal(bundle_copy)
    assert main(["audit", str(bundle_copy)]) == 1
    out = capsys.readouterr().out
    assert ("data/runs/grpo-42/metrics.jsonl: line 1, step 0, key rollout/valid_tokens: integer 100000000000… "
            "too large for a float") in out


def test_archive_sidecar_mismatch(clean_build, tmp_path):
    _, result = clean_build
    archive = tmp_path / "bundle.tar.gz"
    archive.write_bytes(result.archive.read_bytes())
    (tmp_path / "bundle.tar.gz.sha256").write_text("0" * 64 + "  bundle.tar.gz\n")
    assert [str(f) for f in audit_bundle(archive)] == ["bundle.tar.gz: SHA256 differs from bundle.tar.gz.sha256"]


def test_edited_table_cell_does_not_recompute(bundle_copy):
    table = bundle_copy / "data" / "tables" / "stability.csv"
    lines = table.read_text().splitlines()
    cells = lines[1].split(",")
    column = lines[0].split(",").index("raw_reward_mean")
    cells[column] = repr(float(cells[column]) + 0.001)
    lines[1] = ",".join(cells)
    table.write_text("\n".join(lines) + "\n")
    reseal(bundle_copy)
    (finding,) = audit_bundle(bundle_copy)
    assert finding.file == "data/tables/stability.csv"
    assert finding.reason.startswith("line 2, column raw_reward_mean:") and "does not recompute" in finding.reason


def test_edited_report_number_does_not_recompute(bundle_copy):
    report = bundle_copy / "data" / "report.md"
    text = report.read_text()
    assert "| REINFORCE++ | 3 |" in text
    report.write_text(text.replace("| REINFORCE++ | 3 |", "| REINFORCE++ | 4 |", 1))
    reseal(bundle_copy)
    (finding,) = audit_bundle(bundle_copy)
    assert finding.file == "data/report.md" and finding.reason.startswith("line ")


def test_edited_step_record_breaks_tables_report_and_cross_check(bundle_copy):
    steps = bundle_copy / "data" / "steps.csv"
    lines = steps.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[-1].split(",")
    column = header.index("rollout/raw_reward")
    cells[column] = "0.99"
    lines[-1] = ",".join(cells)
    steps.write_text("\n".join(lines) + "\n")
    reseal(bundle_copy)
    files = {f.file for f in audit_bundle(bundle_copy)}
    assert {"data/steps.csv", "data/tables/stability.csv", "data/report.md"} <= files


def test_bundled_metrics_are_validated_again(bundle_copy):
    log = bundle_copy / "data" / "runs" / "rppb-1234" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"train/loss": ', '"train/loss": NaN, "w": ', 1))
    reseal(bundle_copy)
    reasons = audit_reasons(bundle_copy, "data/runs/rppb-1234/metrics.jsonl")
    assert reasons == ["data/runs/rppb-1234/metrics.jsonl: line 1, step 0, key train/loss: non-finite number NaN"]


def test_rows_of_a_rejected_job_in_steps_csv(bundle_copy):
    index = bundle_copy / "data" / "index.csv"
    lines = index.read_text().splitlines()
    lines[1] = lines[1].replace(",yes,", ",no,")
    index.write_text("\n".join(lines) + "\n")
    reseal(bundle_copy)
    reasons = audit_reasons(bundle_copy)
    assert "data/steps.csv: rows of grpo-42, which the index does not accept" in reasons
    assert "data/incidents.csv: rejected job grpo-42 has no incident record" in reasons


def test_planted_token_and_path_in_a_log_are_reported(bundle_copy, monkeypatch):
    token = "hf_" + "Zq8" * 10
    monkeypatch.setenv("HF_TOKEN", token)
    log = bundle_copy / "data" / "runs" / "rpp-42" / "logs" / "runtime.log"
    log.write_text(log.read_text() + f"token {token}\nwrote /home/alice/run/x.pt\n")
    reseal(bundle_copy)
    reasons = audit_reasons(bundle_copy, "leak")
    assert "data/runs/rpp-42/logs/runtime.log: leak: secret value: $HF_TOKEN (hf_…)" in reasons
    assert "data/runs/rpp-42/logs/runtime.log: leak: absolute machine path: /home/alice/run/x.pt" in reasons
    assert not any(token in r for r in reasons)


def test_secrets_of_every_kind_planted_after_sealing_are_reported_by_the_cli(bundle_copy):
    from tests.evidence.seal.test_sanitize import SECRETS

    log = bundle_copy / "data" / "runs" / "rpp-42" / "logs" / "runtime.log"
    log.write_text(log.read_text() + "".join(f"\n{text}\n" for text, _ in SECRETS.values()))
    reseal(bundle_copy)
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bundle_copy)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    prefix = "data/runs/rpp-42/logs/runtime.log: leak: "
    kinds = {line[len(prefix):].split(":")[0] for line in done.stdout.splitlines() if line.startswith(prefix)}
    assert kinds >= {
        "private key block", "AWS Access Key", "cloud secret access key", "credentials in a URL",
        "credential header", "JSON Web Token", "webhook URL", "secret assignment", "Google API key", "GitHub token",
        "GitLab token", "Stripe key", "SendGrid API Key", "OpenAI/Anthropic-style key", "secret in a URL query"}
    for kind, (_, secret_part) in SECRETS.items():
        assert secret_part[:12] not in done.stdout, kind  # findings never print a secret


def test_cli_exit_codes(clean_build, bundle_copy, tmp_path, capsys):
    sweep, result = clean_build
    assert main(["audit", str(result.archive)]) == 0
    (bundle_copy / "data" / "index.csv").write_text("tampered\n")
    assert main(["audit", str(bundle_copy)]) == 1
    assert "data/index.csv: SHA256 differs" in capsys.readouterr().out
    assert main(["audit", str(tmp_path / "nothing-here")]) == 2
    assert main(["validate", str(sweep / "jobs" / "rpp-42")]) == 0
    assert main(["validate", str(sweep / "jobs" / "rpp-42" / "run")]) == 0
    assert main(["validate", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (f"python -m evidence: error: {tmp_path} is neither a job "
                                                        "directory (with job.json) nor a run directory (with run.json)")
    with pytest.raises(SystemExit) as caught:
        main(["frobnicate"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err


def test_cli_validate_reports_violations(sweep, capsys):
    log = sweep / "jobs" / "grpo-42" / "run" / "metrics.jsonl"
    log.write_text(log.read_text().replace('"train/loss": ', '"train/loss": "nan", "v": ', 1))
    assert main(["validate", str(sweep / "jobs" / "grpo-42")]) == 1
    assert "run/metrics.jsonl: line 1, step 0, key train/loss: string \"nan\" is not a number" in capsys.readouterr().out


def test_module_entry_point_runs(clean_build):
    _, result = clean_build
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(result.bundle_dir)],
                          capture_output=True, text=True, timeout=60)
    # with the findings and the signature's line: `audit > out.txt` has them all
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "clean"


def _edit_lines(path: Path, edit) -> None:
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")


def test_a_valid_run_marked_rejected_is_cherry_picking(bundle_copy):
    """index.csv rejects grpo-42 and its rows leave steps.csv / eval.csv, as a forger would do to drop
    an unwelcome seed; its bundled evidence still passes every gate, which the audit says."""
    _edit_lines(bundle_copy / "data" / "index.csv",
                lambda lines: [ln.replace(",yes,", ",no,run/metrics.jsonl: line 3 malformed")
                               if ln.startswith("grpo-42,") else ln for ln in lines])
    for name in ("steps.csv", "eval.csv"):
        _edit_lines(bundle_copy / "data" / name, lambda lines: [ln for ln in lines if not ln.startswith("grpo,42,")])
    reseal(bundle_copy)
    done = subprocess.run([sys.executable, "-m", "evidence", "audit", str(bundle_copy)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert ("data/index.csv: grpo-42 is rejected (run/metrics.jsonl: line 3 malformed) but its bundled evidence "
            "passes every gate: a valid run left out") in done.stdout.splitlines()


def test_a_rejection_the_bundle_supports_is_not_cherry_picking(bundle_copy):
    log = bundle_copy / "data" / "runs" / "grpo-42" / "metrics.jsonl"
    _edit_lines(log, lambda lines: [lines[0].replace('"train/loss": ', '"train/loss": NaN, "w": ', 1), *lines[1:]])
    _edit_lines(bundle_copy / "data" / "index.csv",  # a loss gone NaN: a genuine rejection, whatever else says
                lambda lines: [ln.replace(",yes,", ",no,run/metrics.jsonl: line 1: non-finite number NaN")
                               if ln.startswith("grpo-42,") else ln for ln in lines])
    reseal(bundle_copy)
    notes = []
    assert not [f for f in audit_bundle(bundle_copy, notes=notes) if "a valid run left out" in f.reason]
    assert not [n for n in notes if n.startswith("rejection: grpo-42")], notes  # the bundle shows it: confirmed


def _reject(bag: Path, job: str, reason: str) -> None:
    """index.csv rejects ``job`` and its rows leave steps.csv / eval.csv, as the build would have written them."""
    algo, seed = job.split("-")
    _edit_lines(bag / "data" / "index.csv",
                lambda lines: [ln.replace(",yes,", f",no,{reason}") if ln.startswith(f"{job},") else ln for ln in lines])
    for name in ("steps.csv", "eval.csv"):
        _edit_lines(bag / "data" / name, lambda lines: [ln for ln in lines if not ln.startswith(f"{algo},{seed},")])


@pytest.mark.parametrize("remove, said", [
    ("runs/grpo-42/metrics.jsonl", "on evidence the bundle does not carry or cannot re-check (metrics"),
    ("runs/grpo-42/eval/final.jsonl", "on evidence the bundle does not carry or cannot re-check (eval-rescored"),
    ("runs/grpo-42", "and the bundle carries none of its evidence"),
])
def test_a_rejection_resting_on_evidence_the_bundle_does_not_carry_is_said(bundle_copy, remove, said):
    """Deleting a valid run's file (or all of it) and rejecting it as missing is how a run would be hidden without a
    finding: the audit cannot confirm such a rejection, and says so in a note (audit --strict: a finding)."""
    shutil.rmtree(bundle_copy / "data" / remove) if (bundle_copy / "data" / remove).is_dir() \
        else (bundle_copy / "data" / remove).unlink()
    _reject(bundle_copy, "grpo-42", f"{remove.removeprefix('runs/grpo-42/') or 'job directory'} missing")
    reseal(bundle_copy)
    notes = []
    assert not [f for f in audit_bundle(bundle_copy, notes=notes) if "a valid run left out" in f.reason]
    (note,) = [n for n in notes if n.startswith("rejection: grpo-42 is rejected")]
    assert said in note and note.endswith("not re-derived, the rejection is as the build states it"), note


def _set_bag_info(bag: Path, key: str, value: str) -> None:
    loaded = bagit.Bag(str(bag))
    loaded.info[key] = value
    loaded.save()


@pytest.mark.parametrize("tamper,expected", [
    (lambda bag: _set_bag_info(bag, "Proofgrid-Jobs-Accepted", "8/9"),
     "bag-info.txt: Proofgrid-Jobs-Accepted 8/9 != index.csv's 9/9"),
    (lambda bag: _set_bag_info(bag, "External-Description", "proofgrid evidence bundle: toy, 2 algorithms x 3 seeds, "
                                                            "10 updates"),
     "bag-info.txt: External-Description does not end with sweep.json's '3 algorithms x 3 seeds, 10 updates'"),
    (lambda bag: _set_bag_info(bag, "Source-Commit", "0" * 40),
     "bag-info.txt: Source-Commit differs from sweep.json's source_commit"),
    (lambda bag: _edit_lines(bag / "data" / "commands.txt",
                             lambda lines: [ln for ln in lines if " rppb-42: " not in ln]),
     "data/commands.txt: no command for rppb-42"),
    (lambda bag: _edit_lines(bag / "data" / "commands.txt", lambda lines: lines + lines[:1]),
     "data/commands.txt: a job's command is listed twice"),
    (lambda bag: _edit_lines(bag / "data" / "commands.txt",
                             lambda lines: lines + ["python -m trainer algo=ppo seed=7 workload=toy"]),
     "data/commands.txt: ppo-7: not a job of the sweep.json grid"),
    (lambda bag: _edit_lines(bag / "data" / "index.csv", lambda lines: [ln for ln in lines if not ln.startswith("rpp-42,")]),
     "data/index.csv: no row for rpp-42 of the sweep.json grid"),
])
def test_bag_info_sweep_index_and_commands_are_cross_checked(bundle_copy, capsys, tamper, expected):
    tamper(bundle_copy)
    reseal(bundle_copy)
    assert main(["audit", str(bundle_copy)]) == 1
    assert expected in capsys.readouterr().out.splitlines()


def test_a_redrawn_figure_must_match_the_bundled_one(figures_bundle_copy, capsys):
    """A figure edited to tell another story (a curve's point moved), resealed, differs from the
    figure redrawn from steps.csv / eval.csv by the same matplotlib."""
    figure = figures_bundle_copy / "data" / "figures" / "reward.svg"
    text = figure.read_text()
    digits = re.search(r"L (\d+\.\d+) (\d+\.\d+)", text)
    figure.write_text(text.replace(digits.group(0), f"L {digits.group(1)} 1.0", 1))
    (figures_bundle_copy / "data" / "figures" / "extra.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>\n')
    reseal(figures_bundle_copy)
    assert main(["audit", str(figures_bundle_copy)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "data/figures/reward.svg: differs from the figure redrawn from steps.csv / eval.csv" in out
    assert "data/figures/extra.svg: not a figure of the redrawing" in out
    assert not any(line.startswith("data/figures/") and "reward" not in line and "extra" not in line for line in out)


def test_figures_drawn_by_another_matplotlib_are_not_redrawn_but_still_checked(figures_bundle_copy, capsys):
    settings = figures_bundle_copy / "data" / "evidence.json"
    settings.write_text(settings.read_text().replace('"figures_matplotlib": "', '"figures_matplotlib": "0.0+'))
    figure = figures_bundle_copy / "data" / "figures" / "reward.svg"
    figure.write_text(figure.read_text().replace("</svg>", "<script>x()</script></svg>"))
    reseal(figures_bundle_copy)
    assert main(["audit", str(figures_bundle_copy)]) == 1
    version = figures_library_version()
    assert capsys.readouterr().out.splitlines()[1:] == [  # after the signature's line: the note, then the finding
        f"figures: drawn by matplotlib 0.0+{version}, not this machine's {version}: not redrawn and compared (their "
        "bytes depend on the version)", "data/figures/reward.svg: active content in an SVG figure ('<script')",
        "1 finding(s)"]


def _edit_json(path: Path, edit) -> None:
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("cut", ["metrics", "run"])
def test_a_run_cut_short_in_one_record_and_complete_in_the_others_is_said(bundle_copy, cut):
    """The last step deleted from a valid run's metrics log (or run.json's steps_completed lowered) makes it look
    crashed, while its run.json (or metrics log), eval.json and artifacts.csv say it completed: the bundle cannot say
    which record was edited, so the rejection is a note (audit --strict: a finding), not confirmed."""
    run = bundle_copy / "data" / "runs" / "grpo-42"
    if cut == "metrics":
        _edit_lines(run / "metrics.jsonl", lambda lines: lines[:-1])
    else:
        _edit_json(run / "run.json", lambda r: r.__setitem__("steps_completed", 9))
    _reject(bundle_copy, "grpo-42", "run/metrics.jsonl: 9 of 10 steps" if cut == "metrics" else "run/run.json: 9 steps")
    reseal(bundle_copy)
    notes = []
    assert not [f for f in audit_bundle(bundle_copy, notes=notes) if "a valid run left out" in f.reason]
    (note,) = [n for n in notes if n.startswith("rejection: grpo-42 is rejected")]
    assert "on records that disagree" in note and "say it completed" in note, note


def _json_edit(name: str, edit):
    def apply(job_dir: Path) -> None:
        _edit_json(job_dir / name, edit)
    return apply


def _bytes_edit(name: str, edit):
    def apply(job_dir: Path) -> None:
        (job_dir / name).write_bytes(edit((job_dir / name).read_bytes()))
    return apply


def _both(*edits):
    def apply(job_dir: Path) -> None:
        for edit in edits:
            edit(job_dir)
    return apply


JOB_SEED_9 = _json_edit("job.json", lambda r: r.__setitem__("seed", 9))
DISAGREE = "job (job.json records grpo-9 while index.csv and runs/grpo-42/ say grpo-42)"


@pytest.mark.parametrize("edit, gate", [
    # job.json names another seed than the index and the directory: which record was edited?
    (JOB_SEED_9, DISAGREE),
    # ... and run.json too, alike, or failed: still which records were edited, the bundle cannot say
    (_both(JOB_SEED_9, _json_edit("run/run.json", lambda r: r.__setitem__("seed", 9))), DISAGREE),
    (_both(JOB_SEED_9, _json_edit("run/run.json", lambda r: r.__setitem__("status", "failed"))), DISAGREE),
    # the launcher's record of a process left behind: nothing carried re-checks it
    (_json_edit("job.json", lambda r: r.__setitem__("cleanup", [{"ok": False, "what": "pid 4242"}])), "cleanup"),
    # records the launcher never writes: an argv that is not a list, a job record that is not an object
    (_json_edit("command.public.json", lambda r: r.__setitem__("argv", "python -m trainer")), "command"),
    (_bytes_edit("job.json", lambda b: b"[]\n"), "job"),
    # a record that does not parse (a byte appended, a byte-order mark, cut short): damaged or edited alike
    (_bytes_edit("job.json", lambda b: b + b"x"), "job.json unreadable"),
    (_bytes_edit("job.json", lambda b: b"\xef\xbb\xbf" + b), "job.json unreadable"),
    (_bytes_edit("job.json", lambda b: b[: len(b) // 2]), "job.json unreadable"),
    (_bytes_edit("job.json", lambda b: b.replace(b"{", b'{"x": 1e999, ', 1)), "job.json unreadable"),  # infinity
    (_bytes_edit("job.json", lambda b: b.replace(b"{", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b", ", 1)),
     "job.json unreadable"),  # nested past any parser's depth
    (_bytes_edit("command.public.json", lambda b: b + b"x"), "command.public.json unreadable"),
    (_bytes_edit("run/eval.json", lambda b: b + b"x"), "eval.json unreadable"),
], ids=["job-json-seed", "job-and-run-json-seed", "job-seed-run-failed", "cleanup", "argv-not-a-list",
        "job-json-a-list", "job-json-byte-appended", "job-json-bom", "job-json-cut", "job-json-1e999",
        "job-json-nested-deep", "command-byte-appended",
        "eval-json-byte-appended"])
def test_a_rejection_resting_on_a_launcher_record_is_said_not_confirmed(sweep, capsys, edit, gate):
    """A valid run hidden by editing its launcher records in the sweep (job.json's seed or cleanup list, a record
    made malformed or unparsable, command.public.json's argv): the build rejects it, and the audit, which cannot
    tell the edited record from a faithful one, says the rejection is not re-derived (audit --strict: a finding,
    tested for the first case) instead of confirming it."""
    edit(sweep / "jobs" / "grpo-42")
    bag = build_bundle(sweep, figures=False).bundle_dir
    index = {row.split(",")[0]: row for row in (bag / "data" / "index.csv").read_text().splitlines()}
    assert ",no," in index["grpo-42"], index["grpo-42"]  # the build's gate rejected it
    notes = []
    assert not [f for f in audit_bundle(bag, notes=notes) if "a valid run left out" in f.reason]
    (note,) = [n for n in notes if n.startswith("rejection: grpo-42 is rejected")]
    said = "on records that disagree" if "while" in gate else "on evidence the bundle does not carry or cannot re-check"
    assert said in note and gate in note and note.endswith("not re-derived, the rejection is as the build states it"), note
    if edit is JOB_SEED_9:
        capsys.readouterr()
        assert main(["audit", "--strict", str(bag)]) == 1
        assert "rejection: grpo-42 is rejected" in capsys.readouterr().out


def test_a_run_rejected_for_its_evaluation_setting_is_not_called_a_valid_run_left_out(bundle_copy):
    """run.json says 24 prompts where its command declared 25: the build's gate rejects it, and the audit, which
    re-runs that gate, does not call the rejection cherry-picking."""
    _edit_json(bundle_copy / "data" / "runs" / "grpo-42" / "run.json",
               lambda r: r["config"]["workload"]["eval"].__setitem__("n_prompts", 24))
    _reject(bundle_copy, "grpo-42", "run/run.json: run.json evaluates on 24 prompts")
    reseal(bundle_copy)
    assert not [f for f in audit_bundle(bundle_copy) if "a valid run left out" in f.reason]


def _declare(bag: Path, job: str, edit_argv, in_list: bool) -> None:
    """``edit_argv`` applied to the job's command.public.json argv, and to its commands.txt line when ``in_list``."""
    _edit_json(bag / "data" / "runs" / job / "command.public.json", lambda c: c.__setitem__("argv", edit_argv(c["argv"])))
    if in_list:
        _edit_lines(bag / "data" / "commands.txt", lambda lines: [
            " ".join(edit_argv(ln.split())) if ln.startswith("[") and f"] {job}:" in ln else ln for ln in lines])


@pytest.mark.parametrize("edit_argv, stated, listed", [
    (lambda argv: [w.replace("seed=42", "seed=9") for w in argv], "['seed=9']", "['seed=42']"),
    (lambda argv: [*argv, "workload.lr=3e-4"], "['workload.lr=3e-4']", "trainer"),
    (lambda argv: [w.replace("trainer", "trainer.external") for w in argv], "trainer.external", "trainer"),
], ids=["another-seed", "one-more-setting", "another-module"])
def test_the_settings_a_command_states_are_one_story(bundle_copy, edit_argv, stated, listed):
    """command.public.json edited alone to state another seed, one more setting or another module than the
    job's commands.txt line is a finding naming what differs (the two records of one command; its paths are
    placeholders each record sanitised on its own, and are not compared)."""
    _declare(bundle_copy, "grpo-42", edit_argv, False)
    reseal(bundle_copy)
    found = audit_reasons(bundle_copy)
    assert [f for f in found if f == f"data/runs/grpo-42/command.public.json: command.public.json runs {stated} "
            f"where commands.txt runs {listed} for grpo-42: one command, two stories"], found
    assert not [f for f in found if "two stories" in f and "grpo-42" not in f], found  # the other jobs agree


def test_the_evaluation_a_command_declares_is_one_story(bundle_copy):
    """One record of the command edited to declare 24 prompts (command.public.json alone) is a finding naming
    both; a key set twice (which Hydra refuses) declares nothing."""
    _declare(bundle_copy, "grpo-42", lambda argv: [w.replace("n_prompts=25", "n_prompts=24") for w in argv], False)
    _declare(bundle_copy, "rpp-42", lambda argv: [*argv, "++workload.eval.n_prompts=24"], True)
    reseal(bundle_copy)
    found = audit_reasons(bundle_copy)
    assert [f for f in found if f.startswith("data/runs/grpo-42/command.public.json: command.public.json's "
                                             "evaluation overrides {'n_prompts': '24'} are not commands.txt's "
                                             "{'n_prompts': '25'} for grpo-42: one command, two stories")], found
    assert [f for f in found if f.startswith("data/runs/rpp-42/run.json") and "the command sets "
            "workload.eval.n_prompts more than once (Hydra refuses that)" in f], found
