#!/usr/bin/env bash
# Run where a package registry is reachable, before a GPU check: builds a wheel of tritonrl and
# downloads the pure-Python wheels of gymnasium and of what it needs beyond a bare GPU image (torch,
# triton, numpy, ...) into .whl/ (git-ignored). Carry .whl/ to the GPU machine with the source tree; benchmarks/gpu-check.sh
# installs them from there without a registry, so the agent-level GPU tests run too.
#   bash benchmarks/fetch-wheels.sh        (PYTHON=... picks the interpreter; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
# The versions `make install` resolved. gymnasium's Requires-Dist outside extras: numpy (on the
# image), cloudpickle, typing-extensions, farama-notifications; checked below after the download.
pins=(gymnasium==1.4.0 farama-notifications==0.0.6 cloudpickle==3.1.3 typing-extensions==4.16.0)
rm -rf .whl
mkdir -p .whl
"$python" -m pip download -q --no-deps --only-binary=:all: -d .whl "${pins[@]}"
"$python" -m pip wheel -q --no-deps -w .whl .   # tritonrl itself: the GPU check runs the installed wheel
"$python" - "${pins[@]}" <<'EOF'
import re
import sys
import zipfile
from pathlib import Path

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

wheels = sorted(Path(".whl").glob("*.whl"))
have = {norm(w.name.split("-")[0]) for w in wheels} | {"numpy"}
if "tritonrl" not in have:
    sys.exit("error: no tritonrl wheel was built into .whl/")
for w in wheels:  # pure Python, or they would not install on another machine's Python
    if not w.name.endswith("-none-any.whl"):
        sys.exit(f"error: {w.name} is not a pure-Python wheel")
gym = next(w for w in wheels if w.name.startswith("gymnasium-"))
with zipfile.ZipFile(gym) as z:
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
needs = {norm(re.split(r"[ ;<>=!~\[(]", line.split(":", 1)[1].strip())[0])
         for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
if missing := sorted(needs - have):
    sys.exit(f"error: gymnasium needs {', '.join(missing)}: add it to the pins in benchmarks/fetch-wheels.sh")
print(f"{len(wheels)} wheels in .whl/: {', '.join(w.name for w in wheels)}")
EOF
