"""Gateway configuration: models, the price table, cache and limits (pydantic, extra keys
forbidden so a typo is an error that names the key).

Settings come from `defaults.yaml` (next to this file) with the user's YAML and overrides
merged over it; models are merged by name. `print_models(config_file)` backs `llmrl models`.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from llmrl.common import config as common_config
from llmrl.common.providers import Provider
from llmrl.llm_gateway.errors import InvalidRequestError, UnknownModelError

DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")
CONFIG_ENV_VAR = "LLMRL_LLM_GATEWAY_CONFIG"  # a YAML file merged over the defaults


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Price(_Strict):
    prompt: float = Field(0.0, ge=0, description="USD per million prompt tokens")
    completion: float = Field(0.0, ge=0, description="USD per million completion tokens")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


class ModelConfig(_Strict):
    """What every configured model has, whatever serves it: its backend (a registered name),
    its price and the gateway's reliability settings. Each backend declares its own settings
    as a subclass (`Backend.settings_model`: `hf`'s path, dtype and batching, `openai`'s base
    URL and key variable...), so a new backend with a new setting edits only its own module;
    `parse_model` validates an entry with its backend's model."""

    backend: str
    # price override (USD per million tokens); None: the price table, else 0
    prompt_usd_per_1m: float | None = Field(None, ge=0)
    completion_usd_per_1m: float | None = Field(None, ge=0)
    # reliability: the gateway core retries remote backends, falls back, times out
    fallback: str | None = None
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0)
    backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(20.0, ge=0)

    def source(self, name: str) -> str:
        """Where the model comes from, for listings (`llmrl models`)."""
        return ""

    def provider_model(self, name: str) -> str:
        """The model's name at its provider (the price table may list it so)."""
        return name


def backend_settings_model(backend: str) -> type[ModelConfig]:
    """The settings model the registered backend `backend` declares (found without importing
    its provider's packages: backend modules import those when a model loads)."""
    from llmrl.common.registry import UnknownNameError, registry

    try:
        entry = registry.entry("backend", backend)
    except UnknownNameError as exc:
        raise ValueError(str(exc)) from None
    return getattr(entry.obj, "settings_model", ModelConfig)


def parse_model(name: str, data: dict[str, Any] | ModelConfig) -> ModelConfig:
    """Model `name`'s entry validated by its backend's settings model; a ValidationError
    whose locations start at `models.<name>`."""
    if isinstance(data, ModelConfig):
        return data
    backend = data.get("backend") if isinstance(data, dict) else None
    try:
        if not isinstance(backend, str):
            raise ValueError("name the model's backend (a registered backend name)")
        model = backend_settings_model(backend)
    except ValueError as exc:
        raise ValidationError.from_exception_data(
            "ModelConfig",
            [{"type": "value_error", "loc": ("models", name, "backend"), "input": backend,
              "ctx": {"error": exc}}],
        ) from None  # fmt: skip
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationError.from_exception_data(
            "ModelConfig",
            [{**err, "loc": ("models", name, *err["loc"])} for err in exc.errors()],
        ) from None


class CacheSettings(_Strict):
    backend: Literal["auto", "sqlite", "redis", "none"] = "auto"
    ttl_s: float = Field(7 * 24 * 3600, ge=0)
    sqlite_path: str | None = None
    redis_url: str | None = None
    prefix: str = "llmrl:llm_cache:"
    memory_entries: int = Field(10_000, ge=0)  # in-process LRU in front (0: none)
    share: Literal["per_key", "global"] = Field(
        "per_key",
        description=(
            "who shares cached answers. per_key: each gateway-issued key has its own namespace "
            "(one tenant never receives an answer another paid for, nor learns what it asked); "
            "callers with the service token (and in-process or gRPC callers) share one. "
            "global: every caller shares one cache"
        ),
    )


class LedgerSettings(_Strict):
    backend: Literal["auto", "sqlite", "redis", "memory"] = "auto"  # auto: as the cache
    sqlite_path: str | None = None  # default: $LLMRL_HOME/llm_ledger.sqlite
    redis_url: str | None = None  # default: $LLMRL_REDIS_URL
    key: str = "llmrl:llm_ledger"
    flush_interval_s: float = Field(0.5, gt=0)
    record_calls: bool = Field(
        True,
        description=(
            "keep every call of a run (the request as hashed and the answer) beside its totals, "
            "so that `llmrl runs export` can bundle the run for `llmrl replay`; the catch-all "
            "run 'default' and issued keys' spending keep none"
        ),
    )


MAX_CONCURRENT = 1024  # the most requests in flight a tenant's limit may allow


class Limits(_Strict):
    max_candidates: int = Field(64, ge=1)
    max_embed_texts: int = Field(2048, ge=1)
    # bounded work: a request over these is refused before any model sees it
    max_body_bytes: int = Field(4 << 20, ge=1024)  # REST request bodies (413)
    max_prompt_tokens: int = Field(32_768, ge=16)  # prompt + candidates of one score/chat (413)
    max_score_tokens: int = Field(
        16_384,
        ge=16,
        description=(
            "the compute cap of one score request (413): prompt tokens + candidates x the "
            "longest candidate's tokens, the padded work its candidate pass computes"
        ),
    )
    max_embed_chars: int = Field(1 << 20, ge=1)  # all texts of one embedding request (413)
    # the longest timeout a request may ask for (X-LLMRL-Timeout, timeout_s, a gRPC deadline)
    max_timeout_s: float = Field(600.0, gt=0, le=3600)
    max_prompt_chars: int = Field(
        1 << 18,
        ge=16,
        description=(
            "characters of one prompt (a chat's contents or a completion's prompt, with a "
            "score's candidates; count_tokens' input), refused (413) before it is tokenized"
        ),
    )
    route_max_body_bytes: dict[str, int] = Field(
        default_factory=lambda: {"/v1/count_tokens": 1 << 20},
        description=(
            "a tighter body limit (bytes, 413) for a route, by path, checked on the declared "
            "length before any byte is read; max_body_bytes bounds every other route (a "
            "user's map is merged over this one by path)"
        ),
    )
    # per-tenant limits: each gateway-issued key is a tenant; the service token's callers
    # (REST and gRPC) are one more. A key's own values (set when it is issued) win.
    key_max_concurrent: int | None = Field(
        None,
        ge=1,
        le=MAX_CONCURRENT,
        description=(
            "requests of one issued key in flight at once (429 beyond, before its body is "
            "read). None: half the smallest max_batch_size of the configured local models "
            "(4 with the built-in smollm2), so that one key never fills a batch; 8 without "
            "local models"
        ),
    )
    key_tokens_per_minute: int | None = Field(
        100_000,
        ge=1,
        description=(
            "prompt + completion tokens one issued key's requests may have a model compute "
            "per minute, local models included whatever their price (429 until enough of "
            "them leave the window; cache hits are free). None: no limit"
        ),
    )
    service_max_concurrent: int | None = Field(
        None, ge=1, description="as key_max_concurrent, for the service token's callers (REST "
        "and gRPC; in-process callers are never limited). None: no limit",
    )  # fmt: skip
    service_tokens_per_minute: int | None = Field(
        None, ge=1, description="as key_tokens_per_minute, for the service token's callers. "
        "None: no limit",
    )  # fmt: skip
    rate_window_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description=(
            "the sliding window tokens are counted over: within any window a tenant may use "
            "tokens_per_minute x rate_window_s / 60 tokens"
        ),
    )
    fair_queue: bool = Field(
        True,
        description=(
            "a local model's requests enter its (first-come) batching queue through a fair "
            "gate: at most its max_batch_size at once (fair_queue_depth while tenants share "
            "it), the others waiting in the gateway and let in tenant by tenant: the one with "
            "the fewest at the model first, then the one let in least recently. false: "
            "straight into the queue, in arrival order"
        ),
    )
    fair_queue_depth: int | None = Field(
        None,
        ge=1,
        le=4096,
        description=(
            "requests a local model holds at once (running or queued) while more than one "
            "tenant uses it (has requests there, or had one let in within the last second). "
            "None: 1 for a deterministic model (its rows run one at a time anyway, so a batch "
            "only makes the others wait), else its max_batch_size. One tenant alone may have "
            "up to max_batch_size there"
        ),
    )

    @field_validator("route_max_body_bytes")
    @classmethod
    def _route_paths(cls, value: dict[str, int]) -> dict[str, int]:
        for path, size in value.items():
            if not path.startswith("/v1/"):
                raise ValueError(f"{path!r}: name a route by its path (/v1/...)")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{path}: the limit must be a positive number of bytes")
        return value


class GatewaySettings(_Strict):
    default_model: str = "smollm2"
    default_embedding_model: str = "minilm"
    # torch intra-op threads local models compute on, in every mode (also set process-wide
    # when given). None: $OMP_NUM_THREADS, else the cores the process may use
    # (`common.threads.stated_thread_count`); on a busy shared machine 1 is much faster.
    torch_threads: int | None = Field(None, ge=1)
    # each a subclass (its backend's settings model): serialized with its own fields
    models: dict[str, SerializeAsAny[ModelConfig]] = Field(default_factory=dict)
    # named OpenAI-compatible providers ({base_url, api_key_env}) that the learner's fine-tuning
    # jobs may name (llmrl.common.providers reads them); the gateway itself does not use them
    providers: dict[str, Provider] = Field(default_factory=dict)
    prices: dict[str, Price] = Field(default_factory=dict)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    ledger: LedgerSettings = Field(default_factory=LedgerSettings)
    limits: Limits = Field(default_factory=Limits)

    @field_validator("models", mode="before")
    @classmethod
    def _by_backend(cls, value: Any) -> Any:
        """Each model by its backend's own settings model (load_settings parses them first,
        so that an error's location names the model; this covers settings built in code)."""
        if not isinstance(value, dict):
            return value
        return {name: parse_model(name, data) for name, data in value.items()}

    @model_validator(mode="after")
    def _check_references(self) -> GatewaySettings:
        for name, model in self.models.items():
            if model.fallback is not None and model.fallback not in self.models:
                raise ValueError(f"models.{name}.fallback: unknown model {model.fallback!r}")
            if ":" in name or "@" in name:
                raise ValueError(f"models.{name}: model names may not contain ':' or '@'")
        return self

    def model(self, name: str) -> ModelConfig:
        if name not in self.models:
            raise UnknownModelError(
                f"model: unknown model {name!r}; configured models: {', '.join(self.models)}",
                "model",
            )
        return self.models[name]

    def price(self, name: str) -> Price:
        """The price of model `name`: its own override, else the table, else free."""
        model = self.models[name]
        table = self.prices.get(name) or self.prices.get(model.provider_model(name)) or Price()
        return Price(
            prompt=table.prompt if model.prompt_usd_per_1m is None else model.prompt_usd_per_1m,
            completion=(
                table.completion
                if model.completion_usd_per_1m is None
                else model.completion_usd_per_1m
            ),
        )


def merge_settings(base: dict[str, Any], update: dict[str, Any], path: str = "") -> dict[str, Any]:
    """`update` merged into gateway settings `base` (changed in place, and returned)."""
    for key, value in update.items():
        # models are merged by name (and each model's keys over the built-in ones)
        mergeable = path in (
            "",
            "models",
            "cache",
            "ledger",
            "limits",
            "prices",
            "limits.route_max_body_bytes",
        )
        if path == "models" and isinstance(value, dict) and isinstance(base.get(key), dict):
            # another backend's model under a built-in name: its keys, not a mix of both
            mergeable = value.get("backend") in (None, base[key].get("backend"))
        if mergeable and isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_settings(base[key], value, f"{path}.{key}" if path else key)
        else:
            base[key] = value
    return base


def load_settings(
    settings: dict[str, Any] | GatewaySettings | None = None, config_file: str | Path | None = None
) -> GatewaySettings:
    """Defaults, then the YAML file (`config_file`, else $LLMRL_LLM_GATEWAY_CONFIG), then
    `settings` (a dict of overrides) merged over them."""
    if isinstance(settings, GatewaySettings):
        return settings
    data = common_config.load_yaml(DEFAULTS_FILE)
    # the process's gateway configuration file, so that every in-process gateway (embedded
    # runs, their rollout workers, the learner finding a model's weights) sees one model set
    config_file = config_file or os.environ.get(CONFIG_ENV_VAR) or None
    if config_file is not None:
        merge_settings(data, common_config.load_yaml(config_file))
    overrides = copy.deepcopy(settings or {})
    nested_file = overrides.pop("config", None)
    if nested_file:
        merge_settings(data, common_config.load_yaml(nested_file))
    merge_settings(data, overrides)
    try:
        models = data.get("models")
        if isinstance(models, dict):  # by backend here, so that errors name the model's key
            data["models"] = _parse_models(models)
        return GatewaySettings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise InvalidRequestError(f"invalid gateway settings: {problems}", "settings") from None


def _parse_models(models: dict[str, Any]) -> dict[str, ModelConfig]:
    """Every model by its backend's settings model; one ValidationError with all problems."""
    parsed, errors = {}, []
    for name, entry in models.items():
        try:
            parsed[name] = parse_model(name, entry)
        except ValidationError as exc:
            errors.extend(exc.errors())
    if errors:
        raise ValidationError.from_exception_data("GatewaySettings", errors)
    return parsed


def print_models(config_file: str | None = None) -> None:
    """Print the configured models (`llmrl models`)."""
    from rich.table import Table

    from llmrl.common.console import output_console

    settings = load_settings(config_file=config_file)
    table = Table(title="configured models")
    for column in ("model", "backend", "source", "USD/1M prompt", "USD/1M completion", "notes"):
        table.add_column(column)
    for name, model in settings.models.items():
        price = settings.price(name)
        source = model.source(name)
        notes = []
        if name == settings.default_model:
            notes.append("default chat model")
        if name == settings.default_embedding_model:
            notes.append("default embedding model")
        if model.fallback:
            notes.append(f"fallback: {model.fallback}")
        adapters = getattr(model, "adapters", None)
        if adapters:
            notes.append("adapters: " + ", ".join(adapters))
        table.add_row(
            name,
            model.backend,
            source,
            f"{price.prompt:g}",
            f"{price.completion:g}",
            "; ".join(notes),
        )
    output_console().print(table)  # piped (scripts, tests): whole lines, not wrapped cells
