"""One training run, end to end: GRPO on the validated reward pool or episode.

``train.py`` / ``pytest-e2b-env train`` (:mod:`pytest_e2b_env.cli.train`) parse the flags, then
call :func:`run`. Order of events: parse (bad flags and a missing ``E2B_API_KEY`` fail there,
before anything heavy loads), open the target (``open_target``: the local emulator with
``--offline``, else the fault proxy before real E2B), build the subject, preflight it, build and
warm up the tiny model (``--tiny``), baseline -> train -> held-out evaluation, then in
``finally``: close the subject, prove no sandbox of the run is alive, stop the target, write
``metrics.json`` and the evidence bundle. Any failure, cleanup included, is recorded and makes
the exit code non-zero.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_e2b_env.environ import scoped_environ
from pytest_e2b_env.settings import TargetSettings, env_api_key
from pytest_e2b_env.targets import Target, open_target
from pytest_e2b_env.training.project import Project
from pytest_e2b_env.training.record import RunRecord
from pytest_e2b_env.training.settings import PROG, TrainSettings
from pytest_e2b_env.training.timing import StageClock

#: Set before transformers is imported, so nothing ever waits on the hub (user values win).
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    # environment_factory is "experimental" in TRL 1.16 and says so on every trainer.
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


class Progress:
    """Prints progress lines as they happen and keeps them for the bundle's ``logs/train.log``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._started = time.perf_counter()

    def __call__(self, line: str) -> None:
        stamped = f"[{time.perf_counter() - self._started:7.1f}s] {line}"
        self.lines.append(stamped)
        print(stamped, flush=True)

    def text(self) -> str:
        """Everything printed so far."""
        return "\n".join(self.lines) + "\n"


def _new_run_id() -> str:
    return f"train-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def _make_subject(settings: TrainSettings, target: Target, clock: StageClock, project: Project | None) -> Any:
    from pytest_e2b_env.training.subjects import EpisodeSubject, RewardSubject

    if project is not None:
        from pytest_e2b_env.training.user_episode import UserEpisodeSubject
        from pytest_e2b_env.training.user_reward import UserRewardSubject

        user = UserEpisodeSubject if settings.mode == "episode" else UserRewardSubject
        return user(settings, target, clock, project)
    if settings.mode == "episode":
        return EpisodeSubject(settings, target, clock)
    return RewardSubject(settings, target, clock)


def _tiny_model(settings: TrainSettings, subject: Any, record: RunRecord, say: Callable[[str], None]) -> str:
    from pytest_e2b_env.training.tiny import build_tiny_model, warm_up

    out = Path(settings.output_dir) / "tiny-model"
    examples = subject.warmup_examples()
    if not examples:
        raise RuntimeError("the subject gave no warm-up examples; --tiny cannot teach the task format")
    corpus = list(examples) + list(subject.tokenizer_examples())
    say(f"[tiny] building a tiny Qwen3 model and tokenizer in {out}")
    record.model.update(build_tiny_model(out, corpus, settings.seed))
    say(f"[tiny] warm-up: {settings.warmup_steps} steps on {len(examples)} examples of the task format")
    record.warmup = warm_up(
        out, examples, settings.warmup_steps, settings.seed, weights=subject.warmup_weights(), progress=say
    )
    return str(out)


def _finish(
    record: RunRecord, subject: Any, target: Target | None, say: Progress, user: bool = False
) -> None:
    """Close everything; every failure here is a cleanup failure of the run."""
    from pytest_e2b_env.training.subjects import check_no_leaks
    from pytest_e2b_env.training.user import check_created_gone

    # The reference code tags its sandboxes with the run id; a user's code need not, so for it every
    # sandbox the target saw created must be gone.
    leak_check = check_created_gone if user else check_no_leaks

    record.phase = "cleanup"
    cleanup: dict[str, Any] = {"closed": None, "leaked": [], "errors": []}
    record.cleanup = cleanup
    if subject is not None:
        with contextlib.suppress(Exception):
            record.subject = subject.metrics()
        try:
            subject.close()
            cleanup["closed"] = True
        except Exception as exc:
            cleanup["closed"] = False
            cleanup["errors"].append(f"{type(exc).__name__}: {exc}")
            record.fail(exc)
        with contextlib.suppress(Exception):
            record.subject = subject.metrics()  # after close: final worker and cleanup counts
    if target is not None:
        try:
            cleanup.update(leak_check(target))
        except Exception as exc:
            cleanup["leaked"] = list(getattr(exc, "ids", ()))
            cleanup["errors"].append(f"{type(exc).__name__}: {exc}")
            record.fail(exc)
    if cleanup["errors"]:
        say(f"[cleanup] FAILED: {'; '.join(cleanup['errors'])}")
    elif subject is not None:
        say("[cleanup] subject closed, no sandbox of the run left alive")


def _stop_target(record: RunRecord, target: Target, say: Progress) -> tuple[Any, Any]:
    """Read the target's ledger and the run's live sandboxes, then stop it; return (ledger, summary)."""
    from pytest_e2b_env.training.evidence import sandbox_summary

    ledger = sandboxes = None
    try:
        ledger = target.ledger()
        alive_now = target.alive_ids()
        alive = [sid for sid in target.created_ids() if sid in alive_now]  # live: not the whole team
        sandboxes = sandbox_summary(ledger, alive)
        record.target["sandboxes"] = {
            k: sandboxes[k]
            for k in ("created", "ops", "sandbox_seconds", "infrastructure_errors", "alive_at_end")
        }
    except Exception as exc:
        record.warnings.append(f"could not read the target's ledger: {type(exc).__name__}: {exc}")
    try:
        target.close()  # the emulator kills every sandbox on the way out
    except Exception as exc:  # failing that is a cleanup failure of the run
        record.fail(exc)
        record.cleanup.setdefault("errors", []).append(f"target stop: {type(exc).__name__}: {exc}")
        say(f"[cleanup] FAILED to stop the target: {type(exc).__name__}: {exc}")
    return ledger, sandboxes


def _write_outputs(
    settings: TrainSettings, record: RunRecord, say: Progress, ledger: Any, sandboxes: Any, secrets: list[str]
) -> None:
    from pytest_e2b_env.training.evidence import write_bundle

    out = Path(settings.output_dir)
    if record.status == "ok":
        before = (record.before or {}).get("eval_reward")
        after = (record.after or {}).get("eval_reward")
        say(f"done: held-out reward before {before} after {after}")
    path = record.write(out / "metrics.json")
    say(f"metrics: {path}")
    try:
        bundle = write_bundle(out / "evidence", record, say.text(), ledger, sandboxes, secrets)
        say(f"evidence: {bundle}")
    except Exception as exc:
        record.fail(exc)
        record.warnings.append(f"evidence bundle not written: {type(exc).__name__}: {exc}")
        record.write(out / "metrics.json")
        say(f"evidence bundle FAILED: {type(exc).__name__}: {exc}")


def run(
    settings: TrainSettings, project: Project | None = None, validated_by: dict[str, Any] | None = None
) -> int:
    """Run one training job end to end; return the exit code (0 only if all of it, cleanup too, passed).

    ``project``: the user's subject and tasks (None: the bundled reference code on its fixtures);
    ``validated_by``: the validation the gate accepted (or the recorded override), for ``metrics.json``.
    """
    from pytest_e2b_env.evidence.runinfo import package_versions, platform_info

    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    say = Progress()
    run_id = _new_run_id()
    record = RunRecord(mode=settings.mode, settings=settings.as_dict(), run_id=run_id)
    record.versions = {**package_versions(), "python": platform_info()["python"]}
    record.model = {"source": settings.model_label}
    record.project = project.as_dict() if project is not None else None
    record.validated_by = validated_by
    clock = StageClock()
    subject = target = None
    secrets = [v for v in (env_api_key(),) if v]
    say(
        f"{PROG} --mode {settings.mode}: run {run_id}, model {settings.model_label}, "
        f"output {settings.output_dir}"
    )
    try:
        wanted = TargetSettings.from_env(live=not settings.offline, run_id=run_id)
        say(
            "[target] starting the local E2B emulator"
            if settings.offline
            else "[target] starting the fault proxy"
        )
        target = open_target(wanted)
        secrets.append(target.api_key)
        # Offline the reference episode serves itself against our emulator, never a server the shell names.
        sdk_env = target.settings.to_env(own_openenv=settings.offline)
        record.target = target.describe()
        with scoped_environ(sdk_env):
            try:
                record.phase = "subject"
                subject = _make_subject(settings, target, clock, project)
                record.phase = "preflight"
                record.preflight = subject.preflight(say)
                from pytest_e2b_env.training.grpo import run_grpo

                model_path = str(settings.model)
                if settings.tiny:
                    record.phase = "tiny-model"
                    model_path = _tiny_model(settings, subject, record, say)
                if hasattr(subject, "drop_sessions"):
                    subject.drop_sessions()
                clock.take()
                run_grpo(settings, record, subject, model_path, clock, say)
                record.status = "ok"
            except BaseException as exc:
                record.fail(exc)
                say(f"FAILED in {record.phase}: {type(exc).__name__}: {exc}")
                if not isinstance(exc, Exception):
                    raise
            finally:
                _finish(record, subject, target, say, user=project is not None)
    except BaseException as exc:
        record.fail(exc)
        if not isinstance(exc, Exception | KeyboardInterrupt):
            raise
    finally:
        ledger, sandboxes = _stop_target(record, target, say) if target is not None else (None, None)
        _write_outputs(settings, record, say, ledger, sandboxes, secrets)
    return 0 if record.status == "ok" else 1
