"""Pinned workload inputs: every file a workload reads is listed in ``manifests/<workload>.json``
with its size and SHA256, and is refused when its bytes differ.

The manifest's format is ``facts.manifests``; a Parquet or JSON Lines split's entry also states its ``"rows"``
(written by ``pin``, a fact of the pinned bytes like their digest). A Hugging Face dataset saved to disk is a
directory: ``pin`` pins every file in it, and the trainer refuses it when any is missing, changed or unpinned.

``check_task`` is the plan-time check of a workload's task (``facts.task``): its splits read with the field map
(the file, the field and the fields it does have named in one line), its prompt template over their fields, every
row of both splits rendered as the trainer renders them when it starts (the file and the row that cannot be, named),
the chat template of its tokenizer, its reward importable and callable with (response, row); it returns the first
rows' rendered prompts (the dry run shows them).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from facts import sha256_file
from facts.manifests import ManifestFormatError, PinnedFile, read_manifest
from facts.repo import MANIFESTS_DIR, REPO_ROOT
from facts.splits import JSONL_SUFFIX, PARQUET_SUFFIX, SplitError, count_rows
from trainer.trainer_errors import TrainerError


class InputDigestError(TrainerError, RuntimeError):
    """An input file is missing or its bytes differ from the committed pin."""


def load_manifest(manifest_path: str | Path) -> list[PinnedFile]:
    path = resolve(manifest_path)
    if not path.is_file():
        raise InputDigestError(f"manifest {manifest_path} not found; pin the workload's inputs first")
    try:
        return read_manifest(path)
    except ManifestFormatError as exc:
        raise InputDigestError(f"manifest {manifest_path} {exc}; restore it (git checkout) or re-pin the workload "
                               "(python -m trainer.inputs pin ...)") from None


def resolve(path: str | Path) -> Path:
    """Resolve a repo-relative path (as written in configs and manifests) to an absolute one."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def verify_inputs(manifest_path: str | Path, required: list[str | Path] | None = None) -> dict[str, str]:
    """Check every pinned file's size and SHA256; return ``{relative path: sha256}``.

    ``required``: paths the workload will read (files or directories); each must be covered by
    the manifest, so an unpinned input cannot slip in.
    """
    try:
        pins = load_manifest(manifest_path)
    except InputDigestError as exc:
        if required and not resolve(manifest_path).is_file():  # the exact command that writes it
            raise InputDigestError(f"manifest {manifest_path} not found; pin the workload's inputs first: "
                                   f"{pin_command(manifest_path, required)}") from exc
        raise
    for pin in pins:
        p = resolve(pin.path)
        if not p.is_file():
            raise InputDigestError(f"pinned input {pin.path} is missing; restore it or rebuild the workload assets")
        size = p.stat().st_size
        if size != pin.size:
            raise InputDigestError(
                f"pinned input {pin.path} has {size} bytes, manifest {manifest_path} says {pin.size}; "
                "restore the file (git checkout) or re-pin it deliberately"
            )
        digest = sha256_file(p)
        if digest != pin.sha256:
            raise InputDigestError(
                f"pinned input {pin.path} has SHA256 {digest[:12]}..., manifest {manifest_path} says "
                f"{pin.sha256[:12]}...; restore the file (git checkout) or re-pin it deliberately"
            )
    pinned = {pin.path for pin in pins}
    for req in required or []:
        req = str(req).rstrip("/")
        path = resolve(req)
        # A directory input (a model) is read file by file by from_pretrained: every file in it
        # must be pinned, or an unpinned chat template or code file would be loaded unchecked.
        files = [req] if not path.is_dir() else sorted(
            f"{req}/{f.relative_to(path).as_posix()}" for f in path.rglob("*") if f.is_file())
        unpinned = [f for f in files if f not in pinned]
        if unpinned:
            raise InputDigestError(
                f"input {unpinned[0]} is not pinned in {manifest_path}"
                f"{f' (and {len(unpinned) - 1} more)' if len(unpinned) > 1 else ''}; "
                f"pin it with `{pin_command(manifest_path, required)}`"
            )
    return {pin.path: pin.sha256 for pin in pins}


def pinned_rows(manifest_path: str | Path, split_path: str | Path) -> int | None:
    """The rows the manifest states for a Parquet or JSON Lines split (None: not stated; read the split)."""
    wanted = Path(split_path).as_posix().rstrip("/")
    return next((pin.rows for pin in load_manifest(manifest_path) if pin.path == wanted), None)


def pin_command(manifest_path: str | Path, inputs: list[str | Path]) -> str:
    """The exact command that (re-)pins ``inputs`` into ``manifest_path`` (``manifests/<workload>.json``)."""
    return " ".join([".venv/bin/python -m trainer.inputs pin", Path(manifest_path).stem,
                     *(str(i).rstrip("/") for i in inputs)])


def pin(workload: str, inputs: list[str], manifest_dir: Path = MANIFESTS_DIR) -> Path:
    """Write ``manifests/<workload>.json`` pinning every file of ``inputs`` (files or directories,
    given relative to the repository root: place or symlink real inputs under ``models/``, ``data/``)."""
    entries = []
    for item in inputs:
        rel = Path(item)
        if rel.is_absolute():
            raise InputDigestError(
                f"{item}: pin inputs by their path inside the repository (symlink them under models/ or data/), "
                "so the manifest carries no machine path"
            )
        path = resolve(rel)
        if not path.exists():
            raise InputDigestError(f"{item} does not exist")
        files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
        for f in files:
            name = (rel / f.relative_to(path)).as_posix() if path.is_dir() else rel.as_posix()
            entry = {"path": name, "size": f.stat().st_size, "sha256": sha256_file(f)}
            if f.suffix in (PARQUET_SUFFIX, JSONL_SUFFIX):
                with contextlib.suppress(SplitError):  # pinned as bytes; check_task says what is wrong with it
                    entry["rows"] = count_rows(f)
            entries.append(entry)
    manifest = Path(manifest_dir) / f"{workload}.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"workload": workload, "files": sorted(entries, key=lambda e: e["path"])},
                                   indent=2) + "\n")
    return manifest


class TaskError(TrainerError, ValueError):
    """A workload's task that cannot run (one line: the file or setting, and the fix)."""


PREVIEW_ROWS = 2  # the dry run shows the rendered prompts of this many first rows of the train split


def check_task(workload) -> dict:
    """The plan-time check of a workload's task (module docstring); ``TaskError`` naming the problem. Returns
    ``{"test_rows": n, "prompts": [the first train rows' rendered prompts], "prompt_sha256", "reward"}``."""
    from facts.reward import RewardError, reward
    from facts.splits import split_rows
    from facts.task import TemplateError
    from trainer.data import workload_task
    from trainer.prompts import PromptError, PromptRenderer, check_prompt

    try:
        task = workload_task(workload)
        scorer = reward(task.reward)
        rows, prompts, renderer = {}, {}, None
        for setting in ("train_path", "test_path"):
            path = resolve(workload[setting])
            try:
                rows[setting] = split_rows(path, task.fields, scorer.normalize)
            except SplitError as exc:  # named as the workload names it, not by this machine's path
                raise SplitError(str(exc).replace(str(path), str(workload[setting]))) from None
            fields = list(dict.fromkeys(name for r in rows[setting] for name in r.row))  # any row's
            check_prompt(task, workload.model_path, fields, workload[setting])
            if renderer is None:
                from trainer.prompts import load_tokenizer

                renderer = PromptRenderer(task, load_tokenizer(resolve(workload.model_path)) if task.chat else None)
            # every row, as the trainer renders them when it starts: the split's file and the row that cannot be
            prompts[setting] = renderer.render_rows(rows[setting], workload[setting])
    except (SplitError, PromptError, TemplateError, RewardError) as exc:
        raise TaskError(str(exc)) from None
    return {"test_rows": len(rows["test_path"]), "prompts": prompts["train_path"][:PREVIEW_ROWS],
            "prompt_sha256": task.prompt_sha256, "reward": task.reward}


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m trainer.inputs", description="Pin or verify workload inputs.")
    sub = ap.add_subparsers(dest="command", required=True)
    p_pin = sub.add_parser("pin", help="write manifests/<workload>.json for the given files and directories")
    p_pin.add_argument("workload")
    p_pin.add_argument("inputs", nargs="+")
    p_verify = sub.add_parser("verify", help="check every pinned file of a manifest")
    p_verify.add_argument("manifest")
    args = ap.parse_args(argv)
    try:
        if args.command == "pin":
            print(f"wrote {pin(args.workload, args.inputs)}")
        else:
            print(f"{len(verify_inputs(args.manifest))} pinned file(s) verified")
    except InputDigestError as exc:
        print(f"proofgrid inputs: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
