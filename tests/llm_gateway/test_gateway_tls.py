"""With LLMRL_TLS_CERT/KEY the gateway's gRPC server and REST API (uvicorn) serve TLS only;
clients trusting LLMRL_TLS_CA (a self-signed certificate made in the test) work, with the
token on top."""

from __future__ import annotations

import grpc
import httpx
import openai
import pytest
from support.tls import use_tls

from llmrl.common.tls import http_verify
from llmrl.llm_gateway.client import connect
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.rest import create_app
from llmrl.llm_gateway.service import RestServer

TOKEN = "tls-t0ken"


def test_the_gateway_serves_grpc_and_rest_over_tls(gateway, monkeypatch, tmp_path):
    use_tls(monkeypatch, tmp_path)
    monkeypatch.setenv("LLMRL_TOKEN", TOKEN)
    server = start_grpc_server(gateway, "127.0.0.1", 0, token=TOKEN)
    rest = RestServer(create_app(gateway, token=TOKEN)).start()
    try:
        remote = connect(f"127.0.0.1:{server.port}")
        assert remote.count_tokens("hello world") == 2
        remote.close()
        plain = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        with pytest.raises(grpc.FutureTimeoutError):  # a plaintext client never connects
            grpc.channel_ready_future(plain).result(timeout=2)
        plain.close()

        assert rest.url.startswith("https://")
        client = openai.OpenAI(
            base_url=f"{rest.url}/v1", api_key=TOKEN, http_client=httpx.Client(verify=http_verify())
        )
        assert "tiny" in [m.id for m in client.models.list()]
        with pytest.raises(httpx.HTTPError):
            httpx.get(rest.url.replace("https://", "http://") + "/health", timeout=5)
    finally:
        rest.stop()
        server.stop(0)
