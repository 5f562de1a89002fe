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

.PHONY: install run test lint lint-quick bench clean mutants docs wheel-check

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

# The quick lint gate (ruff, function length) first, then the suite in two processes
# (pytest-xdist). The type check is `make lint`'s (CI runs both).
# --dist loadfile keeps each test file in one process, so a module's fixtures run once;
# --no-loadscope-reorder keeps the file order of tests/conftest.py (longest first).
# A single file: `.venv/bin/pytest tests/X.py`.
test: install
	$(MAKE) --no-print-directory lint-quick
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# The lint and type gate: ruff's rules and format, no function in pglab/ longer than a screen
# (80 lines), and mypy. Configuration in pyproject.toml.
lint: lint-quick
	$(VENV)/bin/mypy

lint-quick: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/function_length.py pglab

bench: install
	set -e; for script in bench/*.py; do echo "== $$script"; $(PY) $$script; done

# Mutation testing (docs/mutation-testing.md) with mutmut: pglab/estimators, pglab/losses
# and the update functions of pglab/algos. Not part of `make test`: 13 minutes on the 2 cores
# (measured from a fresh clone). The mutated files and the test selection are in pyproject.toml's [tool.mutmut]; the
# functions whose mutants run are mutants_support.SELECTION (passed to `mutmut run` as
# patterns); MUTANTS_JOBS sets the workers. `.venv/bin/mutmut show NAME` shows a survivor.
MUTANTS_JOBS ?= 2
mutants: install
	rm -rf mutants
	$(PY) mutants_support.py --patterns | OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
		xargs -r -d '\n' $(VENV)/bin/mutmut run --max-children $(MUTANTS_JOBS)
	$(PY) mutants_support.py

# The documentation site (mkdocs.yml, the `docs` extra) into site/. --strict: any warning
# (a link to a missing page or anchor, a docstring mkdocstrings cannot read) fails it.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The release artefacts: the sdist and the wheel (python -m build) into dist/; the wheel
# installed with its core dependencies only into a fresh venv in a temporary folder (torch
# first, pinned as above: no CUDA wheels); then, from that folder, outside the repository,
# `pglab --version` (the installed metadata's version), a short PPO run on CartPole and the
# FD solver must exit 0. `make test` does not run it; .ci/run does, after `make test`.
WHEEL_CHECK_PPO := train ppo --env gym:CartPole-v1 --total-steps 4096 --eval-episodes 2 --device cpu --log-dir runs/ppo
wheel-check: install
	rm -rf dist
	$(PY) -m build --quiet --outdir dist .
	set -euo pipefail; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install --quiet $(TORCH_PIN); \
	"$$tmp/venv/bin/python" -m pip install --quiet dist/pglab-*.whl; \
	cd "$$tmp"; \
	export PGLAB_NO_PROGRESS=1 MPLCONFIGDIR="$$tmp/mplconfig"; \
	venv/bin/python -c "import importlib.metadata as m, pglab; \
	assert pglab.__file__.startswith('$$tmp/venv/'), pglab.__file__; \
	assert m.version('pglab') == pglab.__version__, (m.version('pglab'), pglab.__version__)"; \
	test "$$(venv/bin/pglab --version)" = "pglab $$(venv/bin/python -c 'import pglab; print(pglab.__version__)')"; \
	venv/bin/pglab $(WHEEL_CHECK_PPO); \
	venv/bin/pglab solve ghm; \
	echo "wheel-check: $$(cd $(CURDIR)/dist && ls) install and run outside the repository"

clean:
	rm -rf $(VENV) runs .pytest_cache mutants
