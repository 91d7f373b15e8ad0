"""A reward pool built the way the E2B cookbook's TRL GRPO example builds its own, for benchmarks only.

Written from the published description of that example (``e2b-dev/e2b-cookbook``,
``examples/trl-grpo-python``), so ``bench_reward.py`` can compare against its design side by side
on the same emulator. Per candidate, on a borrowed worker: renew the lifetime, upload
``solution.py``, upload ``inputs.json``, run a supervisor script as root. The supervisor runs each
case as ``timeout --signal=KILL 2s unshare --mount --pid --fork --kill-child=KILL --net --ipc
--mount-proc bash isolated_run.sh``, where the script makes ``/`` read-only, mounts 16 MiB tmpfs
scratch on ``/tmp`` and ``/dev/shm``, sets ulimits and ``exec``s ``setpriv`` to uid 65534 and
Python, which reports ``ready`` on fd 3 before running the program. Grading is exact JSON.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from e2b import AsyncSandbox

REMOTE = "/opt/cookbook-reward"
CASE_COMMAND = (
    "/usr/bin/timeout --signal=KILL 2s unshare --mount --pid --fork --kill-child=KILL --net --ipc"
    f" --mount-proc bash {REMOTE}/isolated_run.sh {REMOTE}/solution.py"
    f" < {REMOTE}/input.json > {REMOTE}/output.json 2>/dev/null 3> {REMOTE}/status"
)
ISOLATED_RUN = """set -eu
mount --make-rprivate /
mount --bind / /
mount -o remount,bind,ro /
mount -t tmpfs -o size=16m,mode=1777 tmpfs /tmp
mount -t tmpfs -o size=16m,mode=1777 tmpfs /dev/shm
cd /tmp
ulimit -u 16
ulimit -f 64
BOOT='import os, runpy, sys; os.write(3, b"ready"); os.close(3)'
BOOT="$BOOT; runpy.run_path(sys.argv[1], run_name='__main__')"
exec setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs python3 -I -B -c "$BOOT" "$1"
"""
EVALUATE = f"""import json, subprocess, time
results = []
for text in json.load(open("{REMOTE}/inputs.json")):
    with open("{REMOTE}/input.json", "w") as fh:
        fh.write(text)
    started = time.monotonic()
    code = subprocess.run({CASE_COMMAND!r}, shell=True, check=False).returncode
    seconds = time.monotonic() - started
    if open("{REMOTE}/status").read() != "ready":
        raise RuntimeError("Candidate never entered the isolated Python runtime")
    output = ""
    if code == 0:
        with open("{REMOTE}/output.json", "rb") as fh:
            try:
                output = fh.read(65537).decode()
            except UnicodeDecodeError:
                code = 1
    results.append({{"exit_code": code, "output": output, "seconds": seconds}})
print(json.dumps(results))
"""


def _matches(output: str, expected: str) -> bool:
    try:
        return bool(json.loads(output) == json.loads(expected))
    except ValueError:
        return False


class CookbookPool:
    """``workers`` reusable sandboxes; ``await pool.code_reward(codes, test_cases)`` -> scores."""

    def __init__(self, workers: int, sdk_opts: dict[str, Any]) -> None:
        self.workers = workers
        self.sdk_opts = sdk_opts
        self._queue: asyncio.Queue[AsyncSandbox] = asyncio.Queue()
        self._owned: list[AsyncSandbox] = []

    async def start(self) -> None:
        for _ in range(self.workers):  # serially, as the example does
            sandbox = await AsyncSandbox.create(timeout=600, allow_internet_access=False, **self.sdk_opts)
            self._owned.append(sandbox)
            await sandbox.commands.run(f"install -d -m 755 {REMOTE}", user="root", timeout=10)
            await sandbox.files.write(f"{REMOTE}/isolated_run.sh", ISOLATED_RUN, user="root")
            await sandbox.files.write(f"{REMOTE}/evaluate.py", EVALUATE, user="root")
            await sandbox.commands.run(f"chmod 555 {REMOTE}/isolated_run.sh", user="root", timeout=10)
            self._queue.put_nowait(sandbox)

    async def _evaluate(self, code: str, cases: list[dict[str, str]]) -> float:
        sandbox = await self._queue.get()
        try:
            await sandbox.set_timeout(600)
            await sandbox.files.write(f"{REMOTE}/solution.py", code, user="root")
            inputs = json.dumps([case["input"] for case in cases])
            await sandbox.files.write(f"{REMOTE}/inputs.json", inputs, user="root")
            result = await sandbox.commands.run(
                f"python3 -I -B {REMOTE}/evaluate.py", user="root", timeout=2 * len(cases) + 10
            )
            outputs = json.loads(result.stdout)
            passed = sum(
                o["exit_code"] == 0 and _matches(o["output"], case["output"])
                for o, case in zip(outputs, cases, strict=True)
            )
            return passed / len(cases)
        finally:
            self._queue.put_nowait(sandbox)

    async def code_reward(self, codes: list[str], test_cases: list[list[dict[str, str]]]) -> list[float]:
        jobs = [self._evaluate(code, cases) for code, cases in zip(codes, test_cases, strict=True)]
        return list(await asyncio.gather(*jobs))

    async def close(self) -> None:
        for sandbox in self._owned:
            await sandbox.kill()
