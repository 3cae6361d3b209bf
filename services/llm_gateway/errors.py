"""The gateway's errors: one class per outcome a caller must handle differently.

Each error knows its HTTP status and gRPC status code, so the REST API, the gRPC service and
both clients map them the same way. Messages never contain secrets (API keys are redacted
before an error is built from a provider's message).
"""

from __future__ import annotations

from typing import ClassVar


class GatewayError(Exception):
    """Base class; `field` names the request field at fault when there is one."""

    http_status: ClassVar[int] = 500
    grpc_code: ClassVar[str] = "INTERNAL"  # a grpc.StatusCode name
    kind: ClassVar[str] = "internal_error"

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class InvalidRequestError(GatewayError, ValueError):
    """A malformed request: the message names the field and what is allowed."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"
    kind = "invalid_request_error"


class UnknownModelError(InvalidRequestError):
    """The requested model is not configured (HTTP 404 as OpenAI does)."""

    http_status = 404
    kind = "model_not_found"


class UnknownResourceError(InvalidRequestError):
    """A named resource (an issued key's id) does not exist: 404."""

    http_status = 404
    grpc_code = "NOT_FOUND"
    kind = "not_found"


class PermissionDeniedError(GatewayError):
    """The credentials are valid but do not allow this (a key limited to other models)."""

    http_status = 403
    grpc_code = "PERMISSION_DENIED"
    kind = "permission_denied"


class InvalidValueError(InvalidRequestError):
    """A field of the wrong type (a string where a number goes): 422, as FastAPI answers."""

    http_status = 422
    kind = "invalid_value"


class RequestTooLargeError(InvalidRequestError):
    """A request over one of the gateway's configured limits (`limits.*`), refused before any
    model sees it; the message names the limit."""

    http_status = 413
    kind = "request_too_large"


class BudgetExceededError(GatewayError):
    """The run's budget (USD or calls) does not allow this request; nothing was spent."""

    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"
    kind = "budget_exceeded"


class RateLimitedError(GatewayError):
    """A tenant's rate limit (requests in flight, tokens per minute) refuses this request for
    now: unlike a spent budget it passes, so `retry_after_s` says when to try again (REST: the
    `Retry-After` header). `field` names the setting that set the limit."""

    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"
    kind = "rate_limit_exceeded"

    def __init__(self, message: str, field: str = "", retry_after_s: int = 1) -> None:
        super().__init__(message, field)
        self.retry_after_s = max(1, int(retry_after_s))


class GatewayTimeoutError(GatewayError, TimeoutError):
    """The request did not finish within its timeout (retries included)."""

    http_status = 504
    grpc_code = "DEADLINE_EXCEEDED"
    kind = "timeout"


def timeout_advice(model: str) -> str:
    """What to do after a request ran out of time at `model`, for its error message: the two
    settings that give it more, and the load that made it wait."""
    return (
        f"; give it longer with models.{model}.timeout_s in the gateway's settings (an "
        "experiment file's `gateway:`, or the file $LLMRL_LLM_GATEWAY_CONFIG names) or the "
        "request's own timeout (timeout_s, X-LLMRL-Timeout), or send fewer requests at once "
        "(e.g. fewer num_envs) on a busy machine"
    )


class UpstreamError(GatewayError):
    """A remote provider failed (after retries and fallback)."""

    http_status = 502
    grpc_code = "UNAVAILABLE"
    kind = "upstream_error"


class RetryableUpstreamError(UpstreamError):
    """Raised by a backend for a failure worth retrying (429, 5xx, timeout, connection)."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        retry_after_s: float | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        self.timed_out = timed_out  # the provider did not answer in the time it was given


class ReplayMissError(UpstreamError):
    """A replay (`llmrl replay`) was asked a call its bundle holds no answer for: asking
    again cannot help, so not UNAVAILABLE (which clients may retry)."""

    grpc_code = "FAILED_PRECONDITION"
    kind = "replay_miss"


class UnsupportedOperationError(InvalidRequestError):
    """The model's backend cannot do this operation (e.g. `score` on a chat-only API)."""


ERRORS_BY_KIND: dict[str, type[GatewayError]] = {
    cls.kind: cls
    for cls in (
        GatewayError,
        InvalidRequestError,
        UnknownModelError,
        BudgetExceededError,
        RateLimitedError,
        GatewayTimeoutError,
        UpstreamError,
        ReplayMissError,
    )
}


def error_from_kind(kind: str, message: str, field: str = "") -> GatewayError:
    """Rebuild an error on the client side from its wire form (kind, message, field)."""
    return ERRORS_BY_KIND.get(kind, GatewayError)(message, field)


def error_body(exc: GatewayError) -> dict[str, dict[str, str | None]]:
    """`exc` in OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    return {
        "error": {"message": exc.message, "type": exc.kind, "param": exc.field or None,
                  "code": exc.kind}
    }  # fmt: skip


def error_headers(exc: GatewayError) -> dict[str, str]:
    """The headers of `exc`'s HTTP answer: `Retry-After` (seconds) where waiting helps, else
    `x-should-retry: false` where retrying cannot help (none for 502/504: it may)."""
    if isinstance(exc, RateLimitedError):
        return {"retry-after": str(exc.retry_after_s)}
    return {} if exc.http_status in (502, 504) else {"x-should-retry": "false"}
