"""Command-line settings of ``train.py``: parsing, validation and the missing-key check.

Pure standard library on purpose: a bad flag or a missing ``E2B_API_KEY`` must be reported
in well under a second, before torch, transformers or trl are imported.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.target.settings import DEFAULT_CREATE_INTERVAL, env_api_key

PROG = "train.py"
MODES = ("reward", "episode")
# Enough for the warmed-up tiny model's answer: a code fence, or a repair call, its output and submit.
_TINY_COMPLETION = {"reward": 128, "episode": 160}


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


def _int_at_least(minimum: int, example: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an integer; pass a whole number >= {minimum}, e.g. {example}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}; pass e.g. {example}")
        return value

    parse.__name__ = "integer"
    return parse


def _float_at_least(minimum: float, example: float) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; pass e.g. {example}") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a finite number >= {minimum}; pass e.g. {example}"
            )
        return value

    parse.__name__ = "number"
    return parse


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer seed; pass e.g. 42") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..2**32-1; pass e.g. 42")
    return value


def _model(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "the model is blank; pass a local directory or a hub id, or --tiny for a local tiny model"
        )
    return text


def _output_dir(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the output directory is blank; pass e.g. training-results")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The ``train.py`` argument parser (also ``pytest-e2b-env train``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "TRL GRPO on the validated reward pool (--mode reward) or report-repair episode "
            "(--mode episode). Measures the held-out reward before and after training and writes "
            "metrics.json plus an evidence bundle to --output-dir."
        ),
    )
    parser.add_argument(
        "--mode", choices=MODES, default="reward", help="reward pool or episode (default: reward)"
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", type=_model, help="local model directory or hub id")
    which.add_argument(
        "--tiny",
        action="store_true",
        help="build a tiny Qwen3 model and tokenizer locally (no hub access), warmed up on the task format",
    )
    parser.add_argument(
        "--baseline-only", action="store_true", help="evaluate the held-out split, do not train"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="train on CPU (fp32); without it a CUDA GPU is required"
    )
    parser.add_argument(
        "--max-steps", type=_int_at_least(1, 8), default=8, help="optimizer steps (default: 8)"
    )
    parser.add_argument(
        "--max-completion-length",
        type=_int_at_least(1, 256),
        default=None,
        help="tokens per completion, tool turns included (default: 256; 128/160 with --tiny)",
    )
    parser.add_argument(
        "--num-generations",
        type=_int_at_least(2, 2),
        default=2,
        help="completions per prompt, >= 2 (default: 2)",
    )
    parser.add_argument(
        "--sandbox-workers", type=_int_at_least(1, 2), default=2, help="reward pool workers (default: 2)"
    )
    parser.add_argument(
        "--create-interval",
        type=_float_at_least(0.0, 1.0),
        default=DEFAULT_CREATE_INTERVAL,
        help="seconds between sandbox creations (default: %(default)s, E2B Hobby's create rate)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="run against the local E2B emulator; without it E2B_API_KEY is required",
    )
    parser.add_argument(
        "--output-dir",
        type=_output_dir,
        default="training-results",
        help="where metrics.json and evidence go",
    )
    parser.add_argument("--seed", type=_seed, default=42, help="random seed (default: 42)")
    parser.add_argument(
        "--warmup-steps",
        type=_int_at_least(0, 120),
        default=120,
        help="--tiny only: supervised steps on the task format before GRPO (default: 120)",
    )
    parser.add_argument(
        "--learning-rate",
        type=_float_at_least(0.0, 1e-3),
        default=None,
        help="GRPO learning rate (default: 1e-3 with --tiny, 5e-6 otherwise)",
    )
    parser.add_argument(
        "--log-completions",
        action="store_true",
        help="print TRL's table of completions, rewards and advantages",
    )
    return parser


class MissingKeyError(ConfigError):
    """``E2B_API_KEY`` is absent and ``--offline`` was not given."""


def parse_settings(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> TrainSettings:
    """Parse ``argv``; ``SystemExit(2)`` on a bad flag, :class:`MissingKeyError` on a missing key."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    if ns.log_completions and ns.mode == "episode":
        # TRL 1.16 builds an Arrow table of the completions; a tool call without arguments
        # (submit) makes it raise ArrowNotImplementedError mid-run.
        parser.error("--log-completions works with --mode reward only (TRL 1.16 cannot log submit() calls)")
    if not ns.offline and not env_api_key(environ):
        raise MissingKeyError(
            "E2B_API_KEY is not set: export your E2B key, "
            "or pass --offline to train against the local emulator"
        )
    completion = ns.max_completion_length or (_TINY_COMPLETION[ns.mode] if ns.tiny else 256)
    learning_rate = ns.learning_rate if ns.learning_rate is not None else (1e-3 if ns.tiny else 5e-6)
    return TrainSettings(
        mode=ns.mode,
        model=ns.model,
        tiny=bool(ns.tiny),
        baseline_only=bool(ns.baseline_only),
        cpu=bool(ns.cpu),
        max_steps=ns.max_steps,
        max_completion_length=completion,
        num_generations=ns.num_generations,
        sandbox_workers=ns.sandbox_workers,
        create_interval=ns.create_interval,
        offline=bool(ns.offline),
        output_dir=ns.output_dir,
        seed=ns.seed,
        warmup_steps=ns.warmup_steps,
        learning_rate=learning_rate,
        prompts_per_step=2,
        log_completions=bool(ns.log_completions),
    )
