# tritonlite: `make serve` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PA_DIR := .tools/perf_analyzer
export PERF_ANALYZER := $(CURDIR)/$(PA_DIR)/perf_analyzer

# Everything the installed package (and its compiled twin) is built from.
BUILD_INPUTS := pyproject.toml setup.py tritonlite/scheduling/_batcher_py.py \
                tritonlite/scheduling/_batcher_c.pxd

.PHONY: install serve test test-pure bench compare-triton proto lint clean examples

install: $(STAMP) examples

$(STAMP): $(BUILD_INPUTS)
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	$(PY) -c "from tritonlite.scheduling import batcher; assert batcher.ACCELERATED, 'Cython extension missing'"
	touch $(STAMP)

examples: $(STAMP)
	$(PY) tools/make_examples.py

serve: install
	$(VENV)/bin/tritonlite --model-repository model_repository --http-port 8000 --grpc-port 8001 --metrics-port 8002

$(PERF_ANALYZER):
	tools/install-perf-analyzer.sh $(PA_DIR)

# The whole suite on the compiled twins (CI fails if they did not build), then again on the
# pure-Python twins.
test: install $(PERF_ANALYZER)
	TRITONLITE_REQUIRE_EXTENSIONS=1 $(PY) -m pytest -q
	$(MAKE) --no-print-directory test-pure

test-pure: install
	TRITONLITE_NO_EXTENSIONS=1 TRITONLITE_NO_NUMBA=1 $(PY) -m pytest -q

bench: install $(PERF_ANALYZER)
	$(PY) bench/run_all.py

compare-triton: install
	$(PY) tests/compare/compare_triton.py

proto:
	$(PY) tools/gen_proto.py

lint: install
	$(PY) -m pip install -q --disable-pip-version-check ruff mypy
	$(PY) -m ruff check tritonlite tests tools bench
	$(PY) -m mypy tritonlite

clean:
	rm -rf build $(VENV) .tools *.egg-info tritonlite/scheduling/_batcher_c*.so
