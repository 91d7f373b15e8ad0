"""A case forked from the zygote is what ``python3 -I -B solution.py`` would be, to the program.

Every program runs twice on one worker, through the real runner under full isolation: once as a
fresh interpreter (``Isolation(zygote=False)``) and once forked from the zygote. Each program first
points its fd 2 at its stdout, so the tracebacks and messages the interpreter writes at exit are
compared too (a case's stderr is otherwise ``/dev/null``). The differences docs/reward.md lists
are asserted as differences, so that list stays true.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.reward import Isolation
from pytest_e2b_env.reward.protocol import SERVE_DIR, Payload
from pytest_e2b_env.reward.workers import Worker, WorkerClient, probe_source
from pytest_e2b_env.standalone.reward_runner import PRISTINE_CHECK, ZYGOTE_NAME, _pristine

pytestmark = pytest.mark.namespaces
ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # the module worker's loop

STDERR_TO_STDOUT = "import os\nos.dup2(1, 2)\n"

INTROSPECT = """\
import os, sys
os.dup2(1, 2)
modules = sorted(sys.modules)
names = list(globals())
loader = type(__loader__).__name__
import atexit, json, signal, threading, warnings

def status(field):
    with open("/proc/self/status") as fh:
        return next((line.split()[1] for line in fh if line.startswith(field + ":")), None)

def stream(s):
    return [repr(s), s.encoding, s.errors, s.line_buffering, s.write_through, type(s.buffer).__name__]

umask = os.umask(0)
print(json.dumps({
    "modules": modules, "globals": names, "loader": loader, "file": __file__, "name": __name__,
    "spec": repr(__spec__), "cached": __cached__, "package": __package__, "doc": __doc__,
    "main_is_self": sys.modules["__main__"].__dict__ is globals(),
    "argv": sys.argv, "orig_argv": sys.orig_argv, "flags": list(sys.flags), "path": sys.path,
    "executable": sys.executable, "prefix": [sys.prefix, sys.base_prefix], "cwd": os.getcwd(),
    "environ": dict(os.environ), "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()],
    "pid": [os.getpid(), os.getppid(), os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid()],
    "signals": [str(signal.getsignal(n)) for n in range(1, signal.NSIG) if n not in (9, 19, 32, 33)],
    "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "atexit": atexit._ncallbacks(), "threads": threading.active_count(),
    "tasks": len(os.listdir("/proc/self/task")), "fds": sorted(os.listdir("/proc/self/fd")),
    "stdin": stream(sys.stdin) + [sys.stdin.seekable(), sys.stdin.tell()], "stdout": stream(sys.stdout),
    "stderr": stream(sys.stderr), "recursion": sys.getrecursionlimit(), "switch": sys.getswitchinterval(),
    "caps": [status(f) for f in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")],
    "nnp": status("NoNewPrivs"), "seccomp": status("Seccomp"), "mem_owner": os.stat("/proc/self/mem").st_uid,
    "umask": umask, "exc": repr(sys.exc_info()), "last": hasattr(sys, "last_value"),
    "warnings": [repr(f) for f in warnings.filters], "meta_path": [type(f).__name__ for f in sys.meta_path],
    "finders": sorted(sys.path_importer_cache), "hooks": len(sys.path_hooks),
    "displayhook": sys.displayhook is sys.__displayhook__, "excepthook": sys.excepthook is sys.__excepthook__,
}, sort_keys=True))
"""

EXITS = "import sys\nprint('before')\nsys.exit({code})\n"

PROGRAMS = {
    "introspect": INTROSPECT,
    "traceback": STDERR_TO_STDOUT
    + "def inner():\n    raise KeyError('inner')\n\ntry:\n    inner()\nexcept KeyError as e:\n"
    + "    raise ValueError('outer') from e\n",
    "exit-3": STDERR_TO_STDOUT + EXITS.format(code="3"),
    "exit-message": STDERR_TO_STDOUT + EXITS.format(code="'bye'"),
    "exit-none": STDERR_TO_STDOUT + EXITS.format(code="None"),
    "exit-256": STDERR_TO_STDOUT + EXITS.format(code="256"),
    "exit-true": STDERR_TO_STDOUT + EXITS.format(code="True"),
    "exit-minus-one": STDERR_TO_STDOUT + EXITS.format(code="-1"),
    "exit-huge": STDERR_TO_STDOUT + EXITS.format(code="2 ** 70"),
    "exit-object": STDERR_TO_STDOUT + EXITS.format(code="['a', 1]"),
    "keyboard-interrupt": STDERR_TO_STDOUT + "print('x')\nraise KeyboardInterrupt\n",
    "syntax-error": "print('never'\n",
    # A NUL byte: big enough to travel as an upload (a command cannot carry one)
    "nul-byte": "print(1)\0print(2)\nprint(3)\n" + "#" * 125_000 + "\n",
    "shutdown-order": STDERR_TO_STDOUT
    + "import atexit, threading, time\n"
    + "class Late:\n    def __del__(self):\n        print('del', flush=True)\n\n"
    + "late = Late()\natexit.register(print, 'atexit')\n"
    + "def work():\n    time.sleep(0.2)\n    print('thread')\n\n"
    + "threading.Thread(target=work).start()\nprint('main')\n",
    "stdout-closed": "import os\nos.dup2(os.dup(1), 2)\nos.close(1)\nprint('lost')\n",
    "stdin": "import sys\ndata = sys.stdin.read()\nprint(repr(data), sys.stdin.tell())\n",
    "input": "first = input()\nsecond = input()\nprint(second, first)\ntry:\n    input()\nexcept EOFError:\n"
    + "    print('eof')\n",
    "excepthook": STDERR_TO_STDOUT
    + "import sys\n"
    + "sys.excepthook = lambda t, v, tb: print('hook', t.__name__, v, tb.tb_frame.f_code.co_name)\n"
    + "raise RuntimeError('r')\n",
    "import-fresh": "import sys\nimport json, collections, email\n"
    + "print(sorted(set(sys.modules) - {'__main__'})[:3], json.dumps({'a': 1}))\n",
    # The preloaded modules (reward_runner.PRELOAD): what their imports add, in order, and the
    # state they leave, whether the copy is handed over or a real import has to run.
    "preloaded-alone": "import sys\nbefore = list(sys.modules)\nimport json\n"
    + "print([m for m in sys.modules if m not in before], list(sys.path_importer_cache)[-2:])\n"
    + "print(json.dumps({'a': [1, 2.5]}), json.loads('{\"b\": null}'), len(sys.modules['re']._cache))\n",
    "preloaded-combined": "import sys\nbefore = list(sys.modules)\nimport re, collections\n"
    + "import json, heapq, bisect\nprint([m for m in sys.modules if m not in before])\n"
    + "print(json.decoder.re is re, len(re._cache), collections.Counter('abca').most_common(1))\n"
    + "print(heapq.nsmallest(2, [5, 1, 4]), bisect.bisect([1, 3, 5], 4))\n"
    + "print(list(sys.path_importer_cache)[-3:])\n",
    "preloaded-dependency-first": "import sys\nbefore = list(sys.modules)\nimport enum\nimport re, json\n"
    + "print([m for m in sys.modules if m not in before], re.enum is enum, len(re._cache))\n",
    "preloaded-blocked": "import sys\nsys.modules['_json'] = None\nbefore = list(sys.modules)\nimport json\n"
    + "print([m for m in sys.modules if m not in before])\n"
    + "print(json.scanner.make_scanner is json.scanner.py_make_scanner)\n",
    "preloaded-start-up-module-gone": "import sys\nold = sys.modules.pop('_collections_abc')\n"
    + "before = list(sys.modules)\nimport collections\n"
    + "print([m for m in sys.modules if m not in before], sys.modules['_collections_abc'] is old)\n",
    "preloaded-shadowed": "import sys\nwith open('/tmp/heapq.py', 'w') as fh:\n"
    + "    fh.write('print(\"shadow\")')\nsys.path.insert(0, '/tmp')\nimport heapq\nprint(heapq.__file__)\n",
    "preloaded-missing": STDERR_TO_STDOUT + "import json.missing\n",
    "preloaded-raising-module": STDERR_TO_STDOUT
    + "import sys\nwith open('/tmp/broken.py', 'w') as fh:\n    fh.write('x = 1\\nraise ValueError(x)\\n')\n"
    + "sys.path.insert(0, '/tmp')\nimport broken\n",
    "preloaded-threads": "import sys, threading\nbarrier = threading.Barrier(3)\ngot = []\n"
    + "def load():\n    barrier.wait()\n    import json\n    got.append(json)\n\n"
    + "threads = [threading.Thread(target=load) for _ in range(3)]\n"
    + "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
    + "print(len(got), all(m is sys.modules['json'] for m in got), list(sys.modules).count('re'))\n",
}
INPUT = b"a\nb\n"
PREFLIGHT: dict = {}  # the module worker's preflight answer


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worker(emulator: Emulator, runner_supported: None) -> AsyncIterator[tuple[WorkerClient, Worker]]:
    client = WorkerClient(
        template="base",
        run_id="zygote",
        lifetime_seconds=300,
        request_timeout=15,
        api_opts=emulator.sdk_opts(),
    )
    worker = await client.create()
    try:
        PREFLIGHT.update(
            await client.install_and_preflight(worker, Payload("preflight", probe_source(), [], 5.0))
        )
        yield client, worker
    finally:
        await client.kill(worker.sandbox_id)


async def run(
    pair: tuple[WorkerClient, Worker], source: str, zygote: bool, inputs: list[bytes] | int = 1
) -> list[tuple]:
    """(output with the job directory masked, exit code) of each case of ``source``."""
    client, worker = pair
    data = [INPUT] * inputs if isinstance(inputs, int) else inputs
    payload = Payload("run", source.encode(), data, 5.0, isolation=Isolation(zygote=zygote))
    answer = await client.run(worker, payload, 60)
    cases = []
    for case in answer["cases"]:
        assert not case.get("setup_error"), case
        output = base64.b64decode(case["output_b64"]).decode("utf-8", "replace")
        cases.append((re.sub(r"jobs/[0-9a-f]+/", "jobs/<nonce>/", output), case["exit_code"]))
    return cases


@ON_MODULE_LOOP
@pytest.mark.parametrize("name", sorted(PROGRAMS))
async def test_a_program_sees_what_a_fresh_interpreter_shows_it(
    worker: tuple[WorkerClient, Worker], name: str
) -> None:
    fresh = await run(worker, PROGRAMS[name], zygote=False)
    forked = await run(worker, PROGRAMS[name], zygote=True)
    if name == "introspect":  # field by field, for a readable failure
        fresh_fields, forked_fields = json.loads(fresh[0][0]), json.loads(forked[0][0])
        assert {k: v for k, v in forked_fields.items() if fresh_fields[k] != v} == {}
    assert forked == fresh
    assert fresh[0][1] is not None


@ON_MODULE_LOOP
async def test_the_exit_statuses_are_cpythons(worker: tuple[WorkerClient, Worker]) -> None:
    """The battery above is only as good as what it covers: its statuses and messages, spelled out."""
    got = {
        name: (await run(worker, PROGRAMS[name], zygote=True))[0] for name in PROGRAMS if name != "introspect"
    }
    assert got["exit-3"] == ("before\n", 3)
    assert got["exit-message"] == ("before\nbye\n", 1)
    statuses = {
        name: got[name][1] for name in ("exit-none", "exit-256", "exit-true", "exit-minus-one", "exit-huge")
    }
    assert statuses == {
        "exit-none": 0,
        "exit-256": 0,
        "exit-true": 1,
        "exit-minus-one": 255,
        "exit-huge": 255,
    }
    assert got["keyboard-interrupt"][1] == 130  # SIGINT is ignored by a pid namespace's init
    assert got["syntax-error"] == ("", 1)
    assert got["shutdown-order"] == ("main\nthread\natexit\ndel\n", 0)
    assert got["stdout-closed"][1] == 120
    assert "Exception ignored in: <_io.TextIOWrapper name='<stdout>'" in got["stdout-closed"][0]
    traceback = got["traceback"][0]
    assert traceback.startswith('Traceback (most recent call last):\n  File "')
    assert "The above exception was the direct cause" in traceback
    assert "ValueError: outer" in traceback
    assert "<string>" not in traceback  # the zygote's own frame is not shown
    assert got["stdin"] == ("'a\\nb\\n' 4\n", 0)
    assert got["input"] == ("b a\neof\n", 0)
    assert got["excepthook"] == ("hook RuntimeError r <module>\n", 1)


@ON_MODULE_LOOP
async def test_what_a_program_can_still_tell_apart(worker: tuple[WorkerClient, Worker]) -> None:
    """The differences docs/reward.md lists, each seen: a frame below the program, the command
    line of the zygote, one hash seed for every case of a worker."""
    frame = "import sys\nprint(sys._getframe().f_back is None)\n"
    assert await run(worker, frame, zygote=False) == [("True\n", 0)]
    assert await run(worker, frame, zygote=True) == [("False\n", 0)]
    depth = (
        "import sys\ndef f(n):\n    try:\n        return f(n + 1)\n"
        "    except RecursionError:\n        return n\nprint(f(0))\n"
    )
    fresh_depth = (await run(worker, depth, zygote=False))[0][0]
    forked_depth = (await run(worker, depth, zygote=True))[0][0]
    assert int(fresh_depth) - int(forked_depth) == 2  # the zygote's frame, and exec's entry
    cmdline = "print(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[3:4])\n"
    assert (await run(worker, cmdline, zygote=False))[0][0].startswith("[b'/opt/")
    assert (await run(worker, cmdline, zygote=True))[0][0] == "[b'-c']\n"
    seed = "print(hash('pytest-e2b-env'))\n"
    assert len({out for out, _ in await run(worker, seed, zygote=False, inputs=4)}) == 4
    assert len({out for out, _ in await run(worker, seed, zygote=True, inputs=4)}) == 1


@ON_MODULE_LOOP
async def test_what_the_preloaded_modules_leave_a_program_to_tell_apart(
    worker: tuple[WorkerClient, Worker],
) -> None:
    """The preloaded modules' differences docs/reward.md lists: importlib's ``_find_and_load`` is
    the runner's until every preloaded module was asked for, an ``importlib.import_module``
    traceback shows its frame, a handed-over module's objects are frozen like the zygote's, and an
    audit hook sees no event for what a handed-over copy holds."""
    finder = "import _frozen_importlib as b\nprint(b._find_and_load.__code__.co_firstlineno)\n"
    fresh_line = (await run(worker, finder, zygote=False))[0][0]
    assert (await run(worker, finder, zygote=True))[0][0] != fresh_line
    # each asked for once (json's own re and collections would not ask for theirs): it left
    every = "import bisect, heapq, collections, re, json\n" + finder
    assert await run(worker, every, zygote=True) == [(fresh_line, 0)]
    imported = STDERR_TO_STDOUT + "import importlib\nimportlib.import_module('missing')\n"
    fresh_lines = (await run(worker, imported, zygote=False))[0][0].splitlines()
    forked_lines = (await run(worker, imported, zygote=True))[0][0].splitlines()
    assert [line for line in forked_lines if line not in fresh_lines] == [
        next(line for line in forked_lines if "_find_and_load" in line)
    ]
    # handed over, not imported again: json's objects are the zygote's, frozen (gc.get_objects skips them)
    tracked = "import gc, json\nprint(any(o is json.loads for o in gc.get_objects()))\n"
    assert await run(worker, tracked, zygote=False) == [("True\n", 0)]
    assert await run(worker, tracked, zygote=True) == [("False\n", 0)]
    audited = "import sys\nseen = []\nsys.addaudithook(lambda e, a: e == 'import' and seen.append(a[0]))\n"
    audited += "import json\nprint(seen)\n"
    fresh_seen = ast.literal_eval((await run(worker, audited, zygote=False))[0][0])
    forked_seen = ast.literal_eval((await run(worker, audited, zygote=True))[0][0])
    assert forked_seen == ["json"]
    assert fresh_seen[0] == "json"
    assert {"json.decoder", "re", "enum"} <= set(fresh_seen)


def test_the_pristineness_verdict_compares_what_import_json_added() -> None:
    """A zygote whose ``import json`` adds other modules, or in another order, is not pristine."""
    view = {"modules": ["sys"], "globals": [], "argv": [], "orig_argv": [], "flags": [], "fds": []}
    record = {"exit_code": 0}

    def case(imported: list[str]) -> dict:
        raw = json.dumps({**view, "imported": imported, "hits": 0, "tasks": 1}).encode()
        return {**record, "output_b64": base64.b64encode(raw).decode()}

    assert _pristine(case(["re", "json"]), case(["re", "json"]))["same_start"] is True
    assert _pristine(case(["re", "json"]), case(["json", "re"]))["same_start"] is False
    assert _pristine(case(["re", "json"]), case(["json"]))["same_start"] is False


@ON_MODULE_LOOP
async def test_cases_side_by_side_from_one_zygote_keep_to_themselves(
    worker: tuple[WorkerClient, Worker],
) -> None:
    """Four cases at once from one zygote: each is pid 1 of its own namespace with its own input
    on stdin, the three standard descriptors and nothing else open."""
    source = "import os, sys\nprint(os.getpid(), sys.stdin.read(), sorted(os.listdir('/proc/self/fd')))\n"
    inputs = [f"case-{n}".encode() for n in range(4)]
    got = await run(worker, source, zygote=True, inputs=inputs)
    assert got == [(f"1 case-{n} ['0', '1', '2', '3']\n", 0) for n in range(4)]


@ON_MODULE_LOOP
async def test_the_preflight_proves_the_zygote_pristine(worker: tuple[WorkerClient, Worker]) -> None:
    """The preflight ran its check as a fresh interpreter and from the zygote: the same start, one
    thread, and no copy of the canary an earlier case of the preflight had as its input."""
    assert PREFLIGHT["outside"]["zygote_pristine"] is True
    assert PREFLIGHT["pristine"] == {
        "same_start": True,
        "canary_hits": [0, 0],
        "threads": [1, 1],
        "exit_codes": [0, 0],
    }


CANARY = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("held", [True, False], ids=["a-live-copy", "none"])
def test_the_pristineness_check_finds_a_copy_and_not_its_own_needle(tmp_path: Path, held: bool) -> None:
    """The check is not blind: a copy of the canary alive anywhere in the process is counted; the
    needle it builds to look for it, and its read buffer, are not."""
    check = tmp_path / "check.py"
    check.write_text(PRISTINE_CHECK)
    prelude = f"held = 'pe2b-canary-' + {CANARY!r}\n" if held else ""
    program = f"{prelude}exec(open({str(check)!r}).read())"
    hunted = ("pe2b-canary-" + CANARY).upper().encode()
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", program], input=hunted, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"] == (1 if held else 0)


async def runner_and_zygote(sandbox: Worker) -> tuple[str, str, str]:
    """(persistent runner's pid, its command line, its zygote's pid) once both are up (bounded).

    The runner is the pid the install command recorded: the zygote forked beside it, and the
    cases forked from that (orphans once it dies), have its command line too."""
    for _ in range(50):
        listing = await sandbox.sandbox.commands.run(
            f"cat {SERVE_DIR}/pid; ps -ww -eo pid=,ppid=,args=", user="root"
        )
        recorded, *lines = listing.stdout.splitlines()
        rows = [line.split(None, 2) for line in lines]
        runners = [
            (pid, args) for pid, _, args in rows if pid == recorded.strip() and "runner.py --serve" in args
        ]
        zygotes = [
            pid for pid, ppid, args in rows if runners and ppid == runners[0][0] and ZYGOTE_NAME in args
        ]
        if len(runners) == 1 and len(zygotes) == 1:
            return runners[0][0], runners[0][1], zygotes[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no persistent runner with one zygote:\n{listing.stdout}")


@ON_MODULE_LOOP
async def test_the_persistent_runner_answered_the_preflight(worker: tuple[WorkerClient, Worker]) -> None:
    """The install command starts the persistent runner first and sends it the preflight: the
    process (and zygote) the candidates reach is the one the preflight proved."""
    assert PREFLIGHT["served"] is True
    runner, _, zygote = await runner_and_zygote(worker[1])
    # forked from one interpreter started on a FIFO (for its streams' sake), both left it after
    outs = await worker[1].sandbox.commands.run(
        f"readlink /proc/{runner}/fd/1 /proc/{zygote}/fd/1", user="root"
    )
    assert outs.stdout.split() == ["/dev/null", "/dev/null"]


@ON_MODULE_LOOP
async def test_a_zygote_that_died_is_started_again(worker: tuple[WorkerClient, Worker]) -> None:
    """The runner starts a new zygote (a fresh exec, so as pristine as the first) when its own
    died, and the candidate's cases run as if nothing happened."""
    runner, _, zygote = await runner_and_zygote(worker[1])
    await worker[1].sandbox.commands.run(f"kill -9 {zygote}", user="root")
    assert await run(worker, "print(sum(range(10)))\n", zygote=True, inputs=3) == [("45\n", 0)] * 3
    again, _, replacement = await runner_and_zygote(worker[1])
    assert again == runner
    assert replacement != zygote
