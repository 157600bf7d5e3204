#!/usr/bin/env bash
# One prepared command for a lent GPU machine: the compiled-kernel parity suite and every
# benchmark, inside a 10-minute window, output written to the folder given as argument.
#   bash benchmarks/gpu-check.sh OUTDIR
# Runs from the source tree (PYTHONPATH=.): GPU machines reach no package registry.
set -uo pipefail
out=${1:?usage: gpu-check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1
python -m toolkit info 2>&1 | tee "$out/info.txt"
timeout "${PYTEST_TIMEOUT:-300}" python -m pytest --gpu -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/pytest-gpu.txt"
rc_test=${PIPESTATUS[0]}
timeout "${BENCH_TIMEOUT:-240}" python -m toolkit bench 2>&1 | tee "$out/bench.txt"
rc_bench=${PIPESTATUS[0]}
echo "pytest --gpu exit $rc_test, bench exit $rc_bench" | tee "$out/summary.txt"
[ "$rc_test" = 0 ] && [ "$rc_bench" = 0 ]
