"""The reward smoke: five fixed candidates scored by a fresh pool, then proof nothing is left.

``pytest-e2b-env smoke reward`` (wired by the CLI) prints the receipt this returns as JSON.
Offline it opens the local emulator, live the fault proxy before real E2B (``open_target``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.settings import TargetSettings, env_run_id
from pytest_e2b_env.targets import open_target
from pytest_e2b_env.targets.tags import run_of

# Task "total-tokens" of fixtures/reward/tasks.json (inlined: fixtures are not package data).
CASES = [
    {"input": "[]", "output": "{}"},
    {
        "input": json.dumps(
            [
                {"customer": "acme", "tokens": 12},
                {"customer": "beta", "tokens": 3},
                {"customer": "acme", "tokens": 8},
            ]
        ),
        "output": json.dumps({"acme": 20, "beta": 3}),
    },
    {
        "input": json.dumps(
            [
                {"customer": "zero", "tokens": 0},
                {"customer": "large", "tokens": 100000},
                {"customer": "zero", "tokens": 0},
                {"customer": "large", "tokens": 1},
            ]
        ),
        "output": json.dumps({"zero": 0, "large": 100001}),
    },
]
PROGRAMS = {
    "correct": (
        "import json, sys\ntotals = {}\nfor r in json.load(sys.stdin):\n"
        "    totals[r['customer']] = totals.get(r['customer'], 0) + r['tokens']\nprint(json.dumps(totals))\n"
    ),
    "wrong": "print('[]')\n",
    "partial": (
        "import json, sys\ntotals = {}\nfor r in json.load(sys.stdin):\n"
        "    totals[r['customer']] = totals.get(r['customer'], 0) + r['tokens']\n"
        "print(json.dumps({k: v for k, v in totals.items() if v}))\n"
    ),
    "syntax_error": "this is invalid Python\n",
    "timeout": "while True:\n    pass\n",
}
EXPECTED = {"correct": 1.0, "wrong": 0.0, "partial": 2 / 3, "syntax_error": 0.0, "timeout": 0.0}


def _completion(program: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"```python\n{program}```"}]


async def _score(api_opts: dict[str, Any], run_id: str) -> dict[str, Any]:
    from pytest_e2b_env.reward.pool import RewardPool
    from pytest_e2b_env.reward.workers import WorkerClient

    pool = RewardPool(workers=2, create_interval=1.0, case_seconds=2.0, run_id=run_id, api_opts=api_opts)
    names = list(PROGRAMS)
    started = time.monotonic()
    try:
        scores = await pool.code_reward([_completion(PROGRAMS[n]) for n in names], [CASES] * len(names))
    finally:
        await pool.close()
    # Independent of close()'s own sweep: list the run's sandboxes once more.
    client = WorkerClient(
        template="base", run_id=run_id, lifetime_seconds=60, request_timeout=15, api_opts=api_opts
    )
    leftover = await client.list_ids(whole_run=True)
    return {
        "scores": dict(zip(names, scores, strict=True)),
        "expected": EXPECTED,
        "seconds": round(time.monotonic() - started, 3),
        "reasons": {
            n: r["reason"] for n, r in zip(names, sorted(pool.ledger, key=lambda r: r["index"]), strict=True)
        },
        "metrics": pool.metrics,
        "leftover_sandboxes": leftover,
    }


def reward_smoke(live: bool) -> dict[str, Any]:
    """Score the five fixed candidates on the emulator (or live E2B) and return the receipt.

    ``ok`` is true when every score matches ``expected`` and no sandbox of the run remains.
    """
    import uuid

    run_id = env_run_id() or f"smoke-{uuid.uuid4().hex[:8]}"
    wanted = TargetSettings.from_env(live=live, run_id=run_id)
    if live and not wanted.api_key:
        raise ConfigError("live reward smoke needs E2B_API_KEY in the environment; or run it offline")
    with open_target(wanted) as target:
        receipt = asyncio.run(_score(target.sdk_opts(), run_id))
        receipt["mode"] = target.mode
        receipt["isolation"] = target.isolation
        # Asked of the target itself (the emulator, or the upstream behind the proxy).
        receipt["target_leftovers"] = [
            s["sandbox_id"] for s in target.sandboxes() if run_of(s.get("metadata")) == run_id
        ]
    receipt["run_id"] = run_id
    matches = all(abs(receipt["scores"][n] - v) < 1e-9 for n, v in EXPECTED.items())
    receipt["ok"] = matches and not receipt["leftover_sandboxes"] and not receipt["target_leftovers"]
    return receipt
