"""What IPython and E2B's server do to a cell, through the real ``e2b_code_interpreter`` SDK.

Expected texts are what IPython 9 (ipykernel 6, E2B's template) gives for the same cells.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from e2b_code_interpreter import Execution, Sandbox

T = 30

#: open-r1's E2B code reward (src/open_r1/rewards.py): an indented evaluation script in one cell.
OPEN_R1_SCRIPT = """
    import subprocess
    import json

    def evaluate_code(code, test_cases):
        passed = 0
        total = len(test_cases)
        exec_timeout = 5

        for case in test_cases:
            process = subprocess.run(
                ["python3", "-c", code],
                input=case["input"],
                text=True,
                capture_output=True,
                timeout=exec_timeout
            )

            if process.returncode != 0:  # Error in execution
                continue

            output = process.stdout.strip()
            if output.strip() == case["output"].strip():
                passed += 1

        success_rate = (passed / total)
        return success_rate

    code_snippet = {code}
    test_cases = json.loads({test_cases})

    evaluate_code(code_snippet, test_cases)
    """


def _out(execution: Execution) -> str:
    """All of a cell's stdout (messages are coalesced by time, so their split varies)."""
    return "".join(execution.logs.stdout)


@pytest.fixture
def ci(opts: dict[str, str], run_id: str) -> Iterator[Sandbox]:
    """A code-interpreter sandbox, killed after the test."""
    sandbox = Sandbox.create(timeout=120, metadata={"test_run": run_id}, **opts)
    yield sandbox
    sandbox.kill()


def test_open_r1_indented_script_runs(ci: Sandbox) -> None:
    """open-r1's indented evaluation script (a def and a loop) runs; its pass rate is execution.text."""
    program = "print(int(input()) * 2)"
    cases = [{"input": "2", "output": "4"}, {"input": "5", "output": "10"}, {"input": "1", "output": "3"}]
    script = OPEN_R1_SCRIPT.format(code=json.dumps(program), test_cases=json.dumps(json.dumps(cases)))
    execution = ci.run_code(script, timeout=T)
    assert execution.error is None, execution.error
    assert float(execution.text or "nan") == pytest.approx(2 / 3)


def test_common_indentation_and_leading_blank_lines_are_removed(ci: Sandbox) -> None:
    """IPython drops leading blank lines and dedents: line numbers count from the first code line."""
    ci.run_code("pass", timeout=T)  # the context's first cell carries E2B's env lines
    execution = ci.run_code("\n\n        x = 1\n        1 / 0\n", timeout=T)
    assert execution.error is not None
    assert "Cell In[2], line 2" in execution.error.traceback
    assert "----> 2 1 / 0" in execution.error.traceback


def test_bang_runs_a_shell_on_a_terminal(ci: Sandbox) -> None:
    """!cmd prints stdout and stderr together with a terminal's line ends; _exit_code keeps its status."""
    execution = ci.run_code("!echo hi; echo err >&2; exit 3", timeout=T)
    assert ("".join(execution.logs.stdout), execution.logs.stderr, execution.error) == (
        "hi\r\nerr\r\n",
        [],
        None,
    )
    assert ci.run_code("_exit_code", timeout=T).text == "3"
    assert _out(ci.run_code("!test -t 1 && echo terminal", timeout=T)) == "terminal\r\n"


def test_bang_assignment_gives_the_output_lines(ci: Sandbox) -> None:
    """x = !cmd assigns the lines (stderr merged, no terminal) as IPython's SList, with .s and .n."""
    execution = ci.run_code("x = !printf 'a\\nb\\n'; echo c >&2\n(x, x.s, x.n, type(x).__name__)", timeout=T)
    assert execution.text == "(['a', 'b', 'c'], 'a b c', 'a\\nb\\nc', 'SList')"
    listed = ci.run_code("files = !ls /\nfiles", timeout=T)
    assert listed.results[0].json is not None
    assert "usr" in listed.results[0].json


def test_python_values_reach_the_command(ci: Sandbox) -> None:
    """$name and {expression} come from the namespace; a name that is not defined leaves the line alone."""
    ci.run_code("n = 21", timeout=T)
    assert _out(ci.run_code("!echo $n {n * 2}", timeout=T)) == "21 42\r\n"
    assert _out(ci.run_code("!echo $E2B_SANDBOX {n}", timeout=T)) == "true {n}\r\n"


def test_a_dict_result_carries_json(ci: Sandbox) -> None:
    """A dict or list result gets E2B's application/json (orjson's rules); a set or tuple does not."""
    execution = ci.run_code("{'a': 1, 2: [1.5, None], 'n': float('nan'), 'd': {'t': (1, 2)}}", timeout=T)
    (result,) = execution.results
    assert result.json == {"a": 1, "2": [1.5, None], "n": None, "d": {"t": [1, 2]}}
    assert result.text == "{'a': 1, 2: [1.5, None], 'n': nan, 'd': {'t': (1, 2)}}"
    assert set(result.formats()) == {"text", "json"}
    assert ci.run_code("[1, 'x']", timeout=T).results[0].json == [1, "x"]
    for code in ("{1, 2}", "(1, 2)", "{'s': {1}}", "[2 ** 64]"):
        assert ci.run_code(code, timeout=T).results[0].json is None, code
    shown = ci.run_code("display({'k': 'v'})", timeout=T).results[0]
    assert (shown.json, shown.is_main_result) == ({"k": "v"}, False)


def test_long_strings_in_containers_stay_whole(ci: Sandbox) -> None:
    """text/plain is IPython's pretty layout: a long string in a dict is not split across lines."""
    text = ci.run_code("{'output': 'some long sentence ' * 6, 'n': 1}", timeout=T).text
    assert text == "{'output': '" + "some long sentence " * 6 + "',\n 'n': 1}"


def test_line_magics_cd_env_pwd_pip(ci: Sandbox) -> None:
    """%cd prints the new directory, %env sets and reads, %pwd returns, %pip runs pip with IPython's note."""
    assert _out(ci.run_code("%cd /tmp", timeout=T)) == "/tmp\n"
    assert ci.run_code("%pwd", timeout=T).text == "/tmp"
    assert _out(ci.run_code("%env GREETING=hi", timeout=T)) == "env: GREETING=hi\n"
    assert ci.run_code("%env GREETING", timeout=T).text == "hi"
    assert ci.run_code("import subprocess; subprocess.getoutput('echo $GREETING')", timeout=T).text == "hi"
    pip = _out(ci.run_code("%pip --version", timeout=T))
    assert pip.startswith("pip ")
    assert pip.endswith("\r\nNote: you may need to restart the kernel to use updated packages.\n")


def test_time_and_timeit_print_ipythons_lines(ci: Sandbox) -> None:
    """%time prints CPU and wall times and returns the value; %timeit prints IPython's summary line."""
    timed = ci.run_code("%time sum(range(10))", timeout=T)
    assert timed.text == "45"
    assert re.fullmatch(
        r"CPU times: user \S+ \S+, sys: \S+ \S+, total: \S+ \S+\nWall time: \S+ \S+\n", _out(timed)
    )
    line = _out(ci.run_code("%timeit -n 3 -r 2 sum(range(10))", timeout=T))
    slowest = r"(The slowest run took \S+ times longer than the fastest\. .*\n)?"  # on a loaded machine
    assert re.fullmatch(
        slowest + r"\S+ \S+ ± \S+ \S+ per loop \(mean ± std\. dev\. of 2 runs, 3 loops each\)\n", line
    )
    cell = ci.run_code("%%time\ny = 6\ny * 7", timeout=T)
    assert cell.text == "42"


def test_one_line_cells_call_magics_without_percent(ci: Sandbox) -> None:
    """IPython's automagic: `cd /tmp` or `pwd` alone is the magic unless a variable has that name."""
    ci.run_code("pass", timeout=T)  # not the first cell: that one carries E2B's env lines (see below)
    assert _out(ci.run_code("cd /tmp", timeout=T)) == "/tmp\n"
    assert ci.run_code("pwd", timeout=T).text == "/tmp"
    ci.run_code("pwd = 'mine'", timeout=T)
    assert ci.run_code("pwd", timeout=T).text == "mine"


def test_cell_magics_writefile_bash_capture_html(ci: Sandbox) -> None:
    """%%writefile writes, %%bash streams and raises on failure, %%capture keeps output, %%html displays."""
    ci.run_code("pass", timeout=T)  # not the first cell: that one carries E2B's env lines (see below)
    assert _out(ci.run_code("%%writefile /tmp/w.txt\nhello\n", timeout=T)) == "Writing /tmp/w.txt\n"
    assert ci.run_code("open('/tmp/w.txt').read()", timeout=T).text == "hello\\n"
    bash = ci.run_code("%%bash\necho out\necho err >&2\nexit 2", timeout=T)
    assert ("".join(bash.logs.stdout), "".join(bash.logs.stderr)) == ("out\n", "err\n")
    assert bash.error is not None
    assert bash.error.name == "CalledProcessError"
    assert (
        bash.error.value
        == "Command 'b'echo out\\necho err >&2\\nexit 2\\n'' returned non-zero exit status 2."
    )
    captured = ci.run_code("%%capture cap\nprint('quiet')\n!echo too", timeout=T)
    assert (captured.logs.stdout, captured.results) == ([], [])
    assert ci.run_code("cap.stdout", timeout=T).text == "quiet\\ntoo\\r\\n"
    (html,) = ci.run_code("%%html\n<b>x</b>", timeout=T).results
    assert (html.html, html.text, html.is_main_result) == (
        "<b>x</b>\n",
        "<IPython.core.display.HTML object>",
        False,
    )


def test_magic_errors_are_usage_errors(ci: Sandbox) -> None:
    """An unknown magic is IPython's UsageError (printed and the cell's error, no traceback)."""
    execution = ci.run_code("%nosuchmagic", timeout=T)
    assert execution.error is not None
    assert (execution.error.name, execution.error.value) == (
        "UsageError",
        "Line magic function `%nosuchmagic` not found.",
    )
    assert execution.logs.stderr == ["UsageError: Line magic function `%nosuchmagic` not found.\n"]
    unsupported = ci.run_code("%who", timeout=T).error
    assert unsupported is not None
    assert "is IPython's, but the local emulator's kernel does not run it" in unsupported.value


def test_envs_are_code_lines_as_e2b_writes_them(ci: Sandbox) -> None:
    """run_code(envs=) becomes lines before the cell: they count in tracebacks and a quote breaks the cell."""
    execution = ci.run_code("1 / 0", envs={"A": "1", "B": "2"}, timeout=T)
    assert execution.error is not None
    # the first cell of a context also sets envd's variables (E2B_SANDBOX, _ID, _TEMPLATE_ID): 3 + 2 lines
    assert "Cell In[1], line 6" in execution.error.traceback
    assert ci.run_code("import os; os.environ.get('A')", timeout=T).results == []  # cleaned up after the cell
    broken = ci.run_code("print('never')", envs={"QUOTED": "it's"}, timeout=T)
    assert broken.error is not None
    assert broken.error.name == "SyntaxError"
    assert broken.logs.stdout == []
    # JSON text's "\\n" escape is pasted into a string literal, where it becomes a newline
    mangled = ci.run_code("'\\n' in os.environ['J']", envs={"J": json.dumps({"a": "x\ny"})}, timeout=T)
    assert mangled.text == "True"


def test_os_is_imported_by_the_first_cell(ci: Sandbox) -> None:
    """E2B's env lines import os into the namespace, so a later cell may use os without importing it."""
    ci.run_code("x = 1", timeout=T)
    assert ci.run_code("os.path.join('a', 'b')", timeout=T).text == "a/b"
    assert ci.run_code("os.environ['E2B_SANDBOX']", timeout=T).text == "true"


def test_the_first_cell_of_a_context_is_not_one_line_nor_a_cell_magic(ci: Sandbox) -> None:
    """E2B puts envd's variables before a context's first cell: %%bash is then no cell magic, pwd no magic."""
    first = ci.run_code("%%bash\necho hi", timeout=T)
    assert first.error is not None
    # line 5 is `%%bash` read as a line magic, line 6 `echo hi` as Python (IPython 9 does the same)
    assert (first.error.name, "Cell In[1], line 6" in first.error.traceback) == ("SyntaxError", True)
    assert _out(ci.run_code("%%bash\necho hi", timeout=T)) == "hi\n"
    context = ci.create_code_context()
    assert ci.run_code("pwd", context=context, timeout=T).error is not None  # a NameError: no automagic
    assert ci.run_code("pwd", context=context, timeout=T).text == "/home/user"


def test_only_a_cells_first_error_is_reported(ci: Sandbox) -> None:
    """A cell that shows an error and then raises another reports the first, as E2B's server does."""
    execution = ci.run_code("get_ipython().run_cell('1 / 0')\nraise KeyError('k')", timeout=T)
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
