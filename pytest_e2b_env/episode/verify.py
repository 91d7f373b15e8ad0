"""Submission: export one artifact, retire the policy sandbox, verify in a fresh offline sandbox.

A mixin of :class:`~pytest_e2b_env.episode.environment.RepairEnvironment`; each step is a method
so a variant can change exactly one thing (the defective sample subjects do). The order is the
safety argument: the policy sandbox is confirmed gone before the verifier exists, the verifier
only ever receives the artifact and the hidden input, grading happens on the host, and the score
is returned only after the verifier is confirmed gone.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pytest_e2b_env.episode.runtime import Episode
from pytest_e2b_env.episode.sandboxes import (
    CommandOutcome,
    create_sandbox,
    export_file,
    run_bounded,
)
from pytest_e2b_env.episode.task import grade_output
from pytest_e2b_env.errors import InfrastructureError
from pytest_e2b_env.settings import TargetSettings

#: Bytes of verifier stdout graded at most (a longer output scores 0).
VERIFY_OUTPUT_BYTES = 65536


class Submission:
    """The submit pipeline (mixed into the environment, which provides ``_target`` and ``_release``)."""

    VERIFIER_INTERNET = False
    _target: TargetSettings

    def _release(self, ep: Episode, *, sweep_episode: bool = False) -> None:  # pragma: no cover - provided
        raise NotImplementedError

    def _run_submission(self, ep: Episode) -> float:
        """Score the submitted artifact; raises on any infrastructure or cleanup failure."""
        t0 = time.monotonic()
        artifact = self._export(ep)
        ep.timing("export", t0)
        self._retire(ep, "policy")  # confirmed gone before any verifier exists
        if artifact is None:
            ep.notes.append("artifact missing or over the size limit: scored 0 without a verifier")
            return 0.0
        t0 = time.monotonic()
        verifier = self._create_verifier(ep)
        ep.own(verifier.sandbox_id, "verifier")
        ep.timing("create_verifier", t0)
        t0 = time.monotonic()
        files = self._verifier_files(ep, artifact)
        verifier.files.write_files(
            [{"path": ep.task.path(name), "data": data} for name, data in files.items()]
        )
        ep.timing("upload", t0)
        t0 = time.monotonic()
        outcome = self._run_verifier(ep, verifier)
        ep.timing("verify", t0)
        score = self._score(ep, outcome)
        self._retire(ep, "verifier")  # confirmed gone before the score leaves this method
        return score

    def _retire(self, ep: Episode, role: str) -> None:
        """Kill every owned sandbox and confirm it gone; raises CleanupError naming what survived."""
        self._release(ep)

    def _export(self, ep: Episode) -> bytes | None:
        """Only the declared artifact leaves the policy sandbox, at most ``limits.artifact_bytes``."""
        return export_file(ep.policy, ep.task.path(ep.task.artifact), ep.task.limits.artifact_bytes)

    def _create_verifier(self, ep: Episode) -> Any:
        """A fresh sandbox from the same template, with no internet access."""
        return create_sandbox(
            self._target,
            role="verifier",
            episode=ep.tag,
            lifetime=ep.task.limits.verify_seconds,
            internet=self.VERIFIER_INTERNET,
        )

    def _verifier_files(self, ep: Episode, artifact: bytes) -> Mapping[str, str | bytes]:
        """The artifact plus the hidden verification input, nothing else."""
        return {ep.task.artifact: artifact, **ep.task.verification.files}

    def _run_verifier(self, ep: Episode, verifier: Any) -> CommandOutcome:
        return run_bounded(
            verifier,
            ep.task.command,
            cwd=ep.task.workdir,
            seconds=ep.task.limits.verify_seconds,
            output_bytes=VERIFY_OUTPUT_BYTES,
            merge_stderr=False,
        )

    def _score(self, ep: Episode, outcome: CommandOutcome) -> float:
        if outcome.timed_out:
            ep.notes.append("verifier command exceeded verify_seconds: scored 0")
            return 0.0
        if outcome.exit_code != 0:
            ep.notes.append(f"verifier command exited {outcome.exit_code}: scored 0")
            return 0.0
        if outcome.truncated:
            ep.notes.append("verifier output over the size limit: scored 0")
            return 0.0
        return self._grade(outcome.output, ep.task.verification.expected)

    def _grade(self, stdout: str, expected: Mapping[str, int]) -> float:
        return grade_output(stdout, expected)

    def _check_healthy(self, ep: Episode) -> None:
        """Before accepting 0 for "no submission": the policy sandbox must still answer."""
        if ep.policy is None or not ep.policy.is_running(request_timeout=self._target.request_timeout):
            raise InfrastructureError("the policy sandbox is no longer running")
