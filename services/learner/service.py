"""The learner service, as far as it goes today: /health, /metrics and GET /info.

PLACEHOLDER. Training runs inside recipes (embedded mode and orchestrator phases) through the
learner's Python modules; this service has no training or checkpoint REST API yet. GET /info
says exactly what it offers, so that callers (and `llmrl up`) can tell. Later issues add the
job endpoints (start/watch training jobs, list checkpoint versions) here.
"""

from __future__ import annotations

from typing import Any

from llmrl.common.metrics import basic_app, serve_app

DESCRIPTION = "Trains and versions policies. REST API: placeholder (health and metrics only)."
INFO = {
    "api": "placeholder",
    "endpoints": ["/health", "/metrics", "/info"],
    "training_api": "not implemented yet: training runs inside recipes via llmrl.learner modules",
}


def create_app() -> Any:
    return basic_app("learner", DESCRIPTION, INFO)


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    if settings:
        raise ValueError(f"the learner service takes no settings yet, got {sorted(settings)}")
    serve_app(create_app(), "learner", host, port)
