"""The distribution installs one namespace, ``tritonrl``, and nothing at the top level that other
packages own: ``agents`` (the OpenAI Agents SDK) and ``kernels`` (Hugging Face's kernel hub) install
beside it without either breaking the other (issue 14, item 0)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed() -> None:
    """A subpackage missing from ``packages`` would be left out of the wheel without a word."""
    cfg = _setuptools_config()
    found = set()
    for name, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            found.add(".".join([name, *init.parent.relative_to(ROOT / folder).parts]))
    assert found == set(cfg["packages"])
    assert {name.split(".")[0] for name in cfg["packages"]} == {"tritonrl"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return next(out.glob("tritonrl-*.whl"))


def test_the_wheel_holds_only_the_tritonrl_namespace(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"tritonrl", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    for pkg in ("toolkit", "kernels", "agents", "cli"):
        assert f"tritonrl/{pkg}/__init__.py" in names
    assert "tritonrl/__main__.py" in names and "tritonrl/toolkit/__main__.py" not in names
    assert "tritonrl/py.typed" in names
    assert "tritonrl = tritonrl.cli:main" in entry_points


def _standin(root: Path, name: str) -> Path:
    """A tiny distribution that owns the top-level package ``name`` (as another project does)."""
    src = root / f"{name}-standin"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text(f"OWNER = '{name}-standin'\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}-standin"\nversion = "1.0"\n'
        f'[tool.setuptools]\npackages = ["{name}"]\n'
    )
    return src


def test_installs_beside_packages_that_own_agents_and_kernels(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(target),
    ]
    for what in (str(wheel), str(_standin(tmp_path, "agents")), str(_standin(tmp_path, "kernels"))):
        proc = subprocess.run([*pip, what], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "already exists" not in proc.stderr, proc.stderr  # pip overwriting another's files
    check = (
        "import agents, kernels, tritonrl\n"
        "import tritonrl.agents.dqn, tritonrl.kernels.backend, tritonrl.toolkit.precision as p\n"
        "assert agents.OWNER == 'agents-standin' and kernels.OWNER == 'kernels-standin'\n"
        "print(tritonrl.__file__)\n"
        "print(p.training_dtype('cpu'))\n"
    )
    # -P: the checkout is not on sys.path; the cwd is elsewhere too
    env = {**os.environ, "PYTHONPATH": str(target)}
    proc = subprocess.run(
        [sys.executable, "-P", "-c", check],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    origin, dtype = proc.stdout.split()
    assert Path(origin).is_relative_to(target) and dtype == "torch.float32"
    script = target / "bin" / "tritonrl"
    assert script.is_file()
    for command in ([str(script)], ["-m", "tritonrl"]):  # the script and python -m tritonrl
        proc = subprocess.run(
            [sys.executable, "-P", *command, "info"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("torch ")


# ----------------------------------------------------------------------------- extras


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_every_extra_is_on_the_installation_page_with_what_it_is_for() -> None:
    page = (ROOT / "docs" / "pages" / "installation.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `")}
    for extra in _extras():
        row = rows.get(f"`{extra}`")
        assert row is not None, f"extra {extra!r} of pyproject.toml is missing from installation.md's table"
        installs, purpose = (cell.strip() for cell in row.split("|")[2:4])
        assert installs and purpose, row


def test_the_mujoco_and_export_extras_hold_what_their_imports_need() -> None:
    extras = _extras()
    assert any(req.startswith("packaging") for req in extras["mujoco"])  # gymnasium's MuJoCo envs import it
    assert extras["export"] == ["onnx>=1.16", "onnxscript>=0.2", "onnxruntime>=1.18"]  # lower bounds only


def test_make_install_and_the_readme_install_every_extra_but_envpool_and_bench() -> None:
    want = set(_extras()) - {"envpool", "bench"}
    make = re.findall(r"pip install -q -e '\.\[([a-z0-9,]+)\]'", (ROOT / "Makefile").read_text())
    assert [set(m.split(",")) for m in make] == [want]
    # the README's full install line (it also shows a short one, `.[train]`)
    readme = re.findall(r"pip install -e '\.\[(dev,[a-z0-9,]+)\]'", (ROOT / "README.md").read_text())
    assert [set(m.split(",")) for m in readme] == [want]
