"""Shared fixtures and the test tiers.

The Slurm fixtures use real throwaway clusters: ``slurm_cluster`` the single-node one of
scripts/slurm/cluster.sh (the one CI's .ci/run started, or one it starts and stops itself),
``slurm_multinode_cluster`` the multi-node one of scripts/slurm/multinode.sh (which .ci/run starts too;
a test without one fails and says how to start it).

Tiers: ``make test-fast`` runs ``-m "not slow"`` (unit, numerics, evidence on synthetic sweeps in
process: no trainer, launcher or evidence command-line processes, no Slurm); ``make test`` runs everything.
A test is ``slow`` when it says so, or, found here so that a new test cannot slip into the fast tier by
forgetting the marker, when it uses a real-service fixture (``SLOW_FIXTURES``), spawns a torch.distributed
process group (the ``distributed`` mark) or runs the trainer, the launcher or ``python -m evidence`` (through
the helpers of tests/trainer_runs.py, tests/sweeps.py and tests/launch_in_process.py, or a command list it
spells out), itself or through a fixture or helper function of its module or of a conftest.py above it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "scripts" / "slurm" / "cluster.sh"
MULTINODE_SH = REPO / "scripts" / "slurm" / "multinode.sh"
TESTS = Path(__file__).resolve().parent
# The real-service fixtures, each with the pytest-xdist group its tests share (see _xdist_group).
CLUSTER_GROUPS = {"slurm_cluster": "slurm", "slurm_multinode_cluster": "slurm-mn"}
SLOW_FIXTURES = frozenset(CLUSTER_GROUPS)
# Helpers that run the trainer, the launcher or the evidence's command line (tests/trainer_runs.py, tests/sweeps.py,
# tests/launch_in_process.py, tests/evidence_cli.py): as processes, or in this process (seconds of training, of Hydra
# composing every arm of a plan, 1-4 s a dry run, or a whole build or audit a call: the fast tier's budget is 60 s).
PROCESS_HELPERS = frozenset({"run_trainer", "trainer_cmd", "train_in_process", "launch", "launch_in_process",
                             "evidence_process", "evidence_in_process",
                             "proofgrid"})  # tests/test_console.py's: the console command, a process
# `python -m <these>` trains (trainer.external runs another trainer's command; the TRL adapter is one), or
# starts the evidence's command line (a second of imports, then a whole bundle's build or audit: each forgery a
# test reseals and audits through it costs 2-4 s; the fast tier calls the same functions in process)
PROCESS_MODULES = frozenset({"trainer", "launcher.runtime", "benchmarks", "trainer.external", "trainer.adapters.trl_grpo",
                             "evidence", "proofgrid"})
# A fast-tier test slower than this is named at the end of the run: it belongs in the slow tier.
FAST_TIER_BUDGET_S = 5.0

# Ray must never write ~/.ray/auth_token in tests (Ray 2.60 does unless auth is disabled).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# One OpenMP thread per process, set before any test module imports torch (or numpy's BLAS): the suite runs one
# pytest-xdist worker per core, and a worker's in-process torch (the float64 references, the lean decoder, LoRA)
# defaulted to a thread per core, so two workers ran four spinning OpenMP threads on two cores, and other sessions'
# load made it worse (test_policy_logprobs, test_lean_decoding, test_lora, test_mismatch_correction at load 12-15:
# 40-48 CPU s with the default, 12 with one thread). Trainer processes set their own threads (workload.num_threads);
# the processes the tests start inherit the variable, a value already set wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The throwaway clusters' tiny jobs are watched at close range: a waiting launcher looks 2 s after
# submitting and then at most 4 s apart (conf/cluster/slurm.yaml's cluster.poll_interval_s; a site's 60).
os.environ.setdefault("PROOFGRID_SLURM_POLL_INTERVAL_S", "4")
# The suite's launches seal without figures (conf/config.yaml's figures, a few CPU seconds a seal and again in its
# audit): the tests of figures draw them (figures=true, build_bundle(figures=True)), and the main 3 x 3 sweep too.
os.environ.setdefault("PROOFGRID_FIGURES", "false")


def _cluster_env(state_dir: Path) -> dict[str, str]:
    """Variables exported by the cluster's env.sh."""
    env = {}
    for line in (state_dir / "env.sh").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running single-node Slurm cluster with accounting; yields its environment variables."""
    state_dir = Path(os.environ.get("PROOFGRID_SLURM_DIR", "/tmp/proofgrid-slurm"))
    started_here = False
    up = (state_dir / "env.sh").is_file() and subprocess.run(
        ["bash", str(CLUSTER_SH), "status", str(state_dir)], capture_output=True).returncode == 0
    if not up:
        for step in ("install", "start"):
            proc = subprocess.run(["bash", str(CLUSTER_SH), step, str(state_dir)] if step == "start"
                                  else ["bash", str(CLUSTER_SH), step], capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.fail(f"could not {step} the throwaway Slurm cluster:\n{proc.stderr[-2000:]}")
        started_here = True
    env = _cluster_env(state_dir)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    if started_here:
        subprocess.run(["bash", str(CLUSTER_SH), "stop", str(state_dir)], capture_output=True)


@pytest.fixture(scope="session")
def slurm_multinode_cluster() -> dict[str, str]:
    """A running multi-node Slurm cluster (one network namespace per node, each with its own address,
    hostname and slurmd); returns the variables of its env.sh: ``SLURM_CONF``,
    ``PROOFGRID_MULTINODE_PARTITION``, ``PROOFGRID_MULTINODE_NODES`` and ``PROOFGRID_MULTINODE_ADDRS``
    (node names and their addresses, comma-separated, in the same order), ``PROOFGRID_MULTINODE_DIR``.

    Not started here: it needs network namespaces, and .ci/run starts it. Unlike ``slurm_cluster`` it
    leaves os.environ alone (both may serve one worker, each with its own SLURM_CONF): give the
    variables to the commands, ``env={**os.environ, **slurm_multinode_cluster}``."""
    state_dir = Path(os.environ.get("PROOFGRID_MULTINODE_DIR", "/tmp/proofgrid-multinode"))
    start = f"sudo bash scripts/slurm/multinode.sh start {state_dir}"
    if not (state_dir / "env.sh").is_file():
        pytest.fail(f"no multi-node Slurm cluster at {state_dir} (PROOFGRID_MULTINODE_DIR): start one with `{start}`",
                    pytrace=False)
    status = subprocess.run(["bash", str(MULTINODE_SH), "status", str(state_dir)], capture_output=True, text=True)
    if status.returncode != 0:
        pytest.fail(f"the multi-node Slurm cluster at {state_dir} is not up:\n{status.stdout}{status.stderr[-2000:]}"
                    f"start it again with `{start}`", pytrace=False)
    return _cluster_env(state_dir)


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _spells_out_a_process(node: ast.List | ast.Tuple) -> bool:
    """A command list written out in the test: ``[..., "-m", "trainer", ...]`` or ``[..., "launch.py", ...]``."""
    words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return "launch.py" in words or any(a == "-m" and b in PROCESS_MODULES for a, b in zip(words, words[1:]))


class _FileFacts(ast.NodeVisitor):
    """One pass over a test file: the names each function calls and whether it spells out a process
    (a nested function's count for the functions around it too), and the module-scoped fixtures."""

    def __init__(self):
        self.calls: dict[str, set[str]] = {}
        self.spells_out: set[str] = set()
        self.module_fixtures: set[str] = set()
        self._stack: list[str] = []

    def visit_FunctionDef(self, node):
        self.calls.setdefault(node.name, set())
        if any(isinstance(deco, ast.Call) and any(k.arg == "scope" and getattr(k.value, "value", None) == "module"
                                                  for k in deco.keywords) for deco in node.decorator_list):
            self.module_fixtures.add(node.name)
        self._stack.append(node.name)
        self.generic_visit(node)
        self._stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        name = _call_name(node)
        if name is not None:
            for fn in self._stack:
                self.calls[fn].add(name)
        self.generic_visit(node)

    def visit_List(self, node):
        if self._stack and _spells_out_a_process(node):
            self.spells_out.update(self._stack)
        self.generic_visit(node)

    visit_Tuple = visit_List


# Each file's facts, kept in pytest's cache by the file's SHA256 and this file's own (parsing every test
# file took ~4 s of each worker's collection): {"starters": [...], "module_fixtures": [...]}.
_CACHE_KEY = "proofgrid/tiers/" + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
_DISK_CACHE: dict[str, dict] = {}  # loaded from and saved to config.cache, when pytest has one


@functools.cache
def _file_facts(path: Path) -> dict[str, list[str]]:
    """``starters``: names of the functions in ``path`` that start a trainer or launcher process,
    directly or by calling another such function of the same file; ``module_fixtures``: its
    module-scoped fixtures."""
    text = path.read_bytes()
    digest = hashlib.sha256(text).hexdigest()
    cached = _DISK_CACHE.get(str(path))
    if cached is not None and cached.get("sha256") == digest:
        return cached
    facts = _FileFacts()
    facts.visit(ast.parse(text, filename=str(path)))
    starters = {fn for fn, called in facts.calls.items() if called & PROCESS_HELPERS} | facts.spells_out
    while True:
        more = {fn for fn, called in facts.calls.items() if called & starters} - starters
        if not more:
            break
        starters |= more
    _DISK_CACHE[str(path)] = result = {"sha256": digest, "starters": sorted(starters),
                                       "module_fixtures": sorted(facts.module_fixtures)}
    return result


def _starts_processes(item: pytest.Item) -> bool:
    """Whether the test, or a fixture or helper it reaches in its file or a conftest.py above it,
    starts the trainer or the launcher."""
    path = Path(item.path).resolve()
    names = {getattr(item, "originalname", item.name), *item.fixturenames}
    files = [path, *(d / "conftest.py" for d in path.parents if d == TESTS or TESTS in d.parents)]
    return any(names & set(_file_facts(f)["starters"]) for f in files if f.is_file())


_GROUP = pytest.StashKey[str]()  # a test's xdist group, as _xdist_group gave it
_SPLIT = pytest.StashKey[bool]()  # the scheduler would not keep it with its group


def _xdist_group(item: pytest.Item) -> str | None:
    """Which tests must share one pytest-xdist worker (``make test`` runs ``--dist loadgroup``): every
    test of one throwaway Slurm cluster (the single-node one's session fixture starts and stops it;
    each cluster has a node that some of its tests take down), and the tests of a module that has a
    module-scoped run (made once per worker that needs it). Every other test is scheduled on its own.
    The two clusters' groups run side by side; a test of both would belong to two groups."""
    clusters = {CLUSTER_GROUPS[name] for name in CLUSTER_GROUPS if name in item.fixturenames}
    if len(clusters) > 1:
        raise pytest.UsageError(f"{item.nodeid} uses both throwaway Slurm clusters (groups {sorted(clusters)}): "
                                "a test uses one, so that its cluster's node-failure tests never run beside it")
    if clusters:
        return clusters.pop()
    path = Path(item.path).resolve()
    return path.stem if set(_file_facts(path)["module_fixtures"]) & set(item.fixturenames) else None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    if cache is not None:
        _DISK_CACHE.update(cache.get(_CACHE_KEY, {}))
    for item in items:
        if item.get_closest_marker("slow") is None and (
                SLOW_FIXTURES & set(item.fixturenames) or _starts_processes(item)
                or item.get_closest_marker("distributed") is not None):  # it spawns a process group
            item.add_marker(pytest.mark.slow)
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            item.stash[_GROUP] = group
    if cache is not None:
        cache.set(_CACHE_KEY, _DISK_CACHE)


def pytest_configure(config):
    """A parallel run of this suite must schedule by the groups above."""
    if config.getoption("numprocesses", None) and config.getoption("dist", "no") not in ("no", "loadgroup"):
        raise pytest.UsageError("this suite runs on pytest-xdist workers only with --dist loadgroup (make test and "
                                "make test-fast pass it): its Slurm tests and module-scoped runs must share a worker")


def pytest_collection_finish(session):
    """On a worker of a parallel run, each group above must be the scheduler's: the ``@<group>`` suffix
    pytest-xdist gives a test id under --dist loadgroup. A second group mark, or pytest 9.2 (which drops
    the suffix, pytest-xdist#1386), would split them silently, and two workers would start and stop
    the one Slurm cluster: such tests fail at set-up instead (a worker's own error would be lost)."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None and workerinput.get("workercount", 1) > 1:
        for item in session.items:
            if _GROUP in item.stash and not item.nodeid.endswith(f"@{item.stash[_GROUP]}"):
                item.stash[_SPLIT] = True


@pytest.hookimpl(tryfirst=True)  # before any fixture (the Slurm cluster's) is set up
def pytest_runtest_setup(item):
    if item.stash.get(_SPLIT, False):
        pytest.fail(f"a group of tests that must share one pytest-xdist worker was split ({item.stash[_GROUP]!r}): "
                    "run it with pyproject.toml's pytest (< 9.2, pytest-xdist#1386) and one xdist_group mark per test",
                    pytrace=False)


_DURATIONS: dict[str, float] = {}  # test id -> seconds, for the fast tier's summary


def pytest_runtest_logreport(report):
    """Set-up, call and tear-down time per test (a module fixture's cost lands on its first test)."""
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """In the fast tier, name the tests that took longer than the budget: not a failure (the machine
    may be shared), a reminder that they belong in the slow tier."""
    if "not slow" not in (config.getoption("markexpr") or ""):
        return
    over = sorted(((d, n) for n, d in _DURATIONS.items() if d > FAST_TIER_BUDGET_S), reverse=True)
    if over:
        terminalreporter.section("fast tier: tests over budget")
        for duration, nodeid in over:
            terminalreporter.write_line(f"{duration:.1f} s  {nodeid}  (> {FAST_TIER_BUDGET_S:.0f} s: mark it slow?)")
