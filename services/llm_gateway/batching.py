"""Dynamic batching: concurrent requests to one local model are coalesced into one forward pass.

Callers `submit` a job and wait on its future. One worker thread owns the model: it takes the
first waiting job, then keeps collecting for up to `max_wait_s` or until `max_batch_size` jobs,
splits what it got into groups that can share a pass (same kind and same group key, e.g. same
adapter and sampling settings) and runs each group as one batch. Jobs arriving meanwhile form
the next batch. Owning the model from one thread also makes adapter swaps safe.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

RunGroup = Callable[[str, Hashable, list[Any]], list[Any]]


@dataclass
class _Job:
    kind: str
    group: Hashable
    payload: Any
    future: Future = field(default_factory=Future)


class DynamicBatcher:
    def __init__(
        self, run_group: RunGroup, max_batch_size: int, max_wait_s: float, name: str = "batcher"
    ) -> None:
        """`run_group(kind, group_key, payloads)` returns one result per payload, in order."""
        self._run_group = run_group
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._closed = False
        self.batches_run = 0  # how many groups ran, and how many jobs in all (for tests/bench)
        self.jobs_run = 0
        self._recent_batch_s = 0.0  # moving average of a batch's run time
        # called after every batch with (kind, jobs, seconds), e.g. to feed a metric
        self.on_batch: Callable[[str, int, float], None] | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, kind: str, group: Hashable, payload: Any) -> Future:
        if self._closed:
            raise RuntimeError("the batcher is closed")
        job = _Job(kind, group, payload)
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _wait_s(self) -> float:
        """How long to hold a batch open for more jobs: at least `max_wait_s`, and up to 10%
        of a recent batch's run time (capped at 50 ms). When batches take seconds, clients
        that just got an answer send their next request a few ms later; waiting for them
        keeps batches full instead of splitting the clients into alternating halves."""
        return max(self.max_wait_s, min(0.1 * self._recent_batch_s, 0.05))

    def _collect(self, first: _Job) -> tuple[list[_Job], bool]:
        jobs, stop = [first], False
        deadline = time.monotonic() + self._wait_s()
        while len(jobs) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                job = (
                    self._queue.get(timeout=remaining)
                    if remaining > 0
                    else self._queue.get_nowait()
                )
            except queue.Empty:
                break
            if job is None:
                stop = True
                break
            jobs.append(job)
        return jobs, stop

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                break
            jobs, stop = self._collect(first)
            groups: dict[tuple[str, Hashable], list[_Job]] = {}
            for job in jobs:
                groups.setdefault((job.kind, job.group), []).append(job)
            for (kind, group), members in groups.items():
                live = [job for job in members if job.future.set_running_or_notify_cancel()]
                if not live:
                    continue
                started = time.monotonic()
                try:
                    results = self._run_group(kind, group, [job.payload for job in live])
                except Exception as exc:  # handed to every caller waiting on this batch
                    for job in live:
                        job.future.set_exception(exc)
                    continue
                elapsed = time.monotonic() - started
                self._recent_batch_s = 0.8 * self._recent_batch_s + 0.2 * elapsed
                if self.on_batch is not None:
                    self.on_batch(kind, len(live), elapsed)
                self.batches_run += 1
                self.jobs_run += len(live)
                for job, result in zip(live, results, strict=True):
                    job.future.set_result(result)
            if stop:
                break
        # fail whatever is still queued so no caller waits forever
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None and job.future.set_running_or_notify_cancel():
                job.future.set_exception(RuntimeError("the model was closed"))
