"""The rooms' one-way flow (docs/architecture.md), read from every module's imports, function-level ones included.

facts/ is the ground floor; study/ (the experiment spec) stands on it; evidence/ on both; trainer/ never imports
the launcher; the launcher imports the evidence only for what the architecture page lists. Inside evidence/,
each concern is a package on its own floor and no import runs back up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("facts", "study", "evidence", "trainer", "launcher")

# What each room may import of the others.
MAY_IMPORT = {
    "facts": set(),
    "study": {"facts"},
    "evidence": {"facts", "study"},
    "trainer": {"facts", "study", "evidence"},  # the evidence only as LAUNCHER_MAY_USE's trainer line says
    "launcher": {"facts", "study", "evidence", "trainer"},
}

# The evidence modules the launcher (and the trainer) may import, each with its reason (docs/architecture.md).
LAUNCHER_MAY_USE = {
    # to seal and audit a sweep, and print its summary from the sealed data
    "evidence": "build_bundle, audit_bundle and the error family", "evidence.problems": "the error family",
    "evidence.evaluation.rewards": "the reward the build re-scores with",
    "evidence.dataset": "a sealed bundle's data", "evidence.tables": "the summary's numbers and their display",
    # to choose an experiment's next stage from the stage it sealed, and register a sized design's looks
    "evidence.verdict.probe": "the probe's costs", "evidence.verdict.record": "the verdict's file",
    "evidence.verdict.selection": "the tuning stage's selection", "evidence.verdict.sizing": "a look's decision",
    "evidence.statistics.sequential": "a sized design's boundaries, registered before any seed runs",
    "evidence.statistics.descriptive": "the interval level registered with them",
    # to judge a job's records the evidence's way before re-running or resuming it
    "evidence.gates.index": "a job's acceptance (the rerun rules)", "evidence.gates.metrics_log": "a restart point",
    "evidence.gates.ranks": "the rendezvous placeholder", "evidence.seal.sanitize": "the public command record",
    # live tracking, the one reader of TensorBoard event files and the export's metric names
    "evidence.gates.tensorboard_log": "TensorBoard event files (also the trainer's external runs)",
    "evidence.tools.export": "the tracking stores' metric names",
}
TRAINER_MAY_USE = {"evidence.gates.tensorboard_log"}

# evidence/'s floors, bottom up: a module imports only its own floor's and lower ones.
EVIDENCE_FLOORS = (
    ("problems", "fileio", "statistics"),
    ("evaluation", "sweep"),
    ("gates",),
    ("dataset",),
    ("tables",),
    ("questions", "measures"),
    ("verdict",),
    ("computed",),
    ("report",),
    ("seal",),
    ("audit",),
    ("tools",),
    ("__main__", "__init__"),
)


def _modules():
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            yield room, path


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]  # `from evidence import tables`
    return found


def _project_modules() -> set[str]:
    names = set()
    for _, path in _modules():
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _floor(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    for floor, names in enumerate(EVIDENCE_FLOORS):
        if part in names:
            return floor
    raise AssertionError(f"{module}: evidence/{part} is on no floor of EVIDENCE_FLOORS; give it one")


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_only_the_rooms_below_it(room):
    known = _project_modules()
    wrong = []
    for owner, path in _modules():
        if owner != room:
            continue
        for name in _imports(path):
            target = name.split(".")[0]
            if target in ROOMS and target != room and target not in MAY_IMPORT[room]:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
            if room in ("launcher", "trainer") and target == "evidence" and name in known:
                allowed = LAUNCHER_MAY_USE if room == "launcher" else TRAINER_MAY_USE
                if name not in allowed:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}, which docs/architecture.md does not list")
    assert not wrong, "\n".join(wrong)


def test_inside_the_evidence_no_import_runs_back_up():
    known = _project_modules()
    wrong = []
    for room, path in _modules():
        if room != "evidence":
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        here = _floor(".".join(parts))
        for name in _imports(path):
            if name.startswith("evidence.") and name in known and _floor(name) > here:
                wrong.append(f"{path.relative_to(ROOT)} (floor {here}) imports {name} (floor {_floor(name)})")
    assert not wrong, "\n".join(wrong)


# What facts/ may import besides the standard library, and only inside the function that needs it.
FACTS_LAZY_IMPORTS = {"pyarrow", "datasets", "math_verify"}


def test_facts_imports_the_standard_library_and_loads_a_reader_only_where_it_reads():
    import sys

    wrong = []
    for room, path in _modules():
        if room != "facts":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                root = name.split(".")[0]
                if root in sys.stdlib_module_names or root == "facts" or root == "__future__":
                    continue
                if root not in FACTS_LAZY_IMPORTS or id(node) in top:
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}" + (" at import time" if id(node) in top else ""))
    assert not wrong, "\n".join(wrong)


def test_every_listed_use_is_a_module_that_exists():
    """A stale entry would let a renamed module's imports pass unlisted."""
    known = _project_modules()
    assert not [name for name in LAUNCHER_MAY_USE if name not in known]
    assert not [name for name in TRAINER_MAY_USE if name not in known]


def test_the_architecture_page_names_every_evidence_module_the_launcher_uses():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [name for name in LAUNCHER_MAY_USE if name != "evidence" and f"`{name}`" not in page]
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_no_circle_of_modules_even_through_an_import_inside_a_function():
    """An import placed inside a function to dodge a circle is still a circle: every module's imports, function-level
    ones included, form no cycle (a package's ``__init__`` re-exports are left out: ``from pkg import mod`` is an
    edge to ``pkg.mod``)."""
    modules = {name: path for name, path in ((".".join(p.relative_to(ROOT).with_suffix("").parts), p)
                                              for _, p in _modules()) if not name.endswith("__init__")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
        graph[name] = {t for t in targets if t in modules and t != name}
    circles, state = [], {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                circles.append(" -> ".join(path[path.index(target):] + [name, target]) if target in path
                               else f"{name} -> {target}")
            elif target not in state:
                visit(target, path + [name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not circles, "\n".join(circles)
