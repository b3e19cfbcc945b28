"""The launcher's layering: planning, job state and the back ends are separate modules behind one
small protocol; no back end imports the planner; the Hydra plugins use Hydra's public API only."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import tempfile

import pytest

from tests.sweeps import REPO


def _imported_after(statement: str) -> set[str]:
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return set(json.loads(proc.stdout))


@pytest.mark.parametrize("backend", ["launcher.local", "launcher.slurm"])
def test_a_back_end_imports_neither_the_planner_nor_the_job_state(backend):
    imported = _imported_after(f"import {backend}")
    assert not imported & {"launcher.sweep_runner", "launcher.planning", "launcher.jobs", "launcher.grid", "launcher.entry_points"}


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_both_back_ends_implement_the_protocol(backend):
    from launcher.backend import Backend
    from launcher.backend import backend as get

    module = get(backend)
    for name, member in inspect.getmembers(Backend, inspect.isfunction):
        if name.startswith("_"):
            continue
        wanted = list(inspect.signature(member).parameters)[1:]  # without self
        assert list(inspect.signature(getattr(module, name)).parameters) == wanted, (backend, name)


def test_an_unknown_back_end_is_refused():
    from launcher.backend import backend
    from launcher.errors import PreflightError

    with pytest.raises(PreflightError, match="setting cluster.kind='pbs' is refused: it must be one of local, slurm"):
        backend("pbs")


def test_the_hydra_plugins_subclass_only_hydras_public_plugin_classes():
    from hydra_plugins.proofgrid_launcher import proofgrid_launcher as plugins

    for cls in (plugins.ProofgridSweeper, plugins.ProofgridLauncher):
        assert all(not base.__module__.startswith("hydra._internal") for base in cls.__mro__), cls
    source = inspect.getsource(plugins)
    assert "_internal" not in source.replace("hydra._internal", "")
    assert "hydra._internal" not in source.split('"""', 2)[2]


def test_planning_imports_no_scheduler_client_ray_plotting_or_tensor_library():
    imported = _imported_after("import launcher.planning, launcher.grid, launcher.sweep_runner")
    heavy = {"torch", "ray", "matplotlib", "transformers", "submitit", "rich", "bagit"} - _evidence_package()
    assert not imported & heavy


def test_a_dry_run_never_imports_the_tensor_library():
    """The whole dry run as typed (compose, validate every job, check inputs, print) stays torch-free."""
    code = "\n".join([
        "import atexit, json, runpy, sys",
        "sys.argv = ['launch.py', '-m', 'algo=grpo,rpp,score_centering', 'seed=1,2', 'workload.engine=torch',",
        "            'dry_run=true', 'hydra.sweep.dir=' + sys.argv[1]]",
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))",
        "runpy.run_path('launch.py', run_name='__main__')",
    ])
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-c", code, f"{tmp}/sweep"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert "launcher.planning" in imported and "trainer.algorithms.algo_config" in imported
    assert not imported & {"torch", "transformers", "trainer.algorithms.registry", "trainer.rollout"}
    # A local sweep's dry run asks its own back end what it would submit: no other back end, no job runtime.
    assert "launcher.local" in imported and not imported & {"launcher.slurm", "launcher.runtime", "submitit"}


def _evidence_package() -> set[str]:
    """``launcher.job_records`` uses ``evidence.seal.sanitize``, whose package imports the bundle writer (bagit)."""
    return _imported_after("import evidence.seal.sanitize") & {"bagit", "rich"}


def _launcher_imports() -> dict[str, set[str]]:
    """Module -> the ``launcher`` modules it imports, at its top or inside a function alike."""
    modules = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
               for p in (REPO / "launcher").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            if isinstance(node, ast.ImportFrom) and node.module in modules:  # from launcher.slurm import script
                targets += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def test_the_launchers_modules_import_each_other_without_a_circle():
    graph = _launcher_imports()
    assert {"launcher.slurm", "launcher.runtime", "launcher.errors"} <= set(graph)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import circle: " + " -> ".join((*path[path.index(module):], module))
        if module not in done:
            for imported in sorted(graph[module]):
                visit(imported, (*path, module))
            done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert not graph["launcher.errors"], "the errors every layer raises import nothing of the launcher"


def test_each_back_end_is_a_package_and_none_of_its_modules_sits_at_the_launchers_root():
    from launcher.backend import BACKENDS

    launcher_dir = REPO / "launcher"
    for module in BACKENDS.values():
        assert (REPO / module.replace(".", "/") / "__init__.py").is_file(), module
    at_root = {p.stem for p in launcher_dir.glob("*.py")}
    assert not {m for m in at_root for name in BACKENDS if m == name or m.startswith(f"{name}_")}, at_root
