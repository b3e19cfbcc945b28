"""Helpers that run the real launcher (`launch.py`) and read what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRID = ("algo=grpo,rpp,rppb", "seed=42,1234,2026")
# The head of a lab's script run as trainer=command (conf/trainer/command.yaml's arguments): it trains nothing but
# keeps the contract, its log of ``--steps`` steps and the initial model copied as its final one; ``a`` is its
# arguments. A test appends what its lab does besides.
CONTRACT_SCRIPT_HEAD = """import argparse, json, os, pathlib, shutil, subprocess, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--output-dir", type=pathlib.Path)
ap.add_argument("--seed", type=int)
ap.add_argument("--model-dir")
ap.add_argument("--steps", type=int)
a, _ = ap.parse_known_args()
a.output_dir.mkdir(parents=True, exist_ok=True)
with open(a.output_dir / "log.jsonl", "w") as log:
    for i in range(a.steps):
        log.write(json.dumps({"iteration": i, "reward": 0.5, "loss": 0.1, "grad_norm": 1.0, "length": 9.0,
                              "seconds": 0.1}) + "\\n")
shutil.copytree(a.model_dir, a.output_dir / "model")
"""


def free_listener(ports: range):
    """A TCP listener (non-blocking) on the first free port of ``ports``, and that port; None when none is free."""
    import socket

    for port in ports:
        listener = socket.socket()
        try:
            listener.bind(("127.0.0.1", port))
        except OSError:
            listener.close()
            continue
        listener.listen()
        listener.setblocking(False)
        return listener, port
    return None


def launch(sweep_dir: Path, *args: str, env: dict | None = None, timeout: float = 1500) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "launch.py", "-m", *args, f"hydra.sweep.dir={sweep_dir}"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def job_records(sweep_dir: Path) -> dict[str, dict]:
    return {p.name: json.loads((p / "job.json").read_text())
            for p in sorted((sweep_dir / "jobs").iterdir()) if (p / "job.json").is_file()}


def index_rows(sweep_dir: Path) -> dict[str, dict]:
    import csv

    with open(sweep_dir / "bundle" / "data" / "index.csv", newline="") as f:
        return {row["job"]: row for row in csv.DictReader(f)}


def wait_for(predicate, timeout: float, what: str, every_s: float = 0.25):
    """``predicate()``'s first truthy value, looked at every ``every_s`` seconds for up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every_s)
    return value


def restate_judged(data: Path) -> None:
    """What a consistent forger does to data/judged.csv after editing a run's copy: each copy's row says the
    decision digest is the copy's own, a row for each added copy, none for a deleted one."""
    import csv
    import hashlib

    from evidence.gates.judged import JUDGED_COLUMNS

    table = data / "judged.csv"
    if not table.is_file():
        return
    with open(table, newline="", encoding="utf-8") as handle:
        rows = {r["path"]: r for r in csv.DictReader(handle)}
    runs = sorted(p for p in (data / "runs").rglob("*") if p.is_file()) if (data / "runs").is_dir() else []
    restated = []
    for path in runs:
        rel = path.relative_to(data).as_posix()
        row = rows.get(rel) or {"job": rel.split("/")[1], "path": rel, "verbatim": "yes"}
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        restated.append({**row, "judged_sha256": digest if row["verbatim"] == "yes" else row.get("judged_sha256", digest)})
    with open(table, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=JUDGED_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(restated)


def reseal_bag(bag: Path) -> None:
    """What a consistent forger does after editing a bundle's payload: restate data/judged.csv and the RO-Crate
    (data/ro-crate-metadata.json) so that it agrees with the files (each edited file's size and SHA256, an
    added file named, a deleted one dropped), then recompute the BagIt manifests, so that only the content
    checks can notice the edit."""
    import hashlib

    import bagit

    data = bag / "data"
    restate_judged(data)
    crate_path = data / "ro-crate-metadata.json"
    regenerated = False
    if crate_path.is_file():
        # A consistent forger regenerates the whole crate from the edited payload, as the build writes it
        # (the audit regenerates and compares it); a payload the loader refuses gets the digests restated only.
        from evidence.dataset import load_bundle_data
        from evidence.seal.ro_crate import write_crate
        try:
            write_crate(data, load_bundle_data(data))
            regenerated = True
        except Exception:  # noqa: BLE001 - a forged payload the loader refuses: restate what can be
            regenerated = False
    if crate_path.is_file() and not regenerated:
        crate = json.loads(crate_path.read_text(encoding="utf-8"))

        def inside(ident: str) -> bool:
            return not ident.startswith(("#", "ni:", "./", "ro-crate-metadata.json")) and "://" not in ident

        gone = {e["@id"] for e in crate["@graph"] if inside(e["@id"]) and not (data / e["@id"]).exists()}
        graph = [e for e in crate["@graph"] if e["@id"] not in gone]
        for entity in graph:
            for key, value in list(entity.items()):
                if isinstance(value, list):
                    entity[key] = [v for v in value if not (isinstance(v, dict) and v.get("@id") in gone)]
        named = {e["@id"] for e in graph}
        root = next(e for e in graph if e["@id"] == "./")
        for path in sorted(data.rglob("*")):
            rel = path.relative_to(data).as_posix()
            if path.is_file() and rel != "ro-crate-metadata.json" and rel not in named:
                graph.append({"@id": rel, "@type": "File"})
                root.setdefault("hasPart", []).append({"@id": rel})
        for entity in graph:
            path = data / entity["@id"]
            if inside(entity["@id"]) and path.is_file():
                entity["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
                entity["contentSize"] = path.stat().st_size
        crate["@graph"] = graph
        crate_path.write_text(json.dumps(crate, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    bagit.Bag(str(bag)).save(manifests=True)
