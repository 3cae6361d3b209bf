"""Per-run and per-tag accounting, and budgets that concurrent requests cannot overshoot.

A request that may cost money or a call first *reserves* its worst case (USD for the prompt
plus every token it may generate, and one call) under a lock; the reservation is refused when
spent + reserved + this request would pass the budget. After the call the reservation is
*settled* with the real cost (never more than reserved when token counts are exact) or
released on failure. So with 50 concurrent requests against a budget, the sum of what is spent
never passes it. Cache hits cost nothing, use no call and are served even when the budget is
spent.

Beside the totals the ledger keeps each run's calls, request and answer (`call_log`), written
behind with them, so that a run can be bundled and replayed elsewhere (`llmrl runs export`).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

from llmrl.common.bounds import MAX_INT64, MAX_USD
from llmrl.llm_gateway.call_log import CallRecord, records_calls
from llmrl.llm_gateway.errors import BudgetExceededError, InvalidRequestError
from llmrl.llm_gateway.ledger_store import LedgerStore

log = logging.getLogger("llmrl.llm_gateway.ledger")


@dataclass
class Totals:
    requests: int = 0  # every answered request, hits included
    cache_hits: int = 0
    model_calls: int = 0  # requests that reached a model (what the calls budget counts)
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


@dataclass
class Budget:
    usd: float | None = None
    calls: int | None = None


@dataclass
class _Run:
    totals: Totals = field(default_factory=Totals)
    tags: dict[str, Totals] = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    reserved_usd: float = 0.0
    reserved_calls: int = 0


@dataclass
class Reservation:
    run_id: str
    usd: float
    calls: int
    open: bool = True


# (run, key) pairs of deterministic calls this process already kept: a repeated call is not
# written again (the store ignores it anyway); bounded, oldest forgotten first
SEEN_CALLS = 100_000
# calls waiting for the next flush while the store cannot be written; beyond, the oldest go
MAX_PENDING_CALLS = 50_000


class Ledger:
    def __init__(
        self,
        store: LedgerStore | None = None,
        flush_interval_s: float = 0.5,
        record_calls: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._store = store
        self._dirty: set[str] = set()
        self.record_calls = record_calls
        self._pending_calls: list[tuple[str, dict[str, Any]]] = []
        self._pending_notes: dict[str, dict[str, Any]] = {}
        self._seen_calls: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._noted_runs: set[str] = set()
        self._dropped_calls = 0
        # without a store (ledger.backend: memory) the calls stay here, with the totals
        self._memory_calls: dict[str, list[dict[str, Any]]] = {}
        self._memory_notes: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if store is not None:
            for run_id, state in store.load().items():
                self._runs[run_id] = _Run(
                    totals=Totals(**state["totals"]),
                    tags={tag: Totals(**totals) for tag, totals in state["tags"].items()},
                    budget=Budget(**state["budget"]),
                )
            self._flusher = threading.Thread(
                target=self._flush_loop, args=(flush_interval_s,), name="ledger", daemon=True
            )
            self._flusher.start()
            atexit.register(self._flush_at_exit)  # the last moments of an embedded run too

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        self._dirty.add(run_id)  # every caller of _run is about to change it
        return run

    # -- persistence ------------------------------------------------------------------------
    def _flush_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.flush()
            except Exception as exc:
                log.warning("cannot save the ledger (will retry): %s", type(exc).__name__)

    def flush(self) -> None:
        """Save the runs that changed since the last flush, and the calls kept since."""
        if self._store is None:
            return
        with self._lock:
            states = {
                run_id: {
                    "totals": asdict(self._runs[run_id].totals),
                    "tags": {t: asdict(v) for t, v in self._runs[run_id].tags.items()},
                    "budget": asdict(self._runs[run_id].budget),
                }
                for run_id in self._dirty
            }
            self._dirty.clear()
            calls, self._pending_calls = self._pending_calls, []
            notes, self._pending_notes = self._pending_notes, {}
        try:
            self._store.save(states)
        except Exception:  # storage trouble must not stop accounting; retry next flush
            with self._lock:
                self._dirty.update(states)
                self._requeue(calls, notes)
            raise
        if calls or notes:
            try:
                self._store.save_calls(calls, notes)
            except Exception:
                with self._lock:
                    self._requeue(calls, notes)
                raise

    def _requeue(
        self, calls: list[tuple[str, dict[str, Any]]], notes: dict[str, dict[str, Any]]
    ) -> None:
        self._pending_calls[:0] = calls
        for run_id, note in notes.items():
            self._pending_notes.setdefault(run_id, note)
        excess = len(self._pending_calls) - MAX_PENDING_CALLS
        if excess > 0:  # the store has been down a long time: memory must stay bounded
            del self._pending_calls[:excess]
            if not self._dropped_calls:
                log.warning("the ledger's store is unavailable: dropping the oldest kept calls")
            self._dropped_calls += excess

    def _flush_at_exit(self) -> None:
        try:
            self.flush()
        except Exception as exc:
            log.warning("cannot save the ledger at exit: %s", type(exc).__name__)

    def close(self) -> None:
        atexit.unregister(self._flush_at_exit)
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=10)
        if self._store is not None:
            self.flush()
            self._store.close()
            self._store = None

    # -- budgets --------------------------------------------------------------------------
    def set_budget(self, run_id: str, usd: float | None = None, calls: int | None = None) -> None:
        """Cap a run's spending (None: no cap on that measure)."""
        # bounded, so that no budget is infinite (no cap) or overflows a float or a column
        if usd is not None and (
            isinstance(usd, bool) or not isinstance(usd, int | float) or not 0 <= usd <= MAX_USD
        ):
            raise InvalidRequestError(
                f"usd must be a number in [0, {MAX_USD:g}] or null (no cap)", "usd"
            )
        if calls is not None and (
            isinstance(calls, bool) or not isinstance(calls, int) or not 0 <= calls <= MAX_INT64
        ):
            raise InvalidRequestError(
                f"calls must be an integer in [0, {MAX_INT64}] or null (no cap)", "calls"
            )
        with self._lock:
            self._run(run_id).budget = Budget(None if usd is None else float(usd), calls)

    def remaining(self, run_id: str) -> tuple[float | None, int | None]:
        with self._lock:
            return self._remaining(self._runs.get(run_id) or _Run())

    @staticmethod
    def _remaining(run: _Run) -> tuple[float | None, int | None]:
        budget, totals = run.budget, run.totals
        usd = None if budget.usd is None else budget.usd - totals.cost_usd - run.reserved_usd
        calls = (
            None if budget.calls is None else budget.calls - totals.model_calls - run.reserved_calls
        )
        return usd, calls

    def reserve(self, run_id: str, usd: float, calls: int = 1) -> Reservation:
        """Hold `usd` and `calls` against the run's budget, or raise BudgetExceededError."""
        with self._lock:
            run = self._run(run_id)
            usd_left, calls_left = self._remaining(run)
            if calls_left is not None and calls > calls_left:
                raise BudgetExceededError(
                    f"budget exceeded for run {run_id!r}: its calls budget of "
                    f"{run.budget.calls} model calls is spent "
                    f"({run.totals.model_calls} made, {run.reserved_calls} in flight)",
                    "calls",
                )
            if usd_left is not None and (usd > usd_left or usd_left <= 0):
                raise BudgetExceededError(
                    f"budget exceeded for run {run_id!r}: this request may cost up to "
                    f"${usd:.6f} but only ${max(usd_left, 0.0):.6f} of its "
                    f"${run.budget.usd:.6f} budget is left "
                    f"(${run.totals.cost_usd:.6f} spent, ${run.reserved_usd:.6f} reserved)",
                    "usd",
                )
            run.reserved_usd += usd
            run.reserved_calls += calls
            return Reservation(run_id, usd, calls)

    def release(self, reservation: Reservation) -> None:
        """Give a reservation back unspent (the call failed)."""
        with self._lock:
            self._close(reservation)

    def _close(self, reservation: Reservation) -> None:
        if reservation.open:
            run = self._run(reservation.run_id)
            run.reserved_usd = max(0.0, run.reserved_usd - reservation.usd)
            run.reserved_calls -= reservation.calls
            reservation.open = False

    # -- accounting -----------------------------------------------------------------------
    def record(
        self,
        run_id: str,
        tag: str,
        *,
        cached: bool,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost_usd: float = 0.0,
        latency_s: float = 0.0,
        reservation: Reservation | None = None,
    ) -> None:
        """Count one answered request (settling its reservation, if any)."""
        with self._lock:
            if reservation is not None:
                self._close(reservation)
            run = self._run(run_id)
            for totals in (run.totals, run.tags.setdefault(tag, Totals())):
                totals.requests += 1
                totals.cache_hits += int(cached)
                totals.model_calls += int(not cached)
                totals.prompt_tokens += prompt_tokens
                totals.completion_tokens += completion_tokens
                totals.cost_usd += cost_usd
                totals.latency_s += latency_s

    def records_calls(self, run_id: str) -> bool:
        """Whether this ledger keeps the calls of `run_id` (a run's, not "default" nor an
        issued key's spending)."""
        return self.record_calls and records_calls(run_id)

    def record_call(
        self, run_id: str, call: CallRecord, settings: dict[str, Any] | None = None
    ) -> None:
        """Keep one call of a run (a deterministic one once per run and key) and, the first
        time, the gateway settings it ran with; written with the next flush."""
        if not self.records_calls(run_id):
            return
        with self._lock:
            if not call.sampled:
                seen = (run_id, call.key)
                if seen in self._seen_calls:
                    self._seen_calls.move_to_end(seen)
                    return
                self._seen_calls[seen] = None
                if len(self._seen_calls) > SEEN_CALLS:
                    self._seen_calls.popitem(last=False)
            note = None
            if settings is not None and run_id not in self._noted_runs:
                self._noted_runs.add(run_id)
                note = settings
            if self._store is None:
                self._memory_calls.setdefault(run_id, []).append(call.to_dict())
                if note is not None:
                    self._memory_notes.setdefault(run_id, note)
                return
            self._pending_calls.append((run_id, call.to_dict()))
            if note is not None:
                self._pending_notes.setdefault(run_id, note)
            if len(self._pending_calls) > MAX_PENDING_CALLS:
                self._requeue([], {})

    def calls(self, run_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The kept calls of a run (deterministic ones first, then sampled ones in order)
        and the gateway settings it ran with (None: not kept)."""
        if self._store is None:
            with self._lock:
                calls = list(self._memory_calls.get(run_id, []))
                note = self._memory_notes.get(run_id)
            return [c for c in calls if not c["sampled"]] + [c for c in calls if c["sampled"]], note
        self.flush()
        return self._store.run_calls(run_id)

    def record_error(self, run_id: str, tag: str) -> None:
        with self._lock:
            run = self._run(run_id)
            run.totals.errors += 1
            run.tags.setdefault(tag, Totals()).errors += 1

    def usage(self, run_id: str) -> dict[str, Any]:
        """Totals of a run, its budget and what is left of it, and totals per tag."""
        with self._lock:
            run = self._runs.get(run_id) or _Run()  # asking about a run does not create it
            usd_left, calls_left = self._remaining(run)
            return {
                "run_id": run_id,
                **asdict(run.totals),
                "budget": {
                    "usd": run.budget.usd,
                    "calls": run.budget.calls,
                    "usd_remaining": usd_left,
                    "calls_remaining": calls_left,
                },
                "tags": {tag: asdict(totals) for tag, totals in sorted(run.tags.items())},
            }

    def budgets(self) -> dict[str, tuple[float | None, int | None]]:
        """Remaining budget of every run that has one (for /metrics)."""
        with self._lock:
            return {
                run_id: self._remaining(run)
                for run_id, run in self._runs.items()
                if run.budget.usd is not None or run.budget.calls is not None
            }
