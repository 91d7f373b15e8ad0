"""What a training run was asked to do (:class:`TrainSettings`); parsed by :mod:`pytest_e2b_env.cli.train`.

Pure standard library on purpose: a bad flag or a missing ``E2B_API_KEY`` must be reported
in well under a second, before torch, transformers or trl are imported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

PROG = "train.py"
MODES = ("reward", "episode")
# Enough for the warmed-up tiny model's answer: a code fence, or a repair call, its output and submit.
TINY_COMPLETION = {"reward": 128, "episode": 160}


@dataclass(frozen=True)
class TrainSettings:
    """Everything a training run was asked to do; written verbatim into ``metrics.json``."""

    mode: str
    model: str | None
    tiny: bool
    baseline_only: bool
    cpu: bool
    max_steps: int
    max_completion_length: int
    num_generations: int
    sandbox_workers: int
    create_interval: float
    offline: bool
    output_dir: str
    seed: int
    warmup_steps: int
    learning_rate: float
    prompts_per_step: int
    log_completions: bool = False
    #: ``mask``: a completion the infrastructure lost is TRL's unscorable ``None`` within the budget.
    on_infrastructure: str = "mask"
    #: subjects named on the command line (override the project's ini keys)
    reward_subject: str | None = None
    episode_subject: str | None = None
    #: run the catalog on exactly what would train first, and train only if it passed
    validate_first: bool = False
    #: train without a passing validation; the reason is recorded in metrics.json
    unvalidated: str | None = None
    #: --max-completion-length was given (else the mode's default applies)
    completion_given: bool = False
    #: --mode was given (else the project's config decides: the episode when it sets only that subject)
    mode_given: bool = False

    def for_mode(self, mode: str) -> TrainSettings:
        """These settings for ``mode`` (decided by the project's config when no --mode was given)."""
        if mode == self.mode:
            return self
        completion = self.max_completion_length
        if self.tiny and not self.completion_given:
            completion = TINY_COMPLETION[mode]
        return replace(self, mode=mode, max_completion_length=completion)

    @property
    def model_label(self) -> str:
        """What the run trained: the model path or id, or ``tiny`` for the locally built model."""
        return "tiny (built locally)" if self.tiny else str(self.model)

    @property
    def batch_size(self) -> int:
        """Completions per optimizer step (prompts per step x generations per prompt)."""
        return self.prompts_per_step * self.num_generations

    def as_dict(self) -> dict[str, Any]:
        """The settings as JSON-ready data."""
        return asdict(self)
