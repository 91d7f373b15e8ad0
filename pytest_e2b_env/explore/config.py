"""Which subject ``explore`` runs: named on the command line, else the pytest ini, else the reference.

The same order as ``validate`` (a named subject wins over the project's ``e2b_reward_subject`` or
``e2b_episode_subject``, and with neither the bundled reference of that kind runs; an episode's
extra model tools come from ``e2b_episode_tools``). The ini is found as pytest finds it, from the
current directory upward: ``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with a
``[tool.pytest.ini_options]`` table, ``tox.ini`` with ``[pytest]``, ``setup.cfg`` with
``[tool:pytest]``; its ``pythonpath`` entries are put on the import path as pytest puts them.
Standard library only.
"""

from __future__ import annotations

import configparser
import sys
import tomllib
from pathlib import Path

REFERENCE_REWARD = "pytest_e2b_env.reward:reward_subject"
REFERENCE_EPISODE = "pytest_e2b_env.episode:ReportEpisode"
REFERENCE = {"reward": REFERENCE_REWARD, "episode": REFERENCE_EPISODE}


def _values(path: Path) -> dict[str, str] | None:
    """The ``[pytest]`` keys of one candidate file, or None when it holds no pytest config."""
    if path.suffix == ".toml":
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("pytest", {})
        options = table.get("ini_options", table) if table else None
        if options is None:
            return None
        return {k: " ".join(v) if isinstance(v, list) else str(v) for k, v in options.items()}
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    for section in ("pytest", "tool:pytest"):
        if parser.has_section(section):
            return dict(parser[section])
    return {} if path.name in ("pytest.ini", ".pytest.ini") else None


def find_ini(start: Path) -> tuple[Path | None, dict[str, str]]:
    """The first pytest config file from ``start`` upward, and its keys."""
    for folder in (start, *start.parents):
        for name in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
            path = folder / name
            if path.is_file():
                values = _values(path)
                if values is not None:
                    return path, values
    return None, {}


def subject(named: str | None, start: Path, kind: str = "reward") -> tuple[str, str | None, Path | None]:
    """``(spec, contract spec, ini path)`` of the subject; the ini's pythonpath goes on sys.path."""
    ini, values = find_ini(start)
    base = ini.parent if ini is not None else start
    for entry in reversed(values.get("pythonpath", "").split()):
        path = str((base / entry).resolve())
        if path not in sys.path:
            sys.path.insert(0, path)
    if str(start) not in sys.path:
        sys.path.insert(0, str(start))  # as validate's pytest does for a project's rootdir
    spec = named or values.get(f"e2b_{kind}_subject", "").strip() or REFERENCE[kind]
    contract = values.get(f"e2b_{kind}_contract", "").strip() or None
    return spec, contract, ini


def episode_tools(start: Path) -> list[str]:
    """The ini's ``e2b_episode_tools``: model tools the episode declares besides the terminal and submit."""
    return find_ini(start)[1].get("e2b_episode_tools", "").split()  # a linelist: one name a line
