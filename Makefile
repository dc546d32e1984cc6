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

$(STAMP): requirements/serve.txt requirements/build.txt requirements/test.txt requirements/constraints.txt pyproject.toml
	@bash scripts/setup_system_packages.sh
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements/test.txt
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	@touch $(STAMP)

build-engines: setup ## Build every model and variant that model_repository/serving.toml asks for
	$(PY) -m model_build build --config $(SERVING_CONFIG)

serve: setup ## Start the Triton server(s) in the background; returns once ready
	$(PY) -m serving serve --config $(SERVING_CONFIG)

stop: ## Stop everything `make serve` started
	@if [ -x $(PY) ]; then $(PY) -m serving stop; else echo "nothing to stop (no .venv)"; fi

status: setup ## Show what is running and where
	$(PY) -m serving status

demo: build-engines ## Set up, build, serve, classify test images over HTTP and gRPC, stop
	$(PY) -m serving serve --config $(SERVING_CONFIG)
	@status=0; \
	for proto in http grpc; do \
	  $(PY) -m model_client classify --protocol $$proto --test-samples 0:64 --top-k 3 --summary || status=1; \
	done; \
	$(PY) -m serving stop; exit $$status

test: build-engines ## Set up, build, and run the whole test suite against real tritonserver
	$(PY) -m pytest

test-unit: setup ## Fast tests only (no server, no build)
	$(PY) -m pytest -m "not server and not slow and not gpu"

clean: stop ## Remove generated artifacts (never build/ or model sources)
	rm -rf artifacts run reports
	find model_repository -name config.pbtxt -delete
	find model_repository -path '*/[0-9]*/*' \( -name '*.onnx' -o -name '*.plan' -o -name '*.json' \) -delete
