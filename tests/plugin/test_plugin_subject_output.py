"""What a subject prints goes with its case: under the case's report and in its record."""

from __future__ import annotations

import json

import pytest
from plugin_helpers import only_bundle, write_project

#: A reward that logs a traceback on stderr and prints on stdout, then scores everything 0.
NOISY = """
import logging, sys


def make_reward():
    def reward(completions, test_cases, **kwargs):
        print("noisy-stdout-line")
        try:
            raise RuntimeError("noisy-traceback-marker")
        except RuntimeError:
            logging.getLogger("noisy").exception("scoring went wrong")
        return [0.0 for _ in completions]
    return reward
"""


@pytest.mark.parametrize("lanes", ["1", "2"])  # a spawned host; hosts forked from a template
def test_subject_output_is_shown_under_its_case(pytester: pytest.Pytester, lanes: str) -> None:
    """A traceback the subject logs is in its failed case's report section and its bundle record,
    not on the terminal above the cases."""
    write_project(pytester, subject="noisy:make_reward")
    pytester.makepyfile(noisy=NOISY)
    result = pytester.runpytest_subprocess(
        "--e2b-evidence", "ev", "--e2b-lanes", lanes, "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=1, passed=1)  # reward-tiny-correct expects 1.0; no-fence 0.0
    out = result.stdout.str()
    progress = out.index("\ne2b-catalog")  # the cases' progress line, before any report
    assert "noisy-" not in out[:progress] + result.stderr.str(), out
    section = out[out.index("Captured subject output call") :]
    assert "RuntimeError: noisy-traceback-marker" in section, out
    assert "noisy-stdout-line" in section, out
    assert "reward-tiny-correct" in out[out.index("FAILURES") : out.index("Captured subject output call")]
    bundle = only_bundle(pytester.path / "ev")
    lines = {r["id"]: r for r in map(json.loads, (bundle / "cases.jsonl").read_text().splitlines())}
    for case_id in ("reward-tiny-correct", "reward-tiny-no-fence"):
        report = json.loads((bundle / lines[case_id]["report"]).read_text())
        said = report["subject_output"]
        assert "RuntimeError: noisy-traceback-marker" in said, report
        assert said.count("noisy-stdout-line") == 1, said  # each case has its own, once
