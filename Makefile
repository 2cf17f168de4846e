# Two commands on a fresh machine:  make demo  |  make test
# Both create the virtualenv if missing and install banditflow into it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

DEMO_ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test test-external test-external-tls test-kafka lint system-deps bench fault soak \
	clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# --no-compile: byte-compiling every dependency at install time doubles the install time;
# Python compiles what it imports on first use instead.
PIP := $(BIN)/python -m pip install --quiet --no-compile

# What a worker imports, byte-compiled once: a restarted worker is ready in about a second
# instead of three to five (the install skips compiling, and an environment with
# PYTHONDONTWRITEBYTECODE never writes the cache at run time).
WORKER_IMPORTS := aiokafka kafka pydantic pydantic_core numpy scipy prometheus_client \
	numba llvmlite matplotlib
COMPILE = site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	$(BIN)/python -m compileall -q -j 0 banditflow learners processors streams schemas offline \
	$$(for name in $(WORKER_IMPORTS); do echo "$$site/$$name"; done) >/dev/null

# The demo needs only the runtime dependencies; the tests add the dev tools.
$(RUNTIME): pyproject.toml | $(BIN)/python
	$(PIP) -e .
	@$(COMPILE)
	@touch $(RUNTIME)

$(DEV): pyproject.toml | $(BIN)/python
	$(PIP) -e '.[dev]'
	@$(COMPILE)
	@touch $(DEV) $(RUNTIME)

# kcat (a real third-party Kafka client), Prometheus/promtool and stunnel (the TLS terminator
# of the TLS tests, tests/integration/test_kafka_tls.py), used by integration tests.
system-deps:
	@if ! command -v kcat >/dev/null || ! command -v promtool >/dev/null \
	    || ! command -v stunnel4 >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat prometheus stunnel4 >/dev/null; \
	  else \
	    echo "integration tests need kcat, prometheus and stunnel4 (Debian: apt-get install kcat prometheus stunnel4)"; \
	  fi; \
	fi

demo: $(RUNTIME)
	$(BIN)/banditflow demo $(DEMO_ARGS)

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/banditflow schemas

test: $(DEV) system-deps lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The integration tests on a broker they did not start (issue 25): BANDITFLOW_TEST_BOOTSTRAP
# (and BANDITFLOW_KAFKA_CONFIG or BANDITFLOW_KAFKA_* for its client configuration, which the
# tests' clients and the processes they start all use) names it; without it, an embedded
# broker started apart here stands in for one. Topics, app ids and groups carry a tag of the
# run, so runs sharing a broker do not meet; each test deletes what it created; tests that
# need the embedded broker itself are skipped. EXTERNAL_TESTS narrows the run (tests/fault
# runs so too).
EXTERNAL_TESTS ?= tests/integration
test-external: $(DEV) system-deps
	@if [ -n "$$BANDITFLOW_TEST_BOOTSTRAP" ]; then \
	  $(BIN)/python -m pytest $(EXTERNAL_TESTS) $(PYTEST_ARGS); \
	else \
	  port=$$($(BIN)/python -c 'from banditflow.streams.broker import free_port; print(free_port())'); \
	  $(BIN)/banditflow broker --port $$port >/dev/null & broker=$$!; \
	  trap "kill $$broker" EXIT; \
	  BANDITFLOW_TEST_BOOTSTRAP=127.0.0.1:$$port $(BIN)/python -m pytest $(EXTERNAL_TESTS) $(PYTEST_ARGS); \
	fi

# The same over mutual TLS: an embedded broker behind stunnel, with certificates made for the
# run and a client properties file naming them (tests/integration/tls_front.py), then
# make test-external with BANDITFLOW_TEST_BOOTSTRAP and BANDITFLOW_KAFKA_CONFIG set to them.
test-external-tls: $(DEV) system-deps
	$(BIN)/python tests/integration/tls_front.py $(MAKE) --no-print-directory test-external

# The same on Apache Kafka, started with testcontainers where a Docker engine answers; here
# without one it says so and skips (tests/kafka_container.py).
test-kafka: $(DEV) system-deps
	$(BIN)/python tests/kafka_container.py $(EXTERNAL_TESTS) $(PYTEST_ARGS)

# The fault suite at full size (issue 12): 10^5 hostile records through a real worker, and
# more hypothesis examples; `make test` runs it at 20,000 (FAULT_CORPUS_SIZE, FAULT_SEED,
# FAULT_SKIP: see tests/fault/test_corpus.py). Numbers: runs/fault/corpus.json. Then the
# chaos run: 100 kill -9s among two or three workers under load, with SIGTERMs, joins and
# SIGSTOP/SIGCONT freezes (`make test`: 10; FAULT_KILLS), 12 freezes of one or two workers
# (`make test`: 3; FROZEN_FREEZES) and the broker killed under load (test_broker_reset.py).
fault: $(DEV)
	FAULT_CORPUS_SIZE=100000 FAULT_PROPERTY_EXAMPLES=3000 \
	  $(BIN)/python -m pytest tests/fault -s -o timeout=1800 $(PYTEST_ARGS)
	FAULT_KILLS=100 $(BIN)/python -m pytest tests/integration/test_kills.py -s $(PYTEST_ARGS)
	FROZEN_FREEZES=12 $(BIN)/python -m pytest tests/integration/test_frozen_worker.py \
	  tests/integration/test_broker_reset.py -s $(PYTEST_ARGS)

# The soak test at full length (issue 12): 30 minutes at a fixed 200 contexts/s through one
# worker, sampling its RSS, latency and lag every second; `make test` runs it for 30 s
# (SOAK_SECONDS, SOAK_RATE: see tests/fault/test_soak.py). Report: runs/soak/soak.json, .png.
soak: $(DEV)
	SOAK_SECONDS=1800 $(BIN)/python -m pytest tests/fault/test_soak.py -s -o timeout=2400 \
	  $(PYTEST_ARGS)

# The benchmarks add Vowpal Wabbit, graph_cb's reference peer (the `bench` extra).
BENCH := $(VENV)/.installed-bench
$(BENCH): pyproject.toml $(DEV)
	$(PIP) -e '.[dev,bench]'
	@touch $(BENCH)

# Each benchmark in a pytest process of its own, so that none measures in what the ones before
# left behind: in one process for all (make bench at 0f00467), bench_latency.py's load
# generator ran in a process of 570 MB.
bench: $(BENCH)
	@status=0; for bench in tests/benchmarks/bench_*.py; do \
	  $(BIN)/python -m pytest $$bench -s -o python_files="bench_*.py" $(PYTEST_ARGS) || status=1; \
	done; exit $$status

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
