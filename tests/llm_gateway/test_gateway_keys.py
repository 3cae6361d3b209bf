"""Gateway-issued keys, driven by the official openai client: a key spends only its own budget
(run `key:<id>`, 429 when spent) on the models it allows; expired, revoked and unknown keys get
the same 401; managing keys needs the shared token; no key or key id leaks to storage, the
listing or /metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from llmrl.common.auth import UNAUTHORIZED_DETAIL
from llmrl.llm_gateway.keys import KEY_PREFIX
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

TOKEN = "service-t0ken"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
PAID = {"prompt_usd_per_1m": 1000.0, "completion_usd_per_1m": 1000.0}  # $0.001 per token


@pytest.fixture
def served(make_gateway: Any, tiny_model_dir: Any) -> Iterator[tuple[Any, str]]:
    other = {"backend": "hf", "path": str(tiny_model_dir), "dtype": "float32"}
    gateway = make_gateway(models={"tiny": PAID, "other": other})
    server = RestServer(create_app(gateway, token=TOKEN)).start()
    yield gateway, server.url
    server.stop()


def issue(url: str, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{url}/v1/keys", json=body, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()


def client(url: str, key: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key=key, max_retries=0, default_headers=headers or None
    )


def chat(openai_client: openai.OpenAI, text: str) -> Any:
    return openai_client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": text}], max_tokens=4
    )


def test_a_key_spends_only_its_own_budget_then_gets_429(served):
    gateway, url = served
    gateway.set_budget("victim", usd=100.0)
    issued = issue(url, budget_usd=0.2, models=["tiny"], name="student")
    key, key_id = issued["key"], issued["id"]
    assert key.startswith("sk-llmrl-") and issued["budget_usd"] == 0.2
    # the run header cannot move the spending onto another run's budget
    student = client(url, key, **{"X-LLMRL-Run": "victim", "X-LLMRL-Cache": "bypass"})
    first = chat(student, "hello")
    assert first.model_extra["llmrl"]["run_id"] == f"key:{key_id}"
    score = httpx.post(
        f"{url}/v1/score",
        json={"prompt": "pick", "candidates": ["a", "b"]},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert score.status_code == 200 and score.json()["llmrl"]["run_id"] == f"key:{key_id}"
    with pytest.raises(openai.RateLimitError):
        for i in range(200):  # each request reserves ~$0.03: the budget runs out quickly
            chat(student, f"request {i}")
    usage = gateway.usage(f"key:{key_id}")
    assert 0 < usage["cost_usd"] <= 0.2
    assert gateway.usage("victim")["requests"] == 0  # nothing spent elsewhere

    rows = httpx.get(f"{url}/v1/keys", headers=ADMIN).json()["data"]
    (row,) = [r for r in rows if r["id"] == key_id]
    assert row["spent_usd"] == pytest.approx(usage["cost_usd"])
    assert row["budget_usd"] == 0.2 and row["models"] == ["tiny"] and not row["revoked"]
    listing = httpx.get(f"{url}/v1/keys", headers=ADMIN).text
    assert key not in listing and "digest" not in listing
    assert key_id not in httpx.get(f"{url}/metrics", headers=ADMIN).text


def test_a_key_calls_only_its_models_and_endpoints(served):
    _, url = served
    issued = issue(url, budget_usd=1.0, models=["tiny"])
    student = client(url, issued["key"])
    with pytest.raises(openai.PermissionDeniedError):
        student.chat.completions.create(
            model="other", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    with pytest.raises(openai.PermissionDeniedError):  # the default embedding model is not tiny
        student.embeddings.create(model="minilm", input=["hi"])
    assert [m.id for m in student.models.list()] == ["tiny"]
    as_key = {"Authorization": f"Bearer {issued['key']}"}
    for method, path, body in (
        ("PUT", f"/v1/budgets/key:{issued['id']}", {"usd": 1000}),
        ("POST", "/v1/keys", {"budget_usd": 1000}),
        ("GET", "/v1/keys", None),
        ("DELETE", f"/v1/keys/{issued['id']}", None),
        ("GET", "/metrics", None),
    ):
        answer = httpx.request(method, f"{url}{path}", json=body, headers=as_key)
        assert answer.status_code == 403, (path, answer.text)
    assert len(httpx.get(f"{url}/v1/keys", headers=ADMIN).json()["data"]) == 1


def test_expired_revoked_and_unknown_keys_get_the_same_401(served):
    gateway, url = served
    expired = issue(url, budget_usd=1.0, expires_in_s=3600)
    record = gateway.keys.get(expired["id"])
    record.expires_at = time.time() - 1  # an hour later
    gateway.keys.put(record)
    revoked = issue(url, budget_usd=1.0)
    assert chat(client(url, revoked["key"]), "still fine").choices
    answer = httpx.delete(f"{url}/v1/keys/{revoked['id']}", headers=ADMIN)
    assert answer.status_code == 200 and answer.json()["revoked"] is True
    unknown = "sk-llmrl-000000000000-" + "x" * 43
    wrong_secret = revoked["key"][:-4] + "abcd"
    for key in (expired["key"], revoked["key"], unknown, wrong_secret, "sk-llmrl-"):
        with pytest.raises(openai.AuthenticationError) as refused:
            chat(client(url, key), "hi")
        assert refused.value.body == UNAUTHORIZED_DETAIL or refused.value.response.json() == {
            "detail": UNAUTHORIZED_DETAIL
        }
    assert httpx.delete(f"{url}/v1/keys/nope", headers=ADMIN).status_code == 404
    rows = {r["id"]: r for r in httpx.get(f"{url}/v1/keys", headers=ADMIN).json()["data"]}
    assert not rows[expired["id"]]["usable"] and rows[revoked["id"]]["revoked"]


def test_managing_keys_needs_the_shared_token_and_checks_fields(served, tmp_path):
    gateway, url = served
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = httpx.post(f"{url}/v1/keys", json={"budget_usd": 1}, headers=headers)
        assert answer.status_code == 401
        assert httpx.get(f"{url}/v1/keys", headers=headers).status_code == 401
    for body, field in (
        ({}, "budget_usd"),
        ({"budget_usd": -1}, "budget_usd"),
        ({"budget_usd": "ten"}, "budget_usd"),
        ({"budget_usd": 1, "expires_in_s": 0}, "expires_in_s"),
        ({"budget_usd": 1, "models": ["gpt-9"]}, "models"),
        ({"budget_usd": 1, "owner": "me"}, "owner"),
    ):
        answer = httpx.post(f"{url}/v1/keys", json=body, headers=ADMIN)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["param"] == field
    issued = issue(url, budget_usd=1.0)
    # only the key's digest is saved (beside the ledger), never the key
    saved = b"".join(path.read_bytes() for path in tmp_path.glob("llm_keys.sqlite*"))
    assert gateway.keys.get(issued["id"]).digest.encode() in saved
    assert issued["key"].encode() not in saved
    # the secret is URL-safe base64, which may itself hold "-": cut the known prefix off
    secret = issued["key"].removeprefix(f"{KEY_PREFIX}{issued['id']}-")
    assert len(secret) == 43 and secret.encode() not in saved
