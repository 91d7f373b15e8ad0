"""GRPO wiring: config, trainer, baseline -> train -> held-out evaluation, step timing.

torch, datasets, transformers and trl are imported inside functions only. The caller has set
the offline hub variables before calling in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.training.record import RunRecord, masked_step_warning, zero_std_warning
from pytest_e2b_env.training.settings import TrainSettings
from pytest_e2b_env.training.timing import StageClock

# Progress keys worth a glance while a run goes (full records land in metrics.json).
_SHOWN = (
    ("reward", "reward"),
    ("reward_std", "std"),
    ("frac_reward_zero_std", "zero_std"),
    ("tools/call_frequency", "tool_calls"),
    ("grad_norm", "grad_norm"),
    ("eval_reward", "eval_reward"),
    ("eval_frac_reward_zero_std", "eval_zero_std"),
)


def grpo_config(settings: TrainSettings, output_dir: Path, use_bf16: bool) -> Any:
    """The GRPOConfig of a run; CPU-safe choices are explained where TRL's defaults differ."""
    from trl import GRPOConfig

    episode = settings.mode == "episode"
    return GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=settings.cpu,
        # TRL defaults bf16 to True, which raises on a CPU-only machine; fp32 on CPU.
        bf16=use_bf16,
        fp16=False,
        model_init_kwargs={"dtype": "bfloat16" if use_bf16 else "float32"},
        dataloader_pin_memory=not settings.cpu,
        # TRL turns activation checkpointing on by default; it only costs time on small runs.
        activation_checkpointing=False,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        max_tool_calling_iterations=4 if episode else None,
        max_steps=settings.max_steps,
        learning_rate=settings.learning_rate,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=settings.seed,
        data_seed=settings.seed,
        disable_tqdm=True,
        use_vllm=False,
        log_completions=settings.log_completions,
        num_completions_to_print=settings.batch_size,
    )


def _progress_callback(
    settings: TrainSettings,
    record: RunRecord,
    clock: StageClock,
    say: Callable[[str], None],
    masked: Callable[[], int],
) -> Any:
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        """Prints one line per logged step and times each optimizer step and its reward stage."""

        def __init__(self) -> None:
            self._started = 0.0
            self._masked = 0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.take()  # reward time spent outside this step (evaluation) is not this step's
            self._started = time.perf_counter()
            self._masked = masked()  # masked during evaluation is not this step's either

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seconds = time.perf_counter() - self._started
            reward_seconds = clock.take()
            step_masked = masked() - self._masked
            record.steps.append(
                {
                    "step": state.global_step,
                    "seconds": round(seconds, 4),
                    "reward_seconds": round(reward_seconds, 4),
                    "reward_share": round(reward_seconds / seconds, 4) if seconds > 0 else None,
                    "completions": settings.batch_size,
                    "masked": step_masked,
                }
            )
            warning = masked_step_warning(state.global_step, step_masked, settings.batch_size)
            if warning:
                record.warnings.append(warning)
                say(warning)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            logs = logs or {}
            shown = [
                f"{label}={logs[key]:.3g}" for key, label in _SHOWN if isinstance(logs.get(key), int | float)
            ]
            if not shown:
                return
            where = (
                record.phase if record.phase != "train" else f"step {state.global_step}/{settings.max_steps}"
            )
            timing = ""
            if record.phase == "train" and record.steps and record.steps[-1]["step"] == state.global_step:
                last = record.steps[-1]
                timing = f" ({last['seconds']:.1f}s, reward stage {last['reward_seconds']:.1f}s)"
            say(f"[{where}] " + " ".join(shown) + timing)

    return Progress()


def _fingerprint(model: Any) -> dict[str, tuple[float, float]]:
    # (sum, L2 norm) per tensor: cheap, no copy of the weights, and any optimizer step moves it.
    return {
        name: (float(p.detach().float().sum()), float(p.detach().float().norm()))
        for name, p in model.named_parameters()
    }


def run_grpo(
    settings: TrainSettings,
    record: RunRecord,
    subject: Any,
    model_path: str,
    clock: StageClock,
    say: Callable[[str], None],
) -> None:
    """Baseline on the held-out split, train (unless --baseline-only), evaluate again, save the model.

    Fills ``record`` as it goes; exceptions propagate after the history is saved.
    """
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    if not settings.cpu and not torch.cuda.is_available():
        raise ConfigError("no CUDA GPU is visible; pass --cpu for a (slow) CPU run")
    use_bf16 = not settings.cpu and torch.cuda.is_bf16_supported()
    if settings.tiny:
        torch.set_num_threads(1)  # see tiny.warm_up: threads only contend on a model this small
    torch.manual_seed(settings.seed)
    output_dir = Path(settings.output_dir)
    trainer = None
    record.phase = "load"
    try:
        trainer = GRPOTrainer(
            model=model_path,
            args=grpo_config(settings, output_dir / "trainer", use_bf16),
            train_dataset=Dataset.from_list(subject.train_rows()),
            eval_dataset=Dataset.from_list(subject.eval_rows()),
            callbacks=[_progress_callback(settings, record, clock, say, subject.masked)],
            **subject.trainer_kwargs(),
        )
        trainer.remove_callback(PrinterCallback)  # our callback prints a compact line instead
        subject.attach(trainer)
        model: Any = trainer.model
        record.model["parameters"] = sum(p.numel() for p in model.parameters())
        record.phase = "baseline"
        say("[baseline] evaluating the held-out split")
        record.before = dict(trainer.evaluate())
        if settings.baseline_only:
            return
        before = _fingerprint(trainer.model)
        record.phase = "train"
        say(f"[train] {settings.max_steps} GRPO steps, {settings.batch_size} completions per step")
        record.train = dict(trainer.train().metrics)
        after = _fingerprint(trainer.model)
        changed = sorted(name for name in before if before[name] != after[name])
        record.weights = {"tensors": len(before), "changed": len(changed), "changed_any": bool(changed)}
        warning = zero_std_warning(_mean_train_zero_std(trainer.state.log_history))
        if warning:
            record.warnings.append(warning)
            say(warning)
        record.phase = "after"
        say("[after] evaluating the held-out split")
        record.after = dict(trainer.evaluate())
        record.phase = "save"
        trainer.save_model(str(output_dir / "model"))
        processing: Any = trainer.processing_class
        processing.save_pretrained(str(output_dir / "model"))
        record.model["saved_to"] = str(output_dir / "model")
    finally:
        if trainer is not None:
            record.history = [dict(entry) for entry in trainer.state.log_history]


def _mean_train_zero_std(history: list[dict[str, Any]]) -> float | None:
    from pytest_e2b_env.training.record import mean_zero_std

    return mean_zero_std(entry for entry in history if "eval_reward" not in entry)
