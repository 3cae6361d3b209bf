"""The gateway core: everything around a backend call.

For each request: validate → resolve the model (and adapter) → cache lookup (a hit costs
nothing and is counted) → reserve budget → call the backend, retrying remote failures with
exponential backoff that honours Retry-After, then the configured fallback model, all within
the request's timeout → account the real cost in the ledger → store in the cache → metrics.
Both clients, the gRPC service and the REST API call this class.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from llmrl.common.bounds import MAX_INT64, MAX_USD
from llmrl.common.config import home_dir, redis_url
from llmrl.common.logs import log_event, redact
from llmrl.common.registry import registry
from llmrl.llm_gateway.admission import Admission
from llmrl.llm_gateway.api_types import (
    ChatResult,
    EmbedRequest,
    EmbedResult,
    GenerateRequest,
    ScoreRequest,
    ScoreResult,
)
from llmrl.llm_gateway.backends.base import Backend, utf8_token_bound
from llmrl.llm_gateway.cache import (
    FrontedCache,
    NullCache,
    RedisCache,
    ResponseCache,
    SqliteCache,
    document_key,
    key_document,
)
from llmrl.llm_gateway.call_log import CallRecord, settings_note
from llmrl.llm_gateway.errors import (
    GatewayError,
    GatewayTimeoutError,
    InvalidRequestError,
    RequestTooLargeError,
    RetryableUpstreamError,
    UnknownResourceError,
    UpstreamError,
    timeout_advice,
)
from llmrl.llm_gateway.keys import (
    KeyRecord,
    KeyStore,
    MemoryKeyStore,
    RedisKeyStore,
    SqliteKeyStore,
    digest_of,
    new_key,
)
from llmrl.llm_gateway.ledger import Ledger, Reservation
from llmrl.llm_gateway.ledger_store import LedgerStore, RedisLedgerStore, SqliteLedgerStore
from llmrl.llm_gateway.metrics import GatewayMetrics
from llmrl.llm_gateway.names import check_adapter
from llmrl.llm_gateway.settings import (
    MAX_CONCURRENT,
    CacheSettings,
    GatewaySettings,
    LedgerSettings,
    load_settings,
)

Mode = Literal["embedded", "service"]
log = logging.getLogger("llmrl.llm_gateway")


def _storage(backend: str, mode: Mode) -> str:
    """ "auto" storage: Redis shared by a service's replicas, SQLite in one embedded process."""
    if backend != "auto":
        return backend
    return "redis" if mode == "service" else "sqlite"


def make_cache(settings: CacheSettings, mode: Mode) -> ResponseCache:
    """SQLite when embedded, Redis in service mode (unless the settings name one)."""
    backend = _storage(settings.backend, mode)
    if backend == "none":
        return NullCache(settings.ttl_s)
    store: ResponseCache
    if backend == "redis":
        store = RedisCache(settings.redis_url or redis_url(), settings.ttl_s, settings.prefix)
    else:
        path = settings.sqlite_path or str(home_dir() / "llm_cache.sqlite")
        store = SqliteCache(path, settings.ttl_s)
    return FrontedCache(store, settings.memory_entries) if settings.memory_entries else store


def make_ledger_store(settings: LedgerSettings, mode: Mode) -> LedgerStore | None:
    """Where the ledger is kept: SQLite when embedded, Redis in service mode (None: memory)."""
    backend = _storage(settings.backend, mode)
    if backend == "redis":
        return RedisLedgerStore(settings.redis_url or redis_url(), settings.key)
    if backend == "sqlite":
        return SqliteLedgerStore(settings.sqlite_path or home_dir() / "llm_ledger.sqlite")
    return None


def make_ledger(settings: LedgerSettings, mode: Mode) -> Ledger:
    """A ledger saved to SQLite when embedded, to Redis in service mode (or kept in memory)."""
    store = make_ledger_store(settings, mode)
    return Ledger(store, settings.flush_interval_s, record_calls=settings.record_calls)


def make_key_store(settings: LedgerSettings, mode: Mode) -> KeyStore:
    """Issued keys live where the ledger does (a SQLite file beside it, or a Redis hash)."""
    backend = _storage(settings.backend, mode)
    if backend == "redis":
        return RedisKeyStore(settings.redis_url or redis_url(), f"{settings.key}:keys")
    if backend == "sqlite":
        ledger_path = Path(settings.sqlite_path or home_dir() / "llm_ledger.sqlite")
        return SqliteKeyStore(ledger_path.with_name("llm_keys.sqlite"))
    return MemoryKeyStore()


MAX_KEY_LIFETIME_S = 10 * 365 * 24 * 3600.0


def _check_key_limit(field: str, value: Any, most: int) -> None:
    """A key's own limit: None (the gateway's default) or a whole number in [1, most]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidRequestError(
            f"{field} must be a whole number in [1, {most}] or null (the gateway's "
            f"limits.key_{field}); got {value!r}",
            field,
        )


def _prompt_tokens(backend: Backend, request: GenerateRequest | ScoreRequest) -> int:
    """The request's prompt tokens: counted by its backend, or given (a prompt of token ids)."""
    if isinstance(request, GenerateRequest) and isinstance(request.prompt, list):
        return len(request.prompt)
    return backend.prompt_tokens(request)


@dataclass
class _Outcome:
    payload: dict[str, Any]
    cached: bool
    cost_usd: float
    latency_s: float
    model: str


@dataclass
class _Job:
    """One request through the pipeline (`Gateway._job`)."""

    op: str
    request: Any  # GenerateRequest | ScoreRequest | EmbedRequest
    name: str
    backend: Backend
    label: str  # <model> or <model>:<adapter>
    sampled: bool
    completion_tokens: int  # the most it may generate (its budget estimate)
    cacheable: bool
    recorded: bool  # its run keeps its calls
    document: dict[str, Any]
    key: str
    started: float


def _generation_payload(result: Any) -> dict[str, Any]:
    """A backend's `Generation` as the cache and the call log keep it."""
    payload = {
        "texts": result.texts,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "finish_reasons": result.finish_reasons,
    }
    if result.logprobs is not None:  # absent otherwise: older answers read the same
        payload["logprobs"] = result.logprobs
    return payload


def _chat_result(outcome: _Outcome) -> ChatResult:
    payload = outcome.payload
    return ChatResult(
        texts=list(payload["texts"]),
        model=outcome.model,
        prompt_tokens=payload["prompt_tokens"],
        completion_tokens=payload["completion_tokens"],
        cost_usd=outcome.cost_usd,
        cached=outcome.cached,
        latency_s=outcome.latency_s,
        finish_reasons=list(payload.get("finish_reasons", [])),
        logprobs=payload.get("logprobs"),
    )


class _Retries:
    """The attempts of one model call: model `name`, then each fallback, a remote one retried
    with exponential backoff that honours Retry-After, all within the request's timeout. The
    caller makes each attempt `attempts()` yields and reports a retryable failure to `failed`
    (which says how long to wait before the next); a thread sleeps, an event loop awaits."""

    def __init__(self, gateway: Gateway, name: str, timeout_s: float | None) -> None:
        self.gateway, self.name = gateway, name
        self.timeout = gateway._timeout(name, timeout_s)
        self.deadline = time.monotonic() + self.timeout
        self.last: RetryableUpstreamError | None = None
        self._retry = False
        self._model, self._attempt, self._tries = name, 0, 1
        self._attempt_timeout = self._remaining = 0.0

    def attempts(self) -> Iterator[tuple[str, Backend, float]]:
        """(model, backend, this attempt's timeout) until one answers; raises
        GatewayTimeoutError past the deadline, UpstreamError when every attempt failed."""
        gateway = self.gateway
        chain = gateway._fallback_chain(self.name)
        for model in chain:
            backend = gateway.backend(model)
            config = gateway.settings.models[model]
            tries = config.max_retries + 1 if backend.remote else 1
            for attempt in range(tries):
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    raise GatewayTimeoutError(
                        f"model {self.name!r} did not answer within the request's timeout of "
                        f"{self.timeout:g} s"
                        + (f" (last error: {self.last})" if self.last else "")
                        + timeout_advice(self.name),
                        "timeout_s",
                    )
                self._model, self._attempt, self._tries = model, attempt, tries
                self._remaining = remaining
                self._attempt_timeout = min(remaining, config.timeout_s)
                self._retry = False
                yield model, backend, self._attempt_timeout
                if not self._retry:  # (resumed only after a failure)
                    break
            if model != chain[-1]:
                log_event(log, "falling back", logging.WARNING, model=model, error=str(self.last))
        tried = " then ".join(repr(m) for m in chain)
        raise UpstreamError(f"model {tried} failed after retries: {self.last}")

    def failed(self, exc: RetryableUpstreamError) -> float | None:
        """The last attempt failed retryably: the seconds to wait before the same model's next
        attempt, or None to go on to the next model (no attempt left, or waiting would pass
        the deadline). Raises GatewayTimeoutError when the attempt timed out at the deadline."""
        self.last = exc
        if exc.timed_out and self._attempt_timeout >= self._remaining:
            raise GatewayTimeoutError(
                f"model {self.name!r} did not answer within the request's timeout of "
                f"{self.timeout:g} s" + timeout_advice(self.name),
                "timeout_s",
            ) from None
        if self._attempt + 1 >= self._tries:
            return None
        config = self.gateway.settings.models[self._model]
        backoff = min(config.max_backoff_s, config.backoff_s * 2**self._attempt)
        delay = max(backoff * random.uniform(0.5, 1.0), exc.retry_after_s or 0.0)
        if delay >= self.deadline - time.monotonic():
            return None  # waiting would pass the deadline: go to the fallback now
        reason = str(exc.status) if exc.status else "network"
        self.gateway.metrics.retries.labels(self._model, reason).inc()
        log_event(
            log, "retrying", logging.WARNING, model=self._model, attempt=self._attempt + 1,
            delay_s=round(delay, 3), reason=reason,
        )  # fmt: skip
        self._retry = True
        return delay


class Gateway:
    """One gateway: its models (loaded on first use), cache, ledger and metrics."""

    def __init__(
        self, settings: GatewaySettings | dict[str, Any] | None = None, mode: Mode = "embedded"
    ) -> None:
        self.settings = load_settings(settings)
        self.mode = mode
        if self.settings.torch_threads is not None:
            import torch

            torch.set_num_threads(self.settings.torch_threads)
        self.ledger = make_ledger(self.settings.ledger, mode)
        self.metrics = GatewayMetrics(self.ledger)
        self.cache = make_cache(self.settings.cache, mode)
        self.keys = make_key_store(self.settings.ledger, mode)
        self.admission = Admission(self.settings, self.metrics, self.ledger)
        self._backends: dict[str, Backend] = {}
        self._loading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._settings_note: dict[str, Any] | None = None
        # LoRA adapters loaded at runtime (`load_lora_adapter`): name -> (model, adapter key)
        self._loras: dict[str, tuple[str, str]] = {}

    # -- models ------------------------------------------------------------------------------
    def backend(self, name: str) -> Backend:
        """The backend serving model `name`, built on first use (once, even if concurrent)."""
        backend = self._backends.get(name)
        if backend is not None:
            return backend
        config = self.settings.model(name)
        with self._lock:
            lock = self._loading.setdefault(name, threading.Lock())
        with lock:
            if name in self._backends:
                return self._backends[name]
            backend_class = registry.get_backend(config.backend)
            started = time.perf_counter()
            try:
                backend = backend_class(name, config, self.settings)
            except GatewayError:
                raise
            except Exception as exc:
                log.exception("cannot load model %s", name)
                raise GatewayError(
                    redact(f"model {name!r} cannot be loaded: {type(exc).__name__}: {exc}")
                ) from exc
            log_event(
                log, "model loaded", model=name, backend=config.backend,
                seconds=round(time.perf_counter() - started, 2),
            )  # fmt: skip
            batcher = getattr(backend, "batcher", None)
            if batcher is not None:
                histogram = self.metrics.batch_size
                batcher.on_batch = lambda kind, size, _s: histogram.labels(name, kind).observe(size)
            self._backends[name] = backend
            return backend

    def _resolve(self, model: Any, default: str, op: str | None) -> tuple[str, str, Backend]:
        """`<model>` or `<model>:<adapter>@<version>` → (model, adapter, backend)."""
        spec = default if model in (None, "") else model
        if not isinstance(spec, str):
            raise InvalidRequestError(f"model must be a string; got {spec!r}", "model")
        lora = self._loras.get(spec)  # never a model's name, never with ':'
        name, adapter = lora if lora is not None else spec.partition(":")[::2]
        self.settings.model(name)  # UnknownModelError names the configured ones
        if adapter and lora is None:
            check_adapter(adapter)  # a strict pattern: no path can leave the adapters folder
        config = self.settings.models[name]
        # a loaded model's own class; the registry only before it loads (its lookup checks the
        # entry's optional packages, a cost per request the loaded model needs no more)
        loaded = self._backends.get(name)
        backend_class = type(loaded) if loaded is not None else registry.get_backend(config.backend)
        ops = backend_class.ops_for(config)
        if op is not None and op not in ops:  # refused before loading the model
            raise backend_class._unsupported_op(name, config.backend, op, ops)
        backend = self.backend(name)
        return name, adapter, backend

    def _fallback_chain(self, name: str) -> list[str]:
        chain = [name]
        while (fallback := self.settings.models[chain[-1]].fallback) and fallback not in chain:
            chain.append(fallback)
        return chain

    # -- LoRA adapters loaded at runtime (vLLM's API: `runtime_adapters`) -------------------
    def load_lora_adapter(self, lora_name: Any, lora_path: Any, model: Any = None) -> str:
        """Load the adapter saved in `lora_path` onto local model `model` (default: the
        default model) under `lora_name`; `model: <lora_name>` then uses it. Returns the
        name. A name already loaded is refused (as vLLM does): unload it first."""
        from llmrl.llm_gateway.runtime_adapters import check_lora_name, check_lora_path

        name = check_lora_name(lora_name, self.settings.models)
        base = self.settings.default_model if model in (None, "") else model
        if not isinstance(base, str) or ":" in base:
            raise InvalidRequestError(f"model: give a model's name; got {base!r}", "model")
        self.settings.model(base)  # UnknownModelError names the configured ones
        backend = self.backend(base)
        if not hasattr(backend, "load_runtime_adapter"):
            raise InvalidRequestError(
                f"model: {base!r} is served by the {self.settings.models[base].backend!r} "
                "backend; LoRA adapters load onto local (hf) models only",
                "model",
            )
        with self._lock:
            if name in self._loras:
                raise InvalidRequestError(
                    f"lora_name: the lora adapter {name!r} has already been loaded; unload it "
                    "first to load other weights under its name",
                    "lora_name",
                )
        path = check_lora_path(lora_path)
        key = backend.load_runtime_adapter(name, path, self.settings.models[base].timeout_s)
        with self._lock:  # a concurrent load of the same name won: the later one is refused
            if name in self._loras:
                raise InvalidRequestError(
                    f"lora_name: the lora adapter {name!r} has already been loaded", "lora_name"
                )
            self._loras[name] = (base, key)
        log_event(log, "lora adapter loaded", lora_name=name, model=base)
        return name

    def unload_lora_adapter(self, lora_name: Any) -> str:
        """Forget the runtime adapter `lora_name` (404 naming `lora_name` if none)."""
        with self._lock:
            loaded = self._loras.pop(lora_name, None) if isinstance(lora_name, str) else None
        if loaded is None:
            raise UnknownResourceError(
                f"lora_name: no lora adapter {str(lora_name)[:200]!r} is loaded; loaded: "
                f"{', '.join(sorted(self._loras)) or '(none)'}",
                "lora_name",
            )
        base, key = loaded
        backend = self.backend(base)
        backend.unload_runtime_adapter(key, self.settings.models[base].timeout_s)  # type: ignore[attr-defined]
        log_event(log, "lora adapter unloaded", lora_name=lora_name, model=base)
        return lora_name

    def lora_adapters(self) -> dict[str, str]:
        """The runtime adapters: name -> the model they adapt."""
        with self._lock:
            return {name: base for name, (base, _) in self._loras.items()}

    def models(self) -> list[dict[str, Any]]:
        rows = []
        for name, config in self.settings.models.items():
            price = self.settings.price(name)
            rows.append(
                {
                    "id": name,
                    "backend": config.backend,
                    "prompt_usd_per_1m": price.prompt,
                    "completion_usd_per_1m": price.completion,
                    "fallback": config.fallback,
                    "default": name
                    in (self.settings.default_model, self.settings.default_embedding_model),
                }
            )
        for lora, base in self.lora_adapters().items():  # listed as vLLM lists them
            rows.append({**next(r for r in rows if r["id"] == base), "id": lora, "parent": base,
                         "default": False})  # fmt: skip
        return rows

    # -- operations ----------------------------------------------------------------------------
    @contextmanager
    def _accounted_errors(self, op: str, request: Any) -> Iterator[None]:
        """Count every failed request (invalid ones included) in the ledger and metrics."""
        try:
            yield
        except GatewayError as exc:
            self.metrics.errors.labels(op, exc.kind).inc()
            run_id, tag = getattr(request, "run_id", None), getattr(request, "tag", "")
            if isinstance(run_id, str) and run_id and isinstance(tag, str):
                self.ledger.record_error(run_id, tag)
            raise

    def generate(self, request: GenerateRequest) -> ChatResult:
        """Chat (request.messages) or plain completion (request.prompt)."""
        with self._accounted_errors(request.op, request):
            return self._generate(request)

    def _generate(self, request: GenerateRequest) -> ChatResult:
        op, name, adapter, backend, key_params = self._generation_job(request)

        def call(backend: Backend, timeout_s: float) -> dict[str, Any]:
            if request.wants_logprobs:  # echo, logprobs or token ids: OpenAI's legacy shape
                result = backend.complete_logprobs(request, adapter, timeout_s)
            else:
                result = backend.generate(request, adapter, timeout_s)
            return _generation_payload(result)

        outcome = self._execute(
            op, request, name, adapter, backend, key_params, request.sampled,
            completion_tokens=request.max_tokens * request.n, call=call,
        )  # fmt: skip
        return _chat_result(outcome)

    def _generation_job(self, request: GenerateRequest) -> tuple[str, str, str, Backend, dict]:
        """The checks of a generation before any cache or model: (op, model, adapter, backend,
        cache key parameters)."""
        request.validate()
        if request.messages is not None:
            self._check_prompt_chars([m["content"] for m in request.messages], "messages")
        else:
            self._check_prompt_chars([request.prompt or ""], "prompt")
        op = request.op
        name, adapter, backend = self._resolve(request.model, self.settings.default_model, op)
        if request.guided_lines is not None and not backend.guided_decoding:
            raise InvalidRequestError(
                f"guided_lines: model {name!r} (backend {backend.config.backend!r}) cannot "
                "guide its decoding; use a local model (backend 'hf') or leave guided_lines out",
                "guided_lines",
            )
        self._check_prompt_size(request, backend, "messages" if request.messages else "prompt")
        return op, name, adapter, backend, request.key_params()

    # -- generation on an event loop (the REST routes) -------------------------------------------
    def generates_async(self, request: GenerateRequest) -> bool:
        """Whether `agenerate` serves `request` on the event loop that calls it, with no hop to
        a worker thread: its model and fallbacks are loaded and call their engines from a loop
        (`Backend.serves_async`: an `openai` engine on plain http), its model has no fair gate
        (local models have), and the cache is read and written from a loop too (Redis, or
        none). Anything else is served by `generate` in a worker thread."""
        if not self.cache.serves_async:
            return False
        spec = self.settings.default_model if request.model in (None, "") else request.model
        if not isinstance(spec, str):
            return False
        lora = self._loras.get(spec)
        name, adapter = lora if lora is not None else spec.partition(":")[::2]
        if name not in self.settings.models:
            return False  # refused by `generate`, in its words
        backend = self._backends.get(name)
        if backend is None or self.admission.gate(name, backend) is not None:
            return False
        for model in self._fallback_chain(name):
            backend = self._backends.get(model)
            if backend is None or not backend.serves_async(request, adapter):
                return False
        return True

    async def agenerate(self, request: GenerateRequest) -> ChatResult:
        """`generate` on the running event loop, where `generates_async` says it can be: the
        same checks, cache, budget, retries, fallbacks, ledger and metrics."""
        with self._accounted_errors(request.op, request):
            op, name, adapter, backend, key_params = self._generation_job(request)

            async def call(backend: Backend, timeout_s: float) -> dict[str, Any]:
                return _generation_payload(await backend.agenerate(request, adapter, timeout_s))

            job = self._job(
                op, request, name, adapter, backend, key_params, request.sampled,
                request.max_tokens * request.n,
            )  # fmt: skip
            if job.cacheable:
                hit = await self._acache_get(job.key)
                if hit is not None:
                    return _chat_result(self._served_from_cache(job, hit))
            reservation = self._reserve_for(job)
            try:
                retries = _Retries(self, name, request.timeout_s)
                for model, model_backend, attempt_timeout in retries.attempts():
                    try:
                        payload, used = await call(model_backend, attempt_timeout), model
                        break
                    except RetryableUpstreamError as exc:
                        delay = retries.failed(exc)
                        if delay is not None:
                            await asyncio.sleep(delay)
            except GatewayError:
                self.ledger.release(reservation)
                raise
            except Exception as exc:
                self.ledger.release(reservation)
                raise self._model_failure(name, exc) from exc
            except BaseException:  # cancelled: the reservation must not stay held
                self.ledger.release(reservation)
                raise
            outcome = self._answered(job, payload, used, reservation)
            if job.cacheable and used == name:
                await self._acache_put(job.key, payload)
            return _chat_result(outcome)

    def score(self, request: ScoreRequest) -> ScoreResult:
        with self._accounted_errors("score", request):
            return self._score(request)

    def _score(self, request: ScoreRequest) -> ScoreResult:
        request.validate(self.settings.limits.max_candidates)
        prompt = request.prompt
        texts = [prompt] if isinstance(prompt, str) else [m["content"] for m in prompt]
        self._check_prompt_chars([*texts, *request.candidates], "candidates")
        name, adapter, backend = self._resolve(request.model, self.settings.default_model, "score")
        self._check_prompt_size(request, backend, "candidates")
        self._check_score_work(request, backend)
        key_params = request.key_params()

        def call(backend: Backend, timeout_s: float) -> dict[str, Any]:
            result = backend.score(request, adapter, timeout_s)
            return {
                "token_logprobs": result.token_logprobs,
                "prompt_tokens": result.prompt_tokens + sum(len(t) for t in result.token_logprobs),
                "completion_tokens": 0,
            }

        outcome = self._execute(
            "score", request, name, adapter, backend, key_params, False, 0, call
        )
        token_logprobs = [list(map(float, row)) for row in outcome.payload["token_logprobs"]]
        return ScoreResult(
            logprobs=[float(sum(row)) for row in token_logprobs],
            token_logprobs=token_logprobs,
            model=outcome.model,
            prompt_tokens=outcome.payload["prompt_tokens"],
            cost_usd=outcome.cost_usd,
            cached=outcome.cached,
            latency_s=outcome.latency_s,
        )

    def embed(self, request: EmbedRequest) -> EmbedResult:
        with self._accounted_errors("embed", request):
            return self._embed(request)

    def _embed(self, request: EmbedRequest) -> EmbedResult:
        request.validate(self.settings.limits.max_embed_texts)
        size, limit = sum(len(text) for text in request.texts), self.settings.limits.max_embed_chars
        if size > limit:
            raise RequestTooLargeError(
                f"input: {size} characters over the gateway's limit of {limit} per embedding "
                "request (limits.max_embed_chars)",
                "input",
            )
        default = self.settings.default_embedding_model
        name, adapter, backend = self._resolve(request.model, default, "embed")
        if adapter:
            raise InvalidRequestError("model: embedding models have no adapters", "model")

        def call(backend: Backend, timeout_s: float) -> dict[str, Any]:
            result = backend.embed(request.texts, timeout_s)
            vectors = np.ascontiguousarray(result.vectors, dtype=np.float32)
            return {
                "vectors": base64.b64encode(vectors.tobytes()).decode(),
                "shape": list(vectors.shape),
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": 0,
            }

        outcome = self._execute(
            "embed", request, name, "", backend, request.key_params(), False, 0, call
        )
        payload = outcome.payload
        vectors = np.frombuffer(base64.b64decode(payload["vectors"]), dtype=np.float32)
        return EmbedResult(
            vectors=vectors.reshape(payload["shape"]).copy(),
            model=outcome.model,
            prompt_tokens=payload["prompt_tokens"],
            cost_usd=outcome.cost_usd,
            cached=outcome.cached,
            latency_s=outcome.latency_s,
        )

    def _check_prompt_chars(self, texts: list[Any], field: str) -> None:
        """Refuse (413) a prompt over `limits.max_prompt_chars` characters before it is
        tokenized (a 4 MiB string is a lot of tokenizer time and memory to learn it is too
        long)."""
        limit = self.settings.limits.max_prompt_chars
        size = sum(len(text) for text in texts if isinstance(text, str))
        if size > limit:
            raise RequestTooLargeError(
                f"{field}: the request's prompt has {size} characters (candidates included) "
                f"over the gateway's limit of {limit} (limits.max_prompt_chars)",
                field,
            )

    def _check_prompt_size(
        self, request: GenerateRequest | ScoreRequest, backend: Backend, field: str
    ) -> None:
        """Refuse (413) a prompt, with its candidates, over `limits.max_prompt_tokens` before any
        model or cache sees it: one oversized request must not hold the model for minutes."""
        limit = self.settings.limits.max_prompt_tokens
        tokens = _prompt_tokens(backend, request)
        if tokens > limit:
            raise RequestTooLargeError(
                f"{field}: the request's prompt has {tokens} tokens (candidates included) over "
                f"the gateway's limit of {limit} (limits.max_prompt_tokens)",
                field,
            )

    def _check_score_work(self, request: ScoreRequest, backend: Backend) -> None:
        """Refuse (413) a score whose padded work (prompt + candidates × the longest candidate,
        in tokens) is over `limits.max_score_tokens`: within every other limit, 64 long
        candidates still hold a CPU model for minutes."""
        limit = self.settings.limits.max_score_tokens
        prompt, longest = backend.score_shape(request)
        work = prompt + len(request.candidates) * longest
        if work > limit:
            raise RequestTooLargeError(
                f"candidates: {len(request.candidates)} candidates of up to {longest} tokens "
                f"after a {prompt}-token prompt are {work} tokens of scoring work (prompt + "
                f"candidates × longest candidate), over the gateway's limit of {limit} "
                "(limits.max_score_tokens)",
                "candidates",
            )

    def count_tokens(self, text: str | list[dict[str, str]], model: str | None = None) -> int:
        """Tokens of a text, or of a chat prompt as the model would see it."""
        if isinstance(text, str):
            self._check_prompt_chars([text], "input")
        elif isinstance(text, list):
            contents = [m.get("content") for m in text if isinstance(m, dict)]
            self._check_prompt_chars(contents, "messages")
        _, _, backend = self._resolve(model, self.settings.default_model, None)
        if isinstance(text, str):
            return backend.count_tokens(text)
        return backend.prompt_tokens(GenerateRequest(messages=text).validate())

    # -- accounting ------------------------------------------------------------------------------
    def usage(self, run_id: str) -> dict[str, Any]:
        return self.ledger.usage(run_id)

    def set_budget(self, run_id: str, usd: float | None = None, calls: int | None = None) -> None:
        if not isinstance(run_id, str) or not run_id:
            raise InvalidRequestError("run_id must be a non-empty string", "run_id")
        self.ledger.set_budget(run_id, usd, calls)

    # -- issued keys -----------------------------------------------------------------------------
    def create_key(
        self,
        budget_usd: float,
        expires_in_s: float | None = None,
        models: list[str] | None = None,
        name: str = "",
        max_concurrent: int | None = None,
        tokens_per_minute: int | None = None,
    ) -> tuple[KeyRecord, str]:
        """Issue a key that may spend `budget_usd` (on `models` only, when given) until it
        expires, with its own rate limits when given (else the gateway's `limits.key_*`):
        (its record, the key, which is not kept and cannot be shown again)."""
        if isinstance(budget_usd, bool) or not isinstance(budget_usd, int | float):
            raise InvalidRequestError("budget_usd must be a number of USD ≥ 0", "budget_usd")
        if not 0 <= budget_usd <= MAX_USD:
            message = f"budget_usd must be a number of USD in [0, {MAX_USD:g}]"
            raise InvalidRequestError(message, "budget_usd")
        if expires_in_s is not None and (
            isinstance(expires_in_s, bool)
            or not isinstance(expires_in_s, int | float)
            or not 0 < expires_in_s <= MAX_KEY_LIFETIME_S
        ):
            raise InvalidRequestError(
                f"expires_in_s must be a number of seconds in (0, {MAX_KEY_LIFETIME_S:g}] or "
                f"null (never); got {expires_in_s!r}",
                "expires_in_s",
            )
        if models is not None:
            if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
                raise InvalidRequestError("models must be a list of model names", "models")
            unknown = [m for m in models if m not in self.settings.models]
            if unknown:
                raise InvalidRequestError(
                    f"models: unknown models {unknown}; configured: {list(self.settings.models)}",
                    "models",
                )
        if not isinstance(name, str) or len(name) > 200:
            raise InvalidRequestError("name must be a string of at most 200 characters", "name")
        _check_key_limit("max_concurrent", max_concurrent, MAX_CONCURRENT)
        _check_key_limit("tokens_per_minute", tokens_per_minute, MAX_INT64)
        key_id, key = new_key()
        now = time.time()
        record = KeyRecord(
            id=key_id,
            digest=digest_of(key),
            budget_usd=float(budget_usd),
            expires_at=None if expires_in_s is None else now + float(expires_in_s),
            models=None if models is None else list(dict.fromkeys(models)),
            name=name,
            created_at=now,
            max_concurrent=max_concurrent,
            tokens_per_minute=tokens_per_minute,
        )
        self.ledger.set_budget(record.run_id, usd=record.budget_usd)
        self.keys.put(record)
        return record, key

    def key_rows(self) -> list[dict[str, Any]]:
        """Every issued key (never the key itself) with what it spent."""
        rows = []
        for record in sorted(self.keys.all(), key=lambda r: r.created_at):
            usage = self.ledger.usage(record.run_id)
            rows.append(
                {
                    **record.public(),
                    "spent_usd": usage["cost_usd"],
                    "remaining_usd": usage["budget"]["usd_remaining"],
                    "requests": usage["requests"],
                    "usable": record.usable(),
                    "limits": self.admission.key_limits(record),  # its own, else the defaults
                }
            )
        return rows

    def revoke_key(self, key_id: str) -> KeyRecord:
        record = self.keys.get(key_id) if isinstance(key_id, str) else None
        if record is None:
            raise UnknownResourceError(f"no issued key has the id {key_id!r}", "key_id")
        record.revoked = True
        self.keys.put(record)
        return record

    # -- the pipeline ----------------------------------------------------------------------------
    def _execute(
        self,
        op: str,
        request: GenerateRequest | ScoreRequest | EmbedRequest,
        name: str,
        adapter: str,
        backend: Backend,
        key_params: dict[str, Any],
        sampled: bool,
        completion_tokens: int,
        call: Callable[[Backend, float], dict[str, Any]],
    ) -> _Outcome:
        job = self._job(op, request, name, adapter, backend, key_params, sampled,
                        completion_tokens)  # fmt: skip
        if job.cacheable:
            hit = self._cache_get(job.key)
            if hit is not None:
                return self._served_from_cache(job, hit)
        reservation = self._reserve_for(job)
        try:
            payload, used = self._fair_call(name, backend, request, call)
        except GatewayError:
            self.ledger.release(reservation)
            raise
        except Exception as exc:  # a bug or a model failure: never take the server down
            self.ledger.release(reservation)
            raise self._model_failure(name, exc) from exc
        outcome = self._answered(job, payload, used, reservation)
        if job.cacheable and used == name:  # a fallback's answer is not the primary's
            self._cache_put(job.key, payload)
        return outcome

    def _job(
        self,
        op: str,
        request: GenerateRequest | ScoreRequest | EmbedRequest,
        name: str,
        adapter: str,
        backend: Backend,
        key_params: dict[str, Any],
        sampled: bool,
        completion_tokens: int,
    ) -> _Job:
        """What the pipeline knows of a request before its cache lookup: its cache key (when
        it is cacheable, or its run keeps its calls) among the rest."""
        cacheable = request.cache == "always" or (request.cache == "auto" and not sampled)
        recorded = self.ledger.records_calls(request.run_id)  # the run keeps its calls
        document: dict[str, Any] = {}
        key = ""
        if cacheable or recorded:
            document = key_document(
                op, backend.key_name, backend.identity, adapter,
                namespace=request.cache_namespace, **key_params,
            )  # fmt: skip
            key = document_key(document)
        label = f"{name}:{adapter}" if adapter else name
        return _Job(op, request, name, backend, label, sampled, completion_tokens, cacheable,
                    recorded, document, key, time.perf_counter())  # fmt: skip

    def _keep(self, job: _Job, payload: dict[str, Any], cached: bool) -> None:
        if job.recorded:
            call = CallRecord(job.key, job.op, job.label, job.document, payload, job.sampled,
                              cached)  # fmt: skip
            self.ledger.record_call(job.request.run_id, call, self._call_settings())

    def _served_from_cache(self, job: _Job, hit: dict[str, Any]) -> _Outcome:
        latency = time.perf_counter() - job.started
        self.ledger.record(job.request.run_id, job.request.tag, cached=True, latency_s=latency)
        self._keep(job, hit, cached=True)
        self._observe(job.op, job.backend.config.backend, job.label, "hit", latency)
        return _Outcome(hit, True, 0.0, latency, job.label)

    def _reserve_for(self, job: _Job) -> Reservation:
        estimate = self._estimate_usd(job.request, job.name, job.backend, job.completion_tokens)
        return self.ledger.reserve(job.request.run_id, estimate)

    @staticmethod
    def _model_failure(name: str, exc: Exception) -> GatewayError:
        log.exception("request to model %s failed", name)
        return GatewayError(f"model {name!r} failed: {type(exc).__name__}")

    def _answered(
        self, job: _Job, payload: dict[str, Any], used: str, reservation: Reservation
    ) -> _Outcome:
        """Account a model's answer (`used`: the model that gave it, a fallback maybe): the
        ledger settles the reservation at the real cost, the run keeps the call, metrics."""
        request, name, op = job.request, job.name, job.op
        cost = self.settings.price(used).cost(
            payload["prompt_tokens"], payload["completion_tokens"]
        )
        latency = time.perf_counter() - job.started
        self.ledger.record(
            request.run_id, request.tag, cached=False, prompt_tokens=payload["prompt_tokens"],
            completion_tokens=payload["completion_tokens"], cost_usd=cost, latency_s=latency,
            reservation=reservation,
        )  # fmt: skip
        self._keep(job, payload, cached=False)
        self.admission.record_tokens(
            request.tenant, payload["prompt_tokens"] + payload["completion_tokens"]
        )
        used_backend = self.settings.models[used].backend
        self._observe(
            op, used_backend, job.label if used == name else used,
            "miss" if job.cacheable else "bypass", latency,
        )  # fmt: skip
        self.metrics.tokens.labels(used_backend, used, "prompt").inc(payload["prompt_tokens"])
        self.metrics.tokens.labels(used_backend, used, "completion").inc(
            payload["completion_tokens"]
        )
        self.metrics.cost.labels(used_backend, used).inc(cost)
        return _Outcome(payload, False, cost, latency, job.label if used == name else used)

    def _estimate_usd(
        self,
        request: GenerateRequest | ScoreRequest | EmbedRequest,
        name: str,
        backend: Backend,
        completion_tokens: int,
    ) -> float:
        """The most this request may cost, over its model and fallbacks (for the budget)."""
        chain = self._fallback_chain(name)
        prices = [self.settings.price(model) for model in chain]
        if not any(p.prompt or p.completion for p in prices):
            return 0.0
        if isinstance(request, EmbedRequest):
            prompt_tokens = utf8_token_bound(request.texts, per_text_overhead=2)
        else:
            prompt_tokens = _prompt_tokens(backend, request)
            if len(chain) > 1:  # another tokenizer may count differently: take a safe bound
                texts = (
                    [m["content"] for m in request.messages]
                    if isinstance(request, GenerateRequest) and request.messages is not None
                    else [str(request.prompt)]
                )
                prompt_tokens = max(prompt_tokens, utf8_token_bound(texts))
        return max(p.cost(prompt_tokens, completion_tokens) for p in prices)

    def _fair_call(
        self,
        name: str,
        backend: Backend,
        request: GenerateRequest | ScoreRequest | EmbedRequest,
        call: Callable[[Backend, float], dict[str, Any]],
    ) -> tuple[dict[str, Any], str]:
        """`_call_with_retries`, through the model's fair gate when it has one (a local
        model: its tenants take turns at its first-come queue; `admission.FairGate`). The
        wait there counts against the request's timeout."""
        gate = self.admission.gate(name, backend)
        if gate is None:
            return self._call_with_retries(name, request.timeout_s, call)
        timeout = self._timeout(name, request.timeout_s)
        started = time.monotonic()
        with gate.slot(request.tenant, timeout, getattr(request, "abandoned", None), name):
            remaining = max(timeout - (time.monotonic() - started), 0.001)
            return self._call_with_retries(name, remaining, call)

    def _timeout(self, name: str, timeout_s: float | None) -> float:
        # a caller may shorten the model's timeout, and lengthen it up to limits.max_timeout_s
        return min(timeout_s or self.settings.models[name].timeout_s,
                   self.settings.limits.max_timeout_s)  # fmt: skip

    def _call_with_retries(
        self, name: str, timeout_s: float | None, call: Callable[[Backend, float], dict[str, Any]]
    ) -> tuple[dict[str, Any], str]:
        """Call model `name`; retry remote failures with backoff, then try its fallbacks."""
        retries = _Retries(self, name, timeout_s)
        for model, backend, attempt_timeout in retries.attempts():
            try:
                return call(backend, attempt_timeout), model
            except RetryableUpstreamError as exc:
                delay = retries.failed(exc)
                if delay is not None:
                    time.sleep(delay)
        raise AssertionError("unreachable: the attempts end by raising")

    def _call_settings(self) -> dict[str, Any]:
        """The settings note a run's kept calls carry (`call_log.settings_note`), made once."""
        if self._settings_note is None:
            cache_backend = _storage(self.settings.cache.backend, self.mode)
            self._settings_note = settings_note(self.settings, cache_backend)
        return self._settings_note

    def _cache_get(self, key: str) -> dict[str, Any] | None:
        try:
            return self.cache.get(key)
        except Exception as exc:  # a cache outage degrades to misses, never to failures
            log_event(log, "cache read failed", logging.WARNING, error=type(exc).__name__)
            return None

    def _cache_put(self, key: str, payload: dict[str, Any]) -> None:
        try:
            self.cache.put(key, payload)
        except Exception as exc:
            log_event(log, "cache write failed", logging.WARNING, error=type(exc).__name__)

    async def _acache_get(self, key: str) -> dict[str, Any] | None:
        try:
            return await self.cache.aget(key)
        except Exception as exc:  # as `_cache_get`: an outage is a miss
            log_event(log, "cache read failed", logging.WARNING, error=type(exc).__name__)
            return None

    async def _acache_put(self, key: str, payload: dict[str, Any]) -> None:
        try:
            await self.cache.aput(key, payload)
        except Exception as exc:
            log_event(log, "cache write failed", logging.WARNING, error=type(exc).__name__)

    def _observe(self, op: str, backend: str, model: str, cache: str, latency: float) -> None:
        self.metrics.requests.labels(op, backend, model, cache).inc()
        self.metrics.latency.labels(op, backend, model, cache).observe(latency)

    def close(self) -> None:
        for backend in list(self._backends.values()):
            backend.close()
        self._backends.clear()
        self.cache.close()
        self.ledger.close()
        self.keys.close()
