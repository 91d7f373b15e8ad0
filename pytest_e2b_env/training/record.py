"""What a training run measured, written to ``metrics.json`` whatever happens.

Pure code (no torch, no trl): the runner feeds it figures as they are measured, and the CLI
writes it in ``finally``, so a failed run still leaves the baseline, the steps that ran and
the error behind.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Above this share of reward groups with zero spread, GRPO has (almost) nothing to learn from.
ZERO_STD_WARN = 0.5


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf become None, tuples lists, unknown objects their ``repr`` type name."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy / torch scalars
        try:
            return _clean(value.item())
        except (TypeError, ValueError):
            pass
    return f"<{type(value).__name__}>"


def mean_zero_std(history: Iterable[Mapping[str, Any]]) -> float | None:
    """Mean ``frac_reward_zero_std`` over the training steps of a TRL log history (None if none logged)."""
    values = [
        float(entry["frac_reward_zero_std"])
        for entry in history
        if isinstance(entry.get("frac_reward_zero_std"), (int, float))
        and math.isfinite(float(entry["frac_reward_zero_std"]))
    ]
    return sum(values) / len(values) if values else None


def zero_std_warning(frac: float | None, threshold: float = ZERO_STD_WARN) -> str | None:
    """The warning to print when most reward groups had no spread, else None."""
    if frac is None or frac <= threshold:
        return None
    return (
        f"WARNING: {frac:.0%} of reward groups had zero spread (every completion of a prompt scored "
        "the same), so GRPO had almost no learning signal. Raise --num-generations or "
        "--max-completion-length, or use tasks the model partly solves."
    )


#: Above this share of a step's completions masked, the step says little; the run says so.
MASKED_WARN = 0.5


def masked_step_warning(
    step: int, masked: int, completions: int, threshold: float = MASKED_WARN
) -> str | None:
    """The warning to print when most completions of a step were masked (unscorable), else None."""
    if completions <= 0 or masked / completions <= threshold:
        return None
    return (
        f"WARNING: step {step}: {masked} of {completions} completions were masked (their sandboxes "
        "failed; TRL gave them zero advantage), so the step learned from few completions. Check the "
        "sandbox backend, or pass --on-infrastructure raise to stop at the first such failure."
    )


def reward_share(steps: Sequence[Mapping[str, Any]]) -> float | None:
    """Share of the step time spent in the reward stage, over all steps that recorded both."""
    total = sum(
        float(s["seconds"]) for s in steps if s.get("seconds") and s.get("reward_seconds") is not None
    )
    reward = sum(
        float(s["reward_seconds"]) for s in steps if s.get("seconds") and s.get("reward_seconds") is not None
    )
    return reward / total if total > 0 else None


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class RunRecord:
    """Everything ``metrics.json`` holds; fields fill in as the run progresses."""

    mode: str
    settings: dict[str, Any]
    run_id: str
    started: float = field(default_factory=time.time)
    status: str = "running"
    phase: str = "setup"
    error: dict[str, str] | None = None
    target: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    warmup: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    train: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    subject: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, Any] | None = None
    cleanup: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: the user's project (subject, tasks, config) when it trains their code, else None
    project: dict[str, Any] | None = None
    #: the passing validation the gate found (run id, bundle, digests), or the recorded override
    validated_by: dict[str, Any] | None = None

    def fail(self, exc: BaseException) -> None:
        """Record the first error of the run (type, message and the phase it happened in)."""
        if self.error is None:
            from pytest_e2b_env.evidence.redaction import redact

            # Redacted before the cut, which would otherwise leave a piece of a secret unrecognised.
            message = redact(str(exc))[:2000]
            self.error = {"type": type(exc).__name__, "message": message, "phase": self.phase}
        self.status = "failed"

    def to_dict(self) -> dict[str, Any]:
        """The ``metrics.json`` document."""
        frac = mean_zero_std(self.history)
        data = {
            "status": self.status,
            "error": self.error,
            "mode": self.mode,
            "run_id": self.run_id,
            "settings": self.settings,
            "project": self.project,
            "validated_by": self.validated_by,
            "target": self.target,
            "versions": self.versions,
            "model": self.model,
            "warmup": self.warmup,
            "preflight": self.preflight,
            "before": self.before,
            "train": self.train,
            "after": self.after,
            "held_out_reward": {
                "before": (self.before or {}).get("eval_reward"),
                "after": (self.after or {}).get("eval_reward"),
            },
            "frac_reward_zero_std": frac,
            "history": self.history,
            "steps": self.steps,
            "timing": {
                "wall_seconds": round(time.time() - self.started, 3),
                "peak_rss_mb": round(peak_rss_mb(), 1),
                "reward_share_of_step": reward_share(self.steps),
            },
            "weights": self.weights,
            self.mode if self.mode in ("reward", "episode") else "subject": self.subject,
            "cleanup": self.cleanup,
            "warnings": self.warnings,
        }
        return dict(_clean(data))

    def write(self, path: Path) -> Path:
        """Write ``metrics.json`` atomically (temp file, then rename) and return its path."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path
