# The two first commands of the README: `make demo` and `make test`.
# Both create the virtual environment and install the project on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The persistent local Dagster instance (SQLite), shared by `make demo` and `make ui`.
export DAGSTER_HOME := $(CURDIR)/dagster_home

.PHONY: demo test ui install clean-lake

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/evalpipeline run

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -n auto --dist worksteal --durations=15

ui: $(STAMP)
	mkdir -p $(DAGSTER_HOME)
	$(BIN)/dagster dev -h 127.0.0.1 -w workspace.yaml

clean-lake:
	rm -rf data/lake
	git clean -fdXq dagster_home

# A Dask scheduler (tcp://127.0.0.1:8786) and 2 workers on loopback; runs use it when
# EVALPIPELINE_EXECUTOR=dask EVALPIPELINE_DASK_SCHEDULER=tcp://127.0.0.1:8786 (README, Production set-up).
.PHONY: dask-cluster
dask-cluster: $(STAMP)
	$(BIN)/python scripts/dask_cluster.py --workers $(or $(DASK_WORKERS),2)
