"""`openai`: any OpenAI-compatible endpoint through the official `openai` client (OpenAI
itself; Vicuna or Llama served by FastChat, vLLM or Ollama).

The backend only maps requests to the client's arguments and the client's responses and
errors back; the gateway core retries (the client's own retries are off), falls back and
times out. The API key is read from the environment variable named by `api_key_env` and is
never put in a message: provider error texts are redacted before they leave this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np
from pydantic import Field

from llmrl.common.logs import redact, secret_values
from llmrl.common.registry import registry
from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.backends.base import Backend, Embeddings, Generation, utf8_token_bound
from llmrl.llm_gateway.errors import InvalidRequestError, RetryableUpstreamError, UpstreamError
from llmrl.llm_gateway.settings import GatewaySettings, ModelConfig

NO_KEY = "no-key"  # self-hosted servers (FastChat, vLLM, Ollama) accept any key


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header; None when absent or unreadable."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime
        from time import time

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time())
        except (TypeError, ValueError):
            return None


class OpenAIModelConfig(ModelConfig):
    """An OpenAI-compatible endpoint's settings (`backend: openai`)."""

    backend: Literal["openai"] = "openai"
    remote_model: str | None = Field(
        None, description="the provider's model id (default: the gateway's name for it)"
    )
    base_url: str | None = Field(None, description="the endpoint (default: api.openai.com)")
    api_key_env: str | None = Field(
        None, description="name of the environment variable holding the API key"
    )

    def source(self, name: str) -> str:
        return f"{self.provider_model(name)} @ {self.base_url or 'api.openai.com'}"

    def provider_model(self, name: str) -> str:
        return self.remote_model or name


@registry.register_backend(
    "openai",
    description="Any OpenAI-compatible API (official client)",
    requires=("openai",),
    extra="llm",
)
class OpenAIBackend(Backend):
    ops = frozenset({"chat", "completion", "embed"})
    remote = True
    settings_model = OpenAIModelConfig
    config: OpenAIModelConfig

    def __init__(self, name: str, config: OpenAIModelConfig, settings: GatewaySettings) -> None:
        super().__init__(name, config, settings)
        import openai

        self._openai = openai
        self._key = NO_KEY
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise InvalidRequestError(
                    f"models.{name}.api_key_env: environment variable {config.api_key_env} "
                    "is not set",
                    "model",
                )
            self._key = key
        self.remote_model = config.provider_model(name)
        self.client = openai.OpenAI(
            base_url=config.base_url, api_key=self._key, max_retries=0, timeout=config.timeout_s
        )

    @property
    def identity(self) -> str:
        return f"openai:{self.config.base_url or 'api.openai.com'}:{self.remote_model}"

    # -- requests in ---------------------------------------------------------------------------
    def prompt_tokens(self, request: GenerateRequest | ScoreRequest) -> int:
        if isinstance(request, GenerateRequest) and request.messages is not None:
            return utf8_token_bound([m["content"] for m in request.messages])
        return utf8_token_bound([str(request.prompt)])

    def count_tokens(self, text: str) -> int:
        return utf8_token_bound([text], per_text_overhead=0)

    def _generation_args(self, request: GenerateRequest) -> dict[str, Any]:
        args: dict[str, Any] = {
            "model": self.remote_model,
            "n": request.n,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_tokens,
        }
        if request.stop:
            args["stop"] = request.stop
        if request.seed is not None:
            args["seed"] = request.seed
        return args

    # -- calls -------------------------------------------------------------------------------
    def generate(self, request: GenerateRequest, adapter: str, timeout_s: float) -> Generation:
        if adapter:
            raise InvalidRequestError("model: remote models have no adapters", "model")
        if request.guided_lines is not None:  # reached only as a fallback of a local model
            raise InvalidRequestError(
                f"guided_lines: model {self.name!r} is remote and cannot guide its decoding",
                "guided_lines",
            )
        args = self._generation_args(request)
        with self._errors():
            if request.messages is not None:
                response = self.client.chat.completions.create(
                    messages=request.messages, timeout=timeout_s, **args
                )
                texts = [choice.message.content or "" for choice in response.choices]
            else:
                response = self.client.completions.create(
                    prompt=request.prompt, timeout=timeout_s, **args
                )
                texts = [choice.text for choice in response.choices]
        usage = response.usage
        return Generation(
            texts=texts,
            prompt_tokens=usage.prompt_tokens if usage else self.prompt_tokens(request),
            completion_tokens=usage.completion_tokens if usage else 0,
            finish_reasons=[choice.finish_reason or "stop" for choice in response.choices],
        )

    def embed(self, texts: list[str], timeout_s: float) -> Embeddings:
        with self._errors():
            response = self.client.embeddings.create(
                model=self.remote_model, input=texts, timeout=timeout_s
            )
        vectors = np.asarray([item.embedding for item in response.data], dtype=np.float32)
        tokens = response.usage.prompt_tokens if response.usage else 0
        return Embeddings(vectors, tokens)

    # -- errors out ------------------------------------------------------------------------
    def _clean(self, text: str) -> str:
        secrets = [*secret_values(), *([self._key] if self._key != NO_KEY else [])]
        return redact(text, secrets)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate the client's exceptions into the gateway's (retryable or not)."""
        openai, where = self._openai, f"model {self.name!r}"
        try:
            yield
        except openai.APITimeoutError:
            raise RetryableUpstreamError(
                f"{where}: the provider timed out", timed_out=True
            ) from None
        except openai.APIConnectionError:
            raise RetryableUpstreamError(
                f"{where}: cannot reach {self.config.base_url or 'the provider'}"
            ) from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            message = self._clean(f"{where}: the provider answered {status}: {exc.message}")
            if status == 429 or status >= 500:
                retry_after = parse_retry_after(exc.response.headers)
                raise RetryableUpstreamError(message, status, retry_after) from None
            raise UpstreamError(message) from None
