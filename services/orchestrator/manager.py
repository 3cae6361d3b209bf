"""The orchestrator service's runs: one thread per active run, resumed after a restart.

Episodes of every run go through the Redis jobs stream to rollout workers; one collector
thread stores what comes back. Runs left unfinished by a previous orchestrator process
(killed, restarted, crashed) are picked up again by `start()`. A submission past the limits
on active runs or queued jobs is refused (`llmrl.orchestrator.limits`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmrl.common import store as states
from llmrl.common.logs import log_event
from llmrl.common.queues import Broker
from llmrl.common.store import RunRow, RunStore, new_run_id
from llmrl.orchestrator.executors import (
    DEFAULT_RESUBMIT_AFTER_S,
    QueueExecutor,
    ResultCollector,
)
from llmrl.orchestrator.limits import (
    ACTIVE_RUNS,
    ACTIVE_RUNS_PER_TENANT,
    DEFAULT_TENANT,
    QUEUED_EPISODES,
    AtCapacity,
    RunLimits,
)
from llmrl.orchestrator.runner import execute_run
from llmrl.recipes.config import validate_config
from llmrl.recipes.progress import NullProgress

log = logging.getLogger("llmrl.orchestrator")
LEDGER_TIMEOUT_S = 2.0


class RunNotFound(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class RunNotActive(ValueError):
    """Cancelling a run that has already ended."""


class RunManager:
    def __init__(
        self,
        store: RunStore,
        broker: Broker,
        home: Path,
        simulator: str | None,
        llm_gateway: str | None,
        resubmit_after_s: float = DEFAULT_RESUBMIT_AFTER_S,
        learner: str | None = None,
        limits: RunLimits | None = None,
    ) -> None:
        self.store, self.broker, self.home = store, broker, Path(home)
        self.resubmit_after_s = resubmit_after_s
        self.limits = limits or RunLimits()
        self._admission = threading.Lock()  # one submission checked and started at a time
        self._queue_admission = threading.Lock()  # one run puts jobs at a time (the limit)
        self._tenants: dict[str, str] = {}  # active run -> its tenant
        self.simulator, self.llm_gateway = simulator, llm_gateway
        self.learner = learner  # None: recipes train in the orchestrator's process
        self.collector = ResultCollector(store, broker)
        self._stopping = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self._progress: dict[str, NullProgress] = {}
        self._lock = threading.Lock()
        self._collector_thread: threading.Thread | None = None
        self._ledger: Any = None
        self.run_end_hooks: list[Callable[[str], None]] = []  # e.g. the experiment scheduler

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> list[str]:
        """Start collecting results and resume every unfinished run; returns their ids."""
        self._collector_thread = threading.Thread(
            target=self.collector.run_forever, args=(self._stopping,), name="collector", daemon=True
        )
        self._collector_thread.start()
        unfinished = self.store.unfinished_runs()
        for run in unfinished:
            log_event(log, "resuming run", run_id=run.run_id)
            self._launch(run.run_id, run.tenant or DEFAULT_TENANT)
        return [run.run_id for run in unfinished]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every run where it is (they stay unfinished and resume at the next start)."""
        self._stopping.set()
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout)
        if self._collector_thread is not None:
            self._collector_thread.join(timeout)
        if self._ledger is not None:
            self._ledger.close()

    # -- runs -------------------------------------------------------------------------------
    def submit(
        self,
        recipe: str,
        config: dict[str, Any] | None,
        run_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> RunRow:
        """Validate and start a run; ConfigError for a bad recipe or config, AtCapacity (and
        nothing stored) when a limit is reached."""
        validated = validate_config(recipe, config)
        with self._admission:
            self._check_capacity(tenant)
            run_id = run_id or new_run_id(recipe)
            out_dir = self.home / "runs" / run_id
            config_json = validated.model_dump(mode="json")
            self.store.create_run(recipe, config_json, out_dir, run_id=run_id, tenant=tenant)
            self._launch(run_id, tenant)
        return self.get(run_id)

    def _check_capacity(self, tenant: str) -> None:
        """AtCapacity when one more active run (of `tenant`) or the queue's backlog is past
        its limit. A Redis that cannot be asked does not refuse: the run waits for it."""
        with self._lock:
            active = len(self._threads)
            of_tenant = sum(1 for t in self._tenants.values() if t == tenant)
        if active >= self.limits.max_active_runs:
            raise AtCapacity(ACTIVE_RUNS, active, self.limits.max_active_runs)
        if of_tenant >= self.limits.max_active_runs_per_tenant:
            allowed = self.limits.max_active_runs_per_tenant
            raise AtCapacity(ACTIVE_RUNS_PER_TENANT, of_tenant, allowed, tenant=tenant)
        try:
            queued = self.broker.jobs.backlog()
        except Exception as exc:  # Redis restarting
            log_event(log, "queue backlog unknown", logging.WARNING, error=str(exc))
            return
        if queued >= self.limits.max_queued_episodes:
            raise AtCapacity(QUEUED_EPISODES, queued, self.limits.max_queued_episodes)

    def _launch(self, run_id: str, tenant: str = DEFAULT_TENANT) -> None:
        progress = NullProgress()
        executor = QueueExecutor(
            self.broker,
            self.collector,
            interrupted=self._stopping.is_set,
            resubmit_after_s=self.resubmit_after_s,
            max_queued=self.limits.max_queued_episodes,
            admission=self._queue_admission,
        )

        def work() -> None:
            try:
                execute_run(
                    self.store,
                    run_id,
                    executor,
                    simulator=self.simulator,
                    llm_gateway=self.llm_gateway,
                    learner=self.learner,
                    progress=progress,
                    interrupted=self._stopping.is_set,
                )
            finally:
                self.collector.forget(run_id)
                run = self.store.get_run(run_id, with_phases=False)
                if run is not None and run.status not in states.ACTIVE_STATES:
                    try:
                        self.broker.forget_run(run_id)
                    except Exception as exc:  # Redis away: the done-set only costs memory
                        log_event(log, "could not drop done-set", logging.WARNING, error=str(exc))
                with self._lock:
                    self._threads.pop(run_id, None)
                    self._tenants.pop(run_id, None)
                for hook in self.run_end_hooks:
                    hook(run_id)

        thread = threading.Thread(target=work, name=f"run-{run_id}", daemon=True)
        with self._lock:
            self._threads[run_id] = thread
            self._tenants[run_id] = tenant
            self._progress[run_id] = progress
        thread.start()

    def ledger_client(self) -> Any:
        """A gateway client for ledger reads (GET /runs/{id}), connected once, short deadline.
        It never waits for an unreachable gateway (runs' clients do): the run's page says
        "unavailable" at once instead."""
        with self._lock:
            if self._ledger is None:
                from llmrl.llm_gateway.client import connect

                self._ledger = connect(self.llm_gateway, timeout_s=LEDGER_TIMEOUT_S, retry_s=0)
            return self._ledger

    def get(self, run_id: str) -> RunRow:
        run = self.store.get_run(run_id)
        if run is None:
            raise RunNotFound(f"unknown run id {run_id!r}")
        return run

    def progress(self, run_id: str) -> dict[str, Any] | None:
        with self._lock:
            progress = self._progress.get(run_id)
        return progress.snapshot() if progress is not None else None

    def cancel(self, run_id: str) -> RunRow:
        run = self.get(run_id)
        if run.status not in states.ACTIVE_STATES:
            raise RunNotActive(f"run {run_id} has already ended ({run.status})")
        self.store.update_run(run_id, cancel_requested=True)
        try:
            self.broker.cancel_run(run_id)  # workers skip its queued jobs
        except Exception as exc:  # Redis away: workers will play them, nothing is stored twice
            log_event(log, "could not flag cancelled run", logging.WARNING, error=str(exc))
        with self._lock:
            running = run_id in self._threads
        if not running:
            self.store.update_run(run_id, status=states.CANCELLED)
        return self.get(run_id)

    def wait(self, run_id: str, timeout: float | None = None) -> RunRow:
        with self._lock:
            thread = self._threads.get(run_id)
        if thread is not None:
            thread.join(timeout)
        return self.get(run_id)
