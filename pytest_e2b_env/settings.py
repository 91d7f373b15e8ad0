"""Target settings, and every environment variable pytest-e2b-env reads or writes, declared once.

:data:`ENVIRONMENT` is the one list of names, each with its meaning; nothing else in the
package names them (``tests/targets/test_environment.py`` greps the source and fails when a
module does). Code reads them through :meth:`TargetSettings.from_env` or one of the small
readers below, and writes them through :meth:`TargetSettings.to_env` / :func:`sdk_env`.

Pure standard library: the pytest plugin, ``train.py``'s flag check and the emulator's child
process import this before anything heavy.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_e2b_env.errors import ConfigError

# --- the e2b SDK's own variables (the SDK reads them too) -----------------------------------
ENV_API_KEY = "E2B_API_KEY"
ENV_API_URL = "E2B_API_URL"
ENV_SANDBOX_URL = "E2B_SANDBOX_URL"
ENV_DOMAIN = "E2B_DOMAIN"
# --- ours ------------------------------------------------------------------------------------
ENV_RUN = "PYTEST_E2B_ENV_RUN"
ENV_TEMPLATE = "PYTEST_E2B_ENV_TEMPLATE"
ENV_LIVE_API_URL = "PYTEST_E2B_ENV_LIVE_API_URL"
ENV_LIVE_SANDBOX_URL = "PYTEST_E2B_ENV_LIVE_SANDBOX_URL"
ENV_OPENENV_URL = "PYTEST_E2B_ENV_OPENENV_URL"
# --- set by CI ---------------------------------------------------------------------------
ENV_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
# --- internal to the emulator (parent -> child process, child -> sandboxed processes) --------
ENV_EMULATOR_KEY = "PYTEST_E2B_ENV_EMULATOR_KEY"
ENV_EMULATOR_OWNER = "PYTEST_E2B_ENV_EMULATOR_OWNER"
ENV_SANDBOX_MARKER = "PYTEST_E2B_ENV_BOX"
# --- internal to the catalog (controller -> case hosts and what subject code starts) -------------
ENV_HOST_MARKER = "PYTEST_E2B_ENV_HOST"
# --- set inside every sandbox, as E2B's envd does (code in a sandbox may read them) ---------
ENV_IN_SANDBOX = "E2B_SANDBOX"
ENV_IN_SANDBOX_ID = "E2B_SANDBOX_ID"
ENV_IN_SANDBOX_TEMPLATE = "E2B_TEMPLATE_ID"
# --- read by the test suite only -------------------------------------------------------------
ENV_TEST_ATTACH = "PYTEST_E2B_ENV_ATTACH"

#: Every variable the project reads or writes: name -> one-line meaning (docs/plugin.md repeats it).
ENVIRONMENT: dict[str, str] = {
    ENV_API_KEY: "E2B API key (a secret, never printed); required live; the target's key for subjects",
    ENV_API_URL: "API URL the SDK talks to; written for subjects (emulator or proxy); read offline",
    ENV_SANDBOX_URL: "envd URL the SDK talks to; written and read like E2B_API_URL",
    ENV_DOMAIN: "E2B domain of live runs (default e2b.app): the live API is https://api.$E2B_DOMAIN",
    ENV_RUN: "run id written for subjects while a case or training runs; code under test tags with it",
    ENV_TEMPLATE: "sandbox template of the reference episode's sandboxes (default base)",
    ENV_LIVE_API_URL: "live upstream API URL instead of https://api.$E2B_DOMAIN (self-hosted E2B)",
    ENV_LIVE_SANDBOX_URL: "live upstream envd URL when it is one fixed endpoint (self-hosted E2B)",
    ENV_OPENENV_URL: "a running OpenEnv server the reference ReportEpisode uses instead of its own",
    ENV_STEP_SUMMARY: "GitHub Actions' job summary file: the plugin appends its Markdown run summary",
    ENV_EMULATOR_KEY: "internal: API key the emulator's child process serves with (Emulator() clears it)",
    ENV_EMULATOR_OWNER: "internal: pid of the process that started the emulator child (dies with it)",
    ENV_SANDBOX_MARKER: "internal: marker in each process-isolated sandbox process (found by it)",
    ENV_IN_SANDBOX: "set to true inside every emulator sandbox, as E2B does (never read on the host)",
    ENV_IN_SANDBOX_ID: "the sandbox's id, set inside every emulator sandbox as E2B does",
    ENV_IN_SANDBOX_TEMPLATE: "the sandbox's template id, set inside every emulator sandbox as E2B does",
    ENV_HOST_MARKER: "internal: marker of a case host and what its subject starts (killed by it at the end)",
    ENV_TEST_ATTACH: "test suite only: 'URL KEY' of a running emulator the emulator tests attach to",
}

MODES = ("offline", "live")
DEFAULT_DOMAIN = "e2b.app"
DEFAULT_TEMPLATE = "base"
DEFAULT_REQUEST_TIMEOUT = 15.0
#: Seconds between two sandbox creations of one reward pool, offline and live alike, so the
#: catalog validates the very pool ``train.py`` trains with: E2B's Hobby tier creates at most one
#: sandbox per second (Pro: five), and a pool paced faster meets 429s it would retry into a
#: failure. The emulator has no such limit; a faster offline run passes ``create_interval=`` to
#: the reward subject (or ``--create-interval`` to train.py) and says so in its subject spec.
DEFAULT_CREATE_INTERVAL = 1.0


def new_run_id() -> str:
    """A short, unique, metadata-safe run id."""
    return "run-" + uuid.uuid4().hex[:12]


#: The run id of code that runs with no run id in its environment: one per process, so every
#: episode of the process shares it and one sweep finds them all.
PROCESS_RUN_ID = new_run_id()


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _value(environ: Mapping[str, str] | None, name: str) -> str | None:
    return _env(environ).get(name) or None


def env_run_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The run id the environment carries (``PYTEST_E2B_ENV_RUN``), or None."""
    return _value(environ, ENV_RUN)


def env_api_key(environ: Mapping[str, str] | None = None) -> str:
    """``E2B_API_KEY`` stripped, or ``""`` (a secret: never print it)."""
    return (_value(environ, ENV_API_KEY) or "").strip()


def env_step_summary(environ: Mapping[str, str] | None = None) -> str | None:
    """``GITHUB_STEP_SUMMARY``: where GitHub Actions collects a job's Markdown summary, or None."""
    return _value(environ, ENV_STEP_SUMMARY)


def openenv_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The running OpenEnv server the reference episode should use, or None."""
    return _value(environ, ENV_OPENENV_URL)


def emulator_key(environ: Mapping[str, str] | None = None) -> str | None:
    """Emulator child: the API key to serve with, when its starter fixed one."""
    return _value(environ, ENV_EMULATOR_KEY)


def emulator_owner(environ: Mapping[str, str] | None = None) -> int:
    """Emulator child: the pid of the process that started it (0 when unknown)."""
    raw = _value(environ, ENV_EMULATOR_OWNER)
    return int(raw) if raw and raw.isdigit() else 0


def emulator_child_env(environ: Mapping[str, str], owner_pid: int) -> dict[str, str]:
    """The environment of an emulator child: ``environ`` with a fresh key and its owner's pid."""
    env = {k: v for k, v in environ.items() if k != ENV_EMULATOR_KEY}  # always a fresh random key
    env[ENV_EMULATOR_OWNER] = str(owner_pid)
    return env


#: What subject code never inherits from the controller: internal keys and markers of ours, the
#: test suite's emulator, and the SDK variables (a case host gets its target's at its start).
NOT_FOR_SUBJECTS = (
    ENV_EMULATOR_KEY,
    ENV_EMULATOR_OWNER,
    ENV_SANDBOX_MARKER,
    ENV_HOST_MARKER,
    ENV_TEST_ATTACH,
    ENV_API_KEY,
    ENV_API_URL,
    ENV_SANDBOX_URL,
    ENV_RUN,
)


def subject_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` less :data:`NOT_FOR_SUBJECTS`: the base of a case host's environment."""
    return {k: v for k, v in environ.items() if k not in NOT_FOR_SUBJECTS}


def sdk_env(api_url: str, api_key: str, sandbox_url: str | None = None) -> dict[str, str]:
    """The three variables that point the e2b SDK at ``api_url`` (envd at ``sandbox_url``, else the same)."""
    return {ENV_API_URL: api_url, ENV_SANDBOX_URL: sandbox_url or api_url, ENV_API_KEY: api_key}


def parse_sdk_env(values: Mapping[str, str]) -> tuple[str, str]:
    """``(api_url, api_key)`` from announced ``NAME=value`` pairs (the emulator's first lines)."""
    return values[ENV_API_URL], values[ENV_API_KEY]


def live_upstream(environ: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """The live API URL and fixed envd URL (None: per sandbox domain) the environment names.

    ``E2B_API_URL`` is deliberately not read: in a shell that once pointed the SDK at an emulator
    it would silently turn a live run into an offline one. A self-hosted or stand-in E2B is named
    by our own, explicit variables instead.
    """
    api_url = _value(environ, ENV_LIVE_API_URL)
    if api_url is None:
        api_url = f"https://api.{_value(environ, ENV_DOMAIN) or DEFAULT_DOMAIN}"
    return api_url, _value(environ, ENV_LIVE_SANDBOX_URL)


@dataclass(frozen=True)
class TargetSettings:
    """Where sandboxes come from and how they are tagged: mode, run id, SDK endpoint and key.

    Frozen and hashable (a process keeps one OpenEnv server per settings); the API key never
    appears in ``repr``/``str``. ``api_url``/``sandbox_url`` None means the SDK's own default.
    """

    mode: str = "offline"
    run_id: str = field(default_factory=new_run_id)
    api_key: str | None = field(default=None, repr=False)
    api_url: str | None = None
    sandbox_url: str | None = None
    template: str = DEFAULT_TEMPLATE
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    #: live only: the fault proxy forwards at most this many creates (None: no cap)
    max_sandboxes: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r} is not one of {', '.join(MODES)}; e.g. mode='offline'")
        if not self.run_id:
            raise ConfigError("run_id is empty; pass one, e.g. run_id=new_run_id()")

    @property
    def live(self) -> bool:
        """True for real E2B (through the fault proxy when a target is opened)."""
        return self.mode == "live"

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, live: bool = False, run_id: str | None = None
    ) -> TargetSettings:
        """Read the settings from ``environ`` (default ``os.environ``).

        Offline (and for code under test, which the plugin points at its target) the SDK variables
        are taken as they are. ``live`` reads the upstream of real E2B instead
        (:func:`live_upstream`). ``run_id`` wins over ``PYTEST_E2B_ENV_RUN``, which wins over the
        process's own id.
        """
        api_url: str | None
        if live:
            api_url, sandbox_url = live_upstream(environ)
        else:
            api_url, sandbox_url = _value(environ, ENV_API_URL), _value(environ, ENV_SANDBOX_URL)
        return cls(
            mode="live" if live else "offline",
            run_id=run_id or env_run_id(environ) or PROCESS_RUN_ID,
            api_key=env_api_key(environ) or None,
            api_url=api_url,
            sandbox_url=sandbox_url,
            template=_value(environ, ENV_TEMPLATE) or DEFAULT_TEMPLATE,
        )

    def replace(self, **changes: Any) -> TargetSettings:
        """A copy with ``changes`` applied (e.g. the endpoint of an opened emulator)."""
        return dataclasses.replace(self, **changes)

    def sdk_opts(self) -> dict[str, Any]:
        """Keyword options for every SDK call: ``Sandbox.create(**settings.sdk_opts())``."""
        out: dict[str, Any] = {"request_timeout": self.request_timeout}
        for key in ("api_key", "api_url", "sandbox_url"):
            value = getattr(self, key)
            if value:
                out[key] = value
        return out

    def sdk_env(self) -> dict[str, str]:
        """The SDK variables for the endpoint and key that are set."""
        pairs = (
            (ENV_API_URL, self.api_url),
            (ENV_SANDBOX_URL, self.sandbox_url),
            (ENV_API_KEY, self.api_key),
        )
        return {name: value for name, value in pairs if value}

    def to_env(self, *, own_openenv: bool = False) -> dict[str, str | None]:
        """Everything code under test needs in its environment: SDK variables, run id, template.

        ``own_openenv`` maps ``PYTEST_E2B_ENV_OPENENV_URL`` to None (for :func:`scoped_environ`:
        removed), so the reference episode serves itself against these settings instead of a
        server the shell named for another target.
        """
        env: dict[str, str | None] = dict(self.sdk_env())
        env[ENV_RUN] = self.run_id
        if self.template != DEFAULT_TEMPLATE:
            env[ENV_TEMPLATE] = self.template
        if own_openenv:
            env[ENV_OPENENV_URL] = None
        return env

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for manifests and ``metrics.json``: never the key."""
        return {
            "mode": self.mode,
            "run_id": self.run_id,
            "api_url": self.api_url or f"https://api.{DEFAULT_DOMAIN} (SDK default)",
            "template": self.template,
        }
