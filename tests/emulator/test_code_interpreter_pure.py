"""The code interpreter's message shaping: E2B's Result fields, and untrusted kernel messages checked."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.emulator.interpreter import envs
from pytest_e2b_env.emulator.interpreter.outputs import convert, result_line
from pytest_e2b_env.standalone import interpreter_display, ipython_input
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


#: (cell, what IPython 9.15's TransformerManager.transform_cell gives for it)
IPYTHON_TRANSFORMS = [
    ("    a = 1\n    b = a + 1\n    b", "a = 1\nb = a + 1\nb\n"),
    ("\n\n  1/0", "1/0\n"),
    ("!echo hi", "get_ipython().system('echo hi')\n"),
    ("x = !ls", "x = get_ipython().getoutput('ls')\n"),
    ("  !echo hi", "get_ipython().system('echo hi')\n"),
    ("!!ls", "get_ipython().getoutput('ls')\n"),
    ("%%bash\necho hi\n", "get_ipython().run_cell_magic('bash', '', 'echo hi\\n')\n"),
    ("%time 1+1", "get_ipython().run_line_magic('time', '1+1')\n"),
    ("y = %pwd", "y = get_ipython().run_line_magic('pwd', '')\n"),
    ("a?", "get_ipython().run_line_magic('pinfo', 'a')\n"),
    ("obj.attr??", "get_ipython().run_line_magic('pinfo2', 'obj.attr')\n"),
    ("if True:\n    !echo in\n", "if True:\n    get_ipython().system('echo in')\n"),
    ("x = 1 if y else !ls", "x = 1 if y else !ls\n"),
    ("x = !echo a \\\n  b", "x = get_ipython().getoutput('echo a    b')\n"),
    ("'''\n!not\n'''", "'''\n!not\n'''\n"),
    ("x = f'{a!r}'", "x = f'{a!r}'\n"),
    ("/print 1 2", "print(1, 2)\n"),
    (",print a b", 'print("a", "b")\n'),
    (";print a b", 'print("a b")\n'),
    (
        "def f():\n    x = !ls\n    return x",
        "def f():\n    x = get_ipython().getoutput('ls')\n    return x\n",
    ),
    (
        "%%writefile f.txt\nhello\n  world\n",
        "get_ipython().run_cell_magic('writefile', 'f.txt', 'hello\\n  world\\n')\n",
    ),
    (
        "import os; os.environ['A'] = 'x'\n\n%%bash\necho hi",
        "import os; os.environ['A'] = 'x'\n\nget_ipython().run_line_magic('%bash', '')\necho hi\n",
    ),
]


@pytest.mark.parametrize(("cell", "expected"), IPYTHON_TRANSFORMS)
def test_cells_are_transformed_as_ipython_transforms_them(cell: str, expected: str) -> None:
    """Dedent, !cmd, x = !cmd, %magic, %%magic, help and the escapes give IPython's exact source."""
    assert ipython_input.transform_cell(cell) == expected


#: (one-line cell, what IPython 9.15's InteractiveShell.transform_cell gives with `mine` defined)
IPYTHON_PREFILTER = [
    ("pip install x", "get_ipython().run_line_magic('pip', 'install x')\n"),
    ("cd /tmp", "get_ipython().run_line_magic('cd', '/tmp')\n"),
    ("pwd = 3", "pwd = 3\n"),
    ("pwd + 1", "get_ipython().run_line_magic('pwd', '+ 1')\n"),
    ("exit", "exit()\n"),
    ("quit;", "quit();\n"),
    ("len [1]", "len [1]\n"),
    ("mine", "mine\n"),
    ("time.sleep(1)", "time.sleep(1)\n"),
    ("print(1)", "print(1)\n"),
]


@pytest.mark.parametrize(("cell", "expected"), IPYTHON_PREFILTER)
def test_one_line_cells_get_ipythons_automagic_and_exit_autocall(cell: str, expected: str) -> None:
    """A magic's name alone on a line calls it unless a name shadows it; exit and quit are called."""
    magics = {"pip", "cd", "pwd", "time"}
    got = ipython_input.prefilter_line(
        ipython_input.transform_cell(cell),
        is_magic=magics.__contains__,
        is_shadowed=lambda name: name in {"mine", "len", "print"},
        is_autocall=lambda name: name in {"exit", "quit"},
    )
    assert got == expected


def test_envs_become_e2b_code_lines_indented_like_the_cell() -> None:
    """E2B's env lines: one per variable, indented like the cell's first line, reset afterwards."""
    code = "\n    x = 1\n    x"
    full = envs.with_envs(code, envs.set_code({"S": "1"}), {"K": "v"})
    assert full == (
        "    import os; os.environ['S'] = '1'\n    import os; os.environ['K'] = 'v'\n\n    x = 1\n    x"
    )
    assert envs.with_envs("x", "", {}) == "x"
    assert envs.reset_code({"K": "v", "S": "2"}, {"S": "1"}) == (
        "import os; del os.environ['K']\nimport os; os.environ['S'] = '1'"
    )
    assert list(envs.sandbox_envs("i1", "base", {"A": "a", "E2B_SANDBOX": "no"})) == [
        "A",
        "E2B_SANDBOX",
        "E2B_SANDBOX_ID",
        "E2B_TEMPLATE_ID",
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({1: "a", 1.5: "b", False: "c", None: "d"}, {"1": "a", "1.5": "b", "false": "c", "null": "d"}),
        ({"t": (1, 2), "n": float("nan"), "i": float("inf")}, {"t": [1, 2], "n": None, "i": None}),
        ([2**64 - 1, -(2**63)], [2**64 - 1, -(2**63)]),
        ({"d": __import__("datetime").date(2020, 1, 2)}, {"d": "2020-01-02"}),
    ],
)
def test_json_of_a_result_follows_orjson(value: object, expected: object) -> None:
    """E2B's JSON formatter runs orjson with non-string keys allowed: keys as text, NaN as null."""
    assert interpreter_display.e2b_json(value) == expected


@pytest.mark.parametrize("value", [[2**64], [-(2**63) - 1], {"s": {1}}, {(1, 2): 3}, ["\ud800"], {"b": b"x"}])
def test_json_of_a_result_is_left_out_where_orjson_refuses(value: object) -> None:
    """What orjson cannot serialize gets no application/json (E2B falls back to _repr_json_)."""
    assert interpreter_display.e2b_json(value) is interpreter_display._REFUSED
