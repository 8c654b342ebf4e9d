# Each target makes its own virtualenv (.venv) first; all that a fresh machine needs is Python 3.11+ and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo dev test test-fast lint format bench clean scan-tools lock schema

venv: $(VENV)/.installed

# The LlamaParse adapter is a distribution of its own (plugins/hookbridge-llamaparse), installed beside
# hookbridge as the image installs it (its one dependency, hookbridge, is the checkout itself).
LLAMAPARSE := plugins/hookbridge-llamaparse

$(VENV)/.installed: pyproject.toml $(LLAMAPARSE)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps -e $(LLAMAPARSE)
	touch $@

demo: venv        ## the main job end to end on embedded defaults
	$(BIN)/hookbridge demo

dev: venv         ## everything on one machine until Ctrl-C
	$(BIN)/hookbridge dev

test: venv        ## every test: unit, integration (real Redis, simulator, worker), chart, chaos (small)
	$(BIN)/pytest

test-fast: venv   ## without the slow chaos and ledger tests
	$(BIN)/pytest -m "not slow"

LINTED := service hookbridge plugins tests bench tools

lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy  # the packages of pyproject.toml's [tool.mypy]: service, hookbridge and the plugin's

format: venv
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

bench: venv       ## every benchmark; writes docs/performance.md and its plots
	$(BIN)/python -m bench.run

scan-tools:       ## checkov in a venv of its own (.scan/): tests/chart/test_policy_scan.py runs it
	test -x .scan/bin/checkov || ($(PYTHON) -m venv .scan && .scan/bin/pip install --quiet 'checkov==3.3.30')

LOCK := --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --custom-compile-command 'make lock'

lock: venv        ## requirements.lock and requirements-build.lock (hashed, for the image) from pyproject.toml
	$(BIN)/pip install --quiet 'uv>=0.5'
	$(BIN)/uv pip compile pyproject.toml $(LOCK) -o requirements.lock
	echo 'setuptools>=77' | $(BIN)/uv pip compile - $(LOCK) -o requirements-build.lock

schema: venv      ## helm/hookbridge/values.schema.json's config section from service/config/settings.py
	$(BIN)/python helm/generate_schema.py

clean:
	rm -rf $(VENV) .scan .pytest_cache .mypy_cache .ruff_cache
