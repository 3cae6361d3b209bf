"""The gateway client every recipe uses: `connect()` for an in-process gateway (embedded
mode), `connect("host:port")` for the gateway service over gRPC. Both behave identically:
same arguments, same results, same exceptions (`llmrl.llm_gateway.errors`).

    client = connect()
    result = client.chat([{"role": "user", "content": "Where is the key?"}], run_id="r1")
    scores = client.score("You see a door.", [" open the door", " go left"], run_id="r1")

A gateway service that cannot be reached yet (`llmrl up` starts every service at once, and
the orchestrator takes runs before the gateway listens) or again (restarting) is waited for:
the gRPC client asks again once the gateway answers, for up to `LLMRL_LLM_GATEWAY_RETRY_S`
seconds (default 120, as long as `llmrl up` waits for a service), then fails naming it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from llmrl.common.config import env_seconds
from llmrl.common.outage import CHANNEL_OPTIONS, DEFAULT_WINDOW_S, Outage
from llmrl.llm_gateway.api_types import (
    CachePolicy,
    ChatResult,
    EmbedRequest,
    EmbedResult,
    GenerateRequest,
    GuidedLines,
    ScoreRequest,
    ScoreResult,
    cache_policy,
)
from llmrl.llm_gateway.errors import GatewayError, InvalidRequestError, error_from_kind

Messages = str | list[dict[str, str]]
RETRY_VAR = "LLMRL_LLM_GATEWAY_RETRY_S"


def retry_window_s() -> float:
    """How long an unreachable gateway is waited for (LLMRL_LLM_GATEWAY_RETRY_S)."""
    return env_seconds(RETRY_VAR, DEFAULT_WINDOW_S)


class LLMClient:
    """The operations of the gateway; subclasses say how a request reaches it."""

    def chat(
        self,
        messages: Messages,
        *,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "",
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 128,
        stop: list[str] | str | None = None,
        seed: int | None = None,
        cache: bool | CachePolicy = True,
        timeout_s: float | None = None,
        guided_lines: GuidedLines | dict[str, Any] | None = None,
    ) -> ChatResult:
        """Chat completion. `messages`: OpenAI-style list (a string is one user message).
        `cache`: True (deterministic requests only), False (bypass) or "always".
        `guided_lines`: {choices, numbered, max_lines}: every line of the answer is one of
        the choices (local models; see `api_types.GuidedLines`)."""
        request = GenerateRequest(
            messages=messages,  # type: ignore[arg-type]
            model=model, run_id=run_id, tag=tag, n=n, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, stop=stop, seed=seed,  # type: ignore[arg-type]
            cache=cache_policy(cache), timeout_s=timeout_s,
            guided_lines=guided_lines,  # type: ignore[arg-type]
        )  # fmt: skip
        return self._generate(request.validate())

    def complete(
        self,
        prompt: str,
        *,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "",
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 128,
        stop: list[str] | str | None = None,
        seed: int | None = None,
        cache: bool | CachePolicy = True,
        timeout_s: float | None = None,
        guided_lines: GuidedLines | dict[str, Any] | None = None,
    ) -> ChatResult:
        """Plain text completion of `prompt` (no chat template)."""
        request = GenerateRequest(
            prompt=prompt,
            model=model, run_id=run_id, tag=tag, n=n, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, stop=stop, seed=seed,  # type: ignore[arg-type]
            cache=cache_policy(cache), timeout_s=timeout_s,
            guided_lines=guided_lines,  # type: ignore[arg-type]
        )  # fmt: skip
        return self._generate(request.validate())

    def score(
        self,
        prompt: str | list[dict[str, str]],
        candidates: list[str],
        *,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "",
        cache: bool | CachePolicy = True,
        timeout_s: float | None = None,
    ) -> ScoreResult:
        """Log-probabilities of each candidate continuation of `prompt` (summed and per
        token). A chat prompt scores the candidates as the assistant's reply."""
        request = ScoreRequest(
            prompt=prompt, candidates=candidates, model=model, run_id=run_id, tag=tag,
            cache=cache_policy(cache), timeout_s=timeout_s,
        )  # fmt: skip
        return self._score(request.validate(max_candidates=10**9))  # the server knows the cap

    def embed(
        self,
        texts: str | list[str],
        *,
        model: str | None = None,
        run_id: str = "default",
        tag: str = "",
        cache: bool | CachePolicy = True,
        timeout_s: float | None = None,
    ) -> np.ndarray:
        """Sentence embeddings, float32 [len(texts), dim]."""
        request = EmbedRequest(
            texts=texts,  # type: ignore[arg-type]
            model=model, run_id=run_id, tag=tag, cache=cache_policy(cache), timeout_s=timeout_s,
        )  # fmt: skip
        return self.embed_result(request.validate(max_texts=10**9)).vectors

    def embed_result(self, request: EmbedRequest) -> EmbedResult:
        """`embed` with its accounting (cached, cost, latency)."""
        return self._embed(request)

    def count_tokens(self, text: str | list[dict[str, str]], *, model: str | None = None) -> int:
        raise NotImplementedError

    def usage(self, run_id: str) -> dict[str, Any]:
        """Ledger totals of a run (requests, cache_hits, model_calls, errors, tokens, cost_usd,
        latency_s), its budget and what is left, and the same totals per tag."""
        raise NotImplementedError

    def set_budget(self, run_id: str, usd: float | None = None, calls: int | None = None) -> None:
        """Cap a run's spending in USD and/or model calls (None: no cap)."""
        raise NotImplementedError

    def models(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # transport
    def _generate(self, request: GenerateRequest) -> ChatResult:
        raise NotImplementedError

    def _score(self, request: ScoreRequest) -> ScoreResult:
        raise NotImplementedError

    def _embed(self, request: EmbedRequest) -> EmbedResult:
        raise NotImplementedError


class InProcessClient(LLMClient):
    """Calls a `Gateway` in this process (embedded mode)."""

    def __init__(self, gateway: Any, owns_gateway: bool = True) -> None:
        self.gateway = gateway
        self._owns = owns_gateway

    def _generate(self, request: GenerateRequest) -> ChatResult:
        return self.gateway.generate(request)

    def _score(self, request: ScoreRequest) -> ScoreResult:
        return self.gateway.score(request)

    def _embed(self, request: EmbedRequest) -> EmbedResult:
        return self.gateway.embed(request)

    def count_tokens(self, text: str | list[dict[str, str]], *, model: str | None = None) -> int:
        return self.gateway.count_tokens(text, model)

    def usage(self, run_id: str) -> dict[str, Any]:
        return self.gateway.usage(run_id)

    def set_budget(self, run_id: str, usd: float | None = None, calls: int | None = None) -> None:
        self.gateway.set_budget(run_id, usd, calls)

    def models(self) -> list[dict[str, Any]]:
        return self.gateway.models()

    def close(self) -> None:
        if self._owns:
            self.gateway.close()


class GrpcClient(LLMClient):
    """Calls a gateway service over gRPC (thread-safe; one channel)."""

    def __init__(
        self, address: str, timeout_s: float | None = None, retry_s: float | None = None
    ) -> None:
        import grpc

        from llmrl.common.auth import authenticated_channel
        from llmrl.common.tls import client_channel
        from llmrl.llm_gateway import wire
        from llmrl.llm_gateway.v1 import llm_gateway_pb2 as pb
        from llmrl.llm_gateway.v1 import llm_gateway_pb2_grpc as pb_grpc

        self.address = address
        self.timeout_s = timeout_s  # a client-side deadline for every call (None: none)
        # how long an unreachable gateway is waited for (0: fail at once, e.g. a status page)
        self.retry_s = retry_window_s() if retry_s is None else float(retry_s)
        self._grpc, self._pb, self._wire = grpc, pb, wire
        channel = client_channel(  # TLS when configured (common.tls)
            address,
            options=[("grpc.max_receive_message_length", 64 * 1024 * 1024),
                     ("grpc.max_send_message_length", 64 * 1024 * 1024),
                     *CHANNEL_OPTIONS],
        )  # fmt: skip
        self._channel = authenticated_channel(channel)  # LLMRL_TOKEN as metadata, when set
        self._stub = pb_grpc.LlmGatewayStub(self._channel)

    def _process(self, request: Any, slot: str) -> Any:
        grpc = self._grpc
        outage = Outage("the LLM gateway", "llm_gateway", self.address, self.retry_s, RETRY_VAR)
        while True:
            try:
                response = self._stub.Process(request, timeout=self.timeout_s)
                return getattr(response, slot)
            except grpc.RpcError as exc:
                metadata = dict(exc.trailing_metadata() or ())
                kind = metadata.get("llmrl-error-kind")
                if kind:  # the gateway's own answer: the same exception as in-process
                    raise error_from_kind(
                        kind, exc.details() or "", metadata.get("llmrl-error-field", "")
                    ) from None
                failure = f"{exc.code().name}: {exc.details()}"
                # UNAVAILABLE without the gateway's error kind: no gateway answered (none
                # listens yet, or it is restarting); anything else will not change by waiting
                if exc.code() != grpc.StatusCode.UNAVAILABLE or self.retry_s <= 0:
                    raise GatewayError(
                        f"the LLM gateway at {self.address} failed: {failure}"
                    ) from None
            if not outage.wait(failure, self._channel):
                raise GatewayError(outage.gave_up(failure)) from None

    def _encode(self, build: Any, request: Any) -> Any:
        try:
            return build(request)
        except (TypeError, ValueError) as exc:  # e.g. a number where a string belongs
            raise InvalidRequestError(f"cannot encode the request: {exc}") from None

    def _generate(self, request: GenerateRequest) -> ChatResult:
        message = self._encode(self._wire.generate_to_pb, request)
        slot = "chat" if request.messages is not None else "completion"
        return self._wire.chat_result_from_pb(self._process(message, slot))

    def _score(self, request: ScoreRequest) -> ScoreResult:
        message = self._encode(self._wire.score_to_pb, request)
        return self._wire.score_result_from_pb(self._process(message, "score"))

    def _embed(self, request: EmbedRequest) -> EmbedResult:
        message = self._encode(self._wire.embed_to_pb, request)
        return self._wire.embed_result_from_pb(self._process(message, "embed"))

    def count_tokens(self, text: str | list[dict[str, str]], *, model: str | None = None) -> int:
        pb = self._pb
        message = pb.CountTokensRequest(model=model or "")
        if isinstance(text, str):
            message.text = text
        else:
            message.chat.messages.extend(
                pb.ChatMessage(role=m.get("role", ""), content=m.get("content", "")) for m in text
            )
        return self._process(pb.GatewayRequest(count_tokens=message), "count_tokens").tokens

    def usage(self, run_id: str) -> dict[str, Any]:
        request = self._pb.GatewayRequest(usage=self._pb.UsageRequest(run_id=run_id))
        return self._wire.usage_from_pb(self._process(request, "usage"))

    def set_budget(self, run_id: str, usd: float | None = None, calls: int | None = None) -> None:
        message = self._encode(
            lambda fields: self._pb.SetBudgetRequest(**fields),
            {"run_id": run_id, "usd": usd, "calls": calls},
        )
        self._process(self._pb.GatewayRequest(set_budget=message), "set_budget")

    def models(self) -> list[dict[str, Any]]:
        request = self._pb.GatewayRequest(list_models=self._pb.ListModelsRequest())
        return self._wire.models_from_pb(self._process(request, "list_models"))

    def close(self) -> None:
        self._channel.close()


_shared_gateway: Any = None
_shared_lock = threading.Lock()


def shared_gateway() -> Any:
    """The process-wide embedded gateway with default settings (models load once)."""
    global _shared_gateway
    with _shared_lock:
        if _shared_gateway is None:
            from llmrl.llm_gateway.gateway import Gateway

            _shared_gateway = Gateway()
        return _shared_gateway


def connect(address: str | None = None, **settings: Any) -> LLMClient:
    """A client for the gateway at `address` (host:port, gRPC), or for an in-process one.

    In-process: `settings` are gateway settings (`models`, `default_model`, `cache`,
    `prices`, `limits`, or `config="gateway.yaml"`); with none, every `connect()` in the
    process shares one gateway. Remote: the only settings are `timeout_s` (a deadline per call)
    and `retry_s` (how long an unreachable gateway is waited for; default
    LLMRL_LLM_GATEWAY_RETRY_S); the server's own configuration decides the rest.
    """
    if address is None:
        if not settings:
            return InProcessClient(shared_gateway(), owns_gateway=False)
        from llmrl.llm_gateway.gateway import Gateway

        return InProcessClient(Gateway(settings))
    unknown = set(settings) - {"timeout_s", "retry_s"}
    if unknown:
        raise InvalidRequestError(
            f"settings {sorted(unknown)} apply to an in-process gateway; a remote gateway "
            "is configured where it runs (only timeout_s and retry_s are client settings)",
            "settings",
        )
    return GrpcClient(address, **settings)
