# proofgrid: two commands do all set-up on a fresh machine.
#   make run   - create .venv, install, run the main sweep on the embedded default
#   make test  - create .venv, install (TRL and the tracking exports too: the `trl` and `export` targets), lint, run
#                the whole suite on TEST_WORKERS pytest-xdist workers:
#                the Slurm tests share one worker (one cluster), so their waits on the scheduler overlap
#                the CPU-bound tests on the others; tests/conftest.py says which tests must share a worker
#   make test-fast - lint, then the fast tier: unit, numerics, evidence on synthetic sweeps in process (no
#                    trainer, launcher or evidence command-line processes, no Slurm; tests/conftest.py says what
#                    counts as slow), on FAST_WORKERS pytest-xdist workers
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build of torch. A GPU user installs the CUDA build first (see README) and sets TORCH_SPEC=.
TORCH_SPEC ?= torch==2.13.0
PIP_FLAGS ?= --disable-pip-version-check -q
STAMP  := $(VENV)/.installed
TRL_STAMP := $(VENV)/.trl-installed
EXPORT_STAMP := $(VENV)/.export-installed
NPROC  := $(shell nproc 2>/dev/null || echo 2)
FAST_WORKERS ?= $(NPROC)
# One worker per core for the CPU-bound tests, plus the Slurm tests' worker, which mostly waits (at most 8:
# each worker collects the suite and builds its own module-scoped runs).
TEST_WORKERS ?= $(shell n=$$(( $(NPROC) + 1 )); [ $$n -gt 8 ] && n=8; echo $$n)

.PHONY: venv trl export run test test-fast lint bench device-wheels clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install $(PIP_FLAGS) "$(TORCH_SPEC)"; fi
	$(PY) -m pip install $(PIP_FLAGS) -e ".[train,dev]"
	touch $(STAMP)

# TRL (the pinned `trl` extra: trainer=trl and its tests); torch stays the installed build, pinned to its
# exact version so that pip never swaps the CPU (or a user's CUDA) build for another.
trl: $(TRL_STAMP)

$(TRL_STAMP): $(STAMP)
	$(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-pin.txt
	$(PY) -m pip install $(PIP_FLAGS) -c $(VENV)/torch-pin.txt -e ".[trl]"
	touch $(TRL_STAMP)

# The tracking exports (the pinned `export` extra: W&B and MLflow, `python -m evidence export`), torch held
# at the installed build as for TRL.
export: $(EXPORT_STAMP)

$(EXPORT_STAMP): $(STAMP)
	$(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-pin.txt
	$(PY) -m pip install $(PIP_FLAGS) -c $(VENV)/torch-pin.txt -e ".[export]"
	touch $(EXPORT_STAMP)

lint: venv
	$(VENV)/bin/ruff check .

# The suite keeps its bytecode and pytest's rewritten asserts in __pycache__ (ignored by git) even where the
# environment sets PYTHONDONTWRITEBYTECODE: compiling the ~100 test modules afresh cost each worker ~4 s a run.
test test-fast: export PYTHONDONTWRITEBYTECODE :=

test: venv trl export lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

test-fast: venv lint
	$(PY) -m pytest -q -m "not slow" -n $(FAST_WORKERS) --dist loadgroup

run: venv
	$(PY) launch.py -m algo=grpo,rpp,rppb seed=42,1234,2026

# The benchmarks, TRL's side by side included (the `trl` target installs it).
bench: venv trl
	$(PY) -m benchmarks

# Fill wheels/device/ (git-ignored) with the pure-Python wheels scripts/device_check.sh installs on a
# GPU machine without network; run it where the network is, then send the folder with the tree.
device-wheels: venv
	$(PY) -m benchmarks.device_wheels fill wheels/device

clean:
	rm -rf $(VENV) outputs multirun
