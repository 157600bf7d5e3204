# Two entry points for a fresh clone: `make train` (the main job) and `make test` (the tests).
# Both create .venv and install what is missing: torch 2.13.0 (CPU wheel) when no torch is present.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install train test lint docs bench gpu-check clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,docs,train]'
	touch $@

# Rainbow on CartPole-v1, on the CPU, until a greedy evaluation is solved (>= 475): seconds to a minute
# on 2 cores (`python -m toolkit train` with no arguments). Each run gets its own folder under
# runs/ (metrics.csv, curve.png, checkpoint.safetensors); nothing is overwritten.
train: install
	$(BIN)/python -m toolkit train --run-dir runs/rainbow-CartPole-v1-$$(date +%Y%m%d-%H%M%S)

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .

docs: install
	$(BIN)/mkdocs build --strict -f docs/mkdocs.yml

bench: install
	$(BIN)/python -m toolkit bench

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .hypothesis
