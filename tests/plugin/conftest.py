"""Fixtures for the plugin tests: pytester projects with a tiny subject and case file."""

from __future__ import annotations

import e2b  # noqa: F401  (imported once here: pytester's in-process runs would re-import it and protobuf refuses)
import pytest
from plugin_helpers import write_project

import pytest_e2b_env.catalog.runner  # noqa: F401  (same reason: keep one copy of the catalog modules)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project whose ini points the catalog at its own tiny reward module."""
    write_project(pytester)
    return pytester
