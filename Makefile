# The README's two commands, and the rest of the checkout's chores.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 5000
FLASK := $(BIN)/flask --app webapp

.PHONY: run test lint bench soak docs docs-serve

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

# The checkout's settings, read by every `flask --app webapp ...` typed here (git-ignored; 600:
# it holds the secret key). A key from before this file existed (instance/secret_key) is kept.
instance/config.py:
	mkdir -p instance
	umask 077 && { \
	  echo '# Written by make run for this checkout; see README, Configuration.'; \
	  echo "SECRET_KEY = '$$(cat instance/secret_key 2>/dev/null || \
	    $(PYTHON) -c 'import secrets; print(secrets.token_hex(32))')'"; \
	  echo 'SCHEDULER_DEMO_JOBS = True'; \
	  echo 'SESSION_COOKIE_SECURE = False  # make run serves plain HTTP on loopback'; \
	} > $@.tmp
	chmod 600 $@.tmp
	mv $@.tmp $@

# Every flask command, worker and test process imports the package (and pytest rewrites the
# tests): with PYTHONDONTWRITEBYTECODE set, as on some machines, each would compile it again, a
# second of CPU each. These targets write bytecode (__pycache__, git-ignored).
run test: export PYTHONDONTWRITEBYTECODE :=

run: $(VENV)/.runtime instance/config.py
	$(FLASK) db upgrade
	$(FLASK) demo
	$(FLASK) serve --host $(HOST) --port $(PORT)

# In 4 processes (pytest-xdist; each with its own PostgreSQL cluster, Redis and temp folders):
# many tests wait on worker processes or a browser, so 2 CPUs keep more than 2 busy. loadgroup:
# the tests of one xdist_group run on one process, one at a time: the two queues of real-worker
# tests (tests/worker_support.py, one_at_a_time and heavy_one_at_a_time) and two browser files.
TEST_PROCESSES ?= 4

test: $(VENV)/.dev
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadgroup --durations=30

bench: $(VENV)/.dev
	$(BIN)/python -m bench.all

# Minutes: 8 workers, 10,000 schedules, three fire times each (not part of make test or bench).
soak: $(VENV)/.dev
	$(BIN)/python -m bench.soak

lint: $(VENV)/.dev
	$(BIN)/ruff check webapp tests bench
	$(BIN)/ruff format --check webapp tests bench
	$(BIN)/mypy

# The documentation site (mkdocs.yml) into site/, strict: a broken link or anchor fails. Offline.
docs: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict
