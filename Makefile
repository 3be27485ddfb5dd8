# quiver_spark — run `make help` for the targets.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(VENV))/bin/python
export PYSPARK_DRIVER_PYTHON := $(abspath $(VENV))/bin/python

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-engine test-spark lint format bench bench-soak soak wheel clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# The editable install is a .pth entry for the checkout (pyproject.toml's package-dir
# says why), so format("quiver") works from any directory.
$(STAMP): pyproject.toml Makefile
	@echo "Setting up $(VENV): quiver_spark with PySpark 4, pyarrow and the test tools."
	@echo "The first time takes a few minutes (PySpark alone is a download of several hundred MB); later runs skip this step."
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	@touch $(STAMP)

venv: $(STAMP) ## create or update the virtualenv (.venv, or VENV=DIR) with every dependency

demo: $(STAMP) ## run a real streaming pipeline into and out of Quiver and print what happened
	@echo "Starting Spark and the demo pipeline (about a minute)..."
	$(PY) examples/demo.py

# Three workers (pytest-xdist), each taking whole groups: every test of the one SparkSession
# and each other file (tests/conftest.py). README's Development section says why three.
test: $(STAMP) ## run the test suite (engine, Spark, integration) on 3 workers; fails when no test ran
	$(PY) -m pytest tests integration -m "not soak" -q -n 3 --no-loadscope-reorder --durations=30

test-engine: $(STAMP) ## run only the engine tests (no JVM)
	$(PY) -m pytest tests -m "not spark and not soak" -q

lint: $(STAMP) ## ruff (lint + format check) and mypy
	$(VENV)/bin/ruff check quiver_spark pyspark_quiver tests integration bench examples
	$(VENV)/bin/ruff format --check quiver_spark pyspark_quiver
	$(VENV)/bin/mypy quiver_spark

format: $(STAMP) ## apply ruff's formatter and import sorting
	$(VENV)/bin/ruff format quiver_spark pyspark_quiver tests integration bench examples
	$(VENV)/bin/ruff check --fix -q quiver_spark pyspark_quiver tests integration bench examples

# README's tables are rendered from the JSON files, also when a benchmark failed (its
# JSON is then the earlier run's); make still fails then.
bench: $(STAMP) ## run the benchmarks (wal segment recovery acklog sink source trigger object_requests startup idle_partition catch_up one_protocol) into bench/results (JSON + RESULTS.md), then README's tables
	$(PY) bench/run_all.py; status=$$?; $(PY) bench/tables.py --write && exit $$status

bench-soak: $(STAMP) ## P11, not in CI: 10 min quiver vs 10 min Parquet file pipeline; table + PNG plots in bench/results, then README's tables
	$(PY) -c 'import matplotlib' 2>/dev/null || $(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run_all.py soak; status=$$?; $(PY) bench/tables.py --write && exit $$status

soak: $(STAMP) ## long fault-injection runs: thousands of kills, long property runs, cluster soak
	QUIVER_SOAK=1 $(PY) -m pytest tests integration -m soak -q

wheel: $(STAMP) ## build the wheel into dist/
	rm -rf dist build
	$(PY) -m pip wheel --no-deps -w dist . -q
	@ls dist/*.whl

clean: ## remove build outputs (keeps .venv)
	rm -rf dist build *.egg-info .pytest_cache .mypy_cache .ruff_cache
