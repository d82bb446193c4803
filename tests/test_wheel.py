"""The package as a user installs it: build the wheel (`pip wheel --no-deps`) from a copy of the
source, install it into a fresh virtual environment, and run the installed `isrflow` command from
outside the checkout -- `replay --engine local` (needs conf/engine.properties inside the wheel) and
`sql`. The fresh venv gets the already-installed third-party dependencies through a .pth line to
the project venv's site-packages (a path only: that directory's own .pth files, among them the
editable install of this checkout, are not processed), so nothing is downloaded but the build
backend (pip's build isolation; cached after the first run)."""
import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def sh(*cmd, cwd=None, timeout=600):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    assert p.returncode == 0, f"{cmd}\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheel")
    src = d / "src"
    src.mkdir()
    for name in ("protocol", "schemas", "jobs", "conf"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    sh(PY, "-m", "pip", "wheel", "-q", "--no-deps", "-w", d / "dist", src, cwd=d)
    (whl,) = (d / "dist").glob("isrflow-*.whl")
    venv = d / "venv"
    sh(PY, "-m", "venv", "--without-pip", venv)
    vpy = venv / "bin" / "python"
    purelib = subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    sh(PY, "-m", "pip", "--python", vpy, "install", "-q", "--no-deps", "--no-index", whl)
    return {"dir": d, "whl": whl, "bin": venv / "bin", "purelib": Path(purelib)}


def test_wheel_contains_every_package_and_the_config_files(installed):
    names = set(zipfile.ZipFile(installed["whl"]).namelist())
    assert {"conf/engine.properties", "conf/spark.conf"} <= names
    # every Python package of the source tree is in the wheel (subpackages included)
    for pkg in ("protocol", "schemas", "jobs", "conf"):
        for init in (ROOT / pkg).rglob("__init__.py"):
            rel = init.relative_to(ROOT).as_posix()
            if "__pycache__" not in rel:
                assert rel in names, f"{rel} is missing from the wheel"


def test_installed_command_replays_and_queries(installed, tmp_path):
    bin_ = installed["bin"]
    # imports come from the installed wheel, not from the checkout
    where = sh(bin_ / "python", "-c", "import jobs, protocol, conf; print(jobs.__file__, protocol.__file__, conf.__file__)",
               cwd=tmp_path).stdout
    assert all(str(installed["purelib"]) in w for w in where.split()), where
    demo = ROOT / "examples" / "demo"
    n_rows = sum(1 for f in demo.glob("*.jsonl") for line in f.read_text().splitlines() if line.strip())
    out = sh(bin_ / "isrflow", "replay", demo, "--tables", tmp_path / "t", "--engine", "local", cwd=tmp_path)
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["input_rows"] == summary["applied"] + summary["rejected"] == n_rows
    q = sh(bin_ / "isrflow", "sql", "--tables", tmp_path / "t", "--format", "json",
           "SELECT count(*) AS n FROM metadata_log", cwd=tmp_path)
    assert json.loads(q.stdout)["n"] > 0
