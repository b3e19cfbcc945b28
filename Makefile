# proofgrid: two commands do all set-up on a fresh machine.
#   make run   - create .venv, install, run the main sweep on the embedded default
#   make test  - create .venv, install, lint, run the whole suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build of torch. A GPU user installs the CUDA build first (see README) and sets TORCH_SPEC=.
TORCH_SPEC ?= torch==2.13.0
PIP_FLAGS ?= --disable-pip-version-check -q
STAMP  := $(VENV)/.installed

.PHONY: venv run test lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install $(PIP_FLAGS) "$(TORCH_SPEC)"; fi
	$(PY) -m pip install $(PIP_FLAGS) -e ".[dev]"
	touch $(STAMP)

lint: venv
	$(VENV)/bin/ruff check .

test: venv lint
	$(PY) -m pytest -q

run: venv
	$(PY) launch.py -m algo=grpo,rpp,rppb seed=42,1234,2026

bench: venv
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) outputs multirun
