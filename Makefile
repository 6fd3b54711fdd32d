# The dev entry points. README's two commands are `make demo` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck unit unit-fast backends bench docs docs-build clean

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

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
