"""Who may have the gateway's models compute, and in what order: per-tenant rate limits, the
per-route body limits and the fair gate in front of each local model's batching queue.

Tenants: each gateway-issued key is one (`key:<id>`); the service token's callers (REST and
gRPC) and in-process callers are one more, `SERVICE`. Limits live in this process (a replica
counts its own requests).

- `Admission.admit`: before a request's body is read or any model work starts, a tenant over
  its requests in flight (`limits.key_max_concurrent`, or the key's own `max_concurrent`) or
  over its tokens per minute (`limits.key_tokens_per_minute`, or the key's own; prompt +
  completion tokens that a model computed, local models included, whatever their price) is
  refused: `RateLimitedError` (HTTP 429 with `Retry-After`, gRPC RESOURCE_EXHAUSTED) naming
  the limit and its setting; counted in `llmrl_gateway_rejected_requests_total{reason,caller}`
  and, for a key, as an error of its ledger run. A request is let in while its tenant is under
  its token limit; its tokens count when it is answered (so one request may pass the limit,
  and the tenant then waits for the window to slide).
- `RouteBodyLimit`: a route's tighter body limit (`limits.route_max_body_bytes`, e.g.
  /v1/count_tokens) is a 413 on the declared length, before any byte is read (a chunked body
  is read up to the limit only).
- `FairGate`: a local model's batcher runs its queue first come, first served, so 48 requests
  of one tenant queued ahead of another's one-token request delay it by 6 whole batches. The
  gateway hands the model at most `fair_queue_depth` requests at once (its batch size); the
  others wait here and are let in tenant by tenant, the tenant with the fewest requests at the
  model first (then in arrival order), so another tenant's request waits for at most the batch
  running and its own, however many one tenant has waiting.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llmrl.common.http import BODY_METHODS, ErrorBody, replaying
from llmrl.llm_gateway.errors import GatewayTimeoutError, RateLimitedError, timeout_advice
from llmrl.llm_gateway.keys import KeyRecord
from llmrl.llm_gateway.settings import GatewaySettings

SERVICE = ""  # the tenant of the service token's callers and of in-process callers
CONCURRENCY_RETRY_S = 1  # Retry-After for a tenant at its requests in flight: one is soon done
WINDOW_BUCKETS = 30  # a tenant's token window is kept as this many time buckets at most
WITHOUT_LOCAL_MODELS = 8  # key_max_concurrent's default when no local model is configured
GATE_POLL_S = 0.05  # how often a request waiting at a fair gate checks whether it was abandoned
SHARED_RECENT_S = 1.0  # a tenant let in (or answered) this recently still shares the model
MAX_REMEMBERED_TENANTS = 4096  # a fair gate's memory of when each tenant was last let in
STATE_FIELD = "gateway_key"  # where `key_auth` puts a request's key record (scope["state"])


@dataclass(frozen=True)
class Quota:
    """A tenant's limits in force, and the setting each comes from (for refusals)."""

    max_concurrent: int | None
    concurrent_setting: str
    tokens_per_minute: int | None
    tokens_setting: str


def _no_release() -> None:
    return None


class Admission:
    """The per-tenant limits of one gateway (in this process)."""

    def __init__(self, settings: GatewaySettings, metrics: Any, ledger: Any) -> None:
        self.settings, self.limits = settings, settings.limits
        self.metrics, self.ledger = metrics, ledger
        self.window_s = self.limits.rate_window_s
        self._bucket_s = self.window_s / WINDOW_BUCKETS
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._windows: dict[str, deque[list[float]]] = {}  # tenant -> [bucket start, tokens]
        self._gates: dict[str, FairGate | None] = {}

    # -- limits ------------------------------------------------------------------------------
    def default_key_concurrency(self) -> int:
        """`limits.key_max_concurrent`, else half the smallest batch of the local models."""
        if self.limits.key_max_concurrent is not None:
            return self.limits.key_max_concurrent
        batches = [
            size
            for model in self.settings.models.values()
            if isinstance(size := getattr(model, "max_batch_size", None), int)
        ]
        return max(1, min(batches) // 2) if batches else WITHOUT_LOCAL_MODELS

    def quota(self, key: KeyRecord | None) -> Quota:
        limits = self.limits
        if key is None:
            return Quota(
                limits.service_max_concurrent, "limits.service_max_concurrent",
                limits.service_tokens_per_minute, "limits.service_tokens_per_minute",
            )  # fmt: skip
        own_concurrent = key.max_concurrent is not None
        own_tokens = key.tokens_per_minute is not None
        return Quota(
            key.max_concurrent if own_concurrent else self.default_key_concurrency(),
            "max_concurrent" if own_concurrent else "limits.key_max_concurrent",
            key.tokens_per_minute if own_tokens else limits.key_tokens_per_minute,
            "tokens_per_minute" if own_tokens else "limits.key_tokens_per_minute",
        )

    @staticmethod
    def tenant(key: KeyRecord | None) -> str:
        return SERVICE if key is None else key.run_id

    def key_limits(self, key: KeyRecord) -> dict[str, Any]:
        """What a key's listing shows: the limits in force for it."""
        quota = self.quota(key)
        return {
            "max_concurrent": quota.max_concurrent,
            "tokens_per_minute": quota.tokens_per_minute,
            "rate_window_s": self.window_s,
        }

    # -- admission ---------------------------------------------------------------------------
    def admit(self, key: KeyRecord | None) -> Callable[[], None]:
        """Let one request of `key`'s tenant (None: the service token's) in, or raise
        `RateLimitedError`; returns what to call when the request is over (once)."""
        quota = self.quota(key)
        if quota.max_concurrent is None and quota.tokens_per_minute is None:
            return _no_release
        tenant, now = self.tenant(key), time.monotonic()
        who = "this key" if key is not None else "the service token's callers"
        refused: RateLimitedError | None = None
        counted = False
        with self._lock:
            if quota.tokens_per_minute is not None:
                budget = quota.tokens_per_minute * self.window_s / 60
                used = self._window_tokens(tenant, now)
                if used >= budget:
                    retry = self._retry_after(tenant, used, budget, now)
                    per = (
                        ""
                        if self.window_s == 60
                        else f", {budget:g} tokens per limits.rate_window_s of {self.window_s:g} s"
                    )
                    refused = RateLimitedError(
                        f"rate limit: {who} had models compute {used:g} tokens in the last "
                        f"{self.window_s:g} s, at its limit of {quota.tokens_per_minute} tokens "
                        f"per minute ({quota.tokens_setting}){per}; retry after {retry} s",
                        quota.tokens_setting,
                        retry,
                    )
                    reason = "tokens_per_minute"
            if refused is None and quota.max_concurrent is not None:
                in_flight = self._in_flight.get(tenant, 0)
                if in_flight >= quota.max_concurrent:
                    refused = RateLimitedError(
                        f"rate limit: {who} already has {in_flight} requests in flight, its "
                        f"limit of concurrent requests ({quota.concurrent_setting} = "
                        f"{quota.max_concurrent}); retry after {CONCURRENCY_RETRY_S} s, or when "
                        "one of them has been answered",
                        quota.concurrent_setting,
                        CONCURRENCY_RETRY_S,
                    )
                    reason = "concurrency"
                else:
                    self._in_flight[tenant] = in_flight + 1
                    counted = True
        if refused is not None:
            self.count_rejected(reason, key)
            raise refused
        if not counted:
            return _no_release
        released = threading.Event()

        def release() -> None:
            if released.is_set():
                return
            released.set()
            with self._lock:
                left = self._in_flight.get(tenant, 1) - 1
                if left > 0:
                    self._in_flight[tenant] = left
                else:
                    self._in_flight.pop(tenant, None)

        return release

    def count_rejected(self, reason: str, key: KeyRecord | None) -> None:
        """A request refused by a limit: in the metrics (never the key in a label) and, for a
        key, as an error of its ledger run."""
        self.metrics.rejected.labels(reason, "service" if key is None else "key").inc()
        if key is not None:
            self.ledger.record_error(key.run_id, "")

    def in_flight(self, key: KeyRecord | None) -> int:
        with self._lock:
            return self._in_flight.get(self.tenant(key), 0)

    # -- tokens --------------------------------------------------------------------------------
    def record_tokens(self, tenant: str, tokens: int) -> None:
        """Tokens a model computed for `tenant` (a cache miss's prompt + completion)."""
        if tokens <= 0 or (tenant == SERVICE and self.limits.service_tokens_per_minute is None):
            return
        now = time.monotonic()
        with self._lock:
            window = self._windows.setdefault(tenant, deque())
            self._prune(window, now)
            if window and now < window[-1][0] + self._bucket_s:
                window[-1][1] += tokens
            else:
                window.append([now, float(tokens)])

    def _prune(self, window: deque[list[float]], now: float) -> None:
        # a bucket counts until its end has left the window
        while window and window[0][0] + self._bucket_s + self.window_s <= now:
            window.popleft()

    def _window_tokens(self, tenant: str, now: float) -> float:
        window = self._windows.get(tenant)
        if window is None:
            return 0.0
        self._prune(window, now)
        if not window:
            del self._windows[tenant]
            return 0.0
        return sum(tokens for _, tokens in window)

    def _retry_after(self, tenant: str, used: float, budget: float, now: float) -> int:
        """Whole seconds until the tenant's window holds fewer than `budget` tokens."""
        for start, tokens in self._windows.get(tenant, ()):
            used -= tokens
            if used < budget:
                return max(1, math.ceil(start + self._bucket_s + self.window_s - now))
        return max(1, math.ceil(self.window_s))

    # -- the fair gate in front of a local model's queue ---------------------------------------
    def gate(self, name: str, backend: Any) -> FairGate | None:
        """The fair gate of model `name` (None: no gate, a remote model or fair_queue off)."""
        if name not in self._gates:
            batch = getattr(getattr(backend, "batcher", None), "max_batch_size", None)
            gate = None
            if self.limits.fair_queue and isinstance(batch, int):
                shared = self.limits.fair_queue_depth
                if shared is None:  # rows of a deterministic model run one at a time anyway
                    shared = 1 if getattr(backend.config, "deterministic", False) else batch
                gate = FairGate(max(batch, shared), shared)
            with self._lock:
                self._gates.setdefault(name, gate)
        return self._gates[name]


class FairGate:
    """At most `depth` requests at a model at once, `shared_depth` while more than one tenant
    uses it (has requests at the model or waiting, or had one let in within `SHARED_RECENT_S`);
    waiting ones enter tenant by tenant: the tenant with the fewest at the model first, then
    the one let in least recently, then first come, first served."""

    def __init__(self, depth: int, shared_depth: int | None = None) -> None:
        self.depth = depth
        self.shared_depth = min(depth, shared_depth or depth)
        self._cond = threading.Condition()
        self._at_model: dict[str, int] = {}
        self._let_in: dict[str, int] = {}  # tenant -> when it was last let in (a sequence)
        self._seen: dict[str, float] = {}  # tenant -> when it was last let in or left
        self._total = 0
        self._waiting: list[tuple[int, str]] = []  # (arrival, tenant)
        self._arrivals = itertools.count()
        self._turns = itertools.count(1)
        self.waited = 0  # requests that had to wait (for tests and the bench)

    def _next(self) -> tuple[int, str]:
        return min(
            self._waiting,
            key=lambda ticket: (
                self._at_model.get(ticket[1], 0), self._let_in.get(ticket[1], 0), ticket[0]
            ),
        )  # fmt: skip

    def _room(self, arriving: str | None = None) -> int:
        """How many requests the model may hold now: `shared_depth` if it is shared (with the
        `arriving` tenant too)."""
        if self.shared_depth >= self.depth:
            return self.depth
        tenants = set(self._at_model) | ({arriving} if arriving is not None else set())
        tenants.update(tenant for _, tenant in self._waiting)
        if len(tenants) < 2:
            recent = time.monotonic() - SHARED_RECENT_S
            tenants.update(tenant for tenant, seen in self._seen.items() if seen > recent)
        return self.shared_depth if len(tenants) > 1 else self.depth

    @property
    def shared(self) -> bool:
        with self._cond:
            return self._room() < self.depth

    @contextmanager
    def slot(
        self, tenant: str, timeout_s: float, abandoned: threading.Event | None, model: str
    ) -> Iterator[None]:
        """Hold a place at the model for the body of the `with`; wait for one at most
        `timeout_s` (GatewayTimeoutError), or until the caller leaves (`abandoned`)."""
        self._enter(tenant, time.monotonic() + timeout_s, abandoned, model, timeout_s)
        try:
            yield
        finally:
            with self._cond:
                left = self._at_model.get(tenant, 1) - 1
                if left > 0:
                    self._at_model[tenant] = left
                else:
                    self._at_model.pop(tenant, None)
                self._total -= 1
                self._seen[tenant] = time.monotonic()
                self._cond.notify_all()

    def _enter(
        self,
        tenant: str,
        deadline: float,
        abandoned: threading.Event | None,
        model: str,
        timeout_s: float,
    ) -> None:
        with self._cond:
            if not self._waiting and self._total < self._room(tenant):
                self._take(tenant)
                return
            ticket = (next(self._arrivals), tenant)
            self._waiting.append(ticket)
            self.waited += 1
            try:
                while not (self._total < self._room() and self._next() == ticket):
                    remaining = deadline - time.monotonic()
                    if abandoned is not None and abandoned.is_set():
                        raise GatewayTimeoutError(
                            f"model {model!r}: the request was cancelled (its caller left)",
                            "timeout_s",
                        )
                    if remaining <= 0:
                        raise GatewayTimeoutError(
                            f"model {model!r} did not answer within the request's timeout of "
                            f"{timeout_s:g} s (it waited its turn at the model all that time)"
                            + timeout_advice(model),
                            "timeout_s",
                        )
                    self._cond.wait(min(remaining, GATE_POLL_S))
            except BaseException:
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.remove(ticket)
            self._take(tenant)
            if self._waiting and self._total < self._room():
                self._cond.notify_all()  # room for the next one too

    def _take(self, tenant: str) -> None:
        self._at_model[tenant] = self._at_model.get(tenant, 0) + 1
        self._total += 1
        self._let_in[tenant] = next(self._turns)
        self._seen[tenant] = time.monotonic()
        if len(self._let_in) > MAX_REMEMBERED_TENANTS:  # forget the longest-idle tenants
            for old in sorted(self._let_in, key=self._let_in.__getitem__)[: len(self._let_in) // 2]:
                if old not in self._at_model:
                    del self._let_in[old]
                    self._seen.pop(old, None)


# -- per-route body limits (ASGI) ------------------------------------------------------------


class RouteBodyLimit:
    """ASGI middleware: a route of `limits` (path -> bytes) takes bodies up to its limit only.
    A declared length over it is refused (413) before any byte is read; a body without one
    (chunked) is read up to the limit, then refused. Other routes pass untouched (the body
    guard bounds them)."""

    def __init__(
        self, app: Any, limits: dict[str, int], error_body: ErrorBody, admission: Admission
    ) -> None:
        self.app, self.limits, self.error_body, self.admission = app, limits, error_body, admission

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        limit = None
        if scope["type"] == "http" and scope["method"] in BODY_METHODS:
            limit = self.limits.get(scope["path"])
        if limit is None:
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > limit:
                await self._refuse(scope, send, limit)
            else:  # the server reads no more than the declared length
                await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was sent: nobody to answer
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > limit:
                await self._refuse(scope, send, limit)
                return
        body = b"".join(chunks)

        await self.app(scope, replaying(body, receive), send)

    async def _refuse(self, scope: dict, send: Callable, limit: int) -> None:
        path = scope["path"]
        self.admission.count_rejected("body_size", (scope.get("state") or {}).get(STATE_FIELD))
        message = (
            f"request body too large: {path} takes at most {limit} bytes "
            f"(limits.route_max_body_bytes[{path!r}])"
        )
        payload = json.dumps(self.error_body(413, message, "body")).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"connection", b"close"),  # the unread body must not be taken for a request
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
