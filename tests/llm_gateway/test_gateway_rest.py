"""The OpenAI-compatible REST API, driven by the official `openai` client and raw HTTP:
usage fields, cache headers, malformed requests named by field, /metrics and /health."""

from __future__ import annotations

import httpx
import numpy as np
import openai
import pytest

from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer


@pytest.fixture
def rest(gateway):
    server = RestServer(create_app(gateway)).start()
    yield server
    server.stop()


def test_openai_client_chat_completion_and_models(rest):
    client = openai.OpenAI(base_url=f"{rest.url}/v1", api_key="unused")
    chat = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        max_tokens=5,
        extra_headers={"X-LLMRL-Run": "rest-run", "X-LLMRL-Tag": "eval"},
    )
    assert chat.object == "chat.completion" and chat.model == "tiny"
    assert chat.usage.completion_tokens == 5 and chat.usage.prompt_tokens > 5
    assert chat.choices[0].finish_reason == "length"
    completion = client.completions.create(model="tiny", prompt="Once upon", max_tokens=3, n=2)
    assert len(completion.choices) == 2 and completion.usage.completion_tokens == 6
    assert {m.id for m in client.models.list().data} >= {"tiny", "smollm2", "minilm"}
    usage = httpx.get(f"{rest.url}/v1/usage/rest-run").json()
    assert usage["tags"]["eval"]["model_calls"] == 1 and usage["prompt_tokens"] > 5


def test_metadata_carries_the_run_and_cache_header_shows_hits(rest):
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "same question"}],
        "max_tokens": 4,
        "metadata": {"run_id": "meta-run", "tag": "t"},
    }
    first = httpx.post(f"{rest.url}/v1/chat/completions", json=body)
    second = httpx.post(f"{rest.url}/v1/chat/completions", json=body)
    assert first.headers["x-llmrl-cache"] == "miss" and second.headers["x-llmrl-cache"] == "hit"
    assert second.json()["llmrl"] == {
        "cached": True,
        "cost_usd": 0.0,
        "latency_s": second.json()["llmrl"]["latency_s"],
        "run_id": "meta-run",
    }
    bypass = httpx.post(
        f"{rest.url}/v1/chat/completions", json=body, headers={"X-LLMRL-Cache": "bypass"}
    )
    assert bypass.headers["x-llmrl-cache"] == "miss"
    assert httpx.get(f"{rest.url}/v1/usage/meta-run").json()["cache_hits"] == 1


def test_score_and_count_tokens_endpoints(rest):
    body = {"model": "tiny", "prompt": "You see a key.", "candidates": [" take it", " leave"]}
    scored = httpx.post(f"{rest.url}/v1/score", json=body).json()
    assert len(scored["logprobs"]) == 2
    assert scored["logprobs"][0] == pytest.approx(sum(scored["token_logprobs"][0]))
    counted = httpx.post(f"{rest.url}/v1/count_tokens", json={"input": "hello world"}).json()
    assert counted == {"tokens": 2}


USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/chat/completions", {"model": "nope", "messages": USER}, 404, "model"),
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("/v1/chat/completions", {}, 400, "messages"),
        (
            "/v1/chat/completions",
            {"messages": [*USER, {"role": "system", "content": "late"}, *USER]},
            400,
            "messages[1]",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "robot", "content": "x"}]},
            400,
            "messages[0].role",
        ),
        ("/v1/chat/completions", {"messages": USER, "max_tokens": -1}, 400, "max_tokens"),
        ("/v1/chat/completions", {"messages": USER, "temperature": 5}, 400, "temperature"),
        ("/v1/chat/completions", {"messages": USER, "n": "two"}, 400, "n"),
        ("/v1/chat/completions", {"messages": USER, "stream": True}, 400, "stream"),
        ("/v1/chat/completions", {"messages": USER, "model": "tiny:glam"}, 400, "model"),
        ("/v1/completions", {"prompt": 3}, 400, "prompt"),
        ("/v1/embeddings", {"input": []}, 400, "input"),
        ("/v1/score", {"prompt": "p", "candidates": ["a"] * 65}, 400, "candidates"),
        ("/v1/score", {"prompt": "p", "candidates": ["a", ""]}, 400, "candidates[1]"),
        ("/v1/score", {"prompt": "p", "candidates": ["a"], "model": "minilm"}, 400, "model"),
    ],
)
def test_malformed_requests_get_4xx_naming_the_field(rest, path, body, status, param):
    response = httpx.post(f"{rest.url}{path}", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and param.split("[")[0] in error["message"]
    assert httpx.get(f"{rest.url}/health").json()["status"] == "ok"  # still serving


def test_invalid_json_is_a_400(rest):
    response = httpx.post(
        f"{rest.url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "body"


def test_budget_refusal_is_429_with_the_reason(rest):
    httpx.put(f"{rest.url}/v1/budgets/capped", json={"calls": 0}).raise_for_status()
    client = openai.OpenAI(
        base_url=f"{rest.url}/v1", api_key="unused", default_headers={"X-LLMRL-Run": "capped"}
    )
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert "budget exceeded for run 'capped'" in caught.value.message
    bad = httpx.put(f"{rest.url}/v1/budgets/capped", json={"dollars": 3})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "dollars"


def test_metrics_expose_requests_tokens_cost_latency_and_budgets(rest):
    client = openai.OpenAI(base_url=f"{rest.url}/v1", api_key="unused")
    for _ in range(2):
        client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    httpx.put(f"{rest.url}/v1/budgets/watched", json={"usd": 2.5, "calls": 7})
    text = httpx.get(f"{rest.url}/metrics").text
    for line in [
        'llmrl_gateway_requests_total{backend="hf",cache="miss",model="tiny",op="chat"} 1.0',
        'llmrl_gateway_requests_total{backend="hf",cache="hit",model="tiny",op="chat"} 1.0',
        'llmrl_gateway_tokens_total{backend="hf",kind="completion",model="tiny"} 2.0',
        'llmrl_gateway_cost_usd_total{backend="hf",model="tiny"} 0.0',
        "llmrl_gateway_budgeted_runs 1.0",
        "llmrl_gateway_budgets_exhausted 0.0",
    ]:
        assert line in text
    assert "llmrl_gateway_request_latency_seconds_bucket{" in text
    # what is left of one run's budget is in the usage API, not in a series of its own
    usage = httpx.get(f"{rest.url}/v1/usage/watched").json()
    assert usage["budget"]["usd_remaining"] == 2.5 and usage["budget"]["calls_remaining"] == 7


def _series(metrics_text: str) -> set[str]:
    """The series of a Prometheus text exposition: each sample's name and labels."""
    return {
        line.rsplit(" ", 1)[0]
        for line in metrics_text.splitlines()
        if line and not line.startswith("#")
    }


def test_budgets_of_many_runs_add_no_metric_series(rest):
    httpx.put(f"{rest.url}/v1/budgets/first", json={"usd": 1}).raise_for_status()
    before = _series(httpx.get(f"{rest.url}/metrics").text)
    with httpx.Client(base_url=rest.url) as client:
        for i in range(500):
            client.put(f"/v1/budgets/run-{i}", json={"usd": 1, "calls": 3}).raise_for_status()
    after = httpx.get(f"{rest.url}/metrics").text
    assert _series(after) == before
    assert "llmrl_gateway_budgeted_runs 501.0" in after
    assert not any("run-" in series for series in _series(after))


def test_embeddings_through_the_openai_client(make_gateway):
    gateway = make_gateway()
    server = RestServer(create_app(gateway)).start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        # the client asks for base64 by default; float is the other encoding
        response = client.embeddings.create(model="minilm", input=["chop tree", "collect wood"])
        floats = client.embeddings.create(
            model="minilm", input=["chop tree", "collect wood"], encoding_format="float"
        )
    finally:
        server.stop()
    vectors = np.array([d.embedding for d in response.data])
    assert vectors.shape == (2, 384) and response.usage.prompt_tokens > 0
    assert np.allclose(vectors, np.array([d.embedding for d in floats.data]), atol=1e-6)


def test_a_model_that_cannot_load_fails_alone(make_gateway, tmp_path):
    missing = str(tmp_path / "no-such-model")
    gateway = make_gateway(models={"ghost": {"backend": "hf", "path": missing}})
    server = RestServer(create_app(gateway)).start()
    try:
        body = {"messages": USER, "max_tokens": 2}
        failed = httpx.post(
            f"{server.url}/v1/chat/completions", json={**body, "model": "ghost"}, timeout=60
        )
        served = httpx.post(
            f"{server.url}/v1/chat/completions", json={**body, "model": "tiny"}, timeout=60
        )
    finally:
        server.stop()
    assert failed.status_code == 500
    assert "model 'ghost' cannot be loaded" in failed.json()["error"]["message"]
    assert served.status_code == 200 and len(served.json()["choices"]) == 1


@pytest.mark.parametrize(
    "model",
    [
        "tiny:../../../etc@passwd",
        "tiny:..@1",
        "tiny:glam@..",
        "tiny:glam@1/../../x",
        "tiny:glam",
        "tiny:@1",
        "tiny:a@b@c",
    ],
)
def test_adapter_references_outside_the_pattern_are_400_naming_model(rest, model):
    answer = httpx.post(
        f"{rest.url}/v1/chat/completions",
        json={"model": model, "messages": USER, "max_tokens": 2},
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "model" and "<model>:<adapter>@<version>" in error["message"]
    # beyond the echoed reference, no path (resolved or not) is shown
    assert "/" not in error["message"].replace(model.partition(":")[2], "")


def test_an_unknown_adapter_is_refused_without_showing_a_path(rest, tmp_path):
    answer = httpx.post(
        f"{rest.url}/v1/chat/completions",
        json={"model": "tiny:nosuch@1", "messages": USER, "max_tokens": 2},
    )
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "model"
    message = answer.json()["error"]["message"]
    assert "adapter 'nosuch@1'" in message and "/" not in message
