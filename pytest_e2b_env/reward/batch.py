"""A batch as TRL hands it over: validation of the test cases, and grading one runner answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.reward.grading import BadJSON, grade_output, parse_strict
from pytest_e2b_env.reward.protocol import ProtocolError, StarvedCase, case_output
from pytest_e2b_env.reward.records import CandidateRecord, CaseRecord, digest

Cases = list[tuple[bytes, Any]]
#: The runner's timing figures a case record keeps (see ``reward_runner._wait_deadline``).
TIMING = ("own", "waited", "cpu", "blocked")


def validate_batch(completions: Sequence[Any], test_cases: Sequence[Any]) -> list[Cases]:
    """Inputs as bytes and expected values per completion; :class:`ConfigError` names the bad one."""
    if len(completions) != len(test_cases):
        raise ConfigError(
            f"{len(completions)} completions but {len(test_cases)} test_cases lists; "
            "TRL passes one test_cases entry per completion (a dataset column named test_cases)"
        )
    batch: list[Cases] = []
    for i, cases in enumerate(test_cases):
        if not isinstance(cases, list | tuple) or not cases:
            raise ConfigError(
                f"test_cases[{i}] must be a non-empty list of {{'input', 'output'}}, got {cases!r:.80}"
            )
        parsed: Cases = []
        for j, case in enumerate(cases):
            if not isinstance(case, dict) or not isinstance(case.get("input"), str):
                raise ConfigError(f"test_cases[{i}][{j}] needs an 'input' JSON string, got {case!r:.80}")
            if not isinstance(case.get("output"), str):
                raise ConfigError(f"test_cases[{i}][{j}] needs an 'output' JSON string, got {case!r:.80}")
            try:
                parse_strict(case["input"])
                expected = parse_strict(case["output"])
            except BadJSON as exc:
                raise ConfigError(
                    f"test_cases[{i}][{j}] is not strict JSON ({exc}); fix the dataset"
                ) from None
            parsed.append((case["input"].encode("utf-8"), expected))
        batch.append(parsed)
    return batch


def _timing(raw: Any) -> dict[str, Any] | None:
    """The runner's timing of a case, kept only as plain numbers and a short state (it is evidence)."""
    if not isinstance(raw, dict):
        return None
    numbers = {k: raw.get(k) for k in TIMING}
    kept: dict[str, Any] = {
        k: v for k, v in numbers.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    if isinstance(raw.get("state"), str):
        kept["state"] = raw["state"][:1]
    return kept


def grade_answer(record: CandidateRecord, answer: dict[str, Any], cases: Cases) -> int:
    """Fill ``record`` (score, reason, per-case records) from the runner's answer; cases graded.

    A malformed answer is a :class:`ProtocolError` (a broken worker), never a candidate's 0.
    """
    results = answer.get("cases")
    if not isinstance(results, list) or len(results) != len(cases):
        raise ProtocolError(f"runner returned {len(results or [])} case records for {len(cases)} cases")
    passed = 0
    for result, (_, expected) in zip(results, cases, strict=True):
        if result.get("setup_error"):
            raise ProtocolError(f"runner could not isolate a case: {str(result['setup_error'])[:200]}")
        if result.get("starved"):
            raise StarvedCase(
                f"a case was stopped after {result.get('seconds')} s of wall time before its own time was "
                "spent: the host starved it of CPU"
            )
        output = case_output(result)
        reason = grade_output(
            result.get("exit_code"),
            bool(result.get("timed_out")),
            output,
            bool(result.get("output_truncated")),
            expected,
        )
        passed += reason == "passed"
        record.cases.append(
            CaseRecord(
                reason,
                result.get("exit_code"),
                result.get("seconds"),
                len(output),
                digest(output),
                _timing(result.get("timing")),
            )
        )
    record.score = passed / len(cases)
    failed = [c.reason for c in record.cases if c.reason != "passed"]
    record.reason = failed[0] if failed else None
    return len(cases)
