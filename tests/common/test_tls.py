"""Optional TLS from LLMRL_TLS_CERT/KEY (servers) and LLMRL_TLS_CA (clients): the simulator's
gRPC server and its /health and /metrics serve TLS only, and trusted clients work; a half or
unreadable configuration is refused naming the variable."""

from __future__ import annotations

import grpc
import httpx
import pytest
from support.net import free_port
from support.tls import use_tls

from llmrl.common.metrics import serve_health_and_metrics
from llmrl.common.tls import http_verify, server_tls
from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.server import SimulatorServicer, create_server


def test_the_simulator_serves_grpc_and_http_over_tls(monkeypatch, tmp_path):
    import support.sim_envs  # noqa: F401  registers SimTestCorridor

    use_tls(monkeypatch, tmp_path)
    servicer = SimulatorServicer()
    server, port = create_server("127.0.0.1", 0, servicer)
    http = serve_health_and_metrics(free_port(), "simulator")
    try:
        with RemoteWorld(f"127.0.0.1:{port}", "SimTestCorridor", num_envs=2, seed=1) as world:
            assert world.reset()["text"].shape == (2,)
        plain = grpc.insecure_channel(f"127.0.0.1:{port}")
        with pytest.raises(grpc.FutureTimeoutError):  # a plaintext client never connects
            grpc.channel_ready_future(plain).result(timeout=2)
        plain.close()
        base = f"127.0.0.1:{http.server_address[1]}"
        assert httpx.get(f"https://{base}/health", verify=http_verify()).status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://{base}/health", timeout=5)
        with pytest.raises(httpx.ConnectError):  # not trusted without the CA
            httpx.get(f"https://{base}/health", timeout=5)
    finally:
        http.shutdown()
        servicer.destroy_all()
        server.stop(None)


def test_a_half_or_unreadable_tls_configuration_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("LLMRL_TLS_KEY", raising=False)
    monkeypatch.delenv("LLMRL_TLS_CERT", raising=False)
    assert server_tls() is None
    monkeypatch.setenv("LLMRL_TLS_CERT", str(tmp_path / "cert.pem"))
    with pytest.raises(ValueError, match="LLMRL_TLS_KEY"):
        server_tls()
    monkeypatch.setenv("LLMRL_TLS_KEY", str(tmp_path / "key.pem"))
    with pytest.raises(ValueError, match=r"LLMRL_TLS_CERT: .* is not a readable file"):
        server_tls()


def test_a_client_that_never_speaks_tls_does_not_stop_the_health_server(monkeypatch, tmp_path):
    import socket

    use_tls(monkeypatch, tmp_path)
    http = serve_health_and_metrics(free_port(), "simulator")
    silent = socket.create_connection(("127.0.0.1", http.server_address[1]))
    try:
        base = f"https://127.0.0.1:{http.server_address[1]}"
        response = httpx.get(f"{base}/health", verify=http_verify(), timeout=5)
        assert response.status_code == 200
    finally:
        silent.close()
        http.shutdown()
