"""train.py end to end, offline on CPU: real TRL GRPO, real pool / episode, real sandboxes on the emulator.

Each mode runs once per module as a subprocess (as users run it) and the tests read what it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.evidence import verify_bundle
from pytest_e2b_env.training.evidence import CASE_IDS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# 4 completions per prompt: a group with reward spread (so a weight update) is near certain; no
# creation pacing on the emulator.
FAST = ("--num-generations", "4", "--create-interval", "0")


def _train(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "E2B_API_KEY"}
    cmd = [sys.executable, "train.py", "--offline", "--cpu", "--output-dir", str(out), *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False)
    metrics_path = out / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    return done, metrics


def _bundle(out: Path) -> Path:
    bundles = [p for p in (out / "evidence").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(bundles) == 1, bundles
    return bundles[0]


@pytest.fixture(scope="module")
def reward_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict, Path]:
    out = tmp_path_factory.mktemp("train-reward")
    done, metrics = _train(out, "--tiny", "--mode", "reward", "--max-steps", "2", *FAST)
    return done, metrics, out


@pytest.fixture(scope="module")
def episode_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict, Path]:
    out = tmp_path_factory.mktemp("train-episode")
    done, metrics = _train(out, "--tiny", "--mode", "episode", "--max-steps", "2", *FAST)
    return done, metrics, out


def test_reward_mode_trains_two_steps_on_the_real_pool(reward_run: tuple) -> None:
    """Reward mode: 2 GRPO steps whose rewards the pool computed in emulator sandboxes; weights change."""
    done, metrics, _ = reward_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert metrics["status"] == "ok"
    assert metrics["error"] is None
    assert [s["step"] for s in metrics["steps"]] == [1, 2]
    pool = metrics["reward"]
    assert pool["workers_created"] >= 1
    assert pool["candidates"] > 0
    assert pool["cases"] > 0
    assert not pool["poisoned"]
    assert metrics["target"]["sandboxes"]["created"] >= 1
    assert metrics["target"]["sandboxes"]["ops"]["run"] >= 1
    assert metrics["weights"]["changed_any"] is True
    assert any(entry.get("rewards/code_reward/std", 0) > 0 for entry in metrics["history"])


def test_reward_mode_metrics_are_complete(reward_run: tuple) -> None:
    """metrics.json holds held-out reward before/after, zero-spread share, history, timing, versions."""
    _, metrics, _ = reward_run
    assert isinstance(metrics["held_out_reward"]["before"], float)
    assert isinstance(metrics["held_out_reward"]["after"], float)
    assert 0.0 <= metrics["frac_reward_zero_std"] <= 1.0
    assert metrics["settings"]["max_steps"] == 2
    assert metrics["settings"]["mode"] == "reward"
    assert metrics["versions"]["trl"] == "1.16.0"
    assert metrics["versions"]["e2b"]
    assert metrics["timing"]["peak_rss_mb"] > 0
    assert 0.0 < metrics["timing"]["reward_share_of_step"] <= 1.0
    assert metrics["warmup"]["last_loss"] < metrics["warmup"]["first_loss"]
    assert metrics["cleanup"] == {"closed": True, "leaked": [], "errors": []}


def test_reward_mode_bundle_is_complete_and_verifies(reward_run: tuple) -> None:
    """The evidence bundle passes verify-evidence, every check passed, and no sandbox outlived the run."""
    done, _, out = reward_run
    bundle = _bundle(out)
    assert verify_bundle(bundle, CASE_IDS["reward"]) == []
    coverage = json.loads((bundle / "coverage.json").read_text())
    assert coverage["passed"]
    assert coverage["counts"]["passed"] == len(CASE_IDS["reward"])
    cleanup = json.loads((bundle / "cleanup.json").read_text())
    assert cleanup["summary"]["sandboxes"] >= 1
    assert cleanup["summary"]["unresolved"] == []
    assert "[step 2/2]" in (bundle / "logs" / "train.log").read_text()
    assert "[step 1/2]" in done.stdout  # progress is visible while it runs


def test_episode_mode_model_calls_terminal_and_submit(episode_run: tuple) -> None:
    """Episode mode: the warmed-up model itself calls terminal and submit; rewards come from the episode."""
    done, metrics, _ = episode_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert [s["step"] for s in metrics["steps"]] == [1, 2]
    model_calls = metrics["episode"]["model_calls"]
    assert model_calls.get("terminal", 0) >= 1
    assert model_calls.get("submit", 0) >= 1
    assert model_calls["get_reward"] >= 16  # one per rollout: 2 steps x 8 completions, plus evaluations
    assert any(entry.get("tools/call_frequency", 0) > 0 for entry in metrics["history"])
    model_rewards = metrics["episode"]["rewards"][len(metrics["preflight"]["episodes"]) :]
    assert 1.0 in model_rewards  # the model's own repair passed the hidden verification at least once
    assert 0.0 in model_rewards
    # policy and verifier sandboxes really ran on the emulator
    assert metrics["target"]["sandboxes"]["created"] >= 8


def test_episode_mode_weights_change_and_preflight_holds(episode_run: tuple) -> None:
    """Some reward group had spread, so the weights moved; the scripted receipt was [1.0, 0.0] per task."""
    _, metrics, _ = episode_run
    assert metrics["weights"]["changed_any"] is True
    assert any(entry.get("reward_std", 0) > 0 for entry in metrics["history"])
    receipt = [(e["script"], e["reward"]) for e in metrics["preflight"]["episodes"]]
    assert receipt
    assert all(r == (1.0 if s == "repair" else 0.0) for s, r in receipt)


def test_episode_mode_bundle_is_complete_and_verifies(episode_run: tuple) -> None:
    """The episode bundle verifies with all five checks passed and every sandbox confirmed gone."""
    _, metrics, out = episode_run
    bundle = _bundle(out)
    assert verify_bundle(bundle, CASE_IDS["episode"]) == []
    coverage = json.loads((bundle / "coverage.json").read_text())
    assert coverage["passed"]
    assert coverage["counts"]["passed"] == len(CASE_IDS["episode"])
    assert metrics["target"]["sandboxes"]["alive_at_end"] == []
    assert metrics["cleanup"]["closed"] is True


def test_failed_run_still_writes_what_it_measured(tmp_path: Path) -> None:
    """An unloadable model fails the run: exit 1, metrics.json and bundle name the error and phase."""
    done, metrics = _train(tmp_path, "--model", str(tmp_path / "no-such-model"), "--mode", "reward")
    assert done.returncode == 1
    assert metrics["status"] == "failed"
    assert metrics["error"]["phase"] == "load"
    assert metrics["cleanup"]["closed"] is True
    assert metrics["cleanup"]["leaked"] == []
    bundle = _bundle(tmp_path)
    assert verify_bundle(bundle, CASE_IDS["reward"]) == []
    cases = {c["id"]: c for c in json.loads((bundle / "coverage.json").read_text())["cases"]}
    assert cases["train-baseline"]["status"] == "failed"
    assert f"FAILED in load: {metrics['error']['type']}" in done.stdout


def test_baseline_only_evaluates_without_training(tmp_path: Path) -> None:
    """--baseline-only measures the held-out reward, runs no step, and reports training as skipped."""
    # No warm-up needed: this checks what is (not) run, not what the model scores.
    done, metrics = _train(
        tmp_path, "--tiny", "--mode", "reward", "--baseline-only", "--warmup-steps", "0", *FAST
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert isinstance(metrics["held_out_reward"]["before"], float)
    assert metrics["held_out_reward"]["after"] is None
    assert metrics["steps"] == []
    assert metrics["weights"] is None
    assert not (tmp_path / "model").exists()
    coverage = json.loads((_bundle(tmp_path) / "coverage.json").read_text())
    statuses = {c["id"]: c["status"] for c in coverage["cases"]}
    assert statuses == {
        "train-baseline": "passed",
        "train-grpo": "skipped",
        "train-after": "skipped",
        "train-cleanup": "passed",
    }
