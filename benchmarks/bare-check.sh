#!/usr/bin/env bash
# What a bare GPU machine sees, checked without a GPU (CI runs this before `make test`): a fresh
# virtual environment holding only torch, triton, numpy, safetensors, pytest and hypothesis (no
# gymnasium, matplotlib or tensorboard), then, from the source tree, tests/bare_collect.py:
# `pytest --collect-only -m gpu` over the whole suite (every file must collect, the kernel parity
# tests must be there) and an import of every benchmark module. Exit status non-zero on failure.
#   bash benchmarks/bare-check.sh [VENV]     (default /tmp/tritonrl-bare-venv, made anew each run)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/tritonrl-bare-venv}
start=$(date +%s)
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
# torch first and pinned: the CPU wheel is cached locally, an unpinned torch pulls a CUDA build
"$venv/bin/python" -m pip install -q torch==2.13.0
"$venv/bin/python" -m pip install -q triton numpy safetensors pytest hypothesis
if "$venv/bin/python" -c "import gymnasium" 2>/dev/null; then
  echo "error: gymnasium got into $venv: the check would prove nothing" >&2
  exit 1
fi
PYTHONPATH=. "$venv/bin/python" tests/bare_collect.py
echo "bare check took $(( $(date +%s) - start )) s"
