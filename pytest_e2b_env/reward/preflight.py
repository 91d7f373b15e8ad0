"""Judging the isolation preflight a new worker runs before it may evaluate any candidate.

The set of required checks is fixed here, independent of how the pool was configured: a pool
configured (or a template built) with weaker isolation fails this, it never degrades.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_e2b_env.errors import PreflightError
from pytest_e2b_env.reward.protocol import Limits, ProtocolError, case_output
from pytest_e2b_env.standalone.linux import NOBODY

# Checks the probe reports from inside a case sandbox.
INSIDE = (
    "uid_nobody",
    "no_groups",
    "root_readonly",
    "writes_blocked",
    "pid_namespace",
    "tmp_writable",
    "net_namespace",
    "only_loopback",
    "loopback_unreachable",
    "egress_unreachable",
    "no_new_privs",
    "no_capabilities",
    "rlimits_set",
    "fsize_enforced",
    "ipc_namespace",
    "uts_namespace",
    "userns_denied",
    "keyring_denied",
    "memfd_denied",
    "sysv_ipc_denied",
    "bpf_denied",
    "nproc_enforced",
    "inputs_private",
    "programs_unlisted",
    "own_process_group",
    "daemon_started",
)
# Checks the runner makes from outside after the probe ended.
OUTSIDE = ("tmp_private", "shm_private", "daemon_reaped", "deadline_kills", "zygote_pristine")
# Ceilings no configuration may exceed and still pass.
MAX_NPROC = 256
MAX_FSIZE = 64 << 20
MAX_ADDRESS_SPACE = 4 << 30
MAX_PARALLEL_CASES = 16
# Aggregate memory of one case: every process at its address-space limit, plus both scratch
# tmpfs. Memory charged to no address space (memfd, SysV IPC, BPF maps, a tmpfs of a nested
# user namespace) is refused by the case's seccomp filter, which the probe proves.
MAX_CASE_MEMORY = 2 << 30


def case_memory_bytes(limits: Limits) -> int:
    """The most memory one case can hold at once under ``limits``."""
    return limits.nproc * limits.address_space_bytes + 2 * limits.scratch_bytes


def check_preflight(sandbox_id: str, answer: dict[str, Any], limits: Limits) -> dict[str, bool]:
    """Every check by name; :class:`PreflightError` naming the failed ones."""
    probe = answer.get("probe") or {}
    checks: dict[str, bool] = {}
    try:
        reported = json.loads(case_output(probe).decode("utf-8"))["checks"]
    except (ValueError, KeyError, TypeError):
        reported = {}
    if probe.get("timed_out") or not reported:
        # A probe that never reported measured nothing (a starved or broken worker): the worker is
        # replaced as a broken one is, rather than refused as a finding of its isolation.
        raise ProtocolError(f"worker {sandbox_id}: the isolation probe did not report (timed out, no output)")
    for name in INSIDE:
        checks[name] = reported.get(name) is True
    # In a user namespace of its own an unmapped uid (worker root) reads as 65534 from inside:
    # the runner's view from outside must agree.
    checks["uid_nobody"] = checks["uid_nobody"] and probe.get("uid") == NOBODY
    outside = answer.get("outside") or {}
    for name in OUTSIDE:
        checks[name] = outside.get(name) is True
    # Side by side, cases must not share a user (its process count): each needs its own namespace.
    checks["cases_separate"] = answer.get("parallel") == 1 or reported.get("own_userns") is True
    checks["probe_exit_zero"] = probe.get("exit_code") == 0 and not probe.get("timed_out")
    checks["limits_within_ceilings"] = (
        0 < limits.nproc <= MAX_NPROC
        and 0 < limits.fsize_bytes <= MAX_FSIZE
        and 0 < limits.address_space_bytes <= MAX_ADDRESS_SPACE
        and limits.output_bytes <= 65536
        and 1 <= limits.parallel_cases <= MAX_PARALLEL_CASES
    )
    checks["case_memory_bounded"] = case_memory_bytes(limits) <= MAX_CASE_MEMORY
    failed = sorted(name for name, ok in checks.items() if not ok)
    if failed:
        raise PreflightError(
            f"worker {sandbox_id} failed the isolation preflight ({', '.join(failed)}); "
            "the pool never falls back to weaker isolation: use a template with unshare, setpriv-capable "
            "root and /usr/bin/python3, or report the failed checks"
        )
    return checks
