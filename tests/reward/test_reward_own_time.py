"""The deadline's own-time accounting, fed the looks a case's supervisor would take.

The looks (state letters, runnable seconds, tree usage) are what ``/proc`` showed for the shapes
below; the live counterparts run in ``test_reward_pool.py`` (CPU contention, a sleeper, a fork
bomb, a starved lone program) and ``scripts/bench_reward_stall.py`` (page-ins stalled by a host
whose cache is dropped under writers).
"""

from __future__ import annotations

from collections.abc import Iterator

from pytest_e2b_env.standalone.reward_runner import LOOK_SECONDS, _OwnTime

ALONE = (0.0, 1, 1, 0)  # tree usage at the start: no CPU yet, one CPU allowed, one thread, none reaped


def _run(
    clock: _OwnTime, looks: Iterator[tuple[float, str]], usage: tuple | None = None
) -> tuple[float, bool]:
    """Feed looks every LOOK_SECONDS until the clock says stop; (when, starved)."""
    now = clock.start
    for waited, state in looks:
        now += LOOK_SECONDS
        clock.look(now, waited, state)
        if clock.wants_tree(now) and usage is not None:
            clock.tree(now, usage)
        if clock.left(now) <= 0:
            return now - clock.start, clock.starved
    raise AssertionError("the clock never stopped it")


def _forever(state: str, waiting_share: float = 0.0) -> Iterator[tuple[float, str]]:
    """Looks at a program in ``state`` that waits for a CPU ``waiting_share`` of the wall time."""
    wall = 0.0
    while True:
        wall += LOOK_SECONDS
        yield wall * waiting_share, state


def test_a_lone_program_stalled_in_the_kernel_keeps_its_time() -> None:
    """1.5 s of page-ins on a 2 s deadline, then 1 s of its own work: it is not stopped."""
    clock = _OwnTime(0.0, 2.0, 10.0, ALONE)
    stalled = [(0.0, "D")] * 30 + [(0.0, "R")] * 20  # 2.5 s of wall, 1 s of its own
    now = 0.0
    for waited, state in stalled:
        now += LOOK_SECONDS
        clock.look(now, waited, state)
        assert clock.left(now) > 0, clock.timing(0.0)
    assert 0.9 < clock.own < 1.1, clock.timing(0.0)
    assert 1.4 < clock.blocked < 1.6, clock.timing(0.0)


def test_a_sleeper_spends_its_time() -> None:
    """Asleep (S) is its own choice: stopped at its deadline, timed out, not starved."""
    when, starved = _run(_OwnTime(0.0, 2.0, 10.0, ALONE), _forever("S"))
    assert abs(when - 2.0) < 2 * LOOK_SECONDS
    assert not starved


def test_a_program_stalled_to_the_backstop_times_out_without_a_mask() -> None:
    """Uninterruptible sleep of its own making buys time up to the backstop, then a 0, never a mask."""
    when, starved = _run(_OwnTime(0.0, 2.0, 10.0, ALONE), _forever("D"))
    assert abs(when - 20.0) < 2 * LOOK_SECONDS
    assert not starved


def test_a_lone_program_kept_from_the_cpu_is_starved() -> None:
    """Runnable (R) but given the CPU 5 % of the time: at the backstop its time is unspent."""
    when, starved = _run(_OwnTime(0.0, 2.0, 10.0, ALONE), _forever("R", 0.95), usage=(0.5, 1, 1, 0))
    assert abs(when - 20.0) < 2 * LOOK_SECONDS
    assert starved


def test_a_stalled_program_with_company_gets_no_excuse() -> None:
    """A second thread (its own doing) seen at a walk: its stalls count, it ends at its deadline."""
    clock = _OwnTime(0.0, 2.0, 10.0, ALONE)
    when, starved = _run(clock, _forever("D"), usage=(0.01, 1, 2, 0))
    assert abs(when - 2.0) < 12 * LOOK_SECONDS
    assert not starved
    assert not clock.alone


def test_a_program_whose_tree_holds_the_cpus_ends_at_its_deadline() -> None:
    """A fork bomb waits for CPUs its own tree holds: its tree's CPU is its own time."""
    clock = _OwnTime(0.0, 2.0, 10.0, ALONE)
    when, starved = _run(clock, _forever("R", 0.9), usage=(4.0, 2, 64, 10))  # 4 CPU-s over 2 CPUs
    assert when < 2.0 + 12 * LOOK_SECONDS
    assert not starved


def test_without_proc_the_deadline_is_wall_time() -> None:
    """No /proc (no tree, nothing runnable counted): the program gets plain wall time, no excuse."""
    when, starved = _run(_OwnTime(0.0, 2.0, 10.0, None), _forever("?"))
    assert abs(when - 2.0) < 2 * LOOK_SECONDS
    assert not starved


def test_a_walk_just_short_of_the_deadline_is_followed_at_every_look() -> None:
    """A tree that shares its one CPU with a child of its own: the walk at 1.5 s sees 1.49 s per CPU.
    Its own time stays at that (a look does not drop it back to its wait-less wall time), and the
    next looks walk again: it is stopped within a look of its deadline, not half a second later."""
    clock = _OwnTime(0.0, 1.5, 20.0, (0.0, 2, 1, 0))
    walks = []
    now = 0.0
    while clock.left(now) > 0:
        now = round(now + LOOK_SECONDS, 6)
        clock.look(now, now / 2, "R")  # half its wall time waiting: its child holds the CPU
        if clock.wants_tree(now):
            walks.append(now)
            clock.tree(now, (now - 0.02, 1, 2, 0))  # the tree's CPU, a little behind the wall
        assert clock.own >= clock.floor
        assert now < 2.0, (now, walks)
    assert 1.5 <= now <= 1.5 + 2 * LOOK_SECONDS
    assert walks[:3] == [0.5, 1.0, 1.5]
    assert clock.starved is False
