"""``train.py`` / ``pytest-e2b-env train``: parse the flags, check the key, then run the training.

Pure standard library until :func:`pytest_e2b_env.training.run.run`: a bad flag or a missing
``E2B_API_KEY`` is reported in well under a second, before torch, transformers or trl load.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_e2b_env.errors import ConfigError, MissingExtraError
from pytest_e2b_env.extras import require
from pytest_e2b_env.settings import DEFAULT_CREATE_INTERVAL, env_api_key
from pytest_e2b_env.training.settings import MODES, PROG, TINY_COMPLETION, TrainSettings

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
EXAMPLES = {"reward": "mypkg.rewards:make_reward", "episode": "mypkg.env:MyEpisode"}


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


def _reason(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the reason is blank; say why, e.g. 'rehearsal on a scratch copy'")
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
            "TRL GRPO on your project's reward function or episode class and task rows (the pytest "
            "config validate reads), refused unless a passing evidence bundle of the same code and "
            "tasks exists; with nothing of yours configured, the bundled reward pool (--mode reward) "
            "or report-repair episode (--mode episode). Measures the held-out reward before and after "
            "training and writes metrics.json plus an evidence bundle to --output-dir."
        ),
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="reward function or episode (default: reward, or episode when only an episode subject is set)",
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
        "--on-infrastructure",
        choices=("mask", "raise"),
        default="mask",
        help=(
            "a completion whose sandbox failed (its retry too): mask it as TRL's unscorable None, "
            "within a budget of 5%% of completions and 8 in a row, or raise and stop (default: mask)"
        ),
    )
    project = parser.add_argument_group(
        "your project (the pytest config validate reads; see 'pytest-e2b-env docs training')"
    )
    project.add_argument(
        "--reward-subject", default=None, metavar="MODULE:FACTORY", help="reward code (overrides the ini key)"
    )
    project.add_argument(
        "--episode-subject",
        default=None,
        metavar="MODULE:CLASS",
        help="episode class (overrides the ini key)",
    )
    gate = project.add_mutually_exclusive_group()
    gate.add_argument(
        "--validate-first",
        action="store_true",
        help="run `pytest-e2b-env validate` on exactly what would train, then train if it passed",
    )
    gate.add_argument(
        "--unvalidated",
        default=None,
        metavar="REASON",
        type=_reason,
        help="train without a passing validation of the same code; REASON is recorded in metrics.json",
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
    for kind in MODES:
        spec = getattr(ns, f"{kind}_subject")
        if spec is not None and not _SPEC.match(spec):
            parser.error(
                f"argument --{kind}-subject: {spec!r} is not 'module:attr'; pass e.g. {EXAMPLES[kind]}"
            )
    if ns.mode is None and ns.episode_subject and not ns.reward_subject:
        ns.mode = "episode"  # the one subject named; the config may still set the mode when none is
    if ns.log_completions and ns.mode == "episode":
        # TRL 1.16 builds an Arrow table of the completions; a tool call without arguments
        # (submit) makes it raise ArrowNotImplementedError mid-run.
        parser.error("--log-completions works with --mode reward only (TRL 1.16 cannot log submit() calls)")
    if not ns.offline and not env_api_key(environ):
        raise MissingKeyError(
            "E2B_API_KEY is not set: export your E2B key, "
            "or pass --offline to train against the local emulator"
        )
    completion = ns.max_completion_length or (TINY_COMPLETION[ns.mode or "reward"] if ns.tiny else 256)
    learning_rate = ns.learning_rate if ns.learning_rate is not None else (1e-3 if ns.tiny else 5e-6)
    return TrainSettings(
        mode=ns.mode or "reward",
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
        on_infrastructure=ns.on_infrastructure,
        reward_subject=ns.reward_subject,
        episode_subject=ns.episode_subject,
        validate_first=bool(ns.validate_first),
        unvalidated=ns.unvalidated,
        completion_given=ns.max_completion_length is not None,
        mode_given=ns.mode is not None,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``train.py`` and ``pytest-e2b-env train``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = parse_settings(args)
    except MissingKeyError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse already printed usage and the error naming the value
        return exc.code if isinstance(exc.code, int) else 2
    try:
        require("train", f"{PROG} --mode {settings.mode}")
    except MissingExtraError as exc:  # before the first torch import: one line naming the extra
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if not settings.cpu and not _cuda_available():
        # Before the emulator, the preflight and the model: a GPU run on a CPU box fails at once.
        print(f"{PROG}: error: no CUDA GPU is visible; pass --cpu for a (slow) CPU run", file=sys.stderr)
        return 2
    from pytest_e2b_env.cli.train_project import gate, read_project
    from pytest_e2b_env.training.gate import GateRefused

    named = {"reward": settings.reward_subject, "episode": settings.episode_subject}
    try:
        kind, project = read_project(settings.mode if settings.mode_given else None, named)
        settings = settings.for_mode(kind)
        if settings.log_completions and kind == "episode":
            raise ConfigError(f"--log-completions works with --mode reward only; the project trains {kind}")
        validated_by = gate(project, settings.validate_first, settings.unvalidated) if project else None
        if project is None and (settings.validate_first or settings.unvalidated is not None):
            given = "--validate-first" if settings.validate_first else "--unvalidated"
            print(
                f"{PROG}: note: {given} ignored: the config names no subject or tasks of yours, so the "
                "bundled reference code trains (it is validated with the package)",
                file=sys.stderr,
            )
    except GateRefused as exc:
        print(f"{PROG}: refused: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:  # a bad ini value or task row, a subject that does not import
        from pytest_e2b_env.evidence.redaction import redact

        print(f"{PROG}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    from pytest_e2b_env.training.run import run

    return run(settings, project, validated_by)


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())
