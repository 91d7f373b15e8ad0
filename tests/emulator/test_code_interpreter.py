"""The code-interpreter port through the real ``e2b_code_interpreter`` SDK (sync): run_code and contexts."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2b import InvalidArgumentException, NotFoundException, SandboxException
from e2b_code_interpreter import Sandbox

from pytest_e2b_env.emulator import Emulator

T = 30  # every cell's execution timeout: a hang fails the test instead of stalling the run


@pytest.fixture
def ci(opts: dict[str, str], run_id: str) -> Iterator[Sandbox]:
    """A code-interpreter sandbox (default template), killed after the test."""
    sandbox = Sandbox.create(timeout=120, metadata={"test_run": run_id}, **opts)
    yield sandbox
    sandbox.kill()


def test_last_expression_is_the_main_result(ci: Sandbox) -> None:
    """The value of a cell's last expression is execution.text, marked is_main_result."""
    execution = ci.run_code("1+1", timeout=T)
    assert execution.text == "2"
    assert [(r.text, r.is_main_result) for r in execution.results] == [("2", True)]
    assert execution.error is None
    assert execution.execution_count == 1


def test_state_persists_in_the_default_context(ci: Sandbox) -> None:
    """Globals, imports and functions survive between calls; the execution count goes up."""
    ci.run_code("import math\nx = 1\ndef f(v):\n    return v * 10", timeout=T)
    execution = ci.run_code("x += 1; f(x) + math.floor(0.5)", timeout=T)
    assert execution.text == "20"
    assert execution.execution_count == 2


def test_no_result_for_statements_none_or_trailing_semicolon(ci: Sandbox) -> None:
    """Assignments, None values and a trailing ';' give no result, as in IPython."""
    for code in ("y = 3", "None", "print", "3;", "3;  # hidden"):
        execution = ci.run_code(code, timeout=T)
        if code == "print":
            assert execution.text == "<built-in function print>"
            continue
        assert execution.results == [], code
        assert execution.text is None


def test_string_result_loses_its_quotes(ci: Sandbox) -> None:
    """A str value's repr is stripped of one pair of quotes (E2B's Result), so float() works on it."""
    assert ci.run_code("'0.75'", timeout=T).text == "0.75"
    assert float(ci.run_code("3 / 4", timeout=T).text or "nan") == 0.75
    assert ci.run_code("'it\"s'", timeout=T).text == 'it"s'


def test_stdout_stderr_and_subprocess_output_are_logged(ci: Sandbox) -> None:
    """print, sys.stderr and a subprocess writing to the inherited fds all reach execution.logs."""
    execution = ci.run_code(
        "import subprocess, sys\nprint('out')\nprint('err', file=sys.stderr)\n"
        "subprocess.run('echo child; echo childerr >&2', shell=True)",
        timeout=T,
    )
    assert "".join(execution.logs.stdout) == "out\nchild\n"
    assert "".join(execution.logs.stderr) == "err\nchilderr\n"


def test_callbacks_see_every_message_in_order(ci: Sandbox) -> None:
    """on_stdout, on_stderr, on_result and on_error get the messages the Execution collects."""
    seen: list[tuple[str, Any]] = []
    execution = ci.run_code(
        "import sys, time\nprint('a', flush=True)\ntime.sleep(0.3)\nprint('b', file=sys.stderr)\n"
        "display(5)\n7",
        on_stdout=lambda m: seen.append(("stdout", m.line)),
        on_stderr=lambda m: seen.append(("stderr", m.line)),
        on_result=lambda r: seen.append(("result", (r.text, r.is_main_result))),
        on_error=lambda e: seen.append(("error", e.name)),
        timeout=T,
    )
    assert seen == [("stdout", "a\n"), ("stderr", "b\n"), ("result", ("5", False)), ("result", ("7", True))]
    assert execution.text == "7"
    errors: list[str] = []
    ci.run_code("raise KeyError('k')", on_error=lambda e: errors.append(e.name), timeout=T)
    assert errors == ["KeyError"]


def test_rich_representations_become_result_formats(ci: Sandbox) -> None:
    """_repr_html_ / _repr_json_ / _repr_mimebundle_ fill the Result's named fields and extra."""
    execution = ci.run_code(
        "class Rich:\n"
        "    def _repr_html_(self): return '<b>x</b>'\n"
        "    def _repr_json_(self): return {'k': 1}\n"
        "    def _repr_mimebundle_(self, include=None, exclude=None): return {'application/x-custom': 'c'}\n"
        "    def __repr__(self): return 'Rich()'\n"
        "Rich()",
        timeout=T,
    )
    (result,) = execution.results
    assert (result.text, result.html, result.json) == ("Rich()", "<b>x</b>", {"k": 1})
    assert result.extra == {"application/x-custom": "c"}
    assert set(result.formats()) == {"text", "html", "json", "application/x-custom"}


def test_error_has_name_value_and_traceback_and_state_survives(ci: Sandbox) -> None:
    """An exception is execution.error (IPython-shaped traceback); earlier state is kept."""
    ci.run_code("kept = 41", timeout=T)
    execution = ci.run_code("def g():\n    return 1 / 0\ng()", timeout=T)
    assert execution.error is not None
    assert (execution.error.name, execution.error.value) == ("ZeroDivisionError", "division by zero")
    assert "Cell In[2], line 3" in execution.error.traceback
    assert "----> 2     return 1 / 0" in execution.error.traceback
    assert execution.error.traceback.endswith("ZeroDivisionError: division by zero")
    assert execution.results == []
    assert ci.run_code("kept + 1", timeout=T).text == "42"


def test_syntax_error_runs_nothing(ci: Sandbox) -> None:
    """Source that does not parse is a SyntaxError and none of it runs."""
    execution = ci.run_code("ran = True\n1 +", timeout=T)
    assert execution.error is not None
    assert execution.error.name == "SyntaxError"
    assert ci.run_code("'ran' in dir()", timeout=T).text == "False"


def test_input_is_refused_as_ipykernel_refuses_it(ci: Sandbox) -> None:
    """input() in a cell raises ipykernel's StdinNotImplementedError; the cell's stdin is empty."""
    execution = ci.run_code("input('name? ')", timeout=T)
    assert execution.error is not None
    assert execution.error.name == "StdinNotImplementedError"
    assert ci.run_code("import sys; sys.stdin.read()", timeout=T).text == ""


def test_sys_exit_is_an_error_not_a_restart(ci: Sandbox) -> None:
    """sys.exit(3) in a cell is a SystemExit error (IPython catches it); the state stays."""
    ci.run_code("kept = 1", timeout=T)
    execution = ci.run_code("import sys; sys.exit(3)", timeout=T)
    assert execution.error is not None
    assert (execution.error.name, execution.error.value) == ("SystemExit", "3")
    assert ci.run_code("kept", timeout=T).text == "1"


def test_crashed_kernel_is_reported_as_a_restart(ci: Sandbox) -> None:
    """A cell that kills its kernel gets E2B's ContextRestarting error; the next cell has fresh state."""
    ci.run_code("kept = 1", timeout=T)
    execution = ci.run_code("print('bye', flush=True)\nimport os\nos._exit(1)", timeout=T)
    assert execution.error is not None
    assert (execution.error.name, execution.error.value) == ("ContextRestarting", "Context was restarted")
    after = ci.run_code("'kept' in dir()", timeout=T)
    assert (after.text, after.execution_count) == ("False", 1)


def test_exit_ends_the_cell_then_the_kernel(ci: Sandbox) -> None:
    """exit() ends its cell normally; the kernel then stops and the next cell starts afresh."""
    ci.run_code("kept = 1", timeout=T)
    assert ci.run_code("print('last'); exit()", timeout=T).error is None
    assert ci.run_code("'kept' in dir()", timeout=T).text == "False"


def test_envs_apply_to_one_cell_and_sandbox_envs_to_all(opts: dict[str, str], run_id: str) -> None:
    """run_code(envs=) is seen by that cell and its children only; create(envs=) by every cell."""
    sandbox = Sandbox.create(timeout=60, envs={"BOX_VAR": "box"}, metadata={"test_run": run_id}, **opts)
    try:
        code = "import os, subprocess\n(os.environ.get('CELL_VAR'), subprocess.getoutput('echo $CELL_VAR'))"
        assert sandbox.run_code(code, envs={"CELL_VAR": "cell"}, timeout=T).text == "('cell', 'cell')"
        assert sandbox.run_code(code, timeout=T).text == "(None, '')"
        assert sandbox.run_code("import os; os.environ['BOX_VAR']", timeout=T).text == "box"
    finally:
        sandbox.kill()


def test_kernel_runs_as_root_in_home_user_and_shares_the_sandbox(ci: Sandbox, needs_namespaces: None) -> None:
    """The kernel is root in /home/user (E2B's template) and sees the same files as commands."""
    execution = ci.run_code(
        "import os, getpass\nopen('/tmp/from_kernel.txt', 'w').write('k')\n(getpass.getuser(), os.getcwd())",
        timeout=T,
    )
    assert execution.text == "('root', '/home/user')"
    assert ci.commands.run("cat /tmp/from_kernel.txt").stdout == "k"
    ci.files.write("/home/user/from_files.txt", "f")
    assert ci.run_code("open('/home/user/from_files.txt').read()", timeout=T).text == "f"


def test_host_files_are_not_reachable(ci: Sandbox, needs_namespaces: None) -> None:
    """A file the host made in its own /tmp is not visible to a cell (the sandbox has its own /tmp)."""
    with tempfile.TemporaryDirectory(prefix="ci-host-only-") as folder:
        marker = Path(folder) / "host-only.txt"
        marker.write_text("host")
        assert ci.run_code(f"import os; os.path.exists({str(marker)!r})", timeout=T).text == "False"
    assert ci.run_code("import os; os.getpid() < 1000", timeout=T).text == "True"  # own pid namespace


def test_any_template_serves_the_port(opts: dict[str, str], run_id: str) -> None:
    """A sandbox from any template id answers run_code (every template runs the same image)."""
    sandbox = Sandbox.create(template="base", timeout=60, metadata={"test_run": run_id}, **opts)
    try:
        assert sandbox.run_code("6 * 7", language="python", timeout=T).text == "42"
    finally:
        sandbox.kill()


def test_cell_functions_pickle_for_multiprocessing(ci: Sandbox) -> None:
    """Functions defined in a cell live in __main__, so a multiprocessing pool runs them (as in IPython)."""
    execution = ci.run_code(
        "import multiprocessing as mp\ndef square(v):\n    return v * v\n"
        "with mp.get_context('fork').Pool(2) as pool:\n    result = pool.map(square, [1, 2, 3])\nresult",
        timeout=T,
    )
    assert execution.error is None, execution.error
    assert execution.text == "[1, 4, 9]"


def test_huge_values_and_errors_stay_bounded(ci: Sandbox) -> None:
    """A huge repr, a huge exception message and deep recursion come back cut, never breaking the kernel."""
    big = ci.run_code("'x' * (3 * 1024 * 1024)", timeout=T)
    assert 0 < len(big.text or "") <= 1024 * 1024
    error = ci.run_code("raise ValueError('v' * (3 * 1024 * 1024))", timeout=T).error
    assert error is not None
    assert error.name == "ValueError"
    assert len(error.value) <= 1024 * 1024
    deep = ci.run_code("def r(n):\n    return r(n + 1)\nr(0)", timeout=T).error
    assert deep is not None
    assert deep.name == "RecursionError"
    assert len(deep.traceback) <= 2 * 1024 * 1024
    assert ci.run_code("1 + 1", timeout=T).text == "2"


def test_large_output_arrives_whole_in_bounded_chunks(ci: Sandbox) -> None:
    """4 MiB printed in one cell arrives complete, in stream messages of at most 32 KiB."""
    execution = ci.run_code("import sys\nsys.stdout.write('x' * (4 * 1024 * 1024))", timeout=T)
    assert sum(len(chunk) for chunk in execution.logs.stdout) == 4 * 1024 * 1024
    assert max(len(chunk) for chunk in execution.logs.stdout) <= 32 * 1024


def test_contexts_are_isolated_and_keep_their_cwd(ci: Sandbox) -> None:
    """create_code_context(cwd=) gets its own globals and cwd; list_code_contexts shows it."""
    ci.run_code("shared = 'default'", timeout=T)
    context = ci.create_code_context(cwd="/tmp")
    assert (context.language, context.cwd) == ("python", "/tmp")
    assert ci.run_code("import os; os.getcwd()", context=context, timeout=T).text == "/tmp"
    assert ci.run_code("'shared' in dir()", context=context, timeout=T).text == "False"
    ci.run_code("shared = 'mine'", context=context, timeout=T)
    assert ci.run_code("shared", timeout=T).text == "default"
    listed = {(c.id, c.language, c.cwd) for c in ci.list_code_contexts()}
    assert (context.id, "python", "/tmp") in listed
    assert any(cwd == "/home/user" for _, _, cwd in listed)  # the default context


def test_restart_clears_the_context_state(ci: Sandbox) -> None:
    """restart_code_context drops the globals; the context keeps its id and cwd."""
    context = ci.create_code_context(cwd="/tmp")
    ci.run_code("v = 1", context=context, timeout=T)
    ci.restart_code_context(context)
    execution = ci.run_code("import os; ('v' in dir(), os.getcwd())", context=context, timeout=T)
    assert execution.text == "(False, '/tmp')"


def test_removed_or_unknown_context_is_not_found(ci: Sandbox) -> None:
    """A removed context disappears from the list; using it, or an unknown id, raises NotFoundException."""
    context = ci.create_code_context()
    ci.remove_code_context(context.id)
    assert context.id not in {c.id for c in ci.list_code_contexts()}
    with pytest.raises(NotFoundException, match=context.id):
        ci.run_code("1", context=context, timeout=T)
    with pytest.raises(NotFoundException, match="no-such-context"):
        ci.restart_code_context("no-such-context")


def test_other_languages_are_a_clear_error(ci: Sandbox) -> None:
    """Only Python runs here: another language is a SandboxException naming it and the fix."""
    with pytest.raises(SandboxException, match=r"language 'javascript'.*runs Python only"):
        ci.run_code("1", language="js", timeout=T)
    with pytest.raises(SandboxException, match="language 'r'"):
        ci.create_code_context(language="r")
    with pytest.raises(InvalidArgumentException):  # the SDK's own check
        ci.run_code("1", language="python", context=ci.create_code_context(), timeout=T)


def test_ledger_names_the_interpreter_operations(ci: Sandbox, emu: Emulator) -> None:
    """run_code and the context calls are in the ledger under their own op names."""
    mark = emu.ledger_mark()
    ci.run_code("1", timeout=T)
    context = ci.create_code_context()
    ci.list_code_contexts()
    ci.restart_code_context(context)
    ci.remove_code_context(context)
    entries = [e for e in emu.ledger(since=mark) if e["sandbox_id"] == ci.sandbox_id]
    ops = [(e["op"], e["route"], e["status"]) for e in entries]
    assert ops == [
        ("run_code", "POST /execute", 200),
        ("create_code_context", "POST /contexts", 200),
        ("list_code_contexts", "GET /contexts", 200),
        ("restart_code_context", "POST /contexts/{id}/restart", 200),
        ("remove_code_context", "DELETE /contexts/{id}", 200),
    ]


def test_the_port_takes_the_traffic_token_not_the_envd_one(ci: Sandbox, emu: Emulator) -> None:
    """Port 49999 answers with E2B-Traffic-Access-Token (all the SDK's context calls send), 403 without."""
    import httpx

    headers = {"E2b-Sandbox-Id": ci.sandbox_id, "E2b-Sandbox-Port": "49999"}
    envd_only = httpx.get(
        f"{emu.url}/contexts", headers={**headers, "X-Access-Token": str(ci._envd_access_token)}, timeout=T
    )
    assert envd_only.status_code == 403
    token = {"E2B-Traffic-Access-Token": str(ci.traffic_access_token)}
    listed = httpx.get(f"{emu.url}/contexts", headers={**headers, **token}, timeout=T)
    assert listed.status_code == 200
    assert [c["language"] for c in listed.json()] == ["python"]
