# The dev entry points. README's two commands are `make demo` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-adapters-min test-frameworks test-pythons test-compiled compiled bench-compiled wheels \
	bridge-venvs lint typecheck unit unit-fast backends bench \
	bench-peers docs docs-build clean

# The fast suite: every unit test but the long ones (marked slow: soak, load, bounded shutdowns,
# fuzzing, multi-process), on two workers (pytest-xdist).
FAST_TESTS := -q -m "not slow and not e2e" -p no:cacheprovider -n 2
# The coverage `make test` must keep (percent of loopobs/ lines and branches); raise it as it grows.
# 78.4 % in the main venv on 2026-12-01: the framework adapters tested in their own venvs
# (make test-frameworks) count as uncovered here.
COVERAGE_FLOOR ?= 75
# The Pythons the package claims besides the venv's (pyproject.toml's classifiers): `make test`
# runs the fast suite on each, in its own venv, with an interpreter of this machine. Not 3.10:
# the cost extra (genai-prices) needs 3.11; not yet 3.13: three tests of deeply nested JSON and
# one of sync-tool workers under 100 concurrent runs fail there.
PYTHONS_ALSO ?= 3.12

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
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy
	$(PY) -m mypy scripts/build_wheels.py

unit: $(STAMP)
	$(PY) -m pytest

# The inner loop while changing the code. CI (`make test`) runs every test.
unit-fast: $(STAMP)
	$(PY) -m pytest $(FAST_TESTS)

test: $(STAMP) backends bridge-venvs lint typecheck
	. scripts/backends.env && $(PY) -m pytest --cov --cov-report=term:skip-covered \
		--cov-fail-under=$(COVERAGE_FLOOR)
	$(MAKE) test-adapters-min
	$(MAKE) test-frameworks
	$(MAKE) test-pythons
	$(MAKE) test-compiled

# The release artefacts in dist/ (scripts/build_wheels.py): the sdist; from it the pure wheel
# and, for each CPython of RELEASE_PYTHONS, a wheel with the detectors compiled by mypyc
# (setup.py), repaired by auditwheel to a manylinux tag. twine checks their metadata, and each
# wheel is installed into a fresh venv of its Python and checked from outside the tree.
RELEASE_PYTHONS ?= 3.11 $(PYTHONS_ALSO)
wheels: $(STAMP)
	$(PY) scripts/build_wheels.py --out dist $(foreach v,$(RELEASE_PYTHONS),--python $(v))

# The detectors compiled with mypyc, as the release's wheel for this venv's Python ships them
# (make wheels), unpacked into a copy of the tree in place of loopobs/, so that every test
# there meets the compiled modules (tests/test_compiled_build.py checks it).
# The dev venv stays the sources: a compiled module would shadow the file being edited.
COMPILED_TREE := build/compiled/tree
VENV_CPYTHON   = cp$(shell $(PY) -c 'import sys; print(*sys.version_info[:2], sep="")')
compiled: wheels
	rm -rf build/compiled && mkdir -p $(COMPILED_TREE)
	git ls-files -co --exclude-standard | grep -v '^loopobs/' | tar -cf - -T - \
		| tar -xf - -C $(COMPILED_TREE)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --target $(COMPILED_TREE) \
		dist/loopobs-*-$(VENV_CPYTHON)-$(VENV_CPYTHON)-*manylinux*.whl

test-compiled: compiled
	cd $(COMPILED_TREE) && LOOPOBS_EXPECT_COMPILED=1 $(abspath $(PY)) -m pytest $(FAST_TESTS)

# The real trajectories' figures (bench/bench_real_trajectories.py) with the compiled detectors.
bench-compiled: compiled
	cd $(COMPILED_TREE) && $(abspath $(PY)) bench/bench_real_trajectories.py

# The fast suite on each of PYTHONS_ALSO, in .venv-<version>/ (rebuilt when pyproject.toml
# changes); a claimed Python missing from the machine is a failure, not a skip.
test-pythons: $(foreach v,$(PYTHONS_ALSO),unit-fast-$(v))

.PRECIOUS: .venv-%/.installed-stamp
.venv-%/.installed-stamp: pyproject.toml
	rm -rf .venv-$*
	"$$(bash scripts/find-python.sh $*)" -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --disable-pip-version-check -U pip
	.venv-$*/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

unit-fast-%: .venv-%/.installed-stamp
	.venv-$*/bin/python -m pytest $(FAST_TESTS)

# The adapter tests again on the lowest framework versions the extras admit, in their own
# venv (.venv-min/: loopobs, the frameworks pinned by scripts/adapters-min-constraints.txt and
# the test dependencies only). Rebuilt from scratch when the pins or pyproject.toml change.
# OpenTelemetry is pinned there at the lowest release pyproject.toml admits too, and the
# exporters' tests (OTEL_FLOOR_TESTS) run on it.
MIN_VENV  := .venv-min
MIN_STAMP := $(MIN_VENV)/.installed-stamp
MIN_PINS  := scripts/adapters-min-constraints.txt
ADAPTER_TESTS := $(sort $(wildcard tests/test_adapters_*.py)) tests/test_docs_adapters.py
OTEL_FLOOR_TESTS := tests/test_tracing.py tests/test_metrics_otel.py tests/test_semconv_conformance.py \
	tests/test_telemetry_semconv.py tests/test_configure.py tests/test_configure_standard.py \
	tests/test_cost_telemetry.py

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
		-W "ignore:AgentStatePydantic has been moved:DeprecationWarning" $(ADAPTER_TESTS) \
		$(OTEL_FLOOR_TESTS)

# The adapters of frameworks that emit OpenTelemetry themselves (google-adk, strands-agents,
# agent-framework) and
# LangChain 1.x's create_agent middleware (langchain), in
# their own venv (build/venv-frameworks/: google-adk caps OpenTelemetry below the main venv's),
# each framework at the release its adapter was verified against (scripts/frameworks-requirements.txt).
# mypy checks these adapters against the frameworks' real types here (the main venv sees Any).
# Rebuilt from scratch when the requirements or pyproject.toml change.
FW_VENV  := build/venv-frameworks
FW_STAMP := $(FW_VENV)/.installed-stamp
FW_REQS  := scripts/frameworks-requirements.txt
FRAMEWORK_TESTS := $(sort $(wildcard tests/test_frameworks_*.py))
FRAMEWORK_ADAPTERS := $(wildcard loopobs/adapters/adk.py loopobs/adapters/strands.py \
	loopobs/adapters/langchain_middleware.py loopobs/adapters/maf.py)

$(FW_STAMP): pyproject.toml $(FW_REQS)
	rm -rf $(FW_VENV)
	$(PYTHON) -m venv $(FW_VENV)
	$(FW_VENV)/bin/python -m pip install -q --disable-pip-version-check -U pip
	$(FW_VENV)/bin/python -m pip install -q --disable-pip-version-check -r $(FW_REQS)
	touch $@

test-frameworks: $(FW_STAMP)
	$(FW_VENV)/bin/python -m mypy --cache-dir $(FW_VENV)/.mypy_cache --follow-imports=silent \
		$(FRAMEWORK_ADAPTERS) $(FRAMEWORK_TESTS)
	$(FW_VENV)/bin/python -m pytest -q -p no:cacheprovider $(FRAMEWORK_TESTS)

# Frameworks whose OpenTelemetry pins clash with the dev venv's, each in a venv of its own
# for the span bridge's tests (tests/test_otel_bridge_*.py run them in a subprocess).
BRIDGE_VENVS := build/bridge-venvs
BRIDGE_FRAMEWORKS := strands adk adk1 maf ag2 llamaindex crewai smolagents autogen
BRIDGE_STAMPS := $(foreach f,$(BRIDGE_FRAMEWORKS),$(BRIDGE_VENVS)/$(f)/.installed-stamp)

# One venv per framework, from scripts/bridge-<framework>-requirements.txt; rebuilt from
# scratch when its requirements change.
.PRECIOUS: $(BRIDGE_VENVS)/%/.installed-stamp
$(BRIDGE_VENVS)/%/.installed-stamp: scripts/bridge-%-requirements.txt
	rm -rf $(BRIDGE_VENVS)/$*
	$(PYTHON) -m venv $(BRIDGE_VENVS)/$*
	$(BRIDGE_VENVS)/$*/bin/python -m pip install -q --disable-pip-version-check -r $<
	touch $@

bridge-venvs: $(BRIDGE_STAMPS)

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
	rm -rf $(VENV) $(MIN_VENV) $(FW_VENV) $(foreach v,$(PYTHONS_ALSO),.venv-$(v)) .mypy_cache .pytest_cache \
		.ruff_cache .hypothesis .coverage
