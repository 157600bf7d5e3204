#!/usr/bin/env bash
# One prepared command for a lent GPU machine: the compiled-kernel parity suite and every
# benchmark, inside a 10-minute window (PYTEST_TIMEOUT 300 s + BENCH_TIMEOUT 240 s), output
# written to the folder given as argument (summary.txt, pytest-gpu.txt, bench*.txt, info.txt).
#   bash benchmarks/gpu-check.sh OUTDIR      (or: make gpu-check GPU_OUT=OUTDIR)
# GPU machines reach no package registry. benchmarks/fetch-wheels.sh (run beforehand where one is
# reachable) puts in .whl/ a wheel of tritonrl itself and the pure-Python wheels of gymnasium and
# its needs; they are installed from there (no registry) into a temporary folder, and the tests and
# benchmarks then import the installed tritonrl, as a user would (python -P: the checkout is not on
# sys.path). Without a tritonrl wheel the source tree is used (PYTHONPATH=.). The kernel tests and
# benchmarks need no gymnasium; without it the agent-level GPU tests and the loop benchmarks are
# skipped. The first lines of summary.txt say which tritonrl ran and whether gymnasium was there.
set -uo pipefail
out=${1:?usage: gpu-check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
py=(python)
wheels=(.whl/*.whl)
if [ -e "${wheels[0]}" ]; then
  site=$(mktemp -d)
  if ! python -m pip install -q --no-index --no-deps --target "$site" "${wheels[@]}" >"$out/wheels.txt" 2>&1; then
    for w in "${wheels[@]}"; do python -m zipfile -e "$w" "$site"; done  # pure wheels: unzipping installs
  fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}  # before site-packages
  from_wheels=" from .whl/ (no registry)"
fi
if [ -d "${site:-/nonexistent}/tritonrl" ] && python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  py=(python -P)  # the installed wheel, not the checkout in the current folder
else
  export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
fi
"${py[@]}" -c "import tritonrl; print(f'tritonrl {tritonrl.__version__} from {tritonrl.__file__}')" \
  | tee "$out/summary.txt"
if version=$("${py[@]}" -c "import gymnasium; print(gymnasium.__version__)" 2>/dev/null); then
  gym_note="gymnasium $version${from_wheels:-}: agent-level GPU tests and loop benchmarks run"
else
  gym_note="no gymnasium (and no wheels in .whl/ that import): agent-level GPU tests and loop benchmarks are skipped; bring them with bash benchmarks/fetch-wheels.sh where a registry is reachable"
fi
echo "$gym_note" | tee -a "$out/summary.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1
"${py[@]}" -m tritonrl info 2>&1 | tee "$out/info.txt"
timeout "${PYTEST_TIMEOUT:-300}" "${py[@]}" -m pytest --gpu -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/pytest-gpu.txt"
rc_test=${PIPESTATUS[0]}
# Benchmarks, kernels first: those that declare REQUIRES (the loops, gymnasium) run afterwards,
# with --quick, in what is left of the same BENCH_TIMEOUT, so they can never crowd out a kernel.
bench_start=$(date +%s)
budget=${BENCH_TIMEOUT:-240}
mapfile -t kernel_benches < <(grep -L '^REQUIRES' benchmarks/[!_]*.py | xargs -rn1 basename | sed 's/\.py$//')
mapfile -t loop_benches < <(grep -l '^REQUIRES' benchmarks/[!_]*.py | xargs -rn1 basename | sed 's/\.py$//' \
                            | grep -vx scaling)  # data-parallel scaling: last, on 2+ GPUs only (below)
rc_bench=0
if [ ${#kernel_benches[@]} -gt 0 ]; then
  timeout "$budget" "${py[@]}" -m tritonrl bench "${kernel_benches[@]}" 2>&1 | tee "$out/bench.txt"
  rc_bench=${PIPESTATUS[0]}
fi
# One bench process per loop benchmark (the table is printed when a process ends, so a timeout
# loses only the benchmark it cuts); the market ones first: they take seconds in --quick mode, so
# a long compile in another cannot starve them.
if [ ${#loop_benches[@]} -gt 0 ]; then
  mapfile -t loop_benches < <(printf '%s\n' "${loop_benches[@]}" | grep '^market_'
                              printf '%s\n' "${loop_benches[@]}" | grep -v '^market_')
fi
: >"$out/bench-loops.txt"
for name in "${loop_benches[@]}"; do
  left=$(( budget - ($(date +%s) - bench_start) ))
  if [ "$left" -lt 30 ]; then
    echo "loop benchmark $name not run: ${left} s of BENCH_TIMEOUT left" | tee -a "$out/summary.txt"
    continue
  fi
  timeout "$left" "${py[@]}" -m tritonrl bench --quick "$name" 2>&1 | tee -a "$out/bench-loops.txt"
  rc_loop=${PIPESTATUS[0]}
  [ "$rc_bench" = 0 ] && rc_bench=$rc_loop
done
# Data-parallel scaling (torchrun, 1 vs 2 processes; NCCL on 2 GPUs, and gloo on the CPU) needs
# two GPUs; with fewer it is not run, and the summary says so.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$gpus" -ge 2 ]; then
  left=$(( budget - ($(date +%s) - bench_start) ))
  if [ "$left" -lt 60 ]; then
    echo "scaling benchmark not run: ${left} s of BENCH_TIMEOUT left" | tee -a "$out/summary.txt"
  else
    timeout "$left" "${py[@]}" -m tritonrl bench --quick scaling 2>&1 | tee "$out/bench-scaling.txt"
    rc_scale=${PIPESTATUS[0]}
    [ "$rc_bench" = 0 ] && rc_bench=$rc_scale
  fi
else
  echo "scaling benchmark not run: $gpus GPU(s) on this machine, multi-GPU (NCCL) scaling needs 2 or more" \
    | tee -a "$out/summary.txt"
fi
echo "pytest --gpu exit $rc_test, bench exit $rc_bench" | tee -a "$out/summary.txt"
[ "$rc_test" = 0 ] && [ "$rc_bench" = 0 ]
