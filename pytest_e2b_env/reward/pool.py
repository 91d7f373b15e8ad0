"""RewardPool: TRL's async code reward on a pool of reusable, preflighted E2B worker sandboxes.

Failure policy in one place:

* the candidate's own behaviour (no code, syntax, exit, timeout, output) scores 0 with a reason;
* a transient infrastructure fault (lost worker, 5xx, rate limit, transport timeout, a broken
  runner) gets one retry on a replacement worker; creation gets two attempts (the SDK already
  honours ``Retry-After`` on 429 inside each). A batch goes to the workers in parts, one command
  each; a part lost that way was each of its candidates' first attempt, and each gets its retry
  on its own;
* authentication or configuration errors, a failed preflight, exhausted retries, cancellation
  and heartbeat auth failures raise :class:`InfrastructureError` and poison the pool: every
  later call raises too, and no score is ever produced from a failure;
* with ``on_infrastructure="mask"``, a candidate whose retry failed too is *unscorable*: it gets
  ``None`` (TRL masks it: no baseline share, zero advantage) and a ledger record with its failure
  kind, while the rest of the batch keeps its scores; over the :class:`MaskBudget` the batch
  raises as above. Creation, authentication, configuration, preflight, cancellation, heartbeat
  and cleanup failures always raise;
* a worker dropped mid-call is confirmed gone before the call scores (its kill retried twice),
  else the call raises :class:`CleanupError` naming it;
* ``close()`` kills every worker, sweeps by run-id metadata and raises :class:`CleanupError`
  naming the ids it could not confirm gone.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
import uuid
from typing import Any

from pytest_e2b_env.errors import CleanupError, ConfigError, InfrastructureError, PreflightError
from pytest_e2b_env.masking import (
    DEFAULT_MASK_BUDGET,
    DEFAULT_MASK_CONSECUTIVE,
    MaskBudget,
    check_policy,
)
from pytest_e2b_env.reward.batch import Cases, grade_answer, validate_batch
from pytest_e2b_env.reward.extract import extract_code
from pytest_e2b_env.reward.preflight import check_preflight
from pytest_e2b_env.reward.protocol import Batch, Isolation, Limits, Payload, ProtocolError, part_answers
from pytest_e2b_env.reward.records import CandidateRecord, Counters, percentile
from pytest_e2b_env.reward.workers import (
    Worker,
    WorkerClient,
    describe,
    is_transient,
    probe_source,
)
from pytest_e2b_env.settings import DEFAULT_CREATE_INTERVAL, env_run_id

log = logging.getLogger("pytest_e2b_env.reward")
_POISON = "poison"  # queued when a background creation failed: every waiter raises the pool's failure
#: Seconds before each further kill of a worker whose kill failed (a transient 5xx passes).
KILL_RETRIES = (0.25, 1.0)
#: The most candidates one command hands a worker (a TRL batch is split over the workers first).
MAX_PART = 16


def _run_id(run_id: str | None) -> str:
    return run_id or env_run_id() or uuid.uuid4().hex[:12]


class _LostCandidate(InfrastructureError):
    """A candidate's evaluation failed on its retry too: maskable, unlike every other failure."""

    def __init__(self, message: str, failure_kind: str, errors: list[str]) -> None:
        super().__init__(message)
        self.failure_kind = failure_kind
        self.errors = list(errors)


def _failure_kind(exc: BaseException) -> str:
    """What the infrastructure did to the candidate, for the ledger (never its payload)."""
    name = type(exc).__name__
    if "NotFound" in name or "NotRunning" in name:  # 502 "sandbox was not found", a cut stream
        return "sandbox_lost"
    if "Timeout" in name:
        return "timeout"
    if name == "StarvedCase":
        return "host_starved"
    if "Protocol" in name or "CommandExit" in name:
        return "runner_broken"
    return "sandbox_error"


def _raise_unless_transient(exc: Exception, what: str) -> None:
    """A failed command: a transient fault is retried on a fresh worker, any other is fatal."""
    if not is_transient(exc):
        raise InfrastructureError(f"{what}: {describe(exc)} (not retried)") from exc


class RewardPool:
    """A pool of worker sandboxes scoring generated programs for TRL (``reward_funcs=pool.code_reward``)."""

    def __init__(
        self,
        workers: int = 2,
        create_interval: float = DEFAULT_CREATE_INTERVAL,
        case_seconds: float = 2.0,
        *,
        template: str = "base",
        run_id: str | None = None,
        lifetime_seconds: int = 600,
        api_opts: dict[str, Any] | None = None,
        request_timeout: float = 15.0,
        renew_every: float | None = None,
        limits: Limits | None = None,
        isolation: Isolation | None = None,
        ledger_size: int = 10_000,
        on_infrastructure: str = "raise",
        mask_budget: float = DEFAULT_MASK_BUDGET,
        mask_consecutive: int = DEFAULT_MASK_CONSECUTIVE,
    ) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"workers={workers!r} must be an integer >= 1, e.g. workers=2")
        if create_interval < 0:
            raise ConfigError(
                f"create_interval={create_interval!r} must be >= 0 seconds (E2B Hobby allows 1/s)"
            )
        if not 0 < case_seconds <= 60:
            raise ConfigError(f"case_seconds={case_seconds!r} must be in (0, 60], e.g. 2.0")
        if lifetime_seconds < 30:
            raise ConfigError(f"lifetime_seconds={lifetime_seconds!r} must be >= 30, e.g. 600")
        check_policy(on_infrastructure, mask_budget, mask_consecutive)
        self.on_infrastructure = on_infrastructure
        self.budget = MaskBudget(float(mask_budget), int(mask_consecutive))
        self.workers = workers
        self.create_interval = float(create_interval)
        self.case_seconds = float(case_seconds)
        self.run_id = _run_id(run_id)
        self.limits = limits or Limits()
        if not 1 <= self.limits.wall_slack <= 20:
            raise ConfigError(
                f"limits.wall_slack={self.limits.wall_slack!r} must be in [1, 20] "
                "(times case_seconds of wall time a CPU-starved case may take), e.g. 3.0"
            )
        self.isolation = isolation or Isolation()
        self.renew_every = float(renew_every or lifetime_seconds / 3)
        self._client = WorkerClient(
            template=template,
            run_id=self.run_id,
            lifetime_seconds=int(lifetime_seconds),
            request_timeout=request_timeout,
            api_opts=api_opts,
        )
        self._counters = Counters()
        self._ledger: collections.deque[dict[str, Any]] = collections.deque(maxlen=ledger_size)
        self._owned: dict[str, Worker] = {}
        self.cleanup: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []  # candidates that got no score (infrastructure)
        self.kill_failures: dict[str, str] = {}
        # Idle workers (or the poison marker). Free slots are counted, not queued: a borrower
        # takes whichever worker frees up first, and a worker is created in the background only
        # while waiting borrowers outnumber the creations already under way.
        self._slots: asyncio.Queue[Worker | str] | None = None
        self._fresh_slots = workers
        self._replace_slots = 0
        self._waiting = 0
        self._creations: set[asyncio.Task[None]] = set()
        self._pacing: set[asyncio.Task[Any]] = set()
        self._pace_lock: asyncio.Lock | None = None
        self._next_create = 0.0
        self._heartbeat: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._closing = "not closing"

    # ----------------------------------------------------------------- public surface
    @property
    def ledger(self) -> list[dict[str, Any]]:
        """Per-candidate records (most recent ``ledger_size``), in evaluation order."""
        return list(self._ledger)

    @property
    def metrics(self) -> dict[str, Any]:
        """Counters, queue wait vs execution, worker-seconds estimate and latency percentiles."""
        c = self._counters
        now = time.monotonic()
        live = sum(now - w.created_mono for w in self._owned.values())
        busy = c.queue_seconds + c.exec_seconds
        return {
            "run_id": self.run_id,
            "workers_created": c.created,
            "workers_replaced": c.replaced,
            "workers_owned": len(self._owned),
            "infrastructure_retries": c.retries,
            "create_attempts": c.create_attempts,
            "renewals": c.renewals,
            "renewal_failures": c.renewal_failures,
            "candidates": c.candidates,
            "cases": c.cases,
            "reasons": dict(c.reasons),
            "queue_seconds": round(c.queue_seconds, 6),
            "execution_seconds": round(c.exec_seconds, 6),
            "queue_share": round(c.queue_seconds / busy, 4) if busy else 0.0,
            "worker_seconds_estimate": round(c.closed_worker_seconds + live, 3),
            "candidate_seconds_p50": percentile(c.candidate_seconds, 50),
            "candidate_seconds_p95": percentile(c.candidate_seconds, 95),
            "preflight_seconds_p50": percentile(c.preflight_seconds, 50),
            "poisoned": self._failure is not None,
            "failed_candidates": len(self.failures),
            "kill_failures": dict(self.kill_failures),
            "on_infrastructure": self.on_infrastructure,
            **self.budget.as_dict(),
        }

    async def code_reward(
        self, completions: list[Any], test_cases: list[Any], **kwargs: Any
    ) -> list[float | None]:
        """TRL reward: one float in [0, 1] per completion, in completion order; raises on infrastructure.

        With ``on_infrastructure="mask"`` a completion the infrastructure lost (its retry too) is
        ``None`` instead, within the budget; everything else still raises.
        """
        self._check_usable()
        started = time.monotonic()
        batch = validate_batch(completions, test_cases)
        scores: list[float | None] = [0.0] * len(completions)
        masked: dict[int, _LostCandidate] = {}
        evaluable: list[tuple[int, str, Cases]] = []
        for i, completion in enumerate(completions):
            extracted = extract_code(completion)
            if extracted.code is None:
                record = CandidateRecord(i, 0.0, extracted.reason, extracted.detail)
                self._commit(record)
                continue
            evaluable.append((i, extracted.code, batch[i]))
        jobs = [i for i, _, _ in evaluable]
        if jobs:
            self._bind_loop()
            parts = self._parts(evaluable)
            tasks = [asyncio.create_task(self._evaluate_part(part)) for part in parts]
            try:
                gathered = await asyncio.gather(*tasks, return_exceptions=True)
            except BaseException as exc:  # cancellation: remote work cannot be certified stopped
                self._poison(
                    InfrastructureError("reward call was cancelled mid-batch; the pool is poisoned"), exc
                )
                raise
            outcome: dict[int, CandidateRecord | BaseException] = {}
            for part, got in zip(parts, gathered, strict=True):
                for i, _, _ in part:
                    outcome[i] = got[i] if isinstance(got, dict) else got
            results = [outcome[i] for i in jobs]
            for i, result in zip(jobs, results, strict=True):
                if isinstance(result, BaseException):  # evidence only: these never get a score
                    self.failures.append({"index": i, "error": describe(result), "at": time.time()})
            masking = self.on_infrastructure == "mask"
            fatal = [
                r
                for r in results
                if isinstance(r, BaseException) and not (masking and isinstance(r, _LostCandidate))
            ]
            if fatal:
                first = fatal[0]
                error = first if isinstance(first, InfrastructureError) else None
                self._poison(
                    error or InfrastructureError(f"reward evaluation failed: {describe(first)}"), first
                )
                assert self._failure is not None
                raise self._failure
            masked = {i: r for i, r in zip(jobs, results, strict=True) if isinstance(r, _LostCandidate)}
            for i, result in zip(jobs, results, strict=True):
                if isinstance(result, CandidateRecord):
                    scores[i] = result.score
                else:
                    scores[i] = None  # TRL's unscorable: out of the baseline, zero advantage
        self._check_usable()  # a heartbeat failure meanwhile means these scores are not trusted
        if self.on_infrastructure == "mask":
            self._admit(len(completions), masked)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric("e2b/reward_seconds", time.monotonic() - started)
            log_metric("e2b/worker_seconds_estimate", self.metrics["worker_seconds_estimate"])
            if self.on_infrastructure == "mask":
                log_metric("e2b/masked", len(masked))  # in TRL's log history, per step
        return scores

    def _admit(self, size: int, masked: dict[int, _LostCandidate]) -> None:
        """Charge a batch to the budget and record its masked candidates; over budget poisons the pool."""
        try:
            self.budget.admit([i in masked for i in range(size)], f"reward pool run {self.run_id}")
        except InfrastructureError as exc:
            first: BaseException = next(iter(masked.values()), exc)
            self._poison(exc, first)
            assert self._failure is not None
            raise self._failure from first
        for i, lost in masked.items():
            record = CandidateRecord(i, None, "masked", "infrastructure failed twice", attempts=2)
            record.failure_kind, record.errors = lost.failure_kind, lost.errors
            self._commit(record)

    async def close(self) -> None:
        """Kill every worker, sweep the run's metadata; :class:`CleanupError` with unresolved ids.

        Bounded: every step is an SDK call with its own request timeout, and the whole close gets
        :meth:`close_seconds` on top, so a wedged call becomes a :class:`CleanupError` naming the
        step and the workers, never a hang at the end of a training run.
        """
        loop = self._loop
        if loop is not None and loop is not asyncio.get_running_loop():
            if not loop.is_running():
                raise InfrastructureError(
                    "close the reward pool before its event loop stops (TRL's reward loop)"
                )
            future = asyncio.run_coroutine_threadsafe(self.close(), loop)
            await asyncio.wrap_future(future)
            return
        budget = self.close_seconds()
        try:
            async with asyncio.timeout(budget):
                await self._close_now()
        except TimeoutError:
            ids = sorted(self._owned)
            raise CleanupError(
                f"reward pool run {self.run_id}: close did not finish in {budget:.0f} s "
                f"(stuck in: {self._closing}); run 'pytest-e2b-env reap --run-id {self.run_id}'",
                ids=ids,
            ) from None

    def close_seconds(self) -> float:
        """The bound on :meth:`close`: a request timeout for each SDK call it may wait on, plus slack.

        The calls: a creation in flight, the kills, then the sweep's listing and, per worker, up to
        three kill and confirm rounds (run eight at a time).
        """
        return 8 * self._client.request_timeout + 5

    async def _close_now(self) -> None:
        self._closed = True
        self._closing = "waiting for creations under way"
        # Creations still waiting for their pacing slot are dropped; one whose create request is
        # in flight is awaited, so its sandbox is owned (and killed) rather than orphaned.
        for task in list(self._pacing):
            task.cancel()
        await asyncio.gather(*self._creations, return_exceptions=True)
        self._closing = "stopping the heartbeat"
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
        if self._loop is None:
            return  # never created anything
        owned = list(self._owned.values())
        self._closing = f"killing {len(owned)} worker(s)"
        await asyncio.gather(*(self._discard(w, confirm=False) for w in owned))
        self._closing = "sweeping the run's workers by metadata"
        try:
            remaining = await self._client.sweep()
        except Exception as exc:
            ids = sorted(self._owned)
            raise CleanupError(
                f"reward pool run {self.run_id}: sweep failed ({describe(exc)})", ids=ids
            ) from exc
        unresolved = sorted(set(remaining) | set(self._owned))
        for sandbox_id in unresolved:
            self.cleanup.append(
                {
                    "sandbox_id": sandbox_id,
                    "role": "reward-worker",
                    "confirmed_absent_at": None,
                    "error": self.kill_failures.get(sandbox_id, "still listed after kill"),
                }
            )
        if unresolved:
            raise CleanupError(
                f"reward pool run {self.run_id}: {len(unresolved)} worker(s) not confirmed gone; "
                f"run 'pytest-e2b-env reap --run-id {self.run_id}'",
                ids=unresolved,
            )

    # ----------------------------------------------------------------- evaluation
    def _check_usable(self) -> None:
        if self._closed:
            raise InfrastructureError("reward pool is closed; create a new RewardPool")
        if self._failure is not None:
            raise InfrastructureError(f"reward pool is unusable after: {self._failure}") from self._failure

    def _poison(self, error: InfrastructureError, cause: BaseException) -> None:
        if self._failure is None:
            error.__cause__ = cause if cause is not error else cause.__cause__
            self._failure = error

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._slots = asyncio.Queue()
            self._pace_lock = asyncio.Lock()
        elif self._loop is not loop:
            raise InfrastructureError("a RewardPool serves one event loop; create one pool per loop")

    def _commit(self, record: CandidateRecord) -> None:
        for number, case in enumerate(record.cases):
            timing = case.timing or {}
            if case.reason == "timeout" and timing.get("blocked", 0) >= timing.get("own", 0):
                # Stalled in the kernel (I/O, reclaim, locks) at least as long as it ran: on a loaded
                # host that can be the host's doing. Training logs should show it; the 0 stands.
                log.warning("candidate %d case %d timed out stalled: %s", record.index, number, timing)
        self._counters.candidates += 1
        self._counters.count_reason(record.reason or "passed")
        self._ledger.append(record.as_dict())

    def _supply(self) -> None:
        """Start background creations while waiting borrowers outnumber creations under way."""
        while self._waiting > len(self._creations) and self._fresh_slots + self._replace_slots > 0:
            replacing = self._replace_slots > 0
            if replacing:
                self._replace_slots -= 1
            else:
                self._fresh_slots -= 1
            task = asyncio.create_task(self._create_into_queue(replacing))
            self._creations.add(task)
            task.add_done_callback(self._creations.discard)

    async def _create_into_queue(self, replacing: bool) -> None:
        assert self._slots is not None
        try:
            worker = await self._new_worker(replacing=replacing)
        except asyncio.CancelledError:
            return  # close() or loop shutdown: the sweep finds anything half-created
        except BaseException as exc:
            error = exc if isinstance(exc, InfrastructureError) else None
            self._poison(error or InfrastructureError(f"worker creation failed: {describe(exc)}"), exc)
            self._slots.put_nowait(_POISON)
            return
        self._slots.put_nowait(worker)

    async def _borrow(self) -> Worker:
        """An idle worker for exclusive use: the first one free, created on demand."""
        assert self._slots is not None
        self._waiting += 1
        try:
            while True:
                self._supply()
                item = await self._slots.get()
                if item == _POISON:
                    self._slots.put_nowait(_POISON)  # wake the next waiter too
                    assert self._failure is not None
                    raise self._failure
                assert isinstance(item, Worker)
                if not item.lost:
                    return item
                await self._discard(item)  # the heartbeat lost it: replace, keep waiting
                self._replace_slots += 1
        finally:
            self._waiting -= 1

    def _give_back(self, worker: Worker | None) -> None:
        """Return a healthy worker to the queue, or free its slot for a replacement."""
        assert self._slots is not None
        if worker is None:
            self._replace_slots += 1
            self._supply()
        else:
            self._slots.put_nowait(worker)

    def _parts(self, evaluable: list[tuple[int, str, Cases]]) -> list[list[tuple[int, str, Cases]]]:
        """The batch in contiguous parts, one per worker (sizes differ by one at most, each at most
        ``MAX_PART``): a part is one command, its cases side by side on one worker."""
        count = max(min(self.workers, len(evaluable)), -(-len(evaluable) // MAX_PART))
        size, extra = divmod(len(evaluable), count)
        parts, start = [], 0
        for n in range(count):
            end = start + size + (n < extra)
            parts.append(evaluable[start:end])
            start = end
        return parts

    def _payload(self, code: str, cases: Cases) -> Payload:
        return Payload(
            "run", code.encode(), [c[0] for c in cases], self.case_seconds, self.limits, self.isolation
        )

    async def _renew_if_due(self, worker: Worker) -> None:
        if time.monotonic() - worker.renewed_mono > self.renew_every:
            await self._client.renew(worker)
            self._counters.renewals += 1

    def _account(self, record: CandidateRecord) -> None:
        """Count a scored candidate's times and put it in the ledger."""
        self._counters.queue_seconds += record.queue_seconds
        self._counters.exec_seconds += record.exec_seconds
        self._counters.candidate_seconds.append(record.queue_seconds + record.exec_seconds)
        self._commit(record)

    def _command_timeout(self, cases: int) -> float:
        # a starved case may run to its wall backstop (its deadline x limits.wall_slack)
        return cases * (self.case_seconds * self.limits.wall_slack + 3) + 20

    async def _evaluate_part(
        self, part: list[tuple[int, str, Cases]]
    ) -> dict[int, CandidateRecord | BaseException]:
        """Evaluate several candidates in one command on one worker; per candidate its record or
        the error that kept it from one.

        A transient failure of the command is each candidate's first attempt: each then gets its
        second on its own, so a fault that follows one program costs only that one its score.
        """
        if len(part) == 1:
            ((index, code, cases),) = part
            try:
                return {index: await self._evaluate(index, code, cases)}
            except Exception as exc:
                return {index: exc}
        records = {i: CandidateRecord(i, 0.0, None) for i, _, _ in part}
        waited = time.monotonic()
        worker = await self._borrow()
        queued = time.monotonic() - waited
        keep: Worker | None = worker
        try:
            self._check_usable()
            await self._renew_if_due(worker)
            batch = Batch([self._payload(code, cases) for _, code, cases in part])
            ran = time.monotonic()
            timeout = self._command_timeout(sum(len(cases) for _, _, cases in part))
            answers = part_answers(await self._client.run(worker, batch, timeout), batch)
            elapsed = time.monotonic() - ran
            graded = [
                grade_answer(records[i], answer, cases)
                for (i, _, cases), answer in zip(part, answers, strict=True)
            ]
            worker.uses += 1
            self._counters.cases += sum(graded)
            for record in records.values():  # each waited as long as the part: its latency
                record.attempts, record.worker_id = 1, worker.sandbox_id
                record.queue_seconds, record.exec_seconds = queued, elapsed
                self._account(record)
            return dict(records)
        except asyncio.CancelledError:
            worker.lost = True  # its command may still run remotely: never reuse it
            raise
        except InfrastructureError:
            raise
        except Exception as exc:
            _raise_unless_transient(exc, f"candidates {part[0][0]}-{part[-1][0]}")
            keep = None
            await self._discard(worker)
            lost = exc
            self._counters.retries += len(part)
        finally:
            self._give_back(keep)
        retried = await asyncio.gather(
            *(self._evaluate(i, code, cases, errors=[describe(lost)]) for i, code, cases in part),
            return_exceptions=True,
        )
        return {i: got for (i, _, _), got in zip(part, retried, strict=True)}

    async def _evaluate(
        self, index: int, code: str, cases: Cases, errors: list[str] | None = None
    ) -> CandidateRecord:
        """One candidate in its own command: two attempts, or only the second after ``errors``
        (its part's command failed)."""
        record = CandidateRecord(index, 0.0, None)
        record.errors.extend(errors or [])
        command_timeout = self._command_timeout(len(cases))
        for attempt in (1, 2) if errors is None else (2,):
            record.attempts = attempt
            waited = time.monotonic()
            worker = await self._borrow()
            record.queue_seconds += time.monotonic() - waited
            keep: Worker | None = worker
            try:
                self._check_usable()
                record.worker_id = worker.sandbox_id
                await self._renew_if_due(worker)
                ran = time.monotonic()
                answer = await self._client.run(worker, self._payload(code, cases), command_timeout)
                record.exec_seconds += time.monotonic() - ran
                worker.uses += 1
                self._counters.cases += grade_answer(record, answer, cases)
                self._account(record)
                return record
            except asyncio.CancelledError:
                worker.lost = True  # its command may still run remotely: never reuse it
                raise
            except InfrastructureError:
                raise
            except Exception as exc:
                _raise_unless_transient(exc, f"candidate {index}")
                record.errors.append(describe(exc))
                keep = None
                await self._discard(worker)
                if attempt == 2:
                    raise _LostCandidate(
                        f"candidate {index}: worker failed twice ({'; '.join(record.errors)}); no score",
                        _failure_kind(exc),
                        record.errors,
                    ) from exc
                self._counters.retries += 1
            finally:
                self._give_back(keep)
        raise AssertionError("unreachable")  # pragma: no cover

    # ----------------------------------------------------------------- workers
    async def _pace(self) -> None:
        assert self._pace_lock is not None
        async with self._pace_lock:
            now = time.monotonic()
            start = max(now, self._next_create)
            self._next_create = start + self.create_interval
        if start > now:
            task = asyncio.current_task()
            assert task is not None
            self._pacing.add(task)
            try:
                await asyncio.sleep(start - now)
            finally:
                self._pacing.discard(task)
        if self._closed:
            raise InfrastructureError("reward pool closed while a worker was waiting to be created")

    async def _new_worker(self, replacing: bool) -> Worker:
        last: Exception | None = None
        for attempt in (1, 2):
            await self._pace()
            self._counters.create_attempts += 1
            try:
                worker = await self._client.create()
            except Exception as exc:
                if not is_transient(exc):
                    raise InfrastructureError(f"worker creation refused: {describe(exc)}") from exc
                last = exc
                if attempt == 1:
                    # The SDK already waited out Retry-After on its own retries; the next
                    # attempt is spaced by the creation pacing like any other create.
                    self._counters.retries += 1
                continue
            self._owned[worker.sandbox_id] = worker
            self._counters.created += 1
            if self._closed:  # close() is waiting for us: no preflight, it kills this one
                raise InfrastructureError("reward pool closed during worker creation")
            self._counters.replaced += replacing
            if self._heartbeat is None:
                self._heartbeat = asyncio.create_task(self._keep_alive())
            try:
                await self._preflight(worker)
                # Prove the renewal path now (one cheap call), not minutes into a training run.
                await self._renew_with_retry(worker)
            except InfrastructureError:
                raise  # preflight failed or renewal refused: configuration, never retried
            except Exception as exc:
                if not is_transient(exc):
                    raise InfrastructureError(
                        f"worker {worker.sandbox_id} setup failed: {describe(exc)}"
                    ) from exc
                last = exc
                await self._discard(worker)
                continue
            if worker.lost:  # renewal kept failing transiently: try a fresh worker
                last = InfrastructureError(f"worker {worker.sandbox_id}: lifetime renewal kept failing")
                await self._discard(worker)
                continue
            return worker
        assert last is not None
        raise InfrastructureError(
            f"could not create a working worker in 2 attempts: {describe(last)}"
        ) from last

    def _preflight_payload(self) -> Payload:
        """The preflight request: the probe run as a candidate, under this pool's limits and isolation."""
        return Payload("preflight", probe_source(), [], 5.0, self.limits, self.isolation)

    async def _preflight(self, worker: Worker) -> None:
        payload = self._preflight_payload()
        started = time.monotonic()
        try:
            answer = await self._client.install_and_preflight(worker, payload)
        except ProtocolError as exc:
            raise PreflightError(
                f"worker {worker.sandbox_id} cannot build the case isolation ({exc}); "
                "the pool never falls back to weaker isolation"
            ) from exc
        self._counters.preflight_seconds.append(time.monotonic() - started)
        worker.preflight = check_preflight(worker.sandbox_id, answer, self.limits)

    async def _discard(self, worker: Worker, *, confirm: bool = True) -> None:
        """Kill one worker, retrying a failed kill (:data:`KILL_RETRIES`).

        A worker dropped mid-call (``confirm``) must be confirmed gone before the call returns a
        score: one that may still run (its kill failed every time) raises :class:`CleanupError`
        naming it, and the pool is poisoned. At close (``confirm=False``) a failed kill keeps it
        owned: the sweep tries again, then ``close`` reports it.
        """
        for delay in (*KILL_RETRIES, None):
            try:
                await self._client.kill(worker.sandbox_id)
                break
            except Exception as exc:
                self.kill_failures[worker.sandbox_id] = describe(exc)
                if delay is not None:
                    await asyncio.sleep(delay)
                    continue
                worker.lost = True
                if confirm:
                    raise CleanupError(
                        f"reward pool run {self.run_id}: a worker dropped mid-evaluation could not be "
                        f"confirmed gone ({describe(exc)}); no score while it may still run",
                        ids=[worker.sandbox_id],
                    ) from exc
                return
        self.kill_failures.pop(worker.sandbox_id, None)
        if self._owned.pop(worker.sandbox_id, None) is not None:
            self._counters.killed += 1
            self._counters.closed_worker_seconds += time.monotonic() - worker.created_mono
            self.cleanup.append(
                {
                    "sandbox_id": worker.sandbox_id,
                    "role": "reward-worker",
                    "created_at": worker.created_wall,
                    "confirmed_absent_at": time.time(),
                    "error": None,
                }
            )

    async def _keep_alive(self) -> None:
        """Renew every worker's lifetime; transient failures are retried, refusals poison the pool."""
        while True:
            await asyncio.sleep(self.renew_every)
            for worker in list(self._owned.values()):
                if worker.lost or time.monotonic() - worker.renewed_mono < self.renew_every * 0.5:
                    continue
                try:
                    await self._renew_with_retry(worker)
                except InfrastructureError as exc:
                    self._poison(exc, exc)
                    return

    async def _renew_with_retry(self, worker: Worker, attempts: int = 3) -> None:
        """Renew with retries; a worker that stays unrenewable is marked lost (replaced on next use).

        Raises :class:`InfrastructureError` when the renewal is refused (auth, bad argument).
        """
        for attempt in range(1, attempts + 1):
            try:
                await self._client.renew(worker)
                self._counters.renewals += 1
                return
            except Exception as exc:
                self._counters.renewal_failures += 1
                if not is_transient(exc):
                    raise InfrastructureError(f"worker lifetime renewal refused: {describe(exc)}") from exc
                if attempt == attempts or "NotFound" in type(exc).__name__:
                    worker.lost = True
                    return
                await asyncio.sleep(min(0.5 * attempt, self.renew_every / 4))


def dumps_metrics(pool: RewardPool) -> str:
    """The pool's metrics as one JSON line (for logs and smoke receipts)."""
    return json.dumps(pool.metrics, sort_keys=True)
