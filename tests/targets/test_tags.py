"""The one tag, list, kill-and-confirm and sweep implementation, on the real emulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_e2b_env.settings import TargetSettings, new_run_id
from pytest_e2b_env.targets import Target, open_target
from pytest_e2b_env.targets.tags import (
    RUN_KEY,
    created_ids,
    kill_and_confirm,
    list_ids,
    sweep,
    tags,
)


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    """One emulator for the module, stopped when the module is done."""
    with open_target(TargetSettings(run_id=new_run_id())) as opened:
        yield opened


def test_tags_carry_run_role_and_extras() -> None:
    """tags() is the run id, the role and the extra keys, all strings."""
    assert tags("run-1", "policy", episode="e7") == {RUN_KEY: "run-1", "role": "policy", "episode": "e7"}


def test_created_ids_counts_every_create_entry_once_in_range() -> None:
    """Any create entry naming a sandbox counts (a lost response too), once, within start <= seq < end."""
    entries = [
        {"seq": 1, "op": "create", "sandbox_id": "a", "status": 201},
        {"seq": 2, "op": "create", "sandbox_id": None, "status": 429},
        {"seq": 3, "op": "create", "sandbox_id": "b", "status": None, "detail": "response lost"},
        {"seq": 4, "op": "kill", "sandbox_id": "a", "status": 204},
        {"seq": 5, "op": "create", "sandbox_id": "a", "status": 201},
        {"seq": 6, "op": "create", "sandbox_id": "c", "status": 201},
    ]
    assert created_ids(entries) == ["a", "b", "c"]
    assert created_ids(entries, start=2, end=6) == ["b", "a"]


def test_kill_of_a_gone_sandbox_is_confirmed(target: Target) -> None:
    """A 404 answering the kill is a confirmed kill: gone means gone."""
    from e2b import Sandbox

    box = Sandbox.create(metadata=tags(target, "test"), timeout=120, **target.sdk_opts())
    first = kill_and_confirm(box.sandbox_id, target.sdk_opts())
    again = kill_and_confirm(box.sandbox_id, target.sdk_opts())
    assert (first.confirmed, first.killed) == (True, True)
    assert (again.confirmed, again.killed) == (True, False)
    assert first.record()["confirmed_absent_at"]


def test_kill_that_keeps_failing_is_unresolved_with_its_error(target: Target) -> None:
    """A kill answered 500 every time is not confirmed; the record names the error."""
    from e2b import Sandbox

    box = Sandbox.create(metadata=tags(target, "test"), timeout=120, **target.sdk_opts())
    target.faults.add(
        route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None, sandbox=box.sandbox_id
    )
    try:
        kill = kill_and_confirm(box.sandbox_id, target.sdk_opts(), attempts=2)
    finally:
        target.faults.clear()
    assert not kill.confirmed
    assert kill.record()["error"].startswith("kill failed: SandboxException")
    assert kill_and_confirm(box.sandbox_id, target.sdk_opts()).confirmed


def test_sweep_by_run_kills_only_that_run(target: Target) -> None:
    """sweep(metadata) kills the run's sandboxes, every page of them, and leaves another run's alone."""
    from e2b import Sandbox

    run, other = new_run_id(), new_run_id()
    mine = [Sandbox.create(metadata=tags(run, "test"), timeout=120, **target.sdk_opts()) for _ in range(3)]
    theirs = Sandbox.create(metadata=tags(other, "test"), timeout=120, **target.sdk_opts())
    kills = sweep(target.sdk_opts(), {RUN_KEY: run})
    assert sorted(k.sandbox_id for k in kills) == sorted(b.sandbox_id for b in mine)
    assert all(k.confirmed for k in kills)
    assert list_ids(target.sdk_opts(), {RUN_KEY: other}) == [theirs.sandbox_id]
    assert all(k.confirmed for k in sweep(target.sdk_opts(), {RUN_KEY: other}))


def test_sweep_needs_the_run_key(target: Target) -> None:
    """A sweep without the run id in its metadata is refused, naming the missing key."""
    with pytest.raises(ValueError, match="has no 'pytest_e2b_env_run'"):
        sweep(target.sdk_opts(), {"role": "test"})


def test_target_sweep_kills_what_its_ledger_created_whatever_the_metadata(target: Target) -> None:
    """Target.sweep kills every sandbox created through it, untagged or tagged for another run."""
    from e2b import Sandbox

    untagged = Sandbox.create(timeout=120, **target.sdk_opts())
    foreign = Sandbox.create(metadata=tags("someone-else", "test"), timeout=120, **target.sdk_opts())
    assert target.sweep() == []
    alive = target.alive_ids()
    assert untagged.sandbox_id not in alive
    assert foreign.sandbox_id not in alive
