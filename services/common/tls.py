"""Optional TLS for every server and client, from files named by environment variables.

Servers: with LLMRL_TLS_CERT and LLMRL_TLS_KEY (PEM files: the certificate chain and its
private key) the gRPC servers (simulator, gateway) listen with TLS (`add_grpc_port`) and the
HTTP servers (uvicorn: `uvicorn_options`; the simulator's and workers' /health and /metrics:
`wrap_http_server`) answer HTTPS only. Without them everything stays plaintext (embedded mode,
tests, a private network).

Clients: with LLMRL_TLS_CA (a PEM bundle, e.g. a self-signed certificate) or LLMRL_TLS=1 (the
system's roots) gRPC channels are TLS (`client_channel`), and HTTPS URLs are verified against
that bundle (`http_verify`). TLS is what keeps the bearer token (`llmrl.common.auth`) from
travelling in the clear between hosts.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

CERT_VAR, KEY_VAR = "LLMRL_TLS_CERT", "LLMRL_TLS_KEY"  # what servers present
CA_VAR, CLIENT_VAR = "LLMRL_TLS_CA", "LLMRL_TLS"  # what clients trust; LLMRL_TLS=1: system roots


@dataclass(frozen=True)
class ServerTls:
    cert: Path
    key: Path


def _readable(var: str) -> Path:
    path = Path(os.environ[var]).expanduser()
    if not path.is_file() or not os.access(path, os.R_OK):
        raise ValueError(f"{var}: {str(path)!r} is not a readable file (a PEM file)")
    return path


def server_tls() -> ServerTls | None:
    """The certificate and key servers use, or None (plaintext). One without the other, or a
    file that cannot be read, is a ValueError naming the variable."""
    cert, key = os.environ.get(CERT_VAR), os.environ.get(KEY_VAR)
    if not cert and not key:
        return None
    if not cert or not key:
        missing = CERT_VAR if not cert else KEY_VAR
        raise ValueError(f"{missing}: TLS needs both {CERT_VAR} and {KEY_VAR}; {missing} is unset")
    return ServerTls(_readable(CERT_VAR), _readable(KEY_VAR))


def add_grpc_port(server: grpc.Server, address: str) -> int:
    """Bind `address` on a gRPC server, with TLS when it is configured; the bound port."""
    tls = server_tls()
    if tls is None:
        return server.add_insecure_port(address)
    credentials = grpc.ssl_server_credentials([(tls.key.read_bytes(), tls.cert.read_bytes())])
    return server.add_secure_port(address, credentials)


def uvicorn_options() -> dict[str, Any]:
    """Keyword arguments for uvicorn.Config/run: HTTPS when TLS is configured."""
    tls = server_tls()
    return {} if tls is None else {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}


HANDSHAKE_TIMEOUT_S = 10.0  # a client that opens a connection and says nothing is dropped


def wrap_http_server(server: Any) -> Any:
    """An `http.server` server whose socket speaks TLS when it is configured.

    The TLS handshake runs in the connection's own thread, under a timeout, not in `accept()`:
    there a client that connects and never speaks would stop the server accepting anyone."""
    tls = server_tls()
    if tls is None:
        return server
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.cert, tls.key)
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    finish_request = server.finish_request

    def finish_after_handshake(request: ssl.SSLSocket, client_address: Any) -> None:
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            request.do_handshake()
        except OSError:  # not TLS, or too slow: drop this connection, keep serving
            return
        request.settimeout(None)
        finish_request(request, client_address)

    server.finish_request = finish_after_handshake
    return server


def client_uses_tls() -> bool:
    return bool(os.environ.get(CA_VAR)) or os.environ.get(CLIENT_VAR, "") in ("1", "true")


def client_channel(address: str, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
    """A gRPC channel to `address`: TLS (verified against LLMRL_TLS_CA, else the system's
    roots) when the client is configured for it, else plaintext."""
    if not client_uses_tls():
        return grpc.insecure_channel(address, options=options)
    roots = _readable(CA_VAR).read_bytes() if os.environ.get(CA_VAR) else None
    credentials = grpc.ssl_channel_credentials(root_certificates=roots)
    return grpc.secure_channel(address, credentials, options=options)


def http_verify() -> ssl.SSLContext | bool:
    """httpx's `verify`: the CA bundle of LLMRL_TLS_CA when set, else the default roots."""
    if not os.environ.get(CA_VAR):
        return True
    return ssl.create_default_context(cafile=str(_readable(CA_VAR)))


def http_scheme() -> str:
    """The scheme of this deployment's own HTTP services: https when they serve TLS."""
    return "https" if server_tls() is not None or client_uses_tls() else "http"
