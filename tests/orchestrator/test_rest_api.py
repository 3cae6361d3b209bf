"""The orchestrator's REST API: bad input gets a 4xx naming the problem (never a 5xx), the
service keeps serving; bearer-token auth; recipes with their config schema."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from support.net import free_port
from support.processes import Stack, wait_until

from llmrl.common.queues import RedisBroker
from llmrl.common.store import RunStore
from llmrl.orchestrator.manager import RunManager
from llmrl.orchestrator.service import DEFAULT_MAX_BODY_BYTES, create_app


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url, timeout=10) as client:
        yield client


def post_run(http: httpx.Client, config: dict, recipe: str = "evaluate") -> httpx.Response:
    return http.post("/runs", json={"recipe": recipe, "config": config})


@pytest.mark.parametrize(
    ("body", "status", "named"),
    [
        ({"recipe": "nope"}, 422, "unknown recipe 'nope'"),
        ({"recipe": "evaluate", "config": {"episodes": "many"}}, 422, "config.episodes"),
        ({"recipe": "evaluate", "config": {"episodes": 0}}, 422, "greater than or equal to 1"),
        ({"recipe": "evaluate", "config": {"episodez": 3}}, 422, "config.episodez"),
        ({"recipe": "evaluate", "config": {"env": "Nope"}}, 422, "unknown env 'Nope'"),
        ({"recipe": "evaluate", "config": {"env_kwargs": {"colour": 1}}}, 422, "colour"),
        ({"recipe": "evaluate", "config": {"planner": 3}}, 422, "config.planner"),
        ({"recipe": "evaluate", "config": {"policy": {"kind": "magic"}}}, 422, "policy.kind"),
        ({"recipe": "evaluate", "config": [1, 2]}, 422, "config"),
        ({"recipe": "evaluate", "colour": "red"}, 422, "colour"),
        ({"config": {}}, 422, "recipe"),
        ([1, 2, 3], 422, "body"),
    ],
)
def test_bad_run_requests_get_422_naming_the_problem(http, body, status, named):
    response = http.post("/runs", json=body)
    assert response.status_code == status, response.text
    assert named in response.text


def test_unknown_run_ids_get_404_naming_the_id(http):
    for method, path in [
        ("GET", "/runs/no-such-run"),
        ("POST", "/runs/no-such-run/cancel"),
        ("GET", "/runs/no-such-run/episodes"),
        ("GET", "/runs/no-such-run/artifacts"),
        ("GET", "/runs/no-such-run/artifacts/results.json"),
    ]:
        response = http.request(method, path)
        assert response.status_code == 404, (path, response.text)
        assert "no-such-run" in response.json()["detail"]


def test_malformed_json_and_oversized_bodies_get_4xx(http):
    response = http.post(
        "/runs", content=b'{"recipe": "evaluate", ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert "JSON decode error" in response.text

    huge = b'{"recipe": "evaluate", "config": {"x": "' + b"a" * DEFAULT_MAX_BODY_BYTES + b'"}}'
    response = http.post("/runs", content=huge, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "too large" in response.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted as it streams
        yield b'{"recipe": "evaluate", "config": {"x": "'
        for _ in range(DEFAULT_MAX_BODY_BYTES // 65536 + 2):
            yield b"a" * 65536
        yield b'"}}'

    response = http.post("/runs", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413

    assert http.get("/runs", params={"status": "sleeping"}).status_code == 422
    assert http.get("/runs/x/episodes", params={"limit": 0}).status_code == 422
    assert http.get("/health").json()["status"] == "ok"  # still serving


def test_recipes_list_evaluate_with_its_config_schema(http):
    recipes = {recipe["name"]: recipe for recipe in http.get("/recipes").json()}
    schema = recipes["evaluate"]["config_schema"]
    assert schema["additionalProperties"] is False
    assert {"env", "planner", "episodes", "seed", "max_steps"} <= set(schema["properties"])
    assert schema["properties"]["episodes"]["description"]
    assert http.get("/openapi.json").json()["paths"]["/runs"]["post"]
    assert "llmrl_runs_active" in http.get("/metrics").text


@pytest.fixture
def guarded_server(stack: Stack, tmp_path: Path) -> Iterator[str]:
    """An orchestrator app with a token, served by uvicorn on a free port in this process."""
    store = RunStore(tmp_path / "orchestrator.sqlite")
    broker = RedisBroker(stack.redis.url)
    manager = RunManager(store, broker, tmp_path, simulator=None, llm_gateway=None)
    app = create_app(manager, token="s3cret-token-value", max_body_bytes=1024)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 20, "uvicorn")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    broker.close()
    store.close()


def test_bearer_token_is_required_when_configured(guarded_server):
    with httpx.Client(base_url=guarded_server, timeout=10) as anonymous:
        assert anonymous.get("/runs").status_code == 401
        assert anonymous.post("/runs", json={"recipe": "evaluate"}).status_code == 401
        wrong = anonymous.get("/runs", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert "s3cret" not in wrong.text
        # metrics, docs, a run that does not exist and a path that does not exist: the same 401
        for path in ("/metrics", "/docs", "/openapi.json", "/runs/no-such-run", "/no/such/path"):
            answer = anonymous.get(path)
            assert answer.status_code == 401 and answer.json() == wrong.json(), path
        assert anonymous.get("/health").status_code == 200
    headers = {"Authorization": "Bearer s3cret-token-value"}
    with httpx.Client(base_url=guarded_server, timeout=10, headers=headers) as client:
        assert client.get("/runs").json() == []
        assert client.get("/metrics").status_code == 200
        assert client.get("/runs/no-such-run").status_code == 404
        assert client.post("/runs", content=b"x" * 2048).status_code == 413
