"""IPython 9's ``%time`` / ``%%time`` and ``%timeit`` / ``%%timeit``, with IPython's output.

``%time`` runs its statement once in the cell's namespace and prints ``CPU times: user ..., sys:
..., total: ...`` and ``Wall time: ...`` (units as IPython picks them: ``μs`` on a UTF-8 stream),
returning the value of a final expression. ``%timeit`` compiles the statement into IPython's timing
loop, picks the loop count that takes at least 0.2 s (unless ``-n``), repeats 7 times (unless
``-r``) and prints ``<mean> ± <std> per loop (mean ± std. dev. of R runs, N loops each)``; ``-q``,
``-o``, ``-p``, ``-t`` and ``-v`` as in IPython.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import itertools
import math
import resource
import sys
import time
import timeit as timeit_module
import tokenize
from io import StringIO
from typing import Any

from . import ipython_shell as S


def options(line: str, spec: str) -> tuple[dict[str, str], str]:
    """Leading ``-x`` / ``-xVALUE`` / ``-x VALUE`` options (``spec`` as getopt's) and the rest, verbatim."""
    opts: dict[str, str] = {}
    rest = line.lstrip()
    while rest.startswith("-") and len(rest) > 1 and rest[1] in spec.replace(":", ""):
        flag = rest[1]
        takes = spec[spec.index(flag) + 1 : spec.index(flag) + 2] == ":"
        rest = rest[2:]
        value = ""
        if takes:
            rest = rest.lstrip() if not rest or rest[0].isspace() else rest
            value, _, rest = rest.partition(" ")
        elif rest and not rest[0].isspace():
            rest = "-" + rest  # combined flags: -qo
        opts[flag] = value
        rest = rest.lstrip()
    return opts, rest


def no_var_expand(func: Any) -> Any:
    """IPython's marks for these magics: their line is not expanded, and they see the caller's locals."""
    func.no_var_expand = True
    func.needs_local_scope = True
    return func


def _format_time(timespan: float, precision: int = 3) -> str:
    """IPython's ``_format_time``."""
    if timespan >= 60.0:
        parts, out, left = [("d", 86400), ("h", 3600), ("min", 60), ("s", 1)], [], timespan
        for suffix, length in parts:
            value = int(left / length)
            if value > 0:
                left = left % length
                out.append(f"{value}{suffix}")
            if left < 1:
                break
        return " ".join(out)
    units = ["s", "ms", "us", "ns"]
    encoding = getattr(sys.stdout, "encoding", None)
    if encoding:
        with contextlib.suppress(UnicodeEncodeError, LookupError):
            "\u03bc".encode(encoding)
            units = ["s", "ms", "\u03bcs", "ns"]
    order = min(-int(math.floor(math.log10(timespan)) // 3), 3) if timespan > 0.0 else 3
    return "%.*g %s" % (precision, timespan * [1, 1e3, 1e6, 1e9][order], units[order])  # noqa: UP031 - IPython's format ("%.*g" has no f-string form)


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


@no_var_expand
def time_(shell: S.Shell, line: str, cell: str | None = None, local_ns: Any = None) -> Any:
    raise_errors = "--no-raise-error" not in line.split()
    line = " ".join(w for w in line.split(" ") if w != "--no-raise-error").strip()
    if line and cell:
        raise S.UsageError("Can't use statement directly after '%%time'!")
    tree = ast.parse(shell.host.transform(cell if cell else line))
    value_tree = None
    code_tree: ast.mod
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
        mode, source, code_tree = "eval", "<timed eval>", ast.Expression(tree.body[0].value)
    else:
        mode, source, code_tree = "exec", "<timed exec>", tree
        if len(tree.body) > 1 and isinstance(tree.body[-1], ast.Expr):
            value_tree = ast.Expression(tree.body[-1].value)
            code_tree = ast.Module(tree.body[:-1], [])
    code = shell.host.compile(code_tree, source, mode)
    glob = shell.user_ns
    local_ns = glob if cell else local_ns
    wall, start = time.time(), _cpu()
    out: Any = None
    failure: BaseException | None = None
    try:
        out = eval(code, glob, local_ns)
        if value_tree is not None:
            out = eval(shell.host.compile(value_tree, source, "eval"), glob, local_ns)
    except KeyboardInterrupt as exc:
        failure, raise_errors = exc, True
    except Exception as exc:
        failure = exc
    end, wall_time = _cpu(), time.time() - wall
    user, system = end[0] - start[0], end[1] - start[1]
    total = _format_time(user + system)
    print(f"CPU times: user {_format_time(user)}, sys: {_format_time(system)}, total: {total}")
    print(f"Wall time: {_format_time(wall_time)}")
    if failure is not None:
        if raise_errors:
            raise failure
        return None
    if cell is None and semicolon_at_end(line):
        return None
    return out


class TimeitResult:
    """What ``%timeit -o`` returns."""

    def __init__(
        self, loops: int, repeat: int, all_runs: list[float], compile_time: float, precision: int
    ) -> None:
        self.loops, self.repeat, self.all_runs = loops, repeat, all_runs
        self.best, self.worst = min(all_runs) / loops, max(all_runs) / loops
        self.compile_time, self._precision = compile_time, precision
        self.timings = [dt / loops for dt in all_runs]

    @property
    def average(self) -> float:
        return math.fsum(self.timings) / len(self.timings)

    @property
    def stdev(self) -> float:
        mean = self.average
        return (math.fsum([(x - mean) ** 2 for x in self.timings]) / len(self.timings)) ** 0.5

    def __str__(self) -> str:
        pm = "+-"
        encoding = getattr(sys.stdout, "encoding", None)
        if encoding:
            with contextlib.suppress(UnicodeEncodeError, LookupError):
                "\xb1".encode(encoding)
                pm = "\xb1"
        return (
            f"{_format_time(self.average, self._precision)} {pm} {_format_time(self.stdev, self._precision)} "
            f"per loop (mean {pm} std. dev. of {self.repeat} run{'' if self.repeat == 1 else 's'}, "
            f"{self.loops:,} loop{'' if self.loops == 1 else 's'} each)"
        )

    def __repr__(self) -> str:
        return f"<TimeitResult : {self}>"


class _Filler(ast.NodeTransformer):
    def __init__(self, setup: ast.Module, stmt: ast.Module) -> None:
        self.setup, self.stmt = setup, stmt

    def visit_Expr(self, node: ast.Expr) -> Any:
        if isinstance(node.value, ast.Name) and node.value.id == "setup":
            return self.setup.body
        if isinstance(node.value, ast.Name) and node.value.id == "stmt":
            return self.stmt.body
        return node


_TEMPLATE = (  # IPython's timing loop; `setup` and `stmt` are replaced by the statements
    "def inner(_it, _timer):\n    setup\n    _t0 = _timer()\n    for _i in _it:\n        stmt\n"
    "    _t1 = _timer()\n    return _t1 - _t0\n"
)


@no_var_expand
def timeit(shell: S.Shell, line: str, cell: str | None = None, local_ns: Any = None) -> Any:
    opts, stmt = options(line, "n:r:tcp:qov:")
    if stmt == "" and cell is None:
        return None
    number, repeat = int(opts.get("n") or 0), int(opts.get("r") or 7)
    precision = int(opts.get("p") or 3)
    timer = time.time if "t" in opts else timeit_module.default_timer
    setup_src, stmt_src = ("pass", stmt) if cell is None else (stmt or "pass", cell)
    setup = ast.parse(shell.host.transform(setup_src))
    body = ast.parse(shell.host.transform(stmt_src))
    started = time.process_time()
    tree = ast.fix_missing_locations(_Filler(setup, body).visit(ast.parse(_TEMPLATE)))
    code = shell.host.compile(tree, "<magic-timeit>", "exec")
    compile_time = time.process_time() - started
    glob, ns = shell.user_ns, {}  # type: ignore[var-annotated]
    saved = (
        {k: glob[k] for k in (local_ns or {}) if k in glob} if cell is None and local_ns is not glob else {}
    )
    if cell is None and local_ns and local_ns is not glob:
        glob.update(local_ns)
    exec(code, glob, ns)
    inner = ns["inner"]

    def run(n: int) -> float:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return float(inner(itertools.repeat(None, n), timer))
        finally:
            if enabled:
                gc.enable()

    if number == 0:
        for index in range(10):
            number = 10**index
            if run(number) >= 0.2:
                break
    result = TimeitResult(number, repeat, [run(number) for _ in range(repeat)], compile_time, precision)
    glob.update(saved)
    if "q" not in opts:
        if result.worst > 4 * result.best and result.best > 0 and result.worst > 1e-6:
            print(
                f"The slowest run took {result.worst / result.best:0.2f} times longer than the fastest. "
                "This could mean that an intermediate result is being cached."
            )
        print(result)
        if compile_time > 0.1:
            print(f"Compiler time: {compile_time:.2f} s")
    if "v" in opts:
        shell.user_ns[opts["v"]] = result
    return result if "o" in opts else None


def semicolon_at_end(source: str) -> bool:
    """IPython's rule for hiding a value: the last token, comments aside, is ``;``."""
    try:
        tokens = list(tokenize.generate_tokens(StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.ENDMARKER,
        tokenize.INDENT,
        tokenize.DEDENT,
    }
    kept = [t for t in tokens if t.type not in skip]
    return bool(kept) and kept[-1].string == ";"
