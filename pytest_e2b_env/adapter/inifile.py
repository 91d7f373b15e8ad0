"""The keys a pytest config file sets, read with the standard library only.

pytest 9 deprecates ``config.inicfg``, which held them. The plugin reads them twice: at load, to
learn whether the run asks anything of it (light: no other import), and to reject misspelled keys.
"""

from __future__ import annotations

from pathlib import Path


def file_keys(path: Path | None) -> set[str]:
    """The keys set in ``[pytest]`` / ``[tool:pytest]`` / ``[tool.pytest(.ini_options)]`` of ``path``."""
    if path is None or not path.is_file():
        return set()
    if path.suffix == ".toml":
        import tomllib

        table = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("pytest", {})
        return (set(table) - {"ini_options"}) | set(table.get("ini_options", {}))
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    section = "pytest" if parser.has_section("pytest") else "tool:pytest"
    return set(parser[section]) if parser.has_section(section) else set()
