"""Real TRL GRPO on the tiny model while a worker is lost mid-step: mask trains on, raise stops.

The fault plan loses every sandbox that runs a candidate of one prompt (twice each: first try and
retry), in the first step only. What is asserted is what TRL itself computed and logged for the
step (``GRPOTrainer._logs``: rewards per function and advantages), read by a callback at the end
of each step, never a copy of TRL's arithmetic.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.cli.train import parse_settings
from pytest_e2b_env.errors import InfrastructureError
from pytest_e2b_env.reward import RewardPool
from pytest_e2b_env.settings import TargetSettings, new_run_id
from pytest_e2b_env.targets import Target, open_target
from pytest_e2b_env.training.run import OFFLINE_ENV
from pytest_e2b_env.training.subjects import RewardSubject, check_no_leaks, load_reward_tasks
from pytest_e2b_env.training.timing import StageClock

pytestmark = [
    pytest.mark.slow,
    # transformers' Trainer calls its own deprecated alias while TRL builds the trainer in-process.
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

MARK = "pe2b-lost-acme"  # in the marked prompt's test inputs: every run of its candidates carries it
GENERATIONS = 4
LOSSES = 2 * GENERATIONS  # each candidate of the marked prompt: its first try and its retry


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    """One emulator for the module."""
    opened = open_target(TargetSettings(run_id=new_run_id()))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, target: Target) -> dict[str, Any]:
    """The tiny model train.py --tiny builds, warmed up on the reward task format."""
    from pytest_e2b_env.training.tiny import build_tiny_model, warm_up

    with pytest.MonkeyPatch.context() as env:
        for key, value in OFFLINE_ENV.items():
            env.setenv(key, value)
        settings = parse_settings(
            ["--tiny", "--offline", "--cpu", "--num-generations", str(GENERATIONS), "--max-steps", "2"]
        )
        subject = RewardSubject(settings, target, StageClock())  # for its examples; its pool stays unused
        out = tmp_path_factory.mktemp("tiny") / "model"
        examples = subject.warmup_examples()
        build_tiny_model(out, [*examples, *subject.tokenizer_examples()], settings.seed)
        warm_up(out, examples, settings.warmup_steps, settings.seed, weights=subject.warmup_weights())
    return {"path": str(out), "settings": settings}


def _rows() -> list[dict[str, Any]]:
    """Two prompts: total-tokens with the marker in its inputs and outputs, request-counts untouched."""
    train = {t["task_id"]: t for t in load_reward_tasks()["train"]}
    marked = train["total-tokens"]
    cases = [
        {"input": c["input"].replace("acme", MARK), "output": c["output"].replace("acme", MARK)}
        for c in marked["test_cases"]
    ]
    assert any(MARK in c["input"] for c in cases)  # one is enough: a run carries all its inputs
    other = train["request-counts"]
    return [
        {"prompt": marked["prompt"], "test_cases": cases},
        {"prompt": other["prompt"], "test_cases": other["test_cases"]},
    ]


def _train(
    tiny_model: dict[str, Any], target: Target, tmp_path: Path, pool: RewardPool
) -> tuple[Any, list[dict[str, list[float]]]]:
    """GRPO for two steps with ``pool.code_reward``; returns the trainer and what TRL logged per step."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    from pytest_e2b_env.training.grpo import grpo_config

    logged: list[dict[str, list[float]]] = []

    class Capture(TrainerCallback):
        """TRL's own per-step log of the generation batch (rewards per function, advantages)."""

        trainer: Any = None

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            logs = self.trainer._logs  # TRL's record of the step just taken (what log_completions prints)
            logged.append(
                {"rewards": list(logs["rewards"]["code_reward"]), "advantages": list(logs["advantages"])}
            )

    capture = Capture()
    target.faults.clear()
    target.faults.add(
        route="POST /process.Process/Start", contains=MARK, answer={"lose_sandbox": True}, times=LOSSES
    )
    settings = tiny_model["settings"]
    trainer = GRPOTrainer(
        model=tiny_model["path"],
        args=grpo_config(settings, tmp_path / "trainer", use_bf16=False),
        train_dataset=Dataset.from_list(_rows()),
        reward_funcs=[pool.code_reward],
        callbacks=[capture],
    )
    trainer.remove_callback(PrinterCallback)
    capture.trainer = trainer
    try:
        trainer.train()
    finally:
        target.faults.clear()
        asyncio.run(pool.close())  # hops onto TRL's reward loop, where the pool lives
        check_no_leaks(target)
    return trainer, logged


def _pool(target: Target, policy: str) -> RewardPool:
    # A whole prompt's group is lost here (4 of 8 completions), far above the 5 % default budget.
    return RewardPool(
        workers=2,
        create_interval=0,
        api_opts=target.sdk_opts(),
        run_id=target.run_id,
        on_infrastructure=policy,
        mask_budget=0.5,
        mask_consecutive=2 * LOSSES,
    )


def test_mask_policy_trains_on_with_zero_advantage_for_masked_completions(
    tiny_model: dict[str, Any], target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Masked: the run finishes, TRL logs NaN rewards and exactly 0 advantage for them, the rest train."""
    for key, value in OFFLINE_ENV.items():
        monkeypatch.setenv(key, value)
    pool = _pool(target, "mask")
    before = {n: p.detach().clone() for n, p in _model_params(tiny_model["path"])}
    trainer, logged = _train(tiny_model, target, tmp_path, pool)
    assert trainer.state.global_step == 2
    assert len(logged) == 2
    masked = [(step, i) for step, s in enumerate(logged) for i, r in enumerate(s["rewards"]) if math.isnan(r)]
    assert masked, "the lost worker masked no completion"
    assert masked[0][0] == 0  # the fault plan fires in the first step
    for step, i in masked:
        assert logged[step]["advantages"][i] == 0.0  # TRL's unscorable: no learning signal
    scored = [r for s in logged for r in s["rewards"] if not math.isnan(r)]
    assert scored
    assert all(0.0 <= r <= 1.0 for r in scored)
    # The pool's own account agrees with what TRL saw: one ledger record per NaN, with its kind.
    ledger = [r for r in pool.ledger if r["reason"] == "masked"]
    assert len(ledger) == len(masked) == pool.metrics["masked"]
    assert {r["failure_kind"] for r in ledger} == {"sandbox_lost"}
    # TRL's logged step reward is the mean over scorable completions only (a masked 0 would pull it).
    first = next(h for h in trainer.state.log_history if "reward" in h)
    scored_first = [r for r in logged[0]["rewards"] if not math.isnan(r)]
    assert first["reward"] == pytest.approx(sum(scored_first) / len(scored_first))
    assert first["e2b/masked"] == sum(1 for step, _ in masked if step == 0)  # the pool's log_metric
    # The healthy completions trained the model.
    after = dict(trainer.model.named_parameters())
    assert any(not bool((after[n].detach() == p).all()) for n, p in before.items())


def test_raise_policy_stops_the_run_with_the_infrastructure_error(
    tiny_model: dict[str, Any], target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_infrastructure="raise": the same lost worker ends trainer.train() with InfrastructureError."""
    for key, value in OFFLINE_ENV.items():
        monkeypatch.setenv(key, value)
    pool = _pool(target, "raise")
    with pytest.raises(InfrastructureError, match="worker failed twice"):
        _train(tiny_model, target, tmp_path, pool)
    assert pool.metrics["masked"] == 0
    assert pool.metrics["poisoned"] is True


def _model_params(path: str) -> Iterator[tuple[str, Any]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    yield from model.named_parameters()
