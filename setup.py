"""Build glue pyproject.toml cannot express: ship ``cases/``, ``fixtures/`` and ``docs/`` in the package.

The catalog, its fixtures and the docs stay at the top of the checkout, where they are edited and
reviewed; the wheel carries them as package data under ``pytest_e2b_env/_data`` so that
``importlib.resources`` finds them in every install layout (venv, ``--user``, ``--target`` with
``PYTHONPATH``). ``pyproject.toml``'s ``packages.find`` cannot add packages mapped from other
directories, hence these few lines; everything else is declared in pyproject.toml.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

# package -> checkout directory it is built from (pytest_e2b_env.data reads the same names)
DATA = {
    "pytest_e2b_env._data.cases": "cases",
    "pytest_e2b_env._data.fixtures": "fixtures",
    "pytest_e2b_env._data.docs": "docs",  # printed by `pytest-e2b-env docs`
}
DATA_FILES = ["*.toml", "*.json", "*.py", "*.txt", "*.md"]


def _data_packages() -> list[str]:
    """Each data directory and its subdirectories, as packages (setuptools ships data per package)."""
    here = Path(__file__).parent
    names = []
    for package, directory in DATA.items():
        root = here / directory
        for sub in sorted([root, *(p for p in root.rglob("*") if p.is_dir())]):
            parts = sub.relative_to(root).parts
            # caches (__pycache__, .ruff_cache, ...) are not data
            if not any(part.startswith(".") or part == "__pycache__" for part in parts):
                names.append(".".join([package, *parts]))
    return names


setup(
    packages=[*find_namespace_packages(include=["pytest_e2b_env*"]), *_data_packages()],
    package_dir=DATA,
    package_data={
        "pytest_e2b_env": ["py.typed", "**/*.py", "**/*.sh", "**/*.json", "**/*.toml"],
        **dict.fromkeys(_data_packages(), DATA_FILES),
    },
)
