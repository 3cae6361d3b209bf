"""Providers are configuration: a request picks one by name."""

from __future__ import annotations

import pytest
from support.providers import configure_providers

from llmrl.common.providers import (
    Provider,
    UnknownProviderError,
    configured_providers,
    provider,
    provider_named_by,
)


def test_openai_is_always_configured_and_files_add_providers(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("LLMRL_PROVIDERS", raising=False)
    monkeypatch.delenv("LLMRL_LLM_GATEWAY_CONFIG", raising=False)
    assert configured_providers() == {"openai": Provider()}
    configure_providers(
        monkeypatch, tmp_path, vllm={"base_url": "http://h:1/v1", "api_key_env": "K"}
    )
    assert provider("vllm") == Provider(base_url="http://h:1/v1", api_key_env="K")
    assert provider_named_by("http://h:1/v1", "K", "openai_base_url") == "vllm"
    with pytest.raises(
        UnknownProviderError,
        match=r"^provider: unknown provider 'x'; configured providers: openai, vllm",
    ):
        provider("x")
    with pytest.raises(ValueError, match=r"^openai_base_url: no configured provider"):
        provider_named_by("http://h:1/v1", "OTHER", "openai_base_url")


def test_the_gateway_configuration_can_hold_the_providers(tmp_path, monkeypatch):
    import yaml

    from llmrl.llm_gateway.settings import load_settings

    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"providers": {"lab": {"base_url": "http://lab/v1"}}}))
    monkeypatch.delenv("LLMRL_PROVIDERS", raising=False)
    monkeypatch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(config))
    assert provider("lab").base_url == "http://lab/v1"
    assert load_settings(config_file=config).providers["lab"].base_url == "http://lab/v1"


def test_a_malformed_provider_entry_names_it(tmp_path, monkeypatch):
    configure_providers(monkeypatch, tmp_path, bad={"url": "http://x"})
    with pytest.raises(ValueError, match=r"providers\.bad"):
        configured_providers()


def test_the_file_is_parsed_once_per_version_and_a_change_applies_to_the_next_call(
    tmp_path, monkeypatch
):
    import os

    import yaml

    import llmrl.common.providers as providers_module

    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump({"providers": {"lab": {"base_url": "http://a/v1"}}}))
    monkeypatch.setenv("LLMRL_PROVIDERS", str(path))
    reads = []
    real_load = providers_module.load_yaml
    monkeypatch.setattr(providers_module, "load_yaml", lambda p: reads.append(p) or real_load(p))
    assert provider("lab").base_url == "http://a/v1"
    assert provider("lab").base_url == "http://a/v1"
    assert len(reads) == 1
    path.write_text(yaml.safe_dump({"providers": {"lab": {"base_url": "http://bb/v1"}}}))
    stat = path.stat()  # a coarse clock could leave the time as it was; the size differs
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert provider("lab").base_url == "http://bb/v1"
    assert len(reads) == 2
