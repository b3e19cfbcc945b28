"""Facts are stated once: the file names of a sweep, a job, a run and a bundle, the directories they
nest in, the job-state vocabulary, the metric keys (metrics.jsonl's and TensorBoard's) and run.json's
statuses are spelled in facts/ only. Every other module names them through a facts constant, so a renamed
file, key or state is one edit, and a module that spells one by hand (and drifts) fails here with its line."""

from __future__ import annotations

import ast
import re

from facts.repo import REPO_ROOT

REPO = REPO_ROOT
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
# A metric key by its shape, so that a new key spelled by hand is caught too: <group>/<name> (metrics.jsonl's
# keys and the TensorBoard tags), and an evaluation's tag eval/<summary value> or its start ("eval/", "eval/pass@").
# "eval/train" (a phase in the live view) is not one.
METRIC_KEY = re.compile(r"(rollout|train|perf|mismatch|policy)/\w+")
EVAL_TAG = re.compile(r"eval/(pass@\d*|mean_reward|mean_length|truncation)?")
# run.json's statuses. Alone they are ordinary words (a chain decision "failed", an incident's action "stopped"), so
# they are flagged where they are a status: the value of a "status" entry, assigned to or compared with
# ``x["status"]``, ``x.get("status")`` or a name with "status" in it, a ``status=`` argument, or an argument of a
# record's ``write``.
RUN_STATUSES = {"running", "completed", "failed", "stopped"}


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


def _is_status(node: ast.AST) -> bool:
    """``x["status"]``, ``x.get("status")`` or a name (variable, attribute) with "status" in it."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "status"
    return "status" in (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else "")


def _callee(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""


def _status_places(tree: ast.AST) -> set[int]:
    """Expressions in the place of a run status (see RUN_STATUSES)."""
    places = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            places += [v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "status"]
        elif isinstance(node, ast.Assign) and any(_is_status(t) for t in node.targets):
            places.append(node.value)
        elif isinstance(node, ast.Compare) and any(_is_status(side) for side in (node.left, *node.comparators)):
            places += [node.left, *node.comparators]
        elif isinstance(node, ast.Call):
            places += [k.value for k in node.keywords if k.arg == "status"]
            if _callee(node).endswith("write") or _callee(node) == "write_session_end":
                places += node.args
    return {id(c) for place in places for c in ast.walk(place) if isinstance(c, ast.Constant)}


def hand_spelled_facts(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in ``source`` that spells a fact: a layout file name (alone
    or as a component of a path), ``data/runs``, a layout directory joined into a path, a job state, a
    metric key or an evaluation's tag, or a run status in a status's place."""
    tree = ast.parse(source)
    skip, joined, statuses = _docstrings(tree) | _export_lists(tree), _path_joined(tree), _status_places(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skip:
            continue
        text = node.value
        parts = text.split("/")
        if (FILE_NAMES & set(parts) or "data/runs" in text or text in STATES
                or (id(node) in joined and text in LAYOUT_DIRS) or (len(parts) > 1 and PARENT_DIRS & set(parts[:-1]))
                or METRIC_KEY.fullmatch(text) or EVAL_TAG.fullmatch(text) or (id(node) in statuses and text in RUN_STATUSES)):
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


def test_the_scan_sees_a_hand_spelled_metric_key_or_run_status():
    source = '''
"""A docstring may name rollout/raw_reward and a run that is "completed"."""
m.mean("rollout/raw_reward", total, n)
metrics["perf/new_key_s"] = 1.0
logged = {"eval/mean_reward", *(f"eval/pass@{j}" for j in ks)}
phase, chain = "eval/train", ("decided", "done", "failed", "cancelled")
message = "the train/loss of a run"
record = {"status": "running", "steps": 0}
record["status"] = "stopped"
if run.get("status") != "completed" or status in ("failed",):
    pass
run.record.write("running", step)
event = {"action": "stopped"}
'''
    assert sorted(hand_spelled_facts(source)) == [
        (3, "rollout/raw_reward"), (4, "perf/new_key_s"), (5, "eval/mean_reward"), (5, "eval/pass@"),
        (8, "running"), (9, "stopped"), (10, "completed"), (10, "failed"), (12, "running")]


def test_facts_states_each_scanned_spelling():
    """The scan's vocabulary is what facts/ states (so the test and the facts cannot drift apart), and every
    metric key and tag facts/ states has a shape the scan sees."""
    import facts.files
    import facts.metrics
    import facts.states

    stated = {v for m in (facts.files, facts.states) for v in vars(m).values() if isinstance(v, str)}
    assert FILE_NAMES | (STATES - {"QUEUED", "DONE"}) | RUN_STATUSES <= stated
    assert stated >= LAYOUT_DIRS
    keys = [v for name, v in vars(facts.metrics).items() if name.isupper() and isinstance(v, str) and "/" in v]
    tags = [facts.metrics.eval_tag(k) for k in facts.metrics.EVAL_TAG_KEYS]
    assert len(keys) >= len(facts.metrics.CONTRACT_KEYS)
    assert [k for k in keys + tags if not (METRIC_KEY.fullmatch(k) or EVAL_TAG.fullmatch(k))] == []


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
