"""Where episode jobs are played: in this process (embedded) or by rollout workers (service).

Both modes use the same path: jobs go on a `Broker`'s jobs queue, an `EpisodeWorker` plays
them, results come back on the results queue and a `ResultCollector` stores them in the run
store (idempotently) and tells the waiting phase. In embedded mode the phase's own thread
pumps the in-memory queues; in service mode rollout workers in other processes consume a
Redis stream and the orchestrator's collector thread stores what they return.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from llmrl.agents import EpisodeJob, RolloutResources
from llmrl.common.episodes import EpisodeRecord
from llmrl.common.logs import log_event
from llmrl.common.queues import Broker, InMemoryBroker, retry_on_disconnect
from llmrl.common.store import RunStore
from llmrl.orchestrator import metrics
from llmrl.orchestrator.episode_worker import EpisodeWorker
from llmrl.recipes.progress import RunCancelled

log = logging.getLogger("llmrl.orchestrator")
# Seconds without a stored result after which a waiting phase checks the queue for lost jobs.
DEFAULT_RESUBMIT_AFTER_S = 60.0


class RunInterrupted(Exception):
    """The orchestrator is shutting down: the run stays unfinished and resumes at restart."""


class EpisodeFailed(RuntimeError):
    """A worker could not play an episode; the message carries the worker's error."""


class ResultCollector:
    """Stores results from the results queue and wakes the phases waiting for them."""

    def __init__(self, store: RunStore, broker: Broker, name: str = "orchestrator") -> None:
        self.store, self.broker, self.name = store, broker, name
        self._stored: dict[str, list[str]] = defaultdict(list)
        self._errors: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self._recipes: dict[str, str] = {}
        self._cond = threading.Condition()

    def drain(self, block_s: float = 0.0, count: int = 100) -> int:
        deliveries = self.broker.results.get(self.name, count=count, block_s=block_s)
        for delivery in deliveries:
            self._take(delivery.payload)
            self.broker.results.ack(delivery)  # only after the store has it
        return len(deliveries)

    def _take(self, payload: dict[str, Any]) -> None:
        run_id, episode_id = payload["run_id"], payload["episode_id"]
        if "error" in payload:
            with self._cond:
                self._errors[run_id].append((episode_id, payload["error"]))
                self._cond.notify_all()
            return
        record = EpisodeRecord.from_dict(payload["record"])
        if self.store.store_episode(record):
            metrics.EPISODES_STORED.labels(recipe=self._recipe(run_id)).inc()
            for call in record.llm_calls:
                metrics.EPISODE_LLM_CALLS.labels(cached=str(call.cached).lower()).inc()
                metrics.EPISODE_LLM_TOKENS.inc(call.prompt_tokens + call.completion_tokens)
                metrics.EPISODE_LLM_COST.inc(call.cost_usd)
        else:
            metrics.EPISODES_DUPLICATE.inc()
        with self._cond:
            self._stored[run_id].append(episode_id)
            self._cond.notify_all()

    def _recipe(self, run_id: str) -> str:
        if run_id not in self._recipes:
            run = self.store.get_run(run_id, with_phases=False)
            self._recipes[run_id] = run.recipe if run else "unknown"
        return self._recipes[run_id]

    def take(self, run_id: str, timeout: float) -> tuple[list[str], list[tuple[str, str]]]:
        """Episode ids stored for `run_id` since the last call, and errors; waits if none."""
        with self._cond:
            if not self._stored.get(run_id) and not self._errors.get(run_id) and timeout > 0:
                self._cond.wait(timeout)
            return self._stored.pop(run_id, []), self._errors.pop(run_id, [])

    def forget(self, run_id: str) -> None:
        with self._cond:
            self._stored.pop(run_id, None)
            self._errors.pop(run_id, None)

    def run_forever(self, stop: threading.Event) -> None:
        """The service's collector thread: drain until `stop`, riding out Redis outages."""
        while not stop.is_set():
            try:
                self.drain(block_s=1.0)
                metrics.QUEUE_BACKLOG.set(self.broker.jobs.backlog())
            except Exception as exc:  # Redis restarting; keep trying
                log_event(log, "results queue unavailable", logging.WARNING, error=str(exc))
                stop.wait(0.5)


class QueueExecutor:
    """Submits jobs to the broker and waits until the collector has stored all of them.

    `pump`, when given, is called in the waiting loop to make progress in this thread
    (embedded mode); otherwise other processes do the work (service mode).
    """

    def __init__(
        self,
        broker: Broker,
        collector: ResultCollector,
        pump: Callable[[], None] | None = None,
        interrupted: Callable[[], bool] = lambda: False,
        resubmit_after_s: float = DEFAULT_RESUBMIT_AFTER_S,
        max_queued: int | None = None,
        admission: threading.Lock | None = None,
    ) -> None:
        self.broker, self.collector, self.pump = broker, collector, pump
        self.interrupted = interrupted
        self.resubmit_after_s = resubmit_after_s
        # at most this many jobs on the queue, every run's together: a run puts its jobs as
        # room frees up (one `admission` lock, shared by the runs, so they never overshoot)
        self.max_queued = max_queued
        self.admission = admission or threading.Lock()
        # per run: episode id -> message id of the jobs put, and the queue's generation then
        self._sent: dict[str, dict[str, str]] = {}
        self._generation: dict[str, str] = {}

    def run_jobs(
        self,
        jobs: Sequence[EpisodeJob],
        on_record: Callable[[EpisodeRecord], None],
        should_stop: Callable[[], bool],
        parallel: int = 1,
    ) -> None:
        """Play `jobs`; `parallel` is a hint for in-process execution (workers decide here)."""
        if not jobs:
            return
        self._wait_for(jobs, on_record, should_stop)

    def _wait_for(
        self,
        jobs: Sequence[EpisodeJob],
        on_record: Callable[[EpisodeRecord], None],
        should_stop: Callable[[], bool],
    ) -> None:
        run_id = jobs[0].run_id
        self._sent[run_id], self._generation[run_id] = {}, ""
        try:
            self._wait_for_jobs(run_id, jobs, on_record, should_stop)
        finally:
            self._sent.pop(run_id, None)
            self._generation.pop(run_id, None)

    def _wait_for_jobs(
        self,
        run_id: str,
        jobs: Sequence[EpisodeJob],
        on_record: Callable[[EpisodeRecord], None],
        should_stop: Callable[[], bool],
    ) -> None:
        unsent = self._send(run_id, list(jobs))
        remaining = {job.episode_id for job in jobs}
        by_id = {job.episode_id: job for job in jobs}
        store = self.collector.store
        last_progress = time.monotonic()
        while remaining:
            if self.interrupted():
                raise RunInterrupted(run_id)
            if should_stop():
                raise RunCancelled(run_id)
            if unsent:
                unsent = self._send(run_id, unsent)
            if self.pump is not None:
                self.pump()
            stored, errors = self.collector.take(run_id, 0.0 if self.pump else 0.5)
            for episode_id, error in errors:
                if episode_id in remaining:
                    raise EpisodeFailed(f"episode {episode_id} failed on a worker: {error}")
            new = remaining.intersection(stored)
            if new:
                remaining -= new
                last_progress = time.monotonic()
                for record in store.episodes(run_id, episode_ids=new):
                    on_record(record)
            elif time.monotonic() - last_progress > self.resubmit_after_s:
                sent = self._sent[run_id]
                self._resubmit_lost(run_id, [by_id[i] for i in remaining if i in sent])
                last_progress = time.monotonic()

    def _send(self, run_id: str, unsent: list[EpisodeJob]) -> list[EpisodeJob]:
        """Put as many of `unsent` on the queue as `max_queued` leaves room for (all of them
        without a limit); returns the rest."""
        if not unsent:
            return unsent

        def put() -> list[EpisodeJob]:
            with self.admission:
                room = len(unsent)
                if self.max_queued is not None:
                    room = min(room, max(0, self.max_queued - self.broker.jobs.backlog()))
                if room:
                    self._put(run_id, unsent[:room])
                return unsent[room:]

        return retry_on_disconnect(put, give_up=self.interrupted)

    def _put(self, run_id: str, jobs: Sequence[EpisodeJob]) -> None:
        """Put `jobs` and remember their message ids, and the queue's generation read before
        (a Redis that restarts after the read changes it, so a loss is never missed)."""
        generation = self.broker.jobs.generation()
        ids = self.broker.jobs.put_many([{"job": job.to_dict()} for job in jobs])
        sent = self._sent.setdefault(run_id, {})
        sent.update(zip((job.episode_id for job in jobs), ids, strict=True))
        self._generation[run_id] = generation

    def _resubmit_lost(self, run_id: str, waiting: list[EpisodeJob]) -> None:
        """No progress for a while: put back the jobs the queue no longer holds.

        A Redis that crashed (rather than shut down) may lose its last writes: jobs, or the
        results of jobs already acknowledged. Only a queue whose generation changed since the
        jobs were put can have lost them, so the check costs a constant number of calls while
        nothing happened to Redis; after a change, it asks the queue about this run's own
        waiting jobs (by message id), never walks the backlog of every run. Whatever is
        missing is submitted again; a job that was not lost after all (its result not stored
        yet) only runs twice and is stored once.
        """
        try:
            generation = self.broker.jobs.generation()
            if generation == self._generation.get(run_id):
                return  # the queue lost nothing since the jobs were put
            sent = self._sent.get(run_id, {})
            gone = self.broker.jobs.missing(sent[job.episode_id] for job in waiting)
            lost = [job for job in waiting if sent[job.episode_id] in gone]
            with self.admission:  # lost jobs go back at once: they were counted before
                if lost:
                    self._put(run_id, lost)
                self._generation[run_id] = generation
            if lost:
                log_event(
                    log, "resubmitted lost jobs", logging.WARNING, run_id=run_id, jobs=len(lost)
                )
        except Exception as exc:  # Redis still away: try again after the next quiet spell
            log_event(log, "could not check for lost jobs", logging.WARNING, error=str(exc))


class EmbeddedExecutor(QueueExecutor):
    """The in-process executor: in-memory queues, pumped by the phase's own thread, or with
    `parallel` > 1 by that many worker threads, each with its own worlds (LLM calls made
    from several threads at once are batched by the in-process gateway)."""

    def __init__(self, store: RunStore, resources: RolloutResources) -> None:
        broker = InMemoryBroker()
        super().__init__(broker, ResultCollector(store, broker), pump=self._pump)
        self.resources = resources
        self.worker = EpisodeWorker(broker, resources, name="embedded")

    def _pump(self) -> None:
        self.worker.process(block_s=0.0)
        self.collector.drain(block_s=0.0)

    def run_jobs(
        self,
        jobs: Sequence[EpisodeJob],
        on_record: Callable[[EpisodeRecord], None],
        should_stop: Callable[[], bool],
        parallel: int = 1,
    ) -> None:
        if not jobs:
            return
        if parallel <= 1:
            self._wait_for(jobs, on_record, should_stop)
            return
        stop = threading.Event()
        extra = [
            RolloutResources(self.resources.simulator, self.resources.llm_gateway)
            for _ in range(parallel - 1)
        ]
        workers = [self.worker] + [
            EpisodeWorker(self.broker, resources, name=f"embedded-{i + 1}")
            for i, resources in enumerate(extra)
        ]
        threads = [
            threading.Thread(target=_work_until, args=(worker, stop), daemon=True)
            for worker in workers
        ]
        for thread in threads:
            thread.start()
        self.pump = lambda: self.collector.drain(block_s=0.05)
        try:
            self._wait_for(jobs, on_record, should_stop)
        finally:
            self.pump = self._pump
            stop.set()
            for thread in threads:
                thread.join()
            for resources in extra:
                resources.close()


def _work_until(worker: EpisodeWorker, stop: threading.Event) -> None:
    while not stop.is_set():
        worker.process(block_s=0.05)


def embedded_executor(store: RunStore, resources: RolloutResources) -> EmbeddedExecutor:
    return EmbeddedExecutor(store, resources)
