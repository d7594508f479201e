# Two commands do all the set-up: `make demo` and `make test`. Both create the virtualenv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo ui test lint venv clean dist docs

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

## Run every example DAG of the demo (Vertex AI, TPU, Batch, Compute Engine, calendar mode, GKE
## ProvisioningRequest and Kueue) with `dag.test()` (what `airflow dags test` runs), one after another in
## one process (scripts/run_dags.py), against a local dws-emulator, then print each request the emulator
## saw (state history, wait and run times) and each DAG run's final state.
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
## (work-stealing: tests/conftest.py starts each on its share of the slow tests; four on two cores,
## since most of the slow tests wait on real Airflow processes); and beside it, at the lowest CPU
## priority (nice 19), the oldest supported combination (Python 3.10, Airflow 3.1, the lowest allowed
## dependencies) in two lines: its unit and emulator rings (test-oldest-ring) then `make dist` (the
## packages built and checked) in one, its example DAGs (test-oldest-demo) in the other (the longer
## line: after the demo, dist was the last minute of the run). The main ring
## keeps both cores busy but for a quarter of the time, when its Airflow processes wait; the niced
## lines take only that, so the time limits of the fault-matrix rows and Airflow runs are not eaten
## into. The example DAGs mostly wait on their poll intervals, so they run beside the oldest ring
## rather than after it (after it, they were the last minutes of the run, on a half-idle machine).
## Their output is printed after the main ring's; any of them failing fails the target.
## `make docs`'s strict build runs in the main ring (tests/unit/test_docs.py), not again here.
PYTEST_WORKERS ?= 4
## While lint runs on one core (mypy), the other compiles the bytecode of the packages every test
## process imports (Airflow, the Kubernetes and Google clients the provider and the emulator load,
## the repository's own) into PYTEST_ENV's cache, once, for both interpreters: in a fresh clone the
## rings' first processes otherwise compiled them together, each its own copy. A module compiled
## here is what an import would have written; in a warm checkout this only reads timestamps.
WARM_PACKAGES := airflow kubernetes kubernetes_asyncio google/api_core google/auth google/protobuf \
	$(addprefix google/cloud/,compute_v1 aiplatform_v1 aiplatform_v1beta1 batch_v1 tpu_v2)
WARM_BYTECODE = site=$$($(1) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	$(PYTEST_ENV) $(1) -m compileall -qq $(addprefix $$site/,$(WARM_PACKAGES)) airflow_provider_dws \
	dws-emulator/dws_emulator tests > /dev/null 2>&1 || true
OLDEST_LOG := $(VENV)/test-oldest.log
DEMO_LOG := $(VENV)/test-oldest-demo.log
## The oldest ring's virtualenv is made (or brought up to date) first, before either ring starts: its
## editable install writes the stray egg-info into the repository root (STRAY_EGG_INFO) until it is
## removed, and an Airflow process of the main ring started in that window finds the `dws` plugin twice.
test: venv
	@$(MAKE) --no-print-directory venv-3.1
	@for py in $(BIN)/python .venv-3.1/bin/python; do { $(call WARM_BYTECODE,$$py); } & done; \
	$(MAKE) --no-print-directory lint; lint=$$?; wait; exit $$lint
	@{ nice -n 19 $(MAKE) --no-print-directory test-oldest-ring && nice -n 19 $(MAKE) --no-print-directory dist; } > $(OLDEST_LOG) 2>&1 & ring=$$!; \
	nice -n 19 $(MAKE) --no-print-directory test-oldest-demo > $(DEMO_LOG) 2>&1 & demo=$$!; \
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal; main=$$?; \
	wait $$ring; ring=$$?; wait $$demo; demo=$$?; \
	echo "== The oldest supported combination's rings, then make dist (beside the main ring, nice 19):"; cat $(OLDEST_LOG); \
	echo "== Its example DAGs (beside the main ring, nice 19):"; cat $(DEMO_LOG); \
	exit $$(( main != 0 ? main : ring != 0 ? ring : demo ))

## The inner loop: no lint, no test marked slow (real Airflow processes, or over about 5 s: the
## `slow` hook in tests/conftest.py); the unit and emulator rings and the emulator's own tests. Under 2 minutes on two cores, on
## four workers: many emulator tests wait out poll rounds rather than use a core.
FAST_WORKERS ?= 4
.PHONY: test-fast
test-fast: venv
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider -n $(FAST_WORKERS) -m 'not slow' tests/unit tests/emulator dws-emulator/tests

## One virtualenv per supported Airflow minor version, `.venv-3.X`, installed from constraints/airflow-3.X.txt
## (resolved as of that release's date: see the file's header and the README's compatibility table), on
## the Python the file was resolved for. The interpreter: pythonX.Y on PATH if it runs (a pyenv shim there
## may not), else the newest X.Y among pyenv's versions. 3.1 is the oldest supported combination: Python
## 3.10 and the lowest versions every dependency allows.
AIRFLOW_MINORS := 3.1 3.2 3.3
PYTHON_FOR_3.1 := 3.10
PYTHON_FOR_3.2 := 3.11
PYTHON_FOR_3.3 := 3.11
FIND_PYTHON = for py in "$$(command -v python$(1))" $$(ls -d "$$(pyenv root 2>/dev/null || echo "$$HOME/.pyenv")"/versions/$(1).*/bin/python$(1) 2>/dev/null | sort -rV); do \
	  [ -n "$$py" ] && "$$py" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "$(1)".split("."))))' 2>/dev/null && { echo "$$py"; break; }; \
	done; true

.PHONY: $(addprefix venv-,$(AIRFLOW_MINORS)) test-oldest test-matrix
$(addprefix venv-,$(AIRFLOW_MINORS)): venv-%: venv
	@want=$(PYTHON_FOR_$*); py="$$($(call FIND_PYTHON,$(PYTHON_FOR_$*)))"; stamp=.venv-$*/.installed; \
	if [ -z "$$py" ]; then echo "Python $$want: no interpreter found (python$$want on PATH, pyenv versions)"; exit 1; fi; \
	if [ ! -f $$stamp ] || [ pyproject.toml -nt $$stamp ] || [ dws-emulator/pyproject.toml -nt $$stamp ] || [ constraints/airflow-$*.txt -nt $$stamp ]; then \
	  echo "Airflow $* on Python $$want: $$py -> .venv-$*"; \
	  $(BIN)/uv venv -q --allow-existing --python "$$py" .venv-$* && \
	  VIRTUAL_ENV=.venv-$* $(BIN)/uv pip install -q -e ./dws-emulator -e '.[test]' -c constraints/airflow-$*.txt $(EDITABLE_COMPAT) \
	  && rm -rf $(STRAY_EGG_INFO) && touch $$stamp || exit 1; \
	fi

## The oldest supported combination, beside the main ring in `make test`: the unit and emulator rings
## (test-oldest-ring) and every example DAG (test-oldest-demo: scripts/demo.py, as `make demo` runs
## them) on Python 3.10, Airflow 3.1 and the lowest allowed dependencies. Not the emulator's own tests
## (dws-emulator/tests, which import no Airflow and were a fifth of this ring's CPU on Python 3.10): the
## main ring runs them, and here the emulator serves the emulator ring and the example DAGs on the
## lowest grpcio, protobuf and client versions.
OLDEST_WORKERS ?= 2
.PHONY: test-oldest-ring test-oldest-demo
test-oldest: test-oldest-ring test-oldest-demo
test-oldest-ring: venv-3.1
	@.venv-3.1/bin/python -c 'import airflow, sys; print(f"Airflow {airflow.__version__} on Python {sys.version.split()[0]}")'
	$(PYTEST_ENV) .venv-3.1/bin/python -m pytest -q -p no:cacheprovider -n $(OLDEST_WORKERS) -m 'not slow' tests/unit tests/emulator
test-oldest-demo: venv-3.1
	$(PYTEST_ENV) .venv-3.1/bin/python scripts/demo.py

## Every supported Airflow minor version (AIRFLOW_MINORS), one after the other: the unit ring, every example
## DAG, and the fault matrix's kill rows (a deferred task marked failed or cleared cancels its request, on
## every surface) and its reattach row (a worker killed after submit: the retry adopts the request) on
## LocalExecutor. MATRIX="3.1 3.3" for some of them.
MATRIX ?= $(AIRFLOW_MINORS)
KILL_ROWS := user_marks_failed,user_clears_task,batch_user_marks_failed,compute_user_marks_failed,gke_user_marks_failed,kueue_user_marks_failed,tpu_user_marks_failed,worker_sigkill_after_submit
test-matrix: $(addprefix venv-,$(MATRIX))
	@set -e; for v in $(MATRIX); do \
	  echo "== Airflow $$v: $$(.venv-$$v/bin/python -c 'import airflow, sys; print(airflow.__version__, "on Python", sys.version.split()[0])')"; \
	  $(PYTEST_ENV) .venv-$$v/bin/python -m pytest -q -p no:cacheprovider -n $(FAST_WORKERS) tests/unit; \
	  $(PYTEST_ENV) .venv-$$v/bin/python scripts/demo.py > .venv-$$v/demo.log 2>&1 || { tail -40 .venv-$$v/demo.log; exit 1; }; \
	  tail -3 .venv-$$v/demo.log; \
	  $(PYTEST_ENV) .venv-$$v/bin/python -m tests.faults --executor local --only $(KILL_ROWS); \
	done

clean:
	rm -rf $(VENV) $(addprefix .venv-,$(AIRFLOW_MINORS)) .airflow .pytest_cache .mypy_cache .ruff_cache site

## The documentation site in site/ (mkdocs.yml): the front page from README.md, the guide from docs/,
## the API reference from the docstrings. --strict: a broken internal link or anchor, a missing
## include or a docstring griffe cannot read fails the build (tests/unit/test_docs.py runs the same).
## No -q: MkDocs counts only the warnings it prints, so -q would let --strict pass them.
docs: venv
	$(BIN)/mkdocs build --strict -d site

## The whole fault matrix: real Airflow processes (PostgreSQL; LocalExecutor, then CeleryExecutor with
## the local Redis as broker) against dws-emulator, one row per scenario; non-zero exit on any FAIL.
## `make test` runs its CI-sized subset (LocalExecutor).
.PHONY: faults
faults: venv
	$(BIN)/python -m tests.faults

## The packages a platform team receives: the provider's and the emulator's wheel and sdist in dist/,
## checked with `twine check --strict` and by scripts/check_dist.py (LICENSE in each; the wheels installed
## in a new virtualenv with an Airflow release's constraints, never constraints.txt; the provider found by
## `airflow providers get`; the Vertex AI example run against the wheel's emulator).
DIST ?= dist
## Built from a copy of the checkout's files (tracked, and new ones git does not ignore): setuptools writes
## each project's egg-info into the directory it builds an sdist in, and in the checkout an Airflow process
## of `make test`'s main ring, running beside this, would find the `dws` plugin twice (STRAY_EGG_INFO).
dist: venv
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@src=$$(mktemp -d) && trap 'rm -rf "$$src"' EXIT && \
	git ls-files -z --cached --others --exclude-standard | \
	  while IFS= read -r -d '' f; do [ -f "$$f" ] && printf '%s\0' "$$f"; done | xargs -0 cp --parents -t "$$src" && \
	echo "uv build of the provider and of dws-emulator (a copy of the checkout in $$src)" && \
	$(BIN)/uv build -q --no-build-logs --out-dir $(abspath $(DIST)) "$$src" && \
	$(BIN)/uv build -q --no-build-logs --out-dir $(abspath $(DIST)) "$$src/dws-emulator"
	$(BIN)/twine check --strict $(DIST)/*
	$(BIN)/python scripts/check_dist.py $(DIST)

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

## GKE waits: the shared poller's watch against polling alone, for 1, 100 and 1,000 waiting
## ProvisioningRequests (time from the grant to each trigger's event, API requests per minute while
## waiting; docs/scale.md); non-zero exit if a target is missed. BENCH_WATCH_ARGS="--sizes 1,100" for less.
.PHONY: bench-watch
bench-watch: venv
	$(BIN)/python benchmarks/gke_watch.py $(BENCH_WATCH_ARGS)

## CPU per DAG-file parse in the dag-processor's model (forked child of a parent that imported only
## airflow.*), with and without compiled bytecode; every DWS row at most 1.5x the BashOperator DAG.
## BENCH_PARSE_ARGS="--repeat 3" for a shorter run.
.PHONY: bench-parse
bench-parse: venv
	$(BIN)/python benchmarks/parse_cost.py $(BENCH_PARSE_ARGS)
