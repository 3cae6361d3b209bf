"""One learner job in its own child process, so that a cancel always frees the job's slot.

A job stops cooperatively at its next progress report once cancelled (`report` raises
`JobCancelled` in the child). A job that does not report in time (loading a model, a long first
update, a hung call) is killed: `cancel_grace_s` after the cancel the parent terminates the
child (SIGTERM, then SIGKILL). Issue 52: a cancelled `glam` job at progress 0 held the
learner's only slot for over 9 minutes.

What crosses the boundary: the run function and request go in by pickle (module-level
functions and importable pydantic models), and out come messages on a pipe:
("progress", n), then one of ("succeeded", result), ("failed", "Type: message") or
("cancelled", None). A child that dies without saying how it ended (killed by the OS, a crash in
native code) is a failure naming its exit code. What the job saved before it stopped (adapter
versions, checkpoints) stays on disk.

The child is started with `spawn`: the learner's threads (uvicorn, the job runner) make `fork`
unsafe, and a fresh interpreter keeps nothing of an earlier job (memory, torch threads).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("llmrl.learner.jobs")

Report = Callable[[int], None]
RunFn = Callable[[Any, Report], dict[str, Any]]
POLL_S = 0.1
EXIT_WAIT_S = 5.0  # for a child to exit once it said how it ended
TERM_WAIT_S = 2.0  # for a child to exit after SIGTERM, before SIGKILL


class JobCancelled(Exception):
    """Raised inside a job's work, at its next progress report, once the job is cancelled."""


@dataclass
class Outcome:
    status: str  # "succeeded", "failed", "cancelled", or "interrupted" (the service stopped)
    result: dict[str, Any] | None = None
    error: str | None = None


def _child_main(run_fn: RunFn, request: Any, conn: Any, cancel: Any, json_logs: bool) -> None:
    """The child's whole life: run the job, say how it ended, exit."""
    # its own process group, so that a kill reaches what it started too (shard workers);
    # and on Linux it dies with the thread that started it (the service, even SIGKILLed)
    with contextlib.suppress(OSError):
        os.setpgrp()
    if sys.platform == "linux":
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if json_logs:  # the service's log format, as when the job ran in its process
        from llmrl.common.logs import configure_logging

        configure_logging("learner")

    def report(n: int) -> None:
        conn.send(("progress", int(n)))
        if cancel.is_set():
            raise JobCancelled("cancelled by request")

    try:
        result = run_fn(request, report)
    except JobCancelled:
        conn.send(("cancelled", None))
    except BaseException as exc:  # a job's failure is its outcome, reported to the parent
        log.warning("job failed: %s", exc)
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    else:
        try:
            conn.send(("succeeded", result))
        except Exception as exc:  # e.g. a result that does not pickle
            conn.send(("failed", f"the job's result cannot be returned: {exc!r}"))
    conn.close()


def _json_logs() -> bool:
    from llmrl.common.logs import JsonFormatter

    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def run_in_child(
    run_fn: RunFn,
    request: Any,
    on_progress: Report,
    cancelled: Callable[[], bool],
    grace_s: float,
    stopping: Callable[[], bool] = lambda: False,
) -> Outcome:
    """Run `run_fn(request, report)` in a spawned child and wait for it. `on_progress(n)` gets
    each report; once `cancelled()` the child is asked to stop, and killed after `grace_s`
    seconds if it has not; once `stopping()` (the service shuts down) it is killed at once
    (outcome "interrupted": the job did not end, the next service runs it again)."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    cancel = context.Event()
    process = context.Process(
        target=_child_main,
        args=(run_fn, request, sender, cancel, _json_logs()),
        name="llmrl-learner-job",
        daemon=True,  # never outlives the service
    )
    process.start()
    sender.close()  # the child holds the only writer: EOF once it is gone
    cancelled_at: float | None = None
    outcome: Outcome | None = None
    try:
        while outcome is None:
            if stopping():
                _kill(process)
                return Outcome("interrupted", error="interrupted: the service stopped")
            if cancelled_at is None and cancelled():
                cancel.set()
                cancelled_at = time.monotonic()
            if cancelled_at is not None and time.monotonic() - cancelled_at > grace_s:
                _kill(process)
                return Outcome(
                    "cancelled",
                    error=f"cancelled by request; it did not stop within {grace_s:g} s "
                    "(no progress report), so its process was killed",
                )
            try:
                if not receiver.poll(POLL_S):
                    continue
                kind, value = receiver.recv()
            except (EOFError, OSError):  # the child is gone without saying how it ended
                process.join(EXIT_WAIT_S)
                return Outcome(
                    "failed",
                    error=f"the job's process exited (code {process.exitcode}) before it ended",
                )
            if kind == "progress":
                on_progress(value)
            elif kind == "succeeded":
                outcome = Outcome("succeeded", result=value)
            elif kind == "cancelled":
                outcome = Outcome("cancelled", error="cancelled by request")
            else:
                outcome = Outcome("failed", error=value)
    finally:
        receiver.close()
    process.join(EXIT_WAIT_S)  # it said how it ended; one that lingers (a stuck thread) is killed
    if process.is_alive():
        _kill(process)
    return outcome


def _kill(process: Any) -> None:
    """SIGTERM to the child's process group, then SIGKILL for what ignores it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)  # the child and whatever it started
        except OSError:  # not its own group yet (still starting), or gone
            with contextlib.suppress(OSError):
                os.kill(process.pid, sig)
        process.join(TERM_WAIT_S)
        if not process.is_alive():
            return
