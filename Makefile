# django_outbox — `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.DEFAULT_GOAL := help

help: ## Show this help.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# The demo needs the product alone (and the benchmarks' webhook receiver); the suite, lint and the benchmarks need the dev extra,
# the benchmarks (bench/) and their peers, installed once (DEV marks it done).
DEV := $(VENV)/.dev-installed

$(PY):
	@python=$$(scripts/find-python.sh) && echo "Using $$python" && $$python -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@# The demo's webhook receiver lives with the benchmarks; their own dependencies (plots,
	@# peers) come with the dev install.
	$(PY) -m pip install --quiet --no-deps -e ./bench

$(DEV): $(PY)
	$(PY) -m pip install --quiet -e ".[dev]" -e "./bench[peers]"
	@$(PY) -m pip install --quiet "mysqlclient>=2.2" || echo "mysqlclient did not build: the MariaDB tests will be skipped (Debian: apt install default-libmysqlclient-dev pkg-config)"
	@touch $(DEV)

install: $(DEV) ## Create .venv (Python >= 3.12): the project with its dev extra, and the benchmarks (bench/) with their peers.

# The LTS row: Django 5.2 on Python 3.11, django.tasks from the django-tasks backport.
VENV_LTS ?= .venv-lts
PY_LTS := $(VENV_LTS)/bin/python

$(PY_LTS):
	@python=$$(scripts/find-python.sh 3.11) && echo "Using $$python" && $$python -m venv $(VENV_LTS)
	$(PY_LTS) -m pip install --quiet --upgrade pip
	$(PY_LTS) -m pip install --quiet -e ".[dev]" -e "./bench[peers]" "django>=5.2,<5.3"
	@$(PY_LTS) -m pip install --quiet "mysqlclient>=2.2" || echo "mysqlclient did not build: the MariaDB tests will be skipped (Debian: apt install default-libmysqlclient-dev pkg-config)"

install-lts: $(PY_LTS) ## Create .venv-lts: Python 3.11, Django 5.2 LTS and the django-tasks backport.

demo: $(PY) ## Run the demo on SQLite: enqueue jobs, run the worker, serve the admin (ARGS=--no-serve to stop after the summary).
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py demo $(ARGS)

test: $(DEV) ## Run the whole suite on SQLite, then PostgreSQL and MariaDB when reachable (ARGS for pytest).
	VENV_PYTHON=$(PY) scripts/test.sh $(ARGS)

test-lts: $(PY_LTS) ## The whole suite on Django 5.2 with the backport, Python 3.11 (SQLite, PostgreSQL, MariaDB).
	VENV_PYTHON=$(PY_LTS) scripts/test.sh $(ARGS)

screenshots: $(DEV) ## Retake the admin screenshots in docs/img/ (headless Chromium).
	OUTBOX_SCREENSHOTS=docs/img $(PY) -m pytest -q tests/test_admin_browser.py
	OUTBOX_SCREENSHOTS=docs/img $(PY) -m pytest -q tests/test_queues.py -k browser
	OUTBOX_SCREENSHOTS=docs/img $(PY) -m pytest -q tests/test_portal_browser.py

lint: $(DEV) ## ruff, mypy (with django-stubs) and the import-linter contracts of docs/architecture.md.
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

chaos: $(DEV) ## Jobs and webhooks under faults (kills, cut connections, a database restart, Redis down); DATABASE_URL (postgres:// or mysql://), ARGS=--quick.
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} $(PY) scripts/chaos.py $(ARGS)

soak: $(DEV) ## 30 minutes of jobs and webhooks with a fault every 30 s; reports worker memory (not in CI).
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} $(PY) scripts/chaos.py --soak 30 $(ARGS)

bench: $(DEV) ## The drain benchmark (bench/, installed by make install) on the configured database (DATABASE_URL for PostgreSQL).
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py outbox_bench drain $(ARGS)

clean: ## Remove the venv and the demo's SQLite files.
	rm -rf $(VENV) $(VENV_LTS) db.sqlite3* test-outbox*.sqlite3*

.PHONY: help install install-lts test-lts demo test lint bench clean screenshots chaos soak
