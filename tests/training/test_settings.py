"""train.py flags: bad values are parser errors naming the value; a missing key fails before models load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.cli.train import MissingKeyError, main, parse_settings

ROOT = Path(__file__).resolve().parents[2]
KEY = {"E2B_API_KEY": "e2b_test_not_a_real_key"}


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-steps", "0", "argument --max-steps: 0 is below 1"),
        ("--max-steps", "two", "argument --max-steps: 'two' is not an integer"),
        ("--max-completion-length", "-5", "argument --max-completion-length: -5 is below 1"),
        ("--num-generations", "1", "argument --num-generations: 1 is below 2"),
        ("--sandbox-workers", "0", "argument --sandbox-workers: 0 is below 1"),
        ("--create-interval", "-1", "argument --create-interval: '-1' is not a finite number >= 0.0"),
        ("--create-interval", "nan", "argument --create-interval: 'nan' is not a finite number >= 0.0"),
        ("--create-interval", "soon", "argument --create-interval: 'soon' is not a number"),
        ("--seed", "-3", "argument --seed: -3 is outside 0..2**32-1"),
        ("--seed", "x", "argument --seed: 'x' is not an integer seed"),
        ("--mode", "chat", "argument --mode: invalid choice: 'chat'"),
        ("--output-dir", " ", "argument --output-dir: the output directory is blank"),
        ("--warmup-steps", "-1", "argument --warmup-steps: -1 is below 0"),
        ("--on-infrastructure", "zero", "argument --on-infrastructure: invalid choice: 'zero'"),
    ],
)
def test_bad_value_is_a_parser_error_naming_it(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad flag value exits 2 with argparse's error line naming the flag and the value."""
    assert main(["--tiny", "--offline", f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"train.py: error: {message}" in err


def test_blank_model_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    """--model '' names the problem and the alternatives."""
    assert main(["--model", "", "--offline"]) == 2
    assert "the model is blank; pass a local directory or a hub id, or --tiny" in capsys.readouterr().err


def test_model_or_tiny_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    """One of --model and --tiny is required, and they exclude each other."""
    assert main(["--offline"]) == 2
    assert "one of the arguments --model --tiny is required" in capsys.readouterr().err
    assert main(["--offline", "--tiny", "--model", "m"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_log_completions_is_refused_in_episode_mode(capsys: pytest.CaptureFixture[str]) -> None:
    """--log-completions with --mode episode is a parser error (TRL 1.16 crashes logging submit())."""
    assert main(["--tiny", "--offline", "--mode", "episode", "--log-completions"]) == 2
    assert "--log-completions works with --mode reward only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reward-subject", "rewards.py"], "argument --reward-subject: 'rewards.py' is not 'module:attr'"),
        (["--episode-subject", "Env"], "argument --episode-subject: 'Env' is not 'module:attr'"),
        (["--unvalidated", " "], "argument --unvalidated: the reason is blank"),
        (["--validate-first", "--unvalidated", "x"], "not allowed with argument --validate-first"),
    ],
)
def test_bad_project_flags_are_parser_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed subject, a blank override reason, or both gate flags: exit 2 naming the flag."""
    assert main(["--tiny", "--offline", *args]) == 2
    assert message in capsys.readouterr().err


def test_episode_subject_alone_means_episode_mode() -> None:
    """--episode-subject without --mode trains the episode; --mode still wins."""
    settings = parse_settings(["--tiny", "--offline", "--episode-subject", "env:Repair"], environ={})
    assert (settings.mode, settings.mode_given, settings.episode_subject) == ("episode", True, "env:Repair")
    settings = parse_settings(
        ["--tiny", "--offline", "--mode", "reward", "--episode-subject", "a:B"], environ={}
    )
    assert settings.mode == "reward"


@pytest.mark.full
def test_gpu_run_without_a_gpu_fails_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Without --cpu on a machine with no CUDA GPU, train.py exits 2 naming --cpu, before any work."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    assert main(["--tiny", "--offline", "--output-dir", str(tmp_path / "out")]) == 2
    assert (
        capsys.readouterr().err
        == "train.py: error: no CUDA GPU is visible; pass --cpu for a (slow) CPU run\n"
    )
    assert not (tmp_path / "out").exists()


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints usage and returns 0."""
    assert main(["--help"]) == 0
    assert "--baseline-only" in capsys.readouterr().out


def test_missing_key_without_offline_is_one_line() -> None:
    """Without --offline and E2B_API_KEY, parse_settings raises MissingKeyError naming the fix."""
    with pytest.raises(MissingKeyError, match=r"E2B_API_KEY is not set: .* or pass --offline"):
        parse_settings(["--tiny"], environ={})
    with pytest.raises(MissingKeyError):
        parse_settings(["--model", "m"], environ={"E2B_API_KEY": "  "})


def test_missing_key_fails_before_any_model_loads() -> None:
    """train.py without a key prints one error line, exits 2, and never imports torch or trl."""
    env = {k: v for k, v in os.environ.items() if k != "E2B_API_KEY"}
    probe = (
        "import sys; from pytest_e2b_env.cli.train import main; "
        "rc = main(['--tiny', '--mode', 'episode']);"
        "print(sorted(m for m in ('torch', 'trl', 'transformers', 'e2b') if m in sys.modules)); sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "train.py: error: E2B_API_KEY is not set: export your E2B key, or pass --offline to train "
        "against the local emulator"
    ]
    assert done.stdout.strip() == "[]"


def test_train_py_and_cli_subcommand_share_the_parser() -> None:
    """`python train.py` and `pytest-e2b-env train` reject the same bad value the same way."""
    for cmd in ([sys.executable, "train.py"], [sys.executable, "-m", "pytest_e2b_env", "train"]):
        done = subprocess.run(
            [*cmd, "--tiny", "--offline", "--num-generations", "1"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, cmd
        assert "argument --num-generations: 1 is below 2" in done.stderr


def test_tiny_defaults_depend_on_mode() -> None:
    """--tiny picks completion lengths and a learning rate fitting the tiny model; --model keeps 256, 5e-6."""
    reward = parse_settings(["--tiny", "--offline"], environ={})
    episode = parse_settings(["--tiny", "--offline", "--mode", "episode"], environ={})
    real = parse_settings(["--model", "Qwen/Qwen3-0.6B"], environ=KEY)
    assert (reward.max_completion_length, episode.max_completion_length, real.max_completion_length) == (
        128,
        160,
        256,
    )
    assert (reward.learning_rate, real.learning_rate) == (1e-3, 5e-6)
    assert real.batch_size == 4
    assert real.model_label == "Qwen/Qwen3-0.6B"
    assert reward.model_label == "tiny (built locally)"


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_max_steps_accepts_exactly_positive_integers(value: int) -> None:
    """--max-steps N parses iff N >= 1, and the parsed value is N."""
    if value >= 1:
        assert (
            parse_settings(["--tiny", "--offline", "--max-steps", str(value)], environ={}).max_steps == value
        )
    else:
        with pytest.raises(SystemExit):
            parse_settings(["--tiny", "--offline", "--max-steps", str(value)], environ={})


def test_infrastructure_failures_are_masked_by_default() -> None:
    """Without the flag a run masks lost completions; --on-infrastructure raise restores stopping."""
    assert parse_settings(["--tiny", "--offline"]).on_infrastructure == "mask"
    raising = parse_settings(["--tiny", "--offline", "--on-infrastructure", "raise"])
    assert raising.on_infrastructure == "raise"
