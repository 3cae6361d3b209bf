"""Waiting for a gRPC service that cannot be reached yet, or again.

`llmrl up` starts every service at once and the orchestrator takes runs before the others
listen: a run's first call to the gateway or the simulator may find nothing there for some
seconds, and a service restarting leaves the same gap. A client that meets gRPC's UNAVAILABLE
(no server answered) waits with an `Outage`: it says once what it waits for, sleeps with growing
pauses until the channel connects again, and gives up after the service's window (an
environment variable, e.g. LLMRL_SIMULATOR_RETRY_S) with a message naming the service, the wait
and the variable. Anything but UNAVAILABLE will not change by waiting and is raised at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("llmrl.common.outage")

PAUSE_S = (0.25, 2.0)  # the first pause between tries at an unreachable service, the longest
# how soon a channel tries to connect again after a failed attempt, at most: gRPC's default
# grows to 120 s, so a service that came up could go unnoticed for minutes
MAX_RECONNECT_BACKOFF_MS = 2000
CHANNEL_OPTIONS = (("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),)
DEFAULT_WINDOW_S = 120.0  # as long as `llmrl up` waits for a service to become healthy
QUICK_S = 1.0  # how long a listening service may take to connect before the wait is said
WATCHER_TICK_S = 0.25  # a little over how often grpc's readiness watcher looks at a channel


class Outage:
    """One outage of `label` (e.g. "the LLM gateway", served by `llmrl serve <name>`) at
    `address`: at most `window_s` seconds of waiting, `variable` the setting that changes it."""

    def __init__(self, label: str, name: str, address: str, window_s: float, variable: str) -> None:
        self.service = f"{label} at {address}"
        self.name, self.window_s, self.variable = name, window_s, variable
        self.since: float | None = None  # when the service was first found unreachable
        self.pause = PAUSE_S[0]

    def wait(self, failure: str, channel: Any = None) -> bool:
        """After a try that found no server: sleep before the next one (and until `channel`,
        a grpc.Channel, connects) and return True; False once the window is spent (the
        caller raises, with `gave_up(failure)`)."""
        now = time.monotonic()
        if self.since is None:  # once per outage: a run that waits says on what
            self.since = now
            log.warning(
                "%s cannot be reached (%s); waiting up to %g s for it",
                self.service, failure, self.window_s,
            )  # fmt: skip
        left = self.since + self.window_s - now
        if left <= 0:
            return False
        time.sleep(min(self.pause, left))
        self.pause = min(self.pause * 2, PAUSE_S[1])
        if channel is not None:
            _ready(channel, self.since + self.window_s - time.monotonic())
        return True

    def connected(self, channel: Any) -> bool:
        """Whether `channel` (a grpc.Channel) connects within the window: at once when the
        service listens; otherwise after saying what it waits for. For a client whose first
        call opens a stream that cannot be tried again (dm_env_rpc's), so it waits first."""
        if _ready(channel, min(QUICK_S, self.window_s)):
            return True
        log.warning("%s cannot be reached; waiting up to %g s for it", self.service, self.window_s)
        return _ready(channel, self.window_s - QUICK_S)

    def gave_up(self, failure: str) -> str:
        """What a caller raises once `wait` returned False."""
        return (
            f"{self.service} could not be reached for {self.window_s:g} s (last: {failure}); "
            f"is it running (`llmrl serve {self.name}`)? {self.variable} sets how long to wait"
        )


def _ready(channel: Any, timeout_s: float) -> bool:
    """Whether `channel` connects within `timeout_s` (after it, the next try says why)."""
    import grpc

    ready = grpc.channel_ready_future(channel)
    try:
        ready.result(timeout=max(timeout_s, 0.0))
        return True
    except grpc.FutureTimeoutError:
        pass
    ready.cancel()  # stops watching the channel's state (once: a second cancel raises)
    # gRPC's watcher thread sees the cancellation at its next look (every 0.2 s); a caller
    # that gives up and closes the channel before then makes that thread raise
    time.sleep(WATCHER_TICK_S)
    return False
