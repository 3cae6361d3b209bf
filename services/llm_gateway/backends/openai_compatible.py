"""`openai`: any OpenAI-compatible endpoint (OpenAI itself; Vicuna or Llama served by
FastChat, vLLM or Ollama). An engine on a plain `http://` URL is called through a lean
keep-alive JSON client (`upstream_http`: ~0.2 ms of CPU a call where the official `openai`
client spends ~1.1 ms, the largest part of a cache miss's cost in the gateway); `https://`
(OpenAI's own API) or a proxy go through the official client's generic request, with its TLS
and proxy handling. Both send the same JSON and read the answer as JSON: the same fields,
errors and retries either way.

Scoring through the endpoint (`score: true`, for engines that return a prompt's log-probs on
the legacy `/v1/completions`: vLLM, llama-cpp-python, another llmrl gateway; not OpenAI's chat
models): each candidate is sent after the prompt with `echo`, `logprobs` and `max_tokens` 0
(all candidates in one request, `prompt` a list), and the log-probs of the candidate's tokens
are its scores. With the model's tokenizer named (`tokenizer`), prompt and candidate are
encoded apart and their token ids sent, exactly as the local backend scores; without it, the
text is sent and the candidate's tokens found by `text_offset`, so a token the engine merges
across the boundary (a prompt ending without a space) counts for the candidate.

Adapters on the engine: `<model>:<adapter>@<version>` is sent to the engine as the model
`adapter_names` makes of it (default `{adapter}@{version}`: the LoRA's name on a vLLM server,
or on another llmrl gateway, that loaded it). With `load_adapters`, the first request naming
an adapter version publishes it to the engine: its folder (the model's `adapters` setting, or
where the learner saves it, `$LLMRL_HOME/adapters/<model>/<adapter>/<version>`) is sent to the
engine's `POST /v1/load_lora_adapter` (vLLM's runtime LoRA API), so a version the learner just
saved is served without a restart, as a local model serves it; the engine must read that
path (a shared volume). A run names an adapter the same way whichever backend serves it.

The backend only maps requests to the client's arguments and the client's responses and
errors back; the gateway core retries (the client's own retries are off), falls back and
times out. The API key is read from the environment variable named by `api_key_env` and is
never put in a message: provider error texts are redacted before they leave this module.
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np
from pydantic import Field, field_validator

from llmrl.common.logs import redact, secret_values
from llmrl.common.names import is_safe_name
from llmrl.common.registry import registry
from llmrl.llm_gateway import prompt_logprobs
from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest
from llmrl.llm_gateway.backends.base import (
    Backend,
    Embeddings,
    Generation,
    Scores,
    utf8_token_bound,
)
from llmrl.llm_gateway.backends.upstream_http import (
    AsyncJsonHttpClient,
    JsonHttpClient,
    UpstreamBadAnswer,
    UpstreamStatus,
    UpstreamTimeout,
    UpstreamUnreachable,
    lean_transport,
)
from llmrl.llm_gateway.errors import (
    GatewayTimeoutError,
    InvalidRequestError,
    RetryableUpstreamError,
    UnsupportedOperationError,
    UpstreamError,
)
from llmrl.llm_gateway.names import check_adapter
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
    score: bool = Field(
        False,
        description=(
            "the endpoint returns a prompt's log-probs (echo + logprobs on /v1/completions: "
            "vLLM, llama-cpp-python, another llmrl gateway): the model then scores "
            "candidates (/v1/score) through it. OpenAI's own chat models do not"
        ),
    )
    tokenizer: str | None = Field(
        None,
        description=(
            "the served model's tokenizer (a local Hugging Face directory or a builtin: name): "
            "scores then send token ids, prompt and candidate encoded apart as the local "
            "backend encodes them; None: the text is sent and the candidate's tokens found by "
            "their text offsets (a token merged across the boundary counts for the candidate)"
        ),
    )
    score_logprobs: int = Field(
        0, ge=0, le=5, description="the `logprobs` a score's requests ask (0: each token's own)"
    )
    score_max_tokens: int = Field(
        0,
        ge=0,
        le=1,
        description=(
            "the `max_tokens` a score's requests ask: 0 (vLLM, llmrl), or 1 for an engine "
            "that must generate (the generated token is left out)"
        ),
    )
    score_batch: bool = Field(
        True,
        description="all candidates of a score in one request (`prompt` a list); false: one "
        "request per candidate",
    )
    adapter_names: str = Field(
        "{adapter}@{version}",
        description=(
            "the engine's model name for <model>:<adapter>@<version> (the LoRA's name on the "
            "engine), from {model} (this gateway's name), {remote_model}, {adapter}, {version}"
        ),
    )
    load_adapters: bool = Field(
        False,
        description=(
            "publish an adapter version to the engine on its first use: POST its folder to the "
            "engine's /v1/load_lora_adapter (vLLM's runtime LoRA API; vLLM needs "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, another llmrl gateway serves it). false: the "
            "engine already serves the names (vLLM --lora-modules)"
        ),
    )
    adapters: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description=(
            "LoRA adapter folders to publish: name -> version -> directory (default: "
            "$LLMRL_HOME/adapters/<model>/<adapter>/<version>, where the learner saves them)"
        ),
    )
    weights: str | None = Field(
        None,
        description=(
            "the served model's weights, a local Hugging Face directory or a builtin: name: "
            "what the learner fine-tunes adapters of (LLM-PPO, SFT) for the engine to serve"
        ),
    )

    @field_validator("adapter_names")
    @classmethod
    def _names_every_version(cls, value: str) -> str:
        try:
            named = value.format(model="m", remote_model="r", adapter="a", version="v")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"{value!r}: use {{model}}, {{remote_model}}, {{adapter}} and {{version}} "
                f"only ({exc})"
            ) from None
        if "{adapter}" not in value or "{version}" not in value or not named:
            raise ValueError(f"{value!r} must hold {{adapter}} and {{version}}")
        return value

    @field_validator("adapters")
    @classmethod
    def _plain_adapter_names(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for adapter, versions in value.items():  # as the hf backend's: folder names
            for part in (adapter, *versions):
                if not is_safe_name(part):
                    raise ValueError(
                        f"{part!r} is not a plain name (letters, digits, '_', '.', '-'; never '..')"
                    )
        return value

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
    ops = frozenset({"chat", "completion", "embed"})  # and score with `score: true`
    remote = True
    settings_model = OpenAIModelConfig
    config: OpenAIModelConfig

    @classmethod
    def ops_for(cls, config: ModelConfig) -> frozenset[str]:
        scores = isinstance(config, OpenAIModelConfig) and config.score
        return cls.ops | {"score"} if scores else cls.ops

    @classmethod
    def _unsupported_op(
        cls, name: str, backend: str, op: str, ops: frozenset[str] | None = None
    ) -> UnsupportedOperationError:
        error = super()._unsupported_op(name, backend, op, ops)
        if op == "score":
            error = UnsupportedOperationError(
                f"{error.message}. Set score: true on model {name!r} when its endpoint returns "
                "prompt log-probs (echo + logprobs on /v1/completions: vLLM, llama-cpp-python, "
                "another llmrl gateway); OpenAI's own chat models do not",
                error.field,
            )
        return error

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
        # plain http engines (no proxy): the lean client (`upstream_http`); else the SDK
        self.http: JsonHttpClient | None = None
        self._async_http: weakref.WeakKeyDictionary[Any, AsyncJsonHttpClient] = (
            weakref.WeakKeyDictionary()
        )
        if config.base_url is not None and lean_transport(config.base_url):
            self.http = JsonHttpClient(config.base_url, self._key)  # "no-key" too, as the SDK
        self._published: set[str] = set()  # adapters this backend loaded on the engine
        self._publishing = threading.Lock()
        self.tokenizer: Any = None
        if config.tokenizer:
            try:
                self.tokenizer = prompt_logprobs.load_tokenizer(config.tokenizer)
            except (OSError, ValueError) as exc:
                raise InvalidRequestError(
                    f"models.{name}.tokenizer: cannot load {config.tokenizer!r}: {exc}", "model"
                ) from None

    @property
    def identity(self) -> str:
        identity = f"openai:{self.config.base_url or 'api.openai.com'}:{self.remote_model}"
        if self.config.tokenizer:  # scores by token ids and by text may differ
            identity += f":tokenizer={self.config.tokenizer}"
        return identity

    # -- requests in ---------------------------------------------------------------------------
    def prompt_tokens(self, request: GenerateRequest | ScoreRequest) -> int:
        if isinstance(request, ScoreRequest):
            prompt, longest = self._score_tokens(request)
            return prompt + sum(longest)
        if request.messages is not None:
            return utf8_token_bound([m["content"] for m in request.messages])
        return utf8_token_bound([str(request.prompt)])

    def score_shape(self, request: ScoreRequest) -> tuple[int, int]:
        self._check_scores()
        prompt, candidates = self._score_tokens(request)
        return prompt, max(candidates)

    def _score_tokens(self, request: ScoreRequest) -> tuple[int, list[int]]:
        """(prompt tokens, each candidate's): exact with the tokenizer, else a bound."""
        prompt = request.prompt
        if self.tokenizer is not None:
            text = self._score_prompt(prompt)
            count = lambda t: len(prompt_logprobs.encode(self.tokenizer, t))  # noqa: E731
            return count(text), [count(c) for c in request.candidates]
        texts = [prompt] if isinstance(prompt, str) else [m["content"] for m in prompt]
        bound = lambda t: utf8_token_bound([t], per_text_overhead=0)  # noqa: E731
        return utf8_token_bound(texts), [bound(c) for c in request.candidates]

    def count_tokens(self, text: str) -> int:
        return utf8_token_bound([text], per_text_overhead=0)

    def _generation_args(
        self, request: GenerateRequest, adapter: str, timeout_s: float
    ) -> dict[str, Any]:
        args: dict[str, Any] = {
            "model": self.engine_model(adapter, timeout_s),
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

    # -- adapters on the engine ----------------------------------------------------------------
    def _lora_name(self, adapter: str) -> str:
        name, version = check_adapter(adapter)
        return self.config.adapter_names.format(
            model=self.name, remote_model=self.remote_model, adapter=name, version=version
        )

    def engine_model(self, adapter: str, timeout_s: float) -> str:
        """The engine's model for `adapter` ("" : the base), published first if it must be."""
        if not adapter:
            return self.remote_model
        lora_name = self._lora_name(adapter)
        if self.config.load_adapters and adapter not in self._published:
            with self._publishing:  # once, even for concurrent first requests
                if adapter not in self._published:
                    self.publish_adapter(adapter, timeout_s)
        return lora_name

    def adapter_path(self, adapter: str) -> Path:
        """The folder of adapter version `adapter`: configured, or where the learner saves it
        (`llmrl.learner.adapters.adapter_dir`); a 400 naming `model` when it holds none."""
        from llmrl.common.config import home_dir

        name, version = check_adapter(adapter)
        configured = self.config.adapters.get(name, {}).get(version)
        path = Path(configured) if configured else home_dir() / "adapters" / self.name / name
        path = path if configured else path / version
        if not (path / "adapter_config.json").is_file():
            # the message names the adapter, never the folder it was looked for in
            raise InvalidRequestError(
                f"model: adapter {adapter!r} of {self.name!r} not found (neither configured "
                "nor trained under the adapters folder), so it cannot be loaded on the engine",
                "model",
            )
        return path.resolve()

    def publish_adapter(self, adapter: str, timeout_s: float) -> str:
        """Load adapter version `adapter` on the engine (`POST /v1/load_lora_adapter` with its
        name there and its folder); returns that name. An engine that already holds the name
        (it answers so: vLLM's and llmrl's "has already been loaded") counts as published: a
        version's folder is written once. Any other refusal is an error quoting the engine."""
        import httpx

        lora_name = self._lora_name(adapter)
        body = {"lora_name": lora_name, "lora_path": str(self.adapter_path(adapter))}
        url = (
            f"{(self.config.base_url or 'https://api.openai.com/v1').rstrip('/')}/load_lora_adapter"
        )
        headers = {} if self._key == NO_KEY else {"Authorization": f"Bearer {self._key}"}
        where = f"model {self.name!r}: the engine at {self.config.base_url or 'api.openai.com'}"
        try:
            answer = httpx.post(url, json=body, headers=headers, timeout=timeout_s)
        except httpx.TimeoutException:
            raise GatewayTimeoutError(
                f"{where} did not load adapter {lora_name!r} within {timeout_s:g} s", "timeout_s"
            ) from None
        except httpx.HTTPError as exc:
            raise RetryableUpstreamError(
                self._clean(f"{where} cannot be reached to load adapter {lora_name!r}: {exc}")
            ) from None
        text = answer.text[:500]
        if answer.status_code == 200 or "already been loaded" in text:
            self._published.add(adapter)
            return lora_name
        message = self._clean(
            f"{where} refused to load adapter {adapter!r} as {lora_name!r}: it answered "
            f"{answer.status_code}: {text}"
        )
        if answer.status_code == 429 or answer.status_code >= 500:
            raise RetryableUpstreamError(message, answer.status_code)
        raise UpstreamError(message)

    # -- calls -------------------------------------------------------------------------------
    def _post(self, path: str, body: dict[str, Any], timeout_s: float, adapter: str = "") -> Any:
        """POST `body` to the endpoint's `path` (e.g. "/chat/completions"): the JSON answered,
        through the lean client or the SDK's generic request (no typed models either way);
        errors mapped by `_errors`."""
        with self._errors(adapter):
            if self.http is not None:
                return self.http.post(path, body, timeout_s)
            return self.client.post(path, body=body, cast_to=object, options={"timeout": timeout_s})

    def generate(self, request: GenerateRequest, adapter: str, timeout_s: float) -> Generation:
        if request.guided_lines is not None:  # reached only as a fallback of a local model
            raise InvalidRequestError(
                f"guided_lines: model {self.name!r} is remote and cannot guide its decoding",
                "guided_lines",
            )
        path, body = self._generation_body(request, adapter, timeout_s)
        return self._generation(self._post(path, body, timeout_s, adapter), request)

    # -- calls from an event loop (the REST routes: no hop to a worker thread) -------------------
    def serves_async(self, request: GenerateRequest, adapter: str) -> bool:
        """Whether `agenerate` serves this request: a plain chat or completion to an engine on
        plain http (the lean client), naming no adapter that must first be published."""
        return (
            self.http is not None
            and request.guided_lines is None
            and not request.wants_logprobs
            and (not adapter or not self.config.load_adapters or adapter in self._published)
        )

    def async_http(self) -> AsyncJsonHttpClient:
        """The running event loop's client (its connections belong to that loop)."""
        loop = asyncio.get_running_loop()
        client = self._async_http.get(loop)
        if client is None:
            assert self.config.base_url is not None
            client = self._async_http[loop] = AsyncJsonHttpClient(self.config.base_url, self._key)
        return client

    async def agenerate(
        self, request: GenerateRequest, adapter: str, timeout_s: float
    ) -> Generation:
        """`generate` from an event loop, where `serves_async` says so."""
        path, body = self._generation_body(request, adapter, timeout_s)
        with self._errors(adapter):
            answer = await self.async_http().post(path, body, timeout_s)
        return self._generation(answer, request)

    def _generation_body(
        self, request: GenerateRequest, adapter: str, timeout_s: float
    ) -> tuple[str, dict[str, Any]]:
        args = self._generation_args(request, adapter, timeout_s)
        if request.messages is not None:
            return "/chat/completions", {"messages": request.messages, **args}
        return "/completions", {"prompt": request.prompt, **args}

    def _generation(self, answer: Any, request: GenerateRequest) -> Generation:
        choices = self._choices(answer)
        if request.messages is not None:
            texts = [_text(choice.get("message"), "content") for choice in choices]
        else:
            texts = [_text(choice, "text") for choice in choices]
        prompt_tokens, completion_tokens = self._usage(answer, request)
        return Generation(
            texts=texts,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reasons=[choice.get("finish_reason") or "stop" for choice in choices],
        )

    def _choices(self, answer: Any) -> list[dict[str, Any]]:
        """The answer's choices, each an object (a 502 naming the model otherwise)."""
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise UpstreamError(
                f"model {self.name!r}: the endpoint's answer has no list of choices (is it "
                "OpenAI-compatible?)"
            )
        return choices

    def _usage(self, answer: dict[str, Any], request: GenerateRequest) -> tuple[int, int]:
        """(prompt, completion) tokens the endpoint counted; without a `usage`, the prompt's
        bound and 0, as before."""
        usage = answer.get("usage")
        if not isinstance(usage, dict):
            return self.prompt_tokens(request), 0
        return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))

    def complete_logprobs(
        self, request: GenerateRequest, adapter: str, timeout_s: float
    ) -> Generation:
        """A legacy completion with echo, logprobs or token ids: passed to the endpoint as is
        (it refuses what it does not serve), its logprobs returned in OpenAI's shape."""
        if request.guided_lines is not None:
            raise InvalidRequestError(
                f"guided_lines: model {self.name!r} is remote and cannot guide its decoding",
                "guided_lines",
            )
        args = self._generation_args(request, adapter, timeout_s)
        if request.logprobs is not None:
            args["logprobs"] = request.logprobs
        if request.echo:
            args["echo"] = True
        answer = self._post("/completions", {"prompt": request.prompt, **args}, timeout_s, adapter)
        choices = _in_order(self._choices(answer))
        logprobs = None
        if request.logprobs is not None:
            logprobs = [self._legacy_logprobs(choice) for choice in choices]
        prompt_tokens, completion_tokens = self._usage(answer, request)
        return Generation(
            texts=[_text(choice, "text") for choice in choices],
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reasons=[choice.get("finish_reason") or "stop" for choice in choices],
            logprobs=logprobs,
        )

    def _legacy_logprobs(self, choice: dict[str, Any]) -> dict[str, Any]:
        data = choice.get("logprobs")
        if not isinstance(data, dict):
            raise UpstreamError(
                f"model {self.name!r}: the endpoint answered without the logprobs asked for"
            )
        keys = ("tokens", "token_logprobs", "top_logprobs", "text_offset")
        return {key: data.get(key) for key in keys}

    # -- scoring through the endpoint -----------------------------------------------------------
    def _check_scores(self) -> None:
        if not self.config.score:
            raise self._unsupported("score")

    def _score_prompt(self, prompt: str | list[dict[str, str]]) -> str:
        if isinstance(prompt, str):
            return prompt
        if self.tokenizer is None:
            raise InvalidRequestError(
                f"prompt: scoring a chat through model {self.name!r} needs its tokenizer to "
                f"render the chat as the model does: set models.{self.name}.tokenizer, or send "
                "the prompt as text",
                "prompt",
            )
        return prompt_logprobs.chat_prompt(self.tokenizer, prompt)

    def score(self, request: ScoreRequest, adapter: str, timeout_s: float) -> Scores:
        """Each candidate's token log-probs after the prompt, from the endpoint's echoed
        log-probs of prompt + candidate (one request for all candidates unless
        `score_batch` is off)."""
        self._check_scores()
        model = self.engine_model(adapter, timeout_s)
        prompt = self._score_prompt(request.prompt)
        candidates = request.candidates
        if self.tokenizer is not None:
            prompt_ids = prompt_logprobs.encode(self.tokenizer, prompt)
            if not prompt_ids:
                raise InvalidRequestError("prompt encodes to no tokens", "prompt")
            candidate_ids = [prompt_logprobs.encode(self.tokenizer, c) for c in candidates]
            for i, ids in enumerate(candidate_ids):
                if not ids:
                    raise InvalidRequestError(
                        f"candidates[{i}] encodes to no tokens", f"candidates[{i}]"
                    )
            sent: list[Any] = [prompt_ids + ids for ids in candidate_ids]
        else:
            sent = [prompt + candidate for candidate in candidates]
        answers, used = self._echoed(sent, model, adapter, timeout_s)
        rows = []
        for i, answer in enumerate(answers):
            if self.tokenizer is not None:
                start = len(prompt_ids)
                values = answer["token_logprobs"][start : start + len(candidate_ids[i])]
            else:
                values = self._candidate_values(answer, len(candidates[i]), sent[i])
            if not values or any(not isinstance(v, int | float) for v in values):
                raise UpstreamError(
                    f"model {self.name!r}: the endpoint returned no log-probs for the tokens "
                    f"of candidates[{i}] (does it serve echo with logprobs on /v1/completions?)"
                )
            rows.append([float(v) for v in values])
        # the gateway adds the candidates' tokens: the total is what the endpoint counted
        prompt_tokens = used - sum(len(row) for row in rows)
        return Scores(token_logprobs=rows, prompt_tokens=max(prompt_tokens, 0))

    def _echoed(
        self, prompts: list[Any], model: str, adapter: str, timeout_s: float
    ) -> tuple[list[dict[str, Any]], int]:
        """The endpoint's echoed logprobs of each prompt (prompt + candidate) from engine model
        `model`, and the prompt tokens it counted."""
        config = self.config
        args = {
            "model": model,
            "echo": True,
            "logprobs": config.score_logprobs,
            "max_tokens": config.score_max_tokens,
            "temperature": 0.0,
        }
        batches = [prompts] if config.score_batch else [[p] for p in prompts]
        answers: list[dict[str, Any]] = []
        used = 0
        for batch in batches:
            body = {"prompt": batch if len(batch) > 1 else batch[0], **args}
            answer = self._post("/completions", body, timeout_s, adapter)
            choices = _in_order(self._choices(answer))
            if len(choices) != len(batch):
                raise UpstreamError(
                    f"model {self.name!r}: the endpoint answered {len(choices)} choices "
                    f"for {len(batch)} prompts"
                )
            # the choice's text beside its log-probs: it says which tokens were generated
            answers.extend(
                {**self._legacy_logprobs(choice), "text": choice.get("text")} for choice in choices
            )
            usage = answer.get("usage")
            if isinstance(usage, dict):
                used += _count(usage.get("prompt_tokens"))
        if not used:
            used = sum(len(a["token_logprobs"]) - config.score_max_tokens for a in answers)
        return answers, used

    def _candidate_values(self, answer: dict[str, Any], chars: int, sent: str) -> list[Any]:
        """Text mode: the log-probs of the tokens that hold the candidate's `chars` last
        characters of the echoed text `sent` (found from the end, so an engine that adds a BOS
        token or reads the prompt's start otherwise finds the same ones); a token holding the
        boundary counts for the candidate."""
        tokens = list(answer["tokens"] or [])
        offsets = list(answer["text_offset"] or [])
        values = list(answer["token_logprobs"] or [])
        text = answer.get("text")
        if isinstance(text, str) and text.startswith(sent) and len(offsets) == len(tokens):
            # the generated tokens are those at or past the end of what was sent: vLLM echoes
            # their log-probs, llama-cpp-python leaves them out
            kept = [i for i, offset in enumerate(offsets) if _count(offset) < len(sent)]
            tokens, offsets, values = (
                [tokens[i] for i in kept],
                [offsets[i] for i in kept],
                [values[i] for i in kept],
            )
        elif drop := self.config.score_max_tokens:  # the generated tokens, last
            tokens, offsets, values = tokens[:-drop], offsets[:-drop], values[:-drop]
        if not tokens or len(offsets) != len(tokens) or len(values) != len(tokens):
            return []
        end = offsets[-1] + len(tokens[-1])
        boundary = end - chars
        ends = [*offsets[1:], end]
        first = next((i for i, stop in enumerate(ends) if stop > boundary), len(tokens))
        return values[first:]

    def embed(self, texts: list[str], timeout_s: float) -> Embeddings:
        answer = self._post("/embeddings", {"model": self.remote_model, "input": texts}, timeout_s)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            raise UpstreamError(
                f"model {self.name!r}: the endpoint answered no embedding per input "
                f"({len(texts)} asked)"
            )
        rows = sorted(data, key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0)
        vectors = np.asarray([self._vector(item) for item in rows], dtype=np.float32)
        usage = answer.get("usage")
        tokens = _count(usage.get("prompt_tokens")) if isinstance(usage, dict) else 0
        return Embeddings(vectors, tokens)

    def _vector(self, item: Any) -> Any:
        """One embedding: a list of floats, or base64 float32 (an engine that sends it so)."""
        embedding = item.get("embedding") if isinstance(item, dict) else None
        if isinstance(embedding, str):
            return np.frombuffer(base64.b64decode(embedding), dtype="<f4")
        if not isinstance(embedding, list):
            raise UpstreamError(f"model {self.name!r}: the endpoint answered no embedding")
        return embedding

    def close(self) -> None:
        if self.http is not None:
            self.http.close()
        for client in list(self._async_http.values()):
            client.close()
        self.client.close()

    # -- errors out ------------------------------------------------------------------------
    def _clean(self, text: str) -> str:
        secrets = [*secret_values(), *([self._key] if self._key != NO_KEY else [])]
        return redact(text, secrets)

    @contextmanager
    def _errors(self, adapter: str = "") -> Iterator[None]:
        """Translate the client's exceptions into the gateway's (retryable or not). An engine
        that does not know an adapter's name is a 400 naming `model`: the request names an
        adapter version the engine does not serve."""
        openai, where = self._openai, f"model {self.name!r}"
        try:
            yield
        except UpstreamStatus as exc:
            self._status_error(exc.status, exc.message, exc.headers, adapter)
        except UpstreamTimeout:
            raise RetryableUpstreamError(
                f"{where}: the provider timed out", timed_out=True
            ) from None
        except UpstreamUnreachable:
            raise RetryableUpstreamError(
                f"{where}: cannot reach {self.config.base_url or 'the provider'}"
            ) from None
        except UpstreamBadAnswer as exc:
            raise UpstreamError(self._clean(f"{where}: {exc}")) from None
        except openai.APITimeoutError:
            raise RetryableUpstreamError(
                f"{where}: the provider timed out", timed_out=True
            ) from None
        except openai.APIConnectionError:
            raise RetryableUpstreamError(
                f"{where}: cannot reach {self.config.base_url or 'the provider'}"
            ) from None
        except openai.APIStatusError as exc:
            self._status_error(exc.status_code, exc.message, exc.response.headers, adapter)

    def _status_error(self, status: int, text: str, headers: Any, adapter: str) -> NoReturn:
        """An HTTP error status from the endpoint as the gateway's error: a 404 for an adapter
        is a 400 naming `model`, 429 and 5xx are retryable (after Retry-After), others fail."""
        where = f"model {self.name!r}"
        if status == 404:
            if not adapter:
                raise UpstreamError(self._clean(f"{where}: the provider answered 404: {text}"))
            hint = "" if self.config.load_adapters else " (set load_adapters: true to publish it)"
            raise InvalidRequestError(
                self._clean(
                    f"model: the engine serves no adapter {self._lora_name(adapter)!r} for "
                    f"{self.name}:{adapter}{hint}; it answered 404: {text}"
                ),
                "model",
            )
        message = self._clean(f"{where}: the provider answered {status}: {text}")
        if status == 429 or status >= 500:
            raise RetryableUpstreamError(message, status, parse_retry_after(headers))
        raise UpstreamError(message)


def _in_order(choices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Choices by their `index` (an engine may answer them in another order)."""
    return sorted(choices, key=lambda choice: _count(choice.get("index")))


def _text(holder: Any, key: str) -> str:
    """A choice's text (`key` of `holder`); "" when absent or null (a refusal, a tool call)."""
    value = holder.get(key) if isinstance(holder, dict) else None
    return value if isinstance(value, str) else ""


def _count(value: Any) -> int:
    """A token count (or index) from an answer: a whole number, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
