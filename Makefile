# Two commands on a fresh machine: `make run` (set-up + default job) and `make test`.
# `make test` is the fast stage; `make test-e2e` the slow end-to-end tests (marker e2e).
VENV ?= .venv
PY := $(VENV)/bin/python
FLWR := $(VENV)/bin/flwr
NODES ?= 10
RUN_CONFIG ?=
# where torch comes from: the configured index (empty), or e.g. PyTorch's CPU index
# `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu`
TORCH_INDEX ?=
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION := 1

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, so the project's `torch>=` keeps it: on a stock PyPI index torch==2.13.0 for
	# Linux x86_64 is the CUDA build (GBs of nvidia-* packages); TORCH_INDEX names a CPU index
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e ".[dev,sites,xgboost]"
	touch $@

.PHONY: install run lint test test-e2e stop
install: $(VENV)/.installed

# The engine runs an installed copy of the app (no .git): pass the checkout's commit along.
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)

# preflight validates the run config in seconds, before any engine starts (exit 2 if invalid)
# `flwr run .` would walk every file of the checkout, .venv's too (seconds: benchmarks.fab_build),
# before it applies .gitignore: the job is submitted from a copy of the app files (the same FAB)
run: $(VENV)/.installed
	$(PY) -m server_app.preflight --nodes $(NODES) "$(RUN_CONFIG)"
	$(PY) -m deploy.app_files build/app
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(FLWR) run build/app --stream \
	  --federation-config "num-supernodes=$(NODES) client-resources-num-cpus=1" \
	  --run-config "$(RUN_CONFIG) git-commit='$(GIT_COMMIT)'"
	# `flwr run --stream` exits 0 whatever became of the run: exit with the run's own status
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m server_app.run_status

# imports point down (import-linter), ruff's rules and format (pyproject.toml [tool.ruff])
lint: $(VENV)/.installed
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# pytest-xdist: one worker per core (TEST_WORKERS=0 runs in this process); stage 1 keeps each
# test file on one worker (its module fixtures are set up once)
TEST_WORKERS ?= auto

test: lint
	$(PY) -m pytest -m "not e2e" -n $(TEST_WORKERS) --dist loadfile

# deployments, the simulation engine, live processes, long multi-round runs (see README): the
# in-process ones and the quick benchmarks on every core (no module fixtures: test by test),
# then those marked `serial` (live processes on timers) one at a time; each part ends with its
# slowest tests (CI's 30 minutes are mostly this stage)
test-e2e: $(VENV)/.installed
	$(PY) -m pytest -m "e2e and not serial" --durations=10 -n $(TEST_WORKERS) --dist load
	$(PY) -m pytest -m "e2e and serial" --durations=10

# `flwr run .` leaves its local SuperLink running in the background (flwr 1.41 and 1.42 have no stop
# command); this stops the one that belongs to $FLWR_HOME (default ~/.flwr), by PID.
stop:
	@pids=$$(pgrep -f "flower-superlink .*$${FLWR_HOME:-$$HOME/.flwr}/local-superlink/"); \
	if [ -n "$$pids" ]; then kill $$pids && echo "stopped SuperLink $$pids"; else echo "no local SuperLink running"; fi
