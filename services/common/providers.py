"""Model providers (OpenAI-compatible APIs) are server configuration, never request fields.

A request may name a configured provider; where it is (`base_url`) and which environment variable
holds its key (`api_key_env`) come from here only, so no caller can have a service send one of
its secrets to a host of the caller's choosing. The providers:

- `openai`, always: api.openai.com (or $OPENAI_BASE_URL), key in $OPENAI_API_KEY;
- those of the YAML file named by $LLMRL_PROVIDERS, else the `providers:` section of the
  gateway's configuration file ($LLMRL_LLM_GATEWAY_CONFIG), shaped as

      providers:
        openai: {base_url: https://api.openai.com/v1, api_key_env: OPENAI_API_KEY}
        local-vllm: {base_url: http://127.0.0.1:8100/v1, api_key_env: VLLM_KEY}

The file is parsed again whenever it changes (its modification time or size), so a changed
file applies to the next request without each request parsing it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmrl.common.config import load_yaml

PROVIDERS_ENV = "LLMRL_PROVIDERS"
GATEWAY_CONFIG_ENV = "LLMRL_LLM_GATEWAY_CONFIG"
DEFAULT_PROVIDER = "openai"
PROVIDER_NAME = r"^[A-Za-z0-9_.-]{1,64}$"


class Provider(BaseModel):
    """Where an OpenAI-compatible API is and the variable holding its key (never the key)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="API base URL (None: api.openai.com)")
    api_key_env: str = Field("OPENAI_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class UnknownProviderError(ValueError):
    """A request names a provider that is not configured; names the field and the known ones."""

    def __init__(self, field: str, name: str, known: list[str]) -> None:
        super().__init__(
            f"{field}: unknown provider {name!r}; configured providers: {', '.join(known)} "
            f"(providers are configured in the file named by ${PROVIDERS_ENV})"
        )
        self.field = field


def _providers_file() -> Path | None:
    for variable in (PROVIDERS_ENV, GATEWAY_CONFIG_ENV):
        value = os.environ.get(variable)
        if value:
            return Path(value)
    return None


def configured_providers() -> dict[str, Provider]:
    """Every configured provider by name (`openai` always among them)."""
    providers = {DEFAULT_PROVIDER: Provider(base_url=os.environ.get("OPENAI_BASE_URL") or None)}
    path = _providers_file()
    if path is None:
        return providers
    try:
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        version = None  # let the read below raise its own error, naming the file
    return {**providers, **_file_providers(str(path), version)}


@lru_cache(maxsize=8)
def _file_providers(path: str, version: tuple[int, int] | None) -> dict[str, Provider]:
    """The providers of one version of the file; `version` keys the cache (never read)."""
    del version
    section = load_yaml(path).get("providers") or {}
    if not isinstance(section, dict):
        raise ValueError(f"{path}: providers: expected a mapping of name -> provider")
    providers = {}
    for name, entry in section.items():
        try:
            providers[str(name)] = Provider.model_validate(entry or {})
        except ValidationError as exc:
            raise ValueError(f"{path}: providers.{name}: {exc}") from None
    return providers


def provider(name: str, field: str = "provider") -> Provider:
    """The configured provider `name`, or UnknownProviderError naming `field`."""
    providers = configured_providers()
    if name not in providers:
        raise UnknownProviderError(field, name, sorted(providers))
    return providers[name]


def provider_named_by(base_url: str | None, api_key_env: str, field: str) -> str:
    """The name of the configured provider with this `base_url` and `api_key_env` (how the
    documented recipe keys `openai_base_url`/`openai_api_key_env` map to configuration), or a
    ValueError naming `field` that says how to configure one."""
    wanted = Provider(base_url=base_url or None, api_key_env=api_key_env)
    providers = configured_providers()
    for name, candidate in providers.items():
        if candidate == wanted:
            return name
    raise ValueError(
        f"{field}: no configured provider has base_url {base_url!r} and api_key_env "
        f"{api_key_env!r}; configured providers: {', '.join(sorted(providers))}. Add one to the "
        f"providers of the file named by ${PROVIDERS_ENV} (providers: {{name: {{base_url: ..., "
        "api_key_env: ...}})"
    )
