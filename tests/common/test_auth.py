"""The shared token: which one is configured, how it is compared, and the learner's and the
annotator's REST APIs (and the plain /health + /metrics server) refusing a missing or wrong one
while /health stays open. The gateway, simulator and orchestrator have their own test files."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.net import free_port

from llmrl.annotator.service import create_app as annotator_app
from llmrl.common.auth import (
    UNAUTHORIZED_DETAIL,
    auth_headers,
    bearer_matches,
    configured_token,
    open_paths,
)
from llmrl.common.metrics import serve_health_and_metrics
from llmrl.learner.service import create_app as learner_app

TOKEN = "t0ken-for-tests"
GOOD = {"Authorization": f"Bearer {TOKEN}"}
BAD = {"Authorization": "Bearer not-the-token"}


@pytest.fixture(autouse=True)
def no_token_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLMRL_TOKEN", "LLMRL_ORCHESTRATOR_TOKEN", "LLMRL_AUTH_OPEN"):
        monkeypatch.delenv(name, raising=False)


def test_configured_token_prefers_explicit_then_llmrl_token_then_the_alias(monkeypatch):
    assert configured_token() is None and auth_headers() == {}
    monkeypatch.setenv("LLMRL_ORCHESTRATOR_TOKEN", "alias")
    assert configured_token() == "alias"
    monkeypatch.setenv("LLMRL_TOKEN", "shared")
    assert configured_token() == "shared"
    assert configured_token("explicit") == "explicit"
    assert auth_headers() == {"Authorization": "Bearer shared"}


def test_bearer_matches_only_the_exact_token():
    assert bearer_matches(f"Bearer {TOKEN}", TOKEN)
    assert bearer_matches(f"bearer {TOKEN}".encode(), TOKEN)
    for wrong in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"):
        assert not bearer_matches(wrong, TOKEN)


def test_open_paths_names_what_may_be_opened(monkeypatch):
    assert open_paths() == {"/health"}
    monkeypatch.setenv("LLMRL_AUTH_OPEN", "metrics, docs")
    assert {"/health", "/metrics", "/docs", "/openapi.json"} <= open_paths()
    with pytest.raises(ValueError, match=r"LLMRL_AUTH_OPEN: unknown entry 'runs' \(allowed: docs"):
        open_paths("metrics,runs")


@pytest.fixture(params=["learner", "annotator"])
def guarded(request, tmp_path: Path) -> TestClient:
    if request.param == "learner":
        return TestClient(learner_app(tmp_path / "jobs", token=TOKEN))
    return TestClient(annotator_app(tmp_path / "jobs", "http://127.0.0.1:1", token=TOKEN))


def test_rest_services_refuse_a_missing_or_wrong_token(guarded):
    paths = ["/info", "/metrics", "/docs", "/openapi.json", "/jobs", "/no/such/path"]
    for path in paths:
        for headers in ({}, BAD):
            answer = guarded.get(path, headers=headers)
            assert answer.status_code == 401, (path, headers)
            # the same answer whether the path exists or not, and nothing of the token
            assert answer.json() == {"detail": UNAUTHORIZED_DETAIL}
            assert answer.headers["www-authenticate"] == "Bearer"
    assert guarded.post("/jobs", json={}).status_code == 401
    assert guarded.get("/health").status_code == 200
    assert guarded.get("/info", headers=GOOD).status_code == 200
    assert guarded.get("/metrics", headers=GOOD).status_code == 200
    assert guarded.get("/openapi.json", headers=GOOD).status_code == 200
    assert guarded.get("/no/such/path", headers=GOOD).status_code == 404


def test_metrics_and_docs_can_be_configured_open(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMRL_AUTH_OPEN", "metrics,docs")
    client = TestClient(learner_app(tmp_path / "jobs", token=TOKEN))
    assert client.get("/metrics").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/info").status_code == 401


def test_without_a_token_the_rest_services_stay_open(tmp_path):
    assert TestClient(learner_app(tmp_path / "jobs")).get("/info").status_code == 200


def _get(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            assert json.loads(exc.read()) == {"detail": UNAUTHORIZED_DETAIL}
        return exc.code


def test_health_and_metrics_server_guards_metrics():
    """The plain server of the simulator and the workers: /metrics needs the token."""
    port = free_port()
    server = serve_health_and_metrics(port, "worker", token=TOKEN)
    try:
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/health", {}) == 200
        assert _get(f"{base}/metrics", {}) == 401
        assert _get(f"{base}/metrics", BAD) == 401
        assert _get(f"{base}/metrics", GOOD) == 200
    finally:
        server.shutdown()
