# Two entry points for a fresh clone: `make train` (the main job) and `make test` (the tests).
# Both create .venv and install what is missing: torch 2.13.0 from PyPI when no torch is present (on
# Linux the CUDA build; install the CPU one into .venv first from https://download.pytorch.org/whl/cpu).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install train test test-portability lint format typecheck docs bench gpu-check fetch-wheels bare-check clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,docs,train,market,portfolio,minatar,atari,mujoco,box2d,export]'
	touch $@

# Rainbow on CartPole-v1, on the CPU, until a greedy evaluation is solved (>= 475): seconds to a minute
# on 2 cores (`python -m tritonrl train` with no arguments). Each run gets its own folder under
# runs/ (metrics.csv, curve.png, checkpoint.safetensors); nothing is overwritten.
train: install
	$(BIN)/python -m tritonrl train --run-dir runs/rainbow-CartPole-v1-$$(date +%Y%m%d-%H%M%S)

# Two pytest workers (pytest-xdist), one torch thread each: the 2-core CI machine's second core would
# otherwise idle (the serial suite runs about twice as long). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The numerics-sensitive tests (different code paths compared within stated tolerances) again on
# MKL's other GEMM code path (MKL_CBWR=COMPATIBLE rounds as another instruction set would): CI runs
# it so a comparison that holds bit for bit on one machine only fails here, not on a user's Xeon.
PORTABILITY_TESTS := tests/test_portability.py tests/agents/test_actor_critic.py \
	tests/agents/test_recurrent_batched.py tests/agents/test_mamba2_block.py \
	tests/kernels/test_mamba2_ref.py tests/agents/test_forecast_conv.py tests/agents/test_noisy_head_modules.py
test-portability: install
	MKL_CBWR=COMPATIBLE $(BIN)/python -m pytest -q -p no:cacheprovider $(PORTABILITY_TESTS)

# Lint and formatting ([tool.ruff] in pyproject.toml), then the layer contracts ([tool.importlinter]);
# `make format` rewrites what the ruff checks refuse.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/lint_imports.py

# Rewrites files: ruff's import sorting and fixes, then the formatter ([tool.ruff.format] in pyproject.toml).
format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# mypy over tritonrl.toolkit, tritonrl.agents and tritonrl.cli under their installed names ([tool.mypy] in pyproject.toml).
typecheck: install
	$(BIN)/mypy -p tritonrl.toolkit -p tritonrl.agents -p tritonrl.cli

docs: install
	$(BIN)/mkdocs build --strict -f docs/mkdocs.yml

bench: install
	$(BIN)/python -m tritonrl bench

# A lent GPU machine (no registry, maybe no gymnasium): the kernel parity suite and every benchmark,
# from the source tree, in under 10 minutes; output in $(GPU_OUT). Installs nothing from a registry:
# run `make fetch-wheels` beforehand where one is reachable and carry .whl/ along for the agent tests.
GPU_OUT ?= runs/gpu-check
gpu-check:
	bash benchmarks/gpu-check.sh $(GPU_OUT)

# gymnasium and its pure-Python dependencies as wheels in .whl/ (git-ignored), for gpu-check.
fetch-wheels:
	bash benchmarks/fetch-wheels.sh

# What a bare GPU machine sees, without a GPU (CI runs it): a fresh venv with only torch, triton,
# numpy, safetensors, pytest and hypothesis collects the tests (-m gpu) and imports every benchmark.
bare-check:
	bash benchmarks/bare-check.sh

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .hypothesis .mypy_cache
