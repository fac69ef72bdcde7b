# The README's two commands. Nothing else needs make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 5000
FLASK := SECRET_KEY="$$(cat instance/secret_key)" SCHEDULER_DEMO_JOBS=1 SESSION_COOKIE_SECURE=0 $(BIN)/flask --app webapp

.PHONY: run test lint bench

$(VENV)/.runtime: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.dev: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(VENV)/.runtime $@

instance/secret_key:
	mkdir -p instance
	$(PYTHON) -c 'import secrets; print(secrets.token_hex(32))' > $@
	chmod 600 $@

run: $(VENV)/.runtime instance/secret_key
	$(FLASK) db upgrade
	$(FLASK) demo
	$(FLASK) serve --host $(HOST) --port $(PORT)

test: $(VENV)/.dev
	$(BIN)/python -m pytest

bench: $(VENV)/.dev
	$(BIN)/python -m bench.all

lint: $(VENV)/.dev
	$(BIN)/ruff check webapp tests
	$(BIN)/mypy
