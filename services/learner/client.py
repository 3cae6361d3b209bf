"""The client side of the learner service's jobs: submit, follow progress, return the result.

Recipe phases call this in service mode (`POST /jobs` for fine-tuning, `POST /policy-jobs` for
RL policies); in embedded mode they call the same training functions in-process.

A learner that restarts meanwhile is waited for: while it refuses connections, drops them or
answers 5xx, the client tries again with a growing pause (0.5 s up to 5 s) for up to
`LLMRL_LEARNER_RETRY_S` seconds of outage (default 300), then fails naming the learner, the
job and the last error. The restarted learner runs the job again (`llmrl.learner.jobs`), so the
waiting phase gets its result as if nothing had happened.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from llmrl.common.config import env_seconds

POLL_S = 0.5
RETRY_VAR = "LLMRL_LEARNER_RETRY_S"
DEFAULT_RETRY_S = 300.0  # long enough for a learner to restart and load its job kinds
BACKOFF_S = (0.5, 5.0)  # the first pause between tries, and the longest
# a POST answered with these never started a job: sending it again starts it once
RETRY_POST_STATUS = frozenset({502, 503, 504})


def retry_window_s() -> float:
    """How long an unreachable learner is waited for (LLMRL_LEARNER_RETRY_S)."""
    return env_seconds(RETRY_VAR, DEFAULT_RETRY_S)


class LearnerUnreachable(RuntimeError):
    """The learner did not answer for longer than the retry window."""


class _Outage:
    """The clock of one outage: pauses that grow, and the end of the patience."""

    def __init__(self, base: str, window_s: float) -> None:
        self.base, self.window_s = base, window_s
        self.since: float | None = None
        self.pause = BACKOFF_S[0]

    def over(self) -> None:
        self.since, self.pause = None, BACKOFF_S[0]

    def wait(self, what: str, error: str) -> None:
        """Sleep before the next try, or raise once the outage lasted past the window."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if now - self.since >= self.window_s:
            raise LearnerUnreachable(
                f"the learner at {self.base} has not answered {what} for {self.window_s:g} s "
                f"(last: {error}); a restarted learner goes on with the job, but none came "
                f"back ({RETRY_VAR} sets how long to wait)"
            )
        time.sleep(min(self.pause, max(0.0, self.since + self.window_s - now)))
        self.pause = min(self.pause * 2, BACKOFF_S[1])


def run_learner_job(
    endpoint: str,
    payload: dict[str, Any],
    on_progress: Callable[[int], None] | None = None,
    url: str | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Start a job at `endpoint` ("/jobs", "/policy-jobs") and wait; returns its result.
    Whatever stops the waiting (`on_progress` raising when the run is cancelled, the timeout,
    an interrupt) cancels the job on the learner too, so it does not train on for nobody.
    A learner that restarts meanwhile is waited for (module docstring)."""
    import httpx

    from llmrl.common.auth import auth_headers
    from llmrl.common.config import http_url

    base = (url or http_url("learner")).rstrip("/")
    outage = _Outage(base, retry_window_s())
    deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def still_waiting(what: str, error: str) -> None:
        """During an outage: the run's cancel is still heard (`on_progress` raises), the
        timeout still holds, and the outage's patience."""
        if on_progress is not None:
            on_progress(0)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"the learner at {base} did not answer {what} in time: {error}")
        outage.wait(what, error)

    with httpx.Client(base_url=base, headers=auth_headers(), timeout=30.0) as client:
        while True:
            try:
                response = client.post(endpoint, json=payload)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
                still_waiting("the job's submission", f"{type(exc).__name__}: {exc}")
                continue
            if response.status_code in RETRY_POST_STATUS:
                still_waiting("the job's submission", f"HTTP {response.status_code}")
                continue
            break
        outage.over()
        if response.status_code != 202:
            raise RuntimeError(
                f"the learner at {base} refused the job ({response.status_code}): "
                f"{response.text[:500]}"
            )
        job_id = response.json()["job_id"]
        reported = 0
        try:
            while True:
                try:
                    response = client.get(f"{endpoint}/{job_id}")
                except httpx.TransportError as exc:  # refused, reset, timed out: restarting
                    still_waiting(f"about job {job_id}", f"{type(exc).__name__}: {exc}")
                    continue
                if response.status_code >= 500:
                    still_waiting(f"about job {job_id}", f"HTTP {response.status_code}")
                    continue
                outage.over()
                if response.status_code != 200:  # e.g. a learner restarted on another jobs_dir
                    raise RuntimeError(
                        f"the learner at {base} lost job {job_id} ({response.status_code}): "
                        f"{response.text[:500]}"
                    )
                state = response.json()
                # a restarted job's progress goes on from its record: never counted twice
                done = int(state.get("progress", 0))
                if on_progress is not None and done > reported:
                    on_progress(done - reported)
                    reported = done
                if state["status"] == "succeeded":
                    return state["result"]
                if state["status"] in ("failed", "cancelled"):
                    raise JobEnded(f"learner job {job_id} {state['status']}: {state.get('error')}")
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"learner job {job_id} still {state['status']}")
                time.sleep(POLL_S)
        except JobEnded:
            raise  # the learner ended it: nothing to cancel
        except BaseException:
            _cancel_quietly(client, f"{endpoint}/{job_id}/cancel")
            raise


class JobEnded(RuntimeError):
    """The learner ended the job without a result (failed, or cancelled by someone else)."""


def _cancel_quietly(client: Any, path: str) -> None:
    """Best effort: the caller's own error is what it should see, not the cancel's."""
    with contextlib.suppress(Exception):  # the learner may be the reason the wait ended
        client.post(path)
