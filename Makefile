# Triton model serving: build precision variants, serve them, call them, measure them.
# `make help` lists every target with the text after its `##`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.setup-stamp
PIP_INSTALL := $(PY) -m pip install --disable-pip-version-check -q -c requirements/constraints.txt
SERVING_CONFIG ?= model_repository/serving.toml

.PHONY: help setup build-engines serve stop status demo test test-unit clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*?## "} /^[a-zA-Z_-]+:.*?## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(STAMP) ## Create .venv with the pinned dependencies (a second run does nothing)

$(STAMP): requirements/serve.txt requirements/build.txt requirements/test.txt requirements/no_deps.txt requirements/constraints.txt pyproject.toml
	@bash scripts/setup_system_packages.sh
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements/test.txt
	$(PIP_INSTALL) --no-deps -r requirements/no_deps.txt
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	@touch $(STAMP)

build-engines: setup ## Build every model and variant that model_repository/serving.toml asks for
	$(PY) -m model_build build --config $(SERVING_CONFIG)

serve: setup ## Start one tritonserver per partition under a supervisor (run/); returns once all are ready
	$(PY) -m serving serve --config $(SERVING_CONFIG)

stop: ## Stop everything `make serve` started (supervisor first, then servers, MPS daemon)
	@if [ -x $(PY) ]; then $(PY) -m serving stop; else echo "nothing to stop (no .venv)"; fi

status: setup ## Show what is running and where
	$(PY) -m serving status

demo: build-engines ## Set up, build, serve, classify test images and embed texts over HTTP and gRPC, stop
	$(PY) -m serving serve --config $(SERVING_CONFIG)
	@status=0; \
	for proto in http grpc; do \
	  $(PY) -m model_client classify --protocol $$proto --test-samples 0:64 --top-k 3 --summary || status=1; \
	  $(PY) -m model_client embed --protocol $$proto --text "Triton batches requests dynamically." --text "A full queue answers 503." || status=1; \
	done; \
	$(PY) -m serving stop; exit $$status

test: build-engines ## Set up, build, and run the whole test suite against real tritonserver
	$(PY) -m pytest

test-unit: setup ## Fast tests only (no server, no build)
	$(PY) -m pytest -m "not server and not slow and not gpu"

clean: stop monitor-stop ## Remove generated artifacts (never build/ or model sources)
	rm -rf artifacts run reports
	find model_repository -name config.pbtxt -delete
	find model_repository -path '*/[0-9]*/*' \( -name '*.onnx' -o -name '*.plan' -o -name '*.json' \) -delete

# --- Monitoring: Prometheus + alert rules + Grafana dashboard (scripts/operations/) ---
.PHONY: monitor-start monitor-stop test-alerts

monitor-start: setup ## Start Prometheus on loopback scraping every partition in run/manifest.json (SLA_MS=... sets the P99 SLA)
	$(PY) -m operations.monitor start $(if $(SLA_MS),--sla-ms $(SLA_MS))

monitor-stop: ## Stop the Prometheus that monitor-start started
	@if [ -x $(PY) ]; then $(PY) -m operations.monitor stop; else echo "nothing to stop (no .venv)"; fi

test-alerts: setup ## promtool check + fire/no-fire unit tests of the alert rules; generated files == committed
	cd scripts/operations && promtool check rules alert_rules.yml && promtool test rules alert_rules_test.yml
	$(PY) -m pytest -q tests/unit/test_operations_alert_rules.py tests/unit/test_operations_dashboard.py

# --- Security: the admin key for the model-repository/shared-memory/logging/trace APIs (scripts/serving/security.py) ---
.PHONY: admin-key

admin-key: setup ## Create the admin key file (mode 0600, outside the repo; TRITON_ADMIN_KEY_FILE moves it) if missing; never prints it
	$(PY) -m serving admin-key

# --- Performance: perf_analyzer sweeps against the running servers (scripts/perf_sweep/) ---
.PHONY: perf perf-quick

perf: setup ## Sweep every served model (needs `make serve`): knees, A/B, priority mix; report in reports/perf/<timestamp>/
	$(PY) -m perf_sweep run --config $(SERVING_CONFIG)

perf-quick: setup ## A short smoke run of `make perf` (fewer levels, short windows; ~4 min)
	$(PY) -m perf_sweep run --quick --config $(SERVING_CONFIG)

# --- Partitions: max_batch_size from measured memory (docs/partitions.md) ---
.PHONY: size-batches

size-batches: setup ## Measure memory per batch size of built models, re-render configs (build-engines runs it cached; FORCE=1 re-measures)
	$(PY) -m model_build size-batches --config $(SERVING_CONFIG) $(if $(FORCE),--force)

# --- Text embedder: padding in the encoder's dynamic batches (scripts/serving/padding_report.py) ---
.PHONY: padding-report

padding-report: setup ## Padding efficiency before/after sequence-length bucketing on the held-out text mix (after build-engines); reports/serving/
	$(PY) -m serving.padding_report

.PHONY: benchmark-precision
benchmark-precision: setup ## FP32 vs INT8-mixed (latency b32, size, budget) + stratified vs random calibration; reports/build/benchmark.md
	$(PY) -m model_build benchmark --config $(SERVING_CONFIG)

# --- Generation: the LLM's scheduler benchmark (scripts/perf_sweep/generate_bench.py, docs/generation.md) ---
.PHONY: perf-generate

perf-generate: setup ## LLM: continuous vs static vs one-at-a-time, prefix sharing on/off (after build-engines; ~10 min, QUICK=1 ~1 min); reports/perf/generate-<timestamp>/
	$(PY) -m perf_sweep.generate_bench $(if $(QUICK),--quick)
