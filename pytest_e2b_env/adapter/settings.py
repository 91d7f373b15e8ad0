"""Resolve the plugin's options and ini keys into one validated :class:`Settings`.

CLI wins over ini. Bad values raise ``pytest.UsageError`` naming the value and the fix.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.adapter.inifile import file_keys
from pytest_e2b_env.settings import env_api_key, env_step_summary, new_run_id

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_TOOL = re.compile(r"^[A-Za-z_]\w*$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
EXAMPLES = {
    "e2b_reward_subject": "mypkg.rewards:make_reward",
    "e2b_episode_subject": "mypkg.env:MyEpisode",
}


#: Lanes per CPU this process may run on when neither ``--e2b-lanes`` nor ``e2b_lanes`` is given:
#: cases mostly wait, so more lanes than CPUs overlap them, until the CPU they share runs out. The
#: bundled catalog, three rounds side by side on 2 quiet cores, took 24.5-25.6 s in 5 lanes,
#: 22.6-23.1 s in 6 and 21.8-22.2 s in 7, for 38.0-38.5 s, 38.4-40.1 s and 40.1-41.1 s of the
#: machine's CPU (8 lanes 22.9-23.6 s, 9 lanes 24.9-25.0 s); on 1 core (taskset) 53.6 s in 2 lanes,
#: 46.1 s in 3 and 49.5 s in 4. Three per CPU takes most of the gain for little CPU.
LANES_PER_CPU = 3
#: The default's ceiling: beyond it nothing was measured, and the catalog's longest case (about
#: 16 s of waiting) bounds its wall time however many lanes run.
DEFAULT_MAX_LANES = 8
MAX_LANES = 16


def default_lanes() -> int:
    """The lanes a run gets unless told: :data:`LANES_PER_CPU` per usable CPU, at most
    :data:`DEFAULT_MAX_LANES` (the affinity mask, so ``taskset`` and cpusets count)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this platform
        cpus = os.cpu_count() or 1
    return max(1, min(DEFAULT_MAX_LANES, LANES_PER_CPU * cpus))


def _lanes(config: pytest.Config) -> int:
    raw = config.getoption("e2b_lanes") or str(config.getini("e2b_lanes") or "").strip() or default_lanes()
    try:
        lanes = int(raw)
    except ValueError:
        lanes = 0
    if not 1 <= lanes <= MAX_LANES:
        raise pytest.UsageError(
            f"--e2b-lanes={raw!r} is not a number of lanes from 1 to {MAX_LANES}; "
            "e.g. --e2b-lanes 1 runs the catalog's cases one after another"
        )
    return lanes


@dataclass
class Settings:
    """Everything the plugin resolved from the command line and the ini file."""

    live: bool
    evidence: Path
    cases: list[Path]
    reward_subject: str | None
    episode_subject: str | None
    episode_tools: list[str]
    run_id: str
    relax: frozenset[str] = frozenset()
    reward_contract: str | None = None
    episode_contract: str | None = None
    cases_given: bool = False
    worker: str | None = None
    #: Catalog cases run at once, each lane on its own target (1: one after another).
    lanes: int = field(default_factory=default_lanes)
    summary: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The user's tasks (``module:attr`` or an absolute .json/.jsonl path) and the repeat count.
    reward_tasks: str | None = None
    episode_tasks: str | None = None
    task_repeats: int = 3

    @property
    def mode(self) -> str:
        """``live`` or ``offline``."""
        return "live" if self.live else "offline"

    def subject_for(self, kind: str) -> str | None:
        """The import string of the subject of a kind, if configured."""
        return self.reward_subject if kind == "reward" else self.episode_subject

    def contract_for(self, kind: str) -> str | None:
        """The ini-named contract dict of a kind, if configured."""
        return self.reward_contract if kind == "reward" else self.episode_contract


def check_subject(key: str, value: str) -> str:
    """Validate a ``module:attr`` ini value: form, then that the module can be found."""
    value = value.strip()
    if not _SPEC.match(value):
        raise pytest.UsageError(f"{key}={value!r} is not 'module:factory'. Example: {EXAMPLES[key]}")
    module = value.partition(":")[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise pytest.UsageError(
            f"{key}={value!r}: module {module!r} cannot be found; check the spelling and that it is "
            "importable from the rootdir (add it to pythonpath in your pytest config)"
        )
    return value


def check_ini_keys(config: pytest.Config, known: Iterable[str]) -> None:
    """Reject an ``e2b_*`` key the ini file sets but no plugin registered, suggesting the closest.

    pytest itself only warns about unknown keys (unless ``--strict-config``), and a misspelled
    subject key then reads as "no tests ran".
    """
    names = sorted(known)
    for key in sorted(file_keys(config.inipath)):
        if not key.startswith("e2b_") or key in names:
            continue
        try:
            config.getini(key)  # registered elsewhere (another plugin's e2b_* key): not ours to judge
            continue
        except ValueError:
            pass
        close = difflib.get_close_matches(key, names, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the plugin's keys are {', '.join(names)}"
        raise pytest.UsageError(
            f"unknown ini key {key!r} in {config.inipath}: {hint} "
            "(pytest-e2b-env docs plugin lists every key)"
        )


def _summary_path(config: pytest.Config) -> Path | None:
    """--e2b-summary, else the e2b_summary ini key, else $GITHUB_STEP_SUMMARY (GitHub Actions sets it)."""
    given = config.getoption("e2b_summary", None)
    if given:
        return config.invocation_params.dir / given
    from_ini = str(config.getini("e2b_summary") or "").strip()
    if from_ini:
        return config.rootpath / from_ini
    step = env_step_summary()
    return Path(step) if step else None


def resolve(config: pytest.Config) -> Settings:
    """Read and validate every e2b option; raise ``pytest.UsageError`` on a bad value."""
    from pytest_e2b_env.catalog.loader import default_cases_dir

    live_opt = config.getoption("e2b_live")
    live = bool(live_opt) if live_opt is not None else bool(config.getini("e2b_live"))
    if live and not env_api_key():
        raise pytest.UsageError(
            "--e2b-live needs E2B_API_KEY in the environment: export your E2B key, "
            "or drop --e2b-live to run offline on the local emulator"
        )
    evidence_opt = config.getoption("e2b_evidence") or config.getini("e2b_evidence") or "e2b-evidence"
    evidence = Path(evidence_opt)
    if not evidence.is_absolute():
        evidence = (
            config.invocation_params.dir if config.getoption("e2b_evidence") else config.rootpath
        ) / evidence
    # --e2b-cases may be given more than once (each may also join paths with os.pathsep): all count.
    given = config.getoption("e2b_cases") or []
    cases_opt = os.pathsep.join(given if isinstance(given, list) else [str(given)]) or config.getini(
        "e2b_cases"
    )
    cases = [default_cases_dir()]
    if cases_opt:
        base = config.invocation_params.dir if given else config.rootpath
        cases = [p if p.is_absolute() else base / p for p in map(Path, str(cases_opt).split(os.pathsep))]
        for path in cases:
            if not path.exists():
                raise pytest.UsageError(
                    f"e2b cases path {str(path)!r} does not exist; "
                    "give a .toml case file or a directory of them"
                )
    subjects: dict[str, str | None] = {}
    workerinput = getattr(config, "workerinput", None)
    from_controller = (workerinput or {}).get("e2b_subjects") or {}
    for kind, key in (("reward", "e2b_reward_subject"), ("episode", "e2b_episode_subject")):
        # --e2b-reward-subject wins over the ini key ('' unsets it); an xdist worker runs the controller's.
        given = (from_controller.get(kind) or "") if from_controller else config.getoption(key, None)
        raw = str((config.getini(key) or "") if given is None else given).strip()
        subjects[key] = check_subject(key, raw) if raw else None
    episode = subjects["e2b_episode_subject"] or ""
    if episode.startswith(("pytest_e2b_env.episode:", "pytest_e2b_env:")):
        # The bundled episode is an OpenEnv one; any other episode needs OpenEnv only if it imports
        # it (its import error then names the extra: extras.install_hint).
        from pytest_e2b_env.errors import MissingExtraError
        from pytest_e2b_env.extras import require

        try:
            require("episode", f"e2b_episode_subject={subjects['e2b_episode_subject']!r}")
        except MissingExtraError as exc:
            raise pytest.UsageError(str(exc)) from None
    contracts: dict[str, str | None] = {}
    for key in ("e2b_reward_contract", "e2b_episode_contract"):
        raw = str(config.getini(key) or "").strip()
        if raw and not _SPEC.match(raw):
            raise pytest.UsageError(f"{key}={raw!r} is not 'module:attr'. Example: mypkg.rewards:CONTRACT")
        contracts[key] = raw or None
    from pytest_e2b_env.catalog.contract import parse_relax
    from pytest_e2b_env.errors import ConfigError

    try:
        relax = parse_relax(str(config.getini("e2b_relax") or ""))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    tools = [str(t).strip() for t in config.getini("e2b_episode_tools") if str(t).strip()]
    for tool in tools:
        if not _TOOL.match(tool) or tool in ("reset", "get_reward"):
            raise pytest.UsageError(
                f"e2b_episode_tools entry {tool!r} is not a tool name; list method names such as 'read_file'"
            )
    tasks = resolve_tasks(config)
    workerinput = getattr(config, "workerinput", None)
    run_id = (
        workerinput.get("e2b_run_id")
        if workerinput and workerinput.get("e2b_run_id")
        else config.getoption("e2b_run_id") or new_run_id()
    )
    if not _RUN_ID.match(str(run_id)):
        raise pytest.UsageError(
            f"--e2b-run-id={run_id!r} is not a metadata-safe run id; use letters, digits, '-', '_' "
            "(at most 64), e.g. --e2b-run-id ci-1234"
        )
    return Settings(
        live=live,
        evidence=evidence,
        cases=cases,
        reward_subject=subjects["e2b_reward_subject"],
        episode_subject=subjects["e2b_episode_subject"],
        episode_tools=tools,
        run_id=str(run_id),
        relax=relax,
        reward_contract=contracts["e2b_reward_contract"],
        episode_contract=contracts["e2b_episode_contract"],
        cases_given=bool(config.getoption("e2b_cases")),
        worker=workerinput.get("workerid") if workerinput else None,
        lanes=_lanes(config),
        **tasks,
        summary=_summary_path(config),
    )


def resolve_tasks(config: pytest.Config) -> dict[str, Any]:
    """``e2b_reward_tasks`` / ``e2b_episode_tasks`` (paths made absolute against the rootdir) and
    ``e2b_task_repeats``; the rows themselves load when the task items are collected."""
    from pytest_e2b_env.catalog.tasks.load import is_spec

    out: dict[str, Any] = {}
    for kind in ("reward", "episode"):
        raw = str(config.getini(f"e2b_{kind}_tasks") or "").strip()
        if raw and not is_spec(raw):
            path = Path(raw) if Path(raw).is_absolute() else config.rootpath / raw
            if not path.is_file():
                raise pytest.UsageError(
                    f"e2b_{kind}_tasks={raw!r}: {path} does not exist; give a .json/.jsonl file "
                    "(relative to the rootdir) or 'module:attr', e.g. mypkg.tasks:TRAIN_TASKS"
                )
            raw = str(path)
        out[f"{kind}_tasks"] = raw or None
    repeats = str(config.getini("e2b_task_repeats") or "3").strip()
    if not repeats.isdigit() or not 2 <= int(repeats) <= 20:
        raise pytest.UsageError(
            f"e2b_task_repeats={repeats!r} is not a whole number from 2 to 20 (default 3)"
        )
    out["task_repeats"] = int(repeats)
    return out
