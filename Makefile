# pglab — the two set-up commands are `make run` and `make test`; both start from nothing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch first, pinned exactly: on this machine torch==2.13.0 resolves to a local CPU build,
# while any looser requirement would download several GB of CUDA wheels.
TORCH_PIN := torch==2.13.0
export MPLBACKEND := Agg
export MPLCONFIGDIR := $(CURDIR)/.venv/mplconfig

.PHONY: install run test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_PIN)
	$(PY) -m pip install --quiet -e ".[all]"
	mkdir -p $(MPLCONFIGDIR)
	touch $(STAMP)

# The flagship: Monte Carlo policy gradient on the GHM cash model, on the CPU. Each run gets
# its own directory (pglab never overwrites a run); `make run RUN_DIR=...` chooses it.
RUN_DIR ?= runs/ghm-mc-$(shell date +%Y%m%d-%H%M%S)
run: install
	$(VENV)/bin/pglab train ghm --algo mc --device cpu --log_dir $(RUN_DIR)

test: install
	$(PY) -m pytest -q

bench: install
	set -e; for script in bench/*.py; do echo "== $$script"; $(PY) $$script; done

clean:
	rm -rf $(VENV) runs .pytest_cache
