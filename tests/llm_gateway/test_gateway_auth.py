"""With a token, the gateway's REST API and gRPC server refuse a missing or wrong one (401 /
UNAUTHENTICATED, the same for every path) and serve clients that send it; /health stays open."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from llmrl.common.auth import UNAUTHORIZED_DETAIL
from llmrl.llm_gateway.client import connect
from llmrl.llm_gateway.errors import GatewayError
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.rest import create_app

TOKEN = "gateway-t0ken"


@pytest.fixture(autouse=True)
def no_token_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLMRL_TOKEN", "LLMRL_ORCHESTRATOR_TOKEN", "LLMRL_AUTH_OPEN"):
        monkeypatch.delenv(name, raising=False)


def test_rest_refuses_a_missing_or_wrong_token(gateway):
    client = TestClient(create_app(gateway, token=TOKEN))
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    before = gateway.usage("run-1")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        refused = [
            client.get("/v1/models", headers=headers),
            client.post("/v1/chat/completions", json=chat, headers=headers),
            client.put("/v1/budgets/run-1", json={"usd": 1000}, headers=headers),
            client.get("/v1/usage/no-such-run", headers=headers),
            client.get("/metrics", headers=headers),
            client.get("/openapi.json", headers=headers),
        ]
        for answer in refused:
            assert answer.status_code == 401
            assert answer.json() == {"detail": UNAUTHORIZED_DETAIL}
    assert gateway.usage("run-1") == before  # the refused budget change did not happen
    assert client.get("/health").status_code == 200
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert client.get("/v1/models", headers=good).status_code == 200
    assert client.post("/v1/chat/completions", json=chat, headers=good).status_code == 200


def test_grpc_refuses_a_missing_or_wrong_token_and_serves_the_right_one(gateway, monkeypatch):
    server = start_grpc_server(gateway, "127.0.0.1", 0, token=TOKEN)
    address = f"127.0.0.1:{server.port}"
    try:
        for token in (None, "wrong"):
            if token:
                monkeypatch.setenv("LLMRL_TOKEN", token)
            remote = connect(address)
            with pytest.raises(GatewayError, match="UNAUTHENTICATED") as refused:
                remote.models()
            assert TOKEN not in str(refused.value)
            remote.close()
        monkeypatch.setenv("LLMRL_TOKEN", TOKEN)
        remote = connect(address)
        assert [m["id"] for m in remote.models()] == [m["id"] for m in gateway.models()]
        assert remote.count_tokens("hello world") == 2
        remote.close()
    finally:
        server.stop(0)
