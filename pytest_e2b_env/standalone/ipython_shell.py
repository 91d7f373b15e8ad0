"""The ``get_ipython()`` of the emulator's kernel: IPython 9's shell escapes and magic dispatch.

Cells transformed by ``ipython_input`` call this object, as they call IPython's shell on E2B:

* ``system`` (``!cmd``): the command runs through ``$SHELL -c`` (``sh`` when SHELL is unset, as in
  E2B's kernel) on a pseudo-terminal of 24x80, as IPython's pexpect runner does: stdout and stderr
  arrive together on the cell's stdout, with the terminal's ``\\r\\n`` line ends; a failing
  command is no error (its status is ``_exit_code``, a signal negative); a command ending in ``&``
  is refused; an interrupt kills it and the cell goes on.
* ``getoutput`` (``x = !cmd``, ``!!cmd``): the same shell on pipes, stderr merged into stdout,
  split into lines (``SList``).
* ``$name`` and ``{expression}`` in a command or a magic's arguments are replaced from the cell's
  namespace (IPython's ``var_expand``: all or nothing; ``$$`` is a ``$``).
* ``run_line_magic`` / ``run_cell_magic``: the magics of ``ipython_magics``; a magic IPython has
  but this kernel does not is a ``UsageError`` saying so, an unknown one IPython's ``UsageError``.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator, Mapping, Sequence
from io import StringIO
from string import Formatter
from typing import Any

TERMINAL_SIZE = (24, 80)  # pexpect's default window


class UsageError(Exception):
    """IPython's error for a magic used wrongly: shown as one line, without a traceback."""


class SList(list):
    """IPython's list of output lines: ``.l`` the list, ``.n`` joined by newlines, ``.s`` by spaces."""

    @property
    def l(self) -> SList:  # noqa: E743 - IPython's name
        return self

    list = l

    @property
    def n(self) -> str:
        return "\n".join(self)

    nlstr = n

    @property
    def s(self) -> str:
        return " ".join(self)

    spstr = s

    @property
    def p(self) -> builtins_list:
        return [p for p in (os.path.expanduser(x) for x in self) if os.path.exists(p)]

    paths = p

    def grep(self, pattern: Any, prune: bool = False, field: int | None = None) -> SList:
        """The lines matching ``pattern`` (a regex or a predicate); ``prune`` keeps the others."""
        pred = (lambda x: re.search(pattern, x, re.IGNORECASE)) if isinstance(pattern, str) else pattern

        def text(line: str) -> str:
            if field is None:
                return line
            parts = line.split()
            return parts[field] if len(parts) > field else ""

        return SList([line for line in self if bool(pred(text(line))) != prune])

    def fields(self, *indexes: int) -> SList:
        """The whitespace-separated fields at ``indexes`` of every line (all of them without any)."""
        rows = [line.split() for line in self]
        if not indexes:
            return SList([" ".join(row) for row in rows])
        return SList([" ".join(row[i] for i in indexes if -len(row) <= i < len(row)) for row in rows])


builtins_list = list


class LSString(str):
    """IPython's output string: ``.l`` its lines, ``.n`` itself, ``.s`` its lines joined by spaces."""

    @property
    def l(self) -> builtins_list:  # noqa: E743 - IPython's name
        return self.split("\n")

    @property
    def n(self) -> str:
        return str(self)

    @property
    def s(self) -> str:
        return " ".join(self.split("\n"))


class CapturedIO:
    """What ``%%capture name`` stores: ``.stdout``, ``.stderr``, ``.outputs``; ``show()`` replays them."""

    def __init__(self, stdout: StringIO | None, stderr: StringIO | None, outputs: builtins_list) -> None:
        self._stdout, self._stderr, self._outputs = stdout, stderr, outputs
        self._display: Any = None

    def __str__(self) -> str:
        return self.stdout

    @property
    def stdout(self) -> str:
        return self._stdout.getvalue() if self._stdout else ""

    @property
    def stderr(self) -> str:
        return self._stderr.getvalue() if self._stderr else ""

    @property
    def outputs(self) -> builtins_list:
        return builtins_list(self._outputs)

    def show(self) -> None:
        sys.stdout.write(self.stdout)
        sys.stderr.write(self.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        for data in self._outputs:
            if self._display is not None:
                self._display(data)

    __call__ = show


# ------------------------------------------------------------------ variable expansion
class _DollarFormatter(Formatter):
    """IPython's DollarFormatter: ``{expr}`` evaluated in the namespace, ``$name`` too, ``$$`` is ``$``."""

    _dollar = re.compile(r"(.*?)\$(\$?[\w\.]+)(?=([^']*'[^']*')*[^']*$)")

    def parse(self, fmt: str) -> Iterator[tuple[Any, Any, Any, Any]]:
        for literal, field, spec, conversion in Formatter.parse(self, fmt):
            done, text = 0, ""
            for match in self._dollar.finditer(literal):
                new_text, new_field = match.group(1, 2)
                if new_field.startswith("$"):
                    text += new_text + new_field
                else:
                    yield text + new_text, new_field, "", None
                    text = ""
                done = match.end()
            yield text + literal[done:], field, spec, conversion

    def vformat(self, fmt: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        out = []
        for literal, field, spec, conversion in self.parse(fmt):
            if literal:
                out.append(literal)
            if field is not None:
                if spec:
                    field = ":".join([field, spec])
                value = eval(field, dict(kwargs))
                out.append(self.format_field(self.convert_field(value, conversion), ""))
        return "".join(out)


_FORMATTER = _DollarFormatter()


# ------------------------------------------------------------------ running commands
def _shell_path() -> str:
    name = os.environ.get("SHELL", "sh")
    found = shutil.which(name)
    if found is None:
        raise OSError(f'"{name}" shell not found')
    return found


def run_on_terminal(cmd: str) -> int:
    """Run ``cmd`` through the shell on a pseudo-terminal, copying what it writes to sys.stdout.

    Returns pexpect's status: the exit status, minus the signal for a killed command (and for an
    exit status over 128, as a shell reports a signal).
    """
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *TERMINAL_SIZE, 0, 0))
        proc = subprocess.Popen(
            [_shell_path(), "-c", cmd],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        _copy_terminal(master, decoder, None)
    except KeyboardInterrupt:  # pexpect sends ^C, reads what follows for 0.2 s, then kills
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGINT)
        with contextlib.suppress(KeyboardInterrupt):
            _copy_terminal(master, decoder, 0.2)
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        os.close(master)
    status = proc.wait()
    if status < 0:
        return status
    return -(status - 128) if status > 128 else status


def _copy_terminal(master: int, decoder: Any, limit: float | None) -> None:
    while True:
        if limit is not None and not select.select([master], [], [], limit)[0]:
            return
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: nothing holds the terminal any more
            chunk = b""
        text = decoder.decode(chunk, final=not chunk)
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
        if not chunk:
            return


def getoutput(cmd: str) -> str:
    """IPython's ``getoutput``: stdout and stderr of ``cmd`` through the shell, on pipes."""
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(
        cmd,
        shell=True,
        executable=os.environ.get("SHELL"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        close_fds=True,
    )
    out: bytes | None
    try:
        out = proc.communicate()[0]
    except KeyboardInterrupt:
        print("^C")
        out = None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
    return "" if out is None else out.decode("utf-8", "replace")


# ------------------------------------------------------------------ the shell
class Shell:
    """What ``get_ipython()`` gives a cell. ``host`` is the kernel (namespace, display, nested cells)."""

    def __init__(self, host: Any, line_magics: dict[str, Any], cell_magics: dict[str, Any]) -> None:
        self.host = host
        self.line_magics = line_magics
        self.cell_magics = cell_magics

    @property
    def user_ns(self) -> dict[str, Any]:
        return self.host.ns

    @property
    def user_global_ns(self) -> dict[str, Any]:
        return self.host.ns

    def system(self, cmd: str) -> None:
        """``!cmd``: run it on a terminal; its status goes to ``_exit_code``."""
        if cmd.rstrip().endswith("&"):
            raise OSError("Background processes not supported.")
        self.user_ns["_exit_code"] = run_on_terminal(self.var_expand(cmd, depth=1))

    system_piped = system

    def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
        """``!!cmd`` / ``x = !cmd``: the command's output lines."""
        if cmd.rstrip().endswith("&"):
            raise OSError("Background processes not supported.")
        out = getoutput(self.var_expand(cmd, depth=depth + 1))
        return SList(out.splitlines()) if split else LSString(out)

    def var_expand(self, cmd: str, depth: int = 0) -> str:
        """``cmd`` with ``$name`` / ``{expr}`` replaced from the namespace (unchanged if any fails)."""
        ns = dict(self.user_ns)
        with contextlib.suppress(ValueError):
            ns.update(sys._getframe(depth + 1).f_locals)
        try:
            return _FORMATTER.vformat(cmd, args=[], kwargs=ns)
        except Exception:
            return cmd

    def find_magic(self, name: str, kind: str = "line") -> Any:
        return (self.line_magics if kind == "line" else self.cell_magics).get(name)

    def run_line_magic(self, magic_name: str, line: str, _stack_depth: int = 1) -> Any:
        """``%name line``."""
        magic = self.line_magics.get(magic_name)
        if magic is None:
            raise UsageError(_missing("line", magic_name, magic_name in self.cell_magics))
        args = line if getattr(magic, "no_var_expand", False) else self.var_expand(line, _stack_depth)
        kwargs = {}
        if getattr(magic, "needs_local_scope", False):
            kwargs["local_ns"] = sys._getframe(_stack_depth).f_locals
        return magic(self, args, **kwargs)

    def run_cell_magic(self, magic_name: str, line: str, cell: str) -> Any:
        """``%%name line`` over the cell's body."""
        magic = self.cell_magics.get(magic_name)
        if magic is None:
            raise UsageError(_missing("cell", magic_name, magic_name in self.line_magics))
        if cell == "":
            message = f"%%{magic_name} is a cell magic, but the cell body is empty."
            if magic_name in self.line_magics:
                message += f" Did you mean the line magic %{magic_name} (single %)?"
            raise UsageError(message)
        args = line if getattr(magic, "no_var_expand", False) else self.var_expand(line, 2)
        return magic(self, args, cell)

    def magic(self, arg_s: str) -> Any:
        """IPython's deprecated ``magic('name args')``."""
        name, _, line = arg_s.lstrip("%").partition(" ")
        return self.run_line_magic(name, line, _stack_depth=2)

    def show_usage(self) -> None:
        """``?`` alone: IPython pages its usage text, which E2B does not show."""

    def run_cell(self, raw_cell: str, store_history: bool = False, silent: bool = False, **_kw: Any) -> Any:
        """Run source as a cell of its own (no new execution count), its errors shown."""
        return self.host.run_nested(raw_cell)

    def ex(self, cmd: str) -> None:
        exec(cmd, self.user_ns)

    def ev(self, expr: str) -> Any:
        return eval(expr, self.user_ns)


#: The magics IPython 9 (with ipykernel) has, to tell "not supported here" from "does not exist".
IPYTHON_LINE_MAGICS = frozenset(
    "alias alias_magic autoawait autocall automagic autosave bookmark cat cd clear code_wrap colors "  # noqa: SIM905 - a word list reads better than 100 quoted items
    "conda config connect_info cp debug dhist dirs doctest_mode ed edit env gui hist history "
    "killbgscripts ldir less lf lk ll load load_ext loadpy logoff logon logstart logstate logstop ls "
    "lsmagic lx macro magic mamba man matplotlib micromamba mkdir more mv notebook page pastebin pdb "
    "pdef pdoc pfile pinfo pinfo2 pip popd pprint precision prun psearch psource pushd pwd pycat "
    "pylab qtconsole quickref recall rehashx reload_ext rep rerun reset reset_selective rm rmdir run "
    "save sc set_env sx system tb time timeit unalias unload_ext uv who who_ls whos xdel xmode".split()
)
IPYTHON_CELL_MAGICS = frozenset(
    "! HTML SVG bash capture code_wrap debug file html javascript js latex markdown perl prun pypy "  # noqa: SIM905 - as above
    "python python2 python3 ruby script sh svg sx system time timeit writefile".split()
)


def _missing(kind: str, name: str, other_kind: bool) -> str:
    prefix = "%" if kind == "line" else "%%"
    known = IPYTHON_LINE_MAGICS if kind == "line" else IPYTHON_CELL_MAGICS
    if name in known:
        return (
            f"{'Line magic function' if kind == 'line' else 'Cell magic'} `{prefix}{name}` is IPython's, "
            "but the local emulator's kernel does not run it "
            "(pytest-e2b-env docs emulator lists the magics it runs)."
        )
    if kind == "line":
        extra = f" (But cell magic `%%{name}` exists, did you mean that instead?)" if other_kind else ""
        return f"Line magic function `%{name}` not found{extra}."
    extra = f" (But line magic `%{name}` exists, did you mean that instead?)" if other_kind else ""
    return f"Cell magic `%%{name}` not found{extra}."
