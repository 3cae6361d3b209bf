"""Shared Prometheus and health helpers for every service.

FastAPI services mount `add_health_and_metrics(app, service, check)`; processes without a
REST API (rollout workers) call `serve_health_and_metrics(port, service, check)`, a tiny
threaded HTTP server with the same two endpoints. `/health` answers 200 with
`{"status": "ok", "service": ...}` (plus what `check` returns) or 503 when `check` raises.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

HealthCheck = Callable[[], dict[str, Any]]


def health_payload(service: str, check: HealthCheck | None) -> tuple[int, dict[str, Any]]:
    try:
        extra = check() if check else {}
    except Exception as exc:  # a failing check is an unhealthy service, not a crash
        return 503, {"status": "unhealthy", "service": service, "error": str(exc)}
    return 200, {"status": "ok", "service": service, **extra}


def add_health_and_metrics(app: Any, service: str, check: HealthCheck | None = None) -> None:
    """GET /health and GET /metrics on a FastAPI app."""
    from fastapi import Response
    from fastapi.responses import JSONResponse

    # response_model=None: the return types are imported here, out of FastAPI's sight.
    @app.get("/health", tags=["service"], summary="Liveness and readiness", response_model=None)
    def health() -> JSONResponse:
        code, body = health_payload(service, check)
        return JSONResponse(body, status_code=code)

    @app.get(
        "/metrics",
        tags=["service"],
        summary="Prometheus metrics",
        response_model=None,
        responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}},
    )
    def prometheus_metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def serve_health_and_metrics(
    port: int,
    service: str,
    check: HealthCheck | None = None,
    host: str = "127.0.0.1",
    token: str | None = None,
) -> ThreadingHTTPServer:
    """Serve /health and /metrics on a daemon thread; returns the server (shutdown() stops it).
    With a `token`, /metrics needs it too, unless LLMRL_AUTH_OPEN opens it (common.auth)."""
    from llmrl.common.auth import UNAUTHORIZED_DETAIL, bearer_matches, open_paths

    public = open_paths()

    class Handler(BaseHTTPRequestHandler):
        timeout = 30  # seconds a connection may stay silent before it is closed

        def do_GET(self) -> None:
            if (
                token
                and self.path not in public
                and not bearer_matches(self.headers.get("Authorization"), token)
            ):
                body = json.dumps({"detail": UNAUTHORIZED_DETAIL}).encode()
                code, kind = 401, "application/json"
            elif self.path == "/metrics":
                body, code, kind = generate_latest(), 200, CONTENT_TYPE_LATEST
            elif self.path == "/health":
                code, payload = health_payload(service, check)
                body, kind = json.dumps(payload).encode(), "application/json"
            else:
                body, code, kind = b'{"detail": "not found"}', 404, "application/json"
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # keep stderr for structured logs
            pass

    from llmrl.common.tls import wrap_http_server

    server = wrap_http_server(ThreadingHTTPServer((host, port), Handler))  # HTTPS when set
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    return server


def basic_app(
    service: str, description: str, info: dict[str, Any], max_body_bytes: int | None = None
) -> Any:
    """A FastAPI app with /health, /metrics and GET /info (what the service offers so far),
    its request bodies bounded and bad input answered 4xx (`llmrl.common.http`)."""
    from fastapi import FastAPI

    from llmrl.common.http import ERROR_RESPONSES, configured_max_body_bytes, guard_app

    app = FastAPI(
        title=f"llmrl {service}", version="1", description=description, responses=ERROR_RESPONSES
    )
    guard_app(app, max_body_bytes or configured_max_body_bytes())
    add_health_and_metrics(app, service)

    @app.get("/info", tags=["service"], summary="What this service implements")
    def service_info() -> dict[str, Any]:
        return {"service": service, **info}

    return app


def serve_app(app: Any, service: str, host: str, port: int) -> None:
    """Run a FastAPI app with uvicorn until SIGTERM/SIGINT (uvicorn's own graceful shutdown)."""
    import uvicorn

    from llmrl.common.logs import configure_logging, log_event
    from llmrl.common.tls import uvicorn_options

    logger = configure_logging(service)
    log_event(logger, f"{service} listening", host=host, port=port)
    uvicorn.run(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5,
        **uvicorn_options(),  # HTTPS when LLMRL_TLS_CERT/KEY are set
    )  # fmt: skip
    log_event(logger, f"{service} stopped")
