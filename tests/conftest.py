"""Suite-wide test configuration. Area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

# pytester's in-process runs drop every module first imported inside them. If httpcore is first
# imported there, a later copy of it no longer matches the exception map httpx built from the first
# one, and raw httpcore errors escape `except httpx.HTTPError` in the fault proxy. Importing the
# transport stack here keeps one copy for the whole session, whatever order tests run in.
import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest

# The tiny model and tokenizer are built locally; nothing may reach a hub, ever.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_job_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs inside tests never append to the CI job's summary (the outer run's catalog summary still does)."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


# Each test starts clean of the garbage the one before left. A cancelled SDK stream leaves a failed
# task in a reference cycle; freed by the collector during a later test, its finalizer logs the
# traceback, and on CPython 3.11 that formatting's ``ast.parse``, nested in any parse under way
# (pytest rewriting a module imported for the first time, a reward's syntax check), makes the
# outer parse raise SystemError. The objects a test leaves alive are frozen after it, so each
# collection walks only one test's objects; at a module's end they are unfrozen once, so what its
# fixtures held is collected too.
@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported lives for the whole session: later collections skip it."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a test's teardown, free its garbage (and, at a module's end, its fixtures')."""
    yield
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None):
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--fast``: the fast tier."""
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier: leave out the tests marked full or slow and the catalog's own items",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """``--fast`` unsets the catalog's subjects before the plugin reads them: the catalog's own items
    are left out, so nothing imports the subjects or starts their emulators just to drop them."""
    if config.getoption("fast"):
        config.option.e2b_reward_subject = ""
        config.option.e2b_episode_subject = ""


# The full tier: tests marked `full` (a pytest or validate session in a child process, a catalog
# sweep, a real deadline or load: seconds each), the `slow` ones (training, benchmarks, wheel
# installs) and the catalog's own items, which `pytest` without paths runs against the bundled code.
FULL_TIER = ("full", "slow", "e2b_case", "e2b_task")


def _tier_rank(item: pytest.Item) -> int:
    """0: a slow test, 1: another test of the full tier, 2: a test of the fast tier."""
    if item.get_closest_marker("slow"):
        return 0
    return 1 if any(item.get_closest_marker(name) for name in FULL_TIER) else 2


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


# Scheduling on xdist (scripts/test: three workers, `--dist loadfile --no-loadscope-reorder`, so
# files are handed out whole, in collection order). xdist's own order, the files with the most
# tests first, left the one-test guards of several minutes (the catch and clean tables, lanes
# against serial, the training runs) to the end, and one worker finished minutes after the others.
# Here the files with the longest tests come first: those with a slow test, then those with another
# test of the full tier, then the rest, each file whole and in its own order.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--fast`` leaves out the full tier; on an xdist worker the files with the longest tests come first."""
    if config.getoption("fast"):
        dropped = [item for item in items if _tier_rank(item) < 2]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if _tier_rank(item) == 2]
    if not hasattr(config, "workerinput"):
        return
    rank: dict[str, int] = {}
    for item in items:
        file = _file_of(item)
        rank[file] = min(rank.get(file, 2), _tier_rank(item))
    items.sort(key=lambda item: rank[_file_of(item)])  # stable: files and tests keep their order
