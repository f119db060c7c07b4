# tritonlite: `make serve` and `make test` do all the set-up on a fresh machine (GNU make).
#
#   make install         .venv with tritonlite (editable, Cython extension), the [test] extra and
#                        the [tune] one (matplotlib, for tune's plots),
#                        then the example models in model_repository/
#   make serve           install, then serve model_repository/ on 8000 (HTTP), 8001 (gRPC),
#                        8002 (metrics); SERVE_FLAGS="--log-verbose 1" adds flags
#   make test            install, perf_analyzer, the whole suite (compiled twins, native front
#                        end), the compatibility suites again on aio, the protocol suites on
#                        one shared port, the suites that reach a compiled twin again on the
#                        pure-Python twins
#   make bench | compare-triton | proto | lint | wire-attacks | clean | distclean

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.tritonlite-installed
DEV_STAMP := $(VENV)/.tritonlite-dev-installed
TORCH_PIN := $(VENV)/torch-constraint.txt
# The PyTorch backend's tests run on this torch (a CPU build where the index offers one).
TORCH_VERSION ?= 2.13.0
PA_DIR := .tools/perf_analyzer
export PERF_ANALYZER := $(CURDIR)/$(PA_DIR)/perf_analyzer
SERVE_FLAGS ?=

# What the installed package is built from: metadata, the build script and the sources Cython
# compiles (each `_c.pxd` sits beside the pure-Python `_py.py` twin it is compiled from).
PXDS := $(shell find tritonlite -name '*_c.pxd')
COMPILED_SOURCES := $(PXDS) $(patsubst %_c.pxd,%_py.py,$(PXDS))
BUILD_INPUTS := pyproject.toml setup.py $(COMPILED_SOURCES)

# The test matrix. Every suite runs once on the compiled twins with the default front end
# (native); the compatibility suites (marker `transport`: tests/compat, the real tritonclient,
# perf_analyzer and raw-socket tests) run again on --frontend=aio, but for those whose subject is
# behind the front end (marker `core_subject`, CORE_SUITES in tests/conftest.py); the suites that
# reach a compiled twin's Python source (marker `twins`, the rule is TWIN_PATHS in
# tests/conftest.py) run again on the pure-Python twins. On one shared port (the native layer
# tells HTTP/1.1 from HTTP/2 by the first bytes or by ALPN, then runs the same protocol code as on
# separate ports) `make test` runs the suites of SHARED_TESTS, which cover every protocol path,
# client and perf_analyzer mode, TLS, limits and shutdown; `make test-shared SHARED_TESTS=tests`
# runs every compatibility suite there (it does not fit CI's time with the rest). The suites
# mostly wait on servers, so pytest-xdist runs TEST_WORKERS files at once (one file per worker: a
# module's server fixture stays in one process); TEST_WORKERS=0 runs them one at a time. A worker
# that dies (a segmentation fault in a test) is replaced at most twice: with xdist's default
# (four per worker) a test that crashes each time it is run again left the run hanging, not
# failing.
TEST_WORKERS ?= 4
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,\
  -n $(TEST_WORKERS) --dist loadfile --max-worker-restart 2)
PYTEST_FLAGS ?=
SHARED_TESTS ?= $(addprefix tests/compat/,test_http.py test_grpc.py test_grpc_stream.py \
  test_http_grpc_parity.py test_perf_analyzer_http.py test_perf_analyzer_grpc.py \
  test_http_tls.py test_grpc_tls.py test_restricted_api.py test_shutdown.py \
  test_connection_handling.py test_grpc_keepalive.py test_http_expect.py \
  test_compressed_requests.py test_http_large.py test_grpc_large.py)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := install
.PHONY: install examples serve test test-compiled test-aio test-shared test-pure \
        check-accelerated perf-analyzer \
        bench compare-triton proto lint clean distclean

install: $(STAMP) examples

# torch is pinned: a range, or a package asking for torch, would otherwise pull the newest
# release, a multi-gigabyte CUDA build.
$(STAMP): $(BUILD_INPUTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip
	echo 'torch==$(TORCH_VERSION)' > $(TORCH_PIN)
	$(PIP) install -q -c $(TORCH_PIN) -e '.[test,tune]' 'torch==$(TORCH_VERSION)'
	touch $@

examples: $(STAMP)
	$(PY) tools/make_examples.py

serve: install
	$(VENV)/bin/tritonlite --model-repository model_repository \
	  --http-port 8000 --grpc-port 8001 --metrics-port 8002 $(SERVE_FLAGS)

perf-analyzer:
	tools/install-perf-analyzer.sh $(PA_DIR)

# One after the other even under make -j: the suites start servers and share the 2 cores.
test: install perf-analyzer
	$(MAKE) --no-print-directory check-accelerated
	$(MAKE) --no-print-directory test-compiled
	$(MAKE) --no-print-directory test-aio
	$(MAKE) --no-print-directory test-shared
	$(MAKE) --no-print-directory test-pure

check-accelerated:
	TRITONLITE_REQUIRE_EXTENSIONS=1 $(PY) tools/check_extensions.py

test-compiled:
	TRITONLITE_REQUIRE_EXTENSIONS=1 TRITONLITE_TEST_FRONTEND=native \
	  $(PY) -m pytest $(XDIST) $(PYTEST_FLAGS)

test-aio:
	TRITONLITE_REQUIRE_EXTENSIONS=1 TRITONLITE_TEST_FRONTEND=aio \
	  $(PY) -m pytest $(XDIST) -m "transport and not core_subject" $(PYTEST_FLAGS)

test-shared:
	TRITONLITE_REQUIRE_EXTENSIONS=1 TRITONLITE_TEST_FRONTEND=native TRITONLITE_TEST_SHARED_PORT=1 \
	  $(PY) -m pytest $(XDIST) -m transport $(PYTEST_FLAGS) $(SHARED_TESTS)

test-pure:
	TRITONLITE_NO_EXTENSIONS=1 TRITONLITE_NO_NUMBA=1 TRITONLITE_TEST_FRONTEND=native \
	  $(PY) -m pytest $(XDIST) -m twins $(PYTEST_FLAGS)

bench: install perf-analyzer $(DEV_STAMP)
	if [ -f bench/run_all.py ]; then $(PY) bench/run_all.py; \
	else echo "bench/run_all.py is not there: no benchmarks to run"; fi

compare-triton: install
	$(PY) tests/compare/compare_triton.py

proto: $(STAMP)
	$(PY) tools/gen_proto.py

$(DEV_STAMP): $(STAMP)
	echo 'torch==$(TORCH_VERSION)' > $(TORCH_PIN)
	$(PIP) install -q -c $(TORCH_PIN) -e '.[test,dev]'
	touch $@

# Lint fails on unformatted code (run ruff format) and on stale protobuf descriptors
# (regenerate with make proto).
lint: $(DEV_STAMP)
	$(PY) -m ruff check tritonlite tests tools bench
	$(PY) -m ruff format --check tritonlite tests tools bench
	$(PY) -m mypy
	$(PY) tools/gen_proto.py --check || { echo "descriptors are stale: run make proto" >&2; exit 1; }
	$(PY) tools/check_layers.py

# Build outputs, caches and the generated example models; .venv and .tools stay (distclean).
clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	rm -f $(STAMP) $(DEV_STAMP)
	find tritonlite -name '*_c.*.so' -delete
	find tritonlite tests tools bench -name __pycache__ -type d -prune -exec rm -rf {} +
	find model_repository -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .tools

# The local fleet (deploy/README.md): three replicas behind HAProxy, scraped by Prometheus; the
# HPA metric at two loads, every dashboard query and rule, rolling restarts and a SIGKILL under
# load; then the container image (podman, a base made with mmdebstrap). Not part of make test.
# Installs its Debian packages when run as root; skips with a message when it cannot.
# FLEET_IMAGE=0 leaves the image out; FLEET_FLAGS="--json out.json" keeps the figures.
FLEET_IMAGE ?= 1
FLEET_FLAGS ?=
.PHONY: fleet-check
fleet-check: install
	if FLEET_IMAGE=$(FLEET_IMAGE) deploy/fleet/install-deps.sh; then \
	  $(PY) deploy/fleet/fleet_check.py $(if $(filter 0,$(FLEET_IMAGE)),--no-image) $(FLEET_FLAGS); \
	else echo "fleet-check: SKIP: haproxy and prometheus are needed (apt-get install haproxy prometheus)"; fi

# Hostile input (issue 18): the seeded fuzz suite against real servers on both front ends at
# FUZZ_CASES cases in all (make test runs it small); FUZZ_SEED picks the seed, FUZZ_SECONDS
# bounds each suite's time. Not part of make test.
FUZZ_CASES ?= 100000
.PHONY: fuzz
fuzz: install
	FUZZ_CASES=$(FUZZ_CASES) $(PY) -m pytest -q -s tests/fuzz

# Soak (issue 18): SOAK_REQUESTS mixed inferences (HTTP, gRPC, gRPC streaming, system shared
# memory; 1% client mistakes) through the real clients, every answer checked, the server's RSS
# sampled; SOAK_FLAGS="--frontend aio --json out.json" adds flags. Minutes; not part of make test.
SOAK_REQUESTS ?= 1000000
SOAK_FLAGS ?=
.PHONY: soak
soak: install
	$(PY) bench/soak.py --requests $(SOAK_REQUESTS) $(SOAK_FLAGS)

# Wire attacks at full size (issue 32): 700 partial HTTP/2 prefaces on one port against a cap of
# 512, a 64 MiB chunk extension, 350 stream resets a second then 5,000 at once, ten stalled 8 MiB
# gRPC responses (RSS before and after); WIRE_FLAGS="--frontend aio" for the aio front end.
# About a minute; not part of make test.
WIRE_FLAGS ?=
.PHONY: wire-attacks
wire-attacks: install
	$(PY) bench/wire_attacks.py $(WIRE_FLAGS)
