"""The IPython 9 magics the emulator's kernel runs, with IPython's output and errors.

Line magics: ``%pip``, ``%cd``, ``%pwd``, ``%env``, ``%set_env``, ``%time``, ``%timeit``,
``%system`` / ``%sx``, the shell aliases (``%ls``, ``%cat``, ``%cp``, ``%mv``, ``%rm``, ``%mkdir``,
``%rmdir``, ``%ll``, ...), ``%matplotlib`` (nothing to do: no inline backend here), ``%load_ext``,
``%pinfo`` (``obj?``: nothing shown, as E2B shows no pager output). Cell magics: ``%%bash``,
``%%sh`` and the other script magics, ``%%script``, ``%%writefile``, ``%%capture``, ``%%time``,
``%%timeit``, ``%%html``, ``%%markdown``, ``%%latex``, ``%%svg``, ``%%javascript`` / ``%%js``,
``%%sx`` / ``%%system`` / ``%%!``. Each is a function ``(shell, line[, cell], **kw)``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from . import ipython_shell as S
from . import ipython_timing as T

UsageError = S.UsageError
ALIASES = {  # IPython's default aliases on Linux
    "mkdir": "mkdir",
    "rmdir": "rmdir",
    "mv": "mv",
    "rm": "rm",
    "cp": "cp",
    "cat": "cat",
    "ls": "ls -F --color",
    "ll": "ls -F -o --color",
    "lf": "ls -F -o --color %l | grep ^-",
    "lk": "ls -F -o --color %l | grep ^l",
    "ldir": "ls -F -o --color %l | grep /$",
    "lx": "ls -F -o --color %l | grep ^-..x",
}
SCRIPTS = ("sh", "bash", "perl", "ruby", "python", "python2", "python3", "pypy")
DISPLAY = {  # cell magic -> (MIME type, the IPython display class whose repr is text/plain)
    "html": ("text/html", "HTML"),
    "HTML": ("text/html", "HTML"),
    "markdown": ("text/markdown", "Markdown"),
    "latex": ("text/latex", "Latex"),
    "svg": ("image/svg+xml", "SVG"),
    "SVG": ("image/svg+xml", "SVG"),
    "javascript": ("application/javascript", "Javascript"),
    "js": ("application/javascript", "Javascript"),
}


# ------------------------------------------------------------------ shell and files
def pip(shell: S.Shell, line: str) -> None:
    shell.system(" ".join([shlex.quote(sys.executable), "-m", "pip", line]))
    print("Note: you may need to restart the kernel to use updated packages.")


def pwd(shell: S.Shell, line: str) -> str:
    try:
        return os.getcwd()
    except FileNotFoundError as exc:
        raise UsageError("CWD no longer exists - please use %cd to change directory.") from exc


def cd(shell: S.Shell, line: str) -> None:
    history: list[Any] = shell.user_ns.setdefault("_dh", [])
    try:
        old = os.getcwd()
    except FileNotFoundError:
        old = None
    opts, target = T.options(line, "qb")
    if target == "-":
        if len(history) < 2:
            raise UsageError("%cd -: No previous directory to change to.")
        target = str(history[-2])
    try:
        os.chdir(os.path.expanduser(target) if target else os.path.expanduser("~"))
    except OSError:
        print(sys.exc_info()[1])
    else:
        if old != os.getcwd():
            history.append(os.getcwd())
    if "q" not in opts and history:
        print(history[-1])


def env(shell: S.Shell, line: str) -> Any:
    if line.strip():
        bits = line.split("=" if "=" in line else " ")
        if len(bits) == 1:
            key = line.strip()
            if key in os.environ:
                return os.environ[key]
            raise UsageError(f"Environment does not have key: {key}")
        return set_env(shell, line)
    values = dict(os.environ)
    for key in values:  # IPython hides likely secrets when it shows the whole environment
        if any(word in key.lower() for word in ("key", "token", "secret")):
            values[key] = "<hidden>"
    return values


def set_env(shell: S.Shell, line: str) -> None:
    bits = line.split("=" if "=" in line else " ", 1)
    if not line.strip() or len(bits) < 2:
        raise UsageError("usage is 'set_env var=val'")
    var, val = bits[0].strip(), bits[1].strip()
    if any(c.isspace() for c in var):
        raise UsageError(f"refusing to set env var with whitespace: '{val}'")
    os.environ[var] = val
    print(f"env: {var}={val}")


def sx(shell: S.Shell, line: str, cell: str | None = None) -> Any:
    if cell is None:
        return shell.getoutput(line, depth=1)
    output = shell.getoutput(cell, depth=1)
    words = line.split()
    name = words[words.index("--out") + 1] if "--out" in words[:-1] else None
    if name:
        shell.user_ns[name] = output
        return None
    return output


def alias(name: str) -> Callable[..., None]:
    def run(shell: S.Shell, line: str) -> None:
        cmd, rest = ALIASES[name], line
        if "%l" in cmd:
            cmd, rest = cmd.replace("%l", rest), ""
        shell.system(f"{cmd} {rest}")

    return run


def matplotlib(shell: S.Shell, line: str) -> None:
    """No inline backend here; a figure's ``_repr_png_`` still displays."""


def load_ext(shell: S.Shell, line: str) -> None:
    name = line.strip()
    if not name:
        raise UsageError("Missing module name.")
    if name == "autoreload":  # IPython's own extension; nothing to reload in a fresh kernel
        shell.line_magics.update(autoreload=_noop, aimport=_noop)
        return
    module = __import__(name, fromlist=["_"])
    setup = getattr(module, "load_ipython_extension", None)
    if setup is None:
        print(f"The {name} module is not an IPython extension.")
        return
    setup(shell)


def _noop(shell: S.Shell, line: str) -> None:
    pass


def pinfo(shell: S.Shell, line: str) -> None:
    """``obj?``: IPython pages the help, and E2B shows no pages; an unknown name is reported."""
    head, *attrs = line.strip().split(".")
    found = head in shell.user_ns or hasattr(__import__("builtins"), head)
    obj = shell.user_ns.get(head, getattr(__import__("builtins"), head, None))
    for attr in attrs:
        if not found or not attr.isidentifier():
            break
        found = hasattr(obj, attr)
        obj = getattr(obj, attr, None)
    if not found:
        print(f"Object `{line.strip()}` not found.")


# ------------------------------------------------------------------ cell magics
def writefile(shell: S.Shell, line: str, cell: str) -> None:
    words = shlex.split(line)
    append = any(w in ("-a", "--append") for w in words)
    names = [w for w in words if w not in ("-a", "--append")]
    if len(names) != 1:
        raise UsageError(
            "the following arguments are required: filename" if not names else "unrecognized arguments"
        )
    filename = os.path.expanduser(names[0])
    if os.path.exists(filename):
        print(f"Appending to {filename}" if append else f"Overwriting {filename}")
    else:
        print(f"Writing {filename}")
    with open(filename, "a" if append else "w", encoding="utf-8") as fh:
        fh.write(cell)


def script(shell: S.Shell, line: str, cell: str) -> None:
    """``%%script program``: the cell is the program's stdin; its stdout and stderr stream as they come."""
    argv = shlex.split(line)
    out_var = _take(argv, "--out")
    err_var = _take(argv, "--err")
    raise_error = "--no-raise-error" not in argv
    argv = [a for a in argv if a != "--no-raise-error"]
    if "--bg" in argv:
        raise UsageError("--bg is not run by the local emulator's kernel")
    for name in (out_var, err_var):
        if name:
            shell.user_ns[name] = ""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        print(f"Couldn't find program: {argv[0]!r}")
        return
    body = (cell if cell.endswith("\n") else cell + "\n").encode("utf8", "replace")
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, out_var, sys.stdout, shell), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, err_var, sys.stderr, shell), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    try:
        with contextlib.suppress(BrokenPipeError):
            assert proc.stdin is not None
            proc.stdin.write(body)
            proc.stdin.close()
        for pump in pumps:
            pump.join()
        proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.1)
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        print("Process was interrupted.")
        if raise_error:
            raise subprocess.CalledProcessError(proc.returncode, body) from None
        return
    if raise_error and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode or -9, body)


def _take(argv: list[str], flag: str) -> str | None:
    if flag in argv[:-1]:
        i = argv.index(flag)
        value = argv[i + 1]
        del argv[i : i + 2]
        return value
    return None


def _pump(stream: Any, var: str | None, target: Any, shell: S.Shell) -> None:
    decoder = __import__("codecs").getincrementaldecoder("utf-8")("replace")
    while True:
        chunk = stream.read1(100) if hasattr(stream, "read1") else stream.read(100)
        text = decoder.decode(chunk, final=not chunk)
        if text:
            if var:
                shell.user_ns[var] += text
            else:
                target.write(text)
                target.flush()
        if not chunk:
            return


def script_of(program: str) -> Callable[[S.Shell, str, str], None]:
    def run(shell: S.Shell, line: str, cell: str) -> None:
        script(shell, f"{program} {line}", cell)

    return run


def capture(shell: S.Shell, line: str, cell: str) -> None:
    words = line.split()
    name = next((w for w in words if not w.startswith("--")), None)
    with shell.host.capture(
        "--no-stdout" not in words, "--no-stderr" not in words, "--no-display" not in words
    ) as captured:
        shell.host.run_nested(cell)
    if T.semicolon_at_end(cell):
        shell.user_ns.pop(name or "", None)
    elif name:
        shell.user_ns[name] = captured


def display_magic(name: str) -> Callable[[S.Shell, str, str], None]:
    mime, cls = DISPLAY[name]

    def run(shell: S.Shell, line: str, cell: str) -> None:
        shell.host.display_data({"text/plain": f"<IPython.core.display.{cls} object>", mime: cell})

    return run


LINE_MAGICS: dict[str, Any] = {
    "pip": pip,
    "cd": cd,
    "pwd": pwd,
    "env": env,
    "set_env": set_env,
    "time": T.time_,
    "timeit": T.timeit,
    "sx": sx,
    "system": sx,
    "matplotlib": matplotlib,
    "load_ext": load_ext,
    "pinfo": pinfo,
    "pinfo2": pinfo,
    **{name: alias(name) for name in ALIASES},
}
CELL_MAGICS: dict[str, Any] = {
    "writefile": writefile,
    "script": script,
    "capture": capture,
    "time": T.time_,
    "timeit": T.timeit,
    "sx": sx,
    "system": sx,
    "!": sx,
    **{name: script_of(name) for name in SCRIPTS},
    **{name: display_magic(name) for name in DISPLAY},
}
