# The dev entry points. README's two commands are `make demo` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck unit unit-fast backends bench bench-peers docs docs-build clean

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

test: $(STAMP) backends lint typecheck
	. scripts/backends.env && $(PY) -m pytest

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
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
