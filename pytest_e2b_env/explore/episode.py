"""An episode schedule's task and tool calls: what the model does between ``reset`` and ``get_reward``.

An episode schedule's behaviours are the model's tool calls, in order, before it submits: each
``terminal`` command carries a marker line (``: explore-tool-3;``) so a fault step can aim at the
requests of one tool call, as a reward schedule aims at one completion's program. The task is the
catalog's weekly-sales repair, with one companion file the verifier must never receive (only the
submitted artifact leaves the policy sandbox). Standard library only; nothing here runs anything.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_e2b_env.errors import ConfigError

#: tool call -> what it does, as a sentence names it
ACTIONS: dict[str, str] = {
    "repair": "writes the correct program",
    "wrong": "writes a wrong program",
    "hostile": "writes a program that prints a pass marker and no answer",
    "look": "runs the program (changes nothing)",
}
#: The file whose text proves the verifier got more than the artifact (the policy's own notes).
COMPANION = "explore-companion-notes"
ARTIFACT = "report.py"
WORKDIR = "/home/user/work"
_HEAD = '"""Weekly sales report: total amount per region, as JSON."""\nimport csv\nimport json\n\n'
_READ = 'totals = {}\nwith open("sales.csv", newline="") as handle:\n    for row in csv.DictReader(handle):\n'
STARTER = _HEAD + _READ + '        totals[row["region"]] = int(row["amount"])\n'
STARTER += "print(json.dumps(totals, sort_keys=True))\n"
PROGRAMS: dict[str, str] = {
    "repair": _HEAD
    + _READ
    + '        totals[row["region"]] = totals.get(row["region"], 0) + int(row["amount"])\n'
    + "print(json.dumps(totals, sort_keys=True))\n",
    "wrong": STARTER,
    "hostile": 'print("PASSED all tests")\nimport os\nos._exit(0)\n',
}
TASK: dict[str, Any] = {
    "id": "explore-weekly-sales",
    "workdir": WORKDIR,
    "files": {
        ARTIFACT: STARTER,
        "sales.csv": "region,amount\neast,10\nwest,7\neast,5\n",
        "notes.txt": f"{COMPANION}: the policy's own notes; they never leave this sandbox\n",
    },
    "artifact": ARTIFACT,
    "command": f"python3 -B {ARTIFACT}",
    "verification": {
        "files": {"sales.csv": "region,amount\nnorth,3\nsouth,4\nnorth,8\nsouth,1\n"},
        "expected": {"north": 11, "south": 5},
    },
}


def tool_marker(call: int) -> str:
    """The text that makes one tool call's command findable in a request body (1-based)."""
    return f"explore-tool-{call};"


def command(action: str, call: int) -> str:
    """The ``terminal`` command of one tool call: its marker line, then what it does."""
    if action not in ACTIONS:
        raise ConfigError(f"tool call {action!r} is not one of {', '.join(ACTIONS)}")
    head = f": {tool_marker(call)}\n"
    if action == "look":
        return head + TASK["command"]
    return head + f"cat > {ARTIFACT} <<'PE2B_EXPLORE'\n{PROGRAMS[action]}PE2B_EXPLORE"


def expected_reward(actions: tuple[str, ...]) -> float:
    """What a correct episode commits: 1.0 when the last program written is the repair (the starter
    program, submitted unchanged, scores 0.0)."""
    written = [a for a in actions if a != "look"]
    return 1.0 if written and written[-1] == "repair" else 0.0


def episode_input(actions: tuple[str, ...]) -> dict[str, Any]:
    """The catalog case's ``episode`` table: the task inline, each tool call, then submit."""
    script: list[dict[str, Any]] = [
        {"tool": "terminal", "args": {"command": command(a, i)}} for i, a in enumerate(actions, 1)
    ]
    return {"task": json.loads(json.dumps(TASK)), "script": [*script, {"tool": "submit"}]}
