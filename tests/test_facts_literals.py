"""Facts are stated once: the file names of a sweep, a job, a run and a bundle, the directories they
nest in, and the job-state vocabulary are spelled in facts/ only. Every other module names them through
a facts constant, so a renamed file or a new state is one edit, and a module that spells one by hand
(and drifts) fails here with its line."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("launcher", "trainer", "evidence", "hydra_plugins", "benchmarks", "proofgrid", "launch.py")

# Independent of facts/ on purpose: the test states what must not be spelled by hand.
FILE_NAMES = {"sweep.json", "spec.json", "job.json", "command.json", "command.public.json", "trainer.log",
              "runtime.log", "ray-start.log", "run.json", "metrics.jsonl", "eval.json", "model.safetensors",
              "trainer_state.json", "resume.txt", "commands.txt", "bundle.tar.gz", "evidence.json", "index.csv",
              "incidents.csv", "steps.csv", "eval.csv", "ro-crate-metadata.json", "data_ledger.jsonl"}
# Directory names of the layout, flagged where they are joined into a path (``x / "runs"``): alone they are
# ordinary words ("runs" is also a count in a budget).
LAYOUT_DIRS = {"jobs", "run", "attempts", "checkpoints", "latest", "initial_eval", "bundle", "runs", "tensorboard",
               "data", "tables", "figures", "eval"}
# Flagged as a parent in a path too ("runs/<job>/"); "run" is not: /run/user is a machine path, not ours.
PARENT_DIRS = LAYOUT_DIRS - {"run", "data", "eval"}
STATES = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED", "RESIZING", "COMPLETED",
          "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
          "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "VANISHED", "FAILED", "TERMINATED", "QUEUED", "DONE"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _export_lists(tree: ast.AST) -> set[int]:
    """Strings of ``__all__``: names of the module's attributes, not facts."""
    return {id(c) for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) for c in ast.walk(node.value)}


def _path_joined(tree: ast.AST) -> set[int]:
    return {id(side) for node in ast.walk(tree) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
            for side in (node.left, node.right) if isinstance(side, ast.Constant)}


def hand_spelled_facts(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in ``source`` that spells a fact: a layout file name (alone
    or as a component of a path), ``data/runs``, a layout directory joined into a path, or a job state."""
    tree = ast.parse(source)
    skip, joined = _docstrings(tree) | _export_lists(tree), _path_joined(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skip:
            continue
        text = node.value
        parts = text.split("/")
        if (FILE_NAMES & set(parts) or "data/runs" in text or text in STATES
                or (id(node) in joined and text in LAYOUT_DIRS) or (len(parts) > 1 and PARENT_DIRS & set(parts[:-1]))):
            found.append((node.lineno, text))
    return found


def _modules():
    for entry in SCANNED:
        path = REPO / entry
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def test_no_module_outside_facts_spells_a_fact():
    found = [f"{path.relative_to(REPO)}:{line}: {text!r}"
             for path in _modules() for line, text in hand_spelled_facts(path.read_text(encoding="utf-8"))]
    assert found == [], "facts spelled outside facts/ (use or add the facts constant): " + "; ".join(found)


def test_the_scan_sees_each_kind_of_hand_spelled_fact():
    source = '''
"""A docstring may say job.json and data/runs/<job>."""
RECORD = "job.json"
rel = f"data/runs/{job}/eval.json"
ckpt = run_dir / "checkpoints" / name
if state == "COMPLETED":
    pass
budget = {"runs": 3}
message = "the run.json of a job"
'''
    assert sorted(hand_spelled_facts(source)) == [(3, "job.json"), (4, "/eval.json"), (4, "data/runs/"),
                                                  (5, "checkpoints"), (6, "COMPLETED")]


def test_facts_states_each_scanned_spelling():
    """The scan's vocabulary is what facts/ states (so the test and the facts cannot drift apart)."""
    import facts.files
    import facts.states

    stated = {v for m in (facts.files, facts.states) for v in vars(m).values() if isinstance(v, str)}
    assert FILE_NAMES | (STATES - {"QUEUED", "DONE"}) <= stated
    assert stated >= LAYOUT_DIRS


def _climbs_from_this_file(node: ast.AST) -> bool:
    """``Path(__file__)...parent.parent`` or ``...parents[n]``: a module working out the repository root."""
    text = ast.unparse(node)
    return "__file__" in text and (".parent.parent" in text or ".parents[" in text)


def _root_climbs(source: str) -> set[int]:
    return {node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.Attribute, ast.Subscript)) and _climbs_from_this_file(node)}


def test_the_root_scan_sees_a_climb():
    source = 'ROOT = Path(__file__).resolve().parent.parent\nX = Path(__file__).parents[1]\nY = Path(__file__).parent / "toy"\n'
    assert _root_climbs(source) == {1, 2}


def test_only_facts_works_out_the_repository_root():
    found = sorted({f"{path.relative_to(REPO)}:{line}" for path in _modules() for line in _root_climbs(path.read_text())})
    assert found == [], "the repository root worked out outside facts/repo.py (use facts.repo): " + "; ".join(found)
