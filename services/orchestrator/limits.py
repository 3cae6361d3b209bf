"""How much work the orchestrator takes on: active runs, in total and per tenant, and episode
jobs on the queue, every run's together.

A run submitted past a limit is refused (`AtCapacity`: HTTP 429 with `Retry-After`, naming the
limit, what is in use and the setting an operator raises); nothing is stored. An experiment's
planned runs are not refused: they wait, queued, until a run ends. A running run never puts
more than `max_queued_episodes` jobs on the queue, all runs together: it puts the rest as the
workers take them. Runs resumed by a restarted orchestrator are not refused (they were
accepted before), and count against the limits like the others.

A tenant is whom the orchestrator's auth tells apart (`rest_access.tenant_of`): it knows one
shared token (or none), so every caller is the one tenant "default", and the per-tenant limit
is the lower one in force until an auth that tells callers apart names them.

Settings (`llmrl serve orchestrator --set name=N`, else the variable, else the default):
max_active_runs (LLMRL_MAX_ACTIVE_RUNS, 16), max_active_runs_per_tenant
(LLMRL_MAX_ACTIVE_RUNS_PER_TENANT, 8), max_queued_episodes (LLMRL_MAX_QUEUED_EPISODES, 10000):
defaults for a small machine (a few cores, a couple of rollout workers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

DEFAULT_TENANT = "default"
RETRY_AFTER_S = 30  # what a refusal suggests: runs take minutes, a queue drains in seconds


@dataclass(frozen=True)
class Limit:
    name: str  # the orchestrator's setting
    variable: str  # its environment variable
    default: int
    what: str  # what it counts, in a refusal's words


ACTIVE_RUNS = Limit("max_active_runs", "LLMRL_MAX_ACTIVE_RUNS", 16, "active runs (all tenants)")
ACTIVE_RUNS_PER_TENANT = Limit(
    "max_active_runs_per_tenant", "LLMRL_MAX_ACTIVE_RUNS_PER_TENANT", 8, "active runs of tenant"
)
QUEUED_EPISODES = Limit(
    "max_queued_episodes", "LLMRL_MAX_QUEUED_EPISODES", 10_000, "episode jobs queued (all runs)"
)
LIMITS = (ACTIVE_RUNS, ACTIVE_RUNS_PER_TENANT, QUEUED_EPISODES)
SETTINGS = {
    ACTIVE_RUNS.name: "most runs active at once, all tenants (default LLMRL_MAX_ACTIVE_RUNS, 16)",
    ACTIVE_RUNS_PER_TENANT.name: "most runs active at once per tenant "
    "(default LLMRL_MAX_ACTIVE_RUNS_PER_TENANT, 8)",
    QUEUED_EPISODES.name: "most episode jobs on the queue, all runs; a run is refused at it "
    "(default LLMRL_MAX_QUEUED_EPISODES, 10000)",
}


@dataclass(frozen=True)
class RunLimits:
    max_active_runs: int = ACTIVE_RUNS.default
    max_active_runs_per_tenant: int = ACTIVE_RUNS_PER_TENANT.default
    max_queued_episodes: int = QUEUED_EPISODES.default

    @classmethod
    def configured(cls, settings: dict[str, Any] | None = None) -> RunLimits:
        """The limits from `settings`, else their variables, else the defaults; ValueError
        naming the setting for anything but a whole number >= 1."""
        settings = settings or {}
        values = {}
        for limit in LIMITS:
            raw = settings.get(limit.name)
            source = limit.name
            if raw is None:
                raw, source = os.environ.get(limit.variable) or limit.default, limit.variable
            try:
                value = int(str(raw))
            except ValueError:
                value = 0
            if value < 1:
                raise ValueError(f"{source}: expected a whole number >= 1, got {str(raw)[:50]!r}")
            values[limit.name] = value
        return cls(**values)

    def value(self, limit: Limit) -> int:
        return int(getattr(self, limit.name))


class AtCapacity(Exception):
    """A run refused because a limit is reached; says which, how much is in use, and what to
    raise. `retry_after_s`: when trying again may succeed."""

    def __init__(self, limit: Limit, in_use: int, allowed: int, tenant: str | None = None):
        self.limit, self.in_use, self.allowed, self.tenant = limit, in_use, allowed, tenant
        self.retry_after_s = RETRY_AFTER_S
        what = f"{limit.what} {tenant!r}" if tenant is not None else limit.what
        wait = (
            "wait for the workers to take some"
            if limit is QUEUED_EPISODES
            else "wait for a run to end, or cancel one"
        )
        super().__init__(
            f"the orchestrator is at capacity: {what}: {in_use} of {limit.name}={allowed}; "
            f"{wait} (retry after {self.retry_after_s} s), or have an operator raise "
            f"{limit.name} (--set {limit.name}=N on the orchestrator, or {limit.variable})"
        )

    def body(self) -> dict[str, Any]:
        """The JSON of the 429: the message, and each part of it for a program."""
        return {
            "detail": str(self),
            "limit": self.limit.name,
            "in_use": self.in_use,
            "allowed": self.allowed,
            "variable": self.limit.variable,
            **({"tenant": self.tenant} if self.tenant is not None else {}),
        }
