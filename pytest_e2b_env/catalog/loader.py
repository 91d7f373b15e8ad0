"""Load the case catalog from TOML files, one family per file.

A malformed file or case raises :class:`CaseLoadError` naming the file, the case id and
the field, so pytest can show it as a collection error a reviewer can act on.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.errors import ConfigError

CASE_SUFFIX = ".toml"


class CaseLoadError(ConfigError):
    """A case file or case is malformed; the message names file, case id and field."""


def default_cases_dir() -> Path:
    """The bundled catalog (see :mod:`pytest_e2b_env.data`)."""
    from pytest_e2b_env.data import cases_dir

    return cases_dir()


def case_files(paths: Iterable[Path]) -> list[Path]:
    """Expand directories to their ``*.toml`` files, sorted, keeping the given order of paths."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.glob(f"*{CASE_SUFFIX}")))
        elif path.is_file():
            files.append(path)
        else:
            raise CaseLoadError(f"--e2b-cases {str(path)!r} does not exist; give a case file or directory")
    return files


def _field(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "(case)"


def parse_cases(text: str, source: str) -> list[Case]:
    """Parse one TOML document of ``[[case]]`` tables into cases (``source`` names it in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CaseLoadError(f"{source}: not valid TOML: {exc}") from None
    extra = sorted(set(data) - {"case"})
    if extra:
        raise CaseLoadError(f"{source}: unknown top-level key(s) {extra}; a case file holds [[case]] tables")
    raw_cases = data.get("case", [])
    if not isinstance(raw_cases, list) or not raw_cases:
        raise CaseLoadError(f"{source}: no [[case]] tables found")
    return parse_cases_from_dicts(raw_cases, source)


def parse_cases_from_dicts(raw_cases: list[Any], source: str) -> list[Case]:
    """Validate case dicts (from TOML or the ``pytest_e2b_env_cases`` hook) into cases."""
    cases: list[Case] = []
    for index, raw in enumerate(raw_cases):
        case_id = raw.get("id") if isinstance(raw, dict) else None
        label = f"case {case_id!r}" if isinstance(case_id, str) else f"case #{index + 1} (no id)"
        if not isinstance(raw, dict):
            raise CaseLoadError(
                f"{source}: {label}: field '(case)': a case is a table, got {type(raw).__name__}"
            )
        try:
            case = Case.model_validate({**raw, "source_file": raw.get("source_file") or source})
        except ValidationError as exc:
            first = exc.errors()[0]
            raise CaseLoadError(
                f"{source}: {label}: field {_field(first['loc'])!r}: {first['msg']}"
                + (f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else "")
            ) from None
        cases.append(case)
    return cases


def load_cases(paths: Iterable[Path], extra: Iterable[Case] = ()) -> list[Case]:
    """Load every case from ``paths`` plus ``extra``; ids must be unique across all of them."""
    cases: list[Case] = []
    for file in case_files(paths):
        cases.extend(parse_cases(file.read_text(encoding="utf-8"), str(file)))
    cases.extend(extra)
    seen: dict[str, str] = {}
    for case in cases:
        if case.id in seen:
            raise CaseLoadError(
                f"{case.source_file}: case {case.id!r}: field 'id': duplicate, also in {seen[case.id]}"
            )
        seen[case.id] = case.source_file
    return cases


def catalog_hash(cases: Iterable[Case]) -> str:
    """A stable digest of the catalog content, for the run manifest."""
    digest = hashlib.sha256()
    for case in cases:
        digest.update(case.model_dump_json(exclude={"source_file"}).encode())
    return digest.hexdigest()


def resolve_path(case: Case, relative: str) -> Path:
    """Find a file a case names: beside its case file, then in the parent (the project root)."""
    base = Path(case.source_file).resolve().parent if case.source_file else Path.cwd()
    for root in (base, base.parent, Path.cwd()):
        candidate = root / relative
        if candidate.is_file():
            return candidate
    raise CaseLoadError(
        f"{case.source_file}: case {case.id!r}: file {relative!r} not found beside the case file "
        f"or in {base.parent}"
    )


def as_dicts(cases: Iterable[Case]) -> list[dict[str, Any]]:
    """Plain dicts of the cases (for fixtures and the manifest)."""
    return [case.model_dump() for case in cases]
