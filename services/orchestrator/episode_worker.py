"""The consumer side of the jobs queue, shared by rollout workers and the embedded runner.

`EpisodeWorker.process` takes a job, plays it with `llmrl.agents.run_episode`, puts the record (or
the error) on the results queue, marks the episode done and only then acknowledges the job.
A worker that dies anywhere before the acknowledgement leaves the job pending; another worker
reclaims it after the queue's idle timeout and plays it again: storing is idempotent, so the
episode is stored once. While an episode runs, a heartbeat keeps the job from being reclaimed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from llmrl.agents import EpisodeJob, RolloutResources, run_episode
from llmrl.common.episodes import EpisodeRecord
from llmrl.common.logs import log_event
from llmrl.common.queues import Broker, Delivery, retry_on_disconnect
from llmrl.orchestrator import metrics

log = logging.getLogger("llmrl.worker")
PLAY_ATTEMPTS = 2  # a failing episode is tried on a fresh world once more


class EpisodeWorker:
    def __init__(self, broker: Broker, resources: RolloutResources, name: str) -> None:
        self.broker = broker
        self.resources = resources
        self.name = name
        self.episodes_played = 0
        self._current: Delivery | None = None
        self._beat_lock = threading.Lock()
        self._beat_thread: threading.Thread | None = None

    def process(self, block_s: float = 1.0) -> int:
        """Handle at most one job (waiting up to `block_s` for one); returns how many."""
        deliveries = self.broker.jobs.get(self.name, count=1, block_s=block_s)
        for delivery in deliveries:
            self.handle(delivery)
        return len(deliveries)

    def handle(self, delivery: Delivery) -> None:
        job = EpisodeJob.from_dict(delivery.payload["job"])
        if self.broker.is_cancelled(job.run_id) or self.broker.is_done(job.run_id, job.episode_id):
            metrics.WORKER_JOBS.labels(outcome="skipped").inc()
            self.broker.jobs.ack(delivery)
            return
        started = time.perf_counter()
        try:
            with self._heartbeat(delivery):
                record = self._play(job)
        except Exception as exc:  # reported to the run, the worker keeps serving
            log_event(log, "episode failed", logging.ERROR, episode=job.episode_id, error=str(exc))
            metrics.WORKER_JOBS.labels(outcome="failed").inc()
            error = {"run_id": job.run_id, "episode_id": job.episode_id}
            error["error"] = f"{type(exc).__name__}: {exc}"
            retry_on_disconnect(lambda: self.broker.results.put(error))
            retry_on_disconnect(lambda: self.broker.jobs.ack(delivery))
            return
        metrics.EPISODE_SECONDS.observe(time.perf_counter() - started)
        metrics.WORKER_JOBS.labels(outcome="played").inc()
        # Result first, then "done", then the ack: a crash in between only causes a re-delivery.
        result = {"run_id": job.run_id, "episode_id": job.episode_id, "record": record.to_dict()}
        retry_on_disconnect(lambda: self.broker.results.put(result))
        retry_on_disconnect(lambda: self.broker.mark_done(job.run_id, job.episode_id))
        retry_on_disconnect(lambda: self.broker.jobs.ack(delivery))
        self.episodes_played += 1

    def _play(self, job: EpisodeJob) -> EpisodeRecord:
        """Play the job; after an error, once more on a fresh world (the simulator may have
        restarted and forgotten the cached one) before giving up."""
        for attempt in range(PLAY_ATTEMPTS):
            try:
                return run_episode(job, self.resources)
            except Exception as exc:
                self.resources.drop_world(job.env, job.env_kwargs)
                if attempt + 1 == PLAY_ATTEMPTS:
                    raise
                log_event(log, "episode error; retrying", logging.WARNING, error=str(exc))
        raise AssertionError("unreachable")

    @contextmanager
    def _heartbeat(self, delivery: Delivery) -> Iterator[None]:
        """Keep `delivery` touched (every third of the idle timeout) while the episode runs."""
        with self._beat_lock:
            self._current = delivery
            if self._beat_thread is None:  # one long-lived thread: starting one per job is slow
                self._beat_thread = threading.Thread(
                    target=self._beat, name="job-heartbeat", daemon=True
                )
                self._beat_thread.start()
        try:
            yield
        finally:
            with self._beat_lock:
                self._current = None

    def _beat(self) -> None:
        interval = max(self.broker.jobs.claim_idle_s / 3, 0.05)
        while True:
            time.sleep(interval)
            with self._beat_lock:
                delivery = self._current
            if delivery is None:
                continue
            try:
                self.broker.jobs.touch(self.name, delivery)
            except Exception as exc:  # a missed beat only risks a re-run elsewhere
                log_event(log, "heartbeat failed", logging.WARNING, error=str(exc))
