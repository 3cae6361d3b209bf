"""The `openai` backend against a fake OpenAI-compatible provider on 127.0.0.1: retries that
honour Retry-After, fallback, timeouts, prices from the table, and API keys that never leak."""

from __future__ import annotations

import itertools
import json
import logging

import httpx
import pytest
from support.fake_provider import Behaviour

from llmrl.common.logs import JsonFormatter
from llmrl.llm_gateway.api_types import EmbedRequest, GenerateRequest
from llmrl.llm_gateway.errors import GatewayTimeoutError, UpstreamError
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

SECRET = "sk-test-0123456789abcdefSECRET"


@pytest.fixture
def remote_gateway(make_gateway, provider, monkeypatch):
    base_url, state = provider
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", SECRET)

    def remote(model_id: str, **extra):
        return {
            "backend": "openai",
            "base_url": base_url,
            "remote_model": model_id,
            "api_key_env": "FAKE_PROVIDER_API_KEY",
            "backoff_s": 0.01,
            "max_backoff_s": 0.05,
            **extra,
        }

    models = {
        "flaky": remote("flaky-1"),
        "broken": remote("broken-1", fallback="backup", max_retries=2),
        "backup": remote("backup-1"),
        "slow": remote("slow-1", max_retries=0),
        "leaky": remote("leaky-1"),
        "priced": remote("gpt-4o-mini"),  # priced from the built-in table
        "remote-embed": remote("embed-1", prompt_usd_per_1m=0.5),
    }
    state.behaviours.update(
        {
            "broken-1": Behaviour(always_fail=True, status=503),
            "slow-1": Behaviour(delay_s=1.0),
            "leaky-1": Behaviour(leak_key=True),
        }
    )
    return make_gateway(models=models), state


def ask(gateway, model, **kwargs):
    request = GenerateRequest(
        messages=[{"role": "user", "content": "ping"}], model=model, max_tokens=5, **kwargs
    )
    return gateway.generate(request)


def test_retries_honour_retry_after_on_429(remote_gateway):
    gateway, state = remote_gateway
    state.behaviours["flaky-1"] = Behaviour(fail_next=2, status=429, retry_after="0.3")
    result = ask(gateway, "flaky", cache="bypass")
    assert result.texts == ["echo: ping"] and result.model == "flaky"
    received = state.requests_for("flaky-1")[-3:]
    assert len(received) == 3
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(received)]
    assert min(gaps) >= 0.3  # waited as long as the provider asked, not the 0.01 s backoff
    assert received[0].authorization == f"Bearer {SECRET}"  # the key from the environment
    metrics = gateway.metrics.render().decode()
    assert 'llmrl_gateway_retries_total{model="flaky",reason="429"} 2.0' in metrics


def test_server_errors_fall_back_to_the_configured_model(remote_gateway):
    gateway, state = remote_gateway
    result = ask(gateway, "broken", run_id="fb")
    assert result.model == "backup" and result.texts == ["echo: ping"]
    assert len(state.requests_for("broken-1")) == 3  # 1 try + max_retries=2
    # an answer from the fallback is not cached as the primary's
    assert not ask(gateway, "broken", run_id="fb").cached


def test_a_slow_provider_hits_the_request_timeout(remote_gateway):
    gateway, _ = remote_gateway
    with pytest.raises(GatewayTimeoutError) as caught:
        ask(gateway, "slow", timeout_s=0.4)
    assert caught.value.field == "timeout_s"
    assert ask(gateway, "flaky").texts == ["echo: ping"]  # the gateway keeps serving


def test_prices_come_from_the_table_and_count_provider_tokens(remote_gateway):
    gateway, _ = remote_gateway
    result = ask(gateway, "priced", run_id="priced")
    # gpt-4o-mini in defaults.yaml: $0.15 / $0.60 per million prompt / completion tokens
    expected = (result.prompt_tokens * 0.15 + result.completion_tokens * 0.60) / 1e6
    assert result.cost_usd == pytest.approx(expected) and result.cost_usd > 0
    assert gateway.usage("priced")["cost_usd"] == pytest.approx(expected)
    completion = gateway.generate(GenerateRequest(prompt="Once upon", model="priced"))
    assert completion.texts == [" and so on"] and completion.prompt_tokens == 5
    embedded = gateway.embed(EmbedRequest(texts=["a", "bb"], model="remote-embed"))
    assert embedded.vectors.shape == (2, 3) and embedded.cost_usd == pytest.approx(2 * 0.5 / 1e6)


def test_api_keys_never_reach_errors_logs_or_metrics(remote_gateway, caplog):
    gateway, state = remote_gateway
    formatter = JsonFormatter("llm_gateway")
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(UpstreamError) as caught:
            ask(gateway, "leaky")
        server = RestServer(create_app(gateway)).start()
        try:
            response = httpx.post(
                f"{server.url}/v1/chat/completions",
                json={"model": "leaky", "messages": [{"role": "user", "content": "x"}]},
            )
            metrics = httpx.get(f"{server.url}/metrics").text
        finally:
            server.stop()
    assert state.requests_for("leaky-1")[-1].authorization == f"Bearer {SECRET}"
    assert "401" in str(caught.value)  # the provider's answer is reported...
    assert SECRET not in str(caught.value)  # ...without the key it quoted
    assert response.status_code == 502 and SECRET not in response.text
    assert SECRET not in metrics and "llmrl_gateway_errors_total" in metrics
    logged = "\n".join(formatter.format(record) for record in caplog.records)
    assert SECRET not in logged and SECRET not in json.dumps(gateway.usage("default"))
