"""The JSON boundary of every HTTP service (issue 52, findings 3 and 4): on every body route of
the gateway, the orchestrator, the learner and the annotator, a body nested deeper than 64
levels, an integer beyond int64 or a non-finite number is a 400 naming the field, answered by
the shared guard before any parser or model sees it (no RecursionError, no OverflowError), and
the service keeps answering."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from support.service_apps import SERVICES, service_apps

from llmrl.common.json_limits import MAX_JSON_DEPTH, JsonLimitError, check_json_body

BIG = "9" * 400  # a 400-digit integer literal
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def clients(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, TestClient]]:
    home = tmp_path_factory.mktemp("boundary-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_HOME", str(home))
        apps = service_apps(tiny_model_dir, home)
        clients = {
            name: TestClient(app, raise_server_exceptions=False) for name, app in apps.items()
        }
        for client in clients.values():
            client.__enter__()
        yield clients
        for client in clients.values():
            client.__exit__(None, None, None)


def body_routes(client: TestClient) -> list[tuple[str, str]]:
    """(method, path) of every operation with a body, path parameters filled in."""
    routes = []
    for path, item in client.app.openapi()["paths"].items():
        concrete = "/".join("x" if p.startswith("{") else p for p in path.split("/"))
        routes += [(m.upper(), concrete) for m in item if m in ("post", "put", "patch")]
    assert routes
    return routes


def refusal(response: Any) -> tuple[str, str]:
    """(field, message) of a refusal, in either error shape (the gateway's is OpenAI's)."""
    body = response.json()
    if "error" in body:
        return body["error"]["param"], body["error"]["message"]
    return body["field"], body["detail"]


def send(client: TestClient, method: str, path: str, body: bytes) -> Any:
    return client.request(method, path, content=body, headers=JSON)


def assert_refused(response: Any, field: str, words: str) -> None:
    assert response.status_code == 400, response.text[:300]
    named, message = refusal(response)
    assert named == field and words in message, (named, message[:200])


DEEP_ARRAY = b"[" * 50_000 + b"]" * 50_000
DEEP_OBJECT = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
# under Python's recursion limit, over the bound: a lone surrogate inside made it a 500
SURROGATE_INSIDE = b"[" * 990 + b'"\\ud800"' + b"]" * 990


@pytest.mark.parametrize("service", SERVICES)
def test_deep_nesting_is_a_400_naming_where_on_every_body_route(clients, service):
    client = clients[service]
    deepest = "body" + "[0]" * MAX_JSON_DEPTH
    for method, path in body_routes(client):
        for body in (DEEP_ARRAY, SURROGATE_INSIDE):
            assert_refused(send(client, method, path, body), deepest, "nested deeper than 64")
        refused = send(client, method, path, DEEP_OBJECT)
        assert_refused(refused, "body" + ".a" * MAX_JSON_DEPTH, "nested deeper than 64")
    assert client.get("/health").status_code == 200


OUT_OF_BOUNDS = [(BIG, "integer out of range"), ("-" + BIG, "integer out of range"),
                 ("1e400", "finite"), ("NaN", "finite"), ("-Infinity", "finite")]  # fmt: skip


@pytest.mark.parametrize("service", SERVICES)
def test_big_and_non_finite_numbers_are_a_400_naming_the_field(clients, service):
    client = clients[service]
    for method, path in body_routes(client):
        for literal, words in OUT_OF_BOUNDS:
            body = f'{{"x": {{"items": [1, {literal}]}}}}'.encode()
            assert_refused(send(client, method, path, body), "body.x.items[1]", words)
    assert client.get("/health").status_code == 200


def test_the_gateway_budget_and_key_fields_are_named(clients):
    client = clients["llm_gateway"]
    for literal in (BIG, "1e400", "9223372036854775808"):
        refused = send(client, "PUT", "/v1/budgets/x", f'{{"usd": {literal}}}'.encode())
        assert_refused(refused, "body.usd", "")
        refused = send(client, "POST", "/v1/keys", f'{{"budget_usd": {literal}}}'.encode())
        assert_refused(refused, "body.budget_usd", "")
        body = f'{{"prompt": "hi", "temperature": {literal}}}'.encode()
        assert_refused(send(client, "POST", "/v1/completions", body), "body.temperature", "")
    assert client.get("/v1/usage/x").json()["budget"]["usd"] is None  # no infinite budget


def test_the_orchestrator_fields_are_named(clients):
    client = clients["orchestrator"]
    body = f'{{"recipe": "evaluate", "seeds": [0, {BIG}]}}'.encode()
    assert_refused(send(client, "POST", "/experiments", body), "body.seeds[1]", "integer")
    body = f'{{"recipe": "evaluate", "config": {{"seed": {BIG}}}}}'.encode()
    assert_refused(send(client, "POST", "/runs", body), "body.config.seed", "integer")


def test_bodies_within_the_bounds_pass():
    for body in (
        b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH,
        json.dumps({"a": [9223372036854775807, -9223372036854775807, 1e308, 1e-400]}).encode(),
        json.dumps({"text": "[[[[" * 100 + "\\" * 7 + '"', "emoji": "\U0001f600"}).encode(),
        b"not json [[[[" + b"[" * 100,  # not JSON: the service's own parsing answers
    ):
        check_json_body(body)


def test_a_key_names_its_place_and_brackets_in_strings_do_not_count():
    body = b'{"x": [1, {"k\\"ey": "]]]", "deep": ' + b"[" * 64 + b"]" * 64 + b"}]}"
    with pytest.raises(JsonLimitError) as refused:
        check_json_body(body)
    # three levels (object, array, object) above `deep`: its 62nd array is level 65
    assert refused.value.field == "body.x[1].deep" + "[0]" * 61


def test_the_check_is_linear_on_hostile_bodies():
    hostile = (
        b'"' + b'\\"' * 1_000_000,  # an unterminated string of escapes
        b"[" + b'"\\"' * 600_000,
        b"[" + b"{}," * 600_000 + b"{}]",
        b"[" * 1_000_000,
    )
    for body in hostile:
        started = time.perf_counter()
        with contextlib.suppress(JsonLimitError):
            check_json_body(body)
        assert time.perf_counter() - started < 2.0


# -- encodings: json.loads reads a BOM, UTF-16 and UTF-32, which a byte scan does not ---------
NOT_UTF8 = ("utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")


@pytest.mark.parametrize("service", SERVICES)
def test_a_body_in_another_encoding_than_utf8_is_a_400_saying_so(clients, service):
    client = clients[service]
    for method, path in body_routes(client):
        for encoding in NOT_UTF8:
            for text in ('{"prompt": "hi"}', '{"prompt": "\\ud800"}', "[" * 5000 + "]" * 5000):
                refused = send(client, method, path, text.encode(encoding))
                assert_refused(refused, "body", "JSON bodies must be UTF-8")
    assert client.get("/health").status_code == 200


def test_what_the_probe_measured_is_refused_naming_the_problem(clients):
    """A BOM before 5,000 nested arrays was a 500 RecursionError; a lone surrogate in UTF-16
    a 500 TypeError (UnicodeEncodeError on /v1/embeddings)."""
    client = clients["llm_gateway"]
    deep = b"\xef\xbb\xbf" + b"[" * 5000 + b"]" * 5000
    assert_refused(send(client, "PUT", "/v1/budgets/x", deep), "body", "must be UTF-8")
    routes = ("/v1/completions", "/v1/chat/completions", "/v1/score", "/v1/count_tokens",
              "/v1/embeddings")  # fmt: skip
    surrogate = '{"prompt":"\\ud800"}'
    for path in routes:
        for encoding in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-8-sig"):
            refused = send(client, "POST", path, surrogate.encode(encoding))
            assert_refused(refused, "body", "JSON bodies must be UTF-8")
        refused = send(client, "POST", path, surrogate.encode())
        assert_refused(refused, "body.prompt", "lone surrogate")
    assert client.get("/health").status_code == 200


def test_the_check_refuses_other_encodings_and_keeps_utf8():
    for encoding in NOT_UTF8:
        with pytest.raises(JsonLimitError, match="JSON bodies must be UTF-8") as refused:
            check_json_body(b"[1]".decode().encode(encoding))
        assert refused.value.field == "body"
    check_json_body(json.dumps({"text": "\u00e9\u4e2d\U0001f600"}, ensure_ascii=False).encode())
    check_json_body(b"")
