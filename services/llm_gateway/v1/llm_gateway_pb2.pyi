from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CachePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_AUTO: _ClassVar[CachePolicy]
    CACHE_BYPASS: _ClassVar[CachePolicy]
    CACHE_ALWAYS: _ClassVar[CachePolicy]
CACHE_AUTO: CachePolicy
CACHE_BYPASS: CachePolicy
CACHE_ALWAYS: CachePolicy

class GatewayRequest(_message.Message):
    __slots__ = ("chat", "completion", "score", "embed", "count_tokens", "usage", "set_budget", "list_models")
    CHAT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    EMBED_FIELD_NUMBER: _ClassVar[int]
    COUNT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SET_BUDGET_FIELD_NUMBER: _ClassVar[int]
    LIST_MODELS_FIELD_NUMBER: _ClassVar[int]
    chat: ChatRequest
    completion: CompletionRequest
    score: ScoreRequest
    embed: EmbedRequest
    count_tokens: CountTokensRequest
    usage: UsageRequest
    set_budget: SetBudgetRequest
    list_models: ListModelsRequest
    def __init__(self, chat: _Optional[_Union[ChatRequest, _Mapping]] = ..., completion: _Optional[_Union[CompletionRequest, _Mapping]] = ..., score: _Optional[_Union[ScoreRequest, _Mapping]] = ..., embed: _Optional[_Union[EmbedRequest, _Mapping]] = ..., count_tokens: _Optional[_Union[CountTokensRequest, _Mapping]] = ..., usage: _Optional[_Union[UsageRequest, _Mapping]] = ..., set_budget: _Optional[_Union[SetBudgetRequest, _Mapping]] = ..., list_models: _Optional[_Union[ListModelsRequest, _Mapping]] = ...) -> None: ...

class GatewayResponse(_message.Message):
    __slots__ = ("chat", "completion", "score", "embed", "count_tokens", "usage", "set_budget", "list_models")
    CHAT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    EMBED_FIELD_NUMBER: _ClassVar[int]
    COUNT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SET_BUDGET_FIELD_NUMBER: _ClassVar[int]
    LIST_MODELS_FIELD_NUMBER: _ClassVar[int]
    chat: ChatResponse
    completion: CompletionResponse
    score: ScoreResponse
    embed: EmbedResponse
    count_tokens: CountTokensResponse
    usage: UsageResponse
    set_budget: SetBudgetResponse
    list_models: ListModelsResponse
    def __init__(self, chat: _Optional[_Union[ChatResponse, _Mapping]] = ..., completion: _Optional[_Union[CompletionResponse, _Mapping]] = ..., score: _Optional[_Union[ScoreResponse, _Mapping]] = ..., embed: _Optional[_Union[EmbedResponse, _Mapping]] = ..., count_tokens: _Optional[_Union[CountTokensResponse, _Mapping]] = ..., usage: _Optional[_Union[UsageResponse, _Mapping]] = ..., set_budget: _Optional[_Union[SetBudgetResponse, _Mapping]] = ..., list_models: _Optional[_Union[ListModelsResponse, _Mapping]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ChatPrompt(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class RequestContext(_message.Message):
    __slots__ = ("run_id", "tag", "cache", "timeout_s")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    tag: str
    cache: CachePolicy
    timeout_s: float
    def __init__(self, run_id: _Optional[str] = ..., tag: _Optional[str] = ..., cache: _Optional[_Union[CachePolicy, str]] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class GenerationParams(_message.Message):
    __slots__ = ("n", "temperature", "top_p", "max_tokens", "stop", "seed", "guided_lines")
    N_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    GUIDED_LINES_FIELD_NUMBER: _ClassVar[int]
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    guided_lines: GuidedLines
    def __init__(self, n: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., guided_lines: _Optional[_Union[GuidedLines, _Mapping]] = ...) -> None: ...

class GuidedLines(_message.Message):
    __slots__ = ("choices", "numbered", "max_lines")
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    NUMBERED_FIELD_NUMBER: _ClassVar[int]
    MAX_LINES_FIELD_NUMBER: _ClassVar[int]
    choices: _containers.RepeatedScalarFieldContainer[str]
    numbered: bool
    max_lines: int
    def __init__(self, choices: _Optional[_Iterable[str]] = ..., numbered: _Optional[bool] = ..., max_lines: _Optional[int] = ...) -> None: ...

class ChatRequest(_message.Message):
    __slots__ = ("model", "messages", "params", "context")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    params: GenerationParams
    context: RequestContext
    def __init__(self, model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., params: _Optional[_Union[GenerationParams, _Mapping]] = ..., context: _Optional[_Union[RequestContext, _Mapping]] = ...) -> None: ...

class CompletionRequest(_message.Message):
    __slots__ = ("model", "prompt", "params", "context")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: str
    params: GenerationParams
    context: RequestContext
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[str] = ..., params: _Optional[_Union[GenerationParams, _Mapping]] = ..., context: _Optional[_Union[RequestContext, _Mapping]] = ...) -> None: ...

class ChatResponse(_message.Message):
    __slots__ = ("texts", "model", "prompt_tokens", "completion_tokens", "cost_usd", "cached", "latency_s", "finish_reasons")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASONS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    cached: bool
    latency_s: float
    finish_reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., cached: _Optional[bool] = ..., latency_s: _Optional[float] = ..., finish_reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class CompletionResponse(_message.Message):
    __slots__ = ("texts", "model", "prompt_tokens", "completion_tokens", "cost_usd", "cached", "latency_s", "finish_reasons")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASONS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    cached: bool
    latency_s: float
    finish_reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., cached: _Optional[bool] = ..., latency_s: _Optional[float] = ..., finish_reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("model", "text", "chat", "candidates", "context")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    text: str
    chat: ChatPrompt
    candidates: _containers.RepeatedScalarFieldContainer[str]
    context: RequestContext
    def __init__(self, model: _Optional[str] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatPrompt, _Mapping]] = ..., candidates: _Optional[_Iterable[str]] = ..., context: _Optional[_Union[RequestContext, _Mapping]] = ...) -> None: ...

class TokenLogprobs(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("logprobs", "token_logprobs", "model", "prompt_tokens", "cost_usd", "cached", "latency_s")
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    token_logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprobs]
    model: str
    prompt_tokens: int
    cost_usd: float
    cached: bool
    latency_s: float
    def __init__(self, logprobs: _Optional[_Iterable[float]] = ..., token_logprobs: _Optional[_Iterable[_Union[TokenLogprobs, _Mapping]]] = ..., model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., cached: _Optional[bool] = ..., latency_s: _Optional[float] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("model", "texts", "context")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    context: RequestContext
    def __init__(self, model: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., context: _Optional[_Union[RequestContext, _Mapping]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("rows", "dim", "vectors", "model", "prompt_tokens", "cost_usd", "cached", "latency_s")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    rows: int
    dim: int
    vectors: bytes
    model: str
    prompt_tokens: int
    cost_usd: float
    cached: bool
    latency_s: float
    def __init__(self, rows: _Optional[int] = ..., dim: _Optional[int] = ..., vectors: _Optional[bytes] = ..., model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., cached: _Optional[bool] = ..., latency_s: _Optional[float] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("model", "text", "chat")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    model: str
    text: str
    chat: ChatPrompt
    def __init__(self, model: _Optional[str] = ..., text: _Optional[str] = ..., chat: _Optional[_Union[ChatPrompt, _Mapping]] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    def __init__(self, tokens: _Optional[int] = ...) -> None: ...

class UsageRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class UsageTotals(_message.Message):
    __slots__ = ("requests", "cache_hits", "model_calls", "errors", "prompt_tokens", "completion_tokens", "cost_usd", "latency_s")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    requests: int
    cache_hits: int
    model_calls: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    def __init__(self, requests: _Optional[int] = ..., cache_hits: _Optional[int] = ..., model_calls: _Optional[int] = ..., errors: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., latency_s: _Optional[float] = ...) -> None: ...

class UsageResponse(_message.Message):
    __slots__ = ("run_id", "totals", "budget_usd", "budget_calls", "usd_remaining", "calls_remaining", "tags")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: UsageTotals
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[UsageTotals, _Mapping]] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    BUDGET_CALLS_FIELD_NUMBER: _ClassVar[int]
    USD_REMAINING_FIELD_NUMBER: _ClassVar[int]
    CALLS_REMAINING_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    totals: UsageTotals
    budget_usd: float
    budget_calls: int
    usd_remaining: float
    calls_remaining: int
    tags: _containers.MessageMap[str, UsageTotals]
    def __init__(self, run_id: _Optional[str] = ..., totals: _Optional[_Union[UsageTotals, _Mapping]] = ..., budget_usd: _Optional[float] = ..., budget_calls: _Optional[int] = ..., usd_remaining: _Optional[float] = ..., calls_remaining: _Optional[int] = ..., tags: _Optional[_Mapping[str, UsageTotals]] = ...) -> None: ...

class SetBudgetRequest(_message.Message):
    __slots__ = ("run_id", "usd", "calls")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    USD_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    usd: float
    calls: int
    def __init__(self, run_id: _Optional[str] = ..., usd: _Optional[float] = ..., calls: _Optional[int] = ...) -> None: ...

class SetBudgetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("id", "backend", "prompt_usd_per_1m", "completion_usd_per_1m", "fallback", "is_default")
    ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PROMPT_USD_PER_1M_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_USD_PER_1M_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    id: str
    backend: str
    prompt_usd_per_1m: float
    completion_usd_per_1m: float
    fallback: str
    is_default: bool
    def __init__(self, id: _Optional[str] = ..., backend: _Optional[str] = ..., prompt_usd_per_1m: _Optional[float] = ..., completion_usd_per_1m: _Optional[float] = ..., fallback: _Optional[str] = ..., is_default: _Optional[bool] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...
