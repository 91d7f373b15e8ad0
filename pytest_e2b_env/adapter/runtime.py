"""The plugin's per-process state: the target, the loaded catalog and subjects, the lanes.

One :class:`Runtime` per pytest process lives on ``config.stash`` (:mod:`.keys`). It opens this
process's target (in the background from session start), learns each configured subject's
declaration from the host template that imports it (this process never imports a subject for the
catalog: what subject code patches in its own process cannot reach the verdicts computed here),
starts the lanes, and at session end releases hosts, templates, subjects, sandboxes and targets,
and ends every process the subjects started.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

import pytest

from pytest_e2b_env.adapter.settings import Settings
from pytest_e2b_env.catalog.contract import Subject, SubjectInfo
from pytest_e2b_env.catalog.loader import load_cases
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.errors import ConfigError, InfrastructureError
from pytest_e2b_env.evidence.redaction import Redactor
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets import Target, open_target

if TYPE_CHECKING:
    from pytest_e2b_env.adapter.lanes import Lanes, PreOpened
    from pytest_e2b_env.catalog.host import CaseHost
    from pytest_e2b_env.catalog.hostfork import HostTemplate


class Runtime:
    """Per-process state: the target (opened on first use) and the loaded catalog."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._target: Target | None = None
        self._failure: str | None = None
        self._cases: list[Case] | None = None
        self._subjects: dict[str, SubjectInfo] = {}
        self._templates: dict[str, HostTemplate] = {}
        self._template_lock = threading.Lock()
        self._local: dict[str, Subject] = {}  # imported here for fixtures (the user's own tests)
        from pytest_e2b_env.catalog.procs import new_token

        #: carried by this run's templates, hosts and what subject code starts (killed at the end)
        self.token = new_token()
        #: What made the run's evidence incomplete (target start, final sweep); the reporter reads it.
        self.problems: list[str] = []
        self._hosts: dict[str, CaseHost] = {}
        self.stale_runs: list[str] = []  # live only: earlier runs with sandboxes still alive
        #: The lanes running cases ahead of pytest (None: cases run one by one, e.g. under xdist).
        self.lanes: Lanes | None = None
        self._preopened: PreOpened | None = None
        self._own: PreOpened | None = None  # this process's target, opening in the background
        self._facts: Target | None = None  # the first to open in the background, for the facts all share
        self._own_lent = False  # _own's target went to a lane (start_lanes)
        #: The API keys of every target this process opened (its own, its lanes'): redacted from
        #: all the plugin prints or hands pytest, as from the bundle.
        self.keys: list[str] = []
        self._redactor: tuple[tuple[str, ...], Redactor] | None = None

    def host(self, kind: str) -> CaseHost | None:
        """The process that runs this kind's subject code, offline and live (see docs/plugin.md).

        Forked from the kind's template; it gets the target's SDK settings, never its control key.
        """
        subject = self.subject(kind)
        if subject is None:
            return None
        if kind not in self._hosts:
            from pytest_e2b_env.adapter.lanes import host_for

            self._hosts[kind] = host_for(self.target(), subject, self.template(kind))
        return self._hosts[kind]

    def template(self, kind: str) -> HostTemplate:
        """The process this kind's case hosts are forked from (it imports the subject once)."""
        with self._template_lock:
            if kind not in self._templates:
                from pytest_e2b_env.catalog.hostfork import HostTemplate

                spec = {
                    "spec": self.settings.subject_for(kind),
                    "kind": kind,
                    "contract": self.settings.contract_for(kind),
                }
                self._templates[kind] = HostTemplate(spec, self.token)
            return self._templates[kind]

    def subject(self, kind: str) -> SubjectInfo | None:
        """The configured subject of a kind as its template's import found it; a failure is one UsageError."""
        spec = self.settings.subject_for(kind)
        if spec is None:
            return None
        if kind not in self._subjects:
            try:
                self._subjects[kind] = self.template(kind).describe(
                    kind, spec, self.settings.contract_for(kind)
                )
            except ConfigError as exc:  # may quote the subject's import error
                raise pytest.UsageError(self.redactor().text(str(exc))) from None
        return self._subjects[kind]

    def local_subject(self, kind: str) -> Subject | None:
        """The subject imported into this process, for fixtures (the user's own tests call it here)."""
        spec = self.settings.subject_for(kind)
        if spec is None:
            return None
        if kind not in self._local:
            from pytest_e2b_env.catalog.contract import load_subject

            try:
                self._local[kind] = load_subject(spec, kind, self.settings.contract_for(kind))
            except ConfigError as exc:
                raise pytest.UsageError(self.redactor().text(str(exc))) from None
        return self._local[kind]

    def redactor(self) -> Redactor:
        """The bundle's redaction with this process's target keys: for what reaches the terminal."""
        keys = tuple(self.keys)
        if self._redactor is None or self._redactor[0] != keys:
            self._redactor = (keys, Redactor(keys))
        return self._redactor[1]

    def brief(self, exc: BaseException, limit: int | None = 200) -> str:
        """``Type: message``: the message redacted first, then cut to ``limit`` characters (None: whole)."""
        return f"{type(exc).__name__}: {self.redactor().text(str(exc))[:limit]}"

    def open_soon(self) -> None:
        """Start opening this process's target in the background (session start); :meth:`target` waits.

        pytest collects meanwhile; the emulator is held by the thread that opened it (it stops with
        that thread), which lives until :meth:`close`.
        """
        if self._target is None and self._own is None and self._failure is None:
            from pytest_e2b_env.adapter.lanes import PreOpened

            self._own = PreOpened(self._open_lane_target, 1, name="own-target")

    def target(self) -> Target:
        """The emulator or live proxy of this process, started on first use."""
        if self._failure is not None:
            raise InfrastructureError(self._failure)
        if self._target is None:
            try:
                # _own: opening in the background since session start (open_soon); else, with no
                # lanes running, the one pre-opened target they left (start_lanes), or a new one
                source = self._own or (self._preopened if self.lanes is None else None)
                target = source.take() if source is not None else self._open_lane_target()
            except Exception as exc:  # remembered: every later case fails fast with the same message
                self._failure = f"the {self.settings.mode} target did not start: {self.brief(exc, None)}"
                self.problems.append(self._failure)
                raise InfrastructureError(self._failure) from None
            if self.settings.live:
                try:
                    # One listing through the proxy proves the API answers and takes the key; an
                    # unreachable API would otherwise make every "raises" case pass for the wrong reason.
                    target.sandboxes()
                except Exception as exc:
                    with contextlib.suppress(Exception):
                        target.close()
                    upstream = target.describe()["api_url"] or "the configured URL"
                    via = f"asked through the local fault proxy at {target.endpoint}"
                    refused = getattr(exc, "status_code", None) in (401, 403)
                    if refused or "Authentication" in type(exc).__name__:
                        self._failure = (
                            f"the live E2B API at {upstream} refused E2B_API_KEY ({via}): {self.brief(exc)}; "
                            "set E2B_API_KEY to a key of your E2B team (dashboard, API keys)"
                        )
                    else:
                        self._failure = (
                            f"the live E2B API at {upstream} did not answer ({via}): {self.brief(exc)}; "
                            "check the network and E2B_API_KEY"
                        )
                    self.problems.append(self._failure)
                    raise InfrastructureError(self._failure) from None
            self._target = target
        return self._target

    @property
    def target_if_open(self) -> Target | None:
        """The target when started or starting (waited for); never starts one (the header asks).

        Until something here takes one (:meth:`target`), it is the first target to open in the
        background (this process's, or with a whole catalog the lanes'), read for the facts every
        target shares (its isolation): the lanes may still take it.
        """
        for opening in (self._own, self._preopened):
            if self._target is None and opening is not None and self._failure is None:
                self._facts = self._facts or opening.first()
        return self._target if self._target is not None else self._facts

    @property
    def loaded_cases(self) -> list[Case] | None:
        """The cases once :meth:`cases` has loaded them (None before)."""
        return self._cases

    def manifest_facts(self) -> dict[str, Any]:
        """What the bundle's manifest records of this run: the subjects' contracts, the catalog's hash."""
        facts: dict[str, Any] = {
            "contracts": {kind: s.contract.summary() for kind, s in self._subjects.items()}
        }
        if self._cases is not None:
            from pytest_e2b_env.catalog.loader import catalog_hash

            facts["catalog_hash"] = catalog_hash(self._cases)
        facts["lanes"] = self.lanes.width if self.lanes is not None else 1
        if self.lanes is not None and self.lanes.serial:
            facts["serial_kinds"] = dict(self.lanes.serial)  # kind -> why its cases ran in one lane
        return facts

    def cases(self, config: pytest.Config) -> list[Case]:
        """The catalog plus cases added through the ``pytest_e2b_env_cases`` hook."""
        if self._cases is None:
            extra: list[Case] = []
            for result in config.hook.pytest_e2b_env_cases(config=config):
                for raw in result or []:
                    if isinstance(raw, Case):
                        extra.append(raw)
                    else:
                        from pytest_e2b_env.catalog.loader import parse_cases_from_dicts

                        extra.extend(parse_cases_from_dicts([raw], "pytest_e2b_env_cases hook"))
            self._cases = load_cases(self.settings.cases, extra)
        return self._cases

    def warm_up(self, cases: list[tuple[str, Case, SubjectInfo]]) -> None:
        """Call each collected subject's declared ``warm_up`` with the target's SDK settings in force.

        A subject that needs slow set-up (the bundled episode starts an OpenEnv server) declares it
        in its contract; the catalog never knows which subject it is. A warm-up may start work in
        the background; it must not raise, and if it does the first case meets the problem itself.
        """
        if self._target is None:
            if self._own is None and self._preopened is None:
                return
            with contextlib.suppress(InfrastructureError):  # remembered: the cases report it
                self.target()  # the one opening in the background since session start
        if self._target is None:
            return
        kinds = {case.subject for _, case, _ in cases}
        for kind in sorted(kinds):
            subject = self._subjects.get(kind)
            if subject is None:
                continue
            host = self.host(kind)
            if host is not None:  # the host imports the subject and warms it up while cases run
                with contextlib.suppress(Exception):
                    host.start(warm_up=subject.contract.warm_up is not None)

    def _open_lane_target(self) -> Target:
        target = open_target(TargetSettings.from_env(live=self.settings.live, run_id=self.settings.run_id))
        self.keys.append(target.api_key)
        return target

    def preopen_lanes(self) -> bool:
        """Open the lanes' targets in the background now (session start), while pytest collects;
        whether it did.

        Offline only (live, the lanes' proxies open when the lanes start). Those the lanes do not
        use (fewer cases than lanes) are closed once collection is over, but one when no lane
        starts: it is then this process's target. With lanes, this process opens its own target
        only if something runs here (a fixture, a case no lane could run): one emulator less.
        """
        if self.settings.lanes >= 2 and not self.settings.live and self._preopened is None:
            from pytest_e2b_env.adapter.lanes import PreOpened

            self._preopened = PreOpened(self._open_lane_target, self.settings.lanes)
        return self._preopened is not None

    def start_lanes(
        self, cases: list[tuple[str, Case, SubjectInfo]], seconds: dict[str, float] | None = None
    ) -> bool:
        """Run the collected cases in ``settings.lanes`` lanes; False when they run one by one.

        Lanes need two or more runnable cases and a target that opened (live, this is where the
        API is first asked, so an unreachable one still stops the run at its first case).
        ``seconds`` (each case's expected time, last run or reference) starts the longest first.
        """
        started = self._start_lanes(cases, seconds)
        if self._preopened is not None:  # the targets no lane takes go now, but one for this process
            wanted = self._own is None and self._target is None  # this process has none coming
            self._preopened.keep(self.lanes.width if self.lanes is not None else int(wanted))
            if wanted and not started:  # it is this process's now: the warm-up may use it
                with contextlib.suppress(InfrastructureError):  # remembered: the cases report it
                    self.target()
        return started

    def _start_lanes(
        self, cases: list[tuple[str, Case, SubjectInfo]], seconds: dict[str, float] | None
    ) -> bool:
        mode = self.settings.mode
        cases = [entry for entry in cases if mode in entry[1].modes]
        width = min(self.settings.lanes, len(cases))
        if width < 2 or self._failure is not None:  # this process's target already failed to open
            return False
        if self.settings.live:  # the API is first asked here: unreachable, the first case says so
            try:
                self.target()
            except InfrastructureError:
                return False
        # Offline the lanes do not wait for this process's own emulator (the fixtures'): they open
        # their own, and if emulators cannot start at all, the first item reports it and stops.
        from pytest_e2b_env.adapter.lanes import Lanes

        opener = self._open_lane_target
        if self._preopened is not None:
            opener = self._preopened.take
        elif self._own is not None and self._target is None:
            # Nothing here took the target opening since session start (the header only read
            # its facts): the first lane takes it, one emulator less. It is closed after the lanes.
            opener, self._own_lent = self._own.take, True
        self.lanes = Lanes(self.settings, cases, width, opener, seconds, templates=self.template)
        self.lanes.start()
        return True

    def close(self, interrupted: bool = False) -> None:
        """Release the lanes', and at the same time this process's, hosts, sandboxes and targets.

        The two share nothing (each lane has its own target and hosts), and each side mostly
        waits (servers stopping, emulators exiting), so they overlap: the run ends sooner.
        ``interrupted`` (Ctrl-C): the cases still running are ended now, not waited for.
        """
        own_problems: list[str] = []
        own = threading.Thread(target=self._close_own, args=(own_problems,), name="close-own", daemon=True)
        own.start()
        lanes, self.lanes = self.lanes, None
        if lanes is not None:
            if interrupted:
                lanes.abort()
            lanes.close()
            self.problems.extend(lanes.problems)
        own.join(timeout=900)
        self.problems.extend(own_problems)
        # After this process's own release and the lanes': a target pre-opened here may be
        # theirs, and an emulator ends with the thread that opened it.
        preopened, self._preopened = self._preopened, None
        lent = None
        if self._own_lent:
            lent, self._own = self._own, None
        for opened in (preopened, lent):
            if opened is not None:
                opened.close()
        self._end_templates()

    def _end_templates(self) -> None:
        """After every host: end the templates (and what is under them), then any marked straggler."""
        from pytest_e2b_env.adapter.lanes import _all_at_once
        from pytest_e2b_env.catalog import procs

        with self._template_lock:
            templates, self._templates = list(self._templates.values()), {}
        _all_at_once([template.close for template in templates])
        try:  # what left every tree (its host and template gone) but kept its marker
            procs.kill_marked(self.token)
        except Exception as exc:  # named in the bundle, never a traceback at session end
            self.problems.append(f"ending the subjects' processes failed: {type(exc).__name__}: {exc}")

    def _close_own(self, problems: list[str]) -> None:
        """Stop this process's hosts and the reference OpenEnv server, sweep and stop its target."""
        try:
            self._release_own(problems)
        except Exception as exc:  # in a thread: named in the bundle instead of lost
            problems.append(f"releasing this process's hosts failed: {self.brief(exc)}")

    def _release_own(self, problems: list[str]) -> None:
        hosts, self._hosts = list(self._hosts.values()), {}
        for host in hosts:  # first, while the target still answers: hosts release what they hold
            try:
                host.close()
            except Exception as exc:  # the others, the sweep and the target still go
                problems.append(f"stopping a case host failed: {self.brief(exc)}")
        if self._target is not None:
            target, self._target = self._target, None
            # What a subject keeps process-wide here (fixtures ran it in this process) is
            # released while the target still answers: its contract's ``release``.
            for subject in self._local.values():
                if subject.contract.release is not None:
                    with contextlib.suppress(Exception):
                        subject.contract.release()
            try:
                target.sweep()
            except Exception as exc:  # reported in the bundle, never a traceback at session end
                problems.append(f"the final sweep failed: {self.brief(exc)}")
            finally:
                try:
                    target.close()
                except Exception as exc:
                    problems.append(f"stopping the target failed: {self.brief(exc)}")
        if not self._own_lent:  # (a lane's target otherwise: closed after the lanes, by close())
            own, self._own = self._own, None
            if own is not None:  # after its target closed (or to close one never taken)
                own.close()
