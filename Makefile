# Two commands on a fresh machine:  make demo  |  make test
# Both create the virtualenv if missing and install banditflow into it.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
EVENTS ?= 5000
PYTEST_ARGS ?=

.PHONY: demo test lint system-deps bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# kcat (a real third-party Kafka client) and Prometheus/promtool, used by integration tests.
system-deps:
	@if ! command -v kcat >/dev/null || ! command -v promtool >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat prometheus >/dev/null; \
	  else \
	    echo "integration tests need kcat and prometheus (Debian: apt-get install kcat prometheus)"; \
	  fi; \
	fi

demo: $(STAMP)
	$(BIN)/banditflow demo --events $(EVENTS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/banditflow schemas

test: $(STAMP) system-deps lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m pytest tests/benchmarks -s -o python_files="bench_*.py" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
