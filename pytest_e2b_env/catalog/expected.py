"""Expected outputs never enter a sandbox: which texts prove one did, and how the ledger shows it.

An expected output found in a request body means the subject handed it to a sandbox, where the
candidate (or anything it starts) can read it, whatever a hunting program happens to find. Each
case watches for the forms of its expected outputs with fault rules that answer nothing (a zero
delay, so the request goes through untouched) and match any request whose body carries a form; a
rule that fired is the proof, read from the target's ledger by the controller.

What counts as a form (:func:`forms`) of an expected output: its text; when it is JSON, the value
re-serialized (default, compact and sorted-key separators) and as a Python literal (what a script
or a ``run_code`` cell carries); each of those also inside one or two levels of string escaping (a
JSON string, a JSON string inside a script inside a request). What is not proof (:func:`needles`):
a value shorter than :data:`MIN_NEEDLE` characters (``{}``, ``1``, ``true`` occur in any request by
chance), and any form found in a form of what the case sends on purpose (programs, inputs, prompts,
task files): its presence proves nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pytest_e2b_env.catalog.drive_reward import batch
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.catalog.observe import rule_of

#: Shorter values (``{}``, ``0``, ``true``) appear in any request by chance: not checkable.
MIN_NEEDLE = 8
#: Levels of string escaping looked through (a JSON string inside a script inside a request).
ESCAPES = 2
MAX_NEEDLES = 64
#: What a watching rule answers: nothing (the request goes through as it came).
WATCH = {"delay": 0}
#: The global criterion's id.
CRITERION = "no-expected-output-in-sandbox"
DESCRIPTION = (
    "no request carried a form of an expected output (its text, the JSON value re-serialized or as a "
    f"Python literal, inside up to {ESCAPES} levels of string escaping; {MIN_NEEDLE}+ characters, "
    "not part of a program or input sent on purpose): a sandbox never holds the answers"
)


def _values(text: str) -> list[str]:
    """The text and, when it is JSON, the value re-serialized and as a Python literal."""
    values = [text]
    try:
        value = json.loads(text)
    except ValueError:
        return values
    values += [
        json.dumps(value),
        json.dumps(value, separators=(",", ":")),
        json.dumps(value, sort_keys=True),
        repr(value),
    ]
    return values


def forms(text: str, min_length: int = 0) -> list[str]:
    """Every form of ``text`` (see the module docstring), once each, skipping values under ``min_length``.

    The length rule applies to the unescaped value: escaping a short value makes it longer, never
    rarer.
    """
    found: list[str] = []
    for value in _values(text):
        if len(value) < min_length:
            continue
        level = value
        for _ in range(ESCAPES + 1):
            found.append(level)
            level = json.dumps(level)[1:-1]
    return list(dict.fromkeys(found))


def needles(expected: Sequence[str], sent: Sequence[str]) -> list[str]:
    """The texts whose presence in a request body means an expected output entered a sandbox.

    Every form of every expected output at least :data:`MIN_NEEDLE` characters long, except those
    found in a form of anything sent on purpose, and except those containing another needle (a body
    holding one holds the shorter one too).
    """
    legit = "\n".join(form for text in sent for form in forms(text))
    kept = [
        form
        for form in dict.fromkeys(f for text in expected for f in forms(text, MIN_NEEDLE))
        if form not in legit
    ]
    minimal = [form for form in kept if not any(other != form and other in form for other in kept)]
    return minimal[:MAX_NEEDLES]


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, default=str)


def reward_needles(case: Case) -> list[str]:
    """The needles of a reward case: its test cases' expected outputs, minus what it sends on purpose."""
    spec = case.reward
    if spec is None:
        return []
    completions, tests = batch(case, [*spec.completions, *(spec.second_batch or [])])
    expected = [str(test["output"]) for cases in tests for test in cases]
    sent = [_text(m.get("content")) for messages in completions for m in messages if isinstance(m, dict)]
    sent += [str(test["input"]) for cases in tests for test in cases]
    sent += [_text(m.get("content")) for m in spec.prompt or [] if isinstance(m, dict)]
    sent += [_text(value) for value in spec.columns.values()]
    return needles(expected, sent)


def case_needles(case: Case) -> list[str]:
    """Every needle a case watches for: a reward case's own, plus any the case names itself."""
    found = [*case.never_in_sandbox, *reward_needles(case)]
    return list(dict.fromkeys(found))[:MAX_NEEDLES]


def carried(ledger: Sequence[dict[str, Any]], watch: Sequence[str]) -> list[str]:
    """The requests a watching rule matched: each as ``route (sandbox id)``."""
    rules = set(watch)
    return [
        f"{e.get('route', '')} (sandbox {e.get('sandbox_id') or '-'})" for e in ledger if rule_of(e) in rules
    ]
