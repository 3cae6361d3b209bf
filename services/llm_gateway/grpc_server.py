"""The gateway's gRPC service (protos/llmrl/llm_gateway/v1/llm_gateway.proto): one unary
`Process` RPC whose envelope carries one request; errors become gRPC statuses with the
error kind and field in trailing metadata."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError

from llmrl.common.auth import server_interceptors
from llmrl.common.logs import log_event
from llmrl.common.tls import add_grpc_port
from llmrl.llm_gateway import wire
from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.errors import GatewayError, InvalidRequestError, RateLimitedError
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.v1 import llm_gateway_pb2 as pb
from llmrl.llm_gateway.v1 import llm_gateway_pb2_grpc as pb_grpc

log = logging.getLogger("llmrl.llm_gateway.grpc")
ERROR_KIND_KEY = "llmrl-error-kind"
ERROR_FIELD_KEY = "llmrl-error-field"
RETRY_AFTER_KEY = "retry-after"  # seconds, on a rate limit's RESOURCE_EXHAUSTED
# what is admitted against the service token's rate limits (`limits.service_*`, if set)
MODEL_KINDS = frozenset({"chat", "completion", "score", "embed", "count_tokens"})
MAX_DEADLINE_S = 3600.0  # a longer time remaining means no deadline worth honouring
ModelRequest = TypeVar("ModelRequest", GenerateRequest, ScoreRequest)


def bound(context: grpc.ServicerContext, request: ModelRequest) -> ModelRequest:
    """`request` tied to its RPC: cancelled when the RPC ends first (the client cancelled or
    left, or the deadline passed: a local model drops it from its queue or stops it at its
    next step or chunk), and timed out no later than the client's deadline."""
    if not context.add_callback(request.abandoned.set):  # runs when the RPC ends, however
        request.abandoned.set()  # it has ended already
    remaining = context.time_remaining()
    if remaining is not None and remaining < MAX_DEADLINE_S:
        limit = max(remaining, 0.001)
        request.timeout_s = limit if request.timeout_s is None else min(request.timeout_s, limit)
    return request


class Malformed:
    """Bytes that are no GatewayRequest: gRPC's own deserializer would fail the call with
    INTERNAL, which says "the server broke" where the caller sent bad input."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def parse_request(data: bytes) -> pb.GatewayRequest | Malformed:
    try:
        return pb.GatewayRequest.FromString(data)
    except DecodeError as exc:  # corrupt wire format, or a string field of bad UTF-8
        return Malformed(str(exc))


class GatewayServicer(pb_grpc.LlmGatewayServicer):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._handlers: dict[str, Callable[[Any, grpc.ServicerContext], pb.GatewayResponse]] = {
            "chat": lambda m, c: pb.GatewayResponse(
                chat=wire.chat_result_to_pb(gateway.generate(bound(c, wire.generate_from_pb(m))))
            ),
            "completion": lambda m, c: pb.GatewayResponse(
                completion=wire.completion_result_to_pb(
                    gateway.generate(bound(c, wire.generate_from_pb(m)))
                )
            ),
            "score": lambda m, c: pb.GatewayResponse(
                score=wire.score_result_to_pb(gateway.score(bound(c, wire.score_from_pb(m))))
            ),
            "embed": lambda m, c: pb.GatewayResponse(
                embed=wire.embed_result_to_pb(gateway.embed(wire.embed_from_pb(m)))
            ),
            "count_tokens": lambda m, _c: self._count_tokens(m),
            "usage": lambda m, _c: pb.GatewayResponse(
                usage=wire.usage_to_pb(gateway.usage(m.run_id or "default"))
            ),
            "set_budget": lambda m, _c: self._set_budget(m),
            "list_models": lambda m, _c: pb.GatewayResponse(
                list_models=wire.models_to_pb(gateway.models())
            ),
        }

    def _count_tokens(self, message: pb.CountTokensRequest) -> pb.GatewayResponse:
        text: Any = (
            [{"role": m.role, "content": m.content} for m in message.chat.messages]
            if message.HasField("chat")
            else message.text
        )
        tokens = self.gateway.count_tokens(text, message.model or None)
        return pb.GatewayResponse(count_tokens=pb.CountTokensResponse(tokens=tokens))

    def _set_budget(self, message: pb.SetBudgetRequest) -> pb.GatewayResponse:
        self.gateway.set_budget(
            message.run_id or "default",
            usd=message.usd if message.HasField("usd") else None,
            calls=message.calls if message.HasField("calls") else None,
        )
        return pb.GatewayResponse(set_budget=pb.SetBudgetResponse())

    def Process(
        self, request: pb.GatewayRequest | Malformed, context: grpc.ServicerContext
    ) -> pb.GatewayResponse:
        if isinstance(request, Malformed):
            self._abort(
                context,
                InvalidRequestError(
                    f"request: the bytes are no GatewayRequest ({request.reason}); send a "
                    "serialized llmrl.llm_gateway.v1.GatewayRequest",
                    "request",
                ),
            )
        kind = request.WhichOneof("payload")
        try:
            if kind is None:
                raise InvalidRequestError(
                    "payload: the envelope carries no request; set one of "
                    + ", ".join(self._handlers),
                    "payload",
                )
            release = self.gateway.admission.admit(None) if kind in MODEL_KINDS else None
            try:
                return self._handlers[kind](getattr(request, kind), context)
            finally:
                if release is not None:
                    release()
        except GatewayError as exc:
            self._abort(context, exc)
        except Exception as exc:  # a bug must not take the server down
            log.exception("unexpected error in %s", kind)
            self._abort(context, GatewayError(f"internal error: {type(exc).__name__}"))
        raise AssertionError("unreachable")  # context.abort raises

    @staticmethod
    def _abort(context: grpc.ServicerContext, exc: GatewayError) -> None:
        if exc.http_status >= 500:
            log_event(log, "request failed", logging.WARNING, kind=exc.kind, error=exc.message)
        code = getattr(grpc.StatusCode, exc.grpc_code)
        metadata = [(ERROR_KIND_KEY, exc.kind), (ERROR_FIELD_KEY, exc.field)]
        if isinstance(exc, RateLimitedError):
            metadata.append((RETRY_AFTER_KEY, str(exc.retry_after_s)))
        context.set_trailing_metadata(tuple(metadata))
        context.abort(code, exc.message)


def _add_servicer(servicer: GatewayServicer, server: grpc.Server) -> None:
    """`add_LlmGatewayServicer_to_server`, but bytes that do not parse reach `Process` (as
    `Malformed`), which answers INVALID_ARGUMENT naming the request."""
    handlers = {
        "Process": grpc.unary_unary_rpc_method_handler(
            servicer.Process,
            request_deserializer=parse_request,
            response_serializer=pb.GatewayResponse.SerializeToString,
        )
    }
    service = pb.DESCRIPTOR.services_by_name["LlmGateway"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


def start_grpc_server(
    gateway: Gateway, host: str, port: int, max_workers: int = 64, token: str | None = None
) -> grpc.Server:
    """Start serving on host:port (port 0: a free one; read it back from `server.port`);
    with a `token`, every call must carry it as `authorization: Bearer <token>` metadata."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="gateway-grpc"),
        options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                 ("grpc.max_send_message_length", 64 * 1024 * 1024)],
        interceptors=server_interceptors(token),
    )  # fmt: skip
    _add_servicer(GatewayServicer(gateway), server)
    bound = add_grpc_port(server, f"{host}:{port}")  # TLS when configured (common.tls)
    if bound == 0:
        raise OSError(f"cannot bind the gRPC port {host}:{port}")
    server.start()
    server.port = bound  # type: ignore[attr-defined]
    return server
