"""The code interpreter's message shaping: E2B's Result fields, and untrusted kernel messages checked."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.emulator.interpreter.outputs import convert, result_line
from pytest_e2b_env.wire.ledger import op_for
from pytest_e2b_env.wire.routes import route_of


def test_result_line_maps_mime_types_and_strips_one_quote_pair() -> None:
    """text/plain loses one pair of quotes; known MIME types get E2B's names; the rest is extra."""
    line = result_line(
        {"text/plain": "'a'", "text/html": "<b>", "image/png": "iVBO", "application/x-y": 1}, True
    )
    assert line == {
        "type": "result",
        "text": "a",
        "html": "<b>",
        "png": "iVBO",
        "extra": {"application/x-y": 1},
        "is_main_result": True,
    }
    assert result_line({"text/plain": '"q"'}, False)["text"] == "q"
    assert result_line({"text/plain": "'"}, False)["text"] == ""  # as E2B's server slices it


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=10,
    )
)
def test_convert_never_forwards_a_malformed_message(message: Any) -> None:
    """Whatever the kernel writes, convert() returns None or a line of one of E2B's types."""
    line = convert(message)
    assert line is None or line["type"] in {"number_of_executions", "stdout", "stderr", "result", "error"}


def test_routes_of_the_interpreter_port_have_their_own_ops() -> None:
    """Context ids become {id} on port 49999 only, and each interpreter route has its op name."""
    headers = {"e2b-sandbox-id": "i1", "e2b-sandbox-port": "49999"}
    assert route_of("POST", "/contexts/abc/restart", headers) == ("POST /contexts/{id}/restart", "i1")
    assert route_of("DELETE", "/contexts/abc", headers) == ("DELETE /contexts/{id}", "i1")
    assert op_for(route_of("POST", "/execute", headers)[0]) == "run_code"
    assert route_of("POST", "/contexts/abc", {"e2b-sandbox-id": "i1"})[0] == "POST /contexts/abc"
