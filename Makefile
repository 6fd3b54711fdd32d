# The dev entry points. README's two commands are `make demo` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-adapters-min bridge-venvs lint typecheck unit unit-fast backends bench bench-peers docs docs-build clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/loopobs demo

# Real backends for the end-to-end tests: Prometheus (Debian) and Phoenix (own venv).
backends:
	bash scripts/install-backends.sh

lint: $(STAMP)
	$(PY) -m ruff check .

typecheck: $(STAMP)
	$(PY) -m mypy

unit: $(STAMP)
	$(PY) -m pytest

# The inner loop while changing the code: every unit test but the long ones (marked slow:
# soak, load, bounded shutdowns, fuzzing, multi-process). CI (`make test`) runs them all.
unit-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not e2e" -p no:cacheprovider

test: $(STAMP) backends bridge-venvs lint typecheck
	. scripts/backends.env && $(PY) -m pytest
	$(MAKE) test-adapters-min

# The adapter tests again on the lowest framework versions the extras admit, in their own
# venv (.venv-min/: loopobs, the frameworks pinned by scripts/adapters-min-constraints.txt and
# the test dependencies only). Rebuilt from scratch when the pins or pyproject.toml change.
MIN_VENV  := .venv-min
MIN_STAMP := $(MIN_VENV)/.installed-stamp
MIN_PINS  := scripts/adapters-min-constraints.txt
ADAPTER_TESTS := $(sort $(wildcard tests/test_adapters_*.py)) tests/test_docs_adapters.py

$(MIN_STAMP): pyproject.toml $(MIN_PINS) scripts/adapters-min-requirements.txt
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install -q --disable-pip-version-check -U pip
	$(MIN_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		-r scripts/adapters-min-requirements.txt -c $(MIN_PINS)
	touch $@

# langgraph 1.0.0 warns about its own deprecated classes when its prebuilt module is imported.
test-adapters-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python scripts/check_adapter_min_pins.py
	$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		-W "ignore:AgentStatePydantic has been moved:DeprecationWarning" $(ADAPTER_TESTS)

# Frameworks whose OpenTelemetry pins clash with the dev venv's, each in a venv of its own
# for the span bridge's tests (tests/test_otel_bridge_*.py run them in a subprocess).
BRIDGE_VENVS := build/bridge-venvs
STRANDS_STAMP := $(BRIDGE_VENVS)/strands/.installed-stamp

$(STRANDS_STAMP): scripts/bridge-strands-requirements.txt
	rm -rf $(BRIDGE_VENVS)/strands
	$(PYTHON) -m venv $(BRIDGE_VENVS)/strands
	$(BRIDGE_VENVS)/strands/bin/python -m pip install -q --disable-pip-version-check \
		-r scripts/bridge-strands-requirements.txt
	touch $@

ADK_STAMP := $(BRIDGE_VENVS)/adk/.installed-stamp

$(ADK_STAMP): scripts/bridge-adk-requirements.txt
	rm -rf $(BRIDGE_VENVS)/adk
	$(PYTHON) -m venv $(BRIDGE_VENVS)/adk
	$(BRIDGE_VENVS)/adk/bin/python -m pip install -q --disable-pip-version-check \
		-r scripts/bridge-adk-requirements.txt
	touch $@

MAF_STAMP := $(BRIDGE_VENVS)/maf/.installed-stamp

$(MAF_STAMP): scripts/bridge-maf-requirements.txt
	rm -rf $(BRIDGE_VENVS)/maf
	$(PYTHON) -m venv $(BRIDGE_VENVS)/maf
	$(BRIDGE_VENVS)/maf/bin/python -m pip install -q --disable-pip-version-check \
		-r scripts/bridge-maf-requirements.txt
	touch $@

ADK1_STAMP := $(BRIDGE_VENVS)/adk1/.installed-stamp

$(ADK1_STAMP): scripts/bridge-adk1-requirements.txt
	rm -rf $(BRIDGE_VENVS)/adk1
	$(PYTHON) -m venv $(BRIDGE_VENVS)/adk1
	$(BRIDGE_VENVS)/adk1/bin/python -m pip install -q --disable-pip-version-check \
		-r scripts/bridge-adk1-requirements.txt
	touch $@

AG2_STAMP := $(BRIDGE_VENVS)/ag2/.installed-stamp

$(AG2_STAMP): scripts/bridge-ag2-requirements.txt
	rm -rf $(BRIDGE_VENVS)/ag2
	$(PYTHON) -m venv $(BRIDGE_VENVS)/ag2
	$(BRIDGE_VENVS)/ag2/bin/python -m pip install -q --disable-pip-version-check \
		-r scripts/bridge-ag2-requirements.txt
	touch $@

LLAMAINDEX_STAMP := $(BRIDGE_VENVS)/llamaindex/.installed-stamp

$(LLAMAINDEX_STAMP): scripts/bridge-llamaindex-requirements.txt
	rm -rf $(BRIDGE_VENVS)/llamaindex
	$(PYTHON) -m venv $(BRIDGE_VENVS)/llamaindex
	$(BRIDGE_VENVS)/llamaindex/bin/python -m pip install -q --disable-pip-version-check \
		-r scripts/bridge-llamaindex-requirements.txt
	touch $@

bridge-venvs: $(STRANDS_STAMP) $(ADK_STAMP) $(ADK1_STAMP) $(MAF_STAMP) $(AG2_STAMP) \
	$(LLAMAINDEX_STAMP)

# The documentation site: `make docs` serves it on http://127.0.0.1:8000 with live reload;
# `make docs-build` builds it in strict mode into build/site (tests/test_docs.py does too).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve -a 127.0.0.1:8000

docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: $(STAMP)
	$(PY) bench/run_all.py

# Peers side by side (bench/peers.py): each peer in its own venv under build/peers/,
# from bench/peers/<peer>.txt, never in the dev dependencies.
PEERS      := $(basename $(notdir $(wildcard bench/peers/*.txt)))
PEER_VENVS := $(foreach p,$(PEERS),build/peers/$(p)/.installed-stamp)

build/peers/%/.installed-stamp: bench/peers/%.txt
	$(PYTHON) -m venv build/peers/$*
	build/peers/$*/bin/python -m pip install -q --disable-pip-version-check -r $<
	touch $@

bench-peers: $(STAMP) $(PEER_VENVS)
	$(PY) bench/peers.py

clean:
	rm -rf $(VENV) $(MIN_VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
