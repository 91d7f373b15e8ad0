"""``pytest-e2b-env explore``: search fault schedules against your reward or episode code, shrink and
replay breaks.

The subject comes from the command line, else the pytest ini (``e2b_reward_subject`` /
``e2b_episode_subject``), else the bundled reference, as ``validate`` takes it. Every schedule runs
in a case host on the local emulator, or with ``--live`` through the fault proxy before real E2B
with a hard cap on sandboxes created (docs/explore.md). Exit status: 0 no invariant broke within
the budget (or the replay did not break), 1 one did, 2 usage error, 3 internal error, 4 the
sandbox cap stopped the search before its budget and nothing broke.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from pytest_e2b_env.cli.validate import add_subject_options

OK, BROKEN, USAGE, INTERNAL, CAPPED = 0, 1, 2, 3, 4
#: sandboxes a live search may create when --max-sandboxes is not given
DEFAULT_MAX_SANDBOXES = 50
#: the first schedule of each kind: no fault, one plain candidate (what the first steps aim into)
PROBE = {"reward": ("correct",), "episode": ("repair",)}
#: how often ``--replay`` runs the schedule: real subjects race, so one clean run proves little
REPLAYS = 3


def build_parser() -> argparse.ArgumentParser:
    """The ``explore`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="pytest-e2b-env explore",
        description=(
            "Search combinations of wire faults and candidate behaviours (reward code) or tool calls "
            "(episode code) against your subject on the local emulator, or live through the fault proxy; "
            "shrink a break, write it as JSON with an evidence bundle, and replay it. Exit status: 0 "
            "nothing broke, 1 an invariant broke, 2 usage, 3 internal error, 4 the sandbox cap stopped "
            "a live search (nothing broke before it)."
        ),
    )
    parser.add_argument("--subject", choices=("reward", "episode"), default="reward", help="default: reward")
    parser.add_argument("--budget", type=float, default=120.0, metavar="SECONDS", help="search time (120)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="Hypothesis seed (0)")
    parser.add_argument("--output", default="e2b-explore", metavar="DIR", help="findings, bundles, database")
    parser.add_argument("--replay", default=None, metavar="FILE", help="replay a finding file instead")
    add_subject_options(parser)
    parser.add_argument(
        "--max-completions",
        type=int,
        default=3,
        metavar="N",
        help="batch size bound; an episode: tool calls before submit (3)",
    )
    parser.add_argument("--max-steps", type=int, default=3, metavar="N", help="fault steps bound (3)")
    parser.add_argument(
        "--faults",
        default=None,
        metavar="KIND[,KIND]",
        help="draw only these fault kinds (default: all of " + ", ".join(_kinds()) + ")",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="through the fault proxy to real E2B (E2B_API_KEY from the environment)",
    )
    parser.add_argument(
        "--max-sandboxes",
        type=int,
        default=None,
        metavar="N",
        help=f"live: the proxy refuses creates past N and the search stops ({DEFAULT_MAX_SANDBOXES})",
    )
    parser.add_argument("-q", dest="quiet", action="store_true", help="no line per schedule")
    return parser


def _kinds() -> tuple[str, ...]:
    from pytest_e2b_env.explore.schedule import KINDS

    return tuple(KINDS)


def _faults(options: argparse.Namespace) -> tuple[str, ...] | None:
    """The kinds ``--faults`` names, in the order given (None: every kind)."""
    if options.faults is None:
        return None
    return tuple(dict.fromkeys(k.strip() for k in options.faults.split(",") if k.strip()))


def _problem(options: argparse.Namespace) -> str | None:
    from pytest_e2b_env.settings import env_api_key

    if options.live and not env_api_key():
        return (
            "--live needs E2B_API_KEY in the environment (the key of the E2B team to search on); "
            "export it, or drop --live to search on the local emulator"
        )
    if options.max_sandboxes is not None and not options.live:
        return f"--max-sandboxes {options.max_sandboxes} caps a live search only; add --live or drop it"
    if options.max_sandboxes is not None and options.max_sandboxes < 1:
        return f"--max-sandboxes {options.max_sandboxes}: give 1 or more, e.g. --max-sandboxes 50"
    if options.budget <= 0:
        return f"--budget {options.budget:g}: give a positive number of seconds, e.g. --budget 120"
    if not 1 <= options.max_completions <= 4:
        return f"--max-completions {options.max_completions}: give 1 to 4"
    if not 0 <= options.max_steps <= 6:
        return f"--max-steps {options.max_steps}: give 0 to 6"
    faults = _faults(options)
    if faults is not None:
        unknown = [k for k in faults if k not in _kinds()] or ([] if faults else [repr(options.faults)])
        if unknown:
            return (
                f"--faults: {', '.join(unknown)} is not a fault kind; name one or more of "
                f"{', '.join(_kinds())}, e.g. --faults lost-sandbox,server-error"
            )
        if options.replay:
            return "--faults bounds a search; a replay runs the finding's own schedule: drop one of them"
    if options.replay and not Path(options.replay).is_file():
        return f"--replay {options.replay!r}: no such file; give a finding-*.json that explore wrote"
    return None


def main(argv: list[str]) -> int:
    """Search (or replay); 0, 1, 2 or 3."""
    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:
        return OK if exc.code in (0, None) else USAGE
    problem = _problem(options)
    if problem:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {problem}", file=sys.stderr)
        return USAGE
    from pytest_e2b_env.errors import ConfigError
    from pytest_e2b_env.evidence.redaction import redact

    try:
        return _replay(options) if options.replay else _search(options)
    except ConfigError as exc:  # a subject that does not import, a finding file that does not parse
        print(f"{parser.prog}: {redact(str(exc))}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return INTERNAL
    except Exception as exc:  # anything escaping the search is ours, never the subject's
        print(f"{parser.prog}: internal error: {type(exc).__name__}: {redact(str(exc))}", file=sys.stderr)
        return INTERNAL


def _say(text: str) -> None:
    print(text, flush=True)


def _session(
    options: argparse.Namespace, kind: str, spec: str, contract: str | None, run_id: str | None
) -> Any:
    from pytest_e2b_env.explore.config import episode_tools
    from pytest_e2b_env.explore.session import ExploreSession

    return ExploreSession(
        spec,
        contract,
        run_id,
        kind=kind,
        extra_tools=episode_tools(Path.cwd()) if kind == "episode" else None,
        live=options.live,
        max_sandboxes=options.max_sandboxes or DEFAULT_MAX_SANDBOXES,
    )


def _named(options: argparse.Namespace, kind: str) -> str | None:
    return str(getattr(options, f"{kind}_subject") or "") or None


def _where(options: argparse.Namespace) -> str:
    if not options.live:
        return "local emulator"
    return f"live through the fault proxy, at most {options.max_sandboxes or DEFAULT_MAX_SANDBOXES} sandboxes"


def _search(options: argparse.Namespace) -> int:
    from pytest_e2b_env.explore.config import subject
    from pytest_e2b_env.explore.report import consequence, write_finding
    from pytest_e2b_env.explore.schedule import Schedule
    from pytest_e2b_env.explore.search import database_dir, routes_used, search
    from pytest_e2b_env.explore.strategies import kinds_for
    from pytest_e2b_env.settings import new_run_id

    kind = options.subject
    spec, contract, ini = subject(_named(options, kind), Path.cwd(), kind)
    output = Path(options.output).resolve()
    run_id = new_run_id()
    with _session(options, kind, spec, contract, run_id) as session:
        assert session.target is not None
        secrets = [session.target.api_key, session.target.control_key]
        probe = session.run(Schedule(PROBE[kind], subject=kind))
        if probe.stopped:
            _say(f"explore: stopped before the search began: {probe.stopped}")
            return CAPPED
        routes = routes_used(probe)
        used = f"{', '.join(f'{r} x{n}' for r, n in routes.items()) or 'none'}"
        faults = _faults(options)
        drawn = "" if faults is None else f", faults {','.join(faults)}"
        _say(
            f"explore: {kind} subject {spec} ({ini or 'no pytest ini'}), {_where(options)}, seed "
            f"{options.seed}, budget {options.budget:g} s{drawn}; routes a clean run used: {used}"
        )
        if faults is not None and not kinds_for(routes, faults):
            print(
                f"pytest-e2b-env explore: --faults {','.join(faults)}: none of these kinds is aimed at a "
                f"route the clean run used ({used}); name a kind that is, e.g. --faults server-error",
                file=sys.stderr,
            )
            return USAGE

        def show(attempt: Any) -> None:
            if not options.quiet:
                mark = (
                    "BROKE " + ",".join(b.invariant for b in attempt.broken)
                    if attempt.broken
                    else ("ok" if attempt.explored else "harness error" if attempt.harness else "not landed")
                )
                _say(f"  {attempt.seconds:5.2f}s {mark}: {attempt.schedule.words()}")

        outcome = search(
            session.run,
            routes,
            budget=options.budget,
            seed=options.seed,
            database=database_dir(output / ".hypothesis", spec),
            max_completions=options.max_completions,
            max_steps=options.max_steps,
            on_attempt=show,
            subject=kind,
            faults=faults,
        )
        finding = outcome.finding
        cap = session.cap
        created = f" ({cap.forwarded} sandbox creates forwarded)" if cap is not None else ""
        if finding is None:
            if outcome.stopped:
                _say(
                    f"explore: stopped after {outcome.seconds:.1f} s, nothing broke before: {outcome.stopped}"
                )
                _say(outcome.coverage.line() + created)
                return CAPPED
            _say(f"explore: no invariant broke in {outcome.seconds:.1f} s")
            _say(outcome.coverage.line() + created)
            return OK
        extra = {
            "found_after_seconds": round(outcome.first_found_after or 0.0, 2),
            "found_after_schedules": outcome.first_found_schedules,
            "shrink_runs": outcome.shrink_runs,
            "mode": "live" if options.live else "offline",
        }
        path, bundle = write_finding(
            output,
            finding,
            spec=spec,
            contract=contract,
            seed=options.seed,
            run_id=run_id,
            coverage=outcome.coverage,
            secrets=secrets,
            extra=extra,
        )
    _say(f"explore: BROKEN {', '.join(b.invariant for b in finding.broken)}")
    _say(f"  schedule: {finding.schedule.words()}: {consequence(finding)}")
    _say(
        f"  found after {extra['found_after_seconds']} s ({extra['found_after_schedules']} schedules run), "
        f"shrunk with {outcome.shrink_runs} more runs"
    )
    if outcome.stopped:
        _say(f"  shrinking stopped early: {outcome.stopped}")
    _say(f"  finding: {path}")
    _say(f"  evidence: {bundle}")
    _say(f"  replay: pytest-e2b-env explore --replay {path}{' --live' if options.live else ''}")
    _say(outcome.coverage.line() + created)
    return BROKEN


def _replay(options: argparse.Namespace) -> int:
    from pytest_e2b_env.errors import ConfigError
    from pytest_e2b_env.explore.config import subject
    from pytest_e2b_env.explore.report import consequence
    from pytest_e2b_env.explore.schedule import Schedule

    try:
        doc = json.loads(Path(options.replay).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--replay {options.replay!r}: not a finding file explore wrote ({exc})") from None
    schedule = Schedule.from_json(doc.get("schedule") if isinstance(doc, dict) else None)
    kind = schedule.subject
    spec, contract, _ = subject(_named(options, kind) or doc.get("subject"), Path.cwd(), kind)
    contract = contract or doc.get("contract")
    _say(f"explore: replaying on {spec} ({_where(options)}): {schedule.words()}")
    started = time.monotonic()
    with _session(options, kind, spec, contract, None) as session:
        for run in range(1, REPLAYS + 1):
            attempt = session.run(schedule)
            if attempt.stopped:
                _say(f"explore: stopped on run {run}: {attempt.stopped}")
                return CAPPED
            if attempt.broken:
                _say(f"explore: BROKEN on run {run}: {', '.join(b.invariant for b in attempt.broken)}")
                _say(f"  {consequence(attempt)}")
                return BROKEN
            _say(f"  run {run}: no invariant broke (rewards {attempt.record.rewards})")
    _say(
        f"explore: the schedule did not break anything in {REPLAYS} runs ({time.monotonic() - started:.1f} s)"
    )
    return OK
