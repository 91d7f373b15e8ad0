"""Host-side JSON grading with types kept (pure; hypothesis properties)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.reward import grade_output, parse_strict, typed_equal
from pytest_e2b_env.reward.grading import BadJSON

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(value=values, indent=st.sampled_from([None, 0, 2]), pad=st.sampled_from(["", "\n", "  \n"]))
def test_round_trip_passes(value: object, indent: int | None, pad: str) -> None:
    """Any JSON value printed any standard way grades as passed against itself."""
    output = (json.dumps(value, indent=indent) + pad).encode()
    assert grade_output(0, False, output, False, value) == "passed"


@given(n=st.integers(-(10**6), 10**6))
def test_int_float_bool_are_distinct(n: int) -> None:
    """1, 1.0 and true are three different answers."""
    assert not typed_equal(float(n), n)
    assert not typed_equal(n, float(n))
    assert not typed_equal(True, 1)
    assert not typed_equal(1, True)
    assert not typed_equal(1.0, True)


@given(value=values)
def test_nested_type_change_is_mismatch(value: object) -> None:
    """Wrapping any expected value in a container changes the answer."""
    assert not typed_equal([value], value)
    assert not typed_equal({"k": value}, [value])


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 1}',
        '{"a": NaN}',
        "Infinity",
        "-Infinity",
        '{"a": 1}{"a": 1}',
        "{'a': 1}",
        "",
        "1 2",
        "[1,]",
    ],
)
def test_bad_json(text: str) -> None:
    """Duplicate keys, NaN/Infinity, extra data and non-JSON are bad_json."""
    with pytest.raises(BadJSON):
        parse_strict(text)
    assert grade_output(0, False, text.encode(), False, {"a": 1}) == "bad_json"


def test_invalid_utf8_and_deep_nesting_are_bad_json() -> None:
    """Binary stdout and absurdly deep nesting are bad_json, never an exception."""
    assert grade_output(0, False, b"\xff\xfe{}", False, {}) == "bad_json"
    assert grade_output(0, False, b"[" * 30_000 + b"]" * 30_000, False, []) == "bad_json"


def test_reason_precedence() -> None:
    """Timeout, then output size, then exit code, then JSON, then value."""
    assert grade_output(0, True, b"{}", False, {}) == "timeout"
    assert grade_output(0, False, b"{}", True, {}) == "output_too_large"
    assert grade_output(1, False, b"{}", False, {}) == "nonzero_exit"
    assert grade_output(0, False, b"{}", False, {"a": 1}) == "mismatch"
