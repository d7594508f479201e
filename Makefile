# Two commands do all the set-up: `make demo` and `make test`. Both create the virtualenv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv
	VIRTUAL_ENV=$(VENV) $(BIN)/uv pip install -q -e '.[test]' -c constraints.txt
	@touch $@

## Run the example DAG against a local dws-emulator and print the job's result.
demo: venv
	$(BIN)/python scripts/demo.py

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## Quality gates, then every test ring (unit, emulator, Airflow end to end), on PYTEST_WORKERS processes.
PYTEST_WORKERS ?= 2
test: lint
	$(BIN)/pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS)

clean:
	rm -rf $(VENV) .airflow .pytest_cache .mypy_cache .ruff_cache

## The whole fault matrix: real Airflow processes (PostgreSQL; LocalExecutor, then CeleryExecutor with
## the local Redis as broker) against dws-emulator, one row per scenario; non-zero exit on any FAIL.
## `make test` runs its CI-sized subset (LocalExecutor).
.PHONY: faults
faults: venv
	$(BIN)/python -m tests.faults

## The triggerer scale numbers in a real Airflow deployment (PostgreSQL, as for `make faults`): one
## `airflow triggerer` with 500 deferred mapped Flex Start tasks. BENCH_AIRFLOW_ARGS="--tasks 20" for a quick run.
.PHONY: bench-airflow
bench-airflow: venv
	$(BIN)/python benchmarks/triggerer_airflow.py $(BENCH_AIRFLOW_ARGS)

## Triggerer scale: the provider's triggers against a CustomJobTrigger-style poller with 100, 1,000
## and 5,000 waiting requests (benchmarks/README.md); non-zero exit if a target is missed.
## BENCH_ARGS="--sizes 100,1000" for a shorter run.
.PHONY: bench
bench: venv
	$(BIN)/python benchmarks/triggerer_scale.py $(BENCH_ARGS)
