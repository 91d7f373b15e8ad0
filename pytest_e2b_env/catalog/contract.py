"""What a subject declares about itself, so the catalog drives it without assuming our shapes.

A subject is exactly what a user hands to TRL. What the catalog cannot learn from TRL's calling
convention (the dataset columns a reward function reads, how an episode's ``reset`` takes the
task, its tool names, fixed limits) it reads from an optional ``e2b_contract`` dict on the
object the subject spec names, or from a ``module:attr`` dict named by the ini key
``e2b_reward_contract`` / ``e2b_episode_contract``. docs/catalog.md is the user-facing contract.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_e2b_env.errors import ConfigError

ATTRIBUTE = "e2b_contract"
_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
EXAMPLES = {"reward": "mypkg.rewards:make_reward", "episode": "mypkg.env:MyEpisode"}
LIMIT_KEYS = ("command_seconds", "policy_seconds", "verify_seconds", "artifact_bytes")
DEFAULT_LIMITS: dict[str, float] = {
    "command_seconds": 10,
    "policy_seconds": 120,
    "verify_seconds": 20,
    "artifact_bytes": 65536,
}
COLUMNS = ("test_cases", "verification_info")
_COMMON_KEYS = {"raises_classes", "warm_up", "preload", "release", "needs_isolation"}
#: The contract's zero-argument callables, each called by the catalog at one point of a run.
HOOKS = ("warm_up", "preload", "release")
_REWARD_KEYS = {"columns"} | _COMMON_KEYS
_EPISODE_KEYS = {"task", "task_arg", "tools", "command_arg", "limits", "extra_tools"} | _COMMON_KEYS

#: House-policy criteria, by the name ``e2b_relax`` takes, with the reason they are policy.
POLICIES: dict[str, str] = {
    "fence-variants": "the program is the first fenced block whose info string is empty, python, py or "
    "python3; other code may pick another block without training on garbage",
    "parse-before-run": "source that does not parse uses no sandbox; running it anyway only costs time",
    "duplicate-keys": "JSON output with duplicate keys scores 0; a grader keeping the last value is lenient",
    "non-finite-json": "NaN or Infinity in the output scores 0; Python's json module accepts them",
    "json-types": '1, 1.0, true and "1" are different values; numeric or string comparison is a choice',
    "retry-lost-worker": "a sandbox lost mid-evaluation is retried once; raising instead is safe",
    "retry-rate-limit": "a 429 with Retry-After on create is waited out; raising instead is safe",
    "cleanup-names-ids": "the error for a failed kill names the sandbox ids; the SDK's own errors do not",
    "lost-create-recovery": "a sandbox whose create response was lost is found and killed; otherwise it "
    "lives until its server-side timeout",
    "picklable-factory": "AsyncGRPOTrainer pickles environment_factory for its spawned rollout worker (a "
    "lambda or closure stops it at start); GRPOTrainer does not pickle it",
}


def import_spec(spec: str, key: str, kind: str) -> Any:
    """Import ``module:attr``; a bad spec or a failed import is one :class:`ConfigError` naming both."""
    if not _SPEC.match(spec or ""):
        raise ConfigError(f"{key}={spec!r} is not 'module:attr'. Example: {EXAMPLES[kind]}")
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # a subject module may fail in any way while importing
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            from pytest_e2b_env.extras import install_hint

            found = install_hint(exc.name)
            hint = f" ({found})" if found else ""
        raise ConfigError(
            f"{key}={spec!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}{hint}"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{key}={spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Contract:
    """A subject's declaration, validated; the defaults are the catalog's documented shapes."""

    kind: str
    columns: str | Callable[[list[Any]], dict[str, list[Any]]] = "test_cases"
    task: str = "json"
    task_arg: str = "task"
    tools: Mapping[str, str] = field(default_factory=lambda: {"terminal": "terminal", "submit": "submit"})
    command_arg: str = "command"
    limits: Mapping[str, float] | None = None
    #: model tools the class declares besides the terminal and submit (as ``e2b_episode_tools`` does)
    extra_tools: tuple[str, ...] = ()
    raises_classes: tuple[str, ...] = ()
    warm_up: Callable[[], Any] | None = None
    #: Imports only (no thread, socket or sandbox): run once where case hosts are forked from.
    preload: Callable[[], Any] | None = None
    #: Releases what the subject keeps process-wide (a server, a pool) while the target still
    #: answers: called once in each process that ran the subject, before its target stops.
    release: Callable[[], Any] | None = None
    #: The subject relies on what an E2B sandbox gives (a root that can nest namespaces, other
    #: accounts): below the emulator's namespaces level its cases are skipped with the level's
    #: reason instead of failing on the harness's host.
    needs_isolation: bool = False
    source: str = "defaults"

    @property
    def fixed_limits(self) -> bool:
        """Whether the subject enforces its own limits and ignores ``task["limits"]``."""
        return self.limits is not None

    def limit(self, name: str, task: Mapping[str, Any]) -> float:
        """The limit in force: the declared fixed one, else the task's, else the contract default."""
        if self.limits is not None and name in self.limits:
            return float(self.limits[name])
        task_limits = task.get("limits") or {}
        return float(task_limits.get(name, DEFAULT_LIMITS[name]))

    def tool(self, role: str) -> str:
        """The subject's method name for a catalog tool (``terminal``, ``submit`` or any other)."""
        return self.tools.get(role, role)

    def facts(self) -> dict[str, Any]:
        """The declaration as JSON data (callables by name): what a case host tells the controller."""
        return {
            "kind": self.kind,
            "columns": self.columns if isinstance(self.columns, str) else {"callable": _name(self.columns)},
            "task": self.task,
            "task_arg": self.task_arg,
            "tools": dict(self.tools),
            "command_arg": self.command_arg,
            "limits": dict(self.limits) if self.limits is not None else None,
            "extra_tools": list(self.extra_tools),
            "raises_classes": list(self.raises_classes),
            "needs_isolation": self.needs_isolation,
            "source": self.source,
            **{key: (_name(getattr(self, key)) if getattr(self, key) is not None else None) for key in HOOKS},
        }

    @classmethod
    def from_facts(cls, data: Mapping[str, Any]) -> Contract:
        """The controller's copy of a declaration another process validated (:meth:`facts`).

        Its callables are :class:`Declared` names: the controller reads the data and never runs
        subject code.
        """
        columns = data.get("columns", "test_cases")
        hooks: dict[str, Any] = {key: Declared(str(data[key])) if data.get(key) else None for key in HOOKS}
        return cls(
            kind=str(data["kind"]),
            columns=Declared(str(columns["callable"])) if isinstance(columns, Mapping) else str(columns),
            task=str(data.get("task", "json")),
            task_arg=str(data.get("task_arg", "task")),
            tools={str(k): str(v) for k, v in dict(data.get("tools") or {}).items()}
            or {"terminal": "terminal", "submit": "submit"},
            command_arg=str(data.get("command_arg", "command")),
            limits={str(k): float(v) for k, v in data["limits"].items()} if data.get("limits") else None,
            extra_tools=tuple(str(t) for t in data.get("extra_tools") or ()),
            raises_classes=tuple(str(c) for c in data.get("raises_classes") or ()),
            needs_isolation=data.get("needs_isolation") is True,
            source=str(data.get("source", "defaults")),
            **hooks,
        )

    def summary(self) -> dict[str, Any]:
        """JSON-safe description for the manifest and the report."""
        columns = self.columns if isinstance(self.columns, str) else _name(self.columns)
        out: dict[str, Any] = {"source": self.source}
        if self.kind == "reward":
            out["columns"] = columns
        else:
            out |= {
                "task": self.task,
                "task_arg": self.task_arg,
                "tools": dict(self.tools),
                "command_arg": self.command_arg,
                "limits": dict(self.limits) if self.limits is not None else "from the task",
            }
            if self.extra_tools:
                out["extra_tools"] = list(self.extra_tools)
        if self.raises_classes:
            out["raises_classes"] = list(self.raises_classes)
        if self.needs_isolation:
            out["needs_isolation"] = True
        for key in HOOKS:
            hook = getattr(self, key)
            if hook is not None:
                out[key] = _name(hook)
        return out


def _name(obj: Any) -> str:
    if isinstance(obj, Declared):
        return obj.name
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


class Declared:
    """A callable the subject declares, as the controller knows it: its name (it runs in the case host)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} is subject code: it runs in the case host, never in the controller")

    def __repr__(self) -> str:
        return f"<declared {self.name}>"


def _fail(where: str, key: str, value: Any, fix: str) -> ConfigError:
    return ConfigError(f"{where}: {key}={value!r} is not valid; {fix}")


def parse_contract(raw: Any, kind: str, where: str) -> Contract:
    """Validate a declaration dict; every bad key or value is a :class:`ConfigError` naming it."""
    if raw is None:
        return Contract(kind=kind)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: {ATTRIBUTE} must be a dict, got {type(raw).__name__}")
    allowed = _REWARD_KEYS if kind == "reward" else _EPISODE_KEYS
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown {kind} contract key(s) {unknown}; known: {', '.join(sorted(allowed))}"
        )
    values: dict[str, Any] = {"kind": kind, "source": where}
    columns = raw.get("columns", "test_cases")
    if not (columns in COLUMNS or callable(columns)):
        raise _fail(
            where, "columns", columns, f"use one of {', '.join(COLUMNS)} or a function(test_cases) -> dict"
        )
    values["columns"] = columns
    task = raw.get("task", "json")
    if task not in ("json", "dict"):
        raise _fail(where, "task", task, "use 'json' (JSON text) or 'dict'")
    values["task"] = task
    for key in ("task_arg", "command_arg"):
        value = raw.get(key, Contract.__dataclass_fields__[key].default)
        if not (isinstance(value, str) and value.isidentifier()):
            raise _fail(where, key, value, "give a keyword argument name such as 'task'")
        values[key] = value
    tools = raw.get("tools", {})
    if not isinstance(tools, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v.isidentifier() and not v.startswith("_")
        for k, v in tools.items()
    ):
        raise _fail(where, "tools", tools, "map catalog tools to public method names: {'terminal': 'bash'}")
    values["tools"] = {"terminal": "terminal", "submit": "submit", **tools}
    limits = raw.get("limits")
    if limits is not None:
        if not isinstance(limits, Mapping) or not limits:
            raise _fail(where, "limits", limits, f"give a dict with some of {', '.join(LIMIT_KEYS)}")
        for key, value in limits.items():
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            if key not in LIMIT_KEYS or not ok:
                raise _fail(
                    where, f"limits.{key}", value, f"limits take positive numbers for {', '.join(LIMIT_KEYS)}"
                )
        values["limits"] = dict(limits)
    extra = raw.get("extra_tools", ())
    if not isinstance(extra, list | tuple) or not all(
        isinstance(t, str) and t.isidentifier() and not t.startswith("_") for t in extra
    ):
        raise _fail(where, "extra_tools", extra, "list public method names, e.g. ['read_file', 'write_file']")
    values["extra_tools"] = tuple(extra)
    classes = raw.get("raises_classes", ())
    if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
        raise _fail(where, "raises_classes", classes, "give a list of exception class names")
    values["raises_classes"] = tuple(classes)
    needs = raw.get("needs_isolation", False)
    if not isinstance(needs, bool):
        raise _fail(where, "needs_isolation", needs, "give true or false")
    values["needs_isolation"] = needs
    for key in HOOKS:
        hook = raw.get(key)
        if hook is not None and not callable(hook):
            raise _fail(where, key, hook, "give a zero-argument callable")
        values[key] = hook
    return Contract(**values)


@dataclass(frozen=True)
class Subject:
    """A loaded subject: its spec, the factory TRL would get, and its validated contract."""

    kind: str
    spec: str
    factory: Callable[[], Any]
    contract: Contract


@dataclass(frozen=True)
class SubjectInfo:
    """A subject as the controller knows it: what to import where it runs, and its declaration.

    The controller never imports the subject: a process that did (a host template, a case host)
    sends the declaration as data (:meth:`Contract.facts`).
    """

    kind: str
    spec: str
    contract: Contract
    #: the ini key naming a contract dict elsewhere (``e2b_<kind>_contract``), if any
    contract_spec: str | None = None

    def host_spec(self) -> dict[str, Any]:
        """What a case host (or a template) imports: the subject spec, its kind and contract spec."""
        return {"spec": self.spec, "kind": self.kind, "contract": self.contract_spec}


def load_subject(spec: str, kind: str, contract_spec: str | None = None) -> Subject:
    """Import a subject and its contract (attribute, or the ini-named dict, which wins)."""
    key = f"e2b_{kind}_subject"
    obj = import_spec(spec, key, kind)
    if not callable(obj):
        raise ConfigError(
            f"{key}={spec!r}: {spec.partition(':')[2]!r} is not callable; give a factory or a class"
        )
    if contract_spec:
        raw = import_spec(contract_spec, f"e2b_{kind}_contract", kind)
        contract = parse_contract(raw, kind, f"e2b_{kind}_contract={contract_spec!r}")
    else:
        contract = parse_contract(getattr(obj, ATTRIBUTE, None), kind, f"{spec} {ATTRIBUTE}")
    return Subject(kind=kind, spec=spec, factory=obj, contract=contract)


def parse_relax(raw: str | list[str] | None) -> frozenset[str]:
    """Policy names from ``e2b_relax`` (commas or lines); an unknown name is a :class:`ConfigError`."""
    items = raw if isinstance(raw, list) else re.split(r"[,\s]+", raw or "")
    names = frozenset(n.strip() for n in items if n and n.strip())
    unknown = sorted(names - set(POLICIES))
    if unknown:
        raise ConfigError(f"e2b_relax: unknown policy name(s) {unknown}; relaxable: {', '.join(POLICIES)}")
    return names
