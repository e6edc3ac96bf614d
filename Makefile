# infergate — a user needs two commands: `make run` and `make test`. Everything else here serves them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
# Caches live outside the clone so repeated runs (and CI on this machine) reuse them.
CACHE ?= $(HOME)/.cache/infergate
VENV ?= $(CACHE)/venv
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
# Debian packages: Mesa's software Vulkan driver (lavapipe) so wgpu has an adapter on GPU-less machines;
# prometheus (and its promtool) to test the alert rules and to evaluate the dashboard against live processes.
SYSTEM_PACKAGES := mesa-vulkan-drivers prometheus
# `make bench` only: h2load drives the gateway suite, nginx and HAProxy are its peers.
BENCH_PACKAGES := nghttp2-client nginx-light haproxy
# Tests and benchmarks find the Python reference (onnx, onnxruntime, tritonclient, kserve) through these.
export INFERGATE_PYTHON := $(VENV)/bin/python
export INFERGATE_BIN_DIR := $(TARGET_DIR)/debug
# The engine's zoo tests and benchmark find the exported models (scripts/ensure-zoo.sh) here.
export INFERGATE_ZOO_CACHE := $(CACHE)/zoo
PYTHON_TESTS := $(wildcard */tests/python */*/tests/python)

.PHONY: help run stop image test deps venv zoo build build-release build-pod build-bench lint test-rust test-python test-load soak bench drills clean supply-chain fuzz-smoke fuzz

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# `make run` records its processes here; `make stop` reads it. One per machine, as the ports are fixed.
RUN_PIDS ?= $(CACHE)/run-local.pids

run: deps build-pod ## start the backend and the gateway on deploy/local (the example)
	scripts/run-local.sh "$(TARGET_DIR)/quick" "$(RUN_PIDS)"

stop: ## stop what `make run` started (from another terminal): the gateway drains, then the backend stops
	@scripts/stop-local.sh "$(RUN_PIDS)"

image: ## the container images (deploy/docker/), where Docker runs; IMAGE_PREFIX=registry/path/ to tag for a registry
	@scripts/build-images.sh "$(IMAGE_PREFIX)"

test: deps venv zoo lint supply-chain test-rust test-python test-load fuzz-smoke ## everything: formatting, lints, supply chain, Rust tests, client tests, scenario smokes, fuzz smoke
	@echo "==> all tests passed"

deps: ## install missing system packages (asks apt; uses sudo when not root)
	@scripts/ensure-system-deps.sh $(SYSTEM_PACKAGES)

venv: ## the Python virtualenv for client tests and the ONNX reference
	@scripts/ensure-venv.sh "$(VENV)"

zoo: venv ## the engine's zoo of real exported models (own venv with torch; exported once, cached in $(CACHE)/zoo)
	@scripts/ensure-zoo.sh >/dev/null

build: ## debug build of every crate and binary
	$(CARGO) build --workspace --all-targets

build-release: ## optimised binaries
	$(CARGO) build --workspace --release --bins

build-pod: ## the pod's two processes only, as `make run` builds them (profile quick: quick to build, models at full speed)
	$(CARGO) build --profile quick -p infergate-gateway -p infergate-backend --bin infergate-gateway --bin infergate-backend

lint: ## rustfmt and clippy, warnings are errors
	@echo "==> cargo fmt --check"
	$(CARGO) fmt --all -- --check
	@echo "==> cargo clippy"
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-rust: ## unit and integration tests (real sockets, lavapipe for wgpu)
	@echo "==> cargo test"
	$(CARGO) test --workspace

test-python: build ## real clients (tritonclient, kserve SDK) against our processes
	@if [ -n "$(PYTHON_TESTS)" ]; then \
	  echo "==> pytest $(PYTHON_TESTS)"; \
	  "$(INFERGATE_PYTHON)" -m pytest -q $(PYTHON_TESTS); \
	else echo "==> no Python client tests yet"; fi

supply-chain: ## cargo deny against deny.toml: licences, bans, duplicates, sources; advisories where the database can be had
	scripts/deny.sh

fuzz-smoke: ## every fuzz target for a few seconds from its committed seeds
	scripts/fuzz.sh

fuzz: ## every fuzz target for FUZZ_SECONDS each (default 600)
	FUZZ_SECONDS=$${FUZZ_SECONDS:-600} scripts/fuzz.sh

test-load: build ## every scenario of loadtests/cases/ in seconds: invariants only, never timings
	@echo "==> infergate-load run loadtests/cases --smoke"
	"$(TARGET_DIR)/debug/infergate-load" run loadtests/cases --smoke --quiet \
	  --bin-dir "$(TARGET_DIR)/debug" --out "$(TARGET_DIR)/loadtests-smoke"

# Minutes of mixed traffic `make soak` runs (REST, gRPC, two models, a canary edit every minute).
SOAK_MINUTES ?= 30

soak: build ## SOAK_MINUTES (30) of mixed traffic through the pod; table, JSON and plots; fails on a growth trend
	"$(TARGET_DIR)/debug/infergate-load" soak --minutes "$(SOAK_MINUTES)" \
	  --bin-dir "$(TARGET_DIR)/debug" --out "$(TARGET_DIR)/soak"

build-bench: ## the binaries and engine benchmarks figures are taken with (profile release-lto: fat LTO, as the images)
	$(CARGO) build --workspace --profile release-lto --bins
	$(CARGO) bench --no-run -q -p infergate-engine --profile release-lto

bench: deps venv zoo build-bench ## the scenarios, then the peers side by side; tables in target/bench/report.md, recorded in docs/benchmarks.md
	@scripts/ensure-system-deps.sh $(BENCH_PACKAGES)
	scripts/bench.sh "$(TARGET_DIR)/release-lto" "$(TARGET_DIR)/bench"

drills: build ## the fault drills (loadtests/cases/drill-*) in full, as docs/reliability.md records them
	"$(TARGET_DIR)/debug/infergate-load" run loadtests/cases/drill-* \
	  --bin-dir "$(TARGET_DIR)/debug" --out "$(TARGET_DIR)/drills"

clean: ## remove build outputs (the venv stays; delete $(CACHE) to drop it)
	$(CARGO) clean
