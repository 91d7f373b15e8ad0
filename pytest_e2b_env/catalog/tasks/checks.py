"""Run one check of one task (oracle, floor or repeat) through the user's own subject.

Each run is a catalog case built on the fly and run by :func:`~pytest_e2b_env.catalog.runner.run_case`,
so the subject is called exactly as the catalog calls it (TRL's calling convention, the
harness's cleanup from the ledger, the global checks), the check that no expected output of the
task entered a sandbox (:mod:`~pytest_e2b_env.catalog.expected`) included: a reward case watches
for its test cases' outputs by itself, an episode case is told its verification's expected value.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_e2b_env.catalog.calls import SubjectCalls
from pytest_e2b_env.catalog.contract import Subject
from pytest_e2b_env.catalog.drive_reward import fence
from pytest_e2b_env.catalog.expected import CRITERION, needles, reward_needles
from pytest_e2b_env.catalog.model import Case, Completion, EpisodeInput, RewardInput, Step
from pytest_e2b_env.catalog.record import CaseRecord
from pytest_e2b_env.catalog.tasks.load import EpisodeTask, RewardTask, Task
from pytest_e2b_env.catalog.tasks.programs import Shortcut, episode_shortcuts, reward_shortcuts
from pytest_e2b_env.catalog.verdict import same_scores
from pytest_e2b_env.targets import Target

CHECKS = ("oracle", "floor", "repeat")
DEFAULT_REPEATS = 3
MAX_REPEATS = 20
MAXIMUM = 1.0
_TEXT = 200


@dataclass
class TaskCheck:
    """The outcome of one check of one task, as the pytest item and the evidence bundle show it."""

    task_id: str
    kind: str
    check: str
    status: str  # passed | failed | skipped
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (the report payload and the evidence row)."""
        return json.loads(json.dumps(asdict(self), default=str))


def _short(text: Any) -> str:
    value = text if isinstance(text, str) else json.dumps(text, default=str)
    return value if len(value) <= _TEXT else value[:_TEXT] + "..."


def _case(task: Task, check: str, **inputs: Any) -> Case:
    return Case(
        id=f"task-{check}",
        subject=task.kind,  # type: ignore[arg-type]
        family="good",
        description=f"task {task.task_id}: {check} check",
        expect={"leaked_sandboxes": 0},
        **inputs,
    )


# -- reward tasks ---------------------------------------------------------------------------


def _reward_case(
    task: RewardTask, check: str, programs: Sequence[str], per_case: bool = False
) -> tuple[Case, list[str]]:
    """A batch of fenced programs on the task's test cases (one completion per case if ``per_case``)."""
    if per_case:
        completions = [Completion(text=fence(programs[0]), test_cases=[c]) for c in task.test_cases]
    else:
        completions = [Completion(text=fence(p)) for p in programs]
    spec = RewardInput(
        completions=completions, test_cases=task.test_cases, prompt=task.prompt, columns=task.columns
    )
    case = _case(task, check, reward=spec)
    return case, reward_needles(case)  # what the run watches for by itself


# -- episode tasks --------------------------------------------------------------------------


def _episode_expected(task: EpisodeTask) -> list[str]:
    expected = task.task["verification"]["expected"]
    return [json.dumps(expected), json.dumps(expected, sort_keys=True)]


def _episode_case(
    task: EpisodeTask, check: str, steps: list[Step], extra_sent: Sequence[str] = ()
) -> tuple[Case, list[str]]:
    files = {**task.task.get("files", {}), **task.task["verification"].get("files", {})}
    sent = [*files.values(), *(task.solution or []), *extra_sent, str(task.task["command"])]
    found = needles(_episode_expected(task), sent)
    spec = EpisodeInput(task=task.task, prompt=task.prompt, script=[*steps, Step(tool="submit")])
    return _case(task, check, episode=spec, never_in_sandbox=found), found


def _solution_steps(task: EpisodeTask) -> list[Step]:
    return [Step(tool="terminal", args={"command": c}) for c in task.solution or []]


def _shortcut_steps(task: EpisodeTask, program: Shortcut) -> list[Step]:
    if program.text is None:
        return []
    return [Step(tool="write", path=str(task.task["artifact"]), content=program.text)]


# -- judging one run ------------------------------------------------------------------------


@dataclass
class Run:
    """One run of a built case: its record and the scores it produced (None when none came out)."""

    record: CaseRecord
    needles: int

    @property
    def scores(self) -> list[Any] | None:
        return self.record.rewards

    def problem(self) -> tuple[str, str] | None:
        """``(status, reason)`` when this run fails or skips the check whatever the scores, else None."""
        hidden = self._hidden()
        if hidden is not None:
            return "failed", hidden
        if self.record.status == "skipped":
            return "skipped", f"skipped: {self.record.reason}"
        others = [c for c in self.record.failed_criteria if c["id"] != CRITERION]
        if others:
            lines = [f"{c['id']}: {c['description']} (observed {_short(c['actual'])})" for c in others]
            return "failed", "the subject failed the run itself, so the task cannot be judged: " + "; ".join(
                lines
            )
        if self.scores is None:
            return "failed", "the subject produced no score"
        return None

    def _hidden(self) -> str | None:
        """Which requests carried an expected output into a sandbox (from the ledger), else None."""
        failed = [c for c in self.record.failed_criteria if c["id"] == CRITERION]
        if not failed:
            return None
        actual = failed[0].get("actual") or {}
        fired = list(actual.get("carried_by") or []) if isinstance(actual, dict) else []
        count = actual.get("requests", len(fired)) if isinstance(actual, dict) else len(fired)
        return (
            "an expected output of the task entered a sandbox: the ledger shows "
            f"{count} request(s) carrying one ({'; '.join(fired[:5])}); compare outputs outside "
            "the sandbox and send only the program and its input"
        )


def _run(
    case: Case, found: list[str], subject: Subject | SubjectCalls, target: Target, options: dict[str, Any]
) -> Run:
    if options.get("run") is not None:  # the caller's way to run a case (a case host)
        return Run(record=options["run"](case), needles=len(found))
    from pytest_e2b_env.catalog.runner import run_case

    record = run_case(
        case,
        subject,
        target,
        extra_tools=options.get("extra_tools") or [],
        relax=options.get("relax") or frozenset(),
    )
    return Run(record=record, needles=len(found))


def _numbers(scores: list[Any]) -> list[float | None]:
    return [float(s) if isinstance(s, int | float) and not isinstance(s, bool) else None for s in scores]


# -- the three checks -----------------------------------------------------------------------


def _no_solution(task: Task, check: str) -> TaskCheck:
    return TaskCheck(
        task.task_id,
        task.kind,
        check,
        "skipped",
        "the task has no 'solution' (the reference program or repair commands): nothing to check it with",
    )


def _oracle_run(
    task: Task, subject: Subject | SubjectCalls, target: Target, options: dict[str, Any], per_case: bool
) -> Run:
    if isinstance(task, RewardTask):
        case, found = _reward_case(task, "oracle", [str(task.solution)], per_case=per_case)
    else:
        case, found = _episode_case(task, "oracle", _solution_steps(task))
    return _run(case, found, subject, target, options)


def _oracle(
    task: Task, subject: Subject | SubjectCalls, target: Target, options: dict[str, Any]
) -> TaskCheck:
    result = TaskCheck(task.task_id, task.kind, "oracle", "passed")
    run = _oracle_run(task, subject, target, options, per_case=True)
    scores = run.scores or []
    result.details = {"scores": scores, "expected_outputs_checked": run.needles}
    problem = run.problem()
    if problem is not None:
        result.status, result.reason = problem
        return result
    if isinstance(task, RewardTask):
        if len(scores) != len(task.test_cases):
            result.status = "failed"
            result.reason = (
                f"the subject returned {len(scores)} score(s) for {len(task.test_cases)} completion(s)"
            )
            return result
        misses = [i for i, s in enumerate(_numbers(scores)) if s is None or abs(s - MAXIMUM) > 1e-9]
        if misses:
            shown = [
                f"case {i}: input {_short(task.test_cases[i]['input'])}, expected "
                f"{_short(task.test_cases[i]['output'])}, scored {scores[i]}"
                for i in misses[:5]
            ]
            result.status = "failed"
            result.reason = (
                f"the reference solution does not reach {MAXIMUM} on {len(misses)} of "
                f"{len(task.test_cases)} case(s): " + "; ".join(shown)
            )
        return result
    if not same_scores([MAXIMUM], scores):
        last = [c for c in run.record.observed.get("calls", []) if c.get("name") == "terminal"][-1:]
        seen = f"; the last repair command showed {_short(last[0].get('value'))}" if last else ""
        result.status = "failed"
        result.reason = f"the repair scores {scores[0] if scores else None}, not {MAXIMUM}{seen}"
    return result


def _floor(
    task: Task,
    tasks: Sequence[Task],
    subject: Subject | SubjectCalls,
    target: Target,
    options: dict[str, Any],
) -> TaskCheck:
    result = TaskCheck(task.task_id, task.kind, "floor", "passed")
    scored: dict[str, float | None] = {}
    checked = 0
    note = None
    if isinstance(task, RewardTask):
        programs = reward_shortcuts(task, [t for t in tasks if isinstance(t, RewardTask)])
        case, found = _reward_case(task, "floor", [str(p.text) for p in programs])
        runs = [(programs, _run(case, found, subject, target, options))]
    else:
        programs, note = episode_shortcuts(task, [t for t in tasks if isinstance(t, EpisodeTask)])
        runs = []
        for program in programs:
            extra = [program.text] if program.text else []
            case, found = _episode_case(task, "floor", _shortcut_steps(task, program), extra)
            runs.append(([program], _run(case, found, subject, target, options)))
    for group, run in runs:
        problem = run.problem()
        if problem is not None:
            names = group[0].name if len(group) == 1 else f"the batch of {len(group)} floor programs"
            result.status, result.reason = problem[0], f"{names}: {problem[1]}"
            return result
        checked = max(checked, run.needles)
        values = _numbers(run.scores or [])
        for i, program in enumerate(group):
            scored[program.name] = values[i] if i < len(values) else None
    passing = [name for name, s in scored.items() if s is not None and s >= MAXIMUM - 1e-9]
    no_score = [name for name, s in scored.items() if s is None]
    best = max((s for s in scored.values() if s is not None), default=None)
    result.details = {
        "scores": scored,
        "programs": {p.name: p.does for p in programs},
        "gap": round(MAXIMUM - best, 6) if best is not None else None,
        "expected_outputs_checked": checked,
        **({"note": note} if note else {}),
    }
    if passing:
        what = "; ".join(f"{n} ({next(p.does for p in programs if p.name == n)})" for n in passing)
        result.status = "failed"
        result.reason = f"a no-op or shortcut program reaches the maximum {MAXIMUM}: {what}"
    elif no_score:
        result.status = "failed"
        result.reason = f"the subject returned no number for floor program(s) {', '.join(no_score)}"
    return result


def _repeat(
    task: Task, subject: Subject | SubjectCalls, target: Target, options: dict[str, Any]
) -> TaskCheck:
    result = TaskCheck(task.task_id, task.kind, "repeat", "passed")
    repeats = int(options.get("repeats") or DEFAULT_REPEATS)
    scores: list[Any] = []
    for _ in range(repeats):
        run = _oracle_run(task, subject, target, options, per_case=False)
        problem = run.problem()
        if problem is not None:
            result.status, result.reason = problem[0], f"run {len(scores) + 1} of {repeats}: {problem[1]}"
            result.details = {"scores": scores}
            return result
        scores.append((run.scores or [None])[0])
    values = [s for s in _numbers(scores) if s is not None]
    spread = round(max(values) - min(values), 6) if values else None
    result.details = {"scores": scores, "runs": repeats, "spread": spread}
    if len(values) != len(scores) or not all(same_scores([values[0]], [v]) for v in values):
        result.status = "failed"
        result.reason = (
            f"the reference solution scored {', '.join(str(s) for s in scores)} over {repeats} runs: "
            "the task or its verifier is not deterministic (time, randomness or order in the expected value)"
        )
    return result


def run_check(
    task: Task,
    check: str,
    tasks: Sequence[Task],
    subject: Subject | SubjectCalls,
    target: Target,
    *,
    repeats: int = DEFAULT_REPEATS,
    extra_tools: list[str] | None = None,
    relax: frozenset[str] = frozenset(),
    run: Callable[[Case], CaseRecord] | None = None,
) -> TaskCheck:
    """Run ``check`` on ``task`` (``tasks``: every task of the run, for the floor's borrowed outputs).

    ``run`` runs one built case and returns its record (default: here, with ``run_case``); the
    plugin passes its case host, so subject code that crashes fails the check, not the session.
    """
    if check not in CHECKS:
        raise ValueError(f"unknown task check {check!r}; one of {', '.join(CHECKS)}")
    if not 1 <= repeats <= MAX_REPEATS:
        raise ValueError(f"repeats={repeats} is outside 1-{MAX_REPEATS}")
    started = time.perf_counter()
    options = {"repeats": repeats, "extra_tools": extra_tools, "relax": relax, "run": run}
    if task.solution is None and check != "floor":
        result = _no_solution(task, check)
    elif check == "oracle":
        result = _oracle(task, subject, target, options)
    elif check == "floor":
        result = _floor(task, tasks, subject, target, options)
    else:
        result = _repeat(task, subject, target, options)
    result.seconds = round(time.perf_counter() - started, 3)
    return result
