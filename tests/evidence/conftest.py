"""Fixtures for the evidence tests: hermetic secrets and a finished sample bundle."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from evidence_helpers import CASES, IDS, fill

from pytest_e2b_env.evidence import BundleWriter

SECRET_ENV = ("E2B_API_KEY", "HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN")


def _drop_secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in SECRET_ENV or name.endswith(("_KEY", "_TOKEN", "_SECRET")) or "PASSWORD" in name:
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _hermetic_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secret-named variables of the machine must not leak into, or be expected by, these tests."""
    _drop_secret_env(monkeypatch)


def _write(
    root: Path,
    run_id: str,
    cases: list[dict[str, Any]],
    expected: list[str],
    secrets: list[str],
    manifest: dict[str, Any] | None,
) -> Path:
    writer = BundleWriter(
        root,
        run_id,
        manifest or {"mode": "offline", "catalog_hash": "c0ffee", "seeds": [0], "isolation": "process"},
    )
    fill(writer, cases)
    return writer.finish(expected, secrets, {"good": 0.5})


@pytest.fixture(scope="session")
def _template_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default sample bundle, written once per session and copied by ``make_bundle``."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _drop_secret_env(monkeypatch)
        return _write(tmp_path_factory.mktemp("template"), "run-1", CASES, IDS, [], None)


@pytest.fixture
def make_bundle(tmp_path: Path, _template_bundle: Path) -> Callable[..., Path]:
    """Write a bundle of the sample cases (run-1, run-2, ...) and return its directory."""
    counter = iter(range(1, 1000))

    def make(
        cases: list[dict[str, Any]] = CASES,
        expected: list[str] | None = None,
        secrets: list[str] | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> Path:
        run_id = f"run-{next(counter)}"
        if run_id == "run-1" and cases is CASES and expected is None and not secrets and manifest is None:
            # Same inputs as the template: a copy is the same bundle, without re-running git.
            return Path(shutil.copytree(_template_bundle, tmp_path / "evidence" / run_id))
        return _write(
            tmp_path / "evidence",
            run_id,
            cases,
            IDS if expected is None else expected,
            secrets or [],
            manifest,
        )

    return make
