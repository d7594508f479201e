# Two commands do all the set-up: `make demo` and `make test`. Both create the virtualenv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo ui test lint venv clean

## Every `make venv` also removes a stray egg-info (see STRAY_EGG_INFO), so a checkout installed
## before this rule existed is fixed without a reinstall.
venv: $(VENV)/.installed
	@rm -rf $(STRAY_EGG_INFO)

## Editable installs as a plain .pth path entry, not setuptools' import-hook finder module, which every
## interpreter would import at startup.
EDITABLE_COMPAT := --config-settings editable_mode=compat
## That .pth puts the repository root on sys.path, and setuptools' build of the editable install
## writes its egg_info metadata there: importlib.metadata then finds the project twice (the egg-info
## and the installed .dist-info), and Airflow registers the `dws` plugin twice ("Plugin 'dws' already
## registered", a plugin import error on the home page). The .dist-info is the installed metadata;
## the egg-info is only the build's by-product, removed after every install (the emulator's too).
STRAY_EGG_INFO := airflow_provider_dws.egg-info dws-emulator/dws_emulator.egg-info

## The provider and the emulator, its own distribution in dws-emulator/ (which the provider's `test`
## extra names), in one resolution.
INSTALL := -e ./dws-emulator -e '.[test]' -c constraints.txt $(EDITABLE_COMPAT)

$(VENV)/.installed: pyproject.toml dws-emulator/pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv
	VIRTUAL_ENV=$(VENV) $(BIN)/uv pip install -q $(INSTALL)
	@rm -rf $(STRAY_EGG_INFO)
	@touch $@

## Run the example DAG against a local dws-emulator and print the job's result.
demo: venv
	$(BIN)/python scripts/demo.py

## A local Airflow (api-server, scheduler, dag-processor, triggerer; the local PostgreSQL server) against
## a dws-emulator, the example DAGs triggered; prints the URL of the DWS page. Ctrl-C stops it.
ui: venv
	$(BIN)/python scripts/ui.py $(UI_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## Tests write bytecode whatever the shell says (PYTHONDONTWRITEBYTECODE=1 made every interpreter a
## test starts compile Airflow from source: about 4 s of CPU each, hundreds of them), into a cache under
## the virtualenv so the checkout stays clean. benchmarks/parse_cost.py still measures from source.
PYTEST_ENV = env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache

## Quality gates, then every test ring (unit, emulator, Airflow end to end, and the emulator's own tests in
## dws-emulator/tests: pytest's testpaths hold both trees), on PYTEST_WORKERS processes
## (work-stealing: tests/conftest.py starts each on its share of the slow tests; three on two cores,
## since most of the slow tests wait on real Airflow processes); and beside it the unit tests again on
## Python 3.10, the oldest Python the provider supports, at the lowest CPU priority (nice 19): the main
## ring leaves about a quarter of two cores idle while its Airflow processes wait, and the 3.10 ring
## takes only that, so the time limits of the fault-matrix rows and Airflow runs are not eaten into.
## Its output is printed after the main ring's; either ring failing fails the target.
PYTEST_WORKERS ?= 3
PY310_LOG := $(VENV)/test-py310.log
## The 3.10 virtualenv is made (or brought up to date) first, before either ring starts: its editable
## install writes the stray egg-info into the repository root (STRAY_EGG_INFO) until it is removed,
## and an Airflow process of the main ring started in that window finds the `dws` plugin twice.
test: lint
	@$(MAKE) --no-print-directory py310-venv
	@nice -n 19 $(MAKE) --no-print-directory test-py310 > $(PY310_LOG) 2>&1 & py310=$$!; \
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal; main=$$?; \
	wait $$py310; low=$$?; echo "== Python 3.10 unit ring (beside the main ring, nice 19):"; cat $(PY310_LOG); \
	exit $$(( main != 0 ? main : low ))

## The inner loop: no lint, no test marked slow (real Airflow processes, or over about 5 s: the
## `slow` hook in tests/conftest.py); the unit and emulator rings and the emulator's own tests. Under 2 minutes on two cores, on
## four workers: many emulator tests wait out poll rounds rather than use a core.
FAST_WORKERS ?= 4
.PHONY: test-fast
test-fast: venv
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider -n $(FAST_WORKERS) -m 'not slow' tests/unit tests/emulator dws-emulator/tests

## Python 3.10 in a virtualenv of its own. The interpreter: python3.10 on PATH if it runs (a pyenv shim
## there may not), else the newest 3.10 among pyenv's versions. Without one, one line says so.
PY310_VENV ?= .venv310
PY310_WORKERS ?= 2
FIND_PY310 = for py in "$$(command -v python3.10)" $$(ls -d "$$(pyenv root 2>/dev/null || echo "$$HOME/.pyenv")"/versions/3.10*/bin/python3.10 2>/dev/null | sort -rV); do \
	  [ -n "$$py" ] && "$$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null && { echo "$$py"; break; }; \
	done; true

.PHONY: py310-venv test-py310
py310-venv: venv
	@py="$$($(FIND_PY310))"; \
	if [ -n "$$py" ] && { [ ! -f $(PY310_VENV)/.installed ] || [ pyproject.toml -nt $(PY310_VENV)/.installed ] || [ dws-emulator/pyproject.toml -nt $(PY310_VENV)/.installed ] || [ constraints.txt -nt $(PY310_VENV)/.installed ]; }; then \
	  echo "Python 3.10: $$py -> $(PY310_VENV)"; \
	  $(BIN)/uv venv -q --allow-existing --python "$$py" $(PY310_VENV) && \
	  VIRTUAL_ENV=$(PY310_VENV) $(BIN)/uv pip install -q $(INSTALL) && rm -rf $(STRAY_EGG_INFO) && touch $(PY310_VENV)/.installed || exit 1; \
	fi

test-py310: py310-venv
	@py="$$($(FIND_PY310))"; \
	if [ -z "$$py" ]; then echo "Python 3.10: no interpreter found (python3.10 on PATH, pyenv versions); unit tests not run on 3.10"; exit 0; fi; \
	$(PYTEST_ENV) $(PY310_VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(PY310_WORKERS) tests/unit

clean:
	rm -rf $(VENV) $(PY310_VENV) .airflow .pytest_cache .mypy_cache .ruff_cache

## The whole fault matrix: real Airflow processes (PostgreSQL; LocalExecutor, then CeleryExecutor with
## the local Redis as broker) against dws-emulator, one row per scenario; non-zero exit on any FAIL.
## `make test` runs its CI-sized subset (LocalExecutor).
.PHONY: faults
faults: venv
	$(BIN)/python -m tests.faults

## Airflow at scale in a real deployment (PostgreSQL, as for `make faults`; no preload, compiled bytecode):
## 500 mapped Flex Start tasks against 500 stock deferring tasks (deferral, resume, worker CPU per task; the
## triggerer while they wait and its burst of events), then one mapped DAG of 50 per operator family.
## BENCH_AIRFLOW_ARGS="--tasks 20 --family-tasks 5" for a quick run, "--families vertex,gke" to pick families.
BENCH_AIRFLOW_ARGS ?= --tasks 500 --family-tasks 50
.PHONY: bench-airflow
bench-airflow: venv
	$(BIN)/python benchmarks/triggerer_airflow.py $(BENCH_AIRFLOW_ARGS)

## Triggerer scale: the provider's triggers against a CustomJobTrigger-style poller with 100, 1,000
## and 5,000 waiting requests (benchmarks/README.md); non-zero exit if a target is missed.
## BENCH_ARGS="--sizes 100,1000" for a shorter run.
.PHONY: bench
bench: venv
	$(BIN)/python benchmarks/triggerer_scale.py $(BENCH_ARGS)

## CPU per DAG-file parse in the dag-processor's model (forked child of a parent that imported only
## airflow.*), with and without compiled bytecode; every DWS row at most 1.5x the BashOperator DAG.
## BENCH_PARSE_ARGS="--repeat 3" for a shorter run.
.PHONY: bench-parse
bench-parse: venv
	$(BIN)/python benchmarks/parse_cost.py $(BENCH_PARSE_ARGS)
