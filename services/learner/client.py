"""The client side of the learner service's jobs: submit, follow progress, return the result.

Recipe phases call this in service mode (`POST /jobs` for fine-tuning, `POST /policy-jobs` for
RL policies); in embedded mode they call the same training functions in-process.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

POLL_S = 0.5


def run_learner_job(
    endpoint: str,
    payload: dict[str, Any],
    on_progress: Callable[[int], None] | None = None,
    url: str | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Start a job at `endpoint` ("/jobs", "/policy-jobs") and wait; returns its result.
    Whatever stops the waiting (`on_progress` raising when the run is cancelled, the timeout,
    an interrupt) cancels the job on the learner too, so it does not train on for nobody."""
    import httpx

    from llmrl.common.auth import auth_headers
    from llmrl.common.config import http_url

    base = (url or http_url("learner")).rstrip("/")
    with httpx.Client(base_url=base, headers=auth_headers(), timeout=30.0) as client:
        response = client.post(endpoint, json=payload)
        if response.status_code != 202:
            raise RuntimeError(
                f"the learner at {base} refused the job ({response.status_code}): "
                f"{response.text[:500]}"
            )
        job_id = response.json()["job_id"]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        reported = 0
        try:
            while True:
                response = client.get(f"{endpoint}/{job_id}")
                if response.status_code != 200:  # e.g. a learner restarted on another jobs_dir
                    raise RuntimeError(
                        f"the learner at {base} lost job {job_id} ({response.status_code}): "
                        f"{response.text[:500]}"
                    )
                state = response.json()
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
