"""What the catalog keeps of a subject's output is redacted before it is cut (catalog/observe.py)."""

from __future__ import annotations

import json

import pytest

from pytest_e2b_env.catalog.observe import MESSAGE_LIMIT, exception_info, scrub, summarize
from pytest_e2b_env.evidence.redaction import MARKER

TOKEN = "tok4" + "9f1c2b7a3e6d8054" * 2 + "q7Zx"  # 40 characters


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)


def test_a_message_is_redacted_before_its_cut() -> None:
    """A secret across the 600-character cut of a message becomes one whole marker, not a kept piece."""
    message = exception_info(RuntimeError("x" * 561 + TOKEN + " and more"), [])["message"]
    assert message == "x" * 561 + MARKER + " and more"
    cut = exception_info(RuntimeError("x" * 595 + TOKEN), ["target-key-0000"])["message"]
    assert cut == ("x" * 595 + MARKER)[:MESSAGE_LIMIT]


def test_a_long_value_is_cut_before_a_secret_it_would_halve() -> None:
    """A returned value over its bound keeps a secret whole before the cut, or leaves it out whole."""
    assert summarize(["x" * 1990 + TOKEN]) == '["' + "x" * 1990 + "..."
    assert summarize(["x" * 1900 + TOKEN + "y" * 200]) == '["' + "x" * 1900 + TOKEN + "y" * 58 + "..."


def test_scrub_redacts_shapes_and_environment_values_and_keeps_json() -> None:
    """scrub() redacts as the bundle does, on the data: even an unterminated key block leaves valid JSON."""
    text = json.dumps({"out": f"-----BEGIN PRIVATE KEY-----\nMIIE {TOKEN}", "seen": TOKEN, "n": 1})
    assert json.loads(scrub(text, [])) == {"out": MARKER, "seen": MARKER, "n": 1}
    assert json.loads(scrub(json.dumps(["key k-123456789"]), ["k-123456789"])) == [f"key {MARKER}"]
