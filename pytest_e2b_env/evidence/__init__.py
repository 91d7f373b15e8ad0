"""The evidence bundle: writer, redaction, verification (see docs/evidence.md for the layout)."""

from __future__ import annotations

from pytest_e2b_env.evidence.redaction import find_secrets, redact
from pytest_e2b_env.evidence.verify import verify_bundle
from pytest_e2b_env.evidence.writer import BundleWriter

__all__ = ["BundleWriter", "find_secrets", "redact", "verify_bundle"]
