"""Building the wheel and installing it the ways users do, for the install tests and scripts/bench_install.py.

Everything runs in a directory the caller owns and removes, with a timeout on every command; pip
talks to the package index only. The wheel is built from a copy of the checkout so the build
leaves no ``build/`` or ``*.egg-info`` behind in the source tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: what a source distribution holds: enough to build the wheel or an editable install
SOURCES = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "LICENSE",
    "pytest_e2b_env",
    "cases",
    "fixtures",
    "docs",
)
INSTALL_TIMEOUT = 900
RUN_TIMEOUT = 600


def clean_env(**extra: str) -> dict[str, str]:
    """A user's shell environment: no PYTHONPATH, no virtualenv of this checkout, no user-site switch."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONNOUSERSITE")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def run(
    args: list[str | Path], cwd: Path, env: dict[str, str], timeout: float = RUN_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output, bounded by ``timeout``."""
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def copy_sources(dest: Path) -> Path:
    """A copy of the checkout's buildable sources (caches left out)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".*")
    dest.mkdir(parents=True)
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def build_wheel(work: Path) -> Path:
    """Build the project's wheel (no dependencies, this interpreter's setuptools) into ``work/dist``."""
    src = copy_sources(work / "src")
    out = work / "dist"
    done = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, src],
        cwd=work,
        env=clean_env(),
        timeout=INSTALL_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("pytest_e2b_env-*.whl")
    return wheel


def base_python() -> str:
    """The interpreter this virtualenv was made from (user-site installs need one outside any venv)."""
    return str(getattr(sys, "_base_executable", sys.executable))


def make_venv(path: Path) -> Path:
    """A fresh virtualenv with pip; returns its python."""
    done = run([base_python(), "-m", "venv", path], cwd=path.parent, env=clean_env(), timeout=INSTALL_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return path / "bin" / "python"


def dir_size(path: Path) -> int:
    """Bytes of every regular file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


#: prints where the package and its data were found, run with the interpreter under test
PROBE = (
    "import json, pytest_e2b_env; from pytest_e2b_env.data import data_root, cases_dir; "
    "print(json.dumps({'package': pytest_e2b_env.__file__, 'data': str(data_root()), "
    "'cases': sorted(p.name for p in cases_dir().glob('*.toml'))}))"
)
