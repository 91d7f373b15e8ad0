"""The host side of the runner protocol: limits, the one-command payload, and answer parsing.

One command hands the runner one candidate, or a batch of them: a quoted heredoc on stdin holds
a JSON header line, the program and the case inputs (a batch: a header naming each part's size,
then the parts; the programs stay readable in the command text). The runner answers one JSON
line. Expected outputs are not part of the payload, ever.
"""

from __future__ import annotations

import base64
import json
import secrets
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_e2b_env.standalone import assemble

REMOTE_DIR = "/opt/pytest-e2b-env/reward"
RUNNER = f"{REMOTE_DIR}/runner.py"
SERVE_DIR = f"{REMOTE_DIR}/serve"  # root-only FIFOs of the persistent runner (req, resp, out) and its pid
# Root-only (0700) upload directory for payloads too big for one command: a file the files API
# writes is world-readable (0644), and every case of the candidate could read all its inputs.
INBOX_DIR = f"{REMOTE_DIR}/inbox"
#: How long the install command waits for the preflight's answer (the probe takes about a second).
PREFLIGHT_SECONDS = 55.0
PYTHON = "/usr/bin/python3"
# bash -c takes the command as one argv string; Linux caps a single string at 128 KiB.
MAX_COMMAND_BYTES = 120_000


class ProtocolError(Exception):
    """The runner's answer is missing or malformed: the worker is broken (infrastructure)."""


class StarvedCase(Exception):
    """A case was stopped by the wall backstop before its own time was spent: the host starved it.

    Infrastructure, like a lost worker: the candidate is tried once more on a fresh worker, and
    gets no score (never a 0) when that is starved too.
    """


@dataclass(frozen=True)
class Limits:
    """Per-case resource limits applied inside the worker (see docs/reward.md).

    ``nproc`` x ``address_space_bytes`` is the case's aggregate memory budget (1 GiB here): the
    kernel caps the processes of the case's uid, and each one's address space.
    """

    nproc: int = 8
    fsize_bytes: int = 1 << 20
    address_space_bytes: int = 128 << 20
    nofile: int = 256
    scratch_bytes: int = 16 << 20
    output_bytes: int = 65536
    #: A case is stopped at ``case_seconds`` x this of wall time, however long it waited for a CPU
    #: (its deadline counts its own time only): slack for a loaded host. A fork bomb is not
    #: starved but is its own load (its tree's CPU counts), so it ends at its deadline. Stopped
    #: here with its own time unspent, a lone program was starved: no score, never a 0. Ten: a
    #: program reaches its own deadline (a 0 for an endless loop) with a tenth of a CPU, which a
    #: two-core CI runner with several test workers still gives it.
    wall_slack: float = 10.0
    #: Cases of one candidate run side by side, this many at a time, where the worker gives each
    #: its own user namespace (Linux 5.14+); one at a time otherwise. Same isolation either way.
    parallel_cases: int = 4


@dataclass(frozen=True)
class Isolation:
    """Which isolation layers the runner builds. All on is the only supported setting.

    This is a test seam: switching a layer off lets a test prove that the preflight notices
    and aborts. The preflight always checks the full set, whatever is configured here.
    """

    readonly_root: bool = True
    pid: bool = True
    network: bool = True
    drop_privileges: bool = True
    no_new_privs: bool = True
    seccomp: bool = True
    private_inputs: bool = True
    case_userns: bool = True
    #: Each case's interpreter is forked from a pristine pre-started one (the zygote), not exec'd
    #: afresh: the same isolation, about 11 ms of CPU less per case. What a program can tell apart
    #: is listed in docs/reward.md; off, every case execs ``python3 -I -B``.
    zygote: bool = True


@dataclass
class Payload:
    """One runner invocation: header fields plus the program and inputs as bytes."""

    mode: str
    code: bytes
    inputs: list[bytes]
    case_seconds: float
    limits: Limits = field(default_factory=Limits)
    isolation: Isolation = field(default_factory=Isolation)
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))

    def header(self) -> dict[str, Any]:
        limits = asdict(self.limits)
        limits["cpu_seconds"] = int(self.case_seconds) + 2
        isolation = asdict(self.isolation)
        isolation.update(mount_private=True, private_tmp=True)
        return {
            "nonce": self.nonce,
            "mode": self.mode,
            "case_seconds": self.case_seconds,
            "limits": limits,
            "isolation": isolation,
            "code_bytes": len(self.code),
            "input_bytes": [len(item) for item in self.inputs],
        }

    def stdin(self) -> bytes:
        return json.dumps(self.header()).encode() + b"\n" + self.code + b"".join(self.inputs)


@dataclass
class Batch:
    """Several candidates in one runner invocation: a header line naming each part's size, then
    each part as a :class:`Payload` would send it. The runner answers part by part."""

    parts: list[Payload]
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))

    def stdin(self) -> bytes:
        bodies = [part.stdin() for part in self.parts]
        header = {"nonce": self.nonce, "mode": "batch", "part_bytes": [len(body) for body in bodies]}
        return json.dumps(header).encode() + b"\n" + b"".join(bodies)


def part_answers(answer: dict[str, Any], batch: Batch) -> list[dict[str, Any]]:
    """Each part's answer, in order; :class:`ProtocolError` when one is missing or not its part's."""
    answers = answer.get("answers")
    if not isinstance(answers, list) or len(answers) != len(batch.parts):
        raise ProtocolError(f"runner answered {len(answers or [])} parts of a batch of {len(batch.parts)}")
    for part, got in zip(batch.parts, answers, strict=True):
        if not isinstance(got, dict) or got.get("nonce") != part.nonce:
            raise ProtocolError("a batch answer does not carry its part's nonce")
    return answers


def runner_text() -> str:
    """The runner the workers run: ``standalone/reward_runner.py``, assembled."""
    return assemble.script("reward_runner")


def probe_text() -> str:
    """The isolation probe the preflight runs as a candidate: ``standalone/reward_probe.py``, assembled."""
    return assemble.script("reward_probe")


def install_command(payload: Payload) -> str:
    """Install the runner, start the persistent runner, run the preflight in it: one command.

    The persistent runner (``runner.py --serve``) saves an interpreter start-up (and a compile of
    the runner) per candidate, and answering the preflight itself, it is the very process, zygote
    included, that the preflight proved. ``setsid`` keeps it alive after the command. It starts
    as its zygote must (``ZYGOTE_BOOT``: ``python3 -I -B``, the case's environment alone, a
    seekable stdin, stdout a FIFO as a case's is a pipe, stderr ``/dev/null``) and forks into the
    runner and its zygote: one interpreter start and one compile of the runner per worker. A
    template without ``mkfifo``, ``setsid`` or ``env`` runs the preflight, and then every
    candidate, one-shot.
    """
    runner = runner_text()
    delimiter = "PE2B_RUNNER_" + secrets.token_hex(8)
    # 755 for both: a test seam only. jobs is 0711: a case runs its own program (a directory
    # named by its request's 64-bit nonce) but cannot list the others of a batch.
    inbox_mode, jobs_mode = ("700", "711") if payload.isolation.private_inputs else ("755", "755")
    prefix = (
        f"set -e; umask 022; mkdir -p {REMOTE_DIR}/jobs {SERVE_DIR} {INBOX_DIR};"
        f" chmod 755 /opt/pytest-e2b-env {REMOTE_DIR}; chmod 700 {SERVE_DIR}; chmod {inbox_mode} {INBOX_DIR};"
        f" chmod {jobs_mode} {REMOTE_DIR}/jobs;"
        f" rm -f {SERVE_DIR}/req {SERVE_DIR}/resp {SERVE_DIR}/out {SERVE_DIR}/pid;"
        f" cat > {RUNNER} <<'{delimiter}'\n{runner}\n{delimiter}\nchmod 444 {RUNNER}\n"
    )
    case_env = assemble.constant("reward_runner", "CASE_ENV")
    boot = assemble.constant("reward_runner", "ZYGOTE_BOOT")
    assert isinstance(case_env, dict)
    assert isinstance(boot, str)
    environment = " ".join(f"{name}={shlex.quote(value)}" for name, value in case_env.items())
    serve = (
        f"if mkfifo -m 600 {SERVE_DIR}/req {SERVE_DIR}/resp {SERVE_DIR}/out 2>/dev/null"
        " && command -v setsid >/dev/null && command -v env >/dev/null; then\n"
        f"setsid env -i {environment} {PYTHON} -I -B -c {shlex.quote(boot)}"
        f" {RUNNER} {RUNNER} --serve {SERVE_DIR} </dev/null 1<>{SERVE_DIR}/out 2>/dev/null &\n"
        f"echo $! > {SERVE_DIR}/pid\nfi\n"
    )
    return prefix + serve + run_command(payload.stdin(), PREFLIGHT_SECONDS, open_seconds=30)


def run_command(
    stdin: bytes | None, command_seconds: float, stdin_file: str | None = None, open_seconds: int = 5
) -> str:
    """One candidate: hand the payload to the persistent runner, or run a one-shot runner.

    The payload comes from a quoted heredoc (or ``stdin_file``) feeding the whole block, so it
    is written once. ``timeout`` guards both FIFO opens: a dead server fails the command fast
    (the host then replaces the worker) instead of hanging it. ``open_seconds``: how long the
    server may take to open its request FIFO (longer for the preflight: it is just starting).
    """
    # Builtins only; a killed server may linger as a zombie, so look at its state, not kill -0.
    alive = (
        f"[ -p {SERVE_DIR}/resp ] && read -r P < {SERVE_DIR}/pid 2>/dev/null"
        ' && read -r _ _ S _ < /proc/$P/stat 2>/dev/null && [ "$S" != Z ]'
    )
    block = (
        f"{{ if {alive}; then timeout {open_seconds} tee {SERVE_DIR}/req >/dev/null"
        f" && timeout {int(command_seconds)} cat {SERVE_DIR}/resp;"
        f" else {PYTHON} -I -B -S {RUNNER}; fi; }}"
    )
    if stdin_file is not None:
        return f"{block} < {stdin_file}; status=$?; rm -f {stdin_file}; exit $status"
    assert stdin is not None
    text = stdin.decode("utf-8")
    delimiter = "PE2B_EOF_" + secrets.token_hex(8)
    while delimiter in text:  # pragma: no cover - 64 random bits
        delimiter = "PE2B_EOF_" + secrets.token_hex(8)
    return f"{block} <<'{delimiter}'\n{text}\n{delimiter}\n"


def parse_answer(stdout: str, nonce: str) -> dict[str, Any]:
    """The runner's JSON answer; :class:`ProtocolError` when it is not ours or reports a setup error."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        answer = json.loads(line)
    except ValueError:
        raise ProtocolError(f"runner answer is not JSON ({len(stdout)} bytes)") from None
    if not isinstance(answer, dict) or answer.get("nonce") != nonce:
        raise ProtocolError("runner answer does not carry this request's nonce")
    if answer.get("setup_error"):
        raise ProtocolError(f"runner could not isolate a case: {answer['setup_error'][:300]}")
    return answer


def case_output(record: dict[str, Any]) -> bytes:
    """The decoded stdout bytes of one case record."""
    return base64.b64decode(record.get("output_b64", ""))
