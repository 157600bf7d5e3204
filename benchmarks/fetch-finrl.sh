#!/usr/bin/env bash
# Fetch FinRL's PortfolioOptimizationEnv, unmodified, for the compatibility tests and the
# portfolio benchmark: downloads the pinned FinRL wheel from PyPI (no dependencies), checks the
# wheel's sha256, and extracts only finrl/meta/env_portfolio_optimization/env_portfolio_optimization.py
# to benchmarks/.peers/finrl/ (git-ignored); benchmarks/_peers_finrl.py loads it and checks its sha256.
# FinRL 0.3.7's file is FinRL's git file at a6bbd642 (2024-04-10); its GitHub HEAD differs from
# it only by two comment lines, removed there.
#   bash benchmarks/fetch-finrl.sh        (PYTHON=... picks the interpreter; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
version=0.3.7
wheel=FinRL-0.3.7-py3-none-any.whl
wheel_sha256=ef16a51e2fc7d71fa73efdf565c6e91ace5b9a391ff1bdda4ccd82de2e11d8fa
member=finrl/meta/env_portfolio_optimization/env_portfolio_optimization.py
file_sha256=bfc897c1f06dc2a23df6eee71b5bd29bce98a3dd3bcbe6af567bbfd8a146a311
peers=benchmarks/.peers
mkdir -p "$peers/finrl"
if [ ! -f "$peers/$wheel" ] || ! echo "$wheel_sha256  $peers/$wheel" | sha256sum -c --quiet - 2>/dev/null; then
    rm -f "$peers/$wheel"
    "$python" -m pip download -q --no-deps --only-binary=:all: -d "$peers" "finrl==$version"
fi
echo "$wheel_sha256  $peers/$wheel" | sha256sum -c --quiet - || {
    echo "error: $peers/$wheel is not the pinned FinRL $version wheel" >&2
    exit 1
}
"$python" - "$peers/$wheel" "$member" "$peers/finrl/env_portfolio_optimization.py" <<'PY'
import os
import sys
import zipfile

wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as zf:
    data = zf.read(member)
tmp = out + ".tmp"
with open(tmp, "wb") as f:
    f.write(data)
os.replace(tmp, out)
PY
echo "$file_sha256  $peers/finrl/env_portfolio_optimization.py" | sha256sum -c --quiet - || {
    echo "error: the extracted file's sha256 is not FinRL $version's" >&2
    exit 1
}
sha256sum "$peers/finrl/env_portfolio_optimization.py"
