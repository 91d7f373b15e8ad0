"""A subject with machine-wide state (a server on a fixed port) gets the verdicts of a serial run.

Like E2B's cookbook episode (its OpenEnv server on 127.0.0.1:8010, started once beside the
trainer), the reward below scores through a server the first process that needs it starts on a
fixed port; every later process uses that one, whose sandboxes go to the target of the process
that started it. In lanes, a case would then reach another lane's target and miss its own
faults. The lanes run each kind's first case alone, see the fixed port, and run that kind in one
lane, saying so.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from plugin_helpers import CASES, only_bundle, read_json, write_project

from pytest_e2b_env.catalog.procs import fixed_ports

#: Scores through a server on PORT in whichever process started it first (its E2B settings).
SHARED = """
import base64, json, re, threading, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from e2b import CommandExitException, Sandbox

PORT = {port}
FENCE = re.compile(r"```(?:python)?\\n(.*?)```", re.S)


def _score_all(completions, tests):
    found = [FENCE.search(str(c[-1]["content"])) for c in completions]
    if not any(found):
        return [0.0 for _ in completions]
    box = Sandbox.create(timeout=60, metadata={{"who": "shared"}})  # this process's E2B settings
    try:
        scores = []
        for match, cases in zip(found, tests):
            ok = 0
            for case in cases if match else []:
                code = base64.b64encode(match.group(1).encode()).decode()
                run = f"echo '{{case['input']}}' | python3 -c "
                run += f"'import base64;exec(base64.b64decode(\\"{{code}}\\"))'"
                try:
                    out = box.commands.run(run, timeout=10).stdout
                    ok += json.loads(out) == json.loads(case["output"])
                except (CommandExitException, ValueError):
                    pass  # the program failed or printed no JSON: its own 0
            scores.append(ok / len(cases))
        return scores
    finally:
        box.kill()


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        try:
            answer = {{"scores": _score_all(body["completions"], body["tests"])}}
        except Exception as exc:
            answer = {{"raised": f"{{type(exc).__name__}}: {{exc}}"}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def _ensure_server():
    try:
        server = ThreadingHTTPServer(("127.0.0.1", PORT), _Handler)
    except OSError:
        return  # another process of the machine serves it: use that one
    threading.Thread(target=server.serve_forever, daemon=True).start()


def make_reward():
    def reward(completions, test_cases, **kwargs):
        _ensure_server()
        data = json.dumps({{"completions": completions, "tests": test_cases}}).encode()
        with urllib.request.urlopen(f"http://127.0.0.1:{{PORT}}/", data, timeout=120) as answer:
            got = json.loads(answer.read())
        if "raised" in got:
            raise RuntimeError(got["raised"])
        return got["scores"]
    return reward
"""

#: The same scoring in the subject's own process, with a server on PORT only while the subject is
#: open (a pool's metrics endpoint): a second process of the machine cannot open it meanwhile.
SCOPED = (
    SHARED
    + """

@contextlib.contextmanager
def make_scoped():
    server = ThreadingHTTPServer(("127.0.0.1", PORT), BaseHTTPRequestHandler)  # in use: OSError
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield lambda completions, test_cases, **kwargs: _score_all(completions, test_cases)
    finally:
        server.shutdown()
        server.server_close()
"""
).replace("import base64,", "import base64, contextlib,")

#: The tiny cases, and one whose fault fires only on the case's own target.
FAULTED = """
[[case]]
id = "reward-tiny-faulted"
subject = "reward"
family = "defect"
description = "Every command in the case's sandbox answers 500: the call raises, it never scores."
[case.reward]
test_cases = [{input = "[1, 2]", output = "3"}]
completions = [{text = "```python\\nimport json,sys\\nprint(sum(json.load(sys.stdin)))\\n```"}]
[[case.faults]]
route = "POST /process.Process/Start"
answer = {status = 500}
times = 1000
[case.expect]
raises = "Exception"
faults_fired_min = 1
"""


def _free_fixed_port() -> int:
    """A port below the ephemeral range that nobody listens on now."""
    for port in range(23000 + int(time.time() * 1000) % 5000, 29000):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 23000-29000")


def test_fixed_ports_sees_a_fixed_listener_and_not_an_ephemeral_one() -> None:
    """A child listening on a chosen port is seen; one on a port the kernel picked is not."""
    port = _free_fixed_port()
    code = (
        "import socket, sys\n"
        "a = socket.socket(); a.bind(('127.0.0.1', int(sys.argv[1]))); a.listen()\n"
        "b = socket.socket(); b.bind(('127.0.0.1', 0)); b.listen()\n"
        "print(b.getsockname()[1], flush=True); sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            ephemeral = int(child.stdout.readline())
            seen = fixed_ports(child.pid)
            assert port in seen
            assert ephemeral not in seen
        finally:
            child.kill()


@pytest.mark.full
def test_a_subject_on_a_fixed_port_runs_in_one_lane_with_the_serial_verdicts(
    pytester: pytest.Pytester,
) -> None:
    """With three lanes, the fixed-port reward's cases run one after another in one lane: the
    faulted case sees its fault fire (it would reach another lane's target otherwise), every
    verdict is a serial run's, and the summary and the manifest say why."""
    write_project(pytester, subject="shared:make_reward")
    pytester.makepyfile(shared=SHARED.format(port=_free_fixed_port()))
    (pytester.path / "mycases" / "reward.toml").write_text(CASES + FAULTED + CASES.replace("tiny-", "tiny2-"))
    verdicts = {}
    for lanes in ("1", "3"):
        result = pytester.runpytest_subprocess(
            "--e2b-evidence", f"ev{lanes}", "--e2b-lanes", lanes, "-p", "no:cacheprovider"
        )
        bundle = only_bundle(pytester.path / f"ev{lanes}")
        lines = (bundle / "cases.jsonl").read_text().splitlines()
        verdicts[lanes] = {r["id"]: r["status"] for r in map(json.loads, lines)}
        assert verdicts[lanes]["reward-tiny-faulted"] == "passed", result.stdout.str()
    assert verdicts["3"] == verdicts["1"]
    assert set(verdicts["3"].values()) == {"passed"}
    out = result.stdout.str()
    assert "the reward subject's process listens on fixed port" in out, out
    manifest = read_json(bundle / "run-manifest.json")
    assert "fixed port" in manifest["serial_kinds"]["reward"]


@pytest.mark.full
def test_a_subject_holding_a_fixed_port_only_while_open_runs_in_one_lane(pytester: pytest.Pytester) -> None:
    """A server opened with the subject and closed with it is gone when its first case ends: the
    lanes watch the ports while that case runs, so the kind still runs in one lane (side by side,
    the second subject to open would fail with "Address already in use")."""
    write_project(pytester, subject="shared:make_scoped")
    pytester.makepyfile(shared=SCOPED.format(port=_free_fixed_port()))
    (pytester.path / "mycases" / "reward.toml").write_text(CASES + CASES.replace("tiny-", "tiny2-"))
    result = pytester.runpytest_subprocess(
        "--e2b-evidence", "ev", "--e2b-lanes", "3", "-p", "no:cacheprovider"
    )
    bundle = only_bundle(pytester.path / "ev")
    lines = (bundle / "cases.jsonl").read_text().splitlines()
    statuses = {r["id"]: r["status"] for r in map(json.loads, lines)}
    assert set(statuses.values()) == {"passed"}, result.stdout.str()
    assert "fixed port" in read_json(bundle / "run-manifest.json")["serial_kinds"]["reward"]
